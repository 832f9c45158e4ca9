"""Wiring the latency-targeting controller into a migration (`slacker migrate --setpoint`).

Builds the latency source(s) from --latency-source specs, checks up front that
they answer and that the setpoint is above the latency measured before the copy
(unless --force), and hands the migration a RatePolicy that its tick steps every
`--step`. Runtime changes (`slacker migrate --set`) land in `apply_settings`.
"""

from __future__ import annotations

import time

from . import mariadb
from .controller.baselines import FixedRate, ThresholdThrottle
from .controller.loop import RatePolicy
from .controller.metrics import ControllerMetrics
from .controller.pid import ThrottleConfig
from .controller.model import ModelController
from .controller.slack import SlackController
from .errors import InvalidInput
from .latency import (CommitCounter, FollowingTenants, GuardedSource, LatencySource, MaxOf, NodeCountersSource,
                      PerformanceSchemaSource, PrometheusHistogramSource, WatchedSource, parse_latency_source_spec)

DEFAULT_MAX_RATE = 200_000_000
# Per transaction, server-side, all of the node's tenants (an SLA per server).
DEFAULT_SOURCES = ("performance-schema,table=transactions,exclude-user=slacker",)
KINDS = ("slack", "model", "pid", "threshold", "fixed")


def build_source(node, spec_text: str, window_s: float, step_s: float, tenant_id: str = "") -> LatencySource:
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
        def members() -> dict:
            return {t.id: (_pfs_maker(t, spec, window_s, step_s), lambda t=t: CommitCounter(_connector(t)))
                    for t in node.tenants.list() if t.info.desired_state == "running"}

        if not members():
            raise InvalidInput("no tenant to read latency from", f"node {node.name} runs none", "")
        return FollowingTenants(members, window_s=window_s, step_s=step_s)
    if not watched:
        return inner
    return WatchedSource(inner, [CommitCounter(_connector(t)) for t in watched], window_s=window_s, step_s=step_s)


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


def build_rate_policy(node, tenant_id: str, options) -> RatePolicy:
    """Validate the controller settings and measure the latency before any byte moves."""
    c = dict(options.controller or {})
    kind = c.get("kind") or "slack"
    if kind not in KINDS:
        raise InvalidInput(f"unknown controller {kind!r}", f"choose {', '.join(KINDS)}", "")
    if c.get("setpoint_s") is None:
        raise InvalidInput("a latency-targeting migration needs --setpoint", "", "for example --setpoint 1500ms")
    cfg = ThrottleConfig.from_options(float(c["setpoint_s"]), float(c.get("max_rate_bytes_per_s") or DEFAULT_MAX_RATE),
                                      c.get("gains"), c.get("window_s"), c.get("step_s"))
    specs = list(c.get("latency_sources") or DEFAULT_SOURCES)
    sources = [build_source(node, s, cfg.window_s, cfg.step_s, tenant_id) for s in specs]
    source = sources[0] if len(sources) == 1 else MaxOf(sources)
    target_sp = c.get("target_setpoint_s")
    if target_sp is not None:
        target_sp = ThrottleConfig.from_options(float(target_sp), cfg.max_rate_bytes_per_s).setpoint_s
    if c.get("target_guard", True) and kind != "fixed" and getattr(options, "target", None):
        # Both ends guarded by default (paper §6): the target node's tenants against their own setpoint.
        holder: dict = {}
        source = GuardedSource(source, build_target_guard(node, options.target, tenant_id, cfg.window_s, cfg.step_s),
                               setpoint=lambda: holder["ctl"].setpoint_s if "ctl" in holder else cfg.setpoint_s,
                               target_setpoint=lambda: target_sp or (
                                   holder["ctl"].setpoint_s if "ctl" in holder else cfg.setpoint_s))
    else:
        holder = None
    baseline = measure(source, cfg.window_s, cfg.step_s)
    if baseline.ok is False:
        source.close()
        if baseline.blind or "cannot see this tenant's traffic" in (baseline.error or ""):
            raise InvalidInput("the latency source sees no transactions", baseline.error,
                               "nothing was copied; check --latency-source (user=/exclude-user= filters, "
                               "or the tenant's performance_schema)")
        if "target guard:" in (baseline.error or ""):
            raise InvalidInput(f"cannot read the target node's latency ({options.target})", baseline.error,
                               "nothing was copied; check the target agent, or pass --no-target-guard")
        raise InvalidInput("cannot read the latency source", baseline.error or "no answer",
                           "check --latency-source; nothing was copied")
    if (baseline.latency_s is not None and baseline.latency_s >= cfg.setpoint_s and not c.get("force")
            and kind != "fixed"):
        source.close()
        sides = getattr(source, "sides", None) or {}
        if sides.get("binding") == "target":
            raise InvalidInput(f"the target node {options.target} is already over its setpoint",
                               f"its tenants' latency is {sides['target_latency_s'] * 1000:.0f}ms against "
                               f"{sides['target_setpoint_s'] * 1000:.0f}ms before any copying",
                               "the copy could never run: raise --target-setpoint, pass --no-target-guard or --force")
        raise InvalidInput(f"setpoint {cfg.setpoint_s * 1000:.0f}ms is below the latency measured now",
                           f"{baseline.latency_s * 1000:.0f}ms before any copying",
                           "the copy could never run: raise --setpoint, or pass --force")
    if kind == "slack":
        controller = SlackController(cfg.setpoint_s, cfg.max_rate_bytes_per_s, step_s=cfg.step_s)
    elif kind == "model":
        controller = ModelController(cfg.setpoint_s, cfg.max_rate_bytes_per_s, step_s=cfg.step_s)
    elif kind == "pid":
        controller = cfg.controller()
    elif kind == "threshold":
        controller = ThresholdThrottle(cfg.setpoint_s, cfg.max_rate_bytes_per_s, step_s=cfg.step_s)
    else:
        controller = FixedRate(float(c.get("rate_bytes_per_s") or options.rate_bytes_per_s or 0),
                               setpoint_s=cfg.setpoint_s)
    if holder is not None:
        holder["ctl"] = controller
    options.step_s = cfg.step_s
    policy = RatePolicy(source, controller, metrics=ControllerMetrics.on(node.registry), tenant=tenant_id)
    policy.baseline_latency_s = baseline.latency_s
    policy.baseline_idle = baseline.empty
    policy.kind = kind
    # No --max-rate given: the controller's max is a nominal scale, not a cap the operator asked for,
    # so at its maximum the pipe runs at full speed (the copy is never slower than unthrottled
    # when nothing binds). A --max-rate the operator gave stays a cap.
    policy.unthrottled_at_max = c.get("max_rate_bytes_per_s") is None and kind in ("slack", "model", "pid", "threshold")
    return policy


