"""One database inside a shared server: the statements its live move stands on.

A shared tenant is one database beside many others in one `mariadbd`; its move must never touch a
neighbour. Here are the engine facts that move is built from, checked on MariaDB 10.11
(docs/shared-engine.md): what a database holds, taking tables in by `IMPORT TABLESPACE`, a
replication connection filtered to one database, the fence of one database (its accounts locked,
its sessions gone, its tables read-locked: granted under OLTP while the neighbours keep committing),
and its retirement by one atomic `RENAME TABLE` into a trash database. Every statement that
changes a server's data here runs with `sql_log_bin=0`: the move's own bookkeeping is no one's
transaction to replicate.
"""

from __future__ import annotations

import math
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pymysql
from pymysql.constants import CLIENT

from ..delta.gtid import parse_gtid_pos, format_gtid_pos
from ..errors import LockNotGranted, MigrationFailed
from .ops import close_quietly

# The move's replication connection on the target is named for its source server: at most one per
# (source, target) pair, since every connection shares the target's one gtid_slave_pos slot per domain.
CONNECTION_PREFIX = "slacker_"
TRASH_PREFIX = "slacker_trash_"
# Server threads that are never a tenant's session.
_SERVER_USERS = ("system user", "event_scheduler", "unauthenticated user")


def quote(name: str) -> str:
    """An identifier quoted for SQL (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


def _literal(text: str) -> str:
    return "'" + pymysql.converters.escape_string(text) + "'"


def connection_name(source: str) -> str:
    """The target's replication connection for moves from `source` (a node or server name)."""
    return CONNECTION_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", source)[:56]


def wild_pattern(db: str) -> str:
    """`replicate_wild_do_table` pattern of every table of `db` and nothing else: `_` and `%` in the
    name are LIKE wildcards (a filter for `t_1` would also take `tx1`), so they are escaped."""
    return re.sub(r"([\\_%])", r"\\\1", db) + ".%"


def dir_name(name: str) -> str:
    """A database's or table's file name in the data directory (MariaDB's filename charset):
    letters, digits and `_` as they are, anything else `@` and four hex digits (`t-42` is `t@002d42`)."""
    return "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "@%04x" % ord(c) for c in name)


def domain_part(pos: str, domain: int) -> str:
    """The part of a GTID position for one domain ('' when the position has none)."""
    d = parse_gtid_pos(pos)
    return format_gtid_pos({domain: d[domain]}) if domain in d else ""


def _run(conn, stmt: str, args=None) -> tuple:
    with conn.cursor() as cur:
        cur.execute(stmt, args)
        return cur.fetchall()


def _local(conn) -> None:
    """This session's changes stay out of the binlog (a connection of our own, such as the fence's)."""
    _run(conn, "SET SESSION sql_log_bin = 0")


@contextmanager
def _unlogged(conn, no_fk_checks: bool = False):
    """The caller's connection kept out of the binlog (and, with `no_fk_checks`, its foreign keys
    unchecked) for a block, then set back as it was: a later write of the caller's must not go
    unreplicated by surprise."""
    saved = _run(conn, "SELECT @@SESSION.sql_log_bin, @@SESSION.foreign_key_checks")[0]
    _run(conn, "SET SESSION sql_log_bin = 0" + (", foreign_key_checks = 0" if no_fk_checks else ""))
    try:
        yield
    finally:
        try:
            _run(conn, "SET SESSION sql_log_bin = %s, foreign_key_checks = %s", tuple(saved))
        except pymysql.err.MySQLError:  # a connection that broke: nothing to set back
            pass


# --- what a database holds ---------------------------------------------------------------------
@dataclass(frozen=True)
class Contents:
    """The objects of one database, by class (names only)."""
    tables: tuple[str, ...]
    views: tuple[str, ...]
    triggers: tuple[str, ...]
    routines: tuple[str, ...]  # "PROCEDURE p", "FUNCTION f"
    events: tuple[str, ...]
    not_innodb: tuple[str, ...]
    partitioned: tuple[str, ...]
    fulltext: tuple[str, ...]
    foreign_keys_out: tuple[str, ...]  # constraints that reference another database


_TABLES_SQL = ("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
               "AND table_type = 'BASE TABLE' ORDER BY table_name")


def base_tables(conn, db: str) -> tuple[str, ...]:
    """The database's base tables by name: one query (the fence reads only these, while the tenant is frozen)."""
    return tuple(r[0] for r in _run(conn, _TABLES_SQL, (db,)))


