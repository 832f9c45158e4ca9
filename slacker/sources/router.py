"""`--latency-source router[,table=transactions|statements]`: a tenant's latency as its clients see it, measured
by the routers in their path (router/latency.go), every running tenant of the source node one population. The
default source (no --latency-source) is chosen per tenant by LatencyChoice: the routers' where a router
carries the tenant's clients, else the server's. Its seed: the routers' per-second rings (the last 10 s)."""

from __future__ import annotations

from ..errors import InvalidInput
from ..latency import (DEFAULT_SOURCE_ORDER, ROUTER_METRICS, LatencySource, LatencySourceSpec, RouterLatencySource,
                       router_traffic)
from . import SPEC_HINT, SourceKind
from .performance_schema import pfs_maker, population, with_target

ROUTER_SEED_S = 10  # the routers' seconds read for the seed: as long as the agents' per-tenant window


def parse(text: str, pairs: list[tuple[str, str]], node: str) -> LatencySourceSpec:
    table = "transactions"
    for key, value in pairs:
        if key != "table":
            raise InvalidInput(f"invalid latency source {text!r}", f"unknown key {key!r} for router", SPEC_HINT)
        table = value
    if table not in ROUTER_METRICS:
        raise InvalidInput(f"invalid latency source {text!r}", "table must be statements or transactions", SPEC_HINT)
    if node != "source":
        raise InvalidInput(f"invalid latency source {text!r}", "the routers measure the source node's tenants",
                           SPEC_HINT)
    return LatencySourceSpec("router", pfs_kind=table)


class LatencyChoice:
    """Per tenant, the latency the default source reads, and why: the first of DEFAULT_SOURCE_ORDER that
    holds, the routers' (the latency its clients see) when a router announced in the directory carries its
    clients -- it has measured its transactions and has connections of theirs open -- else the server's own
    per-transaction time (performance_schema). Decided when the tenant joins the source's population (the
    migration's start, or a tenant arriving later); the migration's record says what was chosen
    (`latency_source`)."""

    def __init__(self, node, forced: str | None = None) -> None:
        self.node = node
        self.forced = forced  # "router": --latency-source router (no fallback)
        self.tenants: dict[str, dict] = {}

    def admins(self) -> list[str]:
        from ..router.control import registered_routers

        return [r["admin"] for r in registered_routers(self.node.directory) if r.get("admin")]

    def maker(self, tenant, spec, window_s: float, step_s: float):
        def make() -> LatencySource:
            admins = self.admins()
            carried, failed = ({}, {}) if not admins else router_traffic(tenant.id, admins, spec.pfs_kind)
            carrying = sorted(a for a, (count, conns) in carried.items() if count > 0 and conns > 0)
            holds = {"router": bool(carrying), "performance_schema": True}  # DEFAULT_SOURCE_ORDER's conditions
            if self.forced == "router" or next(s for s, _, _ in DEFAULT_SOURCE_ORDER if holds[s]) == "router":
                n = sum(carried[a][0] for a in carrying)
                why = (f"--latency-source router" if self.forced == "router" and not carrying else
                       f"its clients reach it through {len(carrying)} router(s) ({', '.join(carrying)}; "
                       f"{n:.0f} {spec.pfs_kind} measured before the copy)")
                self.tenants[tenant.id] = {"source": "router", "why": why, "routers": carrying}
                return RouterLatencySource(tenant.id, self.admins, kind=spec.pfs_kind, window_s=window_s,
                                           step_s=step_s)
            if not admins:
                why = "no router is announced in the directory"
            elif failed and not carried:
                why = f"no announced router answered ({'; '.join(f'{a}: {e}' for a, e in sorted(failed.items()))})"
            else:
                why = (f"none of the {len(carried)} router(s) announced carries its clients (no open connection "
                       f"with {spec.pfs_kind} measured)")
            self.tenants[tenant.id] = {"source": "performance_schema", "why": why}
            return pfs_maker(tenant, spec, window_s, step_s)()
        return make

    def to_dict(self) -> dict:
        kinds = {v["source"] for v in self.tenants.values()}
        kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "performance_schema")
        return {"kind": kind, "tenants": dict(sorted(self.tenants.items()))}


def build(node, spec: LatencySourceSpec, window_s: float, step_s: float, tenant_id: str = "",
          choice: LatencyChoice | None = None) -> LatencySource:
    choice = LatencyChoice(node, forced="router") if choice is None else choice
    choice.forced = "router"
    return population(node, spec, window_s, step_s, choice)


def seed(node, choice: LatencyChoice, spec: LatencySourceSpec, tenant_id: str, target: str | None, c,
         fetch_recent=None) -> float | None:
    """The load's latency from the routers' per-second rings (RouterLatencySource.recent): the source node's
    running tenants over the last ROUTER_SEED_S seconds, one population across tenants and routers; with the
    target guard, the target's as the server's seed reads them. None when a router does not answer or fewer
    than 3 transactions were measured (the agents' rule)."""
    admins = choice.admins()
    total_sum = total_count = 0.0
    from . import running_tenants
    for tid in running_tenants(node):
        got = RouterLatencySource(tid, lambda: admins, kind=spec.pfs_kind,
                                  fetch_recent=fetch_recent).recent(ROUTER_SEED_S)
        if got is None:
            return None
        total_sum, total_count = total_sum + got[0], total_count + got[1]
    if total_count < 3:
        return None
    return with_target(total_sum / total_count, node, tenant_id, target, c)


KIND = SourceKind("router", (), "router", parse, build, seed)
