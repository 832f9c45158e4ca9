"""The rebalancer's I/O: read every agent's load history and the directory's state, plan, and carry a move out.

One run holds the directory lock `rebalance` for the whole move (refreshed while
the migration runs; a crashed run's lock expires), so two crons on two hosts
never move at once, and records each move under `rebalance/moves/<tenant>` so
both derive the same cool-downs. The decision itself is planner.plan().
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import AgentUnavailable, Conflict, NotFound, SlackerError
from ..migration.remote import follow, latency_move, start_migration
from ..sources.node import node_latency
from .planner import Move, NodeInput, Plan, Sample, Settings, State, plan_pass

log = logging.getLogger("slacker.rebalance")

LOCK_NAME = "rebalance"
MOVES_PREFIX = "rebalance/moves/"
LAST_RUN_KEY = "rebalance/last-run"
AGENT_TIMEOUT_S = 5.0


@dataclass
class RunOptions:
    execute: bool = False
    lock_ttl_s: float = 60.0
    max_rate_bytes_per_s: float | None = None
    max_freeze_s: float = 0.5           # the migration's write-freeze budget (as `slacker migrate --max-freeze`)
    max_wait_s: float = 4 * 3600.0      # give up following a migration after this (it goes on; result unknown)
    poll_s: float = 2.0
    max_moves: int = 1                  # moves in one pass, on disjoint node pairs, run at once
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")


@dataclass
class RunResult:
    plan: Plan
    executed: bool = False
    migration: dict | None = None       # the migration's last document
    result: str | None = None           # succeeded | failed | unknown
    error: str = ""
    guard: list[dict] = field(default_factory=list)  # target-guard pauses/resumes
    lock: str = ""                      # what happened to the lock
    more: list[dict] = field(default_factory=list)   # a parallel pass: the moves after the first (plan, result)

    def to_dict(self) -> dict:
        doc = {"plan": self.plan.to_dict(), "executed": self.executed, "result": self.result, "error": self.error,
               "guard": self.guard, "lock": self.lock, "more": self.more}
        if self.migration is not None:
            m = self.migration
            doc["migration"] = {k: m.get(k) for k in ("id", "tenant", "source", "target", "result", "phase",
                                                      "duration_s", "freeze_ms", "bytes_done", "series_path")}
            doc["migration"]["error"] = m.get("error")
        return doc


# ---- reading ------------------------------------------------------------------------------------

def collect(agents: dict, owners: dict[str, str]) -> tuple[list[NodeInput], list[Move]]:
    """Each agent's history of the tenants the directory says it owns, and migrations running anywhere."""
    nodes, running = [], []
    for name, agent in agents.items():
        try:
            doc = agent.request("GET", "/v1/tenant-stats", timeout_s=AGENT_TIMEOUT_S)
            migs = agent.request("GET", "/v1/migrations", query={"active": 1},
                                 timeout_s=AGENT_TIMEOUT_S).get("migrations", [])
        except SlackerError as exc:
            nodes.append(NodeInput(name, reachable=False, error=exc.one_line()))
            continue
        history = doc.get("history") or {}
        tenants = {tid: [Sample.from_dict(s) for s in history.get(tid, [])]
                   for tid, node in owners.items() if node == name}
        try:  # the old copies it keeps (--keep-source) load it too; an agent without kept copies says none
            kept = [k["tenant"] for k in agent.request("GET", "/v1/kept", timeout_s=AGENT_TIMEOUT_S).get("kept", [])]
        except SlackerError:
            kept = []
        fixed = {tid: [Sample.from_dict(s) for s in history[tid]] for tid in kept if history.get(tid)}
        sizes = {str(r["tenant"]): int(r["data_bytes"]) for r in doc.get("tenants") or []
                 if r.get("data_bytes") is not None and str(r.get("tenant")) in tenants}
        nodes.append(NodeInput(name, tenants=tenants, fixed=fixed, sizes=sizes))
        for m in migs:
            if m.get("active") and m.get("direction") != "incoming":
                running.append(Move(str(m["tenant"]), name, str(m.get("target")), started_at=time.time(),
                                    result="running"))
    return nodes, running


