"""Prometheus metrics of an agent, read from the supervisor's latest samples at scrape time, and the
directory's health and this node's cordon as this node sees them (sampled in the background: a scrape
never waits on etcd)."""

from __future__ import annotations

import logging
import threading
import time

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .supervisor import Supervisor

log = logging.getLogger("slacker.agent.metrics")
DIRECTORY_HEALTH_INTERVAL_S = 15.0
OWNED_STATES = ("running", "stopped")  # a tenant's desired states while this node owns it (slacker/tenants.py)


class TenantCollector(Collector):
    def __init__(self, node: str, supervisor: Supervisor) -> None:
        self.node = node
        self.supervisor = supervisor

    def collect(self):
        snap = self.supervisor.snapshot()
        up_total = GaugeMetricFamily("slacker_tenants_up", "Tenants of this node answering SQL", labels=["node"])
        up_total.add_metric([self.node], sum(1 for h in snap.values() if h.healthy))
        up = GaugeMetricFamily("slacker_tenant_up", "1 if the tenant answers SQL", labels=["node", "tenant"])
        qps = GaugeMetricFamily("slacker_tenant_queries_per_second",
                                "Statements per second over the last supervisor interval",
                                labels=["node", "tenant"])
        queries = CounterMetricFamily("slacker_tenant_queries", "Statements executed (server Questions)",
                                      labels=["node", "tenant"])
        conns = GaugeMetricFamily("slacker_tenant_connections", "Open client connections",
                                  labels=["node", "tenant"])
        restarts = CounterMetricFamily("slacker_tenant_restarts", "Restarts by the supervisor",
                                       labels=["node", "tenant"])
        info = GaugeMetricFamily("slacker_tenant_info", "1 for each tenant of this node, labelled with its kind "
                                 "(server: a mariadbd of its own; shared: a database in the node's shared server)",
                                 labels=["node", "tenant", "kind"])
        for h in snap.values():
            labels = [self.node, h.id]
            info.add_metric([self.node, h.id, h.kind], 1)
            up.add_metric(labels, 1 if h.healthy else 0)
            qps.add_metric(labels, h.queries_per_s)
            queries.add_metric(labels, h.queries_total)
            conns.add_metric(labels, h.connections)
            restarts.add_metric(labels, h.restarts)
        owned = GaugeMetricFamily("slacker_node_tenants", "Tenants this node holds as their owner (running or "
                                  "stopped; not a migration's target before its flip, nor its retired source)",
                                  labels=["node"])
        owned.add_metric([self.node], sum(1 for h in snap.values() if h.desired_state in OWNED_STATES))
        yield from (up_total, up, qps, queries, conns, restarts, owned, info)


class DirectoryHealth(Collector):
    """The directory's health from this node every `interval_s`: healthy, members and members answering
    (etcd: a majority up and a leader; SQLite: the directory node's agent answering); and whether the
    directory has this node cordoned (`slacker node cordon`, a drain), read in the same sample."""

    def __init__(self, node: str, directory, interval_s: float = DIRECTORY_HEALTH_INTERVAL_S) -> None:
        self.node = node
        self.directory = directory
        self.interval_s = interval_s
        self._last: tuple[float, dict] | None = None  # (monotonic time, health)
        self._cordon: tuple[bool, float] | None = None  # (cordoned, since: UTC seconds) at the last good read
        self._stop = threading.Event()

    def sample(self) -> None:
        try:
            h = self.directory.health()  # never raises, by the DirectoryStore contract
        except Exception as exc:  # noqa: BLE001 - a metric must never stop the agent
            log.warning("directory health sample failed: %s", exc)
            h = {"healthy": False}
        self._last = (time.monotonic(), h)
        try:
            c = self.directory.cordons().get(self.node)
            self._cordon = (c is not None, c.since if c is not None else 0.0)
        except Exception as exc:  # noqa: BLE001 - the directory unreachable: keep the last answer
            log.warning("reading this node's cordon failed: %s", exc)

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval_s)

        threading.Thread(target=loop, name="directory-health", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def collect(self):
        labels = ["node"]
        healthy = GaugeMetricFamily("slacker_directory_healthy", "1 if the directory answered healthy at the "
                                    "last sample (etcd: a leader and a majority of members up)", labels=labels)
        members = GaugeMetricFamily("slacker_directory_members", "Members of the directory (1 for SQLite)",
                                    labels=labels)
        up = GaugeMetricFamily("slacker_directory_members_up", "Members answering at the last sample",
                               labels=labels)
        age = GaugeMetricFamily("slacker_directory_health_age_seconds", "Seconds since the last sample",
                                labels=labels)
        if self._last is not None:
            at, h = self._last
            ok = bool(h.get("healthy"))
            rows = h.get("members")
            healthy.add_metric([self.node], 1 if ok else 0)
            if rows:  # etcd: the member list
                members.add_metric([self.node], len(rows))
                up.add_metric([self.node], sum(1 for r in rows if r.get("reachable")))
            elif "members" not in h:  # one store (SQLite): it answers or it does not
                members.add_metric([self.node], 1)
                up.add_metric([self.node], 1 if ok else 0)
            age.add_metric([self.node], time.monotonic() - at)
        cordoned = GaugeMetricFamily("slacker_node_cordoned", "1 if the directory has this node cordoned (it "
                                     "receives no tenant), at the last sample", labels=labels)
        since = GaugeMetricFamily("slacker_node_cordoned_since_timestamp_seconds",
                                  "When the node was cordoned (UTC seconds); 0 while it is not", labels=labels)
        if self._cordon is not None:
            cordoned.add_metric([self.node], 1 if self._cordon[0] else 0)
            since.add_metric([self.node], self._cordon[1])
        yield from (healthy, members, up, age, cordoned, since)


def make_registry(node: str, supervisor: Supervisor) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TenantCollector(node, supervisor))
    return registry
