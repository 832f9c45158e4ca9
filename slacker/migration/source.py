"""The source half of a migration: the tenant being moved, as the phase machine sees it.

Preflight inspection, the binlog position, the freeze (FTWRL, granted under OLTP load), the fence
(persisted read_only) and the retirement after the flip. All SQL goes through
the engine package (`slacker.mariadb.ops`).
"""

from __future__ import annotations

import logging

from ..errors import MigrationFailed
from ..mariadb import freeze as freezing
from ..mariadb import ops
from ..mariadb.rowsums import table_sums
from .protocol import Phase

log = logging.getLogger("slacker.migration.source")


class SourceSide:
    verify_schema = None  # --verify compares every user table of the server

    def __init__(self, node, tenant_id: str) -> None:
        self.node = node
        self.tenant_id = tenant_id
        self.frozen = None  # the connection holding the freeze
        self._warm = None  # the freeze's connection, opened before its clock starts
        self.interrupted: list[int] = []  # application statements the last freeze interrupted
        self.fenced = False

    def tenant(self):
        return self.node.tenants.get(self.tenant_id)

    def connect(self, timeout_s: float = 5.0):
        return self.tenant().admin_connect(timeout_s=timeout_s)

    def inspect(self, live: bool) -> tuple[str, list[str]]:
        """Refuse what cannot migrate (one line each); returns (server version, warnings)."""
        tenant = self.tenant()
        if not tenant.is_running():
            raise MigrationFailed(f"tenant {self.tenant_id} is not running", "", "start it first", phase=Phase.PREFLIGHT)
        if tenant.info.fenced:
            raise MigrationFailed(f"tenant {self.tenant_id} is fenced (read-only) on {self.node.name}",
                                  "an earlier migration has not finished", "see `slacker status`",
                                  phase=Phase.PREFLIGHT)
        conn = self.connect()
        try:
            log_bin, fmt, version = ops.server_facts(conn)
            if live and (not log_bin or fmt != "ROW"):
                raise MigrationFailed(f"tenant {self.tenant_id} cannot migrate live",
                                      f"binary log is {'on' if log_bin else 'off'}, format {fmt}",
                                      "it needs log_bin and binlog_format=ROW", phase=Phase.PREFLIGHT)
            bad = ops.non_transactional_tables(conn) if live else []
            if bad:
                raise MigrationFailed(f"tenant {self.tenant_id} cannot migrate live",
                                      f"{len(bad)} table(s) not in InnoDB: {', '.join(bad[:5])}"
                                      + (" ..." if len(bad) > 5 else ""),
                                      "ALTER TABLE ... ENGINE=InnoDB, or use --mode stop-and-copy",
                                      phase=Phase.PREFLIGHT)
            warnings = []
            no_pk = ops.tables_without_primary_key(conn) if live else []
            if no_pk:
                warnings.append(f"{len(no_pk)} table(s) without a primary key ({', '.join(no_pk[:5])}): "
                                "their changes apply slowly on the target, and --verify sums each of them whole, "
                                "in one statement")
        finally:
            conn.close()
        return version, warnings

    # ---- freeze and fence ------------------------------------------------------------
    def blockers(self, older_than_s: float) -> list[str]:
        """Statements and write transactions a freeze would wait for or break (see mariadb.freeze)."""
        conn = self.connect()
        try:
            return freezing.blockers(conn, older_than_s)
        finally:
            ops.close_quietly(conn)

    def warm(self) -> None:
        """Open the freeze's connection now, before the freeze's clock starts (a connect and its
        authentication are a few round trips, each of which can wait out a quota period on a starved node)."""
        ops.close_quietly(self._warm)
        self._warm = None
        self._warm = self.connect()

    def freeze(self, lock_timeout_s: float):
        """The global read lock, granted under row-lock contention (LockNotGranted when it is not)."""
        self.interrupted = []

        def connect():
            conn, self._warm = self._warm, None
            return conn if conn is not None else self.connect(timeout_s=max(1.0, lock_timeout_s))
        held = freezing.freeze(connect, lock_timeout_s)
        self.frozen, self.interrupted = held.conn, held.interrupted
        return self.frozen

    def frozen_position(self) -> str:
        """The source's GTID position, read on the connection holding the freeze."""
        return ops.gtid_position(self.frozen)

    def frozen_checksums(self) -> dict:
        """Whole-table sums, read under the freeze (stop-and-copy's --verify)."""
        return {k: list(v) for k, v in table_sums(self.frozen).items()}

    def unfreeze(self) -> None:
        conn, self.frozen = self.frozen, None
        freezing.unfreeze(conn)

    def fence(self) -> None:
        """read_only, persisted first: no restart, supervisor or lost connection can lift it."""
        self.fenced = True
        self.node.tenants.set_fenced(self.tenant(), True, conn=self.frozen)

    def unfence(self) -> None:
        """Persisted at once; told to the server on the freeze's connection, or a new one. A server
        that cannot be told (it is down) starts writable from its persisted state."""
        try:
            self.node.tenants.set_fenced(self.tenant(), False, conn=self.frozen)
        except Exception:
            try:
                self.node.tenants.set_fenced(self.tenant(), False)
            except Exception as exc:  # noqa: BLE001
                log.warning("tenant %s: unfenced on disk, server not told (%s)", self.tenant_id, exc)
        self.fenced = False

    def keep(self, migration: str, final_gtid: str, keep_s: float) -> dict:
        """Past the flip with --keep-source: the old copy stays, fenced, and replicates from the new owner from
        the flip's position (slacker.migration.kept); its record (where, until when) is returned."""
        own = self.node.directory.lookup(self.tenant_id)
        k = self.node.migrations.kept.keep(self.tenant(), migration=migration, owner=own.node, host=own.host,
                                           port=own.port, epoch=own.epoch, final_gtid=final_gtid, keep_s=keep_s)
        return {"node": self.node.name, **k}

    def retire(self, migration: str = "", pause=None):
        """The old copy stopped and set aside; returns its pending removal (None: nothing was left)."""
        pending = None
        if self.node.tenants.exists(self.tenant_id):
            pending = self.node.tenants.retire(self.tenant(), migration, pause)
        self.node.supervisor.forget(self.tenant_id)
        return pending
