"""The SQL client behind the harness's hot path: mysqlclient (C) by default, PyMySQL as an option.

A driver opens connections to an Endpoint, runs one transaction (BEGIN, the
statements, COMMIT) with as little Python per statement as possible, and sorts
errors into reasons with a retry decision (the policy is in docs/ycsb.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..client import Endpoint
from ..loads import SESSION_DATABASE_SQL

DRIVERS = ("mysqlclient", "pymysql")

# A statement is (returns_rows, sql).
Statement = tuple[bool, str]

# MySQL/MariaDB error codes that mean the session is gone; the transaction is retried on a new connection.
CONNECTION_LOST_CODES = {
    0,     # PyMySQL: operation on a closed connection
    1053,  # server shutdown in progress
    1927,  # connection was killed
    2002, 2003,  # cannot connect
    2006,  # server has gone away
    2013,  # lost connection during query
    2026,  # SSL connection error
    2055,  # lost connection at handshake
    4031,  # disconnected by the server for inactivity
}
# In-session errors that a later attempt can get past.
RETRYABLE_CODES = {
    1205: "lock_wait_timeout",
    1213: "deadlock",
    1290: "read_only",   # --read-only: the source is frozen for a handover
    1836: "read_only",   # running in read-only mode
    1040: "too_many_connections",
    1317: "query_interrupted",
    1792: "read_only",   # cannot execute statement in a READ ONLY transaction
}
FINAL_CODES = {
    1062: "duplicate_key",
    1146: "no_such_table",
    1049: "no_such_database",
    1045: "access_denied",
    1064: "sql_syntax",
}


@dataclass(frozen=True)
class Failure:
    """How one failed attempt is counted and handled."""

    reason: str
    retryable: bool
    connection_lost: bool
    code: int | None = None
    message: str = ""


def classify(exc: BaseException) -> Failure | None:
    """The Failure for a database or socket error; None for anything else (a bug: let it raise)."""
    code: int | None = None
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        code = args[0]
    message = str(args[1]) if len(args) > 1 else str(exc)
    if not _is_db_error(exc):
        if isinstance(exc, (ConnectionError, OSError, TimeoutError)):
            return Failure("connection_lost", True, True, None, str(exc))
        return None
    if code in CONNECTION_LOST_CODES or code is None:
        return Failure("connection_lost", True, True, code, message)
    if code in RETRYABLE_CODES:
        return Failure(RETRYABLE_CODES[code], True, False, code, message)
    return Failure(FINAL_CODES.get(code, f"mysql_error_{code}"), False, False, code, message)


def _is_db_error(exc: BaseException) -> bool:
    import pymysql

    try:
        import MySQLdb
    except ImportError:  # pragma: no cover
        return isinstance(exc, pymysql.err.MySQLError)
    return isinstance(exc, (MySQLdb.Error, pymysql.err.MySQLError))


def db_errors() -> tuple[type[BaseException], ...]:
    """Exception classes a transaction can raise that classify() understands."""
    import pymysql

    classes: list[type[BaseException]] = [pymysql.err.MySQLError, ConnectionError, OSError, TimeoutError]
    try:
        import MySQLdb

        classes.insert(0, MySQLdb.Error)
    except ImportError:  # pragma: no cover
        pass
    return tuple(classes)


class Driver:
    """Opens connections and builds the per-connection transaction runner."""

    name = "abstract"

    def connect(self, ep: Endpoint, database: str | None, connect_timeout_s: float = 5.0,
                query_timeout_s: float = 60.0) -> Any:
        """A connection in `database`, else in the endpoint's (a shared tenant's own), else in none."""
        raise NotImplementedError

    def transaction_runner(self, conn: Any) -> Callable[[Sequence[Statement]], None]:
        """fn(statements) runs BEGIN, each statement (reading any rows), COMMIT on conn."""
        raise NotImplementedError

    def execute(self, conn: Any, sql: str) -> list[tuple]:
        """One statement outside the hot path; returns its rows."""
        raise NotImplementedError

    def session_database(self, conn: Any) -> str | None:
        """The database the connection's session is in (a shared tenant's own, where its login puts it)."""
        rows = self.execute(conn, SESSION_DATABASE_SQL)
        name = rows[0][0] if rows and rows[0] else None
        if isinstance(name, bytes):
            name = name.decode()
        return name if isinstance(name, str) and name else None

    def rollback_quietly(self, conn: Any) -> None:
        try:
            self.execute(conn, "ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection may be broken; the caller reconnects
            pass

    def close(self, conn: Any) -> None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass


class MysqlclientDriver(Driver):
    """mysqlclient's low-level API: query() and store_result() skip the cursor layer."""

    name = "mysqlclient"

    def connect(self, ep, database, connect_timeout_s=5.0, query_timeout_s=60.0):
        import MySQLdb

        tls = {"ssl": {"ca": ep.ssl_ca}} if getattr(ep, "ssl_ca", None) else {}  # a TLS cluster's tenant
        return MySQLdb.connect(host=ep.host, port=int(ep.port), user=ep.user, password=ep.password,
                               database=database or ep.database or "",
                               connect_timeout=max(1, int(round(connect_timeout_s))),
                               read_timeout=max(1, int(query_timeout_s)), write_timeout=max(1, int(query_timeout_s)),
                               autocommit=True, charset="utf8mb4", **tls)

    def transaction_runner(self, conn):
        import MySQLdb._mysql as _mysql

        # The C method directly: MySQLdb's Python wrapper only converts bytearrays.
        raw_query = _mysql.connection.query
        store = conn.store_result

        def run(statements: Sequence[Statement]) -> None:
            raw_query(conn, "BEGIN")
            for returns_rows, sql in statements:
                raw_query(conn, sql)
                if returns_rows:
                    store().fetch_row(0)
            raw_query(conn, "COMMIT")

        return run

    def execute(self, conn, sql):
        conn.query(sql)
        result = conn.store_result()
        return list(result.fetch_row(0)) if result is not None else []


class PymysqlDriver(Driver):
    """PyMySQL: pure Python, slower per statement; kept for comparison and where mysqlclient is missing."""

    name = "pymysql"

    def connect(self, ep, database, connect_timeout_s=5.0, query_timeout_s=60.0):
        import pymysql

        tls = {}
        if getattr(ep, "ssl_ca", None):  # a TLS cluster's tenant: verified against the cluster CA
            from ..tls import client_context
            tls = {"ssl": client_context(ep.ssl_ca)}
        return pymysql.connect(host=ep.host, port=int(ep.port), user=ep.user, password=ep.password,
                               database=database or ep.database, connect_timeout=connect_timeout_s,
                               read_timeout=query_timeout_s,
                               write_timeout=query_timeout_s, autocommit=True, charset="utf8mb4", **tls)

    def transaction_runner(self, conn):
        query = conn.query  # reads the whole result, like a buffered cursor

        def run(statements: Sequence[Statement]) -> None:
            query("BEGIN")
            for _, sql in statements:
                query(sql)
            query("COMMIT")

        return run

    def execute(self, conn, sql):
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())


def get_driver(name: str) -> Driver:
    from ..errors import InvalidInput

    if name == "mysqlclient":
        try:
            import MySQLdb  # noqa: F401
        except ImportError:
            from ..errors import MissingDependency

            raise MissingDependency("mysqlclient is not installed", "the C client binding is missing",
                                    "pip install mysqlclient, or use --driver pymysql") from None
        return MysqlclientDriver()
    if name == "pymysql":
        return PymysqlDriver()
    raise InvalidInput(f"invalid driver {name!r}", "expected mysqlclient or pymysql", "for example --driver mysqlclient")
