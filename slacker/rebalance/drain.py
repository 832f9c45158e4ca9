"""`slacker node drain`: cordon a node, then move every tenant off it live, several at once, resumably.

What is left is always read from the directory (the tenants it says the node
owns) and the agents (migrations running off the node), never from a file of
this process: a drain that was interrupted (Ctrl-C, killed, an agent restarted)
and run again follows the migrations still running, starts only the tenants
still on the node, and so never moves a tenant twice. Targets come from
placement.place(); moves run through moves.MoveRunner. One drain per node at a
time (the directory lock `drain/<node>`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from ..controller.budget import check_budget
from ..errors import Conflict, InvalidInput, NotFound, SlackerError
from ..migration.remote import latency_move
from ..sources.node import node_latency
from .moves import MIN_SHARE_BYTES_PER_S, MoveRunner, Running
from .placement import Item, PlacementPlan, items_of, node_loads, place
from .planner import Settings, setpoint_for
from .runner import AGENT_TIMEOUT_S, collect, owners_of

log = logging.getLogger("slacker.rebalance")

STATE_PREFIX = "drain/"     # drain/<node>: the last drain of a node (holder, moves, failures)


def lock_name(node: str) -> str:
    return f"drain/{node}"


@dataclass
class DrainOptions:
    max_parallel: int = 2                # a cap: how many run follows from the source's budget
    split: str = "fair"                  # how the source's budget is split: fair | smallest (| own: bench only)
    min_share_bytes_per_s: float = MIN_SHARE_BYTES_PER_S
    retries: int = 2                     # a failed move is tried again this many times
    max_rate_bytes_per_s: float | None = None
    max_freeze_s: float = 0.5
    lock_ttl_s: float = 30.0
    poll_s: float = 1.0                  # how often the directory is read again and an idle drain looks
    fast_poll_s: float = 0.2             # how often it looks while tenants wait for a start (small moves end in less)
    dry_run: bool = False
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    def validate(self) -> "DrainOptions":
        if not 1 <= self.max_parallel <= 64:
            raise InvalidInput(f"--max-parallel {self.max_parallel} is out of range", "it must be 1 to 64", "")
        check_budget(self.split)
        if not 0 <= self.retries <= 100:
            raise InvalidInput(f"--retries {self.retries} is out of range", "it must be 0 to 100", "")
        return self


@dataclass
class TenantMove:
    """One tenant of the drained node, as the progress view and --json show it."""

    tenant: str
    target: str | None = None
    state: str = "waiting"               # waiting | moving | moved | failed | unplaced
    migration: str | None = None
    phase: str | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    rate_bytes_per_s: float | None = None
    data_bytes: int = 0
    setpoint_s: float | None = None
    attempts: int = 0
    resumed: bool = False                # a migration an earlier run started, followed here
    duration_s: float | None = None
    freeze_ms: float | None = None
    error: str = ""
    verdict: str = ""                    # the move's controller says it cannot finish as set (what: why; hint)


@dataclass
class DrainResult:
    node: str
    dry_run: bool
    started_at: float
    plan: PlacementPlan | None = None
    tenants: dict[str, TenantMove] = field(default_factory=dict)
    earlier: dict[str, dict] = field(default_factory=dict)  # moved by an earlier run of this drain
    finished_at: float | None = None
    outcome: str = "running"             # drained | failed | interrupted | stopped | planned
    reason: str = ""
    cordoned: bool = False
    planned: tuple | None = None         # (when, the setpoint then): the last plan, reused for poll_s

    def counts(self) -> dict[str, int]:
        out = {"total": len(self.tenants), "moved": 0, "moving": 0, "waiting": 0, "failed": 0, "unplaced": 0}
        for t in self.tenants.values():
            out[t.state] += 1
        return out

    def eta_s(self, now: float) -> float | None:
        """Time left: the bytes still to copy at the rate the running copies make now, or, once moves have
        finished, their average time per move spread over the parallel slots."""
        c = self.counts()
        left = c["moving"] + c["waiting"]
        if left == 0:
            return 0.0
        done = [t.duration_s for t in self.tenants.values() if t.state == "moved" and t.duration_s]
        if done:
            parallel = max(1, min(left, c["moving"] or 1))
            return sum(done) / len(done) * left / parallel
        rate = sum(t.rate_bytes_per_s or 0 for t in self.tenants.values() if t.state == "moving")
        todo = sum(max(0, (t.bytes_total or t.data_bytes) - t.bytes_done) for t in self.tenants.values()
                   if t.state in ("moving", "waiting"))
        return todo / rate if rate > 0 and todo > 0 else None  # copies done, none finished: not known yet

    def to_dict(self) -> dict:
        return {"node": self.node, "dry_run": self.dry_run, "started_at": self.started_at,
                "finished_at": self.finished_at, "outcome": self.outcome, "reason": self.reason,
                "cordoned": self.cordoned, "counts": self.counts(),
                "eta_s": None if self.finished_at else self.eta_s(time.time()),
                "tenants": [asdict(t) for t in sorted(self.tenants.values(), key=lambda t: t.tenant)],
                "earlier": self.earlier, "plan": None if self.plan is None else self.plan.to_dict()}


def _take_lock(directory, node: str, opts: DrainOptions, say: Callable[[str], None]) -> None:
    """The node's drain lock; a killed earlier run's lock is waited out (it expires after its TTL)."""
    name = lock_name(node)
    deadline = None
    while True:
        try:
            directory.acquire_lock(name, opts.holder, opts.lock_ttl_s)
            return
        except Conflict:
            info = directory.lock_info(name)
            if info is None:
                continue
            if deadline is None:
                deadline = time.monotonic() + info.ttl_s + 5
                say(f"another drain of {node} holds its lock ({info.holder}, expires in {info.expires_in_s:.0f}s "
                    "unless it is alive): waiting")
            if time.monotonic() > deadline:
                raise Conflict(f"another drain of {node} is running", f"{info.holder} holds the lock drain/{node}",
                               "wait for it to end (`slacker node list`), or stop it and run this again") from None
            time.sleep(1.0)


def _keep_lock(directory, node: str, opts: DrainOptions) -> str:
    """Refresh the drain's lock, or take it again if it expired meanwhile (a long step, an agent that
    answered slowly); '' while this drain holds it, else who took it."""
    name = lock_name(node)
    try:
        directory.refresh_lock(name, opts.holder)
        return ""
    except Conflict:
        try:
            directory.acquire_lock(name, opts.holder, opts.lock_ttl_s)
            return ""
        except Conflict:
            info = directory.lock_info(name)
            return info.holder if info else "another drain"
    except SlackerError as exc:
        log.warning("could not refresh the drain lock: %s", exc.one_line())
        return ""


def _running_off(agents: dict, node: str) -> dict[str, dict]:
    """Migrations active on the node's agent, outgoing: tenant -> document."""
    try:
        migs = agents[node].request("GET", "/v1/migrations", query={"active": 1},
                                    timeout_s=AGENT_TIMEOUT_S).get("migrations", [])
    except SlackerError:
        return {}
    return {str(m["tenant"]): m for m in migs if m.get("active") and m.get("direction") != "incoming"}


