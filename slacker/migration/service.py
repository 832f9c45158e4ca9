"""Migrations inside an agent: the registry of outgoing and incoming migrations, their recovery
after a restart, the reconciliation of local tenants with the directory, and the HTTP routes."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..controller.budget import NodeBudget
from ..controller.loop import CopyRate
from ..errors import CatchUpTimeout, Conflict, InvalidInput, NotFound
from ..transfer import TLS_PIPES
from ..trash import TrashName, as_field, discard, sweep, sweep_building
from .kept import KeptCopies
from .machine import Migration
from .metrics import MigrationCollector, Tally
from .options import MigrationOptions, MigrationRequest
from .participants import Participants
from .protocol import Phase, SourceState
from .reconcile import Reconciler
from .target import IncomingRegistry

log = logging.getLogger("slacker.migrations")
KEEP_FINISHED = 50
MAX_WAIT_S = 5.0  # the longest a GET of one migration waits for its end (?wait=SECONDS)


class MigrationService:
    def __init__(self, node, participants: Participants) -> None:
        self.node = node
        self.participants = participants  # the routers (slacker.migration.participants), wired in by the agent
        self._outgoing: dict[str, Migration] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self.tally = Tally()  # counters of ended migrations for /metrics
        self.budget = NodeBudget()  # one controller of this node's latency for its outgoing copies
        from ..controller.memory import RateMemory
        self.budget.memory = RateMemory(node.config.data_root / "rate-memory.json")  # where its next copy starts
        # Before anything else looks at the disk: what a crash left half built or half removed.
        sweep_building(node.tenants.tenants_dir)
        sweep_building(node.tenants.seed.root)
        node.tenants.sweep()
        self.kept = KeptCopies(node)  # old copies kept after a move (--keep-source), for --revert
        self.incoming = IncomingRegistry(node, participants)
        self._clean_work_dirs()
        self._recover_outgoing()
        self.reconciler = Reconciler(node)

    # ---- after a restart ----------------------------------------------------------------
    def _clean_work_dirs(self) -> None:
        """Work directories (backup defaults file with credentials, temp files) of migrations that
        died with the previous agent."""
        root = self.work_root
        if not root.is_dir():
            return
        sweep(root)
        for d in root.iterdir():
            if d.is_dir() and not d.name.startswith("."):
                log.warning("removing the work directory of an interrupted migration: %s", d.name)
                discard(d, TrashName("work", as_field(d.name), "interrupted"))

    @property
    def work_root(self) -> Path:
        return Path(self.node.config.data_root) / "migrations"

    def _recover_outgoing(self) -> None:
        for entry in self.node.journal.entries("source"):
            opts = MigrationOptions(target=entry.peer, keep_source_s=entry.keep_s)  # past the flip: keep or retire
            if entry.state == SourceState.READY and entry.resume:  # the options it waits with, as it was sent
                opts = MigrationRequest.from_wire(entry.resume["options"]).options
            mig = Migration(self.node, entry.tenant, opts, participants=self.participants, recovered=entry)
            log.warning("migration %s was in state %s when the agent stopped: recovering", entry.id, entry.state)
            self.node.claim(entry.tenant)
            self._outgoing[mig.id] = mig
            self._run(mig, mig.recover, None)

    def _run(self, mig: Migration, fn, rate_policy) -> None:
        def runner():
            try:
                fn()
            finally:
                try:
                    if not mig.active:
                        self.tally.finished(mig.record, mig.opts.max_freeze_s)
                    self.node.release(mig.tenant_id)
                    if rate_policy is not None:
                        rate_policy.close()
                finally:  # the old copy, set aside under another name: nothing waits on its deletion
                    mig.remove_retired_copy()

        t = threading.Thread(target=runner, name=f"migration-{mig.id}", daemon=True)
        self._threads[mig.id] = t
        t.start()

    # ---- outgoing -----------------------------------------------------------------------
    def start(self, request: MigrationRequest, rate_policy: CopyRate | None = None) -> Migration:
        """Start the request's migration (validated where it was decoded: MigrationRequest.from_wire)."""
        tenant_id, options = request.tenant, request.options
        with self._lock:
            for m in self._outgoing.values():
                if m.tenant_id == tenant_id and m.active:
                    raise Conflict(f"tenant {tenant_id} is already migrating", f"migration {m.id} is in {m.phase}",
                                   f"wait for it, or `slacker migrate --abort {tenant_id}`")
        if options.into == self.node.kind_here(tenant_id):
            options.into = None  # it has that kind already
        self.node.refuse_unmovable(tenant_id, options.mode, options.verify or options.verify_only,  # docs/shared.md
                                   options.snapshot, options.into)
        if self.node.kind_here(tenant_id) == "server":
            self.node.tenants.get(tenant_id)  # NotFound early, with the node's message
        elif options.keep_source_s or options.revert:
            raise InvalidInput(f"tenant {tenant_id} shares a server: --keep-source and --revert are for whole-server "
                               "tenants", "a shared tenant's old copy is not kept yet", "drop --keep-source")
        if self.node.config.tls is not None and not TLS_PIPES.get(options.pipe):
            raise InvalidInput(f"the {options.pipe} pipe cannot be used: this cluster requires TLS",
                               "pv | nc sends the backup in plain text", "use --pipe native (the default)")
        if options.hold_s and not self.node.config.fault_injection:
            raise InvalidInput("fault injection is disabled on this agent",
                               "hold_s is a test and rehearsal aid", "set fault_injection = true in agent.toml")
        if rate_policy is None and options.controller:
            rate_policy = self._rate_policy(tenant_id, options)
        mig = Migration(self.node, tenant_id, options, participants=self.participants, rate_policy=rate_policy)
        if rate_policy is not None:
            rate_policy.migration = mig.id
        self.node.claim(tenant_id)
        with self._lock:
            self._outgoing[mig.id] = mig
            self._trim()
        self._run(mig, mig.run, rate_policy)
        return mig

    def _rate_policy(self, tenant_id: str, options: MigrationOptions) -> CopyRate:
        """The move's controller: a share of the node's budget (one controller of the node's latency for
        all its outgoing copies), or with budget "own" a controller of its own (the bench baseline)."""
        from ..throttle import build_rate_policy, build_target_guard

        c = options.controller
        if c.budget == "own" or not c.steered:
            return build_rate_policy(self.node, tenant_id, options)
        guard = None
        if c.target_guard and options.target:
            def guard():
                return build_target_guard(self.node, options.target, tenant_id, c.window_s, c.step_s)
        from ..controller.metrics import ControllerMetrics
        share = self.budget.join(tenant_id, options.target, c,
                                 lambda guards: build_rate_policy(self.node, tenant_id, options, guards=guards),
                                 guard, c.budget, metrics=ControllerMetrics.on(self.node.registry))
        return share if share is not None else build_rate_policy(self.node, tenant_id, options)

    def _trim(self) -> None:
        done = [m for m in self._outgoing.values() if not m.active]
        for m in done[:-KEEP_FINISHED]:
            self._outgoing.pop(m.id, None)
            self._threads.pop(m.id, None)

    def get(self, key: str) -> Migration:
        """By migration id, or by tenant id (its most recent migration)."""
        with self._lock:
            if key in self._outgoing:
                return self._outgoing[key]
            for m in reversed(list(self._outgoing.values())):
                if m.tenant_id == key:
                    return m
        raise NotFound(f"no migration {key} on {self.node.name}", "it is unknown or was forgotten",
                       "see `slacker status`")

    def list(self, active_only: bool = False) -> list[dict]:
        """Every migration it keeps (the last KEEP_FINISHED ended ones too), or the running ones alone: what a
        drain or the rebalancer asks for on every look (the ended ones' documents are most of the answer)."""
        with self._lock:
            out = [m.to_dict() for m in self._outgoing.values() if m.active or not active_only]
        return out + [dict(i, direction="incoming") for i in self.incoming.list()]

    def active(self) -> list[Migration]:
        with self._lock:
            return [m for m in self._outgoing.values() if m.active]

    def busy_tenants(self) -> set[str]:
        with self._lock:
            return {m.tenant_id for m in self._outgoing.values() if m.active}

    def tick(self) -> None:
        """From the supervisor: settle expired incoming leases, reconcile idle tenants with the directory,
        finish removals of work directories a crash cut short."""
        self.incoming.tick()
        self.kept.tick()
        self.reconciler.tick()
        sweep(self.work_root)

    def shutdown(self) -> None:
        """Abort what can still be aborted; a migration past its flip is left to the journal."""
        with self._lock:
            # A migration ready for its cutover is left to its journal: the restarted agent resumes the wait.
            active = [m for m in self._outgoing.values() if m.active and m.phase != Phase.READY]
        for m in active:
            try:
                m.abort("the source agent is shutting down")
            except Conflict:
                pass
        for m in active:
            t = self._threads.get(m.id)
            if t is not None and not m.past_point_of_no_return:
                t.join(timeout=60)
        self.incoming.shutdown()


