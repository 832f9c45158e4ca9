"""Consolidation (docs/shared.md, "Consolidation"): a whole-server tenant packed live into another node's shared
server (`slacker migrate --into shared`) with a writer through the router on it and on a neighbour there: no
acknowledged write lost, the same client login reaching it in its database afterwards, the neighbour untouched,
and nothing of the whole server left on its old node. What cannot be packed is refused before anything starts.
One cluster for the module, in order."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pymysql
import pytest
from click.testing import CliRunner

from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.cli import main
from slacker.client import Endpoint, TenantClient, resolve
from slacker.errors import Conflict

from .conftest import routed_cluster

pytestmark = pytest.mark.xdist_group("consolidation")  # one cluster, in order, on one worker

ROWS = 2000


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def q(conn, sql: str, *args):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


@pytest.fixture(scope="module")
def pc():
    """node-1: whole-server tenant c1 (database c1 with rows); node-2: shared tenant t50 (its shared server)."""
    with routed_cluster() as (cluster, run_dir, admin, listen):
        agents, directory = cluster_clients(cluster)
        for args in (("c1", "--on", "node-1"), ("t50", "--shared", "--on", "node-2")):
            r = cli("tenant", "create", *args)
            assert r.exit_code == 0, r.output
        host, port = listen.rsplit(":", 1)
        pc = SimpleNamespace(cluster=cluster, run_dir=run_dir, host=host, port=int(port), agents=agents,
                             directory=directory, made={t: resolve(t, cluster) for t in ("c1", "t50")})
        conn = routed(pc, "c1")
        try:
            q(conn, "CREATE DATABASE c1")
            q(conn, "CREATE TABLE c1.items (id INT PRIMARY KEY, v VARCHAR(200))")
            q(conn, "CREATE VIEW c1.item_count AS SELECT COUNT(*) AS n FROM c1.items")
            for lo in range(0, ROWS, 500):
                q(conn, "INSERT INTO c1.items VALUES " + ", ".join(f"({i}, REPEAT('v', 150))"
                                                                   for i in range(lo, lo + 500)))
        finally:
            conn.close()
        yield pc


def routed(pc, tenant: str, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return pymysql.connect(host=pc.host, port=pc.port, user=f"app@{tenant}", password=pc.made[tenant].password,
                                   autocommit=True, connect_timeout=5)
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1045 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def routed_client(pc, tenant: str) -> TenantClient:
    ep = Endpoint(tenant, pc.host, pc.port, f"app@{tenant}", pc.made[tenant].password)
    return TenantClient(tenant, lambda: ep, reconnect_timeout_s=10)


def shared_admin(pc, node: str):
    d = pc.run_dir / node
    password = (d / "shared" / "secrets" / "admin.password").read_text().strip()
    return pymysql.connect(unix_socket=str(d / "sock" / "_shared.sock"), user="slacker", password=password,
                           autocommit=True)


def in_shared_server(pc, node: str, tid: str) -> dict:
    conn = shared_admin(pc, node)
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            replication = [r["Connection_name"] for r in cur.fetchall()]
        return {"database": bool(q(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", tid)),
                "accounts": len(q(conn, "SELECT 1 FROM mysql.global_priv WHERE User = %s", f"{tid}_app")),
                "replication": replication}
    finally:
        conn.close()


def test_what_cannot_be_packed_is_refused_before_anything_starts(pc):
    conn = routed(pc, "c1")
    try:
        q(conn, "CREATE DATABASE extra")
        r = cli("migrate", "c1", "--to", "node-2", "--into", "shared", "--unthrottled")
        assert r.exit_code != 0
        assert "cannot be packed into a shared server: it holds other databases besides c1: extra" in r.output, r.output
        q(conn, "DROP DATABASE extra")
    finally:
        conn.close()
    assert pc.directory.lookup("c1").kind == "server"
    assert in_shared_server(pc, "node-2", "c1") == {"database": False, "accounts": 0, "replication": []}
    r = cli("migrate", "c1", "--to", "node-2", "--into", "shared", "--mode", "stop-and-copy")
    assert r.exit_code != 0 and "needs a live move" in r.output, r.output


def test_a_whole_server_is_packed_live_into_a_shared_server_under_routed_writers(pc):
    old = pc.made["c1"]
    mover = AckedWriter(routed_client(pc, "c1"), writer_id=1, rate_per_s=40, database="c1").start()
    neighbour = AckedWriter(routed_client(pc, "t50"), writer_id=2, rate_per_s=40).start()
    try:
        time.sleep(0.5)
        r = cli("migrate", "c1", "--to", "node-2", "--into", "shared", "--rate", "20MB/s", "--verify", "--json")
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        print("packed:", {k: doc.get(k) for k in ("result", "freeze_ms", "duration_s", "bytes_total")})
        assert doc["result"] == "succeeded" and doc["freeze_ms"] < 500, doc
        assert doc["verified"], doc  # its one database compared, the whole server's against the shared server's copy
        time.sleep(0.5)
    finally:
        mover.stop()
        neighbour.stop()
    own = pc.directory.lookup("c1")
    assert (own.node, own.kind, own.port, own.epoch) == ("node-2", "shared", pc.made["t50"].port, 2)
    conn = routed(pc, "c1")  # the same login, now c1_app in database c1 of node-2's shared server
    try:
        assert q(conn, "SELECT DATABASE(), CURRENT_USER(), @@port")[0][:1] == ("c1",)
        assert q(conn, "SELECT @@port") == ((pc.made["t50"].port,),)
        assert q(conn, "SELECT n FROM item_count") == ((ROWS,),)
        logged = {row[0] for row in q(conn, "SELECT id FROM log")}
        with pytest.raises(pymysql.err.OperationalError):  # its grants are its database's now
            q(conn, "CREATE DATABASE another")
    finally:
        conn.close()
    assert set(mover.acked) <= logged, f"lost: {sorted(set(mover.acked) - logged)[:5]}"
    assert len(mover.acked) > 20 and len(mover.unknown) <= 2 and not mover.errors, (mover.unknown, mover.errors)
    assert not neighbour.errors and not neighbour.unknown and len(neighbour.acked) > 20
    there = in_shared_server(pc, "node-2", "c1")
    assert (there["database"], there["accounts"], there["replication"]) == (True, 2, [])
    # nothing of the whole server is left on node-1: no tenant, no process, no port
    assert "c1" not in [t["id"] for t in pc.agents["node-1"].request("GET", "/v1/tenants")["tenants"]]
    assert not (pc.run_dir / "node-1" / "tenants" / "c1").exists()
    with pytest.raises(pymysql.err.OperationalError, match="Can't connect"):
        pymysql.connect(host=old.host, port=old.port, user="app", password=old.password, connect_timeout=2)
    rows = {t["id"]: t for t in json.loads(cli("tenant", "list", "--json").output)["tenants"]}
    assert (rows["c1"]["kind"], rows["c1"]["node"], rows["c1"]["healthy"]) == ("shared", "node-2", True)


def test_a_packed_tenant_is_given_a_server_of_its_own_again_under_routed_writers(pc):
    """Out again (`--into server`): a new mariadbd on node-1 takes its database live; the same login reaches
    it as `app`, its view works (its definer rewritten back), and nothing of it is left in node-2's shared
    server."""
    assert pc.directory.lookup("c1").kind == "shared"
    mover = AckedWriter(routed_client(pc, "c1"), writer_id=3, rate_per_s=40, database="c1").start()
    neighbour = AckedWriter(routed_client(pc, "t50"), writer_id=4, rate_per_s=40).start()
    try:
        time.sleep(0.5)
        r = cli("migrate", "c1", "--to", "node-1", "--into", "server", "--rate", "20MB/s", "--json")
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        print("unpacked:", {k: doc.get(k) for k in ("result", "freeze_ms", "bytes_total")})
        assert doc["result"] == "succeeded" and doc["freeze_ms"] < 500, doc
        time.sleep(0.5)
    finally:
        mover.stop()
        neighbour.stop()
    own = pc.directory.lookup("c1")
    assert (own.node, own.kind, own.epoch) == ("node-1", "server", 3) and own.port != pc.made["t50"].port
    conn = routed(pc, "c1")
    try:
        assert q(conn, "SELECT CURRENT_USER(), @@port, @@read_only") == (("app@%", own.port, 0),)
        assert q(conn, "SELECT n FROM c1.item_count") == ((ROWS,),)
        logged = {row[0] for row in q(conn, "SELECT id FROM c1.log")}
        q(conn, "INSERT INTO c1.items VALUES (%s, 'after')", ROWS)
    finally:
        conn.close()
    assert set(mover.acked) <= logged, f"lost: {sorted(set(mover.acked) - logged)[:5]}"
    assert len(mover.acked) > 20 and len(mover.unknown) <= 2 and not mover.errors, (mover.unknown, mover.errors)
    assert not neighbour.errors and not neighbour.unknown and len(neighbour.acked) > 20
    assert in_shared_server(pc, "node-2", "c1") == {"database": False, "accounts": 0, "replication": []}
    assert not (pc.run_dir / "node-2" / "shared" / "tenants" / "c1").exists()
    d = pc.run_dir / "node-1" / "tenants" / "c1"
    conn = pymysql.connect(unix_socket=str(pc.run_dir / "node-1" / "sock" / "c1.sock"), user="slacker",
                           password=(d / "secrets" / "admin.password").read_text().strip(), autocommit=True)
    try:
        assert q(conn, "SHOW ALL SLAVES STATUS") == ()  # its link to the shared server is gone, and its secret
        assert sorted(p.name for p in (d / "secrets").iterdir()) == [
            "admin.cnf", "admin.password", "app.password", "backup.password", "repl.password"]
    finally:
        conn.close()
    rows = {t["id"]: t for t in json.loads(cli("tenant", "list", "--json").output)["tenants"]}
    assert (rows["c1"]["kind"], rows["c1"]["node"], rows["c1"]["healthy"]) == ("server", "node-1", True)


# ---- SIGKILL of an agent at a step of a move that changes the kind -------------------------------------------
# The new parts: a new server's target killed before and after the flip (its recovery by the journal's note),
# and the whole server's agent killed past a flip that changed the kind. A source killed past the flip of a
# shared tenant and a shared server's target killed while activating are test_shared_moves' cases.
FAULTS = {  # point: (the kind it moves into, whose agent is killed, where the move holds, the owner once settled)
    "unpack-delta": ("server", "node-1", {"delta": 30}, "node-2"),
    "unpack-activating": ("server", "node-1", {"activating": 30}, "node-1"),
    "pack-flipped": ("shared", "node-1", {"flipped": 30}, "node-2"),
}
TARGET_POINTS = ("activating",)  # held by the target's activation; the others by the source's machine


def places(pc) -> dict:
    """Where a copy of c1 takes a write of the tenant's own account: node-1's whole server of it (if any), and
    node-2's shared server (as c1_app in database c1)."""
    out = {}
    d = pc.run_dir / "node-1" / "tenants" / "c1"
    if (d / "tenant.json").exists():
        port = json.loads((d / "tenant.json").read_text())["port"]
        out["node-1"] = dict(host=pc.cluster.node("node-1").tenant_host, port=port, user="app",
                             password=pc.made["c1"].password)
    out["node-2"] = dict(host=pc.cluster.node("node-2").tenant_host, port=pc.made["t50"].port, user="c1_app",
                         password=pc.made["c1"].password)
    return out


