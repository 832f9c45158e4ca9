"""Per-tenant server-side transaction latency, transactions/s, CPU and data size, sampled by the agent.

Each supervisor tick reads every running tenant's performance_schema
transaction summary (Slacker's own account left out) and keeps a sliding
window; every `stats_interval` it also closes one history sample per tenant
(transactions/s, mean latency, CPU seconds per second of its mariadbd from
/proc/PID/stat, data size) and keeps the last `stats_history` of them. The
agent serves both at GET /v1/tenant-stats and on /metrics; `slacker
rebalance` reads the history to find hot nodes.

The node's shared tenants (one database each in the shared server) are read
from the shared server in one query for all of them (`SharedLoads`, twice a
window): each one's transactions from performance_schema's per-user summary, and its load
as the shared server's CPU split in proportion to the CPU its own sessions
used (the user statistics' CPU_TIME), so the tenants' loads add up to the
server's process as a whole server's load is its process.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import mariadb
from ..latency import PerformanceSchemaSource

log = logging.getLogger("slacker.agent.tenant_stats")

DEFAULT_WINDOW_S = 10.0
DEFAULT_INTERVAL_S = 60.0
DEFAULT_HISTORY = 30
# A shared tenant's data directory is walked for its size where the interval saw it commit, and at least every
# this many intervals otherwise (an idle tenant's files do not grow; an administrator's DDL shows up that late).
SIZE_EVERY_INTERVALS = 10
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used (fields 14 and 15 of /proc/PID/stat)."""
    if pid is None:
        return None
    try:
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def data_bytes(path: Path, skip_prefixes: tuple[str, ...] = ()) -> int | None:
    """Bytes in the files under `path`: what a migration of the tenant has to copy.

    Files whose name starts with one of `skip_prefixes` are not counted (e.g. ("binlog",):
    a snapshot copies the data without the binary logs)."""
    total = 0
    try:
        for root, _dirs, files in os.walk(path):
            for name in files:
                if skip_prefixes and name.startswith(skip_prefixes):
                    continue
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    pass  # a file removed while we walk (temp tables, rotated logs)
    except OSError:
        return None
    return total


@dataclass(frozen=True)
class LoadSample:
    """One tenant over one history interval. `t` is the UTC time the interval ended.

    latency_s is None when no transaction completed; cpu_s_per_s is None when the
    process could not be read or restarted inside the interval.
    """

    t: float
    interval_s: float
    transactions_per_s: float
    latency_s: float | None
    cpu_s_per_s: float | None
    data_bytes: int | None
    ok: bool = True
    kind: str = "server"
    # A shared tenant's own sessions' CPU s/s (cpu_s_per_s is its share of the whole server's, background
    # work included); None for a whole server, whose process is its own.
    own_cpu_s_per_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Mark:
    """Where the current history interval started: counters as read then."""

    t: float
    pid: int | None
    cpu_s: float | None
    sum_s: float | None
    count: float | None


class _TotalsSource(PerformanceSchemaSource):
    """The window source that also keeps the raw totals it last read (for the history)."""

    last_totals: tuple[float, float] | None = None

    def _snapshot(self):
        self.last_totals = None
        totals = super()._snapshot()
        self.last_totals = totals
        return totals


@dataclass(frozen=True)
class TenantStat:
    """One tenant's transactions over the last window; latency None when none completed."""

    tenant: str
    latency_s: float | None
    transactions_per_s: float
    window_s: float
    ok: bool = True
    error: str = ""
    kind: str = "server"
    # Bytes in its data, as last walked (at its first sample, then as the history walks it): what a move copies,
    # known before its first history interval closes (a drain plans tenants that arrived a moment ago).
    data_bytes: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _SharedMark:
    """Where the shared tenants' current history interval started."""

    t: float
    pid: int | None
    server_cpu_s: float | None
    usage: dict[str, tuple[float, float, float]]  # tenant -> (latency sum s, transactions, own CPU s)


