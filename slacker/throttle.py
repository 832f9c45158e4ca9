"""Wiring the latency-targeting controller into a migration (`slacker migrate --setpoint`).

Builds the latency source(s) from --latency-source specs, checks up front that
they answer and that the setpoint is above the latency measured before the copy
(unless --force), and hands the migration a RatePolicy that its tick steps every
`--step`. Runtime changes (`slacker migrate --set`) land in `apply_settings`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from . import sources
from .controller.loop import CopyRate, RatePolicy
from .controller.metrics import ControllerMetrics
from .controller.settings import ControllerSettings
from .controller.verdict import load_latency
from .errors import BlindLatencySource, InvalidInput, LatencySourceError, TargetLatencyError
from .latency import GuardedSource, LatencySample, LatencySource, MaxOf, NodeCountersSource
from .sources.router import LatencyChoice

# Per transaction, all of the node's tenants (an SLA per server): as the routers in the clients' path measure it
# for a tenant reached through one, else as the server does (performance_schema): LatencyChoice, in the order
# of DEFAULT_SOURCE_ORDER. The server's as a spec:
DEFAULT_SOURCES = ("performance-schema,table=transactions,exclude-user=slacker",)


def build_source(node, spec_text: str, window_s: float, step_s: float, tenant_id: str = "",
                 choice: LatencyChoice | None = None) -> LatencySource:
    """The source a --latency-source spec names (its kind's build, slacker.sources), watched against the
    tenants' own commit counters: "no samples while the server commits" is a visible failure (WatchedSource)."""
    return sources.build(node, sources.parse(spec_text), window_s, step_s, tenant_id, choice)


def build_target_guard(node, target: str, tenant_id: str, window_s: float, step_s: float) -> NodeCountersSource:
    """Every tenant on the target node (but the one arriving), read from the target agent's counters."""
    peer = node.peer(target)

    def fetch() -> dict:
        # Short timeout: a step must not wait on a slow agent (a failed read holds, then cuts, the rate).
        return peer.request("GET", "/v1/tenant-stats", query={"counters": 1, "history": 0, "exclude": tenant_id},
                            timeout_s=min(2.0, max(0.5, step_s)))

    return NodeCountersSource(fetch, name=f"target:{target}", window_s=window_s, step_s=step_s)


def build_rate_policy(node, tenant_id: str, options, guards=None) -> RatePolicy:
    """Build the latency source(s) and the controller `options.controller` (ControllerSettings) names, and
    measure the latency before any byte moves. `guards` (slacker.controller.budget.TargetGuards): the
    target guard is read through it, so later moves sharing the node's budget add theirs."""
    c: ControllerSettings = options.controller
    specs = list(c.latency_sources or DEFAULT_SOURCES)
    # The default: per tenant, the routers' latency where its clients go through one, else the server's.
    choice = LatencyChoice(node) if not c.latency_sources or any(
        sources.parse(s).kind == "router" for s in specs) else None
    built = [build_source(node, s, c.window_s, c.step_s, tenant_id, choice=choice) for s in specs]
    source = built[0] if len(built) == 1 else MaxOf(built)
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
    kind = choice.to_dict()["kind"] if choice is not None and not c.latency_sources else None
    guarded = options.target if c.target_guard and c.steered else None
    seed = sources.seed(kind, node, choice, sources.parse(specs[0]), tenant_id, guarded, c)
    seed_from = "router window" if kind == "router" else "agent history"
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
