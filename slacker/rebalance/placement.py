"""Where tenants go: the placement half of the planner, as pure logic (drain, `tenant create`).

Given each node's load and the tenants to place, every tenant goes to the eligible
node (reachable, not cordoned, not a node being emptied) that is least loaded once
the tenants placed before it are counted there: largest tenants first, so the
spread ends within one tenant's load of even and no target becomes the next hot
node. Loads closer than `quantum` (the rebalancer's --load-floor) count as equal;
then fewer tenants, then fewer bytes, then the name decide.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .planner import NodeInput, node_series, tenant_bytes, tenant_load


@dataclass(frozen=True)
class Item:
    """A tenant to place: its load (CPU s/s; 0 for a new or idle one) and what a move copies."""

    tenant: str
    load: float = 0.0
    data_bytes: int = 0
    source: str | None = None         # the node it leaves (None: a new tenant)


@dataclass
class NodeLoad:
    """A node as placement sees it."""

    name: str
    load: float = 0.0                 # CPU s/s, moves already planned or in flight counted
    tenants: int = 0
    data_bytes: int = 0
    latency_s: float | None = None
    reachable: bool = True
    cordoned: bool = False
    error: str = ""

    def why_not(self) -> str:
        """Why this node takes no tenant ('' when it may)."""
        if not self.reachable:
            return f"{self.name} unreachable" + (f" ({self.error})" if self.error else "")
        if self.cordoned:
            return f"{self.name} cordoned"
        return ""


@dataclass
class Placement:
    tenant: str
    source: str | None
    target: str
    load: float
    data_bytes: int
    target_load_before: float
    target_load_after: float
    over_limit: bool = False          # the target ends above the hot limit (nowhere better to go)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PlacementPlan:
    placements: list[Placement] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)  # tenant -> why no node can take it
    hot_limit: float | None = None
    nodes: list[NodeLoad] = field(default_factory=list)      # loads after the placements

    def target_of(self, tenant: str) -> str | None:
        return next((p.target for p in self.placements if p.tenant == tenant), None)

    def to_dict(self) -> dict:
        return asdict(self)


def _key(n: NodeLoad, quantum: float) -> tuple:
    bucket = math.floor(n.load / quantum + 1e-9) if quantum > 0 else n.load
    return (bucket, n.tenants, n.data_bytes, n.name)


def place(items: list[Item], nodes: list[NodeLoad], quantum: float = 0.05, hot_threshold: float = 0.25,
          avoid: frozenset[str] | set[str] = frozenset()) -> PlacementPlan:
    """Assign every item a target; `avoid` are nodes that take nothing here (the ones being emptied)."""
    state = {n.name: NodeLoad(**asdict(n)) for n in nodes}
    eligible = [n for n in state.values() if not n.why_not() and n.name not in avoid]
    total = sum(n.load for n in state.values() if n.reachable) + sum(i.load for i in items if i.source is None)
    hot_limit = None
    if eligible:
        mean = total / len(eligible)  # the load each would carry if it were spread evenly over them
        hot_limit = max(mean * (1 + hot_threshold), mean + quantum)
    out = PlacementPlan(hot_limit=hot_limit)
    for item in sorted(items, key=lambda i: (-i.load, -i.data_bytes, i.tenant)):
        choices = [n for n in eligible if n.name != item.source]
        if not choices:
            why = [n.why_not() or f"{n.name} is being emptied" for n in state.values() if n.name != item.source]
            out.unplaced[item.tenant] = "no node can take it: " + ("; ".join(why) or "no other node")
            continue
        best = min(choices, key=lambda n: _key(n, quantum))
        before = best.load
        best.load += item.load
        best.tenants += 1
        best.data_bytes += item.data_bytes
        if item.source in state:
            src = state[item.source]
            src.load = max(0.0, src.load - item.load)
            src.tenants = max(0, src.tenants - 1)
            src.data_bytes = max(0, src.data_bytes - item.data_bytes)
        out.placements.append(Placement(item.tenant, item.source, best.name, round(item.load, 4), item.data_bytes,
                                        round(before, 4), round(best.load, 4),
                                        hot_limit is not None and best.load > hot_limit))
    out.nodes = list(state.values())
    return out


def node_loads(inputs: list[NodeInput], cordoned: set[str] | frozenset[str], samples: int = 3,
               in_flight: list[Item] = (), targets: dict[str, str] | None = None) -> list[NodeLoad]:
    """NodeLoads from what the agents reported (as the rebalancer reads them). A tenant moving right
    now (`in_flight`, its target in `targets`) counts on its target already."""
    targets = targets or {}
    out = {}
    for n in inputs:
        if not n.reachable:
            out[n.name] = NodeLoad(n.name, reachable=False, cordoned=n.name in cordoned, error=n.error)
            continue
        ser = node_series(n.tenants, samples)
        lats = [x[1] for x in ser if x[1] is not None]
        out[n.name] = NodeLoad(n.name, load=sum(x[0] for x in ser) / max(1, len(ser)), tenants=len(n.tenants),
                               data_bytes=sum(n.size_of(t) or 0 for t in n.tenants),
                               latency_s=sum(lats) / len(lats) if lats else None, cordoned=n.name in cordoned)
    for item in in_flight:
        tgt = out.get(targets.get(item.tenant, ""))
        src = out.get(item.source or "")
        if tgt is None:
            continue
        tgt.load += item.load
        tgt.tenants += 1
        tgt.data_bytes += item.data_bytes
        if src is not None and src.reachable:
            src.load = max(0.0, src.load - item.load)
    return list(out.values())


def items_of(node: NodeInput, samples: int = 3) -> list[Item]:
    """The tenants of `node` as items to place elsewhere."""
    return [Item(tid, tenant_load(hist, samples) or 0.0, node.size_of(tid) or 0, node.name)
            for tid, hist in sorted(node.tenants.items())]
