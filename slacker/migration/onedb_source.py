"""The source half of a shared tenant's move: one database of the node's shared server.

The same seam as a whole server's (slacker.migration.source.SourceSide), with a freeze and a fence of
that tenant only; its neighbours read and write throughout (docs/shared.md, "Moving a shared tenant"):

- freeze: the tenant's accounts locked (no new login), its sessions that are in a statement or an open
  transaction ended (the router's hold has drained its own clients, so behind a router none is), then
  `FLUSH TABLES <its tables> WITH READ LOCK` on a connection of ours (bounded by a timer), and the
  server's binlog position read under that lock: every commit of the tenant is before it. Neighbours'
  commits go on, so the position read later moves; the one read under the lock is the final one.
- fence: persisted (`fenced` in the tenant's record), with the accounts locked already: a lock the
  server keeps across its restarts (mysql.global_priv);
- unfreeze after the flip: the tenant's remaining (idle) sessions ended, then the table lock released;
  before the flip (given up): accounts unlocked, lock released, sessions untouched;
- retire: the database removed crash-atomically (slacker.mariadb.onedb.retire), its accounts dropped,
  its record gone.
"""

from __future__ import annotations

import logging

from ..errors import MigrationFailed
from ..mariadb import freeze as freezing
from ..mariadb import onedb, ops
from .protocol import Phase

log = logging.getLogger("slacker.migration.onedb")

KILL_WAIT_S = 1.0  # KILL only marks a session; how long its end is waited for


