"""The live move of a shared tenant (docs/shared.md, "Moving a shared tenant"): one database of node-1's shared
server into node-2's, with writers through the router on the mover and on a neighbour that stays: no
acknowledged write lost, the neighbour never fails a write, the mover writable on the target only, and nothing
of it left on the source (database, account, record) or the target (replication connection). An abort while
copying leaves the source serving and nothing on the target. One cluster for the module, in order."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pymysql
import pytest
from click.testing import CliRunner

from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.cli import main
from slacker.client import Endpoint, TenantClient, resolve

from .conftest import routed_cluster

pytestmark = pytest.mark.xdist_group("shared_moves")  # one cluster, in order, on one worker

ROWS = 3000
STATS_INTERVAL_S = 3.0  # the agents' load history, short: the last tests read the tenants' loads


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def sm():
    """node-1: shared tenants t42 (the mover, with data) and t43 (a neighbour); node-2: t50 (its shared server)."""
    with routed_cluster(stats_interval_s=STATS_INTERVAL_S) as (cluster, run_dir, admin, listen):
        agents, directory = cluster_clients(cluster)
        made = {}
        for tid, node in (("t42", "node-1"), ("t43", "node-1"), ("t50", "node-2")):
            r = cli("tenant", "create", tid, "--shared", "--on", node)
            assert r.exit_code == 0, r.output
            made[tid] = resolve(tid, cluster)
        host, port = listen.rsplit(":", 1)
        sm = SimpleNamespace(cluster=cluster, run_dir=run_dir, host=host, port=int(port), agents=agents,
                             directory=directory, made=made)
        conn = routed(sm, "t42")
        try:
            q(conn, "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(200))")
            q(conn, "CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
            q(conn, "CREATE VIEW item_count AS SELECT COUNT(*) AS n FROM items")
            for lo in range(0, ROWS, 500):
                q(conn, "INSERT INTO items VALUES " + ", ".join(f"({i}, REPEAT('v', 150))" for i in range(lo, lo + 500)))
        finally:
            conn.close()
        yield sm


def routed(sm, tenant: str, timeout_s: float = 10.0):
    password = sm.made[tenant].password
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return pymysql.connect(host=sm.host, port=sm.port, user=f"app@{tenant}", password=password,
                                   autocommit=True, connect_timeout=5)
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1045 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def routed_client(sm, tenant: str) -> TenantClient:
    ep = Endpoint(tenant, sm.host, sm.port, f"app@{tenant}", sm.made[tenant].password)
    return TenantClient(tenant, lambda: ep, reconnect_timeout_s=10)


def q(conn, sql: str, *args):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def admin(sm, node: str):
    d = sm.run_dir / node
    password = (d / "shared" / "secrets" / "admin.password").read_text().strip()
    return pymysql.connect(unix_socket=str(d / "sock" / "_shared.sock"), user="slacker", password=password,
                           autocommit=True)


def what_is_there(sm, node: str, tid: str) -> dict:
    """The tenant's traces in a node's shared server and files."""
    conn = admin(sm, node)
    try:
        return {"database": bool(q(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", tid)),
                "accounts": len(q(conn, "SELECT 1 FROM mysql.global_priv WHERE User = %s", f"{tid}_app")),
                "replication": _connections(conn),
                "record": (sm.run_dir / node / "shared" / "tenants" / tid).exists()}
    finally:
        conn.close()


def _connections(conn) -> list[str]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        return [r["Connection_name"] for r in cur.fetchall()]


def logged_ids(sm, tenant: str) -> set:
    """The ack writer's ids in the tenant's log table, read through the router on its owner."""
    conn = routed(sm, tenant)
    try:
        return {r[0] for r in q(conn, "SELECT id FROM log")}
    finally:
        conn.close()


def migrate(*args: str) -> str:
    r = cli("migrate", *args)
    assert r.exit_code == 0, (r.output, r.stderr)
    return r.output


def test_a_shared_tenant_moves_live_and_back_with_writers_on_it_and_a_neighbour(sm):
    mover = AckedWriter(routed_client(sm, "t42"), writer_id=1, rate_per_s=40).start()
    neighbour = AckedWriter(routed_client(sm, "t43"), writer_id=2, rate_per_s=40).start()
    try:
        time.sleep(0.5)
        out = migrate("t42", "--to", "node-2", "--rate", "20MB/s")
        assert "SUCCEEDED" in out, out
        own = sm.directory.lookup("t42")
        assert (own.node, own.epoch) == ("node-2", 2)
        assert own.port == sm.made["t50"].port  # node-2's shared server
        time.sleep(0.5)
        assert what_is_there(sm, "node-1", "t42") == {"database": False, "accounts": 0, "replication": [],
                                                      "record": False}
        there = what_is_there(sm, "node-2", "t42")
        assert (there["database"], there["accounts"], there["replication"]) == (True, 2, [])
        conn = routed(sm, "t42")  # through the router, on its new owner
        try:
            assert q(conn, "SELECT DATABASE(), @@port") == (("t42", sm.made["t50"].port),)
            assert q(conn, "SELECT n FROM item_count") == ((ROWS,),)
            q(conn, "INSERT INTO notes (note) VALUES ('after the move')")
        finally:
            conn.close()
        migrate("t42", "--to", "node-1", "--unthrottled")  # and back: its neighbours on node-2 untouched
        assert sm.directory.lookup("t42").node == "node-1"
        time.sleep(0.5)
    finally:
        mover.stop()
        neighbour.stop()
    assert what_is_there(sm, "node-2", "t42") == {"database": False, "accounts": 0, "replication": [], "record": False}
    assert not neighbour.unknown and not neighbour.errors, neighbour.errors  # the neighbour never noticed
    assert len(neighbour.acked) > 20
    conn = routed(sm, "t42")
    try:
        logged = {r[0] for r in q(conn, "SELECT id FROM log")}
        assert q(conn, "SELECT COUNT(*) FROM notes") == ((1,),)
        assert q(conn, "SELECT COUNT(*) FROM items") == ((ROWS,),)
    finally:
        conn.close()
    assert set(mover.acked) <= logged, f"lost: {sorted(set(mover.acked) - logged)[:5]}"
    assert len(mover.acked) > 20 and len(mover.unknown) <= 2, (mover.unknown, mover.errors)
    conn = routed(sm, "t43")
    try:
        assert set(neighbour.acked) == {r[0] for r in q(conn, "SELECT id FROM log")}
    finally:
        conn.close()


def test_an_abort_while_copying_leaves_the_source_serving_and_nothing_on_the_target(sm):
    r = cli("migrate", "t42", "--to", "node-2", "--rate", "20KB/s", "--detach")
    assert r.exit_code == 0, r.output
    deadline = time.monotonic() + 30
    while True:
        doc = sm.agents["node-1"].request("GET", "/v1/migrations/t42")
        if doc["phase"] == "snapshot" and doc.get("bytes_done", 0) > 0:
            break
        assert time.monotonic() < deadline, doc
        time.sleep(0.1)
    r = cli("migrate", "--abort", "t42")
    assert r.exit_code == 0, r.output
    deadline = time.monotonic() + 30
    while sm.agents["node-1"].request("GET", "/v1/migrations/t42")["result"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert sm.agents["node-1"].request("GET", "/v1/migrations/t42")["result"] == "aborted"
    assert sm.directory.lookup("t42").node == "node-1"
    assert what_is_there(sm, "node-2", "t42") == {"database": False, "accounts": 0, "replication": [], "record": False}
    conn = routed(sm, "t42")
    try:
        q(conn, "INSERT INTO notes (note) VALUES ('after the abort')")
        assert q(conn, "SELECT COUNT(*) FROM notes") == ((2,),)
    finally:
        conn.close()


def test_a_move_steered_by_a_setpoint_reads_the_shared_server_once(sm):
    neighbour = AckedWriter(routed_client(sm, "t43"), writer_id=3, rate_per_s=40).start()
    try:
        time.sleep(1.0)
        r = cli("migrate", "t42", "--to", "node-2", "--setpoint", "500ms", "--json")
        assert r.exit_code == 0, (r.output, r.stderr)
    finally:
        neighbour.stop()
    doc = json.loads(r.stdout)
    assert doc["result"] == "succeeded", doc
    assert sm.directory.lookup("t42").node == "node-2"
    print(json.dumps({k: doc.get(k) for k in ("latency_source", "controller", "warnings")}, indent=1)[:3000])


def test_verify_compares_the_tenant_s_tables_only_and_a_copy_changed_behind_replication_fails(sm):
    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import start_migration

    here = sm.directory.lookup("t42").node
    there = "node-2" if here == "node-1" else "node-1"
    mover = AckedWriter(routed_client(sm, "t42"), writer_id=4, rate_per_s=40).start()
    try:
        time.sleep(0.3)
        r = cli("migrate", "t42", "--to", there, "--unthrottled", "--verify", "--json")
        assert r.exit_code == 0, (r.output, r.stderr)
        doc = json.loads(r.stdout)
        assert doc["result"] == "succeeded" and doc["verified"] is True, doc.get("error")
        v = doc["verify"]
        conn = admin(sm, there)
        try:  # the tenant's base tables (not its view), none of a neighbour's
            base = q(conn, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 't42' "
                           "AND table_type = 'BASE TABLE'")[0][0]
        finally:
            conn.close()
        others = 0
        for node in (here, there):
            conn = admin(sm, node)
            try:
                others += q(conn, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema NOT IN "
                                  "('t42', 'mysql', 'sys', 'information_schema', 'performance_schema')")[0][0]
            finally:
                conn.close()
        assert v["result"] == "equal" and v["tables_done"] == v["tables_total"] == base >= 3, (v, base)
        assert others > 0  # the neighbours have tables, and none was compared
        assert sm.directory.lookup("t42").node == there
        # --verify-only back: compared, then the copy removed; the tenant never left
        r = cli("migrate", "t42", "--to", here, "--unthrottled", "--verify-only", "--json")
        assert r.exit_code == 0, (r.output, r.stderr)
        doc = json.loads(r.stdout)
        assert doc["result"] == "verified" and doc["verify"]["result"] == "equal", doc.get("error")
        assert sm.directory.lookup("t42").node == there
        assert what_is_there(sm, here, "t42") == {"database": False, "accounts": 0, "replication": [],
                                                   "record": False}
        # A row written into the copy outside replication is found, and the move fails with the source serving.
        request = MigrationRequest.checked("t42", MigrationOptions(target=here, verify=True, hold_s={"verify": 2}))
        mid = start_migration(sm.agents[there], request)["id"]
        deadline = time.monotonic() + 60
        while sm.agents[there].request("GET", f"/v1/migrations/{mid}").get("holding") != "verify":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        conn = admin(sm, here)
        try:
            q(conn, "SET SESSION sql_log_bin = 0")
            q(conn, "UPDATE t42.items SET v = 'changed behind replication' WHERE id = 7")
        finally:
            conn.close()
        deadline = time.monotonic() + 60
        while (doc := sm.agents[there].request("GET", f"/v1/migrations/{mid}"))["result"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        mover.stop()
    assert doc["result"] == "failed" and "verification failed" in doc["error"]["what"], doc.get("error")
    assert "t42.items" in doc["error"]["why"], doc["error"]
    assert sm.directory.lookup("t42").node == there
    assert what_is_there(sm, here, "t42") == {"database": False, "accounts": 0, "replication": [], "record": False}
    assert writable_on(sm, "t42") == [there]
    logged = logged_ids(sm, "t42")
    assert set(mover.acked) <= logged, f"lost: {sorted(set(mover.acked) - logged)[:5]}"


# ---- SIGKILL of an agent at a step: exactly one writable owner, the directory's; nothing lost or left -------
FAULTS = {  # point: (whose agent is killed, where the move holds, the owner once it has settled)
    "delta": ("node-1", {"delta": 30}, "node-1"),
    "frozen": ("node-1", {"frozen": 30}, "node-1"),  # its accounts locked, no fence on record yet
    "fenced": ("node-1", {"fenced": 30}, "node-1"),
    "flipped": ("node-1", {"flipped": 30}, "node-2"),
    "activating": ("node-2", {"activating": 30}, "node-2"),
}


def writable_on(sm, tid: str) -> list[str]:
    """The nodes whose shared server takes a write of the tenant's account (as a client at the owner's address)."""
    out = []
    for node in ("node-1", "node-2"):
        spec = sm.cluster.node(node)
        port = sm.made["t43" if node == "node-1" else "t50"].port
        try:
            conn = pymysql.connect(host=spec.tenant_host, port=port, user=f"{tid}_app", password=sm.made[tid].password,
                                   database=tid, autocommit=True, connect_timeout=3)
        except pymysql.err.MySQLError:
            continue
        try:
            q(conn, "INSERT INTO notes (note) VALUES ('probe')")
            out.append(node)
        except pymysql.err.MySQLError:
            pass
        finally:
            conn.close()
    return out


def kill_shared_server(sm, node: str) -> None:
    """SIGKILL of `node`'s shared server; returns once the agent's supervisor has it running again."""
    import os
    import signal

    from slacker.procs import alive, read_pid, wait_gone

    pid_file = sm.run_dir / node / "shared" / "run" / "mariadbd.pid"
    pid = read_pid(pid_file)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10)
    deadline = time.monotonic() + 60
    while not ((p := read_pid(pid_file)) and p != pid and alive(p)):
        assert time.monotonic() < deadline, f"{node}'s shared server was not started again"
        time.sleep(0.1)


def _wait_holding(sm, mid: str, side: str, point: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            doc = (sm.agents["node-1"].request("GET", f"/v1/migrations/{mid}", timeout_s=5) if side == "node-1"
                   else sm.agents["node-2"].request("GET", f"/v1/incoming/{mid}", timeout_s=5))
            if side == "node-1":
                assert doc["active"], (doc["result"], doc.get("error"))
            if doc.get("holding") == point:
                return
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - not there yet
            pass
        assert time.monotonic() < deadline, f"never held at {point}"
        time.sleep(0.02)


@pytest.mark.parametrize("point", list(FAULTS))
def test_an_agent_killed_at_a_step_leaves_one_writable_owner_and_nothing_behind(sm, point):
    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import start_migration

    from .test_router_handover import _kill_agent, _start_agent

    if sm.directory.lookup("t42").node != "node-1":
        migrate("t42", "--to", "node-1", "--unthrottled")
    victim, hold, owner = FAULTS[point]
    k = list(FAULTS).index(point)  # a writer id of its own per case: each writes ids of its own
    mover = AckedWriter(routed_client(sm, "t42"), writer_id=20 + k, rate_per_s=40).start()
    neighbour = AckedWriter(routed_client(sm, "t43"), writer_id=30 + k, rate_per_s=40).start()
    try:
        time.sleep(0.3)
        request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", hold_s=hold, lease_ttl_s=4,
                                                                   max_freeze_s=40 if point != "delta" else 1))
        mid = start_migration(sm.agents["node-1"], request)["id"]
        _wait_holding(sm, mid, victim, point)
        _kill_agent(sm.cluster, victim)
        time.sleep(1)
        _start_agent(sm.cluster, victim)
        deadline = time.monotonic() + 60
        while True:  # settled: the directory's owner the only writable one, and nothing left on the other
            other = "node-2" if owner == "node-1" else "node-1"
            there = what_is_there(sm, other, "t42")
            if (sm.directory.lookup("t42").node == owner and writable_on(sm, "t42") == [owner]
                    and there == {"database": False, "accounts": 0, "replication": [], "record": False}):
                break
            assert time.monotonic() < deadline, (point, sm.directory.lookup("t42"), writable_on(sm, "t42"), there)
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        mover.stop()
        neighbour.stop()
    assert neighbour.errors == {} and not neighbour.unknown, neighbour.errors
    logged = logged_ids(sm, "t42")
    assert set(mover.acked) <= logged, f"{point}: lost {sorted(set(mover.acked) - logged)[:5]}"


def test_every_object_class_moves_and_ddl_during_the_move_arrives(sm):
    """Views, triggers, routines, events, foreign keys inside the database, partitioned and FULLTEXT tables
    move with it; DDL and a routine created during the move reach the target; a neighbour's routine created
    meanwhile (a wild table filter does not filter routines) is skipped, not applied and not fatal."""
    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import follow, start_migration

    if sm.directory.lookup("t42").node != "node-1":
        migrate("t42", "--to", "node-1", "--unthrottled")
    conn = routed(sm, "t42")
    try:
        for stmt in (
                "CREATE TABLE parent (id INT PRIMARY KEY) ENGINE=InnoDB",
                "CREATE TABLE child (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES parent (id))",
                "CREATE TABLE parted (id INT PRIMARY KEY) PARTITION BY HASH (id) PARTITIONS 3",
                "CREATE TABLE docs (id INT PRIMARY KEY, body TEXT, FULLTEXT (body))",
                "CREATE TRIGGER parent_ai AFTER INSERT ON parent FOR EACH ROW INSERT INTO notes (note) VALUES ('trig')",
                "CREATE PROCEDURE bump() INSERT INTO parted VALUES (1000 + (SELECT COUNT(*) FROM parted))",
                "CREATE EVENT nightly ON SCHEDULE EVERY 1 DAY DO DELETE FROM notes WHERE note = 'never'",
                "INSERT INTO parent VALUES (1), (2)", "INSERT INTO child VALUES (1, 1)",
                "INSERT INTO parted VALUES (1), (2), (3)", "INSERT INTO docs VALUES (1, 'slacker moves tenants')"):
            q(conn, stmt)
    finally:
        conn.close()
    request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", hold_s={"delta": 2}))
    doc = start_migration(sm.agents["node-1"], request)
    _wait_holding(sm, doc["id"], "node-1", "delta")
    conn = routed(sm, "t42")
    try:  # during the move: DDL and a routine of its own
        q(conn, "ALTER TABLE docs ADD COLUMN tag VARCHAR(8) DEFAULT 'new'")
        q(conn, "CREATE FUNCTION twice(x INT) RETURNS INT DETERMINISTIC RETURN 2 * x")
        q(conn, "INSERT INTO parent VALUES (3)")
    finally:
        conn.close()
    neighbour = routed(sm, "t43")
    try:
        q(neighbour, "CREATE PROCEDURE theirs() SELECT 1")
    finally:
        neighbour.close()
    done = follow(sm.agents["node-1"], doc)
    assert done["result"] == "succeeded", done.get("error")
    assert sm.directory.lookup("t42").node == "node-2"
    conn = routed(sm, "t42")
    try:
        assert q(conn, "SELECT n FROM item_count") == ((ROWS,),)
        assert q(conn, "SELECT COUNT(*) FROM notes WHERE note = 'trig'") == ((3,),)  # the trigger fired 3 times
        q(conn, "INSERT INTO parent VALUES (4)")
        assert q(conn, "SELECT COUNT(*) FROM notes WHERE note = 'trig'") == ((4,),)  # and fires on the target
        with pytest.raises(pymysql.err.IntegrityError):
            q(conn, "INSERT INTO child VALUES (2, 99)")  # the foreign key holds
        q(conn, "CALL bump()")
        assert q(conn, "SELECT COUNT(*) FROM parted") == ((4,),)
        assert q(conn, "SELECT PARTITION_NAME FROM information_schema.partitions WHERE table_schema = 't42' "
                       "AND table_name = 'parted' ORDER BY 1") == (("p0",), ("p1",), ("p2",))
        assert q(conn, "SELECT id, tag FROM docs WHERE MATCH (body) AGAINST ('tenants')") == ((1, "new"),)
        assert q(conn, "SELECT twice(21)") == ((42,),)
        assert q(conn, "SELECT EVENT_NAME FROM information_schema.events WHERE EVENT_SCHEMA = 't42'") == (("nightly",),)
    finally:
        conn.close()
    on_target = admin(sm, "node-2")
    try:  # the neighbour's routine stayed where its database is
        assert q(on_target, "SELECT ROUTINE_SCHEMA, ROUTINE_NAME FROM information_schema.routines "
                            "WHERE ROUTINE_NAME = 'theirs'") == ()
    finally:
        on_target.close()


@pytest.mark.parametrize("server", ["node-1", "node-2"])
def test_a_shared_server_killed_while_its_tenant_is_fenced_leaves_one_writable_owner(sm, server):
    """The source's (or the target's) shared server SIGKILLed while the mover is frozen and fenced: the move
    ends either way (rolled back, or forward once the directory has flipped), the supervisor starts the server
    again, and the mover is writable on the directory's owner only; the neighbours serve again within 10 s."""
    import os
    import signal

    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import follow, start_migration
    from slacker.procs import alive, read_pid, wait_gone

    if sm.directory.lookup("t42").node != "node-1":
        migrate("t42", "--to", "node-1", "--unthrottled")
    request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", hold_s={"fenced": 2},
                                                               max_freeze_s=20))
    doc = start_migration(sm.agents["node-1"], request)
    _wait_holding(sm, doc["id"], "node-1", "fenced")
    pid_file = sm.run_dir / server / "shared" / "run" / "mariadbd.pid"
    pid = read_pid(pid_file)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10)
    done = follow(sm.agents["node-1"], doc)
    deadline = time.monotonic() + 60
    while not ((p := read_pid(pid_file)) and p != pid and alive(p)):
        assert time.monotonic() < deadline, "the shared server was not started again"
        time.sleep(0.1)
    back = time.monotonic()
    owner = sm.directory.lookup("t42").node
    assert done["result"] in ("succeeded", "failed"), done
    assert (owner == "node-2") == (done["result"] == "succeeded"), (owner, done["result"])
    other = "node-2" if owner == "node-1" else "node-1"
    while True:
        there = what_is_there(sm, other, "t42")
        if writable_on(sm, "t42") == [owner] and there == {"database": False, "accounts": 0, "replication": [],
                                                           "record": False}:
            break
        assert time.monotonic() < back + 30, (owner, writable_on(sm, "t42"), there)
        time.sleep(0.2)
    neighbour = "t43" if server == "node-1" else "t50"
    while True:
        try:
            conn = routed(sm, neighbour)
            q(conn, "SELECT 1")
            conn.close()
            break
        except pymysql.err.MySQLError:
            assert time.monotonic() < back + 10, f"{neighbour} does not serve 10 s after its server is back"
            time.sleep(0.1)


