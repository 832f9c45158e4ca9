"""Which database the project's own loads write into (slacker/loads.py), and their statements on it: the one
given, else the session's (a shared tenant's own), else the load's own schema, which only then is created;
every name checked and quoted."""

from __future__ import annotations

import pytest

from slacker import ackwriter, loads, oltp
from slacker.errors import InvalidInput
from slacker.loads import LoadDatabase, choose


def test_given_else_the_sessions_else_the_loads_own():
    assert choose(None, None, "oltp") == LoadDatabase("oltp", create=True)  # a whole server
    assert choose(None, "t42", "oltp") == LoadDatabase("t42", create=False)  # a shared tenant: it is there
    assert choose("bank", None, "oltp") == LoadDatabase("bank", create=True)
    assert choose("t42", "t42", "oltp") == LoadDatabase("t42", create=False)
    assert choose("bank", "shop", "oltp") == LoadDatabase("bank", create=True)


@pytest.mark.parametrize("bad", ["x;y", "a`b", "t-42", "x" * 65, "db name", "é"])
def test_a_name_that_is_not_plain_is_refused_in_one_line(bad):
    with pytest.raises(InvalidInput, match="invalid database name"):
        choose(bad, None, "oltp")
    with pytest.raises(InvalidInput, match=r"\(the session's\)"):
        choose(None, bad, "oltp")


def test_names_are_quoted_in_sql():
    assert loads.quote("select") == "`select`"  # a shared tenant's id may be a reserved word
    assert LoadDatabase("t42", False).qualified("log") == "`t42`.log"
    with pytest.raises(InvalidInput):
        loads.quote("a`b")


def test_the_schemas_create_a_database_only_when_the_session_is_not_in_it():
    own = oltp.schema(LoadDatabase("t42", create=False))
    assert not any("CREATE DATABASE" in s for s in own) and all("`t42`." in s for s in own)
    assert oltp.SCHEMA[0] == "CREATE DATABASE IF NOT EXISTS `oltp`" and "`oltp`.accounts" in oltp.SCHEMA[1]
    acks = ackwriter.schema(LoadDatabase("t43", create=False))
    assert [s.split(" (")[0] for s in acks] == ["CREATE TABLE IF NOT EXISTS `t43`.log",
                                                "CREATE TABLE IF NOT EXISTS `t43`.probe"]
    assert ackwriter.SCHEMA[0] == "CREATE DATABASE IF NOT EXISTS `acks`"


def test_a_transfers_statements_name_its_database():
    sql = oltp.TransferSql.on(LoadDatabase("t42", create=False))
    for stmt in (sql.lock, sql.debit, sql.credit):
        assert "`t42`.accounts" in stmt and "oltp" not in stmt
    assert sql.record.startswith("INSERT INTO `t42`.transfers ")


class _Cursor:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, args=None):
        self.conn.executed.append(sql)

    def fetchone(self):
        return (self.conn.database,)


class _Conn:
    def __init__(self, database):
        self.database, self.executed = database, []

    def cursor(self):
        return _Cursor(self)


def test_a_connection_is_asked_for_its_sessions_database():
    assert loads.for_connection(_Conn("t42"), None, "acks") == LoadDatabase("t42", create=False)
    assert loads.for_connection(_Conn(None), None, "acks") == LoadDatabase("acks", create=True)
    assert oltp.database_for(_Conn(None)) == LoadDatabase("oltp", create=True)
    with pytest.raises(InvalidInput, match="invalid database name"):
        oltp.TransferLoad(lambda: None, database="x;y")
    with pytest.raises(InvalidInput, match="invalid database name"):
        ackwriter.AckedWriter(None, database="x;y")
