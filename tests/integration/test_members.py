"""Members in the directory and the protocol version, on running clusters.

A node the cluster file does not name joins by starting its agent (it registers itself in etcd);
with no other process restarted, a migration and a drain onto it succeed and the router routes to
it; `slacker node remove` refuses it while it owns tenants and takes it out once drained. Agents at
protocol versions N and N+1 (SLACKER_PROTOCOL_VERSION) migrate between each other and a restart
keeps the tenant serving; N and N+2 are refused in one line naming both versions.
"""

from __future__ import annotations

import json
import os
import tomllib
from urllib.parse import urlparse

import pytest

from benchkit.migration import create_loaded_tenant
from slacker import local_cluster
from slacker.agent.client import AgentClient, cluster_clients
from slacker.client import resolve
from slacker.config import write_toml
from slacker.procs import read_pid
from slacker.router import local as local_router

from .test_cli import one_line_error, slacker
from .test_router import _wait_route


def _start_agent(cluster, name: str, address: str, env: dict | None = None) -> str:
    """A new node's agent in the cluster's run directory, as an operator would start one (only its own
    config, which names the cluster file); its URL."""
    run_dir = cluster.path.parent
    first = tomllib.loads((run_dir / "node-1" / "agent.toml").read_text())
    port = urlparse(cluster.node("node-1").url).port
    node_dir = run_dir / name
    node_dir.mkdir(exist_ok=True)
    write_toml(node_dir / "agent.toml", {
        "node": name, "cluster": str(cluster.path), "data_root": str(node_dir), "listen": f"{address}:{port}",
        "tenant_host": address, "port_range": first["port_range"], "fault_injection": True,
        "stats_interval": 1.0, "members_refresh": "2s"})
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        local_cluster._spawn_agent(node_dir)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    url = f"http://{address}:{port}"
    local_cluster._wait_answering(AgentClient(url, cluster.token(), name, timeout_s=5), node_dir)
    return url


def _restart_agent(cluster, name: str, env: dict) -> None:
    """Stop a node's agent (its tenants keep running, as in an upgrade) and start it again with `env`."""
    node_dir = cluster.path.parent / name
    pid = read_pid(node_dir / "agent.pid")
    AgentClient(cluster.node(name).url, cluster.token(), name).request("POST", "/v1/shutdown", {"stop_tenants": False})
    import time
    deadline = time.monotonic() + 30
    while pid and os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        local_cluster._spawn_agent(node_dir)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    local_cluster._wait_answering(AgentClient(cluster.node(name).url, cluster.token(), name, timeout_s=5), node_dir)


def _members(cluster) -> dict:
    rc, out, err = slacker("node", "list", "--json")
    assert rc == 0, err
    return {n["node"]: n for n in json.loads(out)["nodes"]}


def _owner(cluster, tenant: str) -> str:
    return cluster_clients(cluster)[1].lookup(tenant).node


