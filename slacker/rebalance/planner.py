"""The rebalancer's decision, as pure logic: load histories and directory state in, one plan out.

No I/O and no clock: the caller passes what the agents reported, the cool-downs
and moves recorded in the directory, and `now`. So the rules (docs/rebalance.md)
are testable on recorded histories, and a dry run and `--execute` decide alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import InvalidInput
from ..sources.node import node_latency

MIN_BYTES = 1_000_000  # a tenant costs at least this much to copy (score of an empty tenant stays finite)


@dataclass(frozen=True)
class Sample:
    """One tenant over one history interval (an agent's LoadSample, as the planner needs it)."""

    t: float
    load: float | None          # CPU seconds per second of the tenant's server process
    transactions_per_s: float = 0.0
    latency_s: float | None = None
    data_bytes: int | None = None
    kind: str = "server"        # the tenant's kind: a whole server, or a database of the shared server

    @classmethod
    def from_dict(cls, d: dict) -> "Sample":
        return cls(t=float(d.get("t", 0.0)), load=d.get("cpu_s_per_s"),
                   transactions_per_s=float(d.get("transactions_per_s") or 0.0), latency_s=d.get("latency_s"),
                   data_bytes=d.get("data_bytes"), kind=str(d.get("kind") or "server"))


@dataclass
class NodeInput:
    """What one agent reported: tenant → history (oldest first), or why it could not be read."""

    name: str
    reachable: bool = True
    error: str = ""
    tenants: dict[str, list[Sample]] = field(default_factory=dict)
    # Load on the node that no move can take away: the old copies it keeps after moves (--keep-source), by
    # tenant. Counted in the node's load, never a candidate.
    fixed: dict[str, list[Sample]] = field(default_factory=dict)
    # tenant -> bytes in its data as the agent last walked them (its window's row): the size of a tenant whose
    # history has none yet (it arrived a moment ago).
    sizes: dict[str, int] = field(default_factory=dict)

    def size_of(self, tenant: str) -> int | None:
        """Bytes a move of `tenant` copies: its newest history sample's size, else the agent's walk; None if
        neither says."""
        got = tenant_bytes(self.tenants.get(tenant, []))
        return got if got is not None else self.sizes.get(tenant)


@dataclass(frozen=True)
class Move:
    """A move, in flight or done: what the directory's state records about it."""

    tenant: str
    source: str
    target: str
    started_at: float
    load: float = 0.0            # the tenant's load when it was planned
    finished_at: float | None = None
    result: str = "running"      # running | succeeded | failed | unknown

    @classmethod
    def from_dict(cls, d: dict) -> "Move":
        return cls(tenant=str(d["tenant"]), source=str(d["source"]), target=str(d["target"]),
                   started_at=float(d["started_at"]), load=float(d.get("load") or 0.0),
                   finished_at=None if d.get("finished_at") is None else float(d["finished_at"]),
                   result=str(d.get("result", "running")))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Settings:
    sla_s: float = 0.050              # per-server latency SLA
    hot_threshold: float = 0.25       # load above the cluster mean by this fraction ...
    load_floor: float = 0.05          # ... and by at least this many CPU s/s
    samples: int = 3                  # consecutive samples a node must be hot for
    min_tenant_share: float = 0.05    # a tenant below this share of its node's load is too small to matter
    min_tenant_load: float = 0.01     # ... or below this many CPU s/s
    min_gap_shrink: float = 0.2       # the source-target load gap must shrink by this fraction
    tenant_cooldown_s: float = 1800.0
    node_cooldown_s: float = 600.0
    no_return_s: float = 7200.0       # a tenant never goes back to the node it left within this
    setpoint_margin: float = 0.25     # migration setpoint: max(SLA, source latency x (1 + margin))

    def validate(self) -> "Settings":
        checks = [("--sla", self.sla_s, 0.0001, 3600.0), ("--hot-threshold", self.hot_threshold, 0.0, 10.0),
                  ("--load-floor", self.load_floor, 0.0, 1000.0), ("--samples", self.samples, 1, 1000),
                  ("--min-tenant-share", self.min_tenant_share, 0.0, 1.0),
                  ("--min-tenant-load", self.min_tenant_load, 0.0, 1000.0),
                  ("--min-gap-shrink", self.min_gap_shrink, 0.01, 1.0),
                  ("--tenant-cooldown", self.tenant_cooldown_s, 0.0, 30 * 86400.0),
                  ("--node-cooldown", self.node_cooldown_s, 0.0, 30 * 86400.0),
                  ("--no-return", self.no_return_s, 0.0, 365 * 86400.0),
                  ("--setpoint-margin", self.setpoint_margin, 0.0, 10.0)]
        for name, value, lo, hi in checks:
            if not lo <= value <= hi:
                raise InvalidInput(f"{name} {value:g} is out of range", f"it must be in [{lo:g}, {hi:g}]",
                                   "see `slacker rebalance --help`")
        if int(self.samples) != self.samples:
            raise InvalidInput(f"--samples {self.samples} is not a whole number", "", "for example --samples 3")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class State:
    """What the directory holds for the rebalancer, and who holds its lock."""

    moves: list[Move] = field(default_factory=list)  # recent moves, any result (cool-downs derive from them)
    lock_holder: str | None = None                   # another rebalancer holding the cluster lock
    lock_expires_in_s: float | None = None
    cordoned: frozenset[str] = frozenset()           # nodes that receive no tenant (`slacker node cordon`)


@dataclass
class NodeReport:
    name: str
    reachable: bool
    tenants: list[str]
    samples: int                      # history samples available (the longest of its tenants')
    load: float | None                # mean CPU s/s over the last `samples` intervals, moves in flight applied
    latency_s: float | None           # transaction-weighted mean latency over the same intervals
    transactions_per_s: float | None
    hot: bool
    reason: str
    cooldown_until: float | None = None
    error: str = ""


@dataclass
class Candidate:
    tenant: str
    node: str
    load: float | None
    transactions_per_s: float
    data_bytes: int | None
    score: float | None               # CPU s/s relieved per GB copied
    verdict: str                      # "chosen" or why not
    kind: str = "server"              # server | shared (its newest sample's)


@dataclass
class PlannedMove:
    tenant: str
    source: str
    target: str
    tenant_load: float
    data_bytes: int | None
    score: float
    source_load_before: float
    source_load_after: float
    target_load_before: float
    target_load_after: float
    gap_before: float
    gap_after: float
    source_latency_s: float | None
    setpoint_s: float
    setpoint_reason: str
    reason: str


@dataclass
class Plan:
    decision: str                     # "move" or "none"
    reason: str
    at: float
    mean_load: float | None
    hot_limit: float | None           # a node above this load (and the floor) counts as hot
    nodes: list[NodeReport]
    candidates: list[Candidate]
    move: PlannedMove | None
    in_flight: list[Move]
    settings: Settings

    def to_dict(self) -> dict:
        return asdict(self)


# ---- helpers -------------------------------------------------------------------------------

def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _tenant_window(samples: list[Sample], k: int) -> list[Sample]:
    return samples[-k:] if k > 0 else []


def tenant_load(samples: list[Sample], k: int) -> float | None:
    """A tenant's load: mean CPU s/s over its last k samples that have one."""
    return _mean([s.load for s in _tenant_window(samples, k) if s.load is not None])


def _tenant_tps(samples: list[Sample], k: int) -> float:
    return _mean([s.transactions_per_s for s in _tenant_window(samples, k)]) or 0.0


def tenant_bytes(samples: list[Sample]) -> int | None:
    for s in reversed(samples):
        if s.data_bytes is not None:
            return s.data_bytes
    return None


def node_series(tenants: dict[str, list[Sample]], k: int) -> list[tuple[float, float | None]]:
    """(load, latency) of a node for each of its last k intervals, newest first.

    Tenants' histories are aligned from their newest sample (agents sample every tenant in
    the same tick). Latency is the mean over all the node's transactions (an SLA per server).
    """
    out = []
    for i in range(k):
        at = [samples[-1 - i] for samples in tenants.values() if len(samples) > i]
        out.append((sum(s.load or 0.0 for s in at), node_latency(at, min_transactions=0.0)))
    return out


def cooldowns(moves: list[Move], settings: Settings, now: float) -> tuple[dict, dict, dict]:
    """(tenant → until, node → until, tenant → {node it left: until}) from recent moves.

    Every move counts, failed ones too: the next run may retry after the cool-down.
    """
    tenant_until: dict[str, float] = {}
    node_until: dict[str, float] = {}
    no_return: dict[str, dict[str, float]] = {}
    for m in moves:
        end = m.finished_at if m.finished_at is not None else now  # in flight: the cool-down has not begun
        t_until = end + settings.tenant_cooldown_s
        if t_until > now:
            tenant_until[m.tenant] = max(tenant_until.get(m.tenant, 0.0), t_until)
        n_until = end + settings.node_cooldown_s
        if n_until > now:
            for node in (m.source, m.target):
                node_until[node] = max(node_until.get(node, 0.0), n_until)
        if m.result != "failed" and end + settings.no_return_s > now:
            no_return.setdefault(m.tenant, {})[m.source] = end + settings.no_return_s
    return tenant_until, node_until, no_return


def setpoint_for(settings: Settings, source_latency_s: float | None) -> tuple[float, str]:
    """The migration's latency setpoint. At the SLA a node that is already above it would leave
    the controller at rate zero: the copy would never progress and the node never be relieved.
    So: the higher of the SLA and the node's current latency plus a margin, which lets the copy
    use a little headroom above today's latency without making it much worse."""
    if source_latency_s is None or source_latency_s * (1 + settings.setpoint_margin) <= settings.sla_s:
        return settings.sla_s, "the SLA (the source node is below it)"
    return (source_latency_s * (1 + settings.setpoint_margin),
            f"the source's latency {source_latency_s * 1000:.0f}ms + {settings.setpoint_margin:.0%} "
            f"(above the SLA {settings.sla_s * 1000:.0f}ms: a setpoint at the SLA would stall the copy)")


def _fmt_load(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}ms"


# ---- the plan ------------------------------------------------------------------------------

def plan_pass(nodes: list[NodeInput], state: State, settings: Settings, now: float, max_moves: int = 1) -> list[Plan]:
    """Up to `max_moves` moves for one pass, on disjoint node pairs: each plan is made as if the moves before
    it had happened (their loads moved), and no node is the source or target of two moves. The first plan
    is plan() as a one-move run makes it; the pass ends at the first plan without a move (returned too)."""
    st = State(moves=list(state.moves), lock_holder=state.lock_holder, lock_expires_in_s=state.lock_expires_in_s,
               cordoned=state.cordoned)
    plans: list[Plan] = []
    for i in range(max(1, max_moves)):
        p = plan(nodes, st, settings, now, parallel=i > 0)
        plans.append(p)
        if p.decision != "move":
            break
        mv = p.move
        st.moves.append(Move(mv.tenant, mv.source, mv.target, started_at=now, load=mv.tenant_load, result="running"))
    return plans


def plan(nodes: list[NodeInput], state: State, settings: Settings, now: float, parallel: bool = False) -> Plan:
    """Decide at most one move. Every node gets a report with its figures and why it is (not) hot.
    `parallel`: the moves in flight are this pass's (plan_pass): their nodes are neither source nor target,
    rather than holding the move back."""
    k = int(settings.samples)
    tenant_until, node_until, no_return = cooldowns(state.moves, settings, now)
    in_flight = [m for m in state.moves if m.result == "running"]
    reachable = [n for n in nodes if n.reachable]

    # Moves in flight count as done: the tenant's history leaves its source for its target. A recent
    # move whose tenant has fewer than k samples on its new node counts with the load it was moved
    # with for the missing intervals.
    eff: dict[str, dict[str, list[Sample]]] = {n.name: dict(n.tenants) for n in reachable}
    for m in state.moves:
        recent = m.finished_at is None or m.finished_at + settings.node_cooldown_s > now
        if m.result not in ("running", "succeeded", "unknown") or not recent:
            continue
        hist = eff.get(m.source, {}).pop(m.tenant, None) if m.result == "running" else None
        # A finished move counts only if the directory shows the tenant on its target (a move whose
        # outcome is unknown may have failed, and then the tenant's history is still on its source).
        if m.target in eff and (m.result == "running" or m.tenant in eff[m.target]):
            have = eff[m.target].get(m.tenant) or []
            if hist and len(hist) > len(have):
                have = hist
            pad = [Sample(t=0.0, load=m.load) for _ in range(max(0, k - len(have)))]
            eff[m.target][m.tenant] = pad + list(have)
    fixed = {n.name: {f"kept:{t}": h for t, h in n.fixed.items()} for n in reachable}
    series = {name: node_series({**tenants, **fixed[name]}, k) for name, tenants in eff.items()}

    def depth(n: NodeInput) -> int:
        return max((len(s) for s in eff[n.name].values()), default=k)  # an empty node is known: no load

    judged = [n for n in reachable if depth(n) >= k]
    means = [_mean([series[n.name][i][0] for n in judged]) for i in range(k)] if judged else []
    mean_load = _mean([sum(series[n.name][i][0] for i in range(k)) / k for n in judged])
    hot_limit = None if mean_load is None else max(mean_load * (1 + settings.hot_threshold),
                                                   mean_load + settings.load_floor)

    reports: dict[str, NodeReport] = {}
    node_load: dict[str, float] = {}
    node_lat: dict[str, float | None] = {}
    severity: dict[str, float] = {}
    for n in nodes:
        cd = node_until.get(n.name)
        if not n.reachable:
            reports[n.name] = NodeReport(n.name, False, [], 0, None, None, None, False,
                                         "unreachable: skipped (never a source or target this run)",
                                         cd, n.error)
            continue
        ser = series[n.name]
        load = sum(x[0] for x in ser) / k
        lats = [x[1] for x in ser if x[1] is not None]
        lat = _mean(lats)
        tps = sum(_tenant_tps(s, k) for s in eff[n.name].values())
        node_load[n.name], node_lat[n.name] = load, lat
        d = depth(n)
        rep = NodeReport(n.name, True, sorted(n.tenants), min(d, k), round(load, 4),
                         None if lat is None else round(lat, 6), round(tps, 2), False, "", cd)
        if d < k:
            rep.reason = f"warming up: {d} of {k} samples"
        else:
            hot_by = []
            if all(x[1] is not None and x[1] > settings.sla_s for x in ser):
                hot_by.append(f"latency {_fmt_ms(lat)} above the SLA {_fmt_ms(settings.sla_s)}")
            if all(x[0] > means[i] * (1 + settings.hot_threshold) and x[0] - means[i] >= settings.load_floor
                   for i, x in enumerate(ser)):
                hot_by.append(f"load {_fmt_load(load)} above the mean {_fmt_load(mean_load)} by "
                              f"{(load / mean_load - 1) if mean_load else 0:.0%} (> {settings.hot_threshold:.0%} "
                              f"and >= {settings.load_floor:g})")
            if hot_by:
                rep.hot = True
                rep.reason = f"hot for {k} samples: " + "; ".join(hot_by)
                severity[n.name] = max((lat or 0.0) / settings.sla_s,
                                       load / hot_limit if hot_limit else 0.0)
            else:
                bits = []
                if any(x[1] is not None and x[1] > settings.sla_s for x in ser):
                    bits.append("latency above the SLA in some but not all samples")
                if any(x[0] > means[i] * (1 + settings.hot_threshold) and x[0] - means[i] >= settings.load_floor
                       for i, x in enumerate(ser)):
                    bits.append("load above the limit in some but not all samples")
                rep.reason = "not hot" + (f" ({'; '.join(bits)})" if bits else "")
        if cd is not None:
            rep.reason += f"; in cool-down for {cd - now:.0f}s more"
        if n.name in state.cordoned:
            rep.reason += "; cordoned (never a target)"
        reports[n.name] = rep

    def done(decision: str, reason: str, candidates=(), move=None) -> Plan:
        if (decision != "move" and (node_until or tenant_until) and "cool-down" not in reason
                and not state.lock_holder and not in_flight):
            # Right after a move its nodes and tenant rest: say so, whatever else held this run back.
            parts = [f"{n} {u - now:.0f}s" for n, u in sorted(node_until.items())]
            parts += [f"{t} {u - now:.0f}s" for t, u in sorted(tenant_until.items())]
            reason += f" (in cool-down after recent moves: {', '.join(parts)})"
        return Plan(decision, reason, now, None if mean_load is None else round(mean_load, 4),
                    None if hot_limit is None else round(hot_limit, 4),
                    [reports[n.name] for n in nodes], list(candidates), move, in_flight, settings)

    if state.lock_holder:
        left = f" (expires in {state.lock_expires_in_s:.0f}s)" if state.lock_expires_in_s is not None else ""
        return done("none", f"another rebalancer holds the cluster lock: {state.lock_holder}{left}; one move at "
                            "a time")
    busy = {x for m in in_flight for x in (m.source, m.target)} if parallel else set()
    if in_flight and not parallel:
        m = in_flight[0]
        return done("none", f"a move is in flight ({m.tenant} {m.source} -> {m.target}); one move at a time")
    hot = sorted((n for n in reachable if reports[n.name].hot and n.name not in busy), key=lambda n: -severity[n.name])
    if not hot:
        return done("none", f"no node was hot for {k} consecutive samples"
                    + (" (but those already in this pass's moves)" if busy else ""))
    cool = [n for n in reachable if not reports[n.name].hot and depth(n) >= k]
    if not cool:
        return done("none", "every reachable node is hot or still warming up: a move would only shift the load "
                            "(add capacity, or raise --sla)")

    candidates: list[Candidate] = []
    reasons: list[str] = []
    for src in hot:
        if src.name in node_until:
            reasons.append(f"{src.name} is hot but in cool-down for {node_until[src.name] - now:.0f}s more")
            continue
        src_load = node_load[src.name]
        tenants = []
        for tid, samples in eff[src.name].items():
            load = tenant_load(samples, k)
            tps = _tenant_tps(samples, k)
            size = tenant_bytes(samples)
            size = src.sizes.get(tid) if size is None else size
            score = None if load is None else load / (max(size or 0, MIN_BYTES) / 1e9)
            tenants.append(Candidate(tid, src.name, None if load is None else round(load, 4), round(tps, 2), size,
                                     None if score is None else round(score, 4), "",
                                     samples[-1].kind if samples else "server"))
        floor = max(settings.min_tenant_load, settings.min_tenant_share * src_load)
        ordered = sorted(tenants, key=lambda c: (-(c.score or 0.0), -c.transactions_per_s, c.tenant))
        node_candidates = []
        for c in ordered:
            if len(eff[src.name]) == 1:
                c.verdict = "the node's only tenant: moving it would move the hot spot, not relieve it"
            elif c.tenant in tenant_until:
                c.verdict = f"moved recently: in cool-down for {tenant_until[c.tenant] - now:.0f}s more"
            elif c.load is None:
                c.verdict = "no load samples"
            elif c.load < floor:
                c.verdict = f"too small to matter (load {_fmt_load(c.load)} < {_fmt_load(floor)})"
            node_candidates.append(c)
        for c in node_candidates:
            if c.verdict:
                continue
            best = None
            why_not = []
            for tgt in sorted(cool, key=lambda n: (node_load[n.name], n.name)):
                if tgt.name == src.name:
                    continue
                t_load = node_load[tgt.name]
                if tgt.name in state.cordoned:
                    why_not.append(f"{tgt.name}: cordoned")
                    continue
                if tgt.name in busy:
                    why_not.append(f"{tgt.name}: in another move of this pass")
                    continue
                if tgt.name in node_until:
                    why_not.append(f"{tgt.name}: in cool-down")
                    continue
                left_until = no_return.get(c.tenant, {}).get(tgt.name)
                if left_until is not None:
                    why_not.append(f"{tgt.name}: {c.tenant} left it {settings.no_return_s - (left_until - now):.0f}s "
                                   "ago (no ping-pong)")
                    continue
                if node_lat[tgt.name] is not None and node_lat[tgt.name] >= settings.sla_s:
                    why_not.append(f"{tgt.name}: latency {_fmt_ms(node_lat[tgt.name])} at or above the SLA")
                    continue
                after_t = t_load + c.load
                if hot_limit is not None and after_t > hot_limit:
                    why_not.append(f"{tgt.name}: would reach {_fmt_load(after_t)} > limit {_fmt_load(hot_limit)}")
                    continue
                gap_before = src_load - t_load
                after_s = src_load - c.load
                gap_after = abs(after_s - after_t)
                if gap_after > gap_before * (1 - settings.min_gap_shrink):
                    why_not.append(f"{tgt.name}: load gap {_fmt_load(gap_before)} -> {_fmt_load(gap_after)} does "
                                   f"not shrink by {settings.min_gap_shrink:.0%}")
                    continue
                best = (tgt, t_load, after_s, after_t, gap_before, gap_after)
                break
            if best is None:
                c.verdict = "no target: " + ("; ".join(why_not) or "no other node")
                continue
            tgt, t_load, after_s, after_t, gap_before, gap_after = best
            c.verdict = "chosen"
            setpoint, sp_reason = setpoint_for(settings, node_lat[src.name])
            move = PlannedMove(
                tenant=c.tenant, source=src.name, target=tgt.name, tenant_load=c.load, data_bytes=c.data_bytes,
                score=c.score or 0.0, source_load_before=round(src_load, 4), source_load_after=round(after_s, 4),
                target_load_before=round(t_load, 4), target_load_after=round(after_t, 4),
                gap_before=round(gap_before, 4), gap_after=round(gap_after, 4),
                source_latency_s=node_lat[src.name], setpoint_s=round(setpoint, 6), setpoint_reason=sp_reason,
                reason=f"{src.name} {reports[src.name].reason}; {c.tenant}{' (shared)' if c.kind == 'shared' else ''} "
                       "relieves the most load per byte copied "
                       f"({_fmt_load(c.load)} CPU s/s, {c.score:.3g} per GB); {tgt.name} stays below the limit "
                       f"({_fmt_load(t_load)} -> {_fmt_load(after_t)})")
            for other in node_candidates:
                if not other.verdict:
                    other.verdict = f"not needed: {c.tenant} ranks higher"
            candidates.extend(node_candidates)
            return done("move", f"move {c.tenant} {src.name} -> {tgt.name}", candidates, move)
        candidates.extend(node_candidates)
        reasons.append(f"{src.name} is hot but no tenant of it can move: "
                       + "; ".join(f"{c.tenant}: {c.verdict}" for c in node_candidates) if node_candidates
                       else f"{src.name} is hot but has no tenants with samples")
    return done("none", "; ".join(reasons), candidates)
