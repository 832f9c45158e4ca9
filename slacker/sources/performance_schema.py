"""`--latency-source performance-schema[,table=transactions|statements][,user=U][,exclude-user=U]`: the
server's own per-transaction (or per-statement) time, every running tenant of the source node one population
weighted by its traffic (tenants that leave or arrive while the move runs included), a node's shared server
read once for all its tenants; Slacker's own users left out by default. Its seed: the agents' per-tenant
windows (slacker.agent.tenant_stats, the last 10 s)."""

from __future__ import annotations

from .. import mariadb
from ..errors import InvalidInput
from ..latency import (FollowingTenants, CommitCounter, LatencySource, LatencySourceSpec, PerformanceSchemaSource)
from ..mariadb.perfschema import PFS_TABLES
from . import SPEC_HINT, SourceKind
from .node import node_latency

SHARED_MEMBER = "_shared"  # the node's shared server among the latency source's members (no tenant id starts with _)


def parse(text: str, pairs: list[tuple[str, str]], node: str) -> LatencySourceSpec:
    pfs_kind, users, excluded = "transactions", [], []
    for key, value in pairs:
        if key == "table":
            pfs_kind = value
        elif key == "user":
            users.append(value)
        elif key == "exclude-user":
            excluded.append(value)
        else:
            raise InvalidInput(f"invalid latency source {text!r}", f"unknown key {key!r} for performance-schema",
                               SPEC_HINT)
    if pfs_kind not in PFS_TABLES:
        raise InvalidInput(f"invalid latency source {text!r}", "table must be statements or transactions", SPEC_HINT)
    return LatencySourceSpec("performance-schema", pfs_kind=pfs_kind, users=tuple(users),
                             exclude_users=tuple(excluded), node=node)


def connector(tenant):
    return lambda: tenant.admin_connect(timeout_s=2)


def pfs_maker(tenant, spec: LatencySourceSpec, window_s: float, step_s: float):
    return lambda: PerformanceSchemaSource(
        connector(tenant), kind=spec.pfs_kind, users=spec.users,
        exclude_users=spec.exclude_users or mariadb.SERVICE_USERS, window_s=window_s, step_s=step_s,
        name=f"performance_schema:{tenant.id}")


def shared_server(node):
    """The node's shared server when it holds a tenant and runs, else None."""
    manager = getattr(node, "kinds", {}).get("shared")  # reflective: the unit tests' fake nodes have no kinds
    if manager is None or not manager.list():
        return None
    server = manager.server.get()
    return server if server is not None and server.is_running() else None


def population(node, spec: LatencySourceSpec, window_s: float, step_s: float, choice=None) -> LatencySource:
    """Every running tenant of the node, each read by `choice` (the default's per-tenant choice: its routers'
    or its server's) or by its server, one population following the tenants as they come and go."""
    def members() -> dict:
        out = {t.id: (choice.maker(t, spec, window_s, step_s) if choice is not None
                      else pfs_maker(t, spec, window_s, step_s), lambda t=t: CommitCounter(connector(t)))
               for t in node.tenants.list() if t.info.desired_state == "running"}
        server = shared_server(node)
        if server is not None:
            # Its tenants share one server: read once for all of them, its own performance_schema (the
            # routers' figures are per tenant; a server's is the one every tenant on it pays).
            out[SHARED_MEMBER] = (pfs_maker(server, spec, window_s, step_s), lambda: CommitCounter(connector(server)))
        return out

    if not members():
        raise InvalidInput("no tenant to read latency from", f"node {node.name} runs none", "")
    return FollowingTenants(members, window_s=window_s, step_s=step_s)


def build(node, spec: LatencySourceSpec, window_s: float, step_s: float, tenant_id: str = "",
          choice=None) -> LatencySource:
    if spec.node != "source":
        raise InvalidInput(f"latency source {spec.kind} on the {spec.node} is not supported",
                           "performance_schema can only be read on the source node",
                           "export the target's latency over Prometheus and use prometheus,url=...")
    # A per-server SLA (paper §5.6): every tenant of the source node counts, weighted by its traffic.
    return population(node, spec, window_s, step_s, choice)


def seed(node, choice, spec: LatencySourceSpec, tenant_id: str, target: str | None, c) -> float | None:
    """The load's latency from the agents' per-tenant windows (slacker.agent.tenant_stats): the source node's
    tenants, and with the target guard the target's (in the source's setpoint terms, as GuardedSource reads
    them); None when either is not known (a tenant not sampled yet, an idle node, an agent that does not answer)."""
    stats = node.tenant_stats
    if stats is None:
        return None
    snap = stats.snapshot()
    from . import running_tenants
    running = running_tenants(node)
    if any(tid not in snap for tid in running):
        return None
    own = node_latency([snap[tid].to_dict() for tid in running], failed="unknown")
    return with_target(own, node, tenant_id, target, c)


def with_target(own: float | None, node, tenant_id: str, target: str | None, c) -> float | None:
    """`own` (the source node's load latency) and, with the target guard, the target agent's tenants' window
    in the source's setpoint terms (as GuardedSource reads them): the larger share of its setpoint."""
    if own is None or target is None:
        return own
    try:
        doc = node.peer(target).request("GET", "/v1/tenant-stats", query={"history": 0}, timeout_s=1.0)
    except Exception:  # noqa: BLE001 - not known: measured instead
        return None
    rows = doc.get("tenants") or []
    theirs = node_latency(rows, exclude=[tenant_id], failed="unknown")
    if theirs is None:
        # an idle target gives no evidence (as GuardedSource reads it); one not sampled or failing: measured
        idle = all(r.get("ok", True) for r in rows if r.get("tenant") != tenant_id)
        return own if idle else None
    tsp = c.target_setpoint_s or c.setpoint_s
    return max(own / c.setpoint_s, theirs / tsp) * c.setpoint_s


KIND = SourceKind("performance-schema", ("performance_schema", "pfs"), "performance_schema", parse, build, seed)
