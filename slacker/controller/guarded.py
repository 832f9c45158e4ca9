"""What the latency laws (the model controller and the PID) share: the guards a law runs inside -- a pause,
a failed or stale sample, an empty window -- and the rate kept as a fraction of the max.

A subclass gives `_law`, one step on a good window, and `_forget`, what a gap in the samples resets.
"""

from __future__ import annotations

import math
import threading
from abc import abstractmethod

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, LatencySample
from .base import ControllerStep, RateController, check_max_rate, check_positive, check_setpoint, is_stale


class GuardedController(RateController):
    """Sets the copy rate each step so windowed latency settles at the setpoint.

    Safety rules, in order:
    - paused: rate 0, state frozen (no error is integrated while the copy is stopped);
    - failed or stale sample: hold the rate for `grace_steps`, then multiply it by
      `cut_factor` each step (to 0 once below 1% of max). Never an increase;
    - empty window (no transaction completed): hold the rate; after IDLE_LIFT_STEPS more such steps
      (an idle server, not one too slow for anything to end), a rate under the start rate goes back to it;
    - otherwise the law's step (`_law`).
    """

    IDLE_LIFT_STEPS = 3

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        *,
        step_s: float = DEFAULT_STEP_S,
        initial_fraction: float = 0.1,
        grace_steps: int = 2,
        cut_factor: float = 0.5,
        stale_after_s: float | None = None,
    ) -> None:
        super().__init__()
        self.setpoint_s = check_setpoint(setpoint_s)
        self.max_rate_bytes_per_s = check_max_rate(max_rate_bytes_per_s)
        self.step_s = check_positive("step", step_s, "for example --step 1s")
        for label, value, lo, hi in (
            ("initial fraction", initial_fraction, 0.0, 1.0),
            ("cut factor", cut_factor, 0.0, 1.0),
        ):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not lo <= value <= hi:
                raise InvalidInput(f"invalid {label} {value!r}", f"it must be between {lo:g} and {hi:g}")
        if not isinstance(grace_steps, int) or grace_steps < 0:
            raise InvalidInput(f"invalid grace steps {grace_steps!r}", "expected a whole number >= 0")
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
        # setpoint changes the law's drive without a proportional kick.
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
        """Drop what the law keeps of the last samples, so the first step after a gap has no kick."""

    @abstractmethod
    def _law(self, latency_s: float, dt: float) -> tuple[float, str, float, float, float]:
        """One step on a good window: (new fraction, note, p, i, d); p, i, d are 0 for a law without them."""

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
