"""The default throttle controller: find the slack in seconds, then hold near the knee without swinging.

The velocity PID (`--controller pid`) adds a fixed share of the max rate per
step, so from 10 % it needs tens of seconds to reach the slack, and near the
knee of a queueing server, where latency grows steeply with the rate, the same
gain overshoots and the loop settles into a limit cycle (docs/results.md).
This controller works on ratios instead of differences:

    r = latency / setpoint
    r < 1: u ← u · min(growth_max, r^−alpha)      multiplicative: fast when far below, slow near 1
    r > 1: u ← min(u · r^−beta, 0.98 · knee)      cut in proportion to the overshoot, under the knee

with three rules that keep it off the knee's steep side:
- a brake: latency rising fast enough to cross the setpoint within the loop's
  lag (window + actuation) holds the rate instead of raising it;
- knee memory: the rate that last drove latency over the setpoint (the one
  applied `lag` steps earlier) is remembered; below 90 % of it the ramp is
  fast, above it the rate only creeps (probe_per_step). The memory loosens a
  little every step without an overshoot, so a load that falls frees the slack
  again;
- one cut per overshoot: while the window still shows the queue an earlier cut
  is draining (latency falling), no further cut.
"""

from __future__ import annotations

import math
from collections import deque

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S
from .pid import DEFAULT_GAINS, Gains, ThrottleController


class SlackController(ThrottleController):
    """Ratio control with a brake and knee memory; the safety rules are the PID's (see ThrottleController)."""

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        gains: Gains = DEFAULT_GAINS,  # unused; accepted so configs can pass them
        *,
        step_s: float = DEFAULT_STEP_S,
        initial_fraction: float = 0.1,
        growth_max: float = 1.5,
        alpha: float = 0.5,
        beta: float = 1.0,
        probe_per_step: float = 0.01,
        lag_steps: int = 3,
        knee_loosen_per_step: float = 0.003,
        min_step: float = 0.01,
        backoff: float = 0.98,
        second_cut: float = 0.85,
        **safety: float,
    ) -> None:
        super().__init__(setpoint_s, max_rate_bytes_per_s, gains, step_s=step_s,
                         initial_fraction=initial_fraction, **safety)
        for label, value, lo, hi in (("growth", growth_max, 1.0, 10.0), ("alpha", alpha, 0.0, 5.0),
                                     ("beta", beta, 0.0, 5.0), ("probe", probe_per_step, 0.0, 1.0),
                                     ("knee loosening", knee_loosen_per_step, 0.0, 1.0),
                                     ("minimum step", min_step, 0.0, 1.0)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not lo <= value <= hi:
                raise InvalidInput(f"invalid {label} {value!r}", f"it must be between {lo:g} and {hi:g}")
        if not isinstance(lag_steps, int) or lag_steps < 1:
            raise InvalidInput(f"invalid lag {lag_steps!r}", "expected a whole number of steps >= 1")
        self.growth_max, self.alpha, self.beta = float(growth_max), float(alpha), float(beta)
        self.probe_per_step, self.lag_steps = float(probe_per_step), lag_steps
        self.knee_loosen_per_step, self.min_step = float(knee_loosen_per_step), float(min_step)
        self.backoff, self.second_cut = float(backoff), float(second_cut)
        self.knee: float | None = None  # fraction that last pushed latency over the setpoint
        self._applied: deque[float] = deque(maxlen=lag_steps + 1)
        self._hold_until: int | None = None
        self._over = False
        self._k = 0

    def set_setpoint(self, setpoint_s: float) -> None:
        # The knee was where latency crossed the old setpoint: meaningless for a new one.
        super().set_setpoint(setpoint_s)
        with self._lock:
            self.knee, self._over, self._hold_until = None, False, None

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        old = self.max_rate_bytes_per_s
        super().set_max_rate(max_rate_bytes_per_s)
        with self._lock:
            scale = old / self.max_rate_bytes_per_s
            if self.knee is not None:
                self.knee = min(1.0, self.knee * scale)
            self._applied = deque((min(1.0, f * scale) for f in self._applied), maxlen=self.lag_steps + 1)

    def _forget(self) -> None:
        super()._forget()
        self._y_prev: float | None = None

    def _law(self, latency_s: float, dt: float) -> tuple[float, str, float, float, float]:
        self._k += 1
        u = self._fraction
        self._applied.append(u)
        r = latency_s / self.setpoint_s
        y_prev, self._y_prev = self._y_prev, latency_s
        rising = 0.0 if y_prev is None else (latency_s - y_prev) / self.setpoint_s
        waiting = self._hold_until is not None and self._k < self._hold_until
        if r > 1.0:
            if not self._over:
                # First window over the setpoint: the rate applied about `lag` steps
                # ago is where the knee is (or below it). Land under it at once.
                self._over = True
                culprit = self._applied[0]
                if culprit > 0:
                    self.knee = culprit if self.knee is None else min(self.knee, culprit)
                new = min(u * r ** -self.beta, self.backoff * (self.knee or u))
            elif waiting or rising < 0:
                # The last cut cannot show yet, or the queue is already draining.
                return u, "over setpoint; waiting for the last cut to show", 0.0, 0.0, 0.0
            else:
                # Still rising a full lag after the last cut: this rate is above the knee too.
                if u > 0:
                    self.knee = u if self.knee is None else min(self.knee, u)
                new = u * max(self.second_cut, r ** -self.beta)
            if new < 0.01:
                new = 0.0
            self._hold_until = self._k + self.lag_steps
            note = "stopped: latency above setpoint" if new == 0.0 else f"over setpoint: cut to {new:.2f} of max"
            return new, note, new - u, 0.0, 0.0
        self._over = False
        if waiting:
            return u, "waiting for the last cut to show", 0.0, 0.0, 0.0
        if self.knee is not None:
            self.knee = min(1.0, self.knee * (1.0 + self.knee_loosen_per_step))
        if r + self.lag_steps * max(0.0, rising) >= 1.0:
            return u, "latency rising towards the setpoint: holding", 0.0, 0.0, 0.0
        factor = min(self.growth_max, r ** -self.alpha) if r > 0 else self.growth_max
        new = max(u * factor, u + self.min_step * (factor - 1.0) / (self.growth_max - 1.0 or 1.0))
        note = f"ramping x{factor:.2f}"
        if self.knee is not None and new > self.backoff * self.knee:
            # Near the rate that overshot before: creep, do not leap.
            creep = u * (1.0 + self.probe_per_step)
            new = max(min(new, self.backoff * self.knee), min(new, creep), u)
            note = "near the last knee: probing"
        if new >= 1.0:
            new, note = 1.0, "at max rate"
        return new, note, new - u, 0.0, 0.0
