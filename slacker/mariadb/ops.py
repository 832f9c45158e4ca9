"""The statements a migration runs against a tenant's server: fence, positions, inspection.

The freeze (FLUSH TABLES WITH READ LOCK, granted under OLTP load) is in
`freeze.py`; it blocks every writer for as long as one connection holds it.
Fence (`read_only`) is server state: it outlives that connection, and a COMMIT
that was blocked by the freeze fails once the freeze is lifted (checked after
the commit lock). The application account lacks READ ONLY ADMIN, so
`read_only` holds it off.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from ..errors import TenantError


SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
TRANSACTIONAL_ENGINES = ("InnoDB",)


@dataclass(frozen=True)
class BinlogPosition:
    gtid: str
    file: str
    pos: int
    logs: tuple[tuple[str, int], ...]  # every binlog file with its size


def server_facts(conn) -> tuple[bool, str, str]:
    """(log_bin, binlog_format, version)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@version")
        log_bin, fmt, version = cur.fetchone()
    return bool(log_bin), fmt, version


def gtid_position(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        return cur.fetchone()[0] or ""


def binlog_position(conn) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        gtid = cur.fetchone()[0] or ""
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        cur.execute("SHOW BINARY LOGS")
        logs = tuple((r[0], int(r[1])) for r in cur.fetchall())
    return BinlogPosition(gtid, row[0], int(row[1]), logs)


def non_transactional_tables(conn) -> list[str]:
    """User tables whose engine is not InnoDB: a hot backup cannot copy them consistently."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT CONCAT(table_schema, '.', table_name, ' (', IFNULL(engine, '?'), ')') "
            "FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            f"AND table_schema NOT IN ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))}) "
            f"AND (engine IS NULL OR engine NOT IN ({', '.join(['%s'] * len(TRANSACTIONAL_ENGINES))})) "
            "ORDER BY table_schema, table_name", SYSTEM_SCHEMAS + TRANSACTIONAL_ENGINES)
        return [r[0] for r in cur.fetchall()]


def tables_without_primary_key(conn) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT CONCAT(t.table_schema, '.', t.table_name) FROM information_schema.tables t "
            "LEFT JOIN information_schema.table_constraints c ON c.table_schema = t.table_schema "
            "AND c.table_name = t.table_name AND c.constraint_type = 'PRIMARY KEY' "
            f"WHERE t.table_type = 'BASE TABLE' AND t.table_schema NOT IN ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))}) "
            "AND c.constraint_name IS NULL ORDER BY 1", SYSTEM_SCHEMAS)
        return [r[0] for r in cur.fetchall()]


def ensure_read_only(conn, on: bool) -> bool:
    """Set `read_only` to `on` unless it is already; returns whether it changed. A server that cannot
    be asked raises TenantError."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.read_only")
            if bool(cur.fetchone()[0]) == on:
                return False
        set_read_only(conn, on)
        return True
    except pymysql.err.Error as exc:
        raise TenantError("cannot set read_only", str(exc), "") from exc


def set_read_only(conn, on: bool) -> None:
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL read_only = %s", (1 if on else 0,))


def commits_are_durable(conn) -> bool:
    """Every commit syncs the binlog and the redo log (sync_binlog = 1, innodb_flush_log_at_trx_commit = 1)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.innodb_flush_log_at_trx_commit")
        sync_binlog, flush_at_commit = cur.fetchone()
    return int(sync_binlog) == 1 and int(flush_at_commit) == 1


def flush_durable(conn) -> None:
    """Force what the server has committed so far to disk (redo log and binlog)."""
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        # LOCAL: a plain FLUSH ENGINE LOGS is binlogged, as a transaction with a GTID of this server's own.
        cur.execute("FLUSH LOCAL ENGINE LOGS")


def close_quietly(conn) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass
