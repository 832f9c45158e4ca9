"""Replication control and positions on a migration target (MariaDB multi-source, GTID).

What the delta appliers (`slacker.delta`) and the target half of a migration
(`slacker.migration.target`) run to make a target replicate from its source:
seed and read GTID positions, point a named replication connection at the
source, start, stop and forget it, read its status, wait for a position, size
the parallel applier. Each function takes a connection and runs one statement
(or one fixed sequence); the caller owns the connection and its lock.

Statements whose caller reports which statement failed raise `StatementFailed`
(the statement's first word and the server's message); the others let PyMySQL's
errors through.
"""

from __future__ import annotations

import pymysql



class StatementFailed(Exception):
    """A replication statement the server refused: `verb` is the statement's first word, `detail` its message."""

    def __init__(self, verb: str, detail: str) -> None:
        super().__init__(f"{verb}: {detail}")
        self.verb = verb
        self.detail = detail


def _run(conn, stmt: str, args=None, cursor=None) -> tuple:
    try:
        with conn.cursor(cursor) as cur:
            cur.execute(stmt, args)
            return cur.fetchall()
    except pymysql.err.MySQLError as exc:
        raise StatementFailed(stmt.split()[0], exc.args[-1]) from None


# --- positions ---------------------------------------------------------------------------------
def reset_master(conn) -> None:
    """Throw this server's binlogs away and start a new one (its gtid_binlog_state emptied)."""
    _run(conn, "RESET MASTER")


def set_gtid_slave_pos(conn, pos: str) -> None:
    """Where replication with MASTER_USE_GTID=slave_pos continues from."""
    _run(conn, "SET GLOBAL gtid_slave_pos = %s", (pos,))


def set_gtid_binlog_state(conn, state: str) -> None:
    """This server's binlog continues the given GTID history (valid only right after RESET MASTER)."""
    _run(conn, "SET GLOBAL gtid_binlog_state = %s", (state,))


def gtid_slave_pos(conn) -> str:
    """The GTID position applied so far."""
    return _run(conn, "SELECT @@GLOBAL.gtid_slave_pos")[0][0] or ""


def master_gtid_wait(conn, gtid: str, timeout_s: float) -> int | None:
    """MASTER_GTID_WAIT: 0 once `gtid` is applied, -1 after timeout_s (None: no row)."""
    r = _run(conn, "SELECT MASTER_GTID_WAIT(%s, %s)", (gtid, timeout_s))
    return r[0][0] if r else None


def seed_gtid_state(conn, state: str) -> None:
    """A fresh binlog continuing `state`, and replication continuing from it (a copy started fenced).

    PyMySQL's errors pass through as they are."""
    with conn.cursor() as cur:
        cur.execute("RESET MASTER")
        cur.execute("SET GLOBAL gtid_binlog_state = %s", (state,))
        cur.execute("SET GLOBAL gtid_slave_pos = %s", (state,))


def positions(conn, name: str) -> tuple[str, str]:
    """(applied, fetched) of the replication connection `name`: gtid_slave_pos and the IO thread's Gtid_IO_Pos.

    PyMySQL's errors pass through as they are."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SHOW SLAVE {_quote_name(name)} STATUS")
        st = cur.fetchone() or {}
        cur.execute("SELECT @@GLOBAL.gtid_slave_pos AS p")
        applied = cur.fetchone()["p"] or ""
    return applied, st.get("Gtid_IO_Pos") or ""


# --- replication control -----------------------------------------------------------------------
def change_master(conn, name: str, host: str, port: int, user: str, password: str, *,
                  ssl_ca: str | None = None, ssl_cert: str | None = None, ssl_key: str | None = None) -> None:
    """Point the replication connection `name` at a source, by GTID (slave_pos), retrying every second.

    With `ssl_ca`: TLS, the source's certificate verified against it, `ssl_cert`/`ssl_key` ours.
    The password stays in the statement's parameters, never in argv."""
    tls, tls_args = "", ()
    if ssl_ca:
        tls = (", MASTER_SSL=1, MASTER_SSL_CA=%s, MASTER_SSL_CERT=%s, MASTER_SSL_KEY=%s, "
               "MASTER_SSL_VERIFY_SERVER_CERT=1")
        tls_args = (ssl_ca, ssl_cert or "", ssl_key or "")
    _run(conn,
         f"CHANGE MASTER {_quote_name(name)} TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, "
         "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1"
         + tls, (host, port, user, password, *tls_args))


def start_slave(conn, name: str, sql_thread_only: bool = False) -> None:
    _run(conn, f"START SLAVE {_quote_name(name)}" + (" SQL_THREAD" if sql_thread_only else ""))


def start_slave_until(conn, name: str, gtid: str) -> None:
    """Start `name` to apply up to exactly `gtid` and stop there. Both threads must be stopped first (the
    server refuses UNTIL master_gtid_pos with the IO thread running: "Slave is already running")."""
    _run(conn, f"START SLAVE {_quote_name(name)} UNTIL master_gtid_pos = %s", (gtid,))


def stop_slave(conn, name: str, sql_thread_only: bool = False) -> None:
    _run(conn, f"STOP SLAVE {_quote_name(name)}" + (" SQL_THREAD" if sql_thread_only else ""))


def stop_all_slaves(conn) -> None:
    _run(conn, "STOP ALL SLAVES")


def reset_slave_all(conn, name: str) -> None:
    """Forget the replication connection `name` (its source, credentials and relay logs)."""
    _run(conn, f"RESET SLAVE {_quote_name(name)} ALL")


def slave_status(conn, name: str) -> dict:
    """SHOW SLAVE 'name' STATUS as a dict ({}: no such connection)."""
    rows = _run(conn, f"SHOW SLAVE {_quote_name(name)} STATUS", cursor=pymysql.cursors.DictCursor)
    return rows[0] if rows else {}


def connection_status(conn, name: str) -> dict:
    """The status of replication connection `name` ({} when there is none; SHOW SLAVE 'name' STATUS errs then)."""
    rows = _run(conn, "SHOW ALL SLAVES STATUS", cursor=pymysql.cursors.DictCursor)
    return next((r for r in rows if r.get("Connection_name") == name), {})


def set_parallel_mode(conn, mode: str) -> None:
    """slave_parallel_mode (optimistic, conservative, ...): takes effect at the next START SLAVE."""
    _run(conn, "SET GLOBAL slave_parallel_mode = %s", (mode,))


def set_parallel_threads(conn, n: int) -> None:
    """slave_parallel_threads (0: the SQL thread applies alone); only while the SQL threads are stopped."""
    _run(conn, "SET GLOBAL slave_parallel_threads = %s", (n,))


def forget_replication(conn) -> None:
    """Stop and forget every replication connection (a promoted target owns its data now)."""
    with conn.cursor() as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        names = [row[0] for row in cur.fetchall()]
        for name in names:
            cur.execute("STOP SLAVE %s" % _quote_name(name))
            cur.execute("RESET SLAVE %s ALL" % _quote_name(name))


def drop_replication_files(datadir) -> list[str]:
    """Remove a stopped server's replication bookkeeping (master/relay info, relay logs and their index).

    For a promoted migration target only: it applied exactly what it needed and is about to forget its
    replication link. A server killed while it replicates can leave a relay log index naming a relay
    log it had already purged; it then refuses to start ("Failed to initialize multi master
    structures"), and the target could never be activated. Returns the names removed.
    """
    from pathlib import Path

    d = Path(datadir)
    gone = []
    for pattern in ("master-*.info", "relay-log-*.info", "multi-master.info", "*relay-bin*"):
        for f in d.glob(pattern):
            f.unlink(missing_ok=True)
            gone.append(f.name)
    return gone


def _quote_name(name: str) -> str:
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"