def writable_on(pc) -> list[str]:
    found = []
    for node, login in places(pc).items():
        try:
            conn = pymysql.connect(**login, database="c1", autocommit=True, connect_timeout=3)
        except pymysql.err.MySQLError:
            continue
        try:
            q(conn, "INSERT INTO items (id, v) VALUES (%s, 'probe')", 10_000_000 + len(found) + int(time.time() * 1000) % 1_000_000)
            found.append(node)
        except pymysql.err.MySQLError:
            pass
        finally:
            conn.close()
    return found


def _wait_holding(pc, mid: str, side: str, source: str, point: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            doc = (pc.agents[source].request("GET", f"/v1/migrations/{mid}", timeout_s=5) if side == source
                   else pc.agents[side].request("GET", f"/v1/incoming/{mid}", timeout_s=5))
            if side == source:
                assert doc["active"], (doc["result"], doc.get("error"))
            if doc.get("holding") == point:
                return
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - not there yet
            pass
        assert time.monotonic() < deadline, f"never held at {point}"
        time.sleep(0.02)


def _there_as(pc, kind: str) -> None:
    own = pc.directory.lookup("c1")
    want = "node-2" if kind == "shared" else "node-1"
    if own.kind != kind:
        r = cli("migrate", "c1", "--to", want, "--into", kind, "--unthrottled")
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("point", list(FAULTS))
def test_an_agent_killed_at_a_step_of_a_kind_change_leaves_one_writable_owner_and_nothing_behind(pc, point):
    from slacker.migration.options import MigrationOptions, MigrationRequest
    from slacker.migration.remote import start_migration

    from .test_router_handover import _kill_agent, _start_agent

    into, victim, hold, owner = FAULTS[point]
    _there_as(pc, "server" if into == "shared" else "shared")
    source = pc.directory.lookup("c1").node
    target = "node-2" if source == "node-1" else "node-1"
    mover = AckedWriter(routed_client(pc, "c1"), writer_id=10 + len(point), rate_per_s=40, database="c1").start()
    try:
        time.sleep(0.3)
        request = MigrationRequest.checked("c1", MigrationOptions(target=target, into=into, hold_s=hold, lease_ttl_s=4,
                                                                  max_freeze_s=40 if "delta" not in point else 1))
        mid = start_migration(pc.agents[source], request)["id"]
        point_name = next(iter(hold))
        _wait_holding(pc, mid, target if point_name in TARGET_POINTS else source, source, point_name)
        _kill_agent(pc.cluster, victim)
        time.sleep(1)
        _start_agent(pc.cluster, victim)
        other = target if owner == source else source
        deadline = time.monotonic() + 60
        while True:  # settled: the directory's owner the only writable copy, nothing of it on the other node
            own = pc.directory.lookup("c1")
            left = (other in places(pc)) if other == "node-1" else in_shared_server(pc, "node-2", "c1") != {
                "database": False, "accounts": 0, "replication": []}
            if own.node == owner and writable_on(pc) == [owner] and not left:
                break
            assert time.monotonic() < deadline, (point, own, writable_on(pc), left)
            time.sleep(0.2)
        assert own.kind == (into if owner == target else ("shared" if into == "server" else "server"))
        deadline = time.monotonic() + 60
        while pc.agents[source].request("GET", f"/v1/migrations/{mid}")["active"]:  # a source still holding
            if owner == source:  # its target is gone: it would fail when its hold ends
                try:
                    pc.agents[source].request("POST", f"/v1/migrations/{mid}/abort", {"reason": "test"})
                except Conflict:  # it ended meanwhile
                    pass
            assert time.monotonic() < deadline, point
            time.sleep(0.2)
        assert writable_on(pc) == [owner]
        time.sleep(0.5)
    finally:
        mover.stop()
    conn = routed(pc, "c1")
    try:
        logged = {row[0] for row in q(conn, "SELECT id FROM c1.log")}
    finally:
        conn.close()
    assert set(mover.acked) <= logged, f"{point}: lost {sorted(set(mover.acked) - logged)[:5]}"
