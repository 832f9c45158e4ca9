"""The target half of a migration, run by the target node's agent.

An incoming tenant lives in the node's tenants directory with desired state
"incoming" and fenced (read_only, persisted in its config): the supervisor
leaves it alone and the application account cannot write to it. It becomes
writable only when the directory names this node ("activate"), and it is
removed only when the directory shows the flip cannot happen. The source keeps
a lease on it; when the lease runs out, the target asks the directory itself,
and if the source could still flip, first bumps the epoch with the source as
owner so that flip fails — the directory's compare-and-set decides, never a clock.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time

from .. import mariadb
from ..backup import select_tool
from ..delta import make_applier  # serial|concurrent applier, catch-up mode
from ..delta.applier import ReplicationApplier, SourceLink
from ..errors import AgentUnavailable, Conflict, InvalidInput, MigrationFailed, NotFound, SlackerError
from ..mariadb import ops, replication
from ..mariadb.rowsums import table_sums
from ..procs import kill_group, kill_orphan
from ..tenants import DEFAULT_BUFFER_POOL_BYTES
from ..tenants import Tenant, port_holders, validate_tenant_id, wait_port_free
from ..transfer import Receiver
from .journal import Entry
from .participants import Participants
from .protocol import TARGET_MOVES, Phase, TargetState, check

log = logging.getLogger("slacker.migration.target")
# How long a target waits for the tenant's port to free up (a server of it that just stopped) before refusing.
PORT_FREE_WAIT_S = 10.0


class IncomingMigration:
    verify_schema = None  # --verify compares every user table of the server

    def __init__(self, node, entry: Entry, tenant: Tenant, participants: Participants,
                 source_host: str = "") -> None:
        self.node = node
        self.participants = participants  # the routers, told when this copy takes writes
        self.entry = entry
        self.id = entry.id
        self.tenant_id = entry.tenant
        self.tenant = tenant
        self.source_host = source_host
        self.mode = "live"
        self.created = time.monotonic()
        self.applier: ReplicationApplier | None = None
        self.receiver: Receiver | None = None
        self.position: dict | None = None
        self.state = entry.state
        self._prepare_proc = None
        self._verifier = None  # online verification's snapshot (slacker.verify), while one runs
        self.holding = ""  # the fault-injection point the activation pauses at now (tests, rehearsals)
        self.recovered = False  # read back from the journal when this agent started
        self._lock = threading.RLock()
        self.hold_s: dict | None = None  # fault injection: the source's hold points, for this side's steps

    # ---- creation -------------------------------------------------------------------
    @classmethod
    def create(cls, node, body: dict, participants: Participants) -> "IncomingMigration":
        tid = body["tenant"]
        entry = Entry(id=body["migration_id"], tenant=tid, role="target", peer=str(body.get("source_node", "")),
                      state=TargetState.RECEIVING, epoch_before=int(body.get("epoch_before") or 0),
                      source_node=str(body.get("source_node", "")),
                      lease_until=time.time() + float(body.get("lease_ttl_s") or 10.0))
        # Journaled before anything exists on disk, so a restart knows what to remove.
        node.journal.write(entry)
        try:
            tenant = node.tenants.new_tenant(tid, int(body["port"]),
                                             int(body.get("buffer_pool_bytes") or DEFAULT_BUFFER_POOL_BYTES),
                                             desired_state="incoming")
        except BaseException:
            node.journal.remove(entry)
            raise
        tenant.info.fenced = True
        inc = cls(node, entry, tenant, participants, str(body.get("source_host", "")))
        inc.mode = body.get("mode", "live")
        inc.hold_s = body.get("hold_s") or None
        try:
            mariadb.write_secret(tenant.admin_password_file, body["admin_password"] + "\n")
            mariadb.write_secret(tenant.app_password_file, body["app_password"] + "\n")
            for key, f in (("backup_password", tenant.backup_password_file), ("repl_password", tenant.repl_password_file)):
                if body.get(key):  # the accounts come with the copy; their passwords with this request
                    mariadb.write_secret(f, body[key] + "\n")
            tenant.save()
            # Whole, or not at all: a crash before this leaves only `tenants/.building/`, swept at start.
            node.tenants.put_in_place(tenant)
            tenant.datadir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(tenant.datadir).free
            expected = int(body.get("expected_bytes") or 0)
            if expected and free < expected * 1.2 + 64 * 1024 * 1024:
                raise MigrationFailed(f"target node {node.name} lacks disk space",
                                      f"{free} bytes free, the copy needs about {expected}",
                                      "free space on the target or pick another node", phase=Phase.PREFLIGHT)
            if inc.mode == "stop-and-copy":
                extract = ["tar", "-x", "-f", "-", "-C", str(tenant.datadir)]
            else:
                extract = select_tool().extract_argv(tenant.datadir)
            inc.receive(body, extract)
        except BaseException:
            inc.remove()
            raise
        return inc

    def receive(self, body: dict, extract: list[str]) -> None:
        """The copy's receiver, listening: one authenticated stream (the request's token) into `extract`."""
        self.receiver = Receiver(self.id, body["token"], extract, bind_host=self.node.config.tenant_host,
                                 ssl_context=None if body.get("plain_stream") else self.node.tls_server_context(),
                                 data_path=body.get("data_path"))
        self.receiver.start()

    def describe(self) -> dict:
        return {"id": self.id, "tenant": self.tenant_id, "state": self.state, "mode": self.mode,
                "receiver_host": self.node.config.tenant_host,
                "receiver_port": self.receiver.port if self.receiver else None,
                "bytes_received": self.receiver.bytes_received if self.receiver else 0,
                "lease_left_s": round(self.entry.lease_until - time.time(), 1), "holding": self.holding}

    def _move(self, new: TargetState) -> None:
        check(TARGET_MOVES, self.state, new, f"incoming migration {self.id}")
        self.state = new.value

    def _require(self, *states: str) -> None:
        if self.state not in states:
            raise Conflict(f"incoming migration {self.id} is {self.state}", f"expected {' or '.join(states)}", "")

    # ---- the steps the source drives ----------------------------------------------------
    def renew_lease(self, ttl_s: float) -> None:
        with self._lock:
            self._require(TargetState.RECEIVING, TargetState.RECEIVED, TargetState.PREPARED, TargetState.STARTED,
                          TargetState.CATCHING_UP, TargetState.PROMOTED)
            self.node.journal.update(self.entry, lease_until=time.time() + ttl_s)

    def finish_stream(self, timeout_s: float) -> dict:
        assert self.receiver is not None
        result = self.receiver.wait(timeout_s)
        self._move(TargetState.RECEIVED)
        return {"bytes_received": result.bytes_received,
                "stages": self.receiver.stages.as_dict()}

    def prepare(self) -> dict:
        tool = select_tool()

        def track(proc):
            self._prepare_proc = proc
            if self.state == TargetState.ABORTED:  # removed while starting: take it down with us
                kill_group(proc.pid)

        try:
            tool.prepare(self.tenant.datadir, on_start=track)
        finally:
            self._prepare_proc = None
        pos = tool.read_position(self.tenant.datadir)
        self.position = {"binlog_file": pos.binlog_file, "binlog_pos": pos.binlog_pos, "gtid": pos.gtid}
        self._move(TargetState.PREPARED)
        return self.position

    def start(self, gtid_state: str | None = None) -> None:
        """Start the copy fenced. The copy's binlog index names the source's files, so the target
        starts a log of its own, seeded with the source's GTID state when given."""
        for stale in self.tenant.datadir.glob("binlog.*"):
            stale.unlink()
        self.node.tenants.start_tenant(self.tenant, extra_args=["--skip-slave-start"])
        if gtid_state:
            conn = self.tenant.admin_connect(timeout_s=10)
            try:
                replication.seed_gtid_state(conn, gtid_state)
            finally:
                conn.close()
        self._move(TargetState.STARTED)

    def replicate(self, source_host: str, source_port: int, start_gtid: str, applier: str = "serial",
                  mpl: int | str = "auto", catchup_mode: bool = True) -> None:
        # the applier comes from slacker.delta (serial or concurrent; catch-up mode unless turned off).
        self.applier = make_applier(applier, lambda: self.tenant.admin_connect(timeout_s=10), mpl=mpl,
                                    datadir=self.tenant.datadir, catchup_mode=catchup_mode)
        tls = self.node.config.tls  # with TLS, replication is MASTER_SSL with the source's certificate verified
        self.applier.start(SourceLink(source_host, source_port, mariadb.REPL_USER, self.tenant.repl_password(),
                                      *((str(tls.ca), str(tls.cert), str(tls.key)) if tls else ())),
                           start_gtid)
        self._move(TargetState.CATCHING_UP)

    def wait_for(self, gtid: str, timeout_s: float) -> float:
        if self.applier is None:
            raise MigrationFailed("no delta applier on the target", "replicate was not called", "", phase=Phase.DELTA)
        return self.applier.wait_for(gtid, timeout_s)

    def applier_stats(self) -> dict:
        return self.applier.stats() if self.applier is not None else {}

    def make_durable(self) -> dict:
        """Leave catch-up mode before the freeze: durable commits, everything so far on disk."""
        if self.applier is None:
            return {"durable": True, "catchup": False}
        out = self.applier.restore_durability()
        return dict(out, durable=True, catchup=self.applier.relaxed)

    def checksums(self) -> dict:
        """Whole-table sums (stop-and-copy's --verify: the copy is not replicating)."""
        conn = self.tenant.admin_connect(timeout_s=10)
        try:
            return {k: list(v) for k, v in table_sums(conn).items()}
        finally:
            conn.close()

    def verify(self, body: dict) -> dict:
        """One step of online verification (slacker.verify.target): hold, open, chunk or close."""
        from ..verify.target import TargetVerifier

        op = body.get("op")
        with self._lock:
            self._require(TargetState.CATCHING_UP)
            if self._verifier is None:
                self._verifier = TargetVerifier(lambda: self.tenant.admin_connect(timeout_s=10), self.applier,
                                                self.verify_schema)
            v = self._verifier
        if op == "hold":
            return v.hold()
        if op == "open":
            return v.open(str(body["gtid"]), float(body.get("timeout_s", 600)))
        if op == "chunk":
            return {"sum": v.chunk(str(body["table"]), body.get("lo"), body.get("hi"))}
        if op == "close":
            v.close()
            return {"closed": True}
        raise InvalidInput(f"unknown verification step {op!r}", "hold, open, chunk or close", "")

    def ready(self, final_gtid: str | None) -> None:
        """Stop applying at exactly the source's final position and make it durable; still fenced."""
        with self._lock:
            self._require(TargetState.STARTED, TargetState.CATCHING_UP, TargetState.PROMOTED)
            if self.applier is not None and final_gtid is not None:
                self.applier.stop_at(final_gtid)
            conn = self.tenant.admin_connect(timeout_s=10)
            try:
                # Left catch-up mode (durable), every commit since has synced itself: nothing to force.
                # Still relaxed (no catch-up mode step, or a retry resumed it): force it all to disk now.
                if not ops.commits_are_durable(conn):
                    ops.flush_durable(conn)
            finally:
                conn.close()
            self.node.journal.update(self.entry, state=TargetState.PROMOTED, final_gtid=final_gtid)
            self._move(TargetState.PROMOTED)

    def resume(self) -> None:
        with self._lock:
            self._require(TargetState.PROMOTED, TargetState.CATCHING_UP)
            if self.applier is not None:
                self.applier.resume()
            self.node.journal.update(self.entry, state=TargetState.RECEIVING)
            self._move(TargetState.CATCHING_UP)

    def _hold(self, hold_s: dict | None, point: str) -> None:
        """Fault injection (tests, rehearsals; only with `fault_injection` on): pause at a named step of the
        activation, so a test can kill this agent exactly there."""
        seconds = (hold_s or {}).get(point)
        if seconds and self.node.config.fault_injection:
            self.holding = point
            try:
                time.sleep(float(seconds))
            finally:
                self.holding = ""

    # ---- the endings ------------------------------------------------------------------
    def activate(self, hold_s: dict | None = None) -> None:
        """The directory names this node: make the tenant writable and ours. Checked here, not trusted.
        `hold_s` (fault injection): pause at "activating" (the directory checked, nothing changed yet),
        "started" (the server runs without replication, still fenced), "unfencing" (unfenced in its
        tenant.json, the server not told yet) or "unfenced" (writable, the journal not yet cleared)."""
        with self._lock:
            if self.state == TargetState.OWNED:
                return
            if self.state == TargetState.ABORTED:
                raise Conflict(f"incoming migration {self.id} was removed", "its lease ran out before the flip", "")
            own = self.node.directory.lookup(self.tenant_id)  # AgentUnavailable: retried by the caller
            if own.node != self.node.name or own.epoch <= (self.entry.epoch_before or 0):
                raise Conflict(f"tenant {self.tenant_id} is not ours to activate",
                               f"the directory names {own.node} at epoch {own.epoch}", "")
            self._hold(hold_s, "activating")
            if self.receiver is not None:
                self.receiver.abort()
            dropped = False
            if not self.tenant.is_running():
                # Caught up exactly and durable when promoted: its replication files are of no more use,
                # and a kill while it replicated can leave them unreadable to a starting server.
                if self.state == TargetState.PROMOTED.value:
                    dropped = bool(replication.drop_replication_files(self.tenant.datadir))
                self.node.tenants.start_tenant(self.tenant, extra_args=["--skip-slave-start"])
            if self.applier is not None:
                if dropped:
                    self.applier.abort()  # no replication connection is left to reset
                else:
                    self.applier.detach()
            conn = self.tenant.admin_connect(timeout_s=10)
            try:
                replication.forget_replication(conn)
            finally:
                conn.close()
            self._hold(hold_s, "started")
            self.tenant.info.extra.pop("kept", None)  # a revert's target was a kept copy: ours now, saved with the fence
            self.node.tenants.set_fenced(self.tenant, False, desired_state="running", live=False)
            self._hold(hold_s, "unfencing")
            self.node.tenants.apply_fence(self.tenant)
            self._hold(hold_s, "unfenced")
            self._owned(own)  # it takes writes

    def flipped(self) -> bool:
        """Promoted and the directory names this node: nothing is left to decide, only to activate.
        False while the directory cannot be reached."""
        if self.state != TargetState.PROMOTED.value:
            return False
        try:
            own = self.node.directory.lookup(self.tenant_id)
        except SlackerError:
            return False
        return own.node == self.node.name and own.epoch > (self.entry.epoch_before or 0)

    def remove(self) -> None:
        """Remove every trace of the incoming tenant; never raises. Never once it is owned.
        Its files go through the trash (crash-atomic); the journal entry goes last, so a restart in
        between finds either the journaled tenant again or nothing under its name."""
        if not self._stop_for_removal():
            return
        proc = self._prepare_proc
        if proc is not None:
            kill_group(proc.pid)
        try:
            for pid in select_tool().stray_prepares(self.tenant.datadir):  # a killed agent's: writes on by path
                kill_orphan(pid)
        except SlackerError as exc:  # no backup tool here: nothing was prepared
            log.warning("looking for a prepare of %s left running: %s", self.tenant_id, exc.one_line())
        if self.applier is not None:
            self.applier.abort()
        try:
            self.node.tenants.kill_tenant(self.tenant)
        except Exception:
            log.exception("killing incoming tenant %s failed", self.tenant_id)
        try:
            self.node.tenants.remove_files(self.tenant, "rolled-back", self.id, self._pause)
        except OSError:
            log.exception("removing incoming tenant %s failed", self.tenant_id)
            return  # journaled still: the next start (or settle) removes it
        self.node.journal.remove(self.entry)

    def _stop_for_removal(self) -> bool:
        """Marked aborted (False: owned or aborted already, nothing to remove) and its stream stopped."""
        with self._lock:
            if self.state in (TargetState.OWNED, TargetState.ABORTED):
                return False
            self._move(TargetState.ABORTED)
        if self.receiver is not None:
            try:
                self.receiver.abort()
            except Exception:
                log.exception("receiver abort failed")
        return True

    def _owned(self, own) -> None:
        """Activated: routers still holding the tenant's statements send them here now, whoever asked for the
        activation (the source, or this agent on its own after a restart); the journal entry goes."""
        self.participants.held_anywhere(self.tenant_id).release(after_flip=True, own=own)
        self.node.journal.remove(self.entry)
        self._move(TargetState.OWNED)
        log.info("tenant %s activated on %s (epoch %d)", self.tenant_id, self.node.name, own.epoch)

    def _pause(self, step: str) -> None:
        """Fault injection (tests): hold inside the removal of the partial copy, at `remove-STEP`."""
        hold = (self.hold_s or {}).get(f"remove-{step}")
        if hold and self.node.config.fault_injection:
            log.warning("incoming migration %s: holding at remove-%s for %ss (fault injection)", self.id, step, hold)
            time.sleep(float(hold))

    def settle(self) -> str:
        """The source's lease ran out (or this agent restarted or stops): let the directory decide.

        Returns what happened: "activated", "removed", or "waiting" (directory unreachable, or the
        flip's outcome still open). Nothing changes state while the directory cannot be reached.
        """
        with self._lock:
            if self.state in (TargetState.OWNED, TargetState.ABORTED):
                return "done"
            try:
                own = self.node.directory.lookup(self.tenant_id)
            except NotFound:
                self.remove()
                return "removed"
            except AgentUnavailable:
                return "waiting"
            if own.node == self.node.name and own.epoch > (self.entry.epoch_before or 0):
                try:
                    self.activate()
                    return "activated"
                except SlackerError as exc:
                    log.warning("activating %s failed: %s", self.tenant_id, exc.one_line())
                    return "waiting"
            if self.state == TargetState.PROMOTED and own.epoch == self.entry.epoch_before:
                # The source may still send its flip: make it fail first by moving the epoch on with the
                # source as owner. Whichever compare-and-set lands first wins; both sides then agree.
                try:
                    self.node.directory.compare_and_set(self.tenant_id, own.epoch, own.node, own.host, own.port)
                except (AgentUnavailable, Conflict):
                    return "waiting"
            log.warning("removing incoming tenant %s of migration %s: no flip to %s (directory names %s)",
                        self.tenant_id, self.id, self.node.name, own.node)
            self.remove()
            return "removed"