def plan_drain(agents: dict, directory, node: str, settings: Settings,
               in_flight: dict[str, Running] | None = None, only: set[str] | None = None) -> PlacementPlan:
    """Targets for the tenants still on `node` (or those of `only`), moves in flight counted on their targets."""
    in_flight = in_flight or {}
    owners = owners_of(directory)
    inputs, _ = collect(agents, owners)
    cordoned = set(directory.cordons()) | {node}
    src = next((n for n in inputs if n.name == node), None)
    if src is None or not src.reachable:  # a live move starts on the source's agent
        left = only if only is not None else {t for t, n in owners.items() if n == node}
        why = f"{node}'s agent does not answer ({src.error if src else 'unknown node'}): a live move starts there"
        return PlacementPlan(unplaced={t: why for t in sorted(left)})
    items = items_of(src, settings.samples)
    flying = [i for i in items if i.tenant in in_flight]
    items = [i for i in items if i.tenant not in in_flight and (only is None or i.tenant in only)]
    loads = node_loads(inputs, cordoned, settings.samples, flying, {t: r.target for t, r in in_flight.items()})
    return place(items, loads, quantum=settings.load_floor, hot_threshold=settings.hot_threshold, avoid={node})


def drain(agents: dict, directory, node: str, settings: Settings, opts: DrainOptions,
          on_update: Callable[[DrainResult], None] | None = None,
          say: Callable[[str], None] | None = None) -> DrainResult:
    """Drain `node`. Returns when it is empty, when what is left failed, or on KeyboardInterrupt (its
    migrations go on in the agents; running the same drain again follows them)."""
    settings.validate()
    opts.validate()
    say = say or (lambda msg: None)
    update = on_update or (lambda res: None)
    if node not in agents:
        raise NotFound(f"no node {node} in the cluster file", "", f"one of: {', '.join(agents)}")
    res = DrainResult(node, opts.dry_run, time.time())
    if opts.dry_run:
        res.plan = plan_drain(agents, directory, node, settings)
        for p in res.plan.placements:
            res.tenants[p.tenant] = TenantMove(p.tenant, p.target, data_bytes=p.data_bytes)
        for t, why in res.plan.unplaced.items():
            res.tenants[t] = TenantMove(t, state="unplaced", error=why)
        res.cordoned = node in directory.cordons()
        res.outcome, res.finished_at = "planned", time.time()
        return res

    resuming = node in directory.cordons()
    directory.cordon(node, by=opts.holder, reason="drain")
    res.cordoned = True
    _take_lock(directory, node, opts, say)
    state_key = STATE_PREFIX + node
    try:
        prev = directory.state_get(state_key) or {}
        if resuming and prev.get("outcome") != "drained":  # the same drain, run again: show what it moved
            res.earlier = _moved_earlier(directory, node, prev)
        runner = MoveRunner(agents, opts.max_parallel, opts.min_share_bytes_per_s, budget=opts.split != "own")
        try:
            _loop(agents, directory, node, settings, opts, res, runner, state_key, update, say)
        except KeyboardInterrupt:
            res.outcome = "interrupted"
            left = len(runner.running)
            res.reason = (f"{left} migration{'s' if left != 1 else ''} go on in the agents; "
                          f"run the same command again to continue" if left else
                          "run the same command again to continue")
        res.finished_at = time.time()
        _record(directory, state_key, res, opts)
        return res
    finally:
        try:
            directory.release_lock(lock_name(node), opts.holder)
        except SlackerError as exc:  # it expires on its own
            log.warning("could not release the drain lock: %s", exc.one_line())


