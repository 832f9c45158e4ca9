"""Shared tenants (docs/shared.md): databases in a node's one shared server, each with its own account whose
grants cover only its database; clients log in at the router as app@TENANT and land in that database; the kind
shows in list, status, locate and /metrics; a move of a kind not built (stop-and-copy) is refused
before anything starts; delete removes one
tenant and nothing of its neighbours; register takes a database already there; an agent SIGKILLed and started
again keeps the shared server (same process) and finishes or removes what a crash left half made; a killed
shared server is started again. One cluster for the module: the tests run in order and build on each other."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from types import SimpleNamespace

import pymysql
import pytest
from click.testing import CliRunner

from slacker import local_cluster, oltp
from slacker.ackwriter import AckedWriter
from slacker.agent.client import AgentClient, cluster_clients
from slacker.cli import main
from slacker.client import Endpoint, TenantClient, resolve
from slacker.errors import InvalidInput, NotFound
from slacker.migration.options import MigrationOptions, MigrationRequest
from slacker.migration.remote import start_migration
from slacker.procs import alive, read_pid, wait_gone

from .conftest import routed_cluster

pytestmark = pytest.mark.xdist_group("shared_tenants")  # the tests share one cluster, in order, on one worker

THREE = ("t42", "t43", "t44")


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slacker: error: "), result.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def wait_for(what: str, cond, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def sc():
    """A two-node cluster with a router, and t42, t43, t44 created --shared on node-1."""
    with routed_cluster() as (cluster, run_dir, admin, listen):
        agents, directory = cluster_clients(cluster)
        made = {}
        for tid in THREE:
            r = cli("tenant", "create", tid, "--shared", "--on", "node-1")
            assert r.exit_code == 0, r.output
            assert f"created shared tenant {tid} on node-1" in r.output and f"app@{tid}" in r.output
            made[tid] = resolve(tid, cluster)
        host, port = listen.rsplit(":", 1)
        yield SimpleNamespace(cluster=cluster, run_dir=run_dir, admin=admin, host=host, port=int(port), agents=agents,
                              directory=directory, made=made, node1=run_dir / "node-1")


def routed(sc, tenant: str, database: str | None = None, timeout_s: float = 10.0):
    """A connection through the router as app@TENANT (waiting for the router to learn a new tenant)."""
    password = sc.made[tenant].password
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return pymysql.connect(host=sc.host, port=sc.port, user=f"app@{tenant}", password=password,
                                   database=database, autocommit=True, connect_timeout=5)
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1045 or "in the directory" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def query(conn, sql: str, *args):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def shared_admin(sc):
    """Slacker's admin account on node-1's shared server (its unix socket), as a person restoring a dump."""
    password = (sc.node1 / "shared" / "secrets" / "admin.password").read_text().strip()
    return pymysql.connect(unix_socket=str(sc.node1 / "sock" / "_shared.sock"), user="slacker", password=password,
                           autocommit=True)


def test_each_tenant_lands_in_its_own_database_and_cannot_reach_a_neighbours(sc):
    ports = {sc.made[t].port for t in THREE}
    assert len(ports) == 1, "three shared tenants, one shared server"
    for tid in THREE:
        conn = routed(sc, tid)
        try:
            assert query(conn, "SELECT DATABASE(), CURRENT_USER()") == ((tid, f"{tid}_app@%"),)
            query(conn, "CREATE TABLE rows_ (id INT PRIMARY KEY, who VARCHAR(8))")
            query(conn, "INSERT INTO rows_ VALUES (1, %s), (2, %s)", tid, tid)
        finally:
            conn.close()
    conn = routed(sc, "t42")
    try:
        assert {d for (d,) in query(conn, "SHOW DATABASES")} == {"information_schema", "t42"}
        for sql, code in (("SELECT * FROM t43.rows_", 1142), ("USE t43", 1044), ("CREATE DATABASE t45", 1044),
                          ("DROP TABLE t43.rows_", 1142)):
            with pytest.raises(pymysql.err.MySQLError) as err:
                query(conn, sql)
            assert err.value.args[0] == code, (sql, err.value.args)
        assert query(conn, "SELECT who FROM rows_ ORDER BY id") == (("t42",), ("t42",))
    finally:
        conn.close()
    # Naming a neighbour's database at the login is refused by the router; the owner's grants are the wall.
    with pytest.raises(pymysql.err.OperationalError) as err:
        routed(sc, "t42", database="t43")
    assert err.value.args[0] == 1044
    # At the owner, without the router: the tenant's own account, in its database.
    direct = sc.made["t43"].connect()
    try:
        assert (sc.made["t43"].user, query(direct, "SELECT DATABASE()")) == ("t43_app", (("t43",),))
    finally:
        direct.close()


def routed_client(sc, tenant: str) -> TenantClient:
    """A client of the project's loads through the router as app@TENANT: it names no database (the router's)."""
    ep = Endpoint(tenant, sc.host, sc.port, f"app@{tenant}", sc.made[tenant].password)
    return TenantClient(tenant, lambda: ep, reconnect_timeout_s=10)


def test_the_projects_loads_write_into_each_tenants_own_database(sc):
    from slacker.ycsb.loader import LoadConfig, load_table
    from slacker.ycsb.properties import load_workload
    from slacker.ycsb.runner import RunConfig, run_benchmark
    from slacker.ycsb.targets import TenantTarget, cluster_resolver

    movers = ("t42", "t43")
    for tid in movers:
        conn = routed(sc, tid)
        try:
            assert oltp.load(conn, accounts=200) == tid
        finally:
            conn.close()
    writers = {tid: AckedWriter(routed_client(sc, tid), writer_id=i + 1, rate_per_s=50).start()
               for i, tid in enumerate(movers)}
    transfers = {tid: oltp.TransferLoad(lambda tid=tid: routed_client(sc, tid), threads=2, accounts=200,
                                        hot_accounts=2).start() for tid in movers}
    # The YCSB harness on the third, meanwhile, in t44 too: its load through the router, its 2 s run at the owner
    # as t44_app (resolved through the cluster: Endpoint.database).
    wl = load_workload(["workloads/slacker"], {"recordcount": 200})
    ep = Endpoint("t44", sc.host, sc.port, "app@t44", sc.made["t44"].password)
    try:
        loaded = load_table(LoadConfig(endpoint=ep, workload=wl, threads=1))
        run = run_benchmark(RunConfig(targets=[TenantTarget("t44", 50.0, cluster_resolver("t44", sc.cluster))],
                                      workload=wl, mpl=2, duration_s=2.0, seed=1))
    finally:
        for w in (*writers.values(), *transfers.values()):
            w.stop()
    owner = f"{sc.made['t44'].host}:{sc.made['t44'].port}"
    assert (loaded.database, loaded.rows) == ("t44", 200) and run.tenants[0].completed > 0, run.tenants[0]
    assert run.tenants[0].endpoint == owner and not run.tenants[0].abandoned, run.tenants[0]
    for i, tid in enumerate(movers):
        w, t = writers[tid], transfers[tid]
        assert (w.database, t.database) == (tid, tid)
        assert len(w.acked) > 20 and len(t.acked) > 10, (len(w.acked), len(t.acked), w.errors, t.errors)
        conn = routed(sc, tid)
        try:
            logged = {r[0]: r[1] for r in query(conn, "SELECT id, writer FROM log")}
            result = oltp.check(conn, t.acked, t.failed)
        finally:
            conn.close()
        assert set(w.acked) <= set(logged) <= set(w.acked) | set(w.unknown) and set(logged.values()) == {i + 1}
        assert result.ok and result.transfers >= len(t.acked), result
    admin = shared_admin(sc)
    try:
        tables = {}
        for db, table in query(admin, "SELECT table_schema, table_name FROM information_schema.tables "
                                      "WHERE table_schema NOT IN ('mysql', 'sys', 'information_schema', "
                                      "'performance_schema')"):
            tables.setdefault(db, set()).add(table)
        assert tables == {"t42": {"rows_", "log", "probe", "accounts", "transfers"},
                          "t43": {"rows_", "log", "probe", "accounts", "transfers"},
                          "t44": {"rows_", "usertable"}}, tables
        assert query(admin, "SELECT who FROM t44.rows_ ORDER BY id") == (("t44",), ("t44",))
        assert query(admin, "SELECT COUNT(*) FROM t44.usertable") == ((200,),)
    finally:
        admin.close()


def test_list_status_locate_and_metrics_show_the_kind(sc):
    rows = json.loads(cli("tenant", "list", "--json").stdout)["tenants"]
    assert {r["id"]: (r["kind"], r["healthy"]) for r in rows} == {t: ("shared", True) for t in THREE}
    human = cli("tenant", "list").stdout
    assert "KIND" in human.splitlines()[0] and all(re.search(rf"^{t}\s+shared\s", human, re.M) for t in THREE)
    status = json.loads(cli("status", "--json").stdout)
    node1 = next(n for n in status["nodes"] if n["node"] == "node-1")
    assert {t["id"]: t["kind"] for t in node1["tenants"]} == {t: "shared" for t in THREE}
    ss = node1["shared_server"]
    assert ss["running"] and ss["gtid_domain_id"] >= 1 and ss["server_id"] == (1 << 31) + ss["gtid_domain_id"]
    assert "t42 (shared)" in cli("status").stdout
    loc = json.loads(cli("locate", "t42", "--json").stdout)
    assert (loc["kind"], loc["app_user"], loc["owner_user"], loc["database"]) == ("shared", "app", "t42_app", "t42")
    assert "database t42 in node-1's shared server, as t42_app" in cli("locate", "t42").stdout
    spec = sc.cluster.node("node-1")
    req = urllib.request.Request(f"{spec.url}/metrics", headers={"Authorization": f"Bearer {sc.cluster.token()}"})

    def scraped():  # once the supervisor's tick has sampled them
        with urllib.request.urlopen(req, timeout=5) as r:
            metrics = r.read().decode()
        return all(f'slacker_tenant_info{{kind="shared",node="node-1",tenant="{t}"}} 1.0' in metrics
                   and f'slacker_tenant_up{{node="node-1",tenant="{t}"}} 1.0' in metrics for t in THREE)
    wait_for("the shared tenants on /metrics", scraped, 10)


def test_a_move_of_a_shared_tenant_that_is_not_built_is_refused_and_nothing_starts(sc):
    one_line(cli("migrate", "t42", "--to", "node-2", "--unthrottled", "--mode", "stop-and-copy"), 2,
             "tenant t42 cannot be moved with --mode stop-and-copy")
    request = MigrationRequest.checked("t42", MigrationOptions(target="node-2", mode="stop-and-copy"))
    with pytest.raises(InvalidInput, match="stop-and-copy"):  # asked of the agent itself (a drain, say): the same
        start_migration(sc.agents["node-1"], request)
    assert sc.agents["node-1"].request("GET", "/v1/status")["migrations"] == []
    assert sc.directory.lookup("t42").node == "node-1" and sc.directory.lookup("t42").epoch == 1
    node2 = sc.run_dir / "node-2"
    assert not (node2 / "shared").exists() and [p.name for p in (node2 / "tenants").iterdir()] == []


def test_bad_ids_are_refused_at_the_edge_and_an_existing_database_is_registered(sc):
    for bad in ("t-45", "mysql", "45t"):
        one_line(cli("tenant", "create", bad, "--shared", "--on", "node-1"), 2, "invalid shared tenant id")
    one_line(cli("tenant", "register", "nosuch", "--shared", "--on", "node-1"), 3, "no database nosuch")
    with pytest.raises(NotFound):
        sc.directory.lookup("nosuch")
    assert not (sc.node1 / "shared" / "tenants" / "nosuch").exists()
    admin = shared_admin(sc)
    try:  # a database restored from a dump
        query(admin, "CREATE DATABASE restored")
        query(admin, "CREATE TABLE restored.kept (id INT PRIMARY KEY)")
        query(admin, "INSERT INTO restored.kept VALUES (7), (8)")
    finally:
        admin.close()
    one_line(cli("tenant", "create", "restored", "--shared", "--on", "node-1"), 4, "already exists",
             "tenant register restored --shared --on node-1")
    r = cli("tenant", "register", "restored", "--shared", "--on", "node-1")
    assert r.exit_code == 0 and "registered shared tenant restored on node-1" in r.output, r.output
    sc.made["restored"] = resolve("restored", sc.cluster)
    conn = routed(sc, "restored")
    try:
        assert query(conn, "SELECT id FROM kept ORDER BY id") == ((7,), (8,))
        assert query(conn, "SELECT DATABASE()") == (("restored",),)
    finally:
        conn.close()


def test_delete_removes_one_tenants_database_and_account_and_nothing_of_its_neighbours(sc):
    open_session = sc.made["t43"].connect()  # at the owner, as its own account: ended by the delete
    neighbour = sc.made["t42"].connect()  # a neighbour's: kept
    r = cli("tenant", "delete", "t43", "--yes")
    assert r.exit_code == 0, r.output
    with pytest.raises(pymysql.err.OperationalError):
        query(open_session, "SELECT 1")
    assert query(neighbour, "SELECT COUNT(*) FROM rows_") == ((2,),)
    neighbour.close()
    with pytest.raises(NotFound):
        sc.directory.lookup("t43")
    admin = shared_admin(sc)
    try:
        dbs = {d for (d,) in query(admin, "SHOW DATABASES")}
        assert "t43" not in dbs and {"t42", "t44", "restored"} <= dbs
        users = {u for (u,) in query(admin, "SELECT DISTINCT User FROM mysql.user")}
        assert "t43_app" not in users and {"t42_app", "t44_app", "restored_app"} <= users
    finally:
        admin.close()
    for tid in ("t42", "t44"):
        conn = routed(sc, tid)
        try:
            assert query(conn, "SELECT who FROM rows_ ORDER BY id") == ((tid,), (tid,))
        finally:
            conn.close()
    assert not (sc.node1 / "shared" / "tenants" / "t43").exists()
    assert list((sc.node1 / "shared" / "tenants" / ".trash").iterdir()) == []


def _server_pid(sc) -> int:
    return read_pid(sc.node1 / "shared" / "run" / "mariadbd.pid")


def test_an_agent_restart_keeps_the_shared_server_and_settles_what_a_crash_left(sc):
    pid = _server_pid(sc)
    shared = sc.node1 / "shared" / "tenants"
    host, port = sc.made["t42"].host, sc.made["t42"].port
    # A create cut short after its record was put in place, the directory naming this node: finished.
    sc.directory.register("half", "node-1", host, port, kind="shared")
    agent = read_pid(sc.node1 / "agent.pid")
    os.kill(agent, signal.SIGKILL)
    assert wait_gone(agent, 10)
    for tid in ("half", "orphan"):
        (shared / tid / "secrets").mkdir(parents=True)
        (shared / tid / "secrets" / "app.password").write_text("pw-" + tid + "\n")
        (shared / tid / "tenant.json").write_text(json.dumps({"id": tid, "kind": "shared", "origin": "created",
                                                              "state": "creating", "created_at": 0}))
    # A create cut short after its database was made, but which the directory does not name: removed.
    admin = shared_admin(sc)
    try:
        query(admin, "CREATE DATABASE orphan")
    finally:
        admin.close()
    # A delete cut short after its record was set aside: its database and account go at the next start.
    (shared / "t44").rename(shared / ".trash" / "tenant~t44~deleted~-~20261201T000000Z-abcdef")
    assert alive(pid)
    spec = sc.cluster.node("node-1")
    local_cluster._spawn_agent(sc.node1)
    local_cluster._wait_answering(AgentClient(spec.url, sc.cluster.token(), spec.name, timeout_s=5), sc.node1)
    assert _server_pid(sc) == pid and alive(pid), "the agent's restart restarted the shared server"
    conn = routed(sc, "t42")
    try:
        assert query(conn, "SELECT who FROM rows_ ORDER BY id") == (("t42",), ("t42",))
    finally:
        conn.close()

    def settled():
        ids = {t["id"] for t in sc.agents["node-1"].request("GET", "/v1/tenants")["tenants"]}
        a = shared_admin(sc)
        try:
            dbs = {d for (d,) in query(a, "SHOW DATABASES")}
            users = {u for (u,) in query(a, "SELECT DISTINCT User FROM mysql.user")}
        finally:
            a.close()
        return ("half" in ids and "half" in dbs and "half_app" in users and "orphan" not in dbs
                and "orphan_app" not in users and "t44" not in dbs and "t44_app" not in users
                and not (shared / "orphan").exists() and list((shared / ".trash").iterdir()) == [])
    wait_for("the half-made tenants settled", settled)
    sc.made["half"] = resolve("half", sc.cluster)
    conn = routed(sc, "half")
    try:
        assert query(conn, "SELECT DATABASE()") == (("half",),)
    finally:
        conn.close()
    r = cli("tenant", "delete", "t44", "--yes")  # only the directory's entry was left of it
    assert r.exit_code == 0, r.output
    with pytest.raises(NotFound):
        sc.directory.lookup("t44")


def test_a_killed_shared_server_is_started_again_and_its_tenants_serve(sc):
    pid = _server_pid(sc)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10)
    wait_for("the shared server started again", lambda: (p := read_pid(sc.node1 / "shared" / "run" / "mariadbd.pid"))
             and p != pid and alive(p))

    def serves():
        try:
            conn = routed(sc, "t42")
        except pymysql.err.OperationalError:
            return False
        try:
            return query(conn, "SELECT who FROM rows_ ORDER BY id") == (("t42",), ("t42",))
        finally:
            conn.close()
    wait_for("t42 serving again", serves)


def test_a_move_into_a_node_without_a_shared_server_makes_one_on_a_claimed_port(sc):
    node2 = sc.run_dir / "node-2"
    assert not (node2 / "shared").exists()
    node1_port = sc.directory.lookup("t42").port
    r = cli("migrate", "t42", "--to", "node-2", "--unthrottled")
    assert r.exit_code == 0, (r.output, r.stderr)
    own = sc.directory.lookup("t42")
    assert (own.node, own.epoch, own.kind) == ("node-2", 2, "shared")
    info = json.loads((node2 / "shared" / "server.json").read_text())
    assert own.port == info["port"] != node1_port  # node-2's own shared server
    conn = routed(sc, "t42")
    try:
        assert query(conn, "SELECT who FROM rows_ ORDER BY id") == (("t42",), ("t42",))
        assert query(conn, "SELECT @@port") == ((own.port,),)
    finally:
        conn.close()
    # The port is the node's shared server's: its next shared tenant takes it, no whole server may
    r = cli("tenant", "create", "t46", "--shared", "--on", "node-2")
    assert r.exit_code == 0, r.output
    assert sc.directory.lookup("t46").port == own.port
    with pytest.raises(Exception, match=f"port {own.port} is taken"):
        sc.directory.register("w9", "node-2", "127.0.0.3", own.port)
    migrate_back = cli("migrate", "t42", "--to", "node-1", "--unthrottled")
    assert migrate_back.exit_code == 0, (migrate_back.output, migrate_back.stderr)
    assert sc.directory.lookup("t42").node == "node-1"


def test_the_reconciler_fences_a_stray_shared_tenant_by_itself_and_unfences_it_when_named_here_again(sc):
    """The directory moved t42 elsewhere with no move here (an operator's hand, a lost journal): node-1's agent
    fences t42 alone (accounts locked, its session ended, its record marked), its neighbour keeps writing; named
    here again, it is unfenced."""
    r = cli("tenant", "create", "t47", "--shared", "--on", "node-1")
    assert r.exit_code == 0, r.output
    neighbour = resolve("t47", sc.cluster).connect()
    query(neighbour, "CREATE TABLE w (id INT PRIMARY KEY)")
    session = sc.made["t42"].connect()
    record = sc.node1 / "shared" / "tenants" / "t42" / "tenant.json"
    own = sc.directory.lookup("t42")
    elsewhere = sc.directory.lookup("t46")  # node-2's shared server
    sc.directory.compare_and_set("t42", own.epoch, "node-2", elsewhere.host, elsewhere.port)

    def refused() -> bool:
        try:
            sc.made["t42"].connect().close()
        except pymysql.err.OperationalError as exc:
            return "locked" in str(exc)
        return False
    wait_for("t42 fenced on node-1", lambda: refused() and json.loads(record.read_text()).get("fenced"), 20)
    with pytest.raises(pymysql.err.MySQLError):
        query(session, "SELECT 1")
    query(neighbour, "INSERT INTO w VALUES (1)")  # the neighbour never noticed
    sc.directory.compare_and_set("t42", own.epoch + 1, "node-1", own.host, own.port)
    wait_for("t42 unfenced on node-1", lambda: not refused() and not json.loads(record.read_text()).get("fenced"), 20)
    conn = sc.made["t42"].connect()
    try:
        assert query(conn, "SELECT who FROM rows_ ORDER BY id") == (("t42",), ("t42",))
    finally:
        conn.close()
    query(neighbour, "INSERT INTO w VALUES (2)")
    neighbour.close()
