"""The delta applier drives the engine only through slacker.mariadb.replication: what it asks the server
for, in order, and what a refused statement becomes (a recording connection stands in for mariadbd)."""

from __future__ import annotations

import pymysql
import pytest

from slacker.delta.applier import SourceLink
from slacker.delta.engine import EngineApplier
from slacker.errors import MigrationFailed


class Recording:
    """A connection that records each statement as the server would receive it, and refuses one on demand."""

    def __init__(self, refuse: str = "") -> None:
        self.statements: list[str] = []
        self.closed = 0
        self.refuse = refuse

    def cursor(self, kind=None):
        return _Cursor(self, kind)

    def close(self) -> None:
        self.closed += 1


class _Cursor:
    def __init__(self, conn: Recording, kind) -> None:
        self.conn, self.dict = conn, kind is not None
        self.last = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def execute(self, stmt, args=None) -> None:
        self.last = stmt % tuple(pymysql.converters.escape_item(a, "utf8mb4") for a in args) if args else stmt
        self.conn.statements.append(self.last)
        if self.conn.refuse and self.last.startswith(self.conn.refuse):
            raise pymysql.err.OperationalError(1198, "This operation cannot be performed as you have a running slave")

    def fetchall(self):
        if self.last.startswith("SELECT MASTER_GTID_WAIT"):
            return ((0,),)
        if self.last.startswith("SELECT @@GLOBAL.gtid_slave_pos"):
            return (("0-1-7",),)
        if self.last.startswith("SHOW SLAVE"):
            return ({"Slave_SQL_Running": "Yes", "Gtid_IO_Pos": "0-1-9"},)
        return ()


def _applier(conn: Recording, **kw) -> EngineApplier:
    a = EngineApplier(lambda: conn, kind="concurrent", mpl=4, catchup_mode=False, **kw)
    a._stop.set()  # no sampler thread: only the statements of the calls below
    return a


def test_a_migration_target_is_driven_by_these_statements_in_this_order():
    conn = Recording()
    a = _applier(conn)
    a.start(SourceLink("10.0.0.1", 3306, "slacker_repl", "pw'1", "/ca.pem", "/c.pem", "/k.pem"), "0-1-5")
    a.set_mpl(8)
    assert a.wait_for("0-1-7", 5) >= 0
    a.stop_at("0-1-7")
    a.resume()
    a.detach()
    assert conn.statements == [
        "STOP ALL SLAVES",
        "SET GLOBAL slave_parallel_mode = 'optimistic'",
        "SET GLOBAL slave_parallel_threads = 4",
        "STOP ALL SLAVES",
        "RESET MASTER",
        # the binlog state first: set after the slave position it waited ~0.8 s for InnoDB's flush
        "SET GLOBAL gtid_binlog_state = '0-1-5'",
        "SET GLOBAL gtid_slave_pos = '0-1-5'",
        "CHANGE MASTER 'slacker_migration' TO MASTER_HOST='10.0.0.1', MASTER_PORT=3306, "
        "MASTER_USER='slacker_repl', MASTER_PASSWORD='pw\\'1', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, "
        "MASTER_HEARTBEAT_PERIOD=1, MASTER_SSL=1, MASTER_SSL_CA='/ca.pem', MASTER_SSL_CERT='/c.pem', "
        "MASTER_SSL_KEY='/k.pem', MASTER_SSL_VERIFY_SERVER_CERT=1",
        "START SLAVE 'slacker_migration'",
        "STOP SLAVE 'slacker_migration' SQL_THREAD",
        "SET GLOBAL slave_parallel_threads = 8",
        "START SLAVE 'slacker_migration' SQL_THREAD",
        "SELECT MASTER_GTID_WAIT('0-1-7', 1.0e0)",
        "STOP SLAVE 'slacker_migration'",
        "SELECT @@GLOBAL.gtid_slave_pos",
        "START SLAVE 'slacker_migration'",
        "SET GLOBAL slave_parallel_threads = 0",
        "RESET SLAVE 'slacker_migration' ALL",
    ]


@pytest.mark.parametrize("refused, verb", [("CHANGE MASTER", "CHANGE"), ("SET GLOBAL gtid_slave_pos", "SET"),
                                           ("START SLAVE", "START")])
def test_a_refused_statement_fails_the_delta_naming_its_verb_and_drops_the_connection(refused, verb):
    conn = Recording(refuse=refused)
    a = _applier(conn)
    with pytest.raises(MigrationFailed) as info:
        a.start(SourceLink("10.0.0.1", 3306, "slacker_repl", "pw"), "0-1-5")
    assert info.value.one_line() == (f"applying the delta failed: {verb}: This operation cannot be performed as "
                                     "you have a running slave (the source is untouched; retry)")
    assert conn.statements[-1].startswith(refused) and conn.closed == 1


def test_a_promoted_targets_replication_files_are_dropped_and_nothing_else(tmp_path):
    from slacker.mariadb import replication

    keep = ["ibdata1", "binlog.000001", "binlog.index", "mysql", "ib_logfile0"]
    drop = ["master-slacker_migration.info", "relay-log-slacker_migration.info", "multi-master.info",
            "mariadbd-relay-bin-slacker_migration.000002", "mariadbd-relay-bin-slacker_migration.index"]
    for name in keep + drop:
        (tmp_path / name).write_text("x")
    assert sorted(replication.drop_replication_files(tmp_path)) == sorted(drop)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
