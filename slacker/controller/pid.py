"""The PID controller (`--controller pid`, the baseline): copy rate from windowed transaction latency.

Velocity (incremental) form, as in the Slacker paper: each step computes a change
of the output, not the output, so there is no error sum to wind up while latency
sits far below the setpoint with the copy already at full speed.

    e_k  = (setpoint - y_k) / setpoint                      (normalised error)
    Δu_k = Kp·(e_k − e_{k−1}) + Ki·e_k·dt − Kd·(y_k − 2y_{k−1} + y_{k−2}) / (setpoint·dt)
    u_k  = clamp(u_{k−1} + Δu_k, 0, 1)                      (fraction of max rate)

Not built on simple-pid: it computes the positional form
(it clamps its integral to avoid windup, but its output is an absolute value), and
we need the increment itself, derivative on measurement with a second difference,
and safety rules for failed or empty latency windows that it has no notion of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S
from .guarded import GuardedController


@dataclass(frozen=True)
class Gains:
    """PID gains on the normalised error; output is a fraction of the max rate per step."""

    kp: float
    ki: float
    kd: float

    def __post_init__(self) -> None:
        for name, value in (("kp", self.kp), ("ki", self.ki), ("kd", self.kd)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidInput(f"invalid gain {name}={value!r}", "gains must be finite numbers", _GAINS_HINT)
            if value < 0:
                raise InvalidInput(
                    f"invalid gain {name}={value!r}",
                    "gains must not be negative (the error's sign already slows the copy when latency is high)",
                    _GAINS_HINT,
                )
        if self.kp == 0 and self.ki == 0 and self.kd == 0:
            raise InvalidInput("invalid gains 0,0,0", "at least one gain must be positive", _GAINS_HINT)

    def __str__(self) -> str:
        return f"{self.kp:g},{self.ki:g},{self.kd:g}"


_GAINS_HINT = "give Kp,Ki,Kd, for example --gains 0.2,0.05,0.1"

# Tuned on the simulated plant (bench/benchkit/plant.py) and checked on real
# migrations side by side (bench/run setpoint --only gains): Ki 0.05, because at a
# 100 ms setpoint Ki 0.1 overshot into the server's runaway region (1.9-2.4x the
# setpoint in 3 of 4 runs) and then had to stop the copy, while 0.05 stayed below
# the setpoint and copied 2-3x faster. See docs/controller.md.
DEFAULT_GAINS = Gains(kp=0.2, ki=0.05, kd=0.1)


def parse_gains(text: str) -> Gains:
    """Parse `Kp,Ki,Kd`, for example `0.2,0.05,0.1`."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 3 or not all(parts):
        raise InvalidInput(f"invalid gains {text!r}", "expected three numbers Kp,Ki,Kd", _GAINS_HINT)
    try:
        kp, ki, kd = (float(p) for p in parts)
    except ValueError:
        raise InvalidInput(f"invalid gains {text!r}", "expected three numbers Kp,Ki,Kd", _GAINS_HINT) from None
    return Gains(kp, ki, kd)


class PidController(GuardedController):
    """The paper's velocity-form PID (the baseline): the guards of GuardedController, and on a good window
    the PID step, with increases limited to `max_increase_per_step` (decreases are not limited: slowing down
    is always safe)."""

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        gains: Gains = DEFAULT_GAINS,
        *,
        step_s: float = DEFAULT_STEP_S,
        initial_fraction: float = 0.1,
        max_increase_per_step: float = 0.2,
        grace_steps: int = 2,
        cut_factor: float = 0.5,
        stale_after_s: float | None = None,
    ) -> None:
        if not isinstance(gains, Gains):
            raise InvalidInput(f"invalid gains {gains!r}", "expected Gains(kp, ki, kd)", _GAINS_HINT)
        value = max_increase_per_step
        if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise InvalidInput(f"invalid max increase per step {value!r}", "it must be between 0 and 1")
        if max_increase_per_step <= 0:
            raise InvalidInput("invalid max increase per step 0", "the rate could never rise")
        super().__init__(setpoint_s, max_rate_bytes_per_s, step_s=step_s, initial_fraction=initial_fraction,
                         grace_steps=grace_steps, cut_factor=cut_factor, stale_after_s=stale_after_s)
        self.gains = gains
        self.max_increase_per_step = float(max_increase_per_step)

    def _forget(self) -> None:
        # Drop the measurement history so the first step after a gap has no P or D kick.
        self._y1: float | None = None  # y_{k-1}, seconds
        self._slope1: float | None = None  # normalised dy/dt at k-1
        self._pd_debt = 0.0  # P+D drop clipped at 0, owed against the next rises

    def _law(self, latency_s: float, dt: float) -> tuple[float, str, float, float, float]:
        """The velocity-form PID step: (new fraction, note, p, i, d)."""
        sp = self.setpoint_s
        g = self.gains
        e = (sp - latency_s) / sp
        p = i = d = 0.0
        if self._y1 is not None:
            p = g.kp * (e - (sp - self._y1) / sp)
        i = g.ki * e * dt
        slope = None if self._y1 is None else (latency_s - self._y1) / sp / dt
        if slope is not None and self._slope1 is not None:
            d = -g.kd * (slope - self._slope1)
        self._y1, self._slope1 = latency_s, slope

        # P and D act on changes of the measurement: a spike's drop and its recovery
        # cancel. When the drop was clipped at 0 the recovery must be clipped too, or
        # the rate ends above where it was before the spike (the kick noted in
        # docs/results.md). So the part of a P+D drop lost at the bottom is a debt,
        # paid from later positive P+D before they raise the rate. Only the bottom:
        # bookkeeping must never delay a slowdown.
        pd = p + d
        if pd > 0 and self._pd_debt > 0:
            paid = min(pd, self._pd_debt)
            self._pd_debt -= paid
            pd -= paid
        delta = pd + i
        note = ""
        if delta > self.max_increase_per_step:
            delta = self.max_increase_per_step
            note = "increase limited"
        new = self._fraction + delta
        if new >= 1.0:
            new, note = 1.0, "at max rate"
        elif new <= 0.0:
            lost = -new  # what the clamp cut off this step's drop
            self._pd_debt += min(lost, max(0.0, -(p + d)))
            new, note = 0.0, "stopped: latency above setpoint"
        return new, note, p, i, d
