"""Latency accounting per tenant, its summaries, and the Prometheus endpoint the controller reads.

A committed transaction is recorded once, under one lock: its latency (from
its scheduled arrival to its commit) goes into the current interval's list and
into the cumulative histogram that /metrics serves as
`slacker_ycsb_txn_latency_seconds{tenant=...}`. Keep that name: the
latency-targeting controller reads exactly its _sum and _count.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

LATENCY_METRIC = "slacker_ycsb_txn_latency_seconds"
# 0.5 ms to 30 s, roughly 1-1.5-2-3-5-7.5 per decade: fine enough for a setpoint anywhere in between.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0,
)
OPERATION_NAMES = ("read", "update", "insert", "scan", "readmodifywrite")
# The operations that write: only a transaction with one of them shows a read-only owner writable again.
WRITE_OPS = tuple(i for i, name in enumerate(OPERATION_NAMES) if name not in ("read", "scan"))


@dataclass
class LatencySummary:
    """Latency of committed transactions, in seconds (None when nothing committed)."""

    count: int = 0
    mean_s: float | None = None
    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None

    @classmethod
    def of(cls, latencies: Sequence[float]) -> "LatencySummary":
        n = len(latencies)
        if n == 0:
            return cls()
        s = sorted(latencies)
        return cls(n, math.fsum(s) / n, percentile_sorted(s, 50), percentile_sorted(s, 95),
                   percentile_sorted(s, 99), s[-1])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile_sorted(s: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of sorted data: the smallest value with at least pct% at or below it."""
    if not s:
        raise ValueError("no data")
    rank = max(1, math.ceil(pct / 100.0 * len(s)))
    return s[min(rank, len(s)) - 1]


class LogHistogram:
    """Counts in buckets 1% wide on a log scale: overall percentiles within 1% at any run length."""

    GROWTH = 1.01
    FLOOR_S = 1e-6

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.sum_s = 0.0
        self.max_s = 0.0
        self._log_growth = math.log(self.GROWTH)

    def add_many(self, latencies: Iterable[float]) -> None:
        counts = self.counts
        lg, floor = self._log_growth, self.FLOOR_S
        for x in latencies:
            i = int(math.log(max(x, floor) / floor) / lg)
            counts[i] = counts.get(i, 0) + 1
            self.count += 1
            self.sum_s += x
            if x > self.max_s:
                self.max_s = x

    def percentile(self, pct: float) -> float | None:
        if self.count == 0:
            return None
        rank = max(1, math.ceil(pct / 100.0 * self.count))
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen >= rank:
                # Geometric middle of the bucket, never above the true maximum.
                return min(self.FLOOR_S * self.GROWTH ** (i + 0.5), self.max_s)
        return self.max_s  # pragma: no cover

    def summary(self) -> LatencySummary:
        if self.count == 0:
            return LatencySummary()
        return LatencySummary(self.count, self.sum_s / self.count, self.percentile(50), self.percentile(95),
                              self.percentile(99), self.max_s)


@dataclass
class Gap:
    """A stretch without a successful transaction caused by lost connections or a frozen owner."""

    start_s: float          # since the start of the run: the last commit before the disruption
    gap_s: float            # time from that commit to the next one
    reason: str
    epoch_before: int
    epoch_after: int
    node_before: str = ""
    node_after: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IntervalSnapshot:
    """What one tenant did between two ticks of the reporter (taken and reset under the lock)."""

    latencies: list[float]
    failures: dict[str, int]
    abandoned: dict[str, int]
    ops: list[int]


