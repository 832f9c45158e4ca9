"""The target half of a shared tenant's move: its database arriving in this node's shared server.

The steps and states are a whole server's (slacker.migration.target.IncomingMigration); what differs:

- nothing new is started: the copy streams into the running shared server (the receiver's extract is
  slacker.onedb_load, the dump into the `mariadb` client with the binlog off), so its neighbours serve on;
- until the move activates it the tenant has a record in state `incoming` and a database, and no account:
  no client can log in to it, so it needs no fence of its own;
- the delta is a replication connection of the shared server named after the source node, filtered to
  the tenant's database and the source server's GTID domain (slacker.mariadb.onedb.start_delta);
- activation drops that connection, makes the tenant's accounts and marks it ready; removal drops the
  connection, the database and the record (crash-atomic, slacker.kinds.shared).
"""

from __future__ import annotations

import json
import logging
import sys
import time

from .. import mariadb, onedb_snapshot, trash
from ..backup import MariaBackup
from ..delta.applier import DeltaApplier, SourceLink
from ..errors import CatchUpTimeout, Conflict, MigrationFailed
from ..mariadb import onedb, ops
from ..onedb_snapshot import Login, parse_dump_position
from .journal import Entry
from .protocol import Phase, TargetState
from .target import IncomingMigration

log = logging.getLogger("slacker.migration.onedb")


class OneDbApplier(DeltaApplier):
    """The shared server's replication connection for one source node, filtered to one database."""

    name = "onedb"

    def __init__(self, connect, name: str, db: str, domain: int) -> None:
        self._connect = connect
        self.connection, self.db, self.domain = name, db, domain
        self.pause_ms = 0.0  # how long other connections' SQL threads were paused to set its position
        self.skipped = 0  # neighbours' transactions the filter let through and that were skipped

    def _with(self, fn, *args):
        conn = self._connect()
        try:
            return fn(conn, *args)
        finally:
            ops.close_quietly(conn)

    def start(self, source: SourceLink, start_gtid: str) -> None:
        def go(conn):
            return onedb.start_delta(conn, self.connection, self.db, host=source.host, port=source.port,
                                     user=source.user, password=source.password, snapshot_gtid=start_gtid,
                                     domain=self.domain)
        self.pause_ms = self._with(go).pause_ms

    def _check(self, conn) -> None:
        err = onedb.delta_error(conn, self.connection, self.db)
        if err is None:
            return
        if err.foreign and onedb.skip_foreign(conn, self.connection, self.db):
            self.skipped += 1
            return
        raise MigrationFailed("the target stopped applying the delta", f"SQL thread: {err.errno} {err.message}",
                              "the source keeps serving; inspect the target's error log", phase=Phase.DELTA)

    def wait_for(self, gtid: str, timeout_s: float) -> float:
        t0 = time.monotonic()
        conn = self._connect()
        try:
            self._wait_applied(conn, gtid, t0 + timeout_s, "the target did not catch up in time", Phase.DELTA)
            return time.monotonic() - t0
        finally:
            ops.close_quietly(conn)

    def _wait_applied(self, conn, gtid: str, deadline: float, what: str, phase: str) -> None:
        """Until the source domain's part of `gtid` is applied (a neighbour's statement that stops the thread
        skipped); CatchUpTimeout at `deadline`."""
        while not onedb.wait_applied(conn, gtid, self.domain, max(0.0, min(1.0, deadline - time.monotonic()))):
            self._check(conn)
            if time.monotonic() >= deadline:
                raise CatchUpTimeout(what, f"waited for {onedb.domain_part(gtid, self.domain)}, applied "
                                     f"{_slave_pos(conn)}", "the write load may be too heavy for the applier",
                                     phase=phase)

    def applied(self) -> str:
        return self._with(_slave_pos)

    def stats(self) -> dict:
        return {"applier": "filtered replication (one database)", "mpl": 1, "skipped": self.skipped,
                "pause_ms": self.pause_ms}

    def stop_at(self, final_gtid: str) -> None:
        def go(conn):
            onedb.pause_delta(conn, self.connection)
            if not onedb.wait_applied(conn, final_gtid, self.domain, 0):
                raise MigrationFailed("the target is not at the source's final position",
                                      f"source {onedb.domain_part(final_gtid, self.domain)}, target {_slave_pos(conn)}",
                                      "handover aborted", phase=Phase.HANDOVER)
        self._with(go)

    def resume(self) -> None:
        self._with(lambda c: onedb.resume_delta(c, self.connection))

    # ---- --verify: held, advanced to exactly the source's snapshot, released (slacker.verify.target) ----
    def hold(self) -> str:
        """Stop fetching and applying (UNTIL needs both stopped); returns the position applied."""
        def go(conn):
            onedb.pause_delta(conn, self.connection)
            return _slave_pos(conn)
        return self._with(go)

    def advance_to(self, gtid: str, timeout_s: float) -> None:
        """While held: apply the source domain's part of `gtid` (the source's snapshot, at or after what
        was held) and stop exactly there; a neighbour's statement that stops the thread is skipped."""
        deadline = time.monotonic() + timeout_s
        conn = self._connect()
        try:
            if not onedb.wait_applied(conn, gtid, self.domain, 0):
                onedb.resume_delta_until(conn, self.connection, gtid, self.domain)
                self._wait_applied(conn, gtid, deadline, "the target did not reach the verification position in time",
                                   Phase.VERIFY)
                # the position is applied; the UNTIL stop follows at once
                while onedb.delta_running(conn, self.connection) and time.monotonic() < deadline:
                    time.sleep(0.01)
            onedb.pause_delta(conn, self.connection)
            if not onedb.wait_applied(conn, gtid, self.domain, 0):
                raise MigrationFailed("the target did not stop at the verification position",
                                      f"source {onedb.domain_part(gtid, self.domain)}, target {_slave_pos(conn)}",
                                      "the source is untouched; retry", phase=Phase.VERIFY)
        finally:
            ops.close_quietly(conn)

    def release(self) -> None:
        """Fetch and apply again after `hold`."""
        self.resume()

    def detach(self) -> None:
        self.abort()

    def abort(self) -> None:
        try:
            self._with(lambda c: onedb.drop_delta(c, self.connection))
        except Exception as exc:  # noqa: BLE001 - the removal drops it again (kinds.shared._drop)
            log.warning("dropping the delta connection %s: %s", self.connection, exc)