def contents(conn, db: str) -> Contents:
    def col(sql: str, args=(db,)) -> tuple[str, ...]:
        return tuple(r[0] for r in _run(conn, sql, args))
    return Contents(
        tables=base_tables(conn, db),
        views=col("SELECT table_name FROM information_schema.views WHERE table_schema = %s ORDER BY 1"),
        triggers=col("SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = %s ORDER BY 1"),
        routines=col("SELECT CONCAT(routine_type, ' ', routine_name) FROM information_schema.routines "
                     "WHERE routine_schema = %s ORDER BY 1"),
        events=col("SELECT event_name FROM information_schema.events WHERE event_schema = %s ORDER BY 1"),
        not_innodb=col("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                       "AND table_type = 'BASE TABLE' AND IFNULL(engine, '') <> 'InnoDB' ORDER BY 1"),
        partitioned=col("SELECT DISTINCT table_name FROM information_schema.partitions WHERE table_schema = %s "
                        "AND partition_name IS NOT NULL ORDER BY 1"),
        fulltext=col("SELECT DISTINCT table_name FROM information_schema.statistics WHERE table_schema = %s "
                     "AND index_type = 'FULLTEXT' ORDER BY 1"),
        foreign_keys_out=col("SELECT CONCAT(table_name, '.', constraint_name) FROM "
                             "information_schema.referential_constraints WHERE constraint_schema = %s "
                             "AND unique_constraint_schema <> constraint_schema ORDER BY 1"),
    )


def database_definition(conn, db: str) -> str:
    """SHOW CREATE DATABASE: its default character set and collation go with it."""
    return _run(conn, f"SHOW CREATE DATABASE {quote(db)}")[0][1]


def exists(conn, db: str) -> bool:
    return bool(_run(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (db,)))


def table_definitions(conn, db: str) -> dict[str, str]:
    """SHOW CREATE TABLE of every base table of `db`: what the target creates before it imports."""
    out = {}
    for t in contents(conn, db).tables:
        out[t] = _run(conn, f"SHOW CREATE TABLE {quote(db)}.{quote(t)}")[0][1]
    return out


def physical_refusals(c: Contents) -> list[str]:
    """Why a partial hot backup cannot move this database, one line each ([]: it can).

    The physical path moves InnoDB base tables by their tablespace files; whatever else the database
    holds would need its definitions carried beside them, and those classes have paths of their own."""
    why = []
    # Partitioned tables: DISCARD TABLESPACE is refused on them (1031). FULLTEXT: IMPORT takes the
    # table's file but not its FTS_* index tablespaces, and the index is left corrupt (1817), silently.
    for label, names in (("tables not in InnoDB", c.not_innodb), ("partitioned tables", c.partitioned),
                         ("FULLTEXT indexes", c.fulltext),
                         ("views", c.views), ("triggers", c.triggers), ("routines", c.routines),
                         ("events", c.events), ("foreign keys to another database", c.foreign_keys_out)):
        if names:
            why.append(f"{label}: {', '.join(names[:5])}" + (" ..." if len(names) > 5 else ""))
    return why


def datadir(conn) -> str:
    return _run(conn, "SELECT @@GLOBAL.datadir")[0][0]


# --- taking a database in by its tablespaces ---------------------------------------------------
def create_for_import(conn, db: str, database_ddl: str, definitions: dict[str, str]) -> None:
    """Create `db` and its tables as the source has them (`database_definition`, `table_definitions`),
    each table's own tablespace discarded: the running server then takes the copied files in
    (`import_tablespaces`). A database of that name must not exist yet (the target's copy is new).
    The connection's default database is `db` afterwards (the definitions name their tables and the
    tables their foreign keys reference without it)."""
    with _unlogged(conn, no_fk_checks=True):
        _run(conn, database_ddl)
        _run(conn, f"USE {quote(db)}")
        for table, ddl in definitions.items():
            _run(conn, ddl)
            _run(conn, f"ALTER TABLE {quote(db)}.{quote(table)} DISCARD TABLESPACE")


def drop_database(conn, db: str) -> None:
    """Remove a partial copy a failed snapshot left on the target."""
    with _unlogged(conn):
        _run(conn, f"DROP DATABASE IF EXISTS {quote(db)}")


def import_tablespaces(conn, db: str, tables) -> None:
    """IMPORT TABLESPACE for each table whose .ibd (and .cfg) has been put in the data directory; the
    server checks each file against the table's definition (the .cfg) and refuses a mismatch."""
    with _unlogged(conn, no_fk_checks=True):
        for table in tables:
            _run(conn, f"ALTER TABLE {quote(db)}.{quote(table)} IMPORT TABLESPACE")


# How long the target waits for InnoDB's checkpoint to pass an import (an idle 2-core server: about 1 s).
IMPORT_CHECKPOINT_TIMEOUT_S = 60.0


def checkpoint_past_import(conn, timeout_s: float = IMPORT_CHECKPOINT_TIMEOUT_S) -> float:
    """Until InnoDB's checkpoint has passed the log's end as it is now, just after an IMPORT TABLESPACE;
    returns the seconds waited.

    Until it has, MariaDB 10.11's crash recovery drops every change made to an imported table since the
    import (the redo log from the checkpoint on still holds the table's DISCARD, and recovery reads the
    tablespace as dropped): a delta applied into it, and acknowledged writes after a flip, gone with a
    SIGKILL of the server while gtid_slave_pos keeps its place (measured: docs/shared-engine.md). The page
    cleaner is asked to flush everything (innodb_max_dirty_pages_pct 0) for the wait and set back after."""
    def status(name):
        return int(_run(conn, "SHOW GLOBAL STATUS LIKE %s", (name,))[0][1])

    t0 = time.monotonic()
    lsn = status("Innodb_lsn_current")
    if status("Innodb_lsn_last_checkpoint") >= lsn:
        return 0.0
    pct, lwm = _run(conn, "SELECT @@GLOBAL.innodb_max_dirty_pages_pct, @@GLOBAL.innodb_max_dirty_pages_pct_lwm")[0]
    try:
        _run(conn, "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0.001")
        _run(conn, "SET GLOBAL innodb_max_dirty_pages_pct = 0")
        while status("Innodb_lsn_last_checkpoint") < lsn:
            if time.monotonic() - t0 > timeout_s:
                raise MigrationFailed("the imported tables are not crash-safe on the target yet",
                                      f"InnoDB's checkpoint did not pass the import within {timeout_s:.0f}s",
                                      "the source keeps serving; retry (or move it with --snapshot logical)",
                                      phase="prepare")
            time.sleep(0.05)
    finally:
        _run(conn, "SET GLOBAL innodb_max_dirty_pages_pct = %s", (float(pct),))
        _run(conn, "SET GLOBAL innodb_max_dirty_pages_pct_lwm = %s", (float(lwm),))
    return round(time.monotonic() - t0, 3)


# --- the delta of one database -----------------------------------------------------------------
@dataclass(frozen=True)
class DeltaStart:
    """How a database's delta started: the target's position it continues from, and which other
    connections' SQL threads were paused (their IO threads kept fetching) for how long to set it."""
    slave_pos: str
    paused: tuple[str, ...]
    pause_ms: float


def splice_position(current: str, snapshot: str, domain: int) -> str:
    """The target's gtid_slave_pos with the source domain's part taken from the snapshot: every other
    domain's part kept as it is (another connection's), the snapshot's parts for domains the target
    has none of added (the source has them in its binlog, so it accepts them)."""
    pos = parse_gtid_pos(current)
    snap = parse_gtid_pos(snapshot)
    if domain not in snap:
        raise MigrationFailed("the snapshot's position has no part for the source's domain",
                              f"domain {domain} not in {snapshot!r}", "check the source's gtid_domain_id",
                              phase="delta")
    pos[domain] = snap[domain]
    for d, part in snap.items():
        pos.setdefault(d, part)
    return format_gtid_pos(pos)


def start_delta(conn, name: str, db: str, *, host: str, port: int, user: str, password: str,
                snapshot_gtid: str, domain: int) -> DeltaStart:
    """Replicate the changes of `db` only, committed on the source (GTID domain `domain`) after the
    snapshot at `snapshot_gtid`, on the target's connection `name`.

    By GTID (MASTER_USE_GTID=slave_pos: the position is transactional, a crash of the target neither
    loses nor repeats a transaction) and from the source's domain only (DO_DOMAIN_IDS): gtid_slave_pos
    is one part per domain shared by every connection, so only the source domain's part is set
    (`splice_position`). The server refuses that SET while any connection's SQL thread runs (1198):
    the others' SQL threads are paused for it, their IO threads keep fetching. The filter is a wild
    table filter alone: a `replicate_do_db` beside it drops the tenant's DDL issued from another
    default database (docs/shared-engine.md)."""
    q = _quote_conn(name)
    # A second connection to the same source is refused (1934, "conflicts with existing connection"):
    # one connection per (source, target) pair, its filter naming every database it brings.
    _run(conn, f"CHANGE MASTER {q} TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
               f"MASTER_USE_GTID=slave_pos, DO_DOMAIN_IDS=({int(domain)}), MASTER_CONNECT_RETRY=1, "
               "MASTER_HEARTBEAT_PERIOD=1", (host, port, user, password))
    try:
        _set_filter(conn, name, db)
        running = [n for n, sql in _connections(conn) if sql == "Yes" and n != name]
        t0 = time.monotonic()
        try:
            for other in running:
                _run(conn, f"STOP SLAVE {_quote_conn(other)} SQL_THREAD")
            current = _run(conn, "SELECT @@GLOBAL.gtid_slave_pos")[0][0] or ""
            pos = splice_position(current, snapshot_gtid, domain)
            _run(conn, "SET GLOBAL gtid_slave_pos = %s", (pos,))
        finally:
            for other in running:
                _run(conn, f"START SLAVE {_quote_conn(other)} SQL_THREAD")
        pause_ms = round((time.monotonic() - t0) * 1000, 1)
        _run(conn, f"START SLAVE {q}")
    except BaseException:
        try:  # no half-made connection stays behind
            drop_delta(conn, name)
        except Exception:
            pass
        raise
    return DeltaStart(pos, tuple(running), pause_ms)


def _connections(conn) -> list[tuple[str, str]]:
    """(name, Slave_SQL_Running) of every replication connection."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        return [(r["Connection_name"], r["Slave_SQL_Running"]) for r in cur.fetchall()]


def wait_applied(conn, pos: str, domain: int, timeout_s: float) -> bool:
    """MASTER_GTID_WAIT on the source domain's part of `pos` only: the other domains of a source's
    position are other servers' history, which this connection may never bring."""
    part = domain_part(pos, domain)
    if not part:
        return True
    return _run(conn, "SELECT MASTER_GTID_WAIT(%s, %s)", (part, timeout_s))[0][0] == 0


def delta_filter(conn, name: str) -> str:
    return _status(conn, name).get("Replicate_Wild_Do_Table", "")


def _status(conn, name: str) -> dict:
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SHOW SLAVE {_quote_conn(name)} STATUS")
            return cur.fetchone() or {}
    except pymysql.err.OperationalError as exc:
        if exc.args[0] == 1617:  # no such connection
            return {}
        raise


@dataclass(frozen=True)
class DeltaError:
    """Why the connection's SQL thread stopped; `foreign` names a database other than the tenant's
    when the statement belongs to a neighbour (a wild table filter does not filter routines and
    events: the neighbour's CREATE PROCEDURE reaches the target, which has no such database)."""
    errno: int
    message: str
    foreign: str = ""


def delta_error(conn, name: str, db: str) -> DeltaError | None:
    st = _status(conn, name)
    errno = int(st.get("Last_SQL_Errno") or 0)
    if not errno:
        return None
    msg = st.get("Last_SQL_Error") or ""
    foreign = ""
    m = re.search(r"Unknown database '([^']*)'", msg)
    if errno == 1049 and m and m.group(1) != db:
        foreign = m.group(1)
    return DeltaError(errno, msg, foreign)


def skip_foreign(conn, name: str, db: str) -> bool:
    """Skip the one transaction that stopped the connection when it is a neighbour's (`delta_error`
    names another database): it has nothing of `db`. Returns whether it skipped."""
    err = delta_error(conn, name, db)
    if err is None or not err.foreign:
        return False
    q = _quote_conn(name)
    _run(conn, f"STOP SLAVE {q}")
    _run(conn, "SET @@SESSION.default_master_connection = %s", (name,))
    _run(conn, "SET GLOBAL sql_slave_skip_counter = 1")
    _run(conn, f"START SLAVE {q}")
    return True


def pause_delta(conn, name: str) -> None:
    """Stop the connection's threads (it keeps its position, filter and relay logs)."""
    _run(conn, f"STOP SLAVE {_quote_conn(name)}")


def resume_delta(conn, name: str) -> None:
    _run(conn, f"START SLAVE {_quote_conn(name)}")


def rearm_delta(conn, name: str, db: str) -> bool:
    """After the server restarted: the connection `name`'s filter to `db` set again (a restart forgets it),
    then the connection started. False if there is no such connection (its move never started its delta)."""
    if not _status(conn, name):
        return False
    _set_filter(conn, name, db)
    resume_delta(conn, name)
    return True


def _set_filter(conn, name: str, db: str) -> None:
    """The (stopped) connection `name` takes `db`'s tables and nothing else (set at runtime: a restart forgets it)."""
    _run(conn, f"SET GLOBAL {quote(name)}.replicate_wild_do_table = %s", (wild_pattern(db),))


def resume_delta_until(conn, name: str, pos: str, domain: int) -> None:
    """Start the (stopped) connection until the source domain's part of `pos` is applied: its SQL
    thread stops there (MASTER_GTID_POS: only the domains named are executed)."""
    _run(conn, f"START SLAVE {_quote_conn(name)} UNTIL master_gtid_pos = %s", (domain_part(pos, domain),))


def delta_running(conn, name: str) -> bool:
    return _status(conn, name).get("Slave_SQL_Running") == "Yes"


def slave_position(conn) -> str:
    return _run(conn, "SELECT @@GLOBAL.gtid_slave_pos")[0][0] or ""


def database_bytes(conn, db: str) -> int:
    """Its tables' data and indexes as the server counts them (a dump's text is about as large)."""
    return int(_run(conn, "SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.tables "
                          "WHERE table_schema = %s", (db,))[0][0] or 0)


def delta_exists(conn, name: str) -> bool:
    return bool(_status(conn, name))


def delta_of_domain(conn, domain: int) -> str | None:
    """The replication connection that brings GTID domain `domain` already, or None: two connections of one
    domain would share its one gtid_slave_pos part (every whole server is domain 0, so two of them packed into
    one shared server at once from two nodes)."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        for r in cur.fetchall():
            ids = {x.strip() for x in str(r.get("Replicate_Do_Domain_Ids") or "").split(",") if x.strip()}
            if str(int(domain)) in ids:
                return r["Connection_name"]
    return None


# Accounts every whole server has that are not the tenant's: MariaDB's own and Slacker's service accounts.
_BUILTIN_ACCOUNTS = frozenset({"root", "mysql", "mariadb.sys", "PUBLIC", "", "slacker", "slacker_backup",
                               "slacker_repl"})


def packing_refusal(conn, db: str, app_user: str = "app") -> str | None:
    """Why a whole server cannot become database `db` of a shared server, or None: its user data must be that
    one database (a shared tenant is one database, named as the tenant) and its only account of its own
    `app_user` (the one the shared tenant gets, with grants on `db` alone)."""
    schemas = {r[0] for r in _run(conn, "SELECT schema_name FROM information_schema.schemata")}
    others = sorted(schemas - {"mysql", "information_schema", "performance_schema", "sys", db})
    if db not in schemas:
        return f"it has no database {db} (a shared tenant is the database named as the tenant)"
    if others:
        return (f"it holds other databases besides {db}: {', '.join(others[:5])}" + (" ..." if len(others) > 5 else "")
                + " (a shared tenant is one database)")
    users = sorted({f"{u}@{h}" for u, h in _run(conn, "SELECT User, Host FROM mysql.global_priv")
                    if u not in _BUILTIN_ACCOUNTS and u != app_user})
    if users:
        return (f"it has accounts of its own besides {app_user}: {', '.join(users[:5])}"
                + (" ..." if len(users) > 5 else "") + f" (a shared tenant has {app_user} alone)")
    return None


def drop_delta(conn, name: str) -> bool:
    """Stop and forget the connection `name` (its source, filter and relay logs); False if none."""
    if not _status(conn, name):
        return False
    q = _quote_conn(name)
    _run(conn, f"STOP SLAVE {q}")
    _run(conn, f"RESET SLAVE {q} ALL")
    return True


def _quote_conn(name: str) -> str:
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --- the fence of one database -----------------------------------------------------------------
def _batch(conn, stmts) -> list[tuple]:
    """Run (statement, args) pairs in one round trip where the connection takes several statements (the one
    `ready` opens for the fence does), one by one where it does not; the rows of each. On a node at its CPU
    quota every round trip may wait out a quota period, so the fence sends as few as it can."""
    stmts = list(stmts)
    if len(stmts) < 2 or not getattr(conn, "client_flag", 0) & CLIENT.MULTI_STATEMENTS:
        return [_run(conn, s, a) for s, a in stmts]
    with conn.cursor() as cur:
        cur.execute(";\n".join(cur.mogrify(s, a) if a is not None else s for s, a in stmts))
        out = [cur.fetchall()]
        while cur.nextset():
            out.append(cur.fetchall())
    return out


def _accounts_sql(users) -> tuple[str, tuple]:
    return (f"SELECT User, Host FROM mysql.global_priv WHERE User IN ({', '.join(['%s'] * len(users))}) "
            "ORDER BY User, Host", tuple(users))


# The attribute the router sets on its logins to an owner (router/proto.go routerAttr).
ROUTER_ATTR = "_slacker_router"
# fence(kill_idle=BUT_ROUTED): every session of the tenant but the router's idle ones.
BUT_ROUTED = "but-routed"


# The router's sessions, by the attribute it logs in with (none where the server keeps no attributes).
_ROUTER_SESSIONS_SQL = ("SELECT PROCESSLIST_ID FROM performance_schema.session_connect_attrs WHERE ATTR_NAME = "
                        f"'{ROUTER_ATTR}' AND @@GLOBAL.performance_schema = 1 "
                        "AND @@GLOBAL.performance_schema_session_connect_attrs_size <> 0")


def _sessions_sql(users, busy_only: bool | str, spared=None) -> tuple[str, tuple]:
    """The tenant's sessions: all (busy_only False), those in a statement or a transaction (True), or those and
    every idle one that is not the router's (BUT_ROUTED: the router holds its own and moves them itself). The
    router's are read from performance_schema, or given as `spared` (under a table lock, where this connection
    can read no performance_schema table: 1100)."""
    busy = (" AND (COMMAND <> 'Sleep' OR ID IN (SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX)"
            if busy_only else "")
    if busy_only == BUT_ROUTED:
        if spared is None:
            busy += f" OR ID NOT IN ({_ROUTER_SESSIONS_SQL})"
        elif spared:
            busy += f" OR ID NOT IN ({', '.join(str(int(i)) for i in spared)})"
        else:
            busy += " OR 1"
    if busy:
        busy += ")"
    return (f"SELECT ID FROM information_schema.PROCESSLIST WHERE USER IN ({', '.join(['%s'] * len(users))}) "
            f"AND ID <> CONNECTION_ID(){busy}", tuple(users))


def _busy_only(kill_idle: bool | str) -> bool | str:
    return BUT_ROUTED if kill_idle == BUT_ROUTED else not kill_idle


def _lock_sql(found, locked: bool) -> str:
    """One ALTER USER for every account (MariaDB takes a list)."""
    return ("ALTER USER " + ", ".join(f"{_literal(u)}@{_literal(h)}" for u, h in found)
            + f" ACCOUNT {'LOCK' if locked else 'UNLOCK'}")


def accounts(conn, users) -> list[tuple[str, str]]:
    """Every (user, host) account with one of these user names."""
    users = tuple(users)
    if not users:
        return []
    return [(r[0], r[1]) for r in _run(conn, *_accounts_sql(users))]


def lock_accounts(conn, users, locked: bool = True) -> list[tuple[str, str]]:
    """ACCOUNT LOCK (or UNLOCK) every account of these users; this stops new logins only."""
    found = accounts(conn, users)
    if found:
        with _unlogged(conn):
            _run(conn, _lock_sql(found, locked))
    return found


def sessions(conn, users, busy_only: bool = False) -> list[int]:
    """Connection ids of these users' sessions; `busy_only`: those in a statement or an open transaction
    (an idle one holds no lock a table lock waits for)."""
    users = tuple(users)
    if not users:
        return []
    return [int(r[0]) for r in _run(conn, *_sessions_sql(users, busy_only))]


def _kill(conn, ids, batch: bool = True) -> None:
    """KILL CONNECTION each (in one round trip where the connection allows); one that ended meanwhile is no error."""
    if batch:
        try:
            _batch(conn, [_kill_stmt(cid) for cid in ids])
            return
        except pymysql.err.MySQLError:  # one had ended, and a batch stops at its first error: one by one
            pass
    for cid in ids:
        try:
            _run(conn, *_kill_stmt(cid))
        except pymysql.err.MySQLError:
            pass


def kill_sessions(conn, users, wait_s: float, busy_only: bool = False) -> list[int]:
    """KILL every session of these users (`busy_only`: those in a statement or a transaction) and wait
    until the server has ended them: KILL only marks a session, and a COMMIT it is in may still finish.
    Returns the ids killed."""
    killed = sessions(conn, users, busy_only)
    if killed:
        _kill(conn, killed)
        _wait_ended(conn, users, killed, wait_s)
    return killed


def _wait_ended(conn, users, killed, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        left = set(sessions(conn, users)) & set(killed)
        if not left:
            return
        if time.monotonic() > deadline:
            raise LockNotGranted("could not fence the database", f"sessions {sorted(left)} did not end within "
                                 f"{wait_s * 1000:.0f}ms of KILL", "the source keeps serving", phase="handover")
        time.sleep(0.002)


@dataclass
class Fence:
    """A database fenced on its source: the connection holding its tables' read lock and what was
    read under it. `position` covers every commit of the database's tenant."""
    conn: object
    db: str
    tables: tuple[str, ...]
    position: str  # the source's gtid_binlog_pos, read under the lock
    binlog_file: str
    binlog_pos: int
    locked_accounts: list[tuple[str, str]] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    granted_ms: float = 0.0  # from the first statement to the lock held