@pytest.mark.slow
def test_a_host_joins_by_starting_its_agent_and_takes_tenants_without_a_restart(make_cluster):
    cluster = make_cluster(nodes=2, directory="etcd", stats_interval_s=1)
    assert "[[nodes]]" not in cluster.path.read_text()  # the file says how to reach the directory, no more
    admin = local_router.start(cluster.path.parent, cluster.path, "127.0.0.1:0")
    try:
        pids = {n: read_pid(cluster.path.parent / n / "agent.pid") for n in ("node-1", "node-2")}
        create_loaded_tenant(cluster, "j1", rows=300)
        create_loaded_tenant(cluster, "j2", rows=300)
        _wait_route(admin, "j1")
        # node-3: the loopback block's third address (etcd's third member listens there on other ports)
        address = str(__import__("ipaddress").ip_address(cluster.node("node-1").tenant_host) + 2)
        url = _start_agent(cluster, "node-3", address)
        m = _members(cluster)
        assert set(m) == {"node-1", "node-2", "node-3"} and m["node-3"]["registered"], m
        assert m["node-3"]["url"] == url and m["node-3"]["protocol"] == 2 and m["node-3"]["reachable"]
        # A migration onto it, started on node-1's agent, which was never restarted.
        rc, out, err = slacker("migrate", "j1", "--to", "node-3", "--rate", "50MB/s")
        assert rc == 0, out + err
        assert _owner(cluster, "j1") == "node-3"
        route = _wait_route(admin, "j1")
        deadline = __import__("time").monotonic() + 15
        while route["host"] != address and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.2)
            route = _wait_route(admin, "j1")
        assert route["host"] == address, route  # the router follows the tenant to the new node
        ep = resolve("j1", cluster)
        with ep.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM shop.items")
        # Refused while it owns a tenant: one line that says to drain first.
        one_line_error(*slacker("node", "remove", "node-3")[::2], "node-3 still owns 1 tenant(s) (j1)",
                       "slacker node drain node-3")
        # A drain of node-1 onto it (node-2 cordoned, so node-3 is the one open target).
        assert slacker("node", "cordon", "node-2")[0] == 0
        rc, out, err = slacker("node", "drain", "node-1", "--max-parallel", "1")
        assert rc == 0 and "drained" in out, out + err
        assert _owner(cluster, "j2") == "node-3"
        # Back off node-3 onto node-2, then it leaves the fleet.
        assert slacker("node", "uncordon", "node-2")[0] == 0
        rc, out, err = slacker("node", "drain", "node-3", "--max-parallel", "1")
        assert rc == 0, out + err
        assert {_owner(cluster, "j1"), _owner(cluster, "j2")} == {"node-2"}
        rc, out, err = slacker("node", "remove", "node-3")
        assert rc == 0 and "node-3 removed from the fleet" in out, out + err
        assert set(_members(cluster)) == {"node-1", "node-2"}
        rc, out, err = slacker("node", "remove", "node-3")
        assert rc == 0 and "not a member" in out, out + err
        # By hand: a host registered before its agent runs; every reader sees it, and it leaves again.
        rc, out, err = slacker("node", "add", "node-9", "--url", "http://127.0.0.99:7999", "--tenant-host", "127.0.0.99")
        assert rc == 0 and "node-9 registered" in out and "does not answer yet" in out, out + err
        m = _members(cluster)
        assert m["node-9"]["registered"] and not m["node-9"]["reachable"] and not m["node-9"]["protocol"]
        one_line_error(*slacker("node", "add", "bad", "--url", "ftp://x:1", "--tenant-host", "x")[::2], "bad agent url")
        assert slacker("node", "remove", "node-9")[0] == 0 and "node-9" not in _members(cluster)
        # Nothing else was restarted along the way.
        assert pids == {n: read_pid(cluster.path.parent / n / "agent.pid") for n in ("node-1", "node-2")}
        assert all(os.path.exists(f"/proc/{p}") for p in pids.values())
    finally:
        local_router.stop(cluster.path.parent)


@pytest.mark.slow
def test_agents_one_version_apart_migrate_two_apart_refuse(make_cluster):
    cluster = make_cluster(nodes=2)
    create_loaded_tenant(cluster, "v1", rows=200)
    create_loaded_tenant(cluster, "v2", rows=200)
    # node-2 upgraded to N+1 (the restart is the upgrade step)
    _restart_agent(cluster, "node-2", {"SLACKER_PROTOCOL_VERSION": "3"})
    before = {m["node"]: m for m in _members(cluster).values()}
    assert before["node-2"]["protocol"] == 3 and before["node-1"]["protocol"] == 2
    rc, out, err = slacker("migrate", "v1", "--to", "node-2", "--rate", "50MB/s", "--json")
    assert rc == 0, out + err
    doc = json.loads(out)
    assert doc["result"] == "succeeded" and _owner(cluster, "v1") == "node-2"
    assert doc["protocol"] == {"source": 2, "target": 3}
    # Restarting node-2 again (N+2 this time) keeps its tenant serving: same server process, same epoch,
    # and the member record keeps when it joined.
    tenant_pid = read_pid(cluster.path.parent / "node-2" / "tenants" / "v1" / "run" / "mariadbd.pid")
    epoch = cluster_clients(cluster)[1].lookup("v1").epoch
    ep = resolve("v1", cluster)
    conn = ep.connect()
    _restart_agent(cluster, "node-2", {"SLACKER_PROTOCOL_VERSION": "4"})
    with conn.cursor() as cur:  # the connection made before the restart still works
        cur.execute("SELECT COUNT(*) FROM shop.items")
        assert cur.fetchone()[0] > 0
    conn.close()
    assert read_pid(cluster.path.parent / "node-2" / "tenants" / "v1" / "run" / "mariadbd.pid") == tenant_pid
    directory = cluster_clients(cluster)[1]
    assert directory.lookup("v1").epoch == epoch
    # At N+2 it cannot re-register through node-1's SQLite directory (node-1 refuses it): its record stays
    # as the N+1 agent left it, nothing clobbered.
    after = directory.member("node-2")
    assert after.protocol == 3 and after.registered_at == pytest.approx(before["node-2"]["registered_at"])
    # N and N+2: refused in one line naming both versions and the host to upgrade; the tenant stays.
    rc, out, err = slacker("migrate", "v2", "--to", "node-2", "--rate", "50MB/s")
    errors = [line for line in err.splitlines() if line.startswith("slacker: error: ")]
    assert rc != 0 and len(errors) == 1, err  # the line before it says which migration started
    for needle in ("protocol version skew", "agent node-1 speaks 2", "agent node-2 speaks 4", "upgrade agent node-1"):
        assert needle in errors[0], errors[0]
    assert _owner(cluster, "v2") == "node-1"