def _moved_earlier(directory, node: str, prev: dict) -> dict[str, dict]:
    """Tenants an earlier run of this drain started moving (recorded before each start, so a killed run
    leaves them too) that are no longer on the node: where the directory has them now."""
    out = {}
    for tid, v in {**(prev.get("started") or {}), **(prev.get("moved") or {})}.items():
        try:
            own = directory.lookup(tid)
        except NotFound:
            continue
        if own.node != node:
            out[tid] = {"target": own.node, "migration": v.get("migration")}
    return out


def _record(directory, key: str, res: DrainResult, opts: DrainOptions) -> None:
    moved = dict(res.earlier)
    started = {}
    for t in res.tenants.values():
        if t.state == "moved":
            moved[t.tenant] = {"target": t.target, "migration": t.migration}
        elif t.migration:
            started[t.tenant] = {"target": t.target, "migration": t.migration}
    doc = {"node": res.node, "holder": opts.holder, "started_at": res.started_at, "finished_at": res.finished_at,
           "outcome": res.outcome, "reason": res.reason, "moved": moved, "started": started,
           "failed": {t.tenant: t.error for t in res.tenants.values() if t.state in ("failed", "unplaced")}}
    try:
        directory.state_put(key, doc)
    except SlackerError as exc:
        log.warning("could not record the drain: %s", exc.one_line())