@dataclass
class Ready:
    """A fence's connection opened, and the tenant's accounts read, before the freeze's clock starts."""
    conn: object
    accounts: list[tuple[str, str]]


def ready(connect: Callable[[], object], users) -> Ready:
    """Open the fence's connection (kept out of the binlog) and read the accounts it will lock: what the
    fence needs that is no part of the freeze. `connect` should give a connection that takes several
    statements at once (`Server.admin_connect(multi_statements=True)`)."""
    conn = connect()
    try:
        _local(conn)
        return Ready(conn, accounts(conn, users))
    except BaseException:
        close_quietly(conn)
        raise


def fence(connect: Callable[[], object], db: str, users, lock_timeout_s: float,
          kill_wait_s: float = 1.0, kill_idle: bool | str = True, prepared: Ready | None = None) -> Fence:
    """Fence one database: its users' accounts locked, their sessions ended, then
    `FLUSH TABLES <its tables> WITH READ LOCK`, the source's position read under that lock.

    The table lock waits only for transactions that have touched these tables (the killed sessions'
    rollbacks, an administrator's transaction), never for the neighbours' commits; while it waits
    new writers of these tables queue behind it. `kill_idle=False` ends only the sessions in a statement
    or a transaction, `BUT_ROUTED` those and every idle one but the router's (a router moves its idle
    clients to the new owner after the flip; the caller ends the rest then, before the lock goes). No idle
    session but the router's may outlive the fence: the table lock is this connection's, and an agent
    killed past the flip would release it with an idle client still able to write to the old copy. It is
    given up after `lock_timeout_s` (its
    lock_wait_timeout takes whole seconds only, so a timer interrupts it sooner); on any failure the
    accounts are unlocked again and nothing is held. The caller persists the fence while the lock is
    held, then `release`s it: the locked accounts keep the database fenced after that.

    Four round trips on a connection that takes several statements (`prepared` by `ready` before the
    clock starts): the accounts locked with the busy sessions read; those sessions killed with the
    table list read; the table lock, which waits for the killed sessions' rollbacks and commits as it
    waits for any transaction on these tables; and, under it, the accounts and sessions read again
    with the position."""
    t0 = time.monotonic()
    users = tuple(users)
    prepared = prepared or ready(connect, users)
    conn, locked = prepared.conn, list(prepared.accounts)
    try:
        first = [("SET SESSION lock_wait_timeout = %s", (max(1, math.ceil(lock_timeout_s)),))]
        if locked:
            first.append((_lock_sql(locked, True), None))
        spared = None
        if users:
            first.append(_sessions_sql(users, _busy_only(kill_idle)))
            if kill_idle == BUT_ROUTED:
                first.append((_ROUTER_SESSIONS_SQL, None))
        got = _batch(conn, first)
        if users and kill_idle == BUT_ROUTED:
            spared = [int(r[0]) for r in got[-1]]
            got = got[:-1]
        killed = [int(r[0]) for r in got[-1]] if users else []
        # the KILLs, the table list, and the accounts again (one made since `ready` read them is locked too:
        # under the table lock this connection can read no other table)
        then = [_kill_stmt(cid) for cid in killed] + [(_TABLES_SQL, (db,))] + ([_accounts_sql(users)] if users else [])
        try:
            got = _batch(conn, then)[len(killed):]
        except pymysql.err.MySQLError:  # a session ended before its KILL: the batch stopped there
            _kill(conn, killed, batch=False)
            got = _batch(conn, then[len(killed):])
        tables = tuple(r[0] for r in got[0])
        new = [(r[0], r[1]) for r in (got[1] if users else ()) if (r[0], r[1]) not in set(locked)]
        if new:  # (`ready` kept this connection out of the binlog)
            _run(conn, _lock_sql(new, True))
            locked += new
        if tables:
            spent = time.monotonic() - t0
            if spent >= lock_timeout_s:  # a starved server: nothing left of the budget to wait for the lock in
                raise LockNotGranted(f"could not lock the tables of {db}",
                                     f"locking its accounts and ending their sessions took {spent * 1000:.0f}ms of "
                                     f"the {lock_timeout_s * 1000:.0f}ms the lock had", "the source keeps serving",
                                     phase="handover")
            _lock_tables(connect, conn, db, tables, lock_timeout_s - spent)
        # Under the lock: a login that passed its check just before the ACCOUNT LOCK may have become a
        # session since the KILLs; it must not be left to write once the lock is released.
        under = [("SELECT @@GLOBAL.gtid_binlog_pos", None), ("SHOW MASTER STATUS", None)]
        if users:
            under.append(_sessions_sql(users, _busy_only(kill_idle), spared))
        got = _batch(conn, under)
        pos, status = got[0], got[1]
        # (one killed before the lock that the server has not yet removed can run nothing more)
        late_ids = [int(r[0]) for r in got[2] if int(r[0]) not in killed] if users else []
        if late_ids:
            _kill(conn, late_ids)
            _wait_ended(conn, users, late_ids, kill_wait_s)
            killed += [i for i in late_ids if i not in killed]
        position, row = pos[0][0] or "", status[0]
    except BaseException:
        try:
            _run(conn, "UNLOCK TABLES")
            if locked:
                lock_accounts(conn, [u for u, _ in locked], locked=False)
        except Exception:
            pass
        close_quietly(conn)
        raise
    return Fence(conn, db, tables, position, row[0], int(row[1]), locked, killed,
                 round((time.monotonic() - t0) * 1000, 1))


def _kill_stmt(cid: int) -> tuple[str, tuple]:
    return ("KILL CONNECTION %s", (cid,))


def _lock_tables(connect, conn, db: str, tables, timeout_s: float) -> None:
    cid = conn.thread_id() if hasattr(conn, "thread_id") else _run(conn, "SELECT CONNECTION_ID()")[0][0]
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        try:
            other = connect()
        except Exception:  # noqa: BLE001 - lock_wait_timeout still ends it
            return
        try:
            _run(other, "KILL QUERY %s", (cid,))
        except pymysql.err.MySQLError:
            pass
        finally:
            close_quietly(other)

    timer = threading.Timer(max(0.0, timeout_s), interrupt)
    timer.daemon = True
    timer.start()
    listed = ", ".join(f"{quote(db)}.{quote(t)}" for t in tables)
    try:
        _run(conn, f"FLUSH TABLES {listed} WITH READ LOCK")
    except pymysql.err.MySQLError as exc:
        why = (f"not granted within {timeout_s * 1000:.0f}ms" if fired.is_set() or exc.args[0] in (1205, 1317)
               else str(exc.args[-1]))
        raise LockNotGranted(f"could not lock the tables of {db}", why, "the source keeps serving",
                             phase="handover") from None
    finally:
        timer.cancel()
    if fired.is_set():  # granted just as the timer fired: the KILL QUERY may have landed after it
        _run(conn, "UNLOCK TABLES")
        raise LockNotGranted(f"could not lock the tables of {db}", f"not granted within {timeout_s * 1000:.0f}ms",
                             "the source keeps serving", phase="handover")


