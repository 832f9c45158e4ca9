"""Shared tenants on a node: one database each in the node's shared server (slacker/shared_server.py).

A tenant's record is `<data_root>/shared/tenants/<id>/` (`tenant.json`: origin and state; `secrets/`: its
account's password), and its part of the server is database `<id>` with the accounts `<id>_app`@'%' and
@'localhost', granted on that database alone (slacker/mariadb/shared.py). Crash-atomic as a whole server's:

- create / register: the record is laid out under `tenants/.building/` and renamed into place in state
  `creating` (a name that says what it is), then the database (create only) and the accounts are made, then
  the state is `ready`. A crash before the rename leaves what the next start sweeps; after it, a record in
  `creating` that the agent's tick finishes (the directory names this node its owner) or removes.
- delete, and the removal of a half-made one: the record is renamed into `tenants/.trash/` as
  `tenant~ID~REASON~-~STAMP` (`deleted`, `failed-create`: its database goes too; `failed-register`: the
  database was there before and stays), then the accounts are dropped (their sessions killed) and the
  database, then the entry is deleted. A crash leaves the entry, which the tick acts on again.

Nothing here touches another tenant's database or accounts: every statement names this tenant's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path

from .. import mariadb, trash
from ..mariadb import onedb
from ..mariadb import shared as sql
from ..errors import AgentUnavailable, Conflict, InvalidInput, MigrationFailed, NotFound, SlackerError, TenantError
from ..shared_server import SharedServer, SharedServerManager
from ..trash import TrashName, fsync_dir
from .local import CreateOptions, LocalTenant, LocalTenants

log = logging.getLogger("slacker.shared")

CREATING, READY = "creating", "ready"
INCOMING = "incoming"  # a move's copy on its target, not the tenant's until the move activates it
CREATED, REGISTERED = "created", "registered"  # where its database came from
# How long a look at the records serves the asks after it, when this agent wrote none meanwhile (every write of
# the agent's own makes the next ask look again; only a hand-edit with the agent running waits this long).
ENTRIES_TTL_S = 30.0
# The server's list of databases is read again when its fingerprint changes, and at least this often.
DATABASES_TTL_S = 300.0
FAILED = {CREATED: "failed-create", REGISTERED: "failed-register"}  # the trash reason of a half-made one
# Trash reasons whose removal drops the database: a registered one's was there before it, and stays.
DROPS_DATABASE = {"deleted": True, "failed-create": True, "failed-register": False, "retired": True,
                  "rolled-back": True}


class SharedTenants(LocalTenants):
    def __init__(self, node, kind) -> None:
        self.node, self.kind = node, kind
        self.server = SharedServerManager(node.tenants, node.directory)
        self.server.after_start = self._rearm_deltas
        self._lock = threading.RLock()  # one create, delete or tick at a time
        self._parsed: dict[str, tuple[tuple, dict]] = {}  # record file -> (its stat, its contents)
        self._views: dict[str, tuple[tuple, LocalTenant]] = {}  # record file -> ((its stat, the server's), view)
        self._memo: tuple[float, list] | None = None  # (when, _entries()) of the last look at the files
        self._gen = 0  # writes so far (a look that a write overtook is not kept)
        self._dbs: tuple[tuple, float, set[str]] | None = None  # (fingerprint, when, the server's databases)
        self._listed: tuple | None = None  # (the look at the records, the server's signature, list()'s views)
        self._sampled: tuple | None = None  # what the last sample was made of (the same: nothing to make again)
        if self.records_dir.is_dir():
            trash.sweep_building(self.records_dir)  # at agent start: what a crash left half laid out

    records_dir = property(lambda self: self.server.root / "tenants")
    trash_dir = property(lambda self: self.server.root / "tenants" / trash.TRASH)

    # ---- records ---------------------------------------------------------------------------
    def _dir(self, tenant_id: str) -> Path:
        return self.records_dir / self.kind.check_id(tenant_id)

    def _record(self, tenant_id: str) -> dict | None:
        got = self._load(str(self._dir(tenant_id) / "tenant.json"))
        return None if got is None else dict(got[1])

    def _load(self, path: str) -> tuple[tuple, dict] | None:
        """(the file's stat, the record as the file holds it now), parsed again only when the file changed: a
        node of a thousand tenants reads every record several times a tick. Every write replaces the file (a
        new inode), and the size and mtime catch an edit in place. The record is the cache's: not to change."""
        try:
            st = os.stat(path)
        except OSError:
            self._parsed.pop(path, None)
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        hit = self._parsed.get(path)
        if hit is None or hit[0] != key:
            try:
                with open(path) as f:
                    hit = (key, json.loads(f.read()))
            except (OSError, ValueError):
                return None
            self._parsed[path] = hit
        return hit

    def _changed(self) -> None:
        """This agent wrote or moved a record: the next read looks at the files again."""
        self._gen += 1
        self._memo = None

    def _entries(self) -> list[tuple[str, tuple, dict]]:
        """(record file, its stat, its record: not to change) of every tenant here, by id. Only this agent writes
        them (each write calls `_changed`), so the files are looked at again at most every ENTRIES_TTL_S
        otherwise: a tick asks several times, and a thousand records cost a thousand stat calls each."""
        memo = self._memo
        if memo is not None and time.monotonic() - memo[0] < ENTRIES_TTL_S:
            return memo[1]
        gen, at = self._gen, time.monotonic()
        out = self._read_entries()
        if gen == self._gen:  # no write meanwhile (another thread's): what was read may be kept
            self._memo = (at, out)
        return out

    def _read_entries(self) -> list[tuple[str, tuple, dict]]:
        root = str(self.records_dir)
        try:
            names = sorted(e.name for e in os.scandir(root) if not e.name.startswith("."))
        except OSError:
            return []
        paths = [os.path.join(root, n, "tenant.json") for n in names]
        for gone in set(self._parsed) - set(paths):
            self._parsed.pop(gone, None)
            self._views.pop(gone, None)
        out = []
        for path in paths:
            got = self._load(path)
            if got is not None:
                out.append((path, got[0], got[1]))
        return out

    def _peek(self) -> list[dict]:
        """Every record here, to read only (the cache's own: a tick scans them all several times)."""
        return [r for _path, _key, r in self._entries()]

    def _records(self) -> list[dict]:
        """Every record here, each the caller's own copy."""
        return [dict(r) for _path, _key, r in self._entries()]

    def _save(self, root: Path, record: dict) -> None:
        tmp = root / "tenant.json.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(record, indent=2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / "tenant.json")
        fsync_dir(root)
        self._changed()

    def _view(self, record: dict, server: SharedServer, running: bool) -> LocalTenant:
        tid = record["id"]
        return LocalTenant(id=tid, kind=self.kind, host=server.host, port=server.port, desired_state="running",
                           fenced=bool(record.get("fenced")), running=running,
                           password_file=self._dir(tid) / "secrets" / "app.password", datadir=server.datadir,
                           buffer_pool_bytes=server.info.buffer_pool_bytes,
                           extra={"database": tid, "origin": record.get("origin", CREATED),
                                  "gtid_domain_id": server.gtid_domain_id})

    # ---- LocalTenants ---------------------------------------------------------------------------
    def list(self) -> list[LocalTenant]:
        server = self.server.get()
        if server is None:
            return []
        running = server.is_running()  # one server for all of them: asked once
        sig = (server.host, server.port, str(server.datadir), server.info.buffer_pool_bytes, server.gtid_domain_id,
               running)
        entries = self._entries()
        memo = self._listed
        if memo is not None and memo[0] is entries and memo[1] == sig:  # the same look at the records: the same views
            return list(memo[2])
        out = []
        for path, key, r in entries:
            if r.get("state") != READY:
                continue
            hit = self._views.get(path)
            if hit is None or hit[0] != (key, sig):  # a view made again only when its record or the server changed
                hit = self._views[path] = ((key, sig), self._view(r, server, running))
            out.append(hit[1])
        self._listed = (entries, sig, out)
        return list(out)

    def holds(self, tenant_id: str) -> bool:
        try:
            return os.path.lexists(self._dir(tenant_id))
        except InvalidInput:  # no shared tenant's id (a whole server's may have a dash)
            return False

    def get(self, tenant_id: str) -> LocalTenant:
        record, server = self._record(tenant_id), self.server.get()
        if record is None or server is None or record.get("state") != READY:
            raise NotFound(f"shared tenant {tenant_id} not found on node {self.node.name}",
                           f"{self._dir(tenant_id)} holds no ready tenant",
                           "see `slacker tenant list` for the tenants that exist")
        return self._view(record, server, server.is_running())

    def ports(self) -> set[int]:
        port = self.server.port()
        return {port} if port is not None else set()

    def port(self) -> int | None:
        return self.server.port()

    def check_options(self, options: CreateOptions) -> None:
        if options.buffer_pool_bytes is not None:
            raise InvalidInput("a shared tenant has no buffer pool of its own",
                               "it is a database in the node's shared server, which has one pool for all",
                               "leave out --buffer-pool")

    def server_for_incoming(self, tenant_id: str):
        """The shared server a tenant moves into, running: made first when the node has none (its port claimed
        in the directory, chosen as the tenant's own would be), started when it is down."""
        with self._lock:
            server = self.server.get()
            if server is not None and server.is_running():
                return server
            try:
                port = server.port if server is not None else self.node.claim_shared_port(tenant_id)
                return self.server.ensure(port)
            except SlackerError as exc:
                raise MigrationFailed(f"node {self.node.name} has no running shared server", exc.one_line(),
                                      "the source keeps serving; see the target agent's log", phase="preflight"
                                      ) from None

    def port_for_new(self, tenant_id: str) -> int:
        # Under the lock: creates that find no shared server at once agree on the one made by the first.
        with self._lock:
            server = self.server.get()
            if server is None:
                server = self.server.ensure(self.node.claim_shared_port(tenant_id))
            return server.port

    def create(self, tenant_id: str, port: int, options: CreateOptions) -> LocalTenant:
        self.kind.check_id(tenant_id)
        with self._lock:
            if self.holds(tenant_id):
                raise Conflict(f"tenant {tenant_id} already exists on node {self.node.name}",
                               f"{self._dir(tenant_id)} is in use", "pick another id or delete the tenant first")
            server = self.server.ensure(port)
            if server.port != port:  # another tenant's create made the server meanwhile, on its own port
                raise Conflict(f"node {self.node.name}'s shared server listens on port {server.port}, not {port}",
                               "another shared tenant's create made it at the same time", "retry")
            origin = REGISTERED if options.existing else CREATED
            conn = server.admin_connect()
            try:
                present = sql.database_exists(conn, tenant_id)
                if options.existing and not present:
                    raise NotFound(f"no database {tenant_id} in node {self.node.name}'s shared server",
                                   "register makes a tenant of a database that is there already",
                                   f"restore it there first (socket {server.socket}), or create the tenant "
                                   "with `slacker tenant create --shared`")
                if not options.existing and present:
                    raise Conflict(f"database {tenant_id} already exists in node {self.node.name}'s shared server",
                                   "it is no tenant of Slacker's",
                                   f"make it one with `slacker tenant register {tenant_id} --shared --on "
                                   f"{self.node.name}`, or drop it")
                self._lay_out(tenant_id, origin)
                try:
                    self._finish(conn, tenant_id, origin)
                except BaseException:
                    self._remove(tenant_id, FAILED[origin])
                    raise
            finally:
                conn.close()
            return self.get(tenant_id)

    def _lay_out(self, tenant_id: str, origin: str) -> None:
        """The record in place in state `creating` (whole, or not at all)."""
        self.records_dir.mkdir(exist_ok=True)
        built = trash.building_dir(self.records_dir, tenant_id)
        (built / "secrets").mkdir(mode=0o700)
        mariadb.write_secret(built / "secrets" / "app.password", secrets.token_urlsafe(24) + "\n")
        self._save(built, {"id": tenant_id, "kind": self.kind.name, "origin": origin, "state": CREATING,
                           "created_at": time.time()})
        try:
            trash.put_in_place(built, self._dir(tenant_id))
            self._changed()
        except OSError as exc:
            raise Conflict(f"{self._dir(tenant_id)} is not empty", f"it appeared while tenant {tenant_id} was being "
                           f"created ({exc.strerror})", "retry; see `slacker status`") from None

    def _finish(self, conn, tenant_id: str, origin: str) -> None:
        """Make the tenant's part of the server (again: every step is idempotent), then mark it ready."""
        root = self._dir(tenant_id)
        accounts = self.kind.accounts(tenant_id)
        if origin == CREATED:
            sql.create_database(conn, tenant_id, if_not_exists=True)
        elif not sql.database_exists(conn, tenant_id):
            raise NotFound(f"database {tenant_id} is gone from node {self.node.name}'s shared server",
                           "it was being registered", "restore it and register it again")
        sql.create_account(conn, accounts.owner_user, (root / "secrets" / "app.password").read_text().strip(),
                           tenant_id)
        record = json.loads((root / "tenant.json").read_text())
        record["state"] = READY
        self._save(root, record)

    def delete(self, tenant_id: str) -> None:
        self.kind.check_id(tenant_id)
        with self._lock:
            if not self.holds(tenant_id):
                raise NotFound(f"shared tenant {tenant_id} not found on node {self.node.name}",
                               f"{self._dir(tenant_id)} holds no tenant", "see `slacker tenant list`")
            self._remove(tenant_id, "deleted")
        self.node.supervisor.forget(tenant_id)

    def _remove(self, tenant_id: str, reason: str) -> None:
        """Set the record aside under a name that says what it was, then act on it (`_drop`)."""
        pending = trash.set_aside(self._dir(tenant_id), TrashName("tenant", tenant_id, reason))
        self._changed()
        if pending is None:
            return
        server = self.server.get()
        try:
            if server is not None and not server.is_running():
                self.server.start(server)
        except SlackerError as exc:
            raise TenantError(f"tenant {tenant_id}: its database and account stay until the shared server runs",
                              exc.one_line(), "the agent removes them when it answers again") from None
        self._drop(pending.entry, pending.name)
        pending.finish()

    def _drop(self, entry: Path, name: TrashName) -> None:
        """A trash entry's tenant gone from the server: its accounts (and sessions), and its database unless
        it was there before the tenant (a failed registration)."""
        server = self.server.get()
        if server is None:
            return
        try:
            record = json.loads((entry / "tenant.json").read_text())
        except (OSError, ValueError):
            record = {}
        conn = server.admin_connect()
        try:
            if record.get("incoming_from"):  # a move's copy: its delta connection goes first, then its data
                onedb.drop_delta(conn, onedb.connection_name(record["incoming_from"]))
            sql.drop_accounts(conn, [self.kind.accounts(name.subject).owner_user])
            if DROPS_DATABASE.get(name.reason, False):
                onedb.retire(conn, name.subject, server.datadir)  # crash-atomic: its tables at once, then it
        finally:
            conn.close()
        log.info("shared tenant %s removed from the shared server (%s)", name.subject, name.reason)

    # ---- a move's parts (slacker.migration.onedb_source, onedb_target) ---------------------------
    def is_fenced(self, tenant_id: str) -> bool:
        record = self._record(tenant_id)
        return bool(record and record.get("fenced"))

    def set_fenced(self, tenant_id: str, fenced: bool) -> None:
        """The fence in the tenant's record (its accounts' lock is the server's own, kept across restarts)."""
        with self._lock:
            record = self._record(tenant_id)
            if record is None:
                raise NotFound(f"shared tenant {tenant_id} not found on node {self.node.name}", "", "")
            record["fenced"] = bool(fenced)
            self._save(self._dir(tenant_id), record)

    def retire(self, tenant_id: str, migration: str = "", pause=None) -> None:
        """After the flip: the old copy's database, accounts and record gone (crash-atomic; the tick finishes
        a removal cut short)."""
        with self._lock:
            if self.holds(tenant_id):
                if pause is not None:
                    pause("set-aside")
                self._remove(tenant_id, "retired")

    def lay_out_incoming(self, tenant_id: str, password: str, source_node: str, migration: str,
                         source_domain: int) -> Path:
        """A move's copy on this node: its record in state `incoming` (its database arrives with the copy,
        its accounts are made when the move activates it). Returns its work directory."""
        with self._lock:
            if self.holds(tenant_id):
                raise Conflict(f"node {self.node.name} already has a tenant {tenant_id}",
                               f"{self._dir(tenant_id)} is in use", "delete it first or pick another target")
            self.records_dir.mkdir(exist_ok=True)
            built = trash.building_dir(self.records_dir, tenant_id)
            (built / "secrets").mkdir(mode=0o700)
            (built / "work").mkdir(mode=0o700)
            mariadb.write_secret(built / "secrets" / "app.password", password + "\n")
            self._save(built, {"id": tenant_id, "kind": self.kind.name, "origin": CREATED, "state": INCOMING,
                               "incoming_from": source_node, "source_domain": source_domain,
                               "migration": migration, "created_at": time.time()})
            trash.put_in_place(built, self._dir(tenant_id))
            self._changed()
            return self._dir(tenant_id) / "work"

    def _rearm_deltas(self, server: SharedServer) -> None:
        """The server has started (again): each incoming move's replication connection gets its one database's
        filter back and runs on from its position (gtid_slave_pos is transactional). The server started none
        itself: unfiltered, a connection would apply the neighbours' databases of its source too."""
        records = self.incoming()
        if not records:
            return
        conn = server.admin_connect()
        try:
            for r in records:
                if r.get("incoming_from") and onedb.rearm_delta(conn, onedb.connection_name(r["incoming_from"]),
                                                                r["id"]):
                    log.info("shared tenant %s: its move's replication from %s filtered and started again",
                             r["id"], r["incoming_from"])
        finally:
            conn.close()

    def incoming(self) -> list[dict]:
        return [r for r in self._records() if r.get("state") == INCOMING]

    def incoming_record(self, tenant_id: str) -> dict | None:
        record = self._record(tenant_id)
        return record if record is not None and record.get("state") == INCOMING else None

    def activate_incoming(self, tenant_id: str) -> None:
        """The directory names this node: the tenant's accounts made, its record ready (idempotent)."""
        with self._lock:
            record = self._record(tenant_id)
            if record is None:
                raise NotFound(f"shared tenant {tenant_id} not found on node {self.node.name}", "", "")
            if record.get("state") == READY:
                return
            server = self.server.get()
            conn = server.admin_connect()
            try:
                sql.create_account(conn, self.kind.accounts(tenant_id).owner_user,
                                   (self._dir(tenant_id) / "secrets" / "app.password").read_text().strip(), tenant_id)
                onedb.lock_accounts(conn, [self.kind.accounts(tenant_id).owner_user], locked=False)
            finally:
                conn.close()
            trash.remove_tree(self._dir(tenant_id) / "work")  # the move's secrets and positions
            record.update(state=READY, fenced=False)
            for key in ("incoming_from", "source_domain", "migration"):
                record.pop(key, None)
            self._save(self._dir(tenant_id), record)

    def remove_incoming(self, tenant_id: str) -> None:
        """A move's copy that will never be the tenant's: its delta connection, database and record gone."""
        with self._lock:
            record = self._record(tenant_id)
            if record is not None and record.get("state") == INCOMING:
                self._remove(tenant_id, "rolled-back")

    def fenced_ids(self) -> list[str]:
        """The ready tenants whose record says fenced."""
        return [r["id"] for r in self._peek() if r.get("state") == READY and r.get("fenced")]

    def fence_here(self, tenant_id: str, kill_wait_s: float = 1.0) -> None:
        """Fence the tenant by itself (the reconciler: the directory names another node): its accounts locked
        and its sessions ended, then the fence persisted in its record. Each step is idempotent, so an agent
        killed between them leaves it writable by nobody new and the next tick finishes it."""
        users = [self.kind.accounts(tenant_id).owner_user]
        with self._admin() as conn:
            onedb.lock_accounts(conn, users, locked=True)
            onedb.kill_sessions(conn, users, kill_wait_s)
        self.set_fenced(tenant_id, True)

    def unfence_here(self, tenant_id: str) -> None:
        """The tenant's accounts unlocked, then its record unfenced (the directory names this node and no move
        holds it): killed between the two, the next tick does both again."""
        with self._admin() as conn:
            onedb.lock_accounts(conn, [self.kind.accounts(tenant_id).owner_user], locked=False)
        self.set_fenced(tenant_id, False)

    @contextlib.contextmanager
    def _admin(self):
        """An admin connection to the node's shared server, closed after use."""
        server = self.server.get()
        if server is None:
            raise NotFound(f"node {self.node.name} has no shared server", "", "")
        conn = server.admin_connect(timeout_s=5)
        try:
            yield conn
        finally:
            conn.close()

    def unlock_later(self, tenant_id: str) -> None:
        """A rollback that could not reach the server to unlock the tenant's accounts: the tick does it."""
        with self._lock:
            record = self._record(tenant_id)
            if record is not None:
                record["unlock_pending"] = True
                self._save(self._dir(tenant_id), record)

    def _unlock_pending(self, conn) -> None:
        for r in self._records():
            if r.get("unlock_pending") and not r.get("fenced"):
                onedb.lock_accounts(conn, [self.kind.accounts(r["id"]).owner_user], locked=False)
                r.pop("unlock_pending")
                self._save(self._dir(r["id"]), r)
                log.warning("shared tenant %s: its accounts unlocked (a rolled-back move could not then)", r["id"])

    def healthy(self, tenant: LocalTenant) -> bool:
        server = self.server.get()
        if server is None or not server.is_running():
            return False
        try:
            conn = server.admin_connect(timeout_s=2)
        except TenantError:
            return False
        try:
            return sql.database_exists(conn, tenant.id)
        finally:
            conn.close()

    def stop_all(self) -> None:
        self.server.stop()

    def status(self) -> dict:
        return {"shared_server": self.server.describe()}

    # ---- the supervisor's tick -------------------------------------------------------------
    def tick(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # a create or delete runs: the next tick
        try:
            self.server.keep_running()
            server = self.server.get()
            if server is None or not server.is_running():
                return
            self._sweep()
            self._settle_half_made()
            if any(r.get("unlock_pending") for r in self._peek()):
                conn = server.admin_connect()
                try:
                    self._unlock_pending(conn)
                finally:
                    conn.close()
            self._sample(server)
        finally:
            self._lock.release()

    def _sweep(self) -> None:
        """Finish removals a crash cut short: each trash entry's tenant dropped from the server, then deleted."""
        if not self.trash_dir.is_dir():
            return
        for entry in sorted(self.trash_dir.iterdir()):
            name = TrashName.parse(entry.name)
            try:
                if name is not None and name.kind == "tenant":
                    self.kind.check_id(name.subject)
                    self._drop(entry, name)
                trash.remove_tree(entry)
                fsync_dir(self.trash_dir)
                log.warning("finished removing shared tenant %s, cut short before", entry.name)
            except (OSError, SlackerError) as exc:
                log.warning("could not finish removing %s: %s; retrying on the next tick", entry, exc)

    def _settle_half_made(self) -> None:
        """A record a crash left in `creating`: finished if the directory names this node its owner, else removed."""
        busy = set(self.node.supervisor.busy)
        half = [r for r in self._peek() if r.get("state") == CREATING and r["id"] not in busy]
        if not half:
            return
        try:
            owners = self.node.directory.owners(r["id"] for r in half)
        except AgentUnavailable:
            return  # the directory decides: next tick
        server = self.server.get()
        conn = server.admin_connect()
        try:
            for r in half:
                own = owners.get(r["id"])
                try:
                    if own is not None and own.node == self.node.name and own.kind == self.kind.name:
                        self._finish(conn, r["id"], r.get("origin", CREATED))
                        log.warning("shared tenant %s: finished its creation, cut short before", r["id"])
                    else:
                        self._remove(r["id"], FAILED.get(r.get("origin"), FAILED[CREATED]))
                        log.warning("shared tenant %s: removed its half-made creation (the directory does not "
                                    "name this node)", r["id"])
                except (OSError, SlackerError) as exc:
                    log.warning("shared tenant %s: settling its half-made creation: %s", r["id"], exc)
        finally:
            conn.close()

    def _databases(self, conn) -> set[str]:
        """The server's databases: read again only when their fingerprint (count, names' CRC32 sum) changed, or
        every DATABASES_TTL_S; one row a tick instead of one per tenant."""
        mark, kept = sql.databases_fingerprint(conn), self._dbs
        if kept is None or kept[0] != mark or time.monotonic() - kept[1] >= DATABASES_TTL_S:
            kept = self._dbs = (mark, time.monotonic(), sql.databases(conn))
        return kept[2]

    def _sample(self, server: SharedServer) -> None:
        """Health and sessions of every tenant of the server, read once for all of them."""
        from ..agent.supervisor import TenantHealth

        health = self.node.tenants.health(server)
        dbs: set[str] = set()
        sessions: dict[str, int] = {}
        if health["healthy"]:
            try:
                conn = server.admin_connect(timeout_s=2)
                try:
                    dbs, sessions = self._databases(conn), sql.sessions_by_user(conn)
                finally:
                    conn.close()
            except (TenantError, Exception) as exc:  # a sample must never stop the tick
                log.warning("sampling the shared server: %s", exc)
        entries = self._entries()
        # What the samples are made of; unchanged (an idle node), the last ones stand, handed over again (a
        # tenant the supervisor forgot meanwhile comes back, as a new sample would bring it back).
        made_of = (health["running"], bool(health["healthy"]), self._dbs[:2] if dbs else None,
                   tuple(sorted(sessions.items())), self.server.restarts)
        last = self._sampled
        if last is not None and last[0] == made_of and last[1] is entries:
            self.node.supervisor.put_extra(self.kind.name, last[2])
            return
        out = {}
        for _path, _key, r in entries:
            if r.get("state") != READY:
                continue
            tid = r["id"]
            out[tid] = TenantHealth(id=tid, host=server.host, port=server.port, desired_state="running",
                                    running=health["running"], healthy=bool(health["healthy"] and tid in dbs),
                                    connections=sessions.get(self.kind.accounts(tid).owner_user, 0),
                                    restarts=self.server.restarts, kind=self.kind.name)
        self._sampled = (made_of, entries, out)
        self.node.supervisor.put_extra(self.kind.name, out)