def _loop(agents, directory, node, settings, opts, res: DrainResult, runner: MoveRunner, state_key, update, say):
    last_refresh = time.monotonic()
    held = False  # the source's latency holds the next copy back, and the log said so
    read_at, on_node = -1e9, set()  # the directory's tenants of the node, read again every poll_s
    while True:
        if time.monotonic() - last_refresh >= opts.lock_ttl_s / 3:
            last_refresh = time.monotonic()
            taken_by = _keep_lock(directory, node, opts)
            if taken_by:
                res.outcome = "stopped"
                res.reason = f"another drain of {node} ({taken_by}) took its lock: this one stopped starting moves"
        # The directory every poll_s; between, the node's tenants as the drain's own moves left them (a loop
        # that looks every fast_poll_s while tenants wait must not read the whole directory each time).
        fresh = time.monotonic() - read_at >= opts.poll_s
        if fresh and node not in directory.cordons():
            res.outcome, res.reason = "stopped", f"{node} was uncordoned: the drain stopped starting moves"
        shed = runner.shed_one(node)
        if shed is not None:
            n = runner.cap[node]
            say(f"{shed.tenant}: stopped: {node}'s copies were all held at 0 B/s, so no copy could finish; "
                f"it starts again later, at most {n} {'copy' if n == 1 else 'copies'} at once from now")
        for r in runner.poll():
            _ended(r, res, opts, directory, node, say)
            _record(directory, state_key, res, opts)
        if res.outcome == "stopped" and not runner.running:
            return
        for tid, doc in _running_off(agents, node).items():
            if tid not in runner.running:
                r = runner.adopt(node, doc)
                t = res.tenants.setdefault(tid, TenantMove(tid))
                t.state, t.target, t.migration, t.resumed = "moving", r.target, r.mid, True
                t.attempts = max(t.attempts, 1)
                say(f"{tid}: following migration {r.mid} to {r.target}, started by an earlier run")
                _record(directory, state_key, res, opts)
        if fresh:
            read_at = time.monotonic()
            on_node = {o.tenant for o in directory.list() if o.node == node}
        else:
            on_node -= {t for t, m in res.tenants.items() if m.state == "moved"}
        for tid in on_node:
            t = res.tenants.setdefault(tid, TenantMove(tid))
            if t.state == "moved":  # back on the node (moved there again by hand): move it again
                t.state = "waiting"
        for tid, t in res.tenants.items():
            if t.state == "waiting" and tid not in on_node and tid not in runner.running:
                t.state, t.error = "moved", "left the node by another move"
        for tid, r in runner.running.items():
            had = res.tenants[tid].verdict
            _show(res.tenants[tid], r)
            if res.tenants[tid].verdict and not had:
                say(f"{tid}: {res.tenants[tid].verdict}")
        waiting = sorted(t for t, m in res.tenants.items() if m.state == "waiting" and t in on_node)
        # The last plan's sizes say whether a small copy waits (one starts without the budget's measures).
        sizes = {pl.tenant: pl.data_bytes for pl in res.plan.placements} if res.plan is not None else {}
        small = any(runner.is_small(node, sizes.get(t, 0)) for t in waiting)
        if res.outcome != "stopped" and waiting and runner.may_start(node, "", small=small):
            # Each start is recorded before it is made: a run killed right after still leaves it.
            _start_some(agents, directory, node, settings, opts, res, runner, set(waiting), say,
                        lambda: _record(directory, state_key, res, opts))
            held = False
        elif res.outcome != "stopped" and waiting and "latency budget is spent" in runner.why_not and not held:
            say(f"{len(waiting)} waiting: {runner.why_not}")  # once per wait, not every poll
            held = True
        update(res)
        if not runner.running and not any(m.state == "waiting" and t in on_node for t, m in res.tenants.items()):
            if res.outcome == "stopped":
                return
            failed = [t for t in res.tenants.values() if t.state in ("failed", "unplaced")]
            if failed:
                res.outcome = "failed"
                res.reason = (f"{len(failed)} of {len(res.tenants)} tenants could not be moved; {node} stays "
                              "cordoned")
            else:
                res.outcome = "drained"
                res.reason = f"{node} is empty and stays cordoned"
            return
        waiting_now = any(m.state == "waiting" and t in on_node for t, m in res.tenants.items())
        # Until the next look, or until a move ends (its target is free for the next tenant at once).
        runner.wait_end(opts.fast_poll_s if waiting_now and res.outcome != "stopped" else opts.poll_s)


def _show(t: TenantMove, r: Running) -> None:
    d = r.doc
    t.phase = d.get("phase")
    t.bytes_done = int(d.get("bytes_done") or 0)
    t.bytes_total = int(d.get("bytes_total") or 0)
    t.rate_bytes_per_s = d.get("throughput_bytes_per_s")
    v = (d.get("controller") or {}).get("verdict") or {}
    t.verdict = f"{v.get('what')}: {v.get('why')}; {v.get('hint')}" if v.get("what") else ""