def release(f: Fence) -> None:
    """Release the tables' read lock (the accounts stay locked). Never raises."""
    if f is None:
        return
    try:
        _run(f.conn, "UNLOCK TABLES")
    except Exception:
        pass
    close_quietly(f.conn)


def unfence(conn, f: Fence) -> None:
    """Undo a fence the move gave up before the flip: the accounts unlocked, the lock released."""
    try:
        lock_accounts(conn, [u for u, _ in f.locked_accounts], locked=False)
    finally:
        release(f)


# --- retirement --------------------------------------------------------------------------------
def trash_name(db: str) -> str:
    return (TRASH_PREFIX + db)[:64]


@dataclass(frozen=True)
class Retired:
    db: str
    tables: int
    dropped: tuple[str, ...]  # views and triggers dropped before the rename


def retire(conn, db: str, datadir: Path | None = None) -> Retired:
    """Remove a database from its source, crash-atomically: its views and triggers dropped, then every
    base table moved into the trash database by one `RENAME TABLE` (atomic: all or none), the
    database dropped, the trash dropped. Drop the target's replication connection first: a wild
    filter for the database would replicate the rename and the drops. Done again after a crash it
    finishes what was left (`finish_retirements` finds the trash of every retirement cut short).

    `datadir` (the server's): a server killed while it held a fence's table lock leaves that lock's
    export files (`<table>.cfg`; the server deletes them at UNLOCK TABLES) in the database's directory,
    and DROP DATABASE refuses a directory holding files it does not know (1010, errno 39). Once every
    table has left by the rename they belong to no table, and are removed before the drop."""
    with _unlogged(conn, no_fk_checks=True):
        return _retire(conn, db, datadir)


