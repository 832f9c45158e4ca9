"""The freeze under OLTP load: a global read lock that is granted while transactions wait on row locks.

`FLUSH TABLES WITH READ LOCK` (like `SET GLOBAL read_only = 1`) waits for every
statement in progress, and while it waits it already holds every new write
back. Under row-lock contention some statement nearly always waits on a row
held by a transaction whose next statement now waits behind the lock: a cycle
that only a timeout ends. So while the lock is requested, a monitor interrupts
(`KILL QUERY`) the application statements that keep it waiting: those running
longer than `INTERRUPT_AFTER_S` that are not themselves waiting for the lock.
Their transactions fail with an error (a write in flight at the freeze cannot
commit on the fenced source anyway) and the lock is granted in milliseconds.
Statements and transactions older than the freeze budget are not interrupted:
`blockers()` finds them before the freeze, so the handover waits for them
outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pymysql

from ..errors import LockNotGranted
from .ops import close_quietly
from .server import SERVICE_USERS

log = logging.getLogger("slacker.mariadb.freeze")

# An OLTP statement still running this long while the lock waits is waiting on a row lock (or
# working far longer than one ordinary statement): it is what holds the lock back.
INTERRUPT_AFTER_S = 0.005
POLL_S = 0.002
# Server threads that are not application sessions (replication, the event scheduler, ours).
_SERVER_USERS = ("system user", "event_scheduler", "unauthenticated user")
# States of a session that waits for the freeze itself: it holds nothing the freeze needs.
_WAITING_ON_FREEZE = ("backup lock", "global read lock", "commit lock")


@dataclass(frozen=True)
class Session:
    """One application session as the server lists it."""
    id: int
    user: str
    command: str
    running_s: float  # its current statement's age, or its open transaction's for a transaction
    state: str
    verb: str  # the statement's first words only: a statement's text may hold data or secrets

    def describe(self) -> str:
        """A statement: what it runs and for how long."""
        state = f" ({self.state})" if self.state else ""
        return f"connection {self.id} (user {self.user}): {self.verb or 'a'} statement running {self.running_s:.1f}s{state}"

    def describe_transaction(self) -> str:
        """A transaction: how long it has been open, and what it runs now, if anything."""
        now = f", now running {self.verb}" if self.verb else ""
        return f"connection {self.id} (user {self.user}): transaction open {self.running_s:.1f}s{now}"


@dataclass
class Frozen:
    """The connection that holds the freeze, and what it cost the application."""
    conn: object
    granted_ms: float
    interrupted: list[int] = field(default_factory=list)  # connection ids whose statement was interrupted


def _verb(info: str | None) -> str:
    words = (info or "").split()
    if not words:
        return ""
    first = words[0].upper()
    if first in ("ALTER", "CREATE", "DROP", "TRUNCATE", "RENAME", "OPTIMIZE", "REPAIR") and len(words) > 1:
        return f"{first} {words[1].upper()}"
    return first


def _application(user: str | None, own_users: tuple[str, ...]) -> bool:
    return bool(user) and user not in own_users and user not in _SERVER_USERS


def running_statements(conn, own_users: tuple[str, ...] = SERVICE_USERS) -> list[Session]:
    """Application statements in progress (not idle sessions), from the server's process list."""
    with conn.cursor() as cur:
        cur.execute("SELECT ID, USER, COMMAND, TIME_MS, STATE, LEFT(INFO, 40) FROM information_schema.PROCESSLIST "
                    "WHERE COMMAND IN ('Query', 'Execute') AND ID <> CONNECTION_ID()")
        rows = cur.fetchall()
    return [Session(int(r[0]), r[1], r[2], float(r[3] or 0) / 1000, r[4] or "", _verb(r[5]))
            for r in rows if _application(r[1], own_users)]


def long_write_transactions(conn, older_than_s: float, own_users: tuple[str, ...] = SERVICE_USERS) -> list[Session]:
    """Application transactions that have written and been open longer than `older_than_s`."""
    with conn.cursor() as cur:
        cur.execute("SELECT t.trx_mysql_thread_id, p.USER, p.COMMAND, "
                    "TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1e6, p.STATE, LEFT(p.INFO, 40) "
                    "FROM information_schema.INNODB_TRX t "
                    "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                    "WHERE (t.trx_rows_modified > 0 OR t.trx_lock_structs > 0) "
                    "AND t.trx_started < NOW(6) - INTERVAL %s MICROSECOND", (int(older_than_s * 1e6),))
        rows = cur.fetchall()
    return [Session(int(r[0]), r[1], r[2], float(r[3] or 0), r[4] or "", _verb(r[5]))
            for r in rows if _application(r[1], own_users)]


