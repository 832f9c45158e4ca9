"""The statements of a node's shared server that concern one tenant: its database and its own accounts.

A shared tenant is database `<id>` with the accounts `<id>_<role>` (slacker/kinds/) at '%' and 'localhost',
whose grants are on that database alone: no global privilege, so neither SHOW DATABASES nor PROCESS shows
a neighbour. Tenant ids hold no '_' or '%', the wildcards of a database-level grant, so `<id>`.* names the
one database. Every statement is idempotent: a create or removal cut short is finished by running it again.
"""

from __future__ import annotations

import pymysql

from .server import DATABASE_PRIVILEGES

ACCOUNT_HOSTS = ("%", "localhost")


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _lit(text: str) -> str:
    return "'" + pymysql.converters.escape_string(text) + "'"


def databases(conn) -> set[str]:
    """Every database of the server (the admin connection sees them all)."""
    with conn.cursor() as cur:
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
        return {row[0] for row in cur.fetchall()}


def databases_fingerprint(conn) -> tuple[int, int]:
    """(how many databases, the sum of their names' CRC32): one row that changes when the set does (but for a
    2^-32 chance), so a node of a thousand databases need not read their names every tick."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), COALESCE(SUM(CRC32(SCHEMA_NAME)), 0) FROM information_schema.SCHEMATA")
        n, crc = cur.fetchone()
        return int(n), int(crc)


def database_exists(conn, database: str) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,))
        return cur.fetchone() is not None


def create_database(conn, database: str, if_not_exists: bool = False) -> None:
    """A new tenant's database; without `if_not_exists` one already there is an error (1007)."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {'IF NOT EXISTS ' if if_not_exists else ''}{_ident(database)}")


def create_account(conn, user: str, password: str, database: str) -> None:
    """The tenant's account, made anew (an older one of that name, say a removal's leftover, is replaced),
    with its grants on `database` only."""
    with conn.cursor() as cur:
        for host in ACCOUNT_HOSTS:
            cur.execute(f"CREATE OR REPLACE USER {_lit(user)}@{_lit(host)} IDENTIFIED BY {_lit(password)}")
            cur.execute(f"GRANT {DATABASE_PRIVILEGES} ON {_ident(database)}.* TO {_lit(user)}@{_lit(host)}")


def drop_accounts(conn, users: list[str]) -> None:
    """The accounts gone, then their sessions ended: no new login, and nothing of theirs runs on."""
    with conn.cursor() as cur:
        for user in users:
            for host in ACCOUNT_HOSTS:
                cur.execute(f"DROP USER IF EXISTS {_lit(user)}@{_lit(host)}")
        if users:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER IN (%s)"
                        % ",".join(["%s"] * len(users)), users)
            for (pid,) in cur.fetchall():
                try:
                    cur.execute(f"KILL CONNECTION {int(pid)}")
                except pymysql.err.OperationalError as exc:
                    if exc.args[0] != 1094:  # ER_NO_SUCH_THREAD: it ended meanwhile
                        raise


def drop_database(conn, database: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {_ident(database)}")


def sessions_by_user(conn) -> dict[str, int]:
    """Open sessions per account (one read of the process list for every tenant of the server)."""
    with conn.cursor() as cur:
        cur.execute("SELECT USER, COUNT(*) FROM information_schema.PROCESSLIST GROUP BY USER")
        return {row[0]: int(row[1]) for row in cur.fetchall()}


def usage_fingerprint(conn) -> tuple:
    """(rows, transactions, latency) summed over the tenants' accounts (`<id>_<role>`; not the server's
    `slacker_*`): per-account counters only grow, an account dropped takes its row, a new one adds one, so
    when this one row is unchanged so is every account's (what one read of `usage_by_user` gives)."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), COALESCE(SUM(COUNT_STAR), 0), COALESCE(SUM(SUM_TIMER_WAIT), 0) FROM "
                    "performance_schema.events_transactions_summary_by_user_by_event_name "
                    "WHERE EVENT_NAME = 'transaction' AND USER LIKE '%\\_%' AND USER NOT LIKE 'slacker\\_%'")
        return tuple(int(v) for v in cur.fetchone())


def usage_by_user(conn, cpu: bool = True) -> dict[str, tuple[float, float, float]]:
    """Every account's ever-growing (transaction latency in s, transactions, CPU s of its sessions), one read of
    the server for all its tenants. Transactions are performance_schema's per-user summary (timers are ps);
    CPU is the user statistics' CPU_TIME (the server's `userstat`, turned on here if it is off: the counters
    start then), read only with `cpu` (else 0). Both restart at zero with the server; background threads
    (purge, page flushing) have no user."""
    with conn.cursor() as cur:
        cur.execute("SELECT USER, SUM(SUM_TIMER_WAIT), SUM(COUNT_STAR) FROM "
                    "performance_schema.events_transactions_summary_by_user_by_event_name "
                    "WHERE EVENT_NAME = 'transaction' AND USER IS NOT NULL GROUP BY USER")
        out = {row[0]: (float(row[1] or 0) / 1e12, float(row[2] or 0), 0.0) for row in cur.fetchall()}
        if not cpu:
            return out
        cur.execute("SELECT @@GLOBAL.userstat")
        if not int(cur.fetchone()[0]):
            cur.execute("SET GLOBAL userstat = ON")
        cur.execute("SELECT USER, CPU_TIME FROM information_schema.USER_STATISTICS")
        for user, cpu in cur.fetchall():
            sum_s, count, _ = out.get(user, (0.0, 0.0, 0.0))
            out[user] = (sum_s, count, float(cpu or 0.0))
    return out
