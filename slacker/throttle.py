"""Wiring the latency-targeting controller into a migration (`slacker migrate --setpoint`).

Builds the latency source(s) from --latency-source specs, checks up front that
they answer and that the setpoint is above the latency measured before the copy
(unless --force), and hands the migration a RatePolicy that its tick steps every
`--step`. Runtime changes (`slacker migrate --set`) land in `apply_settings`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from . import mariadb
from .controller.loop import CopyRate, RatePolicy
from .controller.metrics import ControllerMetrics
from .controller.settings import ControllerSettings
from .controller.verdict import load_latency
from .errors import BlindLatencySource, InvalidInput, LatencySourceError, TargetLatencyError
from .latency import (FollowingTenants, LatencySample, CommitCounter, GuardedSource, LatencySource, MaxOf, NodeCountersSource,
                      PerformanceSchemaSource, PrometheusHistogramSource, RouterLatencySource, WatchedSource,
                      DEFAULT_SOURCE_ORDER, parse_latency_source_spec, router_traffic)

# Per transaction, all of the node's tenants (an SLA per server): as the routers in the clients' path measure it
# for a tenant reached through one, else as the server does (performance_schema): LatencyChoice, in the order
# of DEFAULT_SOURCE_ORDER. The server's as a spec:
DEFAULT_SOURCES = ("performance-schema,table=transactions,exclude-user=slacker",)


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
        from .router.control import registered_routers

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
            return _pfs_maker(tenant, spec, window_s, step_s)()
        return make

    def to_dict(self) -> dict:
        kinds = {v["source"] for v in self.tenants.values()}
        kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "performance_schema")
        return {"kind": kind, "tenants": dict(sorted(self.tenants.items()))}


def build_source(node, spec_text: str, window_s: float, step_s: float, tenant_id: str = "",
                 choice: LatencyChoice | None = None) -> LatencySource:
    """The source a --latency-source spec names, watched against the tenants' own commit counters.

    The watch turns "no samples while the server commits" into a visible failure
    (WatchedSource): a Prometheus endpoint is checked against the migrating
    tenant, performance_schema against every tenant it reads.
    """
    spec = parse_latency_source_spec(spec_text)
    if spec.kind == "prometheus":
        inner: LatencySource = PrometheusHistogramSource(
            spec.url, spec.metric_name, dict(spec.labels) or None, window_s=window_s, step_s=step_s,
            name=f"prometheus:{spec.url}")
        watched = [t for t in node.tenants.list() if t.id == tenant_id]
    else:
        if spec.node != "source":
            raise InvalidInput(f"latency source {spec_text!r} is not supported",
                               "performance_schema can only be read on the source node",
                               "export the target's latency over Prometheus and use prometheus,url=...")
        # A per-server SLA (paper §5.6): every tenant of the source node counts, weighted by its traffic,
        # those that leave or arrive while this migration runs (concurrent moves) included.
        if spec.kind == "router":
            choice = LatencyChoice(node, forced="router") if choice is None else choice
            choice.forced = "router"

        def members() -> dict:
            out = {t.id: (choice.maker(t, spec, window_s, step_s) if choice is not None
                          else _pfs_maker(t, spec, window_s, step_s), lambda t=t: CommitCounter(_connector(t)))
                   for t in node.tenants.list() if t.info.desired_state == "running"}
            server = _shared_server(node)
            if server is not None:
                # Its tenants share one server: read once for all of them, its own performance_schema (the
                # routers' figures are per tenant; a server's is the one every tenant on it pays).
                out[SHARED_MEMBER] = (_pfs_maker(server, spec, window_s, step_s),
                                      lambda: CommitCounter(_connector(server)))
            return out

        if not members():
            raise InvalidInput("no tenant to read latency from", f"node {node.name} runs none", "")
        return FollowingTenants(members, window_s=window_s, step_s=step_s)
    if not watched:
        return inner
    return WatchedSource(inner, [CommitCounter(_connector(t)) for t in watched], window_s=window_s, step_s=step_s)


SHARED_MEMBER = "_shared"  # the node's shared server among the latency source's members (no tenant id starts with _)


def _shared_server(node):
    """The node's shared server when it holds a tenant and runs, else None."""
    manager = getattr(node, "kinds", {}).get("shared")  # reflective: the unit tests' fake nodes have no kinds
    if manager is None or not manager.list():
        return None
    server = manager.server.get()
    return server if server is not None and server.is_running() else None