def read_state(directory, running: list[Move], settings: Settings, now: float) -> State:
    """Recent moves from the directory (stale ones pruned), plus migrations the agents run right now."""
    moves = []
    keep_s = max(settings.tenant_cooldown_s, settings.node_cooldown_s, settings.no_return_s)
    for key, value in directory.state_list(MOVES_PREFIX).items():
        try:
            m = Move.from_dict(value)
        except (KeyError, TypeError, ValueError):
            log.warning("ignoring malformed rebalancer state %s", key)
            continue
        if m.finished_at is not None and m.finished_at + keep_s < now:
            try:
                directory.state_delete(key)
            except SlackerError:
                pass
            continue
        moves.append(m)
    recorded = {(m.tenant, m.source) for m in moves if m.result == "running"}
    # A migration started by hand (`slacker migrate`) is in flight too: one move at a time.
    moves += [m for m in running if (m.tenant, m.source) not in recorded]
    # A recorded "running" move whose migration no agent runs any more ended while nobody watched
    # (a rebalancer that crashed): settle it as unknown, so its cool-down starts.
    live = {(m.tenant, m.source) for m in running}
    out = []
    for m in moves:
        if m.result == "running" and (m.tenant, m.source) not in live:
            m = Move(m.tenant, m.source, m.target, m.started_at, m.load, now, "unknown")
        out.append(m)
    return State(moves=out)


def owners_of(directory) -> dict[str, str]:
    return {o.tenant: o.node for o in directory.list()}


def make_plan(agents: dict, directory, settings: Settings, lock_holder: str | None = None,
              lock_expires_in_s: float | None = None, now: float | None = None, max_moves: int = 1) -> list[Plan]:
    """The pass's plans (planner.plan_pass): one, or up to `max_moves` on disjoint node pairs."""
    now = time.time() if now is None else now
    nodes, running = collect(agents, owners_of(directory))
    state = read_state(directory, running, settings, now)
    state.lock_holder, state.lock_expires_in_s = lock_holder, lock_expires_in_s
    state.cordoned = frozenset(directory.cordons())
    return plan_pass(nodes, state, settings, now, max_moves)


def _result(plans: list[Plan], **kw) -> RunResult:
    """The first plan is the run's; the pass's further moves (a parallel pass) go in `more`."""
    res = RunResult(plans[0], **kw)
    res.more = [{"plan": p.to_dict(), "result": None, "error": ""} for p in plans[1:] if p.decision == "move"]
    return res


# ---- one run ------------------------------------------------------------------------------------

def run(agents: dict, directory, settings: Settings, opts: RunOptions,
        on_event: Callable[[str], None] | None = None) -> RunResult:
    """One pass: plan, and with opts.execute carry the move out while holding the cluster lock."""
    say = on_event or (lambda msg: None)
    settings.validate()
    if not opts.execute:
        info = directory.lock_info(LOCK_NAME)
        other = info.holder if info is not None else None
        return _result(make_plan(agents, directory, settings, other, info.expires_in_s if info else None,
                                 max_moves=opts.max_moves),
                       lock="held by " + other if other else "free (dry run: not taken)")
    try:
        directory.acquire_lock(LOCK_NAME, opts.holder, opts.lock_ttl_s)
    except Conflict:
        info = directory.lock_info(LOCK_NAME)
        p = make_plan(agents, directory, settings, info.holder if info else "another rebalancer",
                      info.expires_in_s if info else None)
        return _result(p, lock=f"held by {info.holder if info else 'another rebalancer'}")
    try:
        plans = make_plan(agents, directory, settings, max_moves=opts.max_moves)
        res = _result(plans, lock=f"taken by {opts.holder}")
        if res.plan.decision != "move":
            _record_run(directory, opts, res)
            return res
        if res.more:
            _make_the_moves(agents, directory, settings, opts, res, [p for p in plans if p.decision == "move"], say)
        else:
            _make_the_move(agents, directory, settings, opts, res, say)
        _record_run(directory, opts, res)
        return res
    finally:
        try:
            directory.release_lock(LOCK_NAME, opts.holder)
        except SlackerError as exc:  # it expires on its own
            log.warning("could not release the rebalancer lock: %s", exc.one_line())


def _record_run(directory, opts: RunOptions, res: RunResult) -> None:
    p = res.plan
    doc = {"at": p.at, "holder": opts.holder, "decision": p.decision, "reason": p.reason, "result": res.result,
           "move": None if p.move is None else {"tenant": p.move.tenant, "source": p.move.source,
                                                "target": p.move.target}}
    try:
        directory.state_put(LAST_RUN_KEY, doc)
    except SlackerError as exc:
        log.warning("could not record the run: %s", exc.one_line())


def _put_move(directory, m: Move) -> None:
    directory.state_put(MOVES_PREFIX + m.tenant, m.to_dict())


