"""Which database the project's own loads write into (slacker/oltp.py, slacker/ackwriter.py, slacker/ycsb/).

A load writes into the database it is given; given none, into the one its session starts in, which is where
the tenant's kind puts it (`slacker.kinds.Accounts.database`: a shared tenant's own database, pinned by the
router and named by `Endpoint.database`); where a session starts in none (a whole server), into the load's
own schema, which it creates. No kind is named here: the session says it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidInput

# The names a client types without quotes, within MariaDB's 64 characters: every shared tenant's id
# (slacker.kinds) and every load's own schema. Quoted in SQL all the same (a tenant `select` is an id).
_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
SESSION_DATABASE_SQL = "SELECT DATABASE()"


def check_database(name: str, where: str = "") -> str:
    """The name, if a load may write into it; InvalidInput in one line otherwise."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidInput(f"invalid database name {name!r}" + (f" {where}" if where else ""),
                           "a load's database is 1-64 letters, digits and _",
                           "for example ycsb, or a shared tenant's id (t42)")
    return name


def quote(name: str) -> str:
    """A checked database name quoted for SQL."""
    return "`" + check_database(name) + "`"


@dataclass(frozen=True)
class LoadDatabase:
    """The database a load writes into, and whether it must make it (not when its session is in it)."""

    name: str
    create: bool

    @property
    def quoted(self) -> str:
        return quote(self.name)

    def qualified(self, table: str) -> str:
        """`db`.table (the load's own table names are constants)."""
        return f"{self.quoted}.{table}"


def choose(given: str | None, session: str | None, default: str) -> LoadDatabase:
    """The database it is given, else the session's, else the load's own `default`; created unless it is the
    session's (a shared tenant's account may not create one, and its session's exists)."""
    name = given or session or default
    where = "(given)" if given else "(the session's)" if session else ""
    return LoadDatabase(check_database(name, where), create=name != session)


def session_database(conn) -> str | None:
    """The database a PyMySQL connection's session is in (None: none)."""
    with conn.cursor() as cur:
        cur.execute(SESSION_DATABASE_SQL)
        row = cur.fetchone()
    return row[0] if row and row[0] else None


def for_connection(conn, given: str | None, default: str) -> LoadDatabase:
    """`choose` for a PyMySQL connection's session."""
    return choose(given, session_database(conn), default)
