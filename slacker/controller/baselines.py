"""Baseline throttles with the same step() interface as the PID controller.

`ThresholdThrottle` is the on/off throttle of gh-ost and freno: stop the copy while
latency is above the threshold, run at full speed below it. `FixedRate` ignores
latency altogether (`--rate 20MB/s`). Benchmarks swap them for the PID controller.
"""

from __future__ import annotations

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, LatencySample
from .base import ControllerStep, RateController, check_max_rate, check_positive, check_setpoint, is_stale


class ThresholdThrottle(RateController):
    """Full speed while latency <= `resume_below_s`, stopped while it is > setpoint.

    Between the two (when resume_below_s < setpoint) the last state holds, which
    gives hysteresis. A failed or stale sample holds for `grace_steps`, then stops
    the copy; an empty window holds.
    """

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        *,
        resume_below_s: float | None = None,
        step_s: float = DEFAULT_STEP_S,
        grace_steps: int = 2,
        stale_after_s: float | None = None,
        start_on: bool = True,
    ) -> None:
        super().__init__()
        self.setpoint_s = check_setpoint(setpoint_s)
        self.max_rate_bytes_per_s = check_max_rate(max_rate_bytes_per_s)
        self.resume_below_s = self._check_resume(resume_below_s)
        self.step_s = check_positive("step", step_s, "for example --step 1s")
        if not isinstance(grace_steps, int) or grace_steps < 0:
            raise InvalidInput(f"invalid grace steps {grace_steps!r}", "expected a whole number >= 0")
        self.grace_steps = grace_steps
        self.stale_after_s = (
            check_positive("staleness limit", stale_after_s) if stale_after_s is not None else 2.0 * self.step_s
        )
        self._on = bool(start_on)
        self._bad_steps = 0

    def _check_resume(self, resume_below_s: float | None) -> float:
        if resume_below_s is None:
            return self.setpoint_s
        value = check_positive("resume threshold", resume_below_s)
        if value > self.setpoint_s:
            raise InvalidInput(
                f"invalid resume threshold {value:g}s", f"it must not be above the setpoint ({self.setpoint_s:g}s)"
            )
        return value

    def set_setpoint(self, setpoint_s: float) -> None:
        # Keep the hysteresis band proportional to the setpoint.
        ratio = self.resume_below_s / self.setpoint_s
        self.setpoint_s = check_setpoint(setpoint_s)
        self.resume_below_s = self.setpoint_s * ratio

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        self.max_rate_bytes_per_s = check_max_rate(max_rate_bytes_per_s)

    @property
    def fraction(self) -> float:
        return 1.0 if self._on and not self._paused else 0.0

    @property
    def rate_bytes_per_s(self) -> int:
        return int(self.fraction * self.max_rate_bytes_per_s)

    def step(self, sample: LatencySample, now: float, bytes_done: int = 0) -> ControllerStep:
        latency_s = sample.latency_s
        note = ""
        ok = sample.ok and not is_stale(sample, now, self.stale_after_s)
        if self._paused:
            note = "paused"
        elif not ok:
            self._bad_steps += 1
            reason = f"read {now - sample.t:.1f}s ago" if sample.ok else (sample.error or "no reason given")
            if self._bad_steps <= self.grace_steps:
                note = f"latency source unusable ({reason}); holding ({self._bad_steps}/{self.grace_steps})"
            else:
                self._on = False
                note = f"latency source unusable ({reason}) for {self._bad_steps} steps; stopped"
            latency_s = None
        else:
            self._bad_steps = 0
            if latency_s is None:
                note = "no transactions in window; holding"
            elif latency_s > self.setpoint_s:
                if self._on:
                    note = "latency above threshold; stopped"
                self._on = False
            elif latency_s <= self.resume_below_s:
                if not self._on:
                    note = "latency below threshold; full speed"
                self._on = True
        return ControllerStep(
            t=now,
            latency_s=latency_s,
            setpoint_s=self.setpoint_s,
            p=0.0,
            i=0.0,
            d=0.0,
            fraction=self.fraction,
            rate_bytes_per_s=self.rate_bytes_per_s,
            bytes_done=int(bytes_done),
            note=note,
            source_ok=ok,
        )


class FixedRate(RateController):
    """A constant rate, whatever the latency. 0 means paused, never unlimited.

    The setpoint, when given, is only recorded so plots can compare against it.
    """

    def __init__(self, rate_bytes_per_s: float, setpoint_s: float | None = None) -> None:
        super().__init__()
        self._rate = self._check_rate(rate_bytes_per_s)
        self.setpoint_s = check_setpoint(setpoint_s) if setpoint_s is not None else None

    @staticmethod
    def _check_rate(rate_bytes_per_s: float) -> float:
        if rate_bytes_per_s == 0:
            return 0.0
        return check_positive("rate", rate_bytes_per_s, "for example --rate 20MB/s; 0 pauses the copy")

    def set_setpoint(self, setpoint_s: float) -> None:
        self.setpoint_s = check_setpoint(setpoint_s)

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        """For a fixed throttle the max rate is the rate."""
        self._rate = self._check_rate(max_rate_bytes_per_s)

    @property
    def rate_bytes_per_s(self) -> int:
        return 0 if self._paused else int(round(self._rate))

    def step(self, sample: LatencySample, now: float, bytes_done: int = 0) -> ControllerStep:
        if self._paused:
            note = "paused"
        elif self._rate == 0:
            note = "rate 0: paused"
        else:
            note = "" if sample.ok else f"latency source failed ({sample.error}); fixed rate ignores it"
        return ControllerStep(
            t=now,
            latency_s=sample.latency_s,
            setpoint_s=self.setpoint_s,
            p=0.0,
            i=0.0,
            d=0.0,
            fraction=1.0 if self.rate_bytes_per_s > 0 else 0.0,
            rate_bytes_per_s=self.rate_bytes_per_s,
            bytes_done=int(bytes_done),
            note=note,
            source_ok=sample.ok,
        )