def build_target_guard(node, target: str, tenant_id: str, window_s: float, step_s: float) -> NodeCountersSource:
    """Every tenant on the target node (but the one arriving), read from the target agent's counters."""
    peer = node.peer(target)

    def fetch() -> dict:
        # Short timeout: a step must not wait on a slow agent (a failed read holds, then cuts, the rate).
        return peer.request("GET", "/v1/tenant-stats", query={"counters": 1, "history": 0, "exclude": tenant_id},
                            timeout_s=min(2.0, max(0.5, step_s)))

    return NodeCountersSource(fetch, name=f"target:{target}", window_s=window_s, step_s=step_s)


def _pfs_maker(tenant, spec, window_s: float, step_s: float):
    return lambda: PerformanceSchemaSource(
        _connector(tenant), kind=spec.pfs_kind, users=spec.users,
        exclude_users=spec.exclude_users or mariadb.SERVICE_USERS, window_s=window_s, step_s=step_s,
        name=f"performance_schema:{tenant.id}")


def _connector(tenant):
    return lambda: tenant.admin_connect(timeout_s=2)


def build_rate_policy(node, tenant_id: str, options, guards=None) -> RatePolicy:
    """Build the latency source(s) and the controller `options.controller` (ControllerSettings) names, and
    measure the latency before any byte moves. `guards` (slacker.controller.budget.TargetGuards): the
    target guard is read through it, so later moves sharing the node's budget add theirs."""
    c: ControllerSettings = options.controller
    specs = list(c.latency_sources or DEFAULT_SOURCES)
    # The default: per tenant, the routers' latency where its clients go through one, else the server's.
    choice = LatencyChoice(node) if not c.latency_sources or any(
        parse_latency_source_spec(s).kind == "router" for s in specs) else None
    sources = [build_source(node, s, c.window_s, c.step_s, tenant_id, choice=choice) for s in specs]
    source = sources[0] if len(sources) == 1 else MaxOf(sources)
    if c.target_guard and c.steered and options.target:
        # Both ends guarded by default (paper §6): the target node's tenants against their own setpoint.
        holder: dict = {}
        guard = build_target_guard(node, options.target, tenant_id, c.window_s, c.step_s)
        if guards is not None:
            guards.add(tenant_id, guard)
            guard = guards
        source = GuardedSource(source, guard,
                               setpoint=lambda: holder["ctl"].setpoint_s if "ctl" in holder else c.setpoint_s,
                               target_setpoint=lambda: c.target_setpoint_s or (
                                   holder["ctl"].setpoint_s if "ctl" in holder else c.setpoint_s))
    else:
        holder = None
    # The load's latency before the copy: the agents' own per-tenant window (slacker.agent.tenant_stats, the last
    # 10 s) answers at once where the source reads the servers' figures, the routers' per-second rings (the last
    # 10 s, router/latency.go) where it reads every tenant's routers; a mixed population, or a figure over the
    # setpoint (to refuse, or admit with --force, on a fresh measure), is measured here.
    # Only for the default source: the agents' window and the rings hold the same figures it reads (Slacker's own
    # users left out), so what they saw this source sees too; a source given by hand (a user filter, another
    # endpoint) may see something else -- even nothing (blind), which only reads over a window tell.
    seed, seed_from = None, "agent history"
    kind = choice.to_dict()["kind"] if choice is not None and not c.latency_sources else None
    guarded = options.target if c.target_guard and c.steered else None
    if kind == "performance_schema":
        seed = history_baseline(node, tenant_id, guarded, c)
    elif kind == "router":
        seed = router_baseline(node, choice, parse_latency_source_spec(specs[0]).pfs_kind, tenant_id, guarded, c)
        seed_from = "router window"
    baseline = measure(source, c.window_s, c.step_s, setpoint_s=None if c.force else c.setpoint_s, seed=seed)
    if not baseline.ok:
        source.close()
        if issubclass(baseline.failure, BlindLatencySource):
            raise BlindLatencySource("the latency source sees no transactions", baseline.error,
                                     "nothing was copied; check --latency-source (user=/exclude-user= filters, "
                                     "or the tenant's performance_schema)")
        if issubclass(baseline.failure, TargetLatencyError):
            raise TargetLatencyError(f"cannot read the target node's latency ({options.target})", baseline.error,
                                     "nothing was copied; check the target agent, or pass --no-target-guard")
        raise LatencySourceError("cannot read the latency source", baseline.error or "no answer",
                                 "check --latency-source; nothing was copied")
    # A drain's or the rebalancer's move: its setpoint, chosen from the servers' figures, at least the load's own
    # latency as this source reads it (+ the headroom): a setpoint under what the load alone reads stops the copy.
    setpoint_s, raised = c.setpoint_over(baseline.latency_s) if c.steered else (c.setpoint_s, "")
    if raised:
        c = replace(c, setpoint_s=setpoint_s)
    if (baseline.latency_s is not None and baseline.latency_s >= c.setpoint_s and not c.force and c.steered):
        source.close()
        sides = source.sides or {}
        how = f"the median of {baseline.seconds} one-second means before any copying"
        if sides.get("binding") == "target":
            raise InvalidInput(f"the target node {options.target} is already over its setpoint",
                               f"its tenants' latency is {sides['target_latency_s'] * 1000:.0f}ms against "
                               f"{sides['target_setpoint_s'] * 1000:.0f}ms ({how})",
                               "the copy could never run: raise --target-setpoint, pass --no-target-guard or --force")
        raise InvalidInput(f"setpoint {c.setpoint_s * 1000:.0f}ms is below the latency measured now",
                           f"{baseline.latency_s * 1000:.0f}ms, {how}",
                           "the copy could never run: raise --setpoint, or pass --force")
    controller = c.build()
    if holder is not None:
        holder["ctl"] = controller
    options.step_s = c.step_s
    policy = RatePolicy(source, controller, metrics=ControllerMetrics.on(node.registry), tenant=tenant_id)
    policy.set_baseline(baseline.latency_s)
    policy.baseline_from = seed_from if baseline.from_history else "measured"
    policy.baseline_idle = baseline.empty
    policy.kind = c.kind
    policy.latency_source = choice.to_dict() if choice is not None else {
        "kind": "given", "why": "--latency-source " + " ".join(specs), "tenants": {}}
    # where the load's own latency before the copy came from: the agents' windows (at once) or measured here
    policy.latency_source["load_latency_from"] = policy.baseline_from
    if raised:
        policy.latency_source["setpoint"] = {"setpoint_s": round(c.setpoint_s, 6), "why": raised}
    # No --max-rate given: the controller's max is a nominal scale, not a cap the operator asked for,
    # so at its maximum the pipe runs at full speed (the copy is never slower than unthrottled
    # when nothing binds). A --max-rate the operator gave stays a cap.
    policy.unthrottled_at_max = c.max_rate_bytes_per_s is None and c.steered
    return policy