class RevertIncoming(IncomingMigration):
    """`slacker migrate --revert`: this node's kept copy of the tenant (slacker.migration.kept), fenced and
    replicating from the owner since the flip, adopted as the target of the move back. Nothing is copied; the
    handover drives its replication as any target's. Removed (the move back rolled back), it is not deleted:
    it is kept again, fenced and replicating, until its time ends."""

    @classmethod
    def adopt(cls, node, body: dict, participants: Participants) -> "RevertIncoming":
        tid = validate_tenant_id(body["tenant"])
        t = node.migrations.kept.get(tid)  # NotFound: no kept copy here
        kept = t.info.extra["kept"]
        source = str(body.get("source_node", ""))
        if kept.get("owner") != source:
            raise Conflict(f"the kept copy of {tid} on {node.name} replicates from {kept.get('owner')}",
                           f"not from {source}, which asks to move it back", "")
        conn = t.admin_connect(timeout_s=10)
        try:
            st = replication.connection_status(conn, ReplicationApplier.CONNECTION)
            applied = replication.gtid_slave_pos(conn)
        finally:
            ops.close_quietly(conn)
        if not st or st.get("Slave_SQL_Running") != "Yes" or st.get("Last_SQL_Errno"):
            why = (st or {}).get("Last_SQL_Error") or "its replication is not running"
            raise MigrationFailed(f"the kept copy of {tid} on {node.name} is not replicating",
                                  str(why).splitlines()[0], f"see `slacker status`; the tenant stays on {source}",
                                  phase=Phase.PREFLIGHT)
        entry = Entry(id=body["migration_id"], tenant=tid, role="target", peer=source, state=TargetState.RECEIVING,
                      epoch_before=int(body.get("epoch_before") or 0), source_node=source, note="revert",
                      lease_until=time.time() + float(body.get("lease_ttl_s") or 10.0))
        node.journal.write(entry)
        inc = cls(node, entry, t, participants, "")
        inc.hold_s = body.get("hold_s") or None
        inc.attach()
        inc.applied = applied
        return inc

    applied = ""

    def attach(self) -> None:
        """Drive the replication already running (the kept copy's) as this move's delta applier."""
        self.applier = ReplicationApplier(lambda: self.tenant.admin_connect(timeout_s=10))
        self.state = TargetState.CATCHING_UP.value

    def describe(self) -> dict:
        return dict(super().describe(), revert=True, applied_gtid=self.applied)

    def make_durable(self) -> dict:
        """Leave the kept copy's catch-up mode before the freeze (slacker.migration.kept)."""
        out = self.node.migrations.kept.make_durable(self.tenant)
        return dict(out, durable=True, catchup=False)

    def remove(self) -> None:
        """The move back did not flip: the copy is kept again (never deleted here); never raises."""
        with self._lock:
            if self.state in (TargetState.OWNED, TargetState.ABORTED):
                return
            self._move(TargetState.ABORTED)
        try:
            self.node.migrations.kept.resume(self.tenant)
        except Exception as exc:  # noqa: BLE001 - still fenced on disk; the kept copy's status shows it
            log.warning("the kept copy of %s: replicating again failed: %s", self.tenant_id, exc)
        self.node.journal.remove(self.entry)