def _make_the_move(agents: dict, directory, settings: Settings, opts: RunOptions, res: RunResult,
                   say: Callable[[str], None]) -> None:
    mv = res.plan.move
    source, target = agents[mv.source], agents[mv.target]
    # Recorded before it starts: a run that dies mid-move still leaves the move (and so its cool-down).
    record = Move(mv.tenant, mv.source, mv.target, started_at=time.time(), load=mv.tenant_load)
    _put_move(directory, record)
    res.executed = True
    request = latency_move(mv.tenant, mv.target, mv.setpoint_s, max_rate_bytes_per_s=opts.max_rate_bytes_per_s,
                           max_freeze_s=opts.max_freeze_s, setpoint_headroom=res.plan.settings.setpoint_margin)
    say(f"moving {mv.tenant}: {mv.source} -> {mv.target} with setpoint {mv.setpoint_s * 1000:.0f}ms")
    try:
        doc = start_migration(source, request)
    except SlackerError as exc:
        res.result, res.error = "failed", exc.one_line()
        _put_move(directory, Move(**{**record.to_dict(), "finished_at": time.time(), "result": "failed"}))
        return
    guard = TargetGuard(target, source, doc["id"], settings.sla_s, res.guard, say)
    deadline = time.monotonic() + opts.max_wait_s
    last_refresh = time.monotonic()

    def on_poll(d: dict) -> None:
        nonlocal last_refresh
        if time.monotonic() - last_refresh >= opts.lock_ttl_s / 3:
            last_refresh = time.monotonic()
            try:
                directory.refresh_lock(LOCK_NAME, opts.holder)
            except SlackerError as exc:
                log.warning("could not refresh the rebalancer lock: %s", exc.one_line())
        guard.check(d)
        if time.monotonic() > deadline:
            raise TimeoutError

    try:
        doc = _follow_patiently(source, doc, on_poll, opts.poll_s)
        res.migration = doc
        res.result = "succeeded" if doc.get("result") == "succeeded" else "failed"
        if res.result == "failed":
            e = doc.get("error") or {}
            res.error = (f"migration {doc['id']} {doc.get('result')} in phase {e.get('phase') or doc.get('phase')}: "
                         f"{e.get('what', '')}" + (f": {e['why']}" if e.get("why") else ""))
    except TimeoutError:
        res.result, res.error = "unknown", f"still running after {opts.max_wait_s:.0f}s; the agents finish it"
    _put_move(directory, Move(**{**record.to_dict(), "finished_at": time.time(), "result": res.result}))


def _make_the_moves(agents: dict, directory, settings: Settings, opts: RunOptions, res: RunResult,
                    plans: list[Plan], say: Callable[[str], None]) -> None:
    """A parallel pass: the moves (on disjoint node pairs) started at once and followed together; each
    copies within its source's budget (slacker.controller.budget) and pauses on its target's SLA."""
    from .moves import MoveRunner

    runner = MoveRunner(agents, max_parallel=len(plans))
    records, batch, guards = {}, [], {}
    for p in plans:
        mv = p.move
        records[mv.tenant] = Move(mv.tenant, mv.source, mv.target, started_at=time.time(), load=mv.tenant_load)
        _put_move(directory, records[mv.tenant])
        request = latency_move(mv.tenant, mv.target, mv.setpoint_s, max_rate_bytes_per_s=opts.max_rate_bytes_per_s,
                               max_freeze_s=opts.max_freeze_s, setpoint_headroom=p.settings.setpoint_margin)
        batch.append((mv.tenant, mv.source, mv.target, request))
        say(f"moving {mv.tenant}: {mv.source} -> {mv.target} with setpoint {mv.setpoint_s * 1000:.0f}ms")
    res.executed = True
    outcome: dict[str, tuple[str, str, dict | None]] = {}
    for tenant, got in runner.start_all(batch).items():
        if isinstance(got, SlackerError):
            outcome[tenant] = ("failed", got.one_line(), None)
        else:
            guards[tenant] = TargetGuard(agents[got.target], agents[got.source], got.mid, settings.sla_s,
                                         res.guard, say)
    deadline = time.monotonic() + opts.max_wait_s
    last_refresh = time.monotonic()
    while runner.running:
        runner.wait_end(opts.poll_s)  # a look every poll_s, or as soon as a move ends
        if time.monotonic() - last_refresh >= opts.lock_ttl_s / 3:
            last_refresh = time.monotonic()
            try:
                directory.refresh_lock(LOCK_NAME, opts.holder)
            except SlackerError as exc:
                log.warning("could not refresh the rebalancer lock: %s", exc.one_line())
        for r in runner.poll():
            d = r.doc
            if r.lost:
                outcome[r.tenant] = ("unknown", r.lost, d)
            elif d.get("result") == "succeeded":
                outcome[r.tenant] = ("succeeded", "", d)
            else:
                e = d.get("error") or {}
                outcome[r.tenant] = ("failed", f"migration {d['id']} {d.get('result')} in phase "
                                     f"{e.get('phase') or d.get('phase')}: {e.get('what', '')}"
                                     + (f": {e['why']}" if e.get("why") else ""), d)
            say(f"{r.tenant}: {outcome[r.tenant][0]}")
        for tenant, r in runner.running.items():
            guards[tenant].check(r.doc)
        if time.monotonic() > deadline:
            for tenant in runner.running:
                outcome[tenant] = ("unknown", f"still running after {opts.max_wait_s:.0f}s; the agents finish it",
                                   None)
            break
    for tenant, rec in records.items():
        result, _, _ = outcome.get(tenant, ("unknown", "", None))
        _put_move(directory, Move(**{**rec.to_dict(), "finished_at": time.time(), "result": result}))
    first = plans[0].move.tenant
    res.result, res.error, res.migration = outcome.get(first, ("unknown", "", None))
    for m in res.more:
        t = m["plan"]["move"]["tenant"]
        m["result"], m["error"], doc = outcome.get(t, ("unknown", "", None))
        if doc is not None:
            m["migration"] = {k: doc.get(k) for k in ("id", "result", "phase", "duration_s", "freeze_ms")}