class OneDbSource:
    kind = "shared"

    def __init__(self, node, tenant_id: str) -> None:
        self.node = node
        self.tenant_id = tenant_id
        self.frozen: onedb.Fence | None = None
        self._ready: onedb.Ready | None = None  # the fence's connection, opened before the freeze's clock starts
        self.interrupted: list[int] = []
        self.fenced = False
        self.verify_schema = tenant_id  # --verify compares the tenant's database only

    @property
    def manager(self):
        return self.node.kinds["shared"]

    @property
    def users(self) -> list[str]:
        return [self.manager.kind.accounts(self.tenant_id).owner_user]

    def tenant(self):
        """The shared server (a Tenant: its host, port, socket, service accounts)."""
        server = self.manager.server.get()
        if server is None:
            raise MigrationFailed(f"node {self.node.name} has no shared server", "", "", phase=Phase.PREFLIGHT)
        return server

    def connect(self, timeout_s: float = 5.0):
        return self.tenant().admin_connect(timeout_s=timeout_s)

    def inspect(self, live: bool) -> tuple[str, list[str]]:
        self.manager.get(self.tenant_id)  # NotFound: not a ready shared tenant here
        server = self.tenant()
        if not server.is_running():
            raise MigrationFailed(f"node {self.node.name}'s shared server is not running", "",
                                  "the agent starts it again; retry", phase=Phase.PREFLIGHT)
        if self.manager.is_fenced(self.tenant_id):
            raise MigrationFailed(f"tenant {self.tenant_id} is fenced on {self.node.name}",
                                  "an earlier migration has not finished", "see `slacker status`",
                                  phase=Phase.PREFLIGHT)
        conn = self.connect()
        try:
            log_bin, fmt, version = ops.server_facts(conn)
            if live and (not log_bin or fmt != "ROW"):
                raise onedb.refuse(f"tenant {self.tenant_id} cannot migrate live",
                                   f"binary log is {'on' if log_bin else 'off'}, format {fmt}")
            if not onedb.exists(conn, self.tenant_id):
                raise onedb.refuse(f"tenant {self.tenant_id} has no database on {self.node.name}",
                                   "its record is there, its database is not", "see `slacker status`")
            c = onedb.contents(conn, self.tenant_id)
            bad = list(c.not_innodb)
            if live and bad:
                raise onedb.refuse(f"tenant {self.tenant_id} cannot migrate live",
                                   f"{len(bad)} table(s) not in InnoDB: {', '.join(bad[:5])}"
                                   + (" ..." if len(bad) > 5 else ""),
                                   "ALTER TABLE ... ENGINE=InnoDB first")
            if c.foreign_keys_out:
                raise onedb.refuse(f"tenant {self.tenant_id} cannot move alone",
                                   f"foreign keys reference another database: {', '.join(c.foreign_keys_out[:5])}",
                                   "drop those constraints first (a tenant's data must be its database's)")
            warnings = []
            no_pk = [t for t in ops.tables_without_primary_key(conn) if t.startswith(f"{self.tenant_id}.")]
            if no_pk:
                warnings.append(f"{len(no_pk)} table(s) without a primary key ({', '.join(no_pk[:5])}): "
                                "their changes apply slowly on the target")
        finally:
            ops.close_quietly(conn)
        return version, warnings

    # ---- freeze and fence ------------------------------------------------------------
    def blockers(self, older_than_s: float) -> list[str]:
        """The tenant's own long statements and write transactions (a neighbour's never hold its freeze)."""
        conn = self.connect()
        try:
            others = tuple(u for u in _all_users(conn) if u not in self.users)
            return freezing.blockers(conn, older_than_s, own_users=others)
        finally:
            ops.close_quietly(conn)

    def warm(self) -> None:
        """Open the fence's connection (several statements per round trip) and read the tenant's accounts
        now, before the freeze's clock starts: on a node at its CPU quota each round trip can wait out a
        quota period."""
        if self._ready is not None:
            ops.close_quietly(self._ready.conn)
            self._ready = None
        server = self.tenant()
        self._ready = onedb.ready(lambda: server.admin_connect(multi_statements=True), self.users)

    def freeze(self, lock_timeout_s: float):
        self.interrupted = []
        server = self.tenant()
        prepared, self._ready = self._ready, None
        self.frozen = onedb.fence(lambda: server.admin_connect(timeout_s=max(1.0, lock_timeout_s)),
                                  self.tenant_id, self.users, lock_timeout_s, kill_wait_s=KILL_WAIT_S,
                                  kill_idle=onedb.BUT_ROUTED, prepared=prepared)
        self.interrupted = list(self.frozen.killed)
        return self.frozen

    def frozen_position(self) -> str:
        """The position read under the table lock: the tenant's last commit is before it (neighbours' later
        commits move the server's position on, and are none of this tenant's)."""
        return self.frozen.position

    def frozen_checksums(self) -> dict:
        raise MigrationFailed("stop-and-copy is not built for shared tenants", "", "move it live",
                              phase=Phase.PREFLIGHT)

    def unfreeze(self) -> None:
        f, self.frozen = self.frozen, None
        if f is None:
            return
        if self.fenced:
            # Past the flip (or fenced for it): every session of the tenant ends before the lock goes, so none
            # writes to the old copy; the locked accounts keep new ones out.
            try:
                onedb.kill_sessions(f.conn, self.users, KILL_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - the accounts stay locked; retire ends them anyway
                log.warning("tenant %s: ending its sessions on the old copy: %s", self.tenant_id, exc)
            onedb.release(f)
        else:
            try:
                onedb.unfence(f.conn, f)
            except Exception as exc:  # noqa: BLE001
                log.warning("tenant %s: unlocking its accounts after a freeze given up: %s; retried",
                            self.tenant_id, exc)
                self._unlock()

    def fence(self) -> None:
        self.fenced = True
        self.manager.set_fenced(self.tenant_id, True)

    def unfence(self) -> None:
        self.manager.set_fenced(self.tenant_id, False)
        self._unlock()
        self.fenced = False

    def _unlock(self) -> None:
        try:
            conn = self.connect()
        except Exception as exc:  # noqa: BLE001 - the shared tick unlocks an unfenced tenant's accounts
            log.warning("tenant %s: accounts not unlocked now (%s); the agent's tick does it", self.tenant_id, exc)
            self.manager.unlock_later(self.tenant_id)
            return
        try:
            onedb.lock_accounts(conn, self.users, locked=False)
        finally:
            ops.close_quietly(conn)

    def bring_back(self, source_stopped: bool) -> None:
        """A move rolled back: the tenant unfenced (on disk and its accounts) if it was fenced, and its accounts
        unlocked in any case: a freeze cut short by its agent's death (the accounts locked, no fence on record
        yet) left them locked, and the tenant would take no new session, with nothing on disk to say why."""
        if not self.manager.holds(self.tenant_id):
            return
        if self.fenced or self.manager.is_fenced(self.tenant_id):
            self.unfence()
        else:
            self._unlock()

    def retire(self, migration: str = "", pause=None):
        self.manager.retire(self.tenant_id, migration, pause)
        self.node.supervisor.forget(self.tenant_id)
        return None


def _all_users(conn) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT DISTINCT USER FROM information_schema.PROCESSLIST")
        return {r[0] for r in cur.fetchall() if r[0]}
