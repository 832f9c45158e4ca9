"""What the latency sources (`slacker.latency`) read from a tenant's server.

performance_schema's summary tables give the total latency and count of the
tenant's transactions (or top-level statements), overall or per user; the
server's `Handler_commit` counter tells an idle tenant from a source that does
not see its traffic. The SQL lives here, in one place. Timers are picoseconds.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import InvalidInput

PFS_TABLES = {
    # kind: (global table, per-user table, event filter)
    "statements": (
        "events_statements_summary_global_by_event_name",
        "events_statements_summary_by_user_by_event_name",
        # Top-level statements however the client sent them: text protocol (and
        # CALL, PREPARE/EXECUTE in SQL) are statement/sql/*, binary-protocol
        # executions of server-side prepared statements are statement/com/Execute.
        # statement/sp/* are nested in a CALL and would count twice.
        "(EVENT_NAME LIKE 'statement/sql/%%' OR EVENT_NAME = 'statement/com/Execute')",
    ),
    "transactions": (
        "events_transactions_summary_global_by_event_name",
        "events_transactions_summary_by_user_by_event_name",
        "EVENT_NAME = 'transaction'",
    ),
}
_PS_PER_SECOND = 1e12


def performance_schema_sql(kind: str = "transactions", users: Sequence[str] = (), exclude_users: Sequence[str] = ()) -> tuple[str, list[str]]:
    """The snapshot query and its parameters (pymysql %s style)."""
    if kind not in PFS_TABLES:
        raise InvalidInput(f"invalid performance_schema kind {kind!r}", "expected statements or transactions")
    global_table, user_table, event_filter = PFS_TABLES[kind]
    select = "SELECT COALESCE(SUM(SUM_TIMER_WAIT), 0), COALESCE(SUM(COUNT_STAR), 0)"
    if not users and not exclude_users:
        return f"{select} FROM performance_schema.{global_table} WHERE {event_filter}", []
    # Per-user rows let us leave out Slacker's own connections (backup, delta apply),
    # whose long statements are not tenant latency. Background threads have no user.
    where = [event_filter, "USER IS NOT NULL"]
    params: list[str] = []
    if users:
        where.append("USER IN (" + ", ".join(["%s"] * len(users)) + ")")
        params.extend(users)
    if exclude_users:
        where.append("USER NOT IN (" + ", ".join(["%s"] * len(exclude_users)) + ")")
        params.extend(exclude_users)
    return f"{select} FROM performance_schema.{user_table} WHERE " + " AND ".join(where), params


def latency_totals(conn: Any, sql: str, params: Sequence[str]) -> tuple[float, float]:
    """(total latency in seconds, count) from a `performance_schema_sql` query."""
    with conn.cursor() as cur:
        # Always pass a tuple so pymysql applies %-formatting ('%%' in LIKE).
        cur.execute(sql, tuple(params))
        row = cur.fetchone()
    if not row:
        return 0.0, 0.0
    return float(row[0] or 0) / _PS_PER_SECOND, float(row[1] or 0)


def check_enabled(conn: Any, kind: str = "transactions") -> None:
    """RuntimeError unless the server can count `kind`; switches the transaction instrument on if needed."""
    # With performance_schema off (MariaDB's default) the tables exist but stay
    # empty, which would look like an idle tenant forever.
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.performance_schema, @@GLOBAL.performance_schema_max_statement_classes")
        row = cur.fetchone()
    if not row or not int(row[0] or 0):
        raise RuntimeError("performance_schema is OFF on this server (start it with performance_schema=ON)")
    if kind == "statements" and len(row) > 1 and row[1] is not None and not int(row[1]):
        raise RuntimeError("statement instrumentation is sized out on this server "
                           "(performance_schema_max_statement_classes=0); use table=transactions")
    if kind == "transactions":
        enable_transaction_instrument(conn)


def enable_transaction_instrument(conn: Any) -> None:
    """Switch on (and time) the `transaction` instrument if it is off.

    Tenants created by this version have it on from their config; one started
    with an older config gets it at the first read, and counts from then on.
    """
    with conn.cursor() as cur:
        cur.execute("SELECT ENABLED, TIMED FROM performance_schema.setup_instruments WHERE NAME = 'transaction'")
        row = cur.fetchone()
        if row is None:
            raise RuntimeError("this server has no transaction instrument in performance_schema")
        if row[0] != "YES" or row[1] != "YES":
            cur.execute("UPDATE performance_schema.setup_instruments SET ENABLED = 'YES', TIMED = 'YES' "
                        "WHERE NAME = 'transaction'")


def handler_commits(conn: Any) -> float:
    """The server's count of commits (`Handler_commit`): moves for every client statement or transaction
    on a transactional table, not for performance_schema reads or SHOW STATUS."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Handler_commit'")
        row = cur.fetchone()
    return float(row[1]) if row else 0.0