def test_the_target_s_server_killed_in_the_delta_replicates_the_mover_s_database_only_when_back(sm):
    """node-2's shared server SIGKILLed while the mover's delta runs, a neighbour writing on the source: the
    server forgets its connection's one-database filter, so it starts no replication by itself; its agent sets
    the filter again and starts it. The move then ends, and node-2 holds nothing of the neighbour."""
    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import follow, start_migration

    if sm.directory.lookup("t42").node != "node-1":
        migrate("t42", "--to", "node-1", "--unthrottled")
    neighbour = AckedWriter(routed_client(sm, "t43"), writer_id=42, rate_per_s=40).start()
    mover = AckedWriter(routed_client(sm, "t42"), writer_id=43, rate_per_s=40).start()
    try:
        request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", hold_s={"delta": 4}))
        doc = start_migration(sm.agents["node-1"], request)
        _wait_holding(sm, doc["id"], "node-1", "delta")
        time.sleep(0.5)
        kill_shared_server(sm, "node-2")
        done = follow(sm.agents["node-1"], doc)
        time.sleep(0.5)
    finally:
        mover.stop()
        neighbour.stop()
    assert done["result"] == "succeeded", (done["result"], done.get("error"))
    assert sm.directory.lookup("t42").node == "node-2"
    assert set(mover.acked) <= logged_ids(sm, "t42")
    assert not neighbour.errors and not neighbour.unknown, neighbour.errors
    conn = admin(sm, "node-2")
    try:
        assert not q(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = 't43'")
    finally:
        conn.close()
    migrate("t42", "--to", "node-1", "--unthrottled")


def test_the_fence_ends_every_idle_session_of_the_tenant_but_the_router_s(sm):
    """Frozen and fenced (held there), the source has no idle session of the mover left but the router's: the
    table lock is the agent's own connection's, so an agent killed past the flip would release it, and an idle
    client connected straight to the old copy could write there until the copy is retired. The router's idle
    client is spared, and goes on on the new owner after the flip."""
    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import follow, start_migration

    if sm.directory.lookup("t42").node != "node-1":
        migrate("t42", "--to", "node-1", "--unthrottled")
    spec = sm.cluster.node("node-1")
    direct = pymysql.connect(host=spec.tenant_host, port=sm.made["t43"].port, user="t42_app",
                             password=sm.made["t42"].password, database="t42", autocommit=True, connect_timeout=5)
    direct_id = direct.thread_id()
    q(direct, "INSERT INTO notes (note) VALUES ('direct, before')")
    via_router = routed(sm, "t42")
    q(via_router, "INSERT INTO notes (note) VALUES ('routed, before')")
    try:
        request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", hold_s={"fenced": 2},
                                                                   max_freeze_s=20))
        doc = start_migration(sm.agents["node-1"], request)
        _wait_holding(sm, doc["id"], "node-1", "fenced")
        conn = admin(sm, "node-1")
        try:
            left = {r[0] for r in q(conn, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 't42_app'")}
        finally:
            conn.close()
        assert direct_id not in left, "a direct idle session outlived the fence"
        assert left, "the router's idle session was ended too"
        done = follow(sm.agents["node-1"], doc)
        assert done["result"] == "succeeded", (done["result"], done.get("error"))
        q(via_router, "INSERT INTO notes (note) VALUES ('routed, after')")  # the router moved it
    finally:
        direct.close()
        via_router.close()
    conn = routed(sm, "t42")
    try:
        notes = {r[0] for r in q(conn, "SELECT note FROM notes")}
    finally:
        conn.close()
    assert {"direct, before", "routed, before", "routed, after"} <= notes
    migrate("t42", "--to", "node-1", "--unthrottled")


@pytest.mark.parametrize("program", ["mariadb-dump", "slacker.onedb_load"])
def test_the_dump_or_the_load_killed_mid_copy_rolls_back_and_leaves_nothing(sm, program):
    """SIGKILL of the snapshot's producer on the source (mariadb-dump) or its loader on the target: the move
    fails, the source serves, and the target has nothing of the tenant (no database, record or connection)."""
    import os
    import signal
    import subprocess

    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import follow, start_migration

    if sm.directory.lookup("t42").node != "node-1":
        migrate("t42", "--to", "node-1", "--unthrottled")
    conn = routed(sm, "t42")
    try:  # ~12 MB more to dump: more than the pipe and the sockets buffer (~8 MB), ten seconds at its rate
        q(conn, "CREATE TABLE IF NOT EXISTS padding (id INT PRIMARY KEY, v VARCHAR(200))")
        for lo in range(0, 80000, 2000):
            q(conn, "INSERT IGNORE INTO padding VALUES " + ", ".join(f"({i}, REPEAT('p', 150))"
                                                                      for i in range(lo, lo + 2000)))
    finally:
        conn.close()
    request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", rate_bytes_per_s=1_000_000))
    doc = start_migration(sm.agents["node-1"], request)
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(["pgrep", "-f", f"{program}.*{'t42' if program == 'mariadb-dump' else 'tenants/t42'}"],
                             capture_output=True, text=True).stdout.split()
        if out:
            break
        assert time.monotonic() < deadline, f"no {program} running"
        time.sleep(0.05)
    time.sleep(0.5)
    for pid in out:
        os.kill(int(pid), signal.SIGKILL)
    done = follow(sm.agents["node-1"], doc)
    assert done["result"] == "failed", done
    assert sm.directory.lookup("t42").node == "node-1"
    deadline = time.monotonic() + 30
    while what_is_there(sm, "node-2", "t42") != {"database": False, "accounts": 0, "replication": [], "record": False}:
        assert time.monotonic() < deadline, what_is_there(sm, "node-2", "t42")
        time.sleep(0.2)
    assert writable_on(sm, "t42") == ["node-1"]


def test_a_move_by_a_partial_hot_backup_imports_the_tablespaces(sm):
    """--snapshot physical: mariabackup --databases through the throttled pipe, --prepare --export and
    IMPORT TABLESPACE into the target's running shared server; the neighbour writes on throughout. A database
    with what the tablespace path cannot carry (a view) is refused before anything starts."""
    r = cli("migrate", "t42", "--to", "node-2" if sm.directory.lookup("t42").node == "node-1" else "node-1",
            "--snapshot", "physical")
    assert r.exit_code == 8 and "cannot be copied by a partial backup" in r.output and "views: item_count" in r.output, \
        r.output
    r = cli("tenant", "create", "t45", "--shared", "--on", "node-1")
    assert r.exit_code == 0, r.output
    sm.made["t45"] = resolve("t45", sm.cluster)
    conn = routed(sm, "t45")
    try:
        q(conn, "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(200), KEY (v))")
        for lo in range(0, 20000, 2000):
            q(conn, "INSERT INTO items VALUES " + ", ".join(f"({i}, REPEAT('v', 150))" for i in range(lo, lo + 2000)))
    finally:
        conn.close()
    neighbour = AckedWriter(routed_client(sm, "t43"), writer_id=40, rate_per_s=40).start()
    mover = AckedWriter(routed_client(sm, "t45"), writer_id=41, rate_per_s=40).start()
    try:
        time.sleep(0.3)
        out = migrate("t45", "--to", "node-2", "--snapshot", "physical", "--rate", "50MB/s")
        assert "SUCCEEDED" in out, out
        assert sm.directory.lookup("t45").node == "node-2"
        # node-2's server SIGKILLed with the mover writing into its imported tables: until InnoDB's checkpoint
        # passes an import, crash recovery drops every change made to the imported tables since, so the move
        # waits for that checkpoint before it replicates into them; every acknowledged write survives.
        time.sleep(1.0)
        acked_before = set(mover.acked)
        kill_shared_server(sm, "node-2")
        assert acked_before <= logged_ids(sm, "t45"), len(acked_before - logged_ids(sm, "t45"))
        # Straight back by a partial backup: mariabackup would leave out a table imported since the last
        # checkpoint (it reads its DISCARD as a drop); past it, the tables are in the backup.
        out = migrate("t45", "--to", "node-1", "--snapshot", "physical")
        assert "SUCCEEDED" in out, out
        time.sleep(0.5)
    finally:
        mover.stop()
        neighbour.stop()
    assert not neighbour.errors and not neighbour.unknown, neighbour.errors
    assert what_is_there(sm, "node-2", "t45") == {"database": False, "accounts": 0, "replication": [], "record": False}
    conn = routed(sm, "t45")
    try:
        assert q(conn, "SELECT COUNT(*) FROM items") == ((20000,),)
        assert q(conn, "CHECK TABLE items")[0][-1] == "OK"
        logged = {r[0] for r in q(conn, "SELECT id FROM log")}
    finally:
        conn.close()
    assert set(mover.acked) <= logged and len(mover.acked) > 10


def _stats(sm, node: str) -> dict:
    return sm.agents[node].request("GET", "/v1/tenant-stats")


def test_each_shared_tenant_s_own_load_is_read_from_the_shared_server(sm):
    """One tenant of node-1's shared server busy, its neighbours idle: the agent's stats (what the rebalancer
    and the drain weigh) give each shared tenant its own transactions, its own size and its share of the
    server's CPU, the busy one nearly all of it."""
    busy = sorted(t for t in ("t42", "t43", "t45") if sm.directory.lookup(t).node == "node-1")[0]
    stop = threading.Event()

    def burn() -> None:
        conn = routed(sm, busy)
        try:
            q(conn, "CREATE TABLE IF NOT EXISTS burn (id INT PRIMARY KEY, n INT)")
            q(conn, "REPLACE INTO burn VALUES (1, 0)")
            while not stop.is_set():
                q(conn, "DO BENCHMARK(200000, MD5('slacker'))")
                q(conn, "UPDATE burn SET n = n + 1 WHERE id = 1")
        finally:
            conn.close()
    th = threading.Thread(target=burn, daemon=True)
    th.start()
    try:
        def closed_busy():  # a history interval that saw the load from its start, and one of every tenant
            doc = _stats(sm, "node-1")
            hist = doc.get("history", {})
            every = all(hist.get(t) for t in ("t42", "t43", "t45") if sm.directory.lookup(t).node == "node-1")
            mine = hist.get(busy) or []
            return doc if every and len(mine) >= 2 and (mine[-1]["own_cpu_s_per_s"] or 0) > 0.2 else None
        doc = wait_for_doc(closed_busy, 6 * STATS_INTERVAL_S)
    finally:
        stop.set()
        th.join(10)
    kinds = {s["tenant"]: s["kind"] for s in doc["tenants"]}
    on_node1 = {t for t in ("t42", "t43", "t45") if sm.directory.lookup(t).node == "node-1"}
    assert {t: kinds.get(t) for t in on_node1} == {t: "shared" for t in on_node1}
    last = {t: doc["history"][t][-1] for t in on_node1}
    mine = last[busy]
    assert mine["kind"] == "shared" and mine["ok"] and mine["transactions_per_s"] > 1, mine
    assert mine["data_bytes"] > 0
    others = [last[t]["cpu_s_per_s"] for t in on_node1 - {busy}]
    assert all(x < mine["cpu_s_per_s"] / 4 for x in others), last


def wait_for_doc(cond, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_drain_of_a_shared_node_moves_each_tenant_live_with_writers_on_them(sm):
    """`slacker node drain` of a node whose tenants are all shared: each moves live, one at a time into the one
    target's shared server, with writers through the router on two of them: no acknowledged write lost, none
    failed, node-1's shared server left without a tenant's database or account."""
    on_node1 = sorted(t for t in ("t42", "t43", "t45") if sm.directory.lookup(t).node == "node-1")
    assert len(on_node1) >= 2, on_node1
    writers = {t: AckedWriter(routed_client(sm, t), writer_id=60 + i, rate_per_s=30).start()
               for i, t in enumerate(on_node1[:2])}
    try:
        time.sleep(0.3)
        r = cli("node", "drain", "node-1", "--dry-run", "--json")
        assert r.exit_code == 0, r.output
        planned = {t["tenant"]: t for t in json.loads(r.stdout)["tenants"]}
        assert set(planned) == set(on_node1) and {t["target"] for t in planned.values()} == {"node-2"}
        r = cli("node", "drain", "node-1", "--sla", "5s", "--max-freeze", "3s", "--json")
        assert r.exit_code == 0, (r.output, r.stderr)
        doc = json.loads(r.stdout)
        assert doc["outcome"] == "drained", doc
        time.sleep(0.5)
    finally:
        for w in writers.values():
            w.stop()
        cli("node", "uncordon", "node-1")
    assert {t: sm.directory.lookup(t).node for t in on_node1} == {t: "node-2" for t in on_node1}
    for t, w in writers.items():
        conn = routed(sm, t)
        try:
            logged = {r[0] for r in q(conn, "SELECT id FROM log")}
        finally:
            conn.close()
        assert set(w.acked) <= logged, f"{t} lost: {sorted(set(w.acked) - logged)[:5]}"
        assert len(w.acked) > 10 and len(w.unknown) <= 2 and not w.errors, (t, w.unknown, w.errors)
        assert what_is_there(sm, "node-1", t) == {"database": False, "accounts": 0, "replication": [],
                                                  "record": False}