def measure(source: LatencySource, window_s: float, step_s: float | None = None, enough: int = 20):
    """The latency before any byte moves: a first read sets the counters' baseline, then one read per
    step until `enough` transactions were seen (or the window is over, or the source fails).

    A busy tenant answers after one step instead of a whole window (on a copy of a few seconds
    the window was a large part of the migration); a quiet or blind one still gets the whole
    window before it is called idle or blind."""
    first = source.read()
    if not first.ok:
        return first
    step = window_s if step_s is None else max(0.05, min(step_s, window_s))
    deadline = time.monotonic() + window_s
    while True:
        time.sleep(max(0.0, min(step, deadline - time.monotonic())))
        sample = source.read()
        if not sample.ok or time.monotonic() >= deadline - 0.01 or (sample.count >= enough and not sample.empty):
            return sample


def apply_settings(migration, body: dict) -> None:
    """`slacker migrate --set`: setpoint, max rate, fixed rate, pause, resume — live."""
    policy = migration.rate_policy
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
            migration.paused_rate = None
            migration.set_rate(float(body["rate_bytes_per_s"]))
        if body.get("pause"):
            migration.paused_rate = migration.current_rate()
            migration.set_rate(0)
        if body.get("resume"):
            migration.set_rate(getattr(migration, "paused_rate", None))
        return
    ctl = policy.controller
    if "rate_bytes_per_s" in body:
        raise InvalidInput("this migration is steered by its controller", "a fixed rate would fight it",
                           "change setpoint= or max-rate= instead")
    if "setpoint_s" in body:
        ctl.set_setpoint(float(body["setpoint_s"]))
    if "max_rate_bytes_per_s" in body:
        ctl.set_max_rate(float(body["max_rate_bytes_per_s"]))
        policy.unthrottled_at_max = False  # a max the operator gives is a cap
    if body.get("pause"):
        ctl.pause()
        if migration.pipe is not None:
            migration.pipe.set_rate(0)
    if body.get("resume"):
        ctl.resume()