class TenantStats:
    """The counters of one tenant's benchmark; workers write, the reporter and /metrics read."""

    def __init__(self, tenant: str, t0: float = 0.0) -> None:
        self.tenant = tenant
        self.t0 = t0
        self.lock = threading.Lock()
        self.bounds = LATENCY_BUCKETS_S
        self.bucket_counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.latency_sum_s = 0.0
        self.completed = 0
        self.arrivals = 0               # written by the dispatcher only
        self.ops = [0] * len(OPERATION_NAMES)
        self.failures: dict[str, int] = {}     # failed attempts by reason (each retry counts)
        self.abandoned: dict[str, int] = {}    # transactions given up, by their last reason
        self._cur_latencies: list[float] = []
        self._cur_ops = [0] * len(OPERATION_NAMES)
        self._cur_failures: dict[str, int] = {}
        self._cur_abandoned: dict[str, int] = {}
        # Gauges the reporter sets for /metrics.
        self.target_tps = 0.0
        self.offered_tps = 0.0
        self.achieved_tps = 0.0
        self.queue_length = 0
        self.in_flight = 0
        # Following the tenant.
        self.last_commit_t: float | None = None
        # End of the last gap in which connections were lost: a connection opened before it that
        # dies later is a leftover of that gap. A read-only gap (a handover attempt that unfroze
        # the source) leaves connections intact, so it does not count here.
        self.recovered_t = float("-inf")
        self.disrupted_since: float | None = None
        self._disruption_reason = ""
        self._disruption_lost_connections = False
        self._epoch_before = 0
        self._node_before = ""
        self.gaps: list[Gap] = []
        self.epoch = 0
        self.node = ""

    # --- hot path -------------------------------------------------------------------
    def record_commit(self, scheduled_t: float, done_t: float, op_counts: Sequence[int],
                      began_t: float | None = None) -> float:
        """Count one committed transaction; its latency includes the time it queued. `began_t`: when its
        last attempt started (None: unknown, taken as after any disruption)."""
        latency_s = done_t - scheduled_t
        with self.lock:
            self._cur_latencies.append(latency_s)
            self.bucket_counts[bisect_left(self.bounds, latency_s)] += 1
            self.latency_sum_s += latency_s
            self.completed += 1
            cur = self._cur_ops
            for i, c in enumerate(op_counts):
                if c:
                    cur[i] += c
        since = self.disrupted_since
        if since is not None and (began_t is None or began_t >= since) and (
                self._disruption_reason != "read_only" or any(op_counts[i] for i in WRITE_OPS)):
            # A read commits on a frozen owner too: a read-only gap ends with the first write. A transaction
            # begun before the disruption was noted ran against the owner as it was before (a write the
            # freeze let finish, its commit read by its thread after another's failure): it ends nothing.
            self._end_disruption(done_t)
        self.last_commit_t = done_t
        return latency_s

    # --- failures and following ---------------------------------------------------------
    def record_failure(self, reason: str) -> None:
        with self.lock:
            self.failures[reason] = self.failures.get(reason, 0) + 1
            self._cur_failures[reason] = self._cur_failures.get(reason, 0) + 1

    def record_abandoned(self, reason: str) -> None:
        with self.lock:
            self.abandoned[reason] = self.abandoned.get(reason, 0) + 1
            self._cur_abandoned[reason] = self._cur_abandoned.get(reason, 0) + 1

    def note_disruption(self, now: float, reason: str, epoch: int, node: str, connection_lost: bool) -> None:
        """A worker's transaction failed with `reason` on its connection to the owner at `epoch` on `node`
        (the worker's own endpoint: another worker may already have followed the tenant elsewhere)."""
        with self.lock:
            if self.disrupted_since is None:
                self.disrupted_since = now
                self._disruption_reason = reason
                self._disruption_lost_connections = connection_lost
                self._epoch_before = epoch
                self._node_before = node
            elif connection_lost and not self._disruption_lost_connections:
                # A handover freezes the owner (read-only) and then closes its connections: one gap,
                # and its end marks what connections die later as its leftovers.
                self._disruption_reason = reason
                self._disruption_lost_connections = True

    def note_endpoint(self, epoch: int, node: str) -> None:
        self.epoch, self.node = epoch, node

    def _end_disruption(self, done_t: float) -> None:
        with self.lock:
            since = self.disrupted_since
            if since is None:
                return  # another worker's commit ended it
            self.disrupted_since = None
            if self._disruption_lost_connections:
                self.recovered_t = done_t
            # The gap runs from the last commit before the disruption (or its start, if none yet).
            last_ok = self.last_commit_t if self.last_commit_t is not None and self.last_commit_t <= since else since
            self.gaps.append(Gap(start_s=last_ok - self.t0, gap_s=done_t - last_ok, reason=self._disruption_reason,
                                 epoch_before=self._epoch_before, epoch_after=self.epoch,
                                 node_before=self._node_before, node_after=self.node))

    # --- reporter side -------------------------------------------------------------------
    def take_interval(self) -> IntervalSnapshot:
        with self.lock:
            snap = IntervalSnapshot(self._cur_latencies, self._cur_failures, self._cur_abandoned, self._cur_ops)
            self._cur_latencies = []
            self._cur_failures = {}
            self._cur_abandoned = {}
            self._cur_ops = [0] * len(OPERATION_NAMES)
            for i, c in enumerate(snap.ops):
                self.ops[i] += c
        return snap

    def has_pending(self) -> bool:
        """Anything recorded since the last take_interval()?"""
        with self.lock:
            return bool(self._cur_latencies or self._cur_failures or self._cur_abandoned)

    def histogram(self) -> tuple[list[int], float, int]:
        """(bucket counts incl. +Inf, sum, count) read consistently."""
        with self.lock:
            return list(self.bucket_counts), self.latency_sum_s, self.completed


