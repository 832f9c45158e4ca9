"""Per-tenant server-side transaction latency and transactions/s, sampled by the agent.

Each supervisor tick reads every running tenant's performance_schema
transaction summary (Slacker's own account left out) and keeps a sliding
window; the agent serves the figures at GET /v1/tenant-stats and on /metrics.
The rebalancer reads the same figures to find hot tenants.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import asdict, dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import mariadb
from ..latency import PerformanceSchemaSource

log = logging.getLogger("slacker.agent.tenant_stats")

DEFAULT_WINDOW_S = 10.0


@dataclass(frozen=True)
class TenantStat:
    """One tenant's transactions over the last window; latency None when none completed."""

    tenant: str
    latency_s: float | None
    transactions_per_s: float
    window_s: float
    ok: bool = True
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class TenantStats:
    def __init__(self, node_name: str, tenants, busy: set[str] | None = None, *,
                 window_s: float = DEFAULT_WINDOW_S, step_s: float = 2.0) -> None:
        self.node = node_name
        self.tenants = tenants
        self.busy = busy if busy is not None else set()
        self.window_s, self.step_s = window_s, step_s
        self._sources: dict[str, PerformanceSchemaSource] = {}
        self._stats: dict[str, TenantStat] = {}
        self._lock = threading.Lock()
        # Read on request (a migrating source's target guard, once a step), on their own connections.
        self._counters: dict[str, PerformanceSchemaSource] = {}
        self._counters_lock = threading.Lock()

    def _source(self, tenant) -> PerformanceSchemaSource:
        src = self._sources.get(tenant.id)
        if src is None:
            src = self._sources[tenant.id] = PerformanceSchemaSource(
                lambda: tenant.admin_connect(timeout_s=2), kind="transactions",
                exclude_users=(mariadb.ADMIN_USER,), window_s=self.window_s, step_s=self.step_s,
                name=f"performance_schema:{tenant.id}")
        return src

    def tick(self) -> None:
        """Sample every running tenant once."""
        seen: dict[str, TenantStat] = {}
        for tenant in self.tenants.list():
            if tenant.id in self.busy or tenant.info.desired_state != "running":
                continue
            s = self._source(tenant).read()
            rate = s.count / s.window_s if s.ok and s.window_s > 0 else 0.0
            seen[tenant.id] = TenantStat(tenant.id, s.latency_s, round(rate, 3), round(s.window_s, 3),
                                         ok=s.ok, error=s.error)
        for gone in set(self._sources) - set(seen):
            self._sources.pop(gone).close()
        with self._lock:
            self._stats = seen

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
        return out

    def snapshot(self) -> dict[str, TenantStat]:
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        for src in list(self._sources.values()) + list(self._counters.values()):
            src.close()
        self._sources.clear()
        self._counters.clear()


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
        for st in self.stats.snapshot().values():
            key = [self.stats.node, st.tenant]
            lat.add_metric(key, math.nan if st.latency_s is None else st.latency_s)
            tps.add_metric(key, st.transactions_per_s)
            up.add_metric(key, 1 if st.ok else 0)
        yield from (lat, tps, up)


def attach(node, server) -> TenantStats:
    """Sample on every supervisor tick and expose the figures on the API and /metrics."""
    stats = TenantStats(node.name, node.tenants, node.supervisor.busy, step_s=node.supervisor.interval_s)

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
        doc = {"node": node.name, "window_s": stats.window_s,
               "tenants": [s.to_dict() for s in sorted(stats.snapshot().values(), key=lambda s: s.tenant)]}
        if q.get("counters"):
            # ?counters=1[&exclude=t1,t2]: the raw counters, read now (a migrating source's target guard).
            exclude = {x for x in str(q.get("exclude") or "").split(",") if x}
            doc["counters"] = stats.counters(exclude)
        return doc

    return stats
