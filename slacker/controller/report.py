"""One controller step as the migration reports it: a typed record whose fields are listed once here.

`RatePolicy.step()` returns a StepReport; the time series (`series()`), the migration's document
(`slacker status`, `--json`: `to_dict()` under `controller`) and the Prometheus gauges
(slacker.controller.metrics) all read it. The controller's own state (the model's `model_*`) is one
field, flattened into the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

# Field metadata: "series": False keeps a field out of the time series (it is in status and --json);
# "omit_none": the key is left out while the value is None (present only when it means something).
_NOT_IN_SERIES = {"series": False}
_OPTIONAL = {"omit_none": True}
_OPTIONAL_NOT_IN_SERIES = {"series": False, "omit_none": True}
# Both ends guarded: the sides' keys are all there (None: that side had no evidence) or, unguarded, none.
_SIDE = {"side": True}
_SIDE_NOT_IN_SERIES = {"side": True, "series": False}


@dataclass(frozen=True)
class StepReport:
    t: float = field(metadata=_NOT_IN_SERIES)  # the step's clock (time.monotonic); the series has its own t
    latency_s: float | None = None  # the window's mean latency (None: no evidence)
    setpoint_s: float | None = None
    p: float = 0.0  # the PID's contributions to the change of fraction; 0 for other laws
    i: float = 0.0
    d: float = 0.0
    fraction: float = 0.0  # the rate as a fraction of the max rate
    rate_bytes_per_s: int | None = field(default=0, metadata=_NOT_IN_SERIES)  # None: unthrottled
    bytes_done: int = field(default=0, metadata=_NOT_IN_SERIES)
    note: str = ""  # which branch of the law acted, or what the migration did with the rate
    source_ok: bool = field(default=True, metadata=_NOT_IN_SERIES)
    source_state: str = "ok"  # ok | idle | blind | failed (slacker.controller.loop.source_state)
    source: str = field(default="", metadata=_NOT_IN_SERIES)
    source_error: str | None = field(default=None, metadata=_OPTIONAL_NOT_IN_SERIES)
    window_count: float = field(default=0.0, metadata=_NOT_IN_SERIES)
    last_latency_s: float | None = None  # the newest second alone
    server_commits: float | None = field(default=None, metadata=_NOT_IN_SERIES)
    mark: str | None = field(default=None, metadata=_OPTIONAL)  # why this second is not the copy's doing
    verdict: dict | None = field(default=None, metadata=_OPTIONAL)  # the copy cannot finish (verdict.py)
    # Both ends guarded (slacker.latency.GuardedSource.sides): each side's latency, which one steered.
    binding: str | None = field(default=None, metadata=_SIDE)
    source_latency_s: float | None = field(default=None, metadata=_SIDE)
    target_latency_s: float | None = field(default=None, metadata=_SIDE)
    target_setpoint_s: float | None = field(default=None, metadata=_SIDE)
    target_ok: bool | None = field(default=None, metadata=_SIDE_NOT_IN_SERIES)
    target_error: str | None = field(default=None, metadata=_SIDE_NOT_IN_SERIES)
    controller: dict[str, Any] = field(default_factory=dict)  # the controller's state() (model_*), flattened

    def to_dict(self) -> dict[str, Any]:
        """The keys status and --json show (the migration's `controller`)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "controller":
                continue
            v = getattr(self, f.name)  # reflective by need: every field, with the rules its metadata gives
            if (v is None and f.metadata.get("omit_none")) or (f.metadata.get("side") and not self.guarded):
                continue
            out[f.name] = v
        out.update(self.controller)
        return out

    @property
    def guarded(self) -> bool:
        """Both ends guarded: the target's setpoint is known (slacker.latency.GuardedSource)."""
        return self.target_setpoint_s is not None

    def series(self) -> dict[str, Any]:
        """The keys of one line of the time series (`slacker plot` and the benchmarks read them)."""
        skip = {f.name for f in fields(self) if f.metadata.get("series") is False}
        return {k: v for k, v in self.to_dict().items() if k not in skip}

    def with_note(self, note: str) -> "StepReport":
        """The migration says what it did with the rate, the controller's note after it."""
        return replace(self, note=note + (f" ({self.note})" if self.note else ""))

    def with_sides(self, sides: dict[str, Any] | None) -> "StepReport":
        return replace(self, **sides) if sides else self