def _retire(conn, db: str, datadir: Path | None = None) -> Retired:
    trash = trash_name(db)
    exists = _run(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (db,))
    if not exists:
        _run(conn, f"DROP DATABASE IF EXISTS {quote(trash)}")
        return Retired(db, 0, ())
    c = contents(conn, db)
    dropped = []
    for v in c.views:
        _run(conn, f"DROP VIEW IF EXISTS {quote(db)}.{quote(v)}")
        dropped.append(f"view {v}")
    for t in c.triggers:
        _run(conn, f"DROP TRIGGER IF EXISTS {quote(db)}.{quote(t)}")
        dropped.append(f"trigger {t}")
    _run(conn, f"CREATE DATABASE IF NOT EXISTS {quote(trash)}")
    if c.tables:
        _run(conn, "RENAME TABLE " + ", ".join(f"{quote(db)}.{quote(t)} TO {quote(trash)}.{quote(t)}"
                                              for t in c.tables))
    if datadir is not None:
        for orphan in (Path(datadir) / dir_name(db)).glob("*.cfg"):
            orphan.unlink(missing_ok=True)
    _run(conn, f"DROP DATABASE {quote(db)}")  # empty now: its routines and events go with it
    _run(conn, f"DROP DATABASE {quote(trash)}")
    return Retired(db, len(c.tables), tuple(dropped))


def finish_retirements(conn) -> list[str]:
    """Drop the trash of retirements a crash cut short (after their rename); returns what it dropped.
    A retirement cut short before its last drops is finished by `retire` of that database again."""
    like = TRASH_PREFIX.replace("_", "\\_") + "%"
    names = [r[0] for r in _run(conn, "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE %s",
                                (like,))]
    with _unlogged(conn):
        for n in names:
            _run(conn, f"DROP DATABASE IF EXISTS {quote(n)}")
    return names


def refuse(what: str, why: str, hint: str = "the source keeps serving") -> MigrationFailed:
    """A move refused before anything started."""
    return MigrationFailed(what, why, hint, phase="preflight")