def usage_by_tenant(by_user: dict[str, tuple[float, float, float]], tenant_ids) -> dict:
    """Per-account usage summed per tenant: a shared tenant's accounts are `<id>_<role>` (ids hold no '_').
    Accounts of no tenant in `tenant_ids` (the server's `slacker_*`, root) are left out."""
    ids = set(tenant_ids)
    out: dict[str, tuple[float, float, float]] = {}
    for user, (sum_s, count, cpu) in by_user.items():
        tid, sep, _role = str(user or "").partition("_")
        if not sep or tid not in ids:
            continue
        a, b, c = out.get(tid, (0.0, 0.0, 0.0))
        out[tid] = (a + sum_s, b + count, c + cpu)
    return out


def apportion(server_cpu_s_per_s: float | None, own: dict[str, float]) -> dict[str, float | None]:
    """Each tenant's share of the shared server's CPU, in proportion to its own sessions' CPU; evenly when
    none used any (the server's own background work, split). None for all when the server's is unknown."""
    if server_cpu_s_per_s is None:
        return {t: None for t in own}
    total = sum(max(0.0, x) for x in own.values())
    if total < 1e-9:  # under the counters' resolution (CPU_TIME counts microseconds): none used any
        return {t: server_cpu_s_per_s / len(own) for t in own} if own else {}
    return {t: server_cpu_s_per_s * max(0.0, x) / total for t, x in own.items()}


