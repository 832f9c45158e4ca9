"""Prometheus metrics of an agent, read from the supervisor's latest samples at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .supervisor import Supervisor


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
        for h in snap.values():
            labels = [self.node, h.id]
            up.add_metric(labels, 1 if h.healthy else 0)
            qps.add_metric(labels, h.queries_per_s)
            queries.add_metric(labels, h.queries_total)
            conns.add_metric(labels, h.connections)
            restarts.add_metric(labels, h.restarts)
        yield from (up_total, up, qps, queries, conns, restarts)


def make_registry(node: str, supervisor: Supervisor) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TenantCollector(node, supervisor))
    return registry
