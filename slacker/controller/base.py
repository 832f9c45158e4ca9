"""What every throttle controller shares: the per-step record and the step() interface.

The migration loop calls step() once per timestep with the latest latency sample
and applies `rate_bytes_per_s` to the copy; benchmarks swap PID, on/off and fixed
controllers behind this one interface.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidInput
from ..latency import LatencySample


@dataclass(frozen=True)
class ControllerStep:
    """One controller decision. p, i, d are this step's contributions to the change
    of `fraction` (velocity form), in fractions of the max rate; 0 when not used."""

    t: float
    latency_s: float | None
    setpoint_s: float | None
    p: float
    i: float
    d: float
    fraction: float
    rate_bytes_per_s: int
    bytes_done: int
    note: str = ""
    source_ok: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_positive(label: str, value: float, hint: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"invalid {label} {value!r}", f"the {label} must be a positive number", hint)
    return float(value)


def check_setpoint(setpoint_s: float) -> float:
    return check_positive("setpoint", setpoint_s, "for example --setpoint 1500ms")


def check_max_rate(rate_bytes_per_s: float) -> float:
    return check_positive(
        "max rate", rate_bytes_per_s, "for example --max-rate 50MB/s; to stop the copy, pause it instead"
    )


class RateController(ABC):
    """Turns latency samples into a copy rate, one step at a time.

    A rate of 0 means paused, never unlimited. `rate_bytes_per_s` is valid before
    the first step so the copy can start at it.
    """

    step_s: float = 1.0  # the step it expects to be called at

    def __init__(self) -> None:
        self._paused = False

    @abstractmethod
    def step(self, sample: LatencySample, now: float, bytes_done: int = 0) -> ControllerStep: ...

    @property
    @abstractmethod
    def rate_bytes_per_s(self) -> int: ...

    @abstractmethod
    def set_setpoint(self, setpoint_s: float) -> None: ...

    @abstractmethod
    def set_max_rate(self, max_rate_bytes_per_s: float) -> None: ...

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Rate 0 until resume(); the controller's state is frozen meanwhile."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    @property
    def fraction(self) -> float:
        """The rate as a fraction of the max rate (0 for a controller without one)."""
        return 0.0

    def set_load_latency(self, latency_s: float | None) -> None:
        """The load's own latency measured before any byte moved; a controller that does not count the copy's
        cost from it ignores it."""

    def state(self) -> dict[str, Any]:
        """What the controller has learnt so far, for status and the time series (none by default)."""
        return {}

    def set_mark(self, mark: str | None) -> None:
        """Why the second just past is not the copy's doing (the backup tool's read-in or start, a
        pause, a lock), or None. The migration marks those seconds; a model leaves them out (a controller
        that learns nothing from them ignores the mark)."""


def is_stale(sample: LatencySample, now: float, stale_after_s: float) -> bool:
    """A sample read too long ago (or from the future: a different clock) is not evidence."""
    age = now - sample.t
    return age > stale_after_s or age < -stale_after_s