class IncomingRegistry:
    def __init__(self, node, participants: Participants) -> None:
        self.node = node
        self.participants = participants
        self._items: dict[str, IncomingMigration] = {}
        self._lock = threading.Lock()
        self._recover()

    def _recover(self) -> None:
        """After a restart: journaled incoming tenants wait for the directory; unjournaled ones never
        reached the flip and go."""
        journaled = {}
        shared = self.node.kinds.get("shared")
        incoming_shared = {r["id"]: r for r in shared.incoming()} if shared is not None else {}
        for e in self.node.journal.entries("target"):
            if e.note == "revert" and self.node.tenants.exists(e.tenant):  # a move back onto a kept copy
                inc = RevertIncoming(self.node, e, self.node.tenants.get(e.tenant), self.participants)
                # promoted: only the directory decides; else it was catching up (settled at once: kept again)
                inc.state = e.state if e.state == TargetState.PROMOTED else TargetState.CATCHING_UP.value
                inc.applier = ReplicationApplier(lambda t=inc.tenant: t.admin_connect(timeout_s=10))
                inc.recovered = True
                if e.state != TargetState.PROMOTED:
                    e.lease_until = 0
                self.node.claim(e.tenant)
                self._items[e.id] = inc
                continue
            if e.tenant in incoming_shared:
                from .onedb_target import IncomingOneDb

                incoming_shared.pop(e.tenant)
                inc = IncomingOneDb(self.node, e, self.participants)
                inc.recovered = True
                if e.state != TargetState.PROMOTED:
                    e.lease_until = 0  # its stream and delta connection died with the old agent: settle at once
                self.node.claim(e.tenant)
                self._items[e.id] = inc
                continue
            if self.node.tenants.exists(e.tenant) and self.node.tenants.get(e.tenant).info.desired_state == "incoming":
                journaled[e.tenant] = e
                continue
            if self.node.tenants.exists(e.tenant) and e.state == TargetState.PROMOTED:
                t = self.node.tenants.get(e.tenant)
                if t.info.desired_state == "running" and not t.info.fenced:
                    # An activation cut short after it unfenced on disk: the running server may not have
                    # been told yet (the fence is persisted first), and the routers may still hold the tenant.
                    try:
                        self.node.tenants.apply_fence(t)
                    except SlackerError as exc:  # the reconciler tries again on every tick
                        log.warning("unfencing tenant %s after a restart: %s", t.id, exc.one_line())
                    self.participants.held_anywhere(e.tenant).release(after_flip=True)
            self.node.journal.remove(e)
        for tid in incoming_shared:  # laid out, never journaled (or the journal entry went first): never flipped
            log.warning("removing unjournaled incoming shared tenant %s", tid)
            try:
                shared.remove_incoming(tid)
            except Exception as exc:  # noqa: BLE001 - its record stays; the next start tries again
                log.warning("removing incoming shared tenant %s: %s", tid, exc)
        for t in self.node.tenants.list():
            if t.info.desired_state != "incoming":
                continue
            e = journaled.get(t.id)
            if e is None:
                log.warning("removing unjournaled incoming tenant %s", t.id)
                self.node.tenants.kill_tenant(t)
                self.node.tenants.remove_files(t, "unjournaled")
                continue
            if e.note == "unpack":  # a shared tenant given a server of its own here
                from .onedb_target import UnpackedIncoming
                inc = UnpackedIncoming(self.node, e, t, self.participants)
            else:
                inc = IncomingMigration(self.node, e, t, self.participants)
            inc.recovered = True
            if e.state != TargetState.PROMOTED:
                e.lease_until = 0  # its stream and applier died with the old agent: settle at once
            self.node.claim(t.id)
            self._items[e.id] = inc

    def create(self, body: dict) -> dict:
        if body.get("revert"):
            for key in ("migration_id", "tenant", "source_node"):
                if key not in body:
                    raise InvalidInput(f"incoming migration lacks {key}", "", "")
            return self._made(str(body["tenant"]),
                              lambda: RevertIncoming.adopt(self.node, body, self.participants))
        if body.get("kind") == "shared":
            return self._create_shared(body)
        if body.get("unpack"):
            return self._create_unpacked(body)
        for key in ("migration_id", "tenant", "port", "admin_password", "app_password", "token"):
            if key not in body:
                raise InvalidInput(f"incoming migration lacks {key}", "", "")
        tid = validate_tenant_id(body["tenant"])
        port = int(body["port"])
        if self.node.tenants.exists(tid):
            if self.node.tenants.get(tid).info.extra.get("kept"):
                raise Conflict(f"node {self.node.name} keeps an old copy of {tid}", "it replicates from the owner",
                               f"move it back with `slacker migrate --revert {tid}`, or `slacker migrate --release "
                               f"{tid}` first")
            raise Conflict(f"node {self.node.name} already has a tenant {tid}",
                           "a tenant with that id exists there", "delete it first or pick another target")
        # A copy of this tenant this node just retired (a move back right after a move away) may hold the
        # port for a moment while its server exits: wait that out before refusing.
        if not wait_port_free(self.node.config.tenant_host, port, PORT_FREE_WAIT_S):
            holders = port_holders(port)
            raise Conflict(f"port {port} is in use on {self.node.config.tenant_host}",
                           f"the tenant needs its port; {', '.join(holders) or 'a process'} listens there "
                           f"(still after {PORT_FREE_WAIT_S:g}s)", "stop whatever listens there")
        return self._made(tid, lambda: IncomingMigration.create(self.node, body, self.participants))

    def _made(self, tid: str, make) -> dict:
        """The tenant claimed for the move while `make()` makes its incoming migration, which is then listed."""
        self.node.claim(tid)
        try:
            inc = make()
        except BaseException:
            self.node.release(tid)
            raise
        with self._lock:
            self._items[inc.id] = inc
        return inc.describe()

    def _create_shared(self, body: dict) -> dict:
        """A shared tenant's move into this node's shared server (slacker.migration.onedb_target)."""
        from .onedb_target import IncomingOneDb

        for key in ("migration_id", "tenant", "app_password", "repl_password", "source_domain", "token"):
            if key not in body:
                raise InvalidInput(f"incoming migration lacks {key}", "", "")
        tid = self.node.kinds["shared"].kind.check_id(body["tenant"])
        if self.node.holds_tenant(tid):
            raise Conflict(f"node {self.node.name} already has a tenant {tid}",
                           "a tenant with that id exists there", "delete it first or pick another target")
        return self._made(tid, lambda: IncomingOneDb.create(self.node, body, self.participants))

    def _create_unpacked(self, body: dict) -> dict:
        """A shared tenant given a server of its own on this node (slacker.migration.onedb_target)."""
        from .onedb_target import UnpackedIncoming

        for key in ("migration_id", "tenant", "app_password", "repl_password", "source_domain", "token"):
            if key not in body:
                raise InvalidInput(f"incoming migration lacks {key}", "", "")
        tid = validate_tenant_id(body["tenant"])
        if self.node.holds_tenant(tid):
            raise Conflict(f"node {self.node.name} already has a tenant {tid}",
                           "a tenant with that id exists there", "delete it first or pick another target")
        return self._made(tid, lambda: UnpackedIncoming.create(self.node, body, self.participants))

    def get(self, mid: str) -> IncomingMigration:
        with self._lock:
            inc = self._items.get(mid)
        if inc is None:
            raise NotFound(f"no incoming migration {mid} on {self.node.name}", "", "")
        return inc

    def _drop(self, inc: IncomingMigration) -> None:
        with self._lock:
            if self._items.pop(inc.id, None) is not None:
                self.node.release(inc.tenant_id)

    def activate(self, mid: str, tenant_id: str, hold_s: dict | None = None) -> dict:
        with self._lock:
            inc = self._items.get(mid)
        if inc is None:
            # Settled already (by its own lease check or before a restart): fine if it is ours now.
            shared = self.node.kinds.get("shared")
            if shared is not None and shared.holds(tenant_id):
                own = self.node.directory.lookup(tenant_id)
                try:
                    ready = shared.get(tenant_id)
                except NotFound:
                    ready = None
                if ready is not None and own.node == self.node.name:
                    return {"activated": True, "already": True}
            if self.node.tenants.exists(tenant_id):
                t = self.node.tenants.get(tenant_id)
                own = self.node.directory.lookup(tenant_id)
                if t.info.desired_state == "running" and not t.info.fenced and own.node == self.node.name:
                    if t.id in self.node.tenants.fence_unsure:
                        self.node.tenants.apply_fence(t)  # TenantError: the source asks again
                    return {"activated": True, "already": True}
            raise NotFound(f"no incoming migration {mid} on {self.node.name}", "", "")
        inc.activate(hold_s)
        self._drop(inc)
        return {"activated": True}

    def remove(self, mid: str) -> None:
        inc = self.get(mid)
        with inc._lock:
            if inc.state == TargetState.OWNED:
                raise Conflict(f"tenant {inc.tenant_id} is owned here now", "the directory names this node", "")
            inc.remove()
        self._drop(inc)

    def tick(self) -> None:
        """Settle every incoming migration whose lease ran out, and activate at once every promoted one
        read back from the journal that the directory already names (the flip done while this agent was
        down: the source's request was lost). Runs when the agent starts, before its API answers, and on
        every supervisor tick after (while the directory cannot be reached): the tenant takes writes as
        soon as this agent is back, not after its lease or the source's next retry."""
        with self._lock:
            items = list(self._items.values())
        for inc in items:
            if time.time() > inc.entry.lease_until or (inc.recovered and inc.flipped()):
                if inc.settle() in ("activated", "removed", "done"):
                    self._drop(inc)

    def list(self) -> list[dict]:
        with self._lock:
            return [i.describe() for i in self._items.values()]

    def shutdown(self) -> None:
        """Stopping: settle what the directory can decide now; the rest waits for the next start."""
        with self._lock:
            items = list(self._items.values())
        for inc in items:
            inc.entry.lease_until = 0
            if inc.settle() in ("activated", "removed", "done"):
                self._drop(inc)