@dataclass(frozen=True)
class Baseline:
    """The latency before any byte moves: `latency_s` the median of `seconds` one-second means (the load's own
    latency as the controller's verdict reads it, slacker.controller.verdict.load_latency), or the failed or
    empty sample that ended the measure."""

    sample: LatencySample
    latency_s: float | None
    seconds: int
    from_history: bool = False  # the agents' per-tenant window, not measured here

    @property
    def ok(self) -> bool:
        return self.sample.ok

    @property
    def empty(self) -> bool:
        return self.latency_s is None and self.sample.ok

    @property
    def failure(self):
        return self.sample.failure

    @property
    def error(self) -> str:
        return self.sample.error


def measure(source: LatencySource, window_s: float, step_s: float | None = None, seconds: int = 5,
            setpoint_s: float | None = None, seed: float | None = None) -> Baseline:
    """The load's own latency before any byte moves: one read per step for `seconds` steps (at least the
    window), the median of the steps' own means. One noisy second neither refuses nor admits a setpoint.
    Every second already under `setpoint_s` after three: no need to wait for the rest. `seed`: the latency the
    agents' history (or the routers' rings) gives, taken at once (after one read that shows the source answers)
    when it is under the setpoint: nothing is refused on it."""
    first = source.read()
    if not first.ok:
        return Baseline(first, None, 0)
    if seed is not None and (setpoint_s is None or seed < setpoint_s):
        return Baseline(first, seed, 0, from_history=True)
    step = window_s if step_s is None else max(0.05, min(step_s, window_s))
    deadline = time.monotonic() + max(window_s, (seconds + 1) * step)  # a quiet tenant: no longer
    means: list[float] = []
    while True:
        time.sleep(max(0.0, min(step, deadline - time.monotonic())))
        sample = source.read()
        if not sample.ok:
            return Baseline(sample, None, len(means))
        y = sample.last_latency_s
        if y is None and sample.last_count is None:
            y = sample.latency_s  # a source that gives no per-step share: its window
        if y is not None:
            means.append(y)
        done = len(means) >= seconds or time.monotonic() >= deadline - 0.01
        early = setpoint_s is not None and len(means) >= 3 and max(means) < setpoint_s
        if done or early:
            return Baseline(sample, load_latency(means), len(means))


def _weighted_latency(rows: list[dict], exclude: set[str]) -> float | None:
    """The mean transaction latency over tenants' windows (TenantStat dicts), weighted by their transactions;
    None when a running tenant has no sample yet or failed, or fewer than 3 transactions in all."""
    rows = [r for r in rows if r.get("tenant") not in exclude]
    if any(not r.get("ok", True) for r in rows):
        return None
    weight = sum(r["transactions_per_s"] * r["window_s"] for r in rows if r.get("latency_s") is not None)
    if weight < 3:
        return None
    return sum(r["latency_s"] * r["transactions_per_s"] * r["window_s"] for r in rows
               if r.get("latency_s") is not None) / weight