def attach(node, server, participants: Participants) -> None:
    """Give a node its migration service and add the migration routes to its API server. `participants`
    take part in every handover of this node's tenants (the routers: slacker.router.freeze.Routers)."""
    svc = MigrationService(node, participants)
    node.migrations = svc
    node.registry.register(MigrationCollector(node.name, svc))
    node.supervisor.on_tick.append(svc.tick)
    MID = r"([A-Za-z0-9._-]{1,128})"

    @server.route("POST", "/v1/migrations")
    def start(srv, body, q):
        return svc.start(MigrationRequest.from_wire(body)).to_dict()  # the body checked here, once

    @server.route("GET", "/v1/migrations")
    def list_(srv, body, q):
        return {"migrations": svc.list(active_only=q.get("active") in ("1", "true"))}  # ?active=1: running ones

    @server.route("GET", "/v1/budget")
    def budget(srv, body, q):
        """The node's one controller for its outgoing copies and how its rate is split (docs/fleet.md)."""
        return svc.budget.status()

    @server.route("POST", "/v1/budget/memory/reset")
    def budget_memory_reset(srv, body, q):
        """Forget what the node's controlled copies held: the next copy starts at the controller's safe start."""
        return {"forgotten": svc.budget.memory.reset()}

    @server.route("GET", f"/v1/migrations/{MID}")
    def get(srv, body, q, mid):
        m = svc.get(mid)
        if q.get("wait"):  # long poll: answer as soon as it ends, or after `wait` seconds (at most 5)
            m.record.ended.wait(min(max(float(q["wait"]), 0.0), MAX_WAIT_S))
        return m.to_dict()

    @server.route("POST", f"/v1/migrations/{MID}/abort")
    def abort(srv, body, q, mid):
        m = svc.get(mid)
        if not m.active:
            raise Conflict(f"migration {m.id} already ended", f"result: {m.result}", "")
        m.abort(body.get("reason") or "aborted by the operator")
        return m.to_dict()

    @server.route("POST", f"/v1/migrations/{MID}/finish")
    def finish(srv, body, q, mid):
        m = svc.get(mid)
        if not m.active:
            raise Conflict(f"migration {m.id} already ended", f"result: {m.result}", "nothing to finish")
        if not m.past_point_of_no_return:
            raise Conflict(f"migration {m.id} is not past its flip", f"it is in {m.phase}",
                           "it finishes by itself, or `slacker migrate --abort` cancels it")
        m.finish_now()
        return m.to_dict()

    @server.route("POST", f"/v1/migrations/{MID}/cutover")
    def cutover(srv, body, q, mid):
        m = svc.get(mid)
        if not m.active:
            raise Conflict(f"migration {m.id} already ended", f"result: {m.result}", "")
        m.cutover_now(verify=bool(body.get("verify")))
        return m.to_dict()

    @server.route("POST", f"/v1/migrations/{MID}/set")
    def set_(srv, body, q, mid):
        m = svc.get(mid)
        if not m.active:
            raise Conflict(f"migration {m.id} already ended", f"result: {m.result}", "")
        from ..throttle import apply_settings
        apply_settings(m, body)
        return m.to_dict()

    @server.route("GET", f"/v1/migrations/{MID}/series")
    def series(srv, body, q, mid):
        m = svc.get(mid)
        path = Path(m.record.series_path)
        return {"path": str(path), "lines": path.read_text().splitlines() if path.exists() else []}

    # ---- kept sources (slacker.migration.kept) -----------------------------------------------
    @server.route("GET", "/v1/kept")
    def kept_list(srv, body, q):
        return {"kept": svc.kept.list()}

    @server.route("POST", f"/v1/kept/{MID}/release")
    def kept_release(srv, body, q, tid):
        return svc.kept.release(tid, str(body.get("reason") or "released by the operator"))

    # ---- target side --------------------------------------------------------------
    inc = svc.incoming

    @server.route("POST", "/v1/incoming")
    def inc_create(srv, body, q):
        return inc.create(body)

    @server.route("GET", f"/v1/incoming/{MID}")
    def inc_get(srv, body, q, mid):
        return inc.get(mid).describe()

    @server.route("POST", f"/v1/incoming/{MID}/lease")
    def inc_lease(srv, body, q, mid):
        inc.get(mid).renew_lease(float(body.get("ttl_s", 10)))
        return {"renewed": True}

    @server.route("POST", f"/v1/incoming/{MID}/stream")
    def inc_stream(srv, body, q, mid):
        return inc.get(mid).finish_stream(float(body.get("timeout_s", 120)))

    @server.route("POST", f"/v1/incoming/{MID}/prepare")
    def inc_prepare(srv, body, q, mid):
        return inc.get(mid).prepare()

    @server.route("POST", f"/v1/incoming/{MID}/start")
    def inc_start(srv, body, q, mid):
        inc.get(mid).start(body.get("gtid_state"))
        return {"started": True}

    @server.route("POST", f"/v1/incoming/{MID}/replicate")
    def inc_replicate(srv, body, q, mid):
        inc.get(mid).replicate(str(body["source_host"]), int(body["source_port"]), str(body["start_gtid"]),
                               applier=str(body.get("applier", "serial")), mpl=body.get("mpl", "auto"),
                               catchup_mode=bool(body.get("catchup", True)))
        return {"replicating": True}

    @server.route("POST", f"/v1/incoming/{MID}/wait")
    def inc_wait(srv, body, q, mid):
        m = inc.get(mid)
        try:
            waited = m.wait_for(str(body["gtid"]), float(body.get("timeout_s", 60)))
        except CatchUpTimeout:
            if not body.get("probe"):
                raise
            # the ready phase's probe (slacker.migration.ready): not there yet is an answer, not a failure
            return {"caught_up": False, "waited_s": float(body.get("timeout_s", 60)), "applier": m.applier_stats()}
        return {"caught_up": True, "waited_s": waited, "applier": m.applier_stats()}  # apply rate, MPL per round

    @server.route("POST", f"/v1/incoming/{MID}/durable")
    def inc_durable(srv, body, q, mid):
        return inc.get(mid).make_durable()  # leave catch-up mode before the freeze

    @server.route("POST", f"/v1/incoming/{MID}/checksums")
    def inc_checksums(srv, body, q, mid):
        return {"checksums": inc.get(mid).checksums()}

    @server.route("POST", f"/v1/incoming/{MID}/verify")
    def inc_verify(srv, body, q, mid):
        return inc.get(mid).verify(body)  # online verification (slacker.verify): hold, open, chunk, close

    @server.route("POST", f"/v1/incoming/{MID}/ready")
    def inc_ready(srv, body, q, mid):
        inc.get(mid).ready(body.get("final_gtid"))
        return {"ready": True}

    @server.route("POST", f"/v1/incoming/{MID}/resume")
    def inc_resume(srv, body, q, mid):
        inc.get(mid).resume()
        return {"resumed": True}

    @server.route("POST", f"/v1/incoming/{MID}/activate")
    def inc_activate(srv, body, q, mid):
        return inc.activate(mid, str(body.get("tenant") or mid.rsplit("-", 2)[0]), hold_s=body.get("hold_s"))

    @server.route("DELETE", f"/v1/incoming/{MID}")
    def inc_delete(srv, body, q, mid):
        inc.remove(mid)
        return {"removed": mid}
