"""The PID throttle controller: copy rate from windowed transaction latency.

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
import threading
from dataclasses import dataclass

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, DEFAULT_WINDOW_S, LatencySample, validate_window
from ..units import parse_duration, parse_rate
from .base import ControllerStep, RateController, check_max_rate, check_positive, check_setpoint, is_stale


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


class ThrottleController(RateController):
    """Sets the copy rate each step so windowed latency settles at the setpoint.

    Safety rules, in order:
    - paused: rate 0, state frozen (no error is integrated while the copy is stopped);
    - failed or stale sample: hold the rate for `grace_steps`, then multiply it by
      `cut_factor` each step (to 0 once below 1% of max). Never an increase;
    - empty window (no transaction completed): hold the rate; after IDLE_LIFT_STEPS more such steps
      (an idle server, not one too slow for anything to end), a rate under the start rate goes back to it;
    - otherwise the PID step, with increases limited to `max_increase_per_step`
      (decreases are not limited: slowing down is always safe).
    """

    IDLE_LIFT_STEPS = 3

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
        super().__init__()
        self.setpoint_s = check_setpoint(setpoint_s)
        self.max_rate_bytes_per_s = check_max_rate(max_rate_bytes_per_s)
        if not isinstance(gains, Gains):
            raise InvalidInput(f"invalid gains {gains!r}", "expected Gains(kp, ki, kd)", _GAINS_HINT)
        self.gains = gains
        self.step_s = check_positive("step", step_s, "for example --step 1s")
        for label, value, lo, hi in (
            ("initial fraction", initial_fraction, 0.0, 1.0),
            ("max increase per step", max_increase_per_step, 0.0, 1.0),
            ("cut factor", cut_factor, 0.0, 1.0),
        ):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not lo <= value <= hi:
                raise InvalidInput(f"invalid {label} {value!r}", f"it must be between {lo:g} and {hi:g}")
        if max_increase_per_step <= 0:
            raise InvalidInput("invalid max increase per step 0", "the rate could never rise")
        if not isinstance(grace_steps, int) or grace_steps < 0:
            raise InvalidInput(f"invalid grace steps {grace_steps!r}", "expected a whole number >= 0")
        self.max_increase_per_step = float(max_increase_per_step)
        self.grace_steps = grace_steps
        self.cut_factor = float(cut_factor)
        self.stale_after_s = (
            check_positive("staleness limit", stale_after_s) if stale_after_s is not None else 2.0 * self.step_s
        )
        self._fraction = float(initial_fraction)
        self.initial_fraction = float(initial_fraction)
        self._idle_steps = 0
        # Setters may come from the agent's API thread while the tick thread steps.
        self._lock = threading.RLock()
        self._last_now: float | None = None
        self._bad_steps = 0
        self._forget()

    # --- live changes -----------------------------------------------------------

    def set_setpoint(self, setpoint_s: float) -> None:
        # Past latencies are kept in seconds and normalised at use, so a new
        # setpoint changes the integral drive without a proportional kick.
        value = check_setpoint(setpoint_s)
        with self._lock:
            self.setpoint_s = value

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        """Keep the current absolute rate (capped by the new max) so a change never jumps the load up."""
        new = check_max_rate(max_rate_bytes_per_s)
        with self._lock:
            self._fraction = min(1.0, self._fraction * self.max_rate_bytes_per_s / new)
            self.initial_fraction = min(1.0, self.initial_fraction * self.max_rate_bytes_per_s / new)
            self.max_rate_bytes_per_s = new

    def pause(self) -> None:
        with self._lock:
            super().pause()
            self._forget()

    def resume(self) -> None:
        with self._lock:
            super().resume()
            self._forget()

    @property
    def fraction(self) -> float:
        return 0.0 if self._paused else self._fraction

    @property
    def rate_bytes_per_s(self) -> int:
        # Rounded, but never above a max that is not a whole number of bytes.
        return min(int(round(self.fraction * self.max_rate_bytes_per_s)), int(self.max_rate_bytes_per_s))

    # --- the step ------------------------------------------------------------------

    def _forget(self) -> None:
        # Drop the measurement history so the first step after a gap has no P or D kick.
        self._y1: float | None = None  # y_{k-1}, seconds
        self._slope1: float | None = None  # normalised dy/dt at k-1
        self._pd_debt = 0.0  # P+D drop clipped at 0, owed against the next rises

    def _dt(self, now: float) -> float:
        # A late or doubled call must not scale the integral or derivative wildly.
        if self._last_now is None:
            return self.step_s
        return min(2.0 * self.step_s, max(0.5 * self.step_s, now - self._last_now))

    def step(self, sample: LatencySample, now: float, bytes_done: int = 0) -> ControllerStep:
        with self._lock:
            return self._step(sample, now, bytes_done)

    def _step(self, sample: LatencySample, now: float, bytes_done: int) -> ControllerStep:
        dt = self._dt(now)
        self._last_now = now
        latency_s = sample.latency_s
        if self._paused:
            return self._record(now, latency_s, sample.ok, bytes_done, "paused")

        stale = sample.ok and is_stale(sample, now, self.stale_after_s)
        if not sample.ok or stale:
            self._forget()
            self._bad_steps += 1
            if sample.ok:
                what, reason = "latency sample stale", f"read {now - sample.t:.1f}s ago"
            else:
                what, reason = "latency source failed", sample.error or "no reason given"
            if self._bad_steps <= self.grace_steps:
                note = f"{what} ({reason}); holding rate ({self._bad_steps}/{self.grace_steps})"
            else:
                self._fraction *= self.cut_factor
                if self._fraction < 0.01:
                    self._fraction = 0.0
                note = f"{what} ({reason}) for {self._bad_steps} steps; cutting rate"
            return self._record(now, None, False, bytes_done, note)
        self._bad_steps = 0

        if latency_s is None:
            # No transaction in the window and the source healthy (a server that commits unseen is a
            # failed source, above). Held, as long as it could be a server too slow for anything to end in
            # a window. Once it has been so for IDLE_LIFT_STEPS more, nobody's latency is there to protect:
            # a rate cut below the start rate by a load that has since gone is lifted back to it, as the
            # copy would have started on this idle server -- else a copy stopped by a burst waits for the
            # next transaction, for ever on a server that has none (a drained node's last tenants).
            self._forget()
            self._idle_steps += 1
            if self._idle_steps > self.IDLE_LIFT_STEPS and self._fraction < self.initial_fraction:
                self._fraction = self.initial_fraction
                return self._record(now, None, True, bytes_done, "no transactions in window: back to the start rate")
            return self._record(now, None, True, bytes_done, "no transactions in window; holding rate")
        self._idle_steps = 0

        new, note, p, i, d = self._law(latency_s, dt)
        self._fraction = new
        return self._record(now, latency_s, True, bytes_done, note, p, i, d)

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

    def _record(
        self,
        now: float,
        latency_s: float | None,
        ok: bool,
        bytes_done: int,
        note: str,
        p: float = 0.0,
        i: float = 0.0,
        d: float = 0.0,
    ) -> ControllerStep:
        return ControllerStep(
            t=now,
            latency_s=latency_s,
            setpoint_s=self.setpoint_s,
            p=p,
            i=i,
            d=d,
            fraction=self.fraction,
            rate_bytes_per_s=self.rate_bytes_per_s,
            bytes_done=int(bytes_done),
            note=note,
            source_ok=ok,
        )