class SharedLoads:
    """The node's shared tenants, read from the shared server once per read for all of them.

    `tick()` gives a TenantStat per tenant (its window's latency and rate) and, when a history interval
    ends, a LoadSample per tenant. A restart of the shared server (its pid changes, or a counter goes back)
    starts the window and the interval again. Thread-safe: `counters()` reads on request, on the same
    connection under a lock."""

    def __init__(self, manager, *, window_s: float, step_s: float, interval_s: float,
                 clock=time.monotonic, wall=time.time) -> None:
        self.manager = manager
        self.window_s, self.step_s, self.interval_s = window_s, step_s, interval_s
        self._clock, self._wall = clock, wall
        self._conn = None
        self._by_user: tuple[tuple, dict] | None = None  # (usage_fingerprint, usage_by_user) of the last full read
        self._sizes: dict[str, tuple[int, int | None]] = {}  # tenant -> (intervals since walked, its data bytes)
        self._lock = threading.Lock()
        self._window: deque[tuple[float, dict]] = deque()
        self._pid: int | None = None
        self._mark: _SharedMark | None = None
        self.cpu_totals: dict[str, float] = {}
        self._stats: dict[str, TenantStat] = {}
        self._read_every_s = max(step_s, window_s / 2) - step_s / 2  # half a tick of slack for an early tick

    def _read(self, server, ids, cpu: bool = False) -> dict[str, tuple[float, float, float]]:
        from ..mariadb import shared as sql

        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._conn is None:
                        self._conn = server.admin_connect(timeout_s=2)
                    # One row first: where no tenant's account has counted anything since the last read (an idle
                    # node of a thousand tenants), that read's thousand rows stand (their CPU is read anew).
                    mark = sql.usage_fingerprint(self._conn)
                    kept = self._by_user
                    if cpu or kept is None or kept[0] != mark:
                        kept = self._by_user = (mark, sql.usage_by_user(self._conn, cpu))
                    return usage_by_tenant(kept[1], ids)
                except Exception:  # noqa: BLE001 - a dropped connection: once more on a new one
                    self.close()
                    if attempt:
                        raise
        return {}

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._by_user = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def _running(self, busy: set[str], every=None):
        """(the shared server, its tenants to sample: not being moved, not fenced); (None, []) when it is down."""
        server = self.manager.server.get()
        if server is None or not server.is_running():
            return None, []
        every = self.manager.list() if every is None else every
        return server, [t for t in every if t.id not in busy and not t.fenced]

    def _usage(self, server, present: set[str], cpu: bool) -> dict[str, tuple[float, float, float]]:
        got = self._read(server, present, cpu=cpu)
        # A tenant none of whose accounts has connected since the server started has no row: zeros.
        return {tid: got.get(tid, (0.0, 0.0, 0.0)) for tid in present}

    def counters(self, busy: set[str], exclude: set[str]) -> list[dict]:
        server, tenants = self._running(busy)
        tenants = [t for t in tenants if t.id not in exclude]
        if server is None or not tenants:
            return []
        try:
            usage = self._read(server, [t.id for t in tenants])
        except Exception as exc:  # noqa: BLE001 - reported per tenant, as a whole server's failure is
            why = (str(exc) or type(exc).__name__).splitlines()[0][:200]
            return [{"tenant": t.id, "error": why} for t in tenants]
        return [{"tenant": t.id, "sum_s": usage.get(t.id, (0.0, 0.0, 0.0))[0],
                 "count": usage.get(t.id, (0.0, 0.0, 0.0))[1]} for t in tenants]

    def tick(self, busy: set[str]) -> tuple[dict[str, TenantStat], dict[str, LoadSample], set[str]]:
        """(stats, history samples closed now, ids of every shared tenant the node holds)."""
        every = self.manager.list()
        present = {t.id for t in every}
        server, tenants = self._running(busy, every)
        if server is None:
            self.close()
            self._window.clear()
            self._mark = None
            return {}, {}, present
        now = self._clock()
        pid = server.pid()
        # Every tenant's own CPU counts in the split, those being moved too: their sessions load the server.
        # The CPU (a second query, a row per account) only where a history interval closes (or starts).
        closing = self._mark is None or pid != self._pid or now - self._mark.t >= self.interval_s - self.step_s / 2
        if not closing and self._window and now - self._window[-1][0] < self._read_every_s:
            # A row per account each read: at a thousand tenants, read twice a window, not every tick.
            return {t.id: self._stats[t.id] for t in tenants if t.id in self._stats}, {}, present
        try:
            usage = self._usage(server, present, closing)
            back = self._window and any(k in usage and usage[k][1] < v[1] for k, v in self._window[-1][1].items())
            if pid != self._pid or back:  # started again: counters from zero
                self._window.clear()
                self._mark = None
                self._pid = pid
                if not closing:  # the new interval starts here: with the CPU
                    closing, usage = True, self._usage(server, present, True)
        except Exception as exc:  # noqa: BLE001 - one failed read: every tenant's sample says so
            why = (str(exc) or type(exc).__name__).splitlines()[0][:200]
            return ({t.id: TenantStat(t.id, None, 0.0, 0.0, ok=False, error=why, kind="shared") for t in tenants},
                    {}, present)
        self._window.append((now, usage))
        while len(self._window) > 2 and now - self._window[1][0] >= self.window_s - self.step_s / 2:
            self._window.popleft()
        t0, base = self._window[0]
        span = now - t0
        stats = {}
        for t in tenants:
            s1, c1, _ = usage.get(t.id, (0.0, 0.0, 0.0))
            s0, c0, _ = base.get(t.id, (s1, c1, 0.0))
            dc = c1 - c0
            if t.id not in self._sizes:  # first seen: walked now, then as the history walks it
                self._sizes[t.id] = (0, data_bytes(server.datadir / t.id))
            stats[t.id] = TenantStat(t.id, (s1 - s0) / dc if dc > 0 else None,
                                     round(dc / span, 3) if span > 0 else 0.0, round(span, 3), kind="shared",
                                     data_bytes=self._sizes[t.id][1])
        if closing:
            self.cpu_totals = {tid: v[2] for tid, v in usage.items()}
        self._stats = stats
        return stats, self._history_step(server, pid, now, usage, tenants), present

    def _history_step(self, server, pid, now, usage, tenants) -> dict[str, LoadSample]:
        cpu = process_cpu_s(pid)
        mark = self._mark
        if mark is not None and now - mark.t < self.interval_s - self.step_s / 2:
            return {}
        self._mark = _SharedMark(now, pid, cpu, dict(usage))
        if mark is None:
            return {}
        span = now - mark.t
        server_rate = None
        if cpu is not None and mark.server_cpu_s is not None and pid == mark.pid and cpu >= mark.server_cpu_s:
            server_rate = (cpu - mark.server_cpu_s) / span
        own = {tid: (v[2] - mark.usage[tid][2]) / span for tid, v in usage.items() if tid in mark.usage}
        share = apportion(server_rate, own)
        out = {}
        sizes = self._sizes
        for gone in set(sizes) - {t.id for t in tenants}:
            del sizes[gone]
        for t in tenants:
            if t.id not in mark.usage or t.id not in usage:
                continue  # arrived inside the interval: its first starts now
            s0, c0, _ = mark.usage[t.id]
            s1, c1, _ = usage[t.id]
            ok = c1 >= c0
            age, size = sizes.get(t.id, (SIZE_EVERY_INTERVALS, None))
            if c1 != c0 or age + 1 >= SIZE_EVERY_INTERVALS:
                age, size = -1, data_bytes(server.datadir / t.id)
            self._sizes[t.id] = (age + 1, size)
            latency = (s1 - s0) / (c1 - c0) if ok and c1 > c0 else None
            load = share.get(t.id)
            out[t.id] = LoadSample(t=round(self._wall(), 3), interval_s=round(span, 3),
                                   transactions_per_s=round((c1 - c0) / span, 3) if ok else 0.0,
                                   latency_s=None if latency is None else round(latency, 6),
                                   cpu_s_per_s=None if load is None else round(load, 4),
                                   data_bytes=size, ok=ok and load is not None, kind="shared",
                                   own_cpu_s_per_s=round(max(0.0, own[t.id]), 4))
        return out