def _slave_pos(conn) -> str:
    return onedb.slave_position(conn)


# ---- the steps both one-database targets take (a shared server's, a new whole server's) ----------------------
def _dump_position(inc) -> dict:
    """The position the dump is consistent at, from the head and tail the loader kept (then removed: rows of
    the tenant's are not kept past their use)."""
    try:
        head, tail = (inc.work / "dump.head").read_bytes(), (inc.work / "dump.tail").read_bytes()
    except OSError as exc:
        raise MigrationFailed("the snapshot's position is missing on the target", str(exc),
                              "the source keeps serving; retry", phase=Phase.PREPARE) from None
    pos = parse_dump_position(head, tail)
    for name in ("dump.head", "dump.tail"):
        (inc.work / name).unlink(missing_ok=True)
    return {"binlog_file": pos.binlog_file, "binlog_pos": pos.binlog_pos, "gtid": pos.gtid}


def _check_loaded(inc, where: str) -> None:
    conn = inc.tenant.admin_connect(timeout_s=10)
    try:
        if not onedb.exists(conn, inc.tenant_id):
            raise MigrationFailed(f"the copy of {inc.tenant_id} is not in {where}", "the load ended without it",
                                  "the source keeps serving; retry", phase=Phase.PREPARE)
    finally:
        ops.close_quietly(conn)


def _filtered_applier(inc, source_host: str, source_port: int, start_gtid: str, password_file) -> OneDbApplier:
    """The delta: a replication connection named after the source node, filtered to the tenant's database and
    the source's GTID domain (OneDbApplier), logging in with the source's replication password."""
    applier = OneDbApplier(lambda: inc.tenant.admin_connect(timeout_s=10),
                           onedb.connection_name(inc.entry.source_node), inc.tenant_id, inc.domain)
    tls = inc.node.config.tls
    applier.start(SourceLink(source_host, source_port, mariadb.REPL_USER, password_file.read_text().strip(),
                             *((str(tls.ca), str(tls.cert), str(tls.key)) if tls else ())), start_gtid)
    return applier


