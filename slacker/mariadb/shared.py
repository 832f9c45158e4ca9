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