def _start_some(agents, directory, node, settings, opts, res, runner, waiting: set[str], say, record) -> None:
    if hasattr(agents, "refresh"):  # a long drain sees nodes that joined (or left) since it started
        agents.refresh(max_age_s=10.0)
    now = time.monotonic()
    if res.plan is not None and res.planned is not None and now - res.planned[0] < opts.poll_s:
        # A plan younger than poll_s: its placements of the tenants still waiting (small moves end faster than a
        # plan reads every agent's history; the next plan counts the moves started since on their targets).
        p = replace(res.plan, placements=[pl for pl in res.plan.placements
                                          if pl.tenant in waiting and pl.tenant not in runner.running])
        setpoint = res.planned[1]
    else:
        p = plan_drain(agents, directory, node, settings, runner.running, only=waiting)
        res.plan = p
        src = next((n for n in p.nodes if n.name == node), None)
        latency = None
        try:
            doc = agents[node].request("GET", "/v1/tenant-stats", query={"history": 0}, timeout_s=AGENT_TIMEOUT_S)
            latency = node_latency(doc.get("tenants", []))
        except SlackerError:
            latency = src.latency_s if src else None
        setpoint, _ = setpoint_for(settings, latency)
        res.planned = (now, setpoint)
    for tid, why in p.unplaced.items():
        t = res.tenants[tid]
        if t.state != "unplaced":
            say(f"{tid}: {why}")
        t.state, t.error = "unplaced", why
    batch = []
    for pl in p.placements:
        small = runner.is_small(node, pl.data_bytes, pending=len(batch)) and all(b[5] for b in batch)
        if not runner.may_start(node, pl.target, pending=len(batch), pending_targets=tuple(b[2] for b in batch),
                                small=small):
            if len(runner.running) + len(batch) >= runner.max_parallel or "budget" in runner.why_not:
                break
            continue  # its target already receives a copy: the next tenant, to another target
        t = res.tenants[pl.tenant]
        t.target, t.data_bytes, t.setpoint_s = pl.target, pl.data_bytes, setpoint
        request = latency_move(pl.tenant, pl.target, setpoint, max_rate_bytes_per_s=opts.max_rate_bytes_per_s,
                               max_freeze_s=opts.max_freeze_s, budget=opts.split,
                               setpoint_headroom=settings.setpoint_margin)
        t.attempts += 1
        t.migration = t.migration or "(starting)"
        batch.append((pl.tenant, node, pl.target, request, int(pl.data_bytes or 0), small))
    if not batch:
        return
    record()
    for tenant, got in runner.start_all(batch).items():
        t = res.tenants[tenant]
        if isinstance(got, SlackerError):
            _failed(t, got.one_line(), opts, say)
            continue
        r = got
        pl = next(x for x in p.placements if x.tenant == tenant)
        t.state, t.migration, t.error = "moving", r.mid, ""
        t.phase, t.bytes_done, t.bytes_total, t.rate_bytes_per_s = r.doc.get("phase"), 0, 0, None
        say(f"{pl.tenant}: {node} -> {pl.target} started (migration {r.mid}, setpoint {setpoint * 1000:.0f}ms"
            + (f", attempt {t.attempts}" if t.attempts > 1 else "") + ")")


def _failed(t: TenantMove, why: str, opts: DrainOptions, say) -> None:
    t.error = why
    if t.attempts <= opts.retries:
        t.state = "waiting"
        say(f"{t.tenant}: attempt {t.attempts} failed: {why}; trying again")
    else:
        t.state = "failed"
        say(f"{t.tenant}: failed after {t.attempts} attempts: {why}")


def _ended(r: Running, res: DrainResult, opts: DrainOptions, directory, node: str, say) -> None:
    t = res.tenants.setdefault(r.tenant, TenantMove(r.tenant))
    d = r.doc
    _show(t, r)
    t.duration_s = d.get("duration_s") or (time.monotonic() - r.started_at)
    t.freeze_ms = d.get("freeze_ms")
    if r.lost:
        try:
            moved = directory.lookup(r.tenant).node != node
        except NotFound:
            moved = False
        if moved:
            t.state, t.phase = "moved", "done"
            say(f"{r.tenant}: moved to {r.target} ({r.lost}; the directory names the target)")
        else:
            _failed(t, r.lost, opts, say)
        return
    if r.shed and d.get("result") != "succeeded":
        t.state, t.error = "waiting", ""
        t.attempts = max(0, t.attempts - 1)  # not a failure of the move: its turn comes again
        return
    if d.get("result") == "succeeded":
        t.state, t.error = "moved", ""
        freeze = f", freeze {t.freeze_ms:.0f} ms" if t.freeze_ms is not None else ""
        say(f"{r.tenant}: moved to {r.target} in {t.duration_s:.1f}s{freeze}")
        return
    e = d.get("error") or {}
    why = (f"migration {r.mid} {d.get('result')} in phase {e.get('phase') or d.get('phase')}: {e.get('what', '')}"
           + (f": {e['why']}" if e.get("why") else ""))
    _failed(t, why, opts, say)