class IncomingOneDb(IncomingMigration):
    """A shared tenant's incoming move (see the module's docstring)."""

    kind = "shared"

    def __init__(self, node, entry: Entry, participants, source_host: str = "") -> None:
        self.manager = node.kinds["shared"]
        server = self.manager.server.get()
        super().__init__(node, entry, server, participants, source_host)
        self.work = self.manager.records_dir / entry.tenant / "work"
        self.domain = int((self.manager.incoming_record(entry.tenant) or {}).get("source_domain") or 0)
        self.verify_schema = entry.tenant  # --verify compares the tenant's database only

    @classmethod
    def create(cls, node, body: dict, participants) -> "IncomingOneDb":
        tid = body["tenant"]
        manager = node.kinds["shared"]
        server = manager.server_for_incoming(tid)
        conn = server.admin_connect()
        try:
            if onedb.exists(conn, tid):
                raise onedb.refuse(f"the target already has a database {tid}", "a copy would replace its tables",
                                   "the source keeps serving; remove it, or move the tenant elsewhere")
            if onedb.delta_exists(conn, onedb.connection_name(str(body.get("source_node", "")))):
                raise Conflict(f"another move from {body.get('source_node')} into {node.name}'s shared server is running",
                               "a shared server replicates from one source server over one connection, one move "
                               "at a time", "the source keeps serving; retry when that move has ended")
            other = onedb.delta_of_domain(conn, int(body.get("source_domain") or 0))
            if other is not None:
                raise Conflict(f"another move into {node.name}'s shared server replicates GTID domain "
                               f"{int(body.get('source_domain') or 0)} ({other})",
                               "every whole server is domain 0, and one domain has one position on the target: "
                               "whole servers are packed into one shared server one at a time",
                               "the source keeps serving; retry when that move has ended")
            if int(body.get("source_domain") or 0) == server.gtid_domain_id:
                raise onedb.refuse("source and target shared servers share a gtid_domain_id",
                                   f"both are domain {server.gtid_domain_id}", "see docs/shared.md, the shared server")
        finally:
            ops.close_quietly(conn)
        entry = Entry(id=body["migration_id"], tenant=tid, role="target", peer=str(body.get("source_node", "")),
                      state=TargetState.RECEIVING, epoch_before=int(body.get("epoch_before") or 0),
                      source_node=str(body.get("source_node", "")),
                      lease_until=time.time() + float(body.get("lease_ttl_s") or 10.0))
        node.journal.write(entry)  # before anything exists, so a restart knows what to remove
        try:
            work = manager.lay_out_incoming(tid, body["app_password"], entry.source_node, entry.id,
                                            int(body["source_domain"]))
        except BaseException:
            node.journal.remove(entry)
            raise
        inc = cls(node, entry, participants, str(body.get("source_host", "")))
        inc.mode = "live"
        inc.hold_s = body.get("hold_s") or None
        try:
            mariadb.write_secret(work / "repl.password", body["repl_password"] + "\n")
            if body.get("snapshot") == "physical":
                # A partial hot backup: extracted into the work directory (on the data directory's file system:
                # its tablespaces are moved into place, not copied), prepared and imported at the prepare step.
                (work / "import.json").write_text(json.dumps({"definitions": body["definitions"],
                                                              "database_ddl": body["database_ddl"]}))
                (work / "backup").mkdir()
                extract = MariaBackup().extract_argv(work / "backup")
            else:
                login = Login(mariadb.ADMIN_USER, server.admin_password(), socket=server.socket)
                mariadb.write_secret(work / "load.cnf", login.defaults())
                extract = [sys.executable, "-m", "slacker.onedb_load", str(work / "load.cnf"), str(work)]
                if body.get("definer_from"):  # a whole server packed here: its objects' definer is its app account
                    extract.append(f"--definer={body['definer_from']}:{manager.kind.accounts(tid).owner_user}")
            inc.receive(body, extract)
        except BaseException:
            inc.remove()
            raise
        return inc

    def describe(self) -> dict:
        return dict(super().describe(), kind="shared", target_port=self.tenant.port if self.tenant else None)

    def prepare(self) -> dict:
        if (self.work / "import.json").exists():
            return self._prepare_physical()
        self.position = _dump_position(self)
        self._move(TargetState.PREPARED)
        return self.position

    def _prepare_physical(self) -> dict:
        """`mariabackup --prepare --export` of the partial backup, then its tables imported (onedb_snapshot)."""
        spec = json.loads((self.work / "import.json").read_text())
        backup = self.work / "backup"
        pos = onedb_snapshot.backup_position(backup)
        onedb_snapshot.prepare_export(backup)
        onedb_snapshot.import_prepared(backup, self.tenant_id, spec["definitions"], spec["database_ddl"],
                                       lambda: self.tenant.admin_connect(timeout_s=10))
        trash.remove_tree(backup)  # its tablespaces moved into the server; the rest is the source's other files
        self.position = {"binlog_file": pos.binlog_file, "binlog_pos": pos.binlog_pos, "gtid": pos.gtid}
        self._move(TargetState.PREPARED)
        return self.position

    def start(self, gtid_state: str | None = None) -> None:
        _check_loaded(self, "the target's shared server")
        self._move(TargetState.STARTED)

    def replicate(self, source_host: str, source_port: int, start_gtid: str, applier: str = "serial",
                  mpl: int | str = "auto", catchup_mode: bool = True) -> None:
        # One connection per source node: a second move from the same node at once is refused by the server
        # (1934); the concurrent applier and catch-up mode (relaxed fsyncs) are not the shared server's to use:
        # its neighbours' commits would lose their durability.
        self.applier = _filtered_applier(self, source_host, source_port, start_gtid, self.work / "repl.password")
        self._move(TargetState.CATCHING_UP)

    def make_durable(self) -> dict:
        return {"durable": True, "catchup": False}

    def checksums(self) -> dict:
        raise MigrationFailed("stop-and-copy is not built for shared tenants", "", "move it live",
                              phase=Phase.PREFLIGHT)

    def activate(self, hold_s: dict | None = None) -> None:
        with self._lock:
            if self.state == TargetState.OWNED:
                return
            if self.state == TargetState.ABORTED:
                raise Conflict(f"incoming migration {self.id} was removed", "its lease ran out before the flip", "")
            own = self.node.directory.lookup(self.tenant_id)
            if own.node != self.node.name or own.epoch <= (self.entry.epoch_before or 0):
                raise Conflict(f"tenant {self.tenant_id} is not ours to activate",
                               f"the directory names {own.node} at epoch {own.epoch}", "")
            self._hold(hold_s, "activating")
            if self.receiver is not None:
                self.receiver.abort()
            conn = self.tenant.admin_connect(timeout_s=10)
            try:
                onedb.drop_delta(conn, onedb.connection_name(self.entry.source_node))
            finally:
                ops.close_quietly(conn)
            self._hold(hold_s, "started")
            self._hold(hold_s, "unfencing")
            self.manager.activate_incoming(self.tenant_id)
            self._hold(hold_s, "unfenced")
            self._owned(own)

    def remove(self) -> None:
        if not self._stop_for_removal():
            return
        try:
            self.manager.remove_incoming(self.tenant_id)
        except Exception:  # noqa: BLE001 - journaled still: the next start (or settle) removes it
            log.exception("removing incoming shared tenant %s failed", self.tenant_id)
            return
        self.node.journal.remove(self.entry)