class TenantStats:
    def __init__(self, node_name: str, tenants, busy: set[str] | None = None, *,
                 window_s: float = DEFAULT_WINDOW_S, step_s: float = 2.0,
                 interval_s: float = DEFAULT_INTERVAL_S, history: int = DEFAULT_HISTORY,
                 clock=time.monotonic, wall=time.time, shared=None) -> None:
        self.node = node_name
        self.tenants = tenants
        self.busy = busy if busy is not None else set()
        self.window_s, self.step_s = window_s, step_s
        self.interval_s, self.history_len = interval_s, history
        self._clock, self._wall = clock, wall
        self._sources: dict[str, _TotalsSource] = {}
        self._stats: dict[str, TenantStat] = {}
        self._marks: dict[str, _Mark] = {}
        self._sizes: dict[str, int | None] = {}  # tenant -> its data bytes, walked where an interval starts or ends
        self._history: dict[str, deque[LoadSample]] = {}
        self._cpu_total: dict[str, float] = {}
        self._lock = threading.Lock()
        # Read on request (a migrating source's target guard, once a step), on their own connections.
        self._counters: dict[str, PerformanceSchemaSource] = {}
        self._counters_lock = threading.Lock()
        # The node's shared tenants (slacker/kinds/shared.py's manager), None on a node without the kind.
        self.shared = None if shared is None else SharedLoads(shared, window_s=window_s, step_s=step_s,
                                                              interval_s=interval_s, clock=clock, wall=wall)

    def _source(self, tenant) -> _TotalsSource:
        src = self._sources.get(tenant.id)
        if src is None:
            src = self._sources[tenant.id] = _TotalsSource(
                lambda: tenant.admin_connect(timeout_s=2), kind="transactions",
                exclude_users=mariadb.SERVICE_USERS, window_s=self.window_s, step_s=self.step_s,
                name=f"performance_schema:{tenant.id}")
        return src

    def tick(self) -> None:
        """Sample every running tenant once; close a history sample for those whose interval is over."""
        seen: dict[str, TenantStat] = {}
        present = set()
        for tenant in self.tenants.list():
            present.add(tenant.id)
            if tenant.id in self.busy or tenant.info.desired_state != "running":
                # Being migrated, created or stopped: no sample, but its history is kept (a move
                # that fails leaves the tenant here with the load it had).
                self._marks.pop(tenant.id, None)
                continue
            src = self._source(tenant)
            s = src.read()
            rate = s.count / s.window_s if s.ok and s.window_s > 0 else 0.0
            self._history_step(tenant, src.last_totals if s.ok else None)
            seen[tenant.id] = TenantStat(tenant.id, s.latency_s, round(rate, 3), round(s.window_s, 3),
                                         ok=s.ok, error=s.error, data_bytes=self._sizes.get(tenant.id))
        for gone in set(self._sources) - set(seen):
            self._sources.pop(gone).close()
        shared_samples: dict[str, LoadSample] = {}
        if self.shared is not None:
            got, shared_samples, held = self.shared.tick(self.busy)
            seen.update(got)
            present |= held
        with self._lock:
            for tid, sample in shared_samples.items():
                self._history.setdefault(tid, deque(maxlen=self.history_len)).append(sample)
            for tid, total in (self.shared.cpu_totals if self.shared is not None else {}).items():
                if tid in present:
                    self._cpu_total[tid] = total
            self._stats = seen
            for gone in set(self._history) - present:
                del self._history[gone]
            for gone in set(self._cpu_total) - present:
                del self._cpu_total[gone]
        for gone in set(self._marks) - present:
            del self._marks[gone]
        for gone in set(self._sizes) - present:
            del self._sizes[gone]

    def _history_step(self, tenant, totals: tuple[float, float] | None) -> None:
        now = self._clock()
        pid = tenant.pid()
        cpu = process_cpu_s(pid)
        if cpu is not None:
            with self._lock:
                self._cpu_total[tenant.id] = cpu
        sum_s, count = totals if totals is not None else (None, None)
        mark = self._marks.get(tenant.id)
        # Half a supervisor step of slack, so a tick that comes a little early still closes the interval.
        if mark is not None and now - mark.t < self.interval_s - self.step_s / 2:
            return
        self._marks[tenant.id] = _Mark(now, pid, cpu, sum_s, count)
        if mark is None:  # the first interval starts now
            self._sizes[tenant.id] = data_bytes(tenant.datadir)
            return
        span = now - mark.t
        ok = mark.count is not None and count is not None and count >= mark.count
        tps = (count - mark.count) / span if ok else 0.0
        latency = (sum_s - mark.sum_s) / (count - mark.count) if ok and count > mark.count else None
        cpu_rate = None
        if cpu is not None and mark.cpu_s is not None and pid == mark.pid and cpu >= mark.cpu_s:
            cpu_rate = (cpu - mark.cpu_s) / span
        sample = LoadSample(t=round(self._wall(), 3), interval_s=round(span, 3), transactions_per_s=round(tps, 3),
                            latency_s=None if latency is None else round(latency, 6),
                            cpu_s_per_s=None if cpu_rate is None else round(cpu_rate, 4),
                            data_bytes=data_bytes(tenant.datadir), ok=ok and cpu_rate is not None)
        self._sizes[tenant.id] = sample.data_bytes
        with self._lock:
            ring = self._history.setdefault(tenant.id, deque(maxlen=self.history_len))
            ring.append(sample)

    def counters(self, exclude: set[str] = frozenset()) -> list[dict]:
        """Every running tenant's ever-growing transaction counters, read now: the caller windows them.

        {"tenant", "sum_s", "count"} per tenant, or {"tenant", "error"} when its
        performance_schema did not answer. Tenants being migrated in or out
        (busy) and those in `exclude` are left out.
        """
        out = []
        with self._counters_lock:
            running = [t for t in self.tenants.list()
                       if t.id not in self.busy and t.id not in exclude and t.info.desired_state == "running"]
            for tenant in running:
                src = self._counters.get(tenant.id)
                if src is None:
                    src = self._counters[tenant.id] = PerformanceSchemaSource(
                        lambda t=tenant: t.admin_connect(timeout_s=2), kind="transactions",
                        exclude_users=(mariadb.ADMIN_USER,), name=f"performance_schema:{tenant.id}")
                try:
                    sum_s, count = src._snapshot()
                    out.append({"tenant": tenant.id, "sum_s": sum_s, "count": count})
                except Exception as exc:  # noqa: BLE001 - one tenant's failure is reported, not raised
                    out.append({"tenant": tenant.id, "error": (str(exc) or type(exc).__name__).splitlines()[0][:200]})
            for gone in set(self._counters) - {t.id for t in running}:
                self._counters.pop(gone).close()
        if self.shared is not None:
            out += self.shared.counters(self.busy, set(exclude))
        return out

    def snapshot(self) -> dict[str, TenantStat]:
        with self._lock:
            return dict(self._stats)

    def history(self) -> dict[str, list[LoadSample]]:
        """Every tenant's history samples, oldest first."""
        with self._lock:
            return {tid: list(ring) for tid, ring in self._history.items()}

    def cpu_totals(self) -> dict[str, float]:
        with self._lock:
            return dict(self._cpu_total)

    def close(self) -> None:
        for src in list(self._sources.values()) + list(self._counters.values()):
            src.close()
        self._sources.clear()
        self._counters.clear()
        if self.shared is not None:
            self.shared.close()


