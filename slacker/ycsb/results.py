"""The harness's records: one per tenant per interval, one per tenant per run, one per run.

They are plain dataclasses with to_dict/from_dict so a run in a subprocess
(`slacker ycsb run ... --json`) reads back into the same objects as a run in
this process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .metrics import Gap, LatencySummary

SUSTAINED_RATIO = 0.99


@dataclass
class IntervalRecord:
    """One tenant over one reporting interval (a line of the --out JSON-lines file)."""

    t_s: float                # end of the interval, seconds since the start of the run
    interval_s: float         # measured length of the interval
    time: str                 # UTC timestamp of the end of the interval
    tenant: str
    phase: str                # "run" while arrivals are scheduled, "drain" while the queue empties
    target_tps: float         # rate the schedule aimed at
    arrivals: int
    completed: int
    offered_tps: float
    achieved_tps: float
    queue_length: int         # waiting for a worker at the end of the interval
    in_flight: int
    latency_mean_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    latency_max_s: float | None
    failures: dict[str, int] = field(default_factory=dict)
    abandoned: dict[str, int] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    epoch: int = 0
    node: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "IntervalRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class TenantResult:
    """One tenant's whole run. Rates are over the arrival window (--duration)."""

    tenant: str
    target_tps: float
    arrivals: int
    completed: int                 # every commit, including those during the drain
    completed_in_window: int       # commits before the window closed: the basis of achieved_tps
    offered_tps: float
    achieved_tps: float
    sustained: bool                # achieved >= 99% of offered
    queue_max: int
    queue_at_end: int              # waiting when the arrival window closed
    unfinished: int                # arrived but never started (drain timed out or interrupted)
    latency: LatencySummary
    failures: dict[str, int]       # failed attempts by reason
    abandoned: dict[str, int]      # transactions given up, by last reason
    operations: dict[str, int]     # operations of committed transactions, by type
    gaps: list[Gap] = field(default_factory=list)
    reconnects: int = 0
    endpoint: str = ""             # host:port at the end (never credentials)
    epoch_start: int = 0
    epoch_end: int = 0
    node_end: str = ""

    @property
    def operations_total(self) -> int:
        return sum(self.operations.values())

    @property
    def achieved_ratio(self) -> float | None:
        return self.achieved_tps / self.offered_tps if self.offered_tps > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["latency"] = self.latency.to_dict()
        d["gaps"] = [g.to_dict() for g in self.gaps]
        d["operations_total"] = self.operations_total
        d["achieved_ratio"] = self.achieved_ratio
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TenantResult":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["latency"] = LatencySummary(**d.get("latency", {}))
        kw["gaps"] = [Gap(**g) for g in d.get("gaps", [])]
        return cls(**kw)


@dataclass
class RunResult:
    """A whole run: settings, per-tenant results, and the harness's own cost."""

    started_at: str
    duration_s: float              # the arrival window actually used
    elapsed_s: float               # including the drain
    arrival: str
    mpl: int
    driver: str
    interval_s: float
    seed: int
    workload: dict[str, Any]
    workload_sources: list[str]
    tenants: list[TenantResult]
    harness_cpu_s: float           # CPU time of the harness process while it ran (all threads)
    operations_total: int
    ops_per_cpu_s: float | None
    rate_steps: list[str] = field(default_factory=list)
    metrics_url: str = ""
    out_path: str = ""
    interrupted: bool = False
    ignored_properties: list[str] = field(default_factory=list)
    intervals: list[IntervalRecord] = field(default_factory=list, repr=False)

    @property
    def sustained(self) -> bool:
        return all(t.sustained for t in self.tenants)

    def tenant(self, name: str) -> TenantResult:
        for t in self.tenants:
            if t.tenant == name:
                return t
        raise KeyError(name)

    def to_dict(self, include_intervals: bool = False) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("tenants", "intervals")}
        d["tenants"] = [t.to_dict() for t in self.tenants]
        d["sustained"] = self.sustained
        if include_intervals:
            d["intervals"] = [i.to_dict() for i in self.intervals]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunResult":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["tenants"] = [TenantResult.from_dict(t) for t in d.get("tenants", [])]
        kw["intervals"] = [IntervalRecord.from_dict(i) for i in d.get("intervals", [])]
        return cls(**kw)