class UnpackedIncoming(IncomingMigration):
    """A shared tenant given a `mariadbd` of its own here (`slacker migrate --into server`): the steps of a
    whole server's target, with a new, empty server made at once (fenced: `read_only`, its `app` account the
    shared tenant's password) that the tenant's database streams into as into a shared server, and the delta a
    replication connection filtered to that database and the source shared server's GTID domain. Activation,
    removal and recovery are a whole server's (the tenant record says `unpack` in its journal entry)."""

    NOTE = "unpack"

    def __init__(self, node, entry: Entry, tenant, participants, source_host: str = "") -> None:
        super().__init__(node, entry, tenant, participants, source_host)
        self.verify_schema = entry.tenant  # --verify compares the tenant's database only
        self.work = tenant.root / "unpack"
        unpack = tenant.info.extra.get("unpack") or {}
        self.domain = int(unpack.get("source_domain") or 0)

    @property
    def source_password_file(self):
        return self.tenant.root / "secrets" / "source-repl.password"

    @classmethod
    def create(cls, node, body: dict, participants) -> "UnpackedIncoming":
        import secrets as _secrets

        from ..kinds import shared_user
        from ..tenants import DEFAULT_BUFFER_POOL_BYTES

        tid = body["tenant"]
        entry = Entry(id=body["migration_id"], tenant=tid, role="target", peer=str(body.get("source_node", "")),
                      state=TargetState.RECEIVING, epoch_before=int(body.get("epoch_before") or 0),
                      source_node=str(body.get("source_node", "")), note=cls.NOTE,
                      lease_until=time.time() + float(body.get("lease_ttl_s") or 10.0))
        node.journal.write(entry)  # before anything exists, so a restart knows what to remove
        try:
            # A port no tenant in the fleet has (the flip's compare-and-set checks it again) and free here.
            taken = set().union(*(m.ports() for m in node.kinds.values())) | {o.port for o in node.directory.list()}
            port = node.tenants.automatic_port(tid, taken)
            tenant = node.tenants.new_tenant(tid, port, int(body.get("buffer_pool_bytes") or DEFAULT_BUFFER_POOL_BYTES),
                                             desired_state="incoming")
        except BaseException:
            node.journal.remove(entry)
            raise
        tenant.info.fenced = True  # read_only from its first start: its app account cannot write before the flip
        tenant.info.extra["unpack"] = {"source_domain": int(body["source_domain"]),
                                       "source_node": entry.source_node}
        inc = cls(node, entry, tenant, participants, str(body.get("source_host", "")))
        inc.hold_s = body.get("hold_s") or None
        try:
            for f in (tenant.admin_password_file, tenant.backup_password_file, tenant.repl_password_file):
                mariadb.write_secret(f, _secrets.token_urlsafe(24) + "\n")  # its own, none of the shared server's
            mariadb.write_secret(tenant.app_password_file, body["app_password"] + "\n")
            tenant.write_config()
            tenant.save()
            node.tenants.seed.copy_into(tenant.datadir)
            node.tenants.put_in_place(tenant)
            inc.work = tenant.root / "unpack"
            inc.work.mkdir(exist_ok=True)
            mariadb.write_secret(inc.source_password_file, body["repl_password"] + "\n")
            init_file = tenant.root / "secrets" / "init.sql"
            mariadb.write_secret(init_file, mariadb.bootstrap_sql(tenant.admin_password(), tenant.app_password(),
                                                                 tenant.backup_password(), tenant.repl_password()))
            try:
                node.tenants.start_tenant(tenant, extra_args=[f"--init-file={init_file}", "--skip-slave-start"])
            finally:
                init_file.unlink(missing_ok=True)
            login = Login(mariadb.ADMIN_USER, tenant.admin_password(), socket=tenant.socket)
            mariadb.write_secret(inc.work / "load.cnf", login.defaults())
            # Its objects' definer was the tenant's shared account; here its account is `app`.
            inc.receive(body, [sys.executable, "-m", "slacker.onedb_load", str(inc.work / "load.cnf"), str(inc.work),
                               f"--definer={shared_user(tid)}:{mariadb.APP_USER}"])
        except BaseException:
            inc.remove()
            raise
        return inc

    def describe(self) -> dict:
        return dict(super().describe(), kind="server", target_port=self.tenant.port)

    def prepare(self) -> dict:
        self.position = _dump_position(self)
        self._move(TargetState.PREPARED)
        return self.position

    def start(self, gtid_state: str | None = None) -> None:
        _check_loaded(self, "its new server")
        self._move(TargetState.STARTED)

    def replicate(self, source_host: str, source_port: int, start_gtid: str, applier: str = "serial",
                  mpl: int | str = "auto", catchup_mode: bool = True) -> None:
        self.applier = _filtered_applier(self, source_host, source_port, start_gtid, self.source_password_file)
        self._move(TargetState.CATCHING_UP)

    def make_durable(self) -> dict:
        return {"durable": True, "catchup": False}

    def checksums(self) -> dict:
        raise MigrationFailed("stop-and-copy is not built for shared tenants", "", "move it live",
                              phase=Phase.PREFLIGHT)

    def activate(self, hold_s: dict | None = None) -> None:
        super().activate(hold_s)
        self.source_password_file.unlink(missing_ok=True)  # its link to the shared server is gone
        if self.work.exists():
            trash.remove_tree(self.work)
