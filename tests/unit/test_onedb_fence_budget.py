"""The fence of one database on a starved server, its SQL a fake (pure logic):

- when locking its accounts and ending their sessions use up the lock's whole budget, the fence gives up in
  one line that says so (not "not granted within -491ms"), asks for no table lock, and leaves the accounts
  unlocked: the source keeps serving;
- on a connection that takes several statements it sends four round trips (a node at its CPU quota can make
  each wait out a quota period): accounts locked with the busy sessions read, the KILLs with the table list,
  the table lock, and under it the position with the accounts and sessions read again;
- a KILL that finds its session gone does not stop the others.
"""

from __future__ import annotations

import time

import pymysql
import pytest
from pymysql.constants import CLIENT

from slacker.errors import LockNotGranted
from slacker.mariadb import onedb


class FakeCursor:
    def __init__(self, conn) -> None:
        self.conn, self.sets = conn, []

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def mogrify(self, sql, args):
        return sql % tuple(repr(a) for a in args)

    def execute(self, sql, args=None):
        self.conn.trips.append(sql)
        time.sleep(self.conn.trip_s)
        self.sets = []
        for stmt in sql.split(";\n") if self.conn.client_flag else [sql]:
            if args is not None:
                stmt = self.mogrify(stmt, args)
            self.sets.append(self.conn.answer(stmt))  # raises where the server would stop the batch

    def fetchall(self):
        return self.sets[0] if self.sets else ()

    def fetchone(self):
        rows = self.fetchall()
        return rows[0] if rows else None

    def nextset(self):
        self.sets = self.sets[1:]
        return bool(self.sets) or None


class FakeServer:
    """Accounts t42_app@% and @localhost, busy sessions 7 and 8 (8 ends before its KILL), table items."""

    def __init__(self, multi: bool, trip_s: float = 0.0) -> None:
        self.client_flag = CLIENT.MULTI_STATEMENTS if multi else 0
        self.trip_s = trip_s
        self.trips: list[str] = []
        self.statements: list[str] = []
        self.killed: list[int] = []
        self.locked = False

    def cursor(self):
        return FakeCursor(self)

    def thread_id(self):
        return 99

    def close(self):
        pass

    def answer(self, stmt: str):
        self.statements.append(stmt)
        if "mysql.global_priv" in stmt:
            if self.locked:
                raise pymysql.err.OperationalError(1100, "Table 'global_priv' was not locked with LOCK TABLES")
            return (("t42_app", "%"), ("t42_app", "localhost"))
        if "PROCESSLIST" in stmt:
            return tuple((i,) for i in (7, 8) if i not in self.killed and not self.locked)
        if stmt.startswith("KILL CONNECTION"):
            cid = int(stmt.split()[-1])
            if cid == 8:
                raise pymysql.err.InternalError(1094, "Unknown thread id: 8")
            self.killed.append(cid)
            return ()
        if "information_schema.tables" in stmt:
            return (("items",),)
        if stmt.startswith("FLUSH TABLES"):
            self.locked = True
            return ()
        if "gtid_binlog_pos" in stmt:
            return (("0-1-42",),)
        if stmt.startswith("SHOW MASTER STATUS"):
            return (("bin.000001", 4242),)
        if stmt.startswith("SELECT @@SESSION"):
            return ((1, 1),)
        return ()


def test_four_round_trips_on_a_connection_that_takes_several_statements():
    srv = FakeServer(multi=True)
    prepared = onedb.ready(lambda: srv, ["t42_app"])
    srv.trips.clear()
    f = onedb.fence(lambda: srv, "t42", ["t42_app"], lock_timeout_s=2.0, prepared=prepared)
    # the batch of KILLs stopped at 8 (gone): 7 was killed, then each one by one
    assert 7 in srv.killed and f.position == "0-1-42" and (f.binlog_file, f.binlog_pos) == ("bin.000001", 4242)
    assert f.locked_accounts == [("t42_app", "%"), ("t42_app", "localhost")]
    assert any(s.startswith("ALTER USER 't42_app'@'%', 't42_app'@'localhost' ACCOUNT LOCK") for s in srv.statements)
    assert any(s.startswith("FLUSH TABLES `t42`.`items` WITH READ LOCK") for s in srv.statements)
    # lock + sessions; KILLs + tables (stopped at 8); 7 and 8 one by one; tables; the lock; under it
    assert len(srv.trips) == 7, srv.trips
    srv2 = FakeServer(multi=True)
    srv2.answer_orig = srv2.answer
    srv2.answer = lambda stmt: (() if stmt == "KILL CONNECTION 8" else srv2.answer_orig(stmt))
    prepared = onedb.ready(lambda: srv2, ["t42_app"])
    srv2.trips.clear()
    onedb.fence(lambda: srv2, "t42", ["t42_app"], lock_timeout_s=2.0, prepared=prepared)
    assert len(srv2.trips) == 4, srv2.trips  # no session gone before its KILL: four round trips


def test_a_budget_spent_before_the_lock_gives_up_in_one_line_and_unlocks_the_accounts():
    srv = FakeServer(multi=False, trip_s=0.02)  # a server that answers slowly, one statement per trip
    with pytest.raises(LockNotGranted) as err:
        onedb.fence(lambda: srv, "t42", ["t42_app"], lock_timeout_s=0.05)
    text = str(err.value)
    assert "locking its accounts and ending their sessions took" in text and "of the 50ms the lock had" in text
    assert "-" not in text.split("took", 1)[1].split("ms", 1)[0]  # no negative budget
    assert not any("FLUSH TABLES" in s for s in srv.statements)  # no lock was asked for
    assert "ACCOUNT UNLOCK" in srv.statements[-2]  # the tenant's users may log in again (then the log_bin reset)