def history_baseline(node, tenant_id: str, target: str | None, c: ControllerSettings) -> float | None:
    """The load's latency from the agents' per-tenant windows (slacker.agent.tenant_stats): the source node's
    tenants, and with the target guard the target's (in the source's setpoint terms, as GuardedSource reads
    them); None when either is not known (a tenant not sampled yet, an idle node, an agent that does not answer)."""
    stats = node.tenant_stats
    if stats is None:
        return None
    snap = stats.snapshot()
    running = [t.id for t in node.tenants.list() if t.info.desired_state == "running"]
    if any(tid not in snap for tid in running):
        return None
    own = _weighted_latency([snap[tid].to_dict() for tid in running], set())
    return _with_target(own, node, tenant_id, target, c)


ROUTER_SEED_S = 10  # the routers' seconds read for the seed: as long as the agents' per-tenant window


def router_baseline(node, choice: LatencyChoice, kind: str, tenant_id: str, target: str | None,
                    c: ControllerSettings, fetch_recent=None) -> float | None:
    """The load's latency from the routers' per-second rings (RouterLatencySource.recent): the source node's
    running tenants over the last ROUTER_SEED_S seconds, one population across tenants and routers; with the
    target guard, the target's as history_baseline reads them. None when a router does not answer or fewer
    than 3 transactions were measured (the agents' rule)."""
    admins = choice.admins()
    total_sum = total_count = 0.0
    for t in node.tenants.list():
        if t.info.desired_state != "running":
            continue
        got = RouterLatencySource(t.id, lambda: admins, kind=kind, fetch_recent=fetch_recent).recent(ROUTER_SEED_S)
        if got is None:
            return None
        total_sum, total_count = total_sum + got[0], total_count + got[1]
    if total_count < 3:
        return None
    return _with_target(total_sum / total_count, node, tenant_id, target, c)


def _with_target(own: float | None, node, tenant_id: str, target: str | None, c: ControllerSettings) -> float | None:
    """`own` (the source node's load latency) and, with the target guard, the target agent's tenants' window
    in the source's setpoint terms (as GuardedSource reads them): the larger share of its setpoint."""
    if own is None or target is None:
        return own
    try:
        doc = node.peer(target).request("GET", "/v1/tenant-stats", query={"history": 0}, timeout_s=1.0)
    except Exception:  # noqa: BLE001 - not known: measured instead
        return None
    rows = [r for r in doc.get("tenants") or [] if r.get("tenant") != tenant_id]
    theirs = _weighted_latency(rows, set())
    if theirs is None:
        # an idle target gives no evidence (as GuardedSource reads it); one not sampled or failing: measured
        idle = all(r.get("ok", True) for r in rows)
        return own if idle else None
    tsp = c.target_setpoint_s or c.setpoint_s
    return max(own / c.setpoint_s, theirs / tsp) * c.setpoint_s


def apply_settings(migration, body: dict) -> None:
    """`slacker migrate --set`: setpoint, max rate, fixed rate, pause, resume — live."""
    policy: CopyRate | None = migration.rate_policy
    known = {"setpoint_s", "max_rate_bytes_per_s", "rate_bytes_per_s", "pause", "resume"}
    unknown = set(body) - known
    if unknown:
        raise InvalidInput(f"unknown setting(s) {', '.join(sorted(unknown))}", f"known: {', '.join(sorted(known))}", "")
    if policy is None:
        if {"setpoint_s", "max_rate_bytes_per_s"} & set(body):
            raise InvalidInput("this migration has no latency controller",
                               "setpoint and max-rate need a migration started with --setpoint",
                               "use rate=, pause or resume")
        if "rate_bytes_per_s" in body:
            migration.fixed_rate(float(body["rate_bytes_per_s"]))
        if body.get("pause"):
            migration.pause()
        if body.get("resume"):
            migration.resume()
        return
    if "rate_bytes_per_s" in body:
        raise InvalidInput("this migration is steered by its controller", "a fixed rate would fight it",
                           "change setpoint= or max-rate= instead")
    if "setpoint_s" in body:
        policy.set_setpoint(float(body["setpoint_s"]))  # a share of the node's budget: the strictest member's
    if "max_rate_bytes_per_s" in body:
        policy.controller.set_max_rate(float(body["max_rate_bytes_per_s"]))
        policy.unthrottled_at_max = False  # a max the operator gives is a cap
    if body.get("pause"):
        policy.pause(True)
        if migration.pipe is not None:
            migration.pipe.set_rate(0)
    if body.get("resume"):
        policy.pause(False)