def _follow_patiently(agent, doc: dict, on_poll, poll_s: float) -> dict:
    """follow(), riding out an agent that does not answer for a while (it may be restarting)."""
    while True:
        try:
            return follow(agent, doc, on_poll, poll_s)
        except (AgentUnavailable, NotFound) as exc:
            log.warning("following migration %s: %s", doc["id"], exc.one_line())
            on_poll(doc)
            time.sleep(poll_s)


class TargetGuard:
    """Keeps the target node at the SLA while the copy runs: pauses the copy while the target's own
    tenants see latency above the SLA, resumes it when they are back below. (The migration's
    controller steers on the source at the setpoint; this is the target's side.)"""

    def __init__(self, target_agent, source_agent, mid: str, sla_s: float, log_to: list, say) -> None:
        self.target, self.source, self.mid, self.sla_s = target_agent, source_agent, mid, sla_s
        self.paused = False
        self.events = log_to
        self.say = say

    def latency(self) -> float | None:
        try:
            doc = self.target.request("GET", "/v1/tenant-stats", query={"history": 0}, timeout_s=AGENT_TIMEOUT_S)
        except SlackerError:
            return None
        return node_latency(doc["tenants"])

    def check(self, doc: dict) -> None:
        if not doc.get("active") or doc.get("phase") not in ("snapshot", "preflight"):
            if self.paused and doc.get("active"):
                self._set(False, None)
            return
        lat = self.latency()
        if lat is None:
            return
        if not self.paused and lat > self.sla_s:
            self._set(True, lat)
        elif self.paused and lat <= self.sla_s:
            self._set(False, lat)

    def _set(self, pause: bool, lat: float | None) -> None:
        try:
            self.source.request("POST", f"/v1/migrations/{self.mid}/set", {"pause" if pause else "resume": True})
        except SlackerError as exc:
            log.warning("target guard: %s", exc.one_line())
            return
        self.paused = pause
        what = "paused" if pause else "resumed"
        self.events.append({"at": time.time(), "action": what, "target_latency_s": lat})
        self.say(f"target guard: copy {what}" + (f" (target latency {lat * 1000:.0f}ms, SLA "
                                                 f"{self.sla_s * 1000:.0f}ms)" if lat is not None else ""))


def place_new_tenant(agents: dict, directory, tenant_id: str, samples: int = 3) -> str:
    """The node a new tenant goes to: the least loaded one that is reachable and not cordoned."""
    from .placement import Item, node_loads, place

    inputs, _ = collect(agents, owners_of(directory))
    p = place([Item(tenant_id)], node_loads(inputs, set(directory.cordons()), samples))
    if p.placements:
        return p.placements[0].target
    raise Conflict(f"no node can take tenant {tenant_id}", p.unplaced.get(tenant_id, "").removeprefix("no node can take it: "),
                   "uncordon a node (`slacker node uncordon NODE`) or bring its agent back (`slacker status`)")