# --- Prometheus ------------------------------------------------------------------------------


class HarnessCollector:
    """Renders every tenant's stats at scrape time; nothing on the hot path touches prometheus_client."""

    def __init__(self, stats: Sequence[TenantStats]) -> None:
        self.stats = list(stats)

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        hist = HistogramMetricFamily(LATENCY_METRIC, "Transaction latency from scheduled arrival to commit "
                                     "(queue time plus execution time).", labels=["tenant"], unit="")
        target = GaugeMetricFamily("slacker_ycsb_target_txn_per_second", "Offered rate the schedule aims at now.",
                                   labels=["tenant"])
        offered = GaugeMetricFamily("slacker_ycsb_offered_txn_per_second",
                                    "Transactions that arrived per second in the last interval.", labels=["tenant"])
        achieved = GaugeMetricFamily("slacker_ycsb_achieved_txn_per_second",
                                     "Transactions committed per second in the last interval.", labels=["tenant"])
        queue = GaugeMetricFamily("slacker_ycsb_queue_length",
                                  "Transactions that arrived and wait for a free worker.", labels=["tenant"])
        in_flight = GaugeMetricFamily("slacker_ycsb_in_flight", "Transactions being executed now.",
                                      labels=["tenant"])
        arrivals = CounterMetricFamily("slacker_ycsb_txn_arrivals", "Transactions scheduled so far.",
                                       labels=["tenant"])
        failures = CounterMetricFamily("slacker_ycsb_txn_failures", "Failed transaction attempts by reason.",
                                       labels=["tenant", "reason"])
        abandoned = CounterMetricFamily("slacker_ycsb_txn_abandoned",
                                        "Transactions given up after retries, by last reason.",
                                        labels=["tenant", "reason"])
        ops = CounterMetricFamily("slacker_ycsb_operations", "Operations in committed transactions, by type.",
                                  labels=["tenant", "op"])
        for st in self.stats:
            counts, total_s, n = st.histogram()
            cumulative, buckets = 0, []
            for bound, c in zip(st.bounds, counts):
                cumulative += c
                buckets.append((floatToGoString(bound), cumulative))
            buckets.append(("+Inf", n))
            hist.add_metric([st.tenant], buckets, total_s)
            target.add_metric([st.tenant], st.target_tps)
            offered.add_metric([st.tenant], st.offered_tps)
            achieved.add_metric([st.tenant], st.achieved_tps)
            queue.add_metric([st.tenant], st.queue_length)
            in_flight.add_metric([st.tenant], st.in_flight)
            arrivals.add_metric([st.tenant], st.arrivals)
            with st.lock:
                fail_items = list(st.failures.items())
                abandoned_items = list(st.abandoned.items())
                op_totals = [a + b for a, b in zip(st.ops, st._cur_ops)]
            for reason, c in sorted(fail_items):
                failures.add_metric([st.tenant, reason], c)
            for reason, c in sorted(abandoned_items):
                abandoned.add_metric([st.tenant, reason], c)
            for name, c in zip(OPERATION_NAMES, op_totals):
                ops.add_metric([st.tenant, name], c)
        yield from (hist, target, offered, achieved, queue, in_flight, arrivals, failures, abandoned, ops)


@dataclass
class MetricsServer:
    """A /metrics endpoint on its own registry (so several harnesses can live in one process)."""

    collector: HarnessCollector
    addr: str = "127.0.0.1"
    port: int = 0
    _httpd: Any = field(default=None, repr=False)

    def start(self) -> "MetricsServer":
        from prometheus_client import CollectorRegistry, start_http_server

        from ..errors import Conflict

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            httpd, _thread = start_http_server(self.port, addr=self.addr, registry=registry)
        except OSError as exc:
            raise Conflict(f"cannot serve metrics on {self.addr}:{self.port}", exc.strerror or str(exc),
                           "pick a free --metrics-port (0 picks one)") from None
        self._httpd = httpd
        self.port = httpd.server_port
        return self

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