class TenantStatsCollector(Collector):
    def __init__(self, stats: TenantStats) -> None:
        self.stats = stats

    def collect(self):
        labels = ["node", "tenant"]
        lat = GaugeMetricFamily("slacker_tenant_transaction_latency_seconds",
                                "Mean server-side transaction latency over the window (NaN: none completed)",
                                labels=labels)
        tps = GaugeMetricFamily("slacker_tenant_transactions_per_second",
                                "Transactions per second over the window (performance_schema)", labels=labels)
        up = GaugeMetricFamily("slacker_tenant_latency_source_up",
                               "1 if the tenant's performance_schema answered at the last sample", labels=labels)
        cpu = CounterMetricFamily("slacker_tenant_cpu_seconds",
                                  "CPU seconds used by the tenant's server process (user + system); a shared "
                                  "tenant's: its own sessions' (user statistics)", labels=labels)
        load = GaugeMetricFamily("slacker_tenant_load_cpu_seconds_per_second",
                                 "CPU seconds per second over the last history interval (the rebalancer's load)",
                                 labels=labels)
        size = GaugeMetricFamily("slacker_tenant_data_bytes", "Bytes in the tenant's data directory at the last "
                                 "history sample", labels=labels)
        for st in self.stats.snapshot().values():
            key = [self.stats.node, st.tenant]
            lat.add_metric(key, math.nan if st.latency_s is None else st.latency_s)
            tps.add_metric(key, st.transactions_per_s)
            up.add_metric(key, 1 if st.ok else 0)
        for tid, total in self.stats.cpu_totals().items():
            cpu.add_metric([self.stats.node, tid], total)
        for tid, samples in self.stats.history().items():
            last = samples[-1]
            if last.cpu_s_per_s is not None:
                load.add_metric([self.stats.node, tid], last.cpu_s_per_s)
            if last.data_bytes is not None:
                size.add_metric([self.stats.node, tid], last.data_bytes)
        yield from (lat, tps, up, cpu, load, size)