def blockers(conn, older_than_s: float, own_users: tuple[str, ...] = SERVICE_USERS) -> list[str]:
    """What a freeze would have to wait for or break: statements (DDL among them) running, and write
    transactions open, for longer than `older_than_s`. One line each, oldest first."""
    statements = [s for s in running_statements(conn, own_users) if s.running_s > older_than_s]
    seen = {s.id for s in statements}
    found = [(s.running_s, s.describe()) for s in statements]
    found += [(s.running_s, s.describe_transaction())
              for s in long_write_transactions(conn, older_than_s, own_users) if s.id not in seen]
    return [line for _, line in sorted(found, key=lambda x: -x[0])]


def freeze(connect: Callable[[], object], lock_timeout_s: float, own_users: tuple[str, ...] = SERVICE_USERS,
           interrupt_after_s: float = INTERRUPT_AFTER_S) -> Frozen:
    """FLUSH TABLES WITH READ LOCK on a new connection, granted within `lock_timeout_s` or given up.

    A second connection watches the process list while the lock waits: application statements that hold
    it back are interrupted (see the module's docstring); when the time is up the request itself is
    interrupted and LockNotGranted names what was still running. On failure nothing is left locked.
    """
    conn = connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            cid = cur.fetchone()[0]
            cur.execute("SET SESSION lock_wait_timeout = %s", (max(1, int(lock_timeout_s + 0.999)),))
    except BaseException:
        close_quietly(conn)
        raise
    done = threading.Event()
    state: dict = {"interrupted": [], "fired": False, "holding": []}
    t0 = time.monotonic()
    monitor = threading.Thread(target=_monitor, name="freeze-monitor", daemon=True,
                               args=(connect, cid, t0, lock_timeout_s, interrupt_after_s, own_users, done, state))
    monitor.start()
    try:
        with conn.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
    except pymysql.err.MySQLError as exc:
        done.set()
        monitor.join(1.0)
        close_quietly(conn)
        if state["fired"] or exc.args[0] in (1205, 1317):
            held = "; ".join(state["holding"][:3]) or "statements in progress"
            why = f"not granted within {lock_timeout_s * 1000:.0f}ms, held back by {held}"
        else:
            why = str(exc.args[-1])
        raise LockNotGranted("could not freeze the source", why,
                             "the source keeps serving", phase="handover") from None
    finally:
        done.set()
    granted_ms = round((time.monotonic() - t0) * 1000, 1)
    monitor.join(1.0)
    return Frozen(conn, granted_ms, list(state["interrupted"]))


def _monitor(connect, cid: int, t0: float, lock_timeout_s: float, interrupt_after_s: float,
             own_users: tuple[str, ...], done: threading.Event, state: dict) -> None:
    try:
        watch = connect()
    except Exception as exc:  # noqa: BLE001 - the lock may still be granted on its own
        log.warning("freeze monitor could not connect: %s", exc)
        watch = None
    try:
        while not done.wait(POLL_S):
            if watch is None:
                continue
            holding = [s for s in running_statements(watch, own_users)
                       if s.id != cid and not any(w in s.state.lower() for w in _WAITING_ON_FREEZE)]
            if time.monotonic() - t0 >= lock_timeout_s:
                state["fired"] = True
                state["holding"] = [s.describe() for s in holding]
                _kill_query(watch, cid)
                return
            for s in holding:
                # A COMMIT in progress ends by itself in a moment, and interrupting one could leave
                # its client unsure whether it committed.
                if s.running_s >= interrupt_after_s and s.verb != "COMMIT" and s.id not in state["interrupted"]:
                    if _kill_query(watch, s.id):
                        state["interrupted"].append(s.id)
    except Exception as exc:  # noqa: BLE001 - a broken monitor must not leave the request waiting forever
        log.warning("freeze monitor failed: %s", exc)
        if not done.is_set():
            _kill_with_new_connection(connect, cid, lock_timeout_s - (time.monotonic() - t0), done, state)
    finally:
        close_quietly(watch)


def _kill_with_new_connection(connect, cid: int, wait_s: float, done: threading.Event, state: dict) -> None:
    if done.wait(max(0.0, wait_s)):
        return
    state["fired"] = True
    try:
        conn = connect()
    except Exception:  # noqa: BLE001 - lock_wait_timeout still ends the request
        return
    try:
        _kill_query(conn, cid)
    finally:
        close_quietly(conn)


def _kill_query(conn, cid: int) -> bool:
    try:
        with conn.cursor() as cur:
            cur.execute("KILL QUERY %s", (cid,))
        return True
    except pymysql.err.MySQLError:  # it ended meanwhile (unknown thread id)
        return False


def unfreeze(conn) -> None:
    """Release the freeze; closing the session releases it in any case. Never raises."""
    if conn is None:
        return
    try:
        with conn.cursor() as cur:
            cur.execute("UNLOCK TABLES")
    except Exception:
        pass
    close_quietly(conn)