def attach(node, server) -> TenantStats:
    """Sample on every supervisor tick and expose the figures on the API and /metrics."""
    stats = TenantStats(node.name, node.tenants, node.supervisor.busy, step_s=node.supervisor.interval_s,
                        interval_s=node.config.stats_interval_s, history=node.config.stats_history,
                        shared=node.kinds.get("shared"))

    def sample() -> None:
        try:
            stats.tick()
        except Exception:  # noqa: BLE001 - statistics must never stop the supervisor
            log.exception("tenant stats sampling failed")

    node.supervisor.on_tick.append(sample)
    node.registry.register(TenantStatsCollector(stats))
    node.tenant_stats = stats

    @server.route("GET", "/v1/tenant-stats")
    def tenant_stats(srv, body, q):
        doc = {"node": node.name, "window_s": stats.window_s, "interval_s": stats.interval_s,
               "history_len": stats.history_len, "time": round(time.time(), 3),
               "tenants": [s.to_dict() for s in sorted(stats.snapshot().values(), key=lambda s: s.tenant)]}
        if q.get("history", "1") not in ("0", "false", "no"):
            doc["history"] = {tid: [x.to_dict() for x in samples]
                              for tid, samples in sorted(stats.history().items())}
        if q.get("counters"):
            # ?counters=1[&exclude=t1,t2]: the raw counters, read now (a migrating source's target guard).
            exclude = {x for x in str(q.get("exclude") or "").split(",") if x}
            doc["counters"] = stats.counters(exclude)
        return doc

    return stats
