"""Nodes as separate network hosts (`cluster up --netns`): each node in a network namespace of its
own on a bridge, on the etcd directory. The curated CI set of migration and failure tests that runs
across real interfaces: a live migration under load, an etcd member killed mid-migration, and no etcd
quorum at the flip. Like `cluster up --netns`, the cluster runs with TLS on every channel."""

from __future__ import annotations

import http.client
import os
import signal
import socket
from pathlib import Path

import pymysql
import pytest
from click.testing import CliRunner

from slacker import netns
from slacker.agent.client import cluster_clients
from slacker.cli import main
from slacker.client import resolve
from slacker.procs import read_pid, wait_gone
from slacker.router import local as local_router
from slacker.router.control import fetch_status

from .conftest import netns_available
from benchkit.faults import Scenario
from benchkit.migration import node_dir, processes_mentioning
from .test_etcd_cluster import etcd_leader_killed_mid_migration, no_etcd_quorum_at_the_flip
from .test_handover_faults import test_source_agent_killed_after_flip as source_agent_killed_after_flip
from .test_migration import run_migration_under_load

pytestmark = [netns_available]


@pytest.fixture
def netns_cluster(make_cluster):
    return make_cluster(nodes=3, directory="etcd", netns=True, tls=True)  # as `cluster up --netns` makes it


def _tx_bytes(dev: str) -> int:
    return int(Path(f"/sys/class/net/{dev}/statistics/tx_bytes").read_text())


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def test_nodes_are_separate_hosts_and_down_removes_them(netns_cluster):
    c = netns_cluster
    run_dir = c.path.parent
    plan = netns.load(run_dir)
    root_ns = netns.namespace_of_pid(1)
    spaces = {netns.namespace_of_pid(read_pid(node_dir(c, n) / "agent.pid")) for n in c.nodes}
    assert len(spaces) == 3 and root_ns not in spaces  # three namespaces, none of them the root's
    addresses = {n.tenant_host for n in c.nodes.values()}
    assert addresses == {n.address for n in plan.nodes}
    assert all(a.startswith("10.") for a in addresses)
    assert all(e.split("//")[1].split(":")[0] in plan.etcd_addresses for e in c.etcd_endpoints)
    # Like `cluster up --netns`: every link that crosses the bridge is TLS, the directory's too.
    assert all(n.url.startswith("https://") for n in c.nodes.values())
    assert all(e.startswith("https://") for e in c.etcd_endpoints)
    host, port = c.etcd_endpoints[0].split("//")[1].split(":")
    plain = http.client.HTTPConnection(host, int(port), timeout=5)
    try:  # a plain-text client gets nothing: the connection is closed, or at most a 400
        plain.request("GET", "/version")
        answer = plain.getresponse()
        assert answer.status != 200 and b"etcdserver" not in answer.read()
    except (http.client.RemoteDisconnected, ConnectionResetError):
        pass
    finally:
        plain.close()

    agents, _ = cluster_clients(c)
    agents["node-2"].request("POST", "/v1/tenants", {"id": "t1", "buffer_pool_bytes": 32 << 20}, timeout_s=180)
    ep = resolve("t1", c)
    assert ep.host == c.node("node-2").tenant_host  # the namespace's address, not 127.x
    conn = ep.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
    conn.close()
    # The tenant listens inside node-2's namespace only: not on the root's loopback, nor on node-1's.
    assert not _reachable("127.0.0.1", ep.port)
    r = CliRunner().invoke(main, ["locate", "t1", "--json"])
    assert r.exit_code == 0 and f'"{ep.host}"' in r.output, r.output
    # The credentials come from node-2's agent over the bridge, into a 0600 file, not the terminal.
    creds = run_dir / "t1.cnf"
    r = CliRunner().invoke(main, ["locate", "t1", "--defaults-file", str(creds)])
    assert r.exit_code == 0 and ep.password not in r.output, r.output
    assert creds.stat().st_mode & 0o777 == 0o600
    ca = getattr(c, "tls_ca", None)  # a TLS cluster's tenants refuse plain text
    conn = pymysql.connect(read_default_file=str(creds), **({"ssl": {"ca": str(ca)}} if ca else {"ssl_disabled": True}))
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone()[0].startswith("app@")
    conn.close()

    r = CliRunner().invoke(main, ["cluster", "down", "--dir", str(run_dir)])
    assert r.exit_code == 0 and "network namespaces" in r.output, r.output
    assert not {n.namespace for n in plan.nodes} & netns._namespaces()
    assert not netns._link_exists(plan.bridge)
    assert not any(netns._link_exists(n.veth_root) for n in plan.nodes)
    assert processes_mentioning(str(run_dir)) == []
    assert netns.teardown(run_dir) == []  # again: nothing left to do


def test_live_migration_across_interfaces(netns_cluster):
    """A live migration under an acknowledged write load between two namespaces: 0 lost, and the
    copy really crossed the target's interface."""
    plan = netns.load(netns_cluster.path.parent)
    into_target = plan.node("node-2").veth_root  # its root end transmits what enters node-2's namespace
    before = _tx_bytes(into_target)
    doc, writer = run_migration_under_load(netns_cluster)
    assert doc["mode"] == "live"
    assert _tx_bytes(into_target) - before >= doc["bytes_total"] > 5_000_000
    _, directory = cluster_clients(netns_cluster)
    assert directory.lookup("mig").host == netns_cluster.node("node-2").tenant_host


def test_the_router_holds_tenants_of_netns_hosts(netns_cluster):
    """A router started the default way (on this machine's loopback) announces an admin address the
    agents in their namespaces reach, so it holds the tenant in the handover: no migration warning
    that it did not answer, and its hold counted."""
    run_dir = netns_cluster.path.parent
    admin = local_router.start(run_dir, netns_cluster.path, "127.0.0.1:0")
    try:
        assert admin.rsplit(":", 1)[0] == netns.load(run_dir).root_address
        doc, _ = run_migration_under_load(netns_cluster)
        assert not [w for w in doc["warnings"] if "did not answer the hold" in w], doc["warnings"]
        mig = next(t for t in fetch_status(admin)["tenants"] if t["tenant"] == "mig")
        assert mig["holds_total"] >= 1, mig
    finally:
        local_router.stop(run_dir)


def test_etcd_member_killed_mid_migration(netns_cluster):
    etcd_leader_killed_mid_migration(netns_cluster)


def test_no_etcd_quorum_at_the_flip_fails_closed(netns_cluster):
    no_etcd_quorum_at_the_flip(netns_cluster)


def test_source_agent_killed_after_flip_on_netns_hosts(netns_cluster):
    """A handover fault with the full check: the source's agent SIGKILLed past the flip and started
    again inside its namespace; afterwards exactly one server (the directory's) accepts writes, no
    acknowledged write is lost, and so it stays after every agent is restarted once more."""
    s = Scenario(netns_cluster)
    try:
        source_agent_killed_after_flip(s)
    finally:
        s.stop()
    spaces = {netns.namespace_of_pid(read_pid(node_dir(netns_cluster, n) / "agent.pid")) for n in netns_cluster.nodes}
    assert len(spaces) == 3 and netns.namespace_of_pid(1) not in spaces  # restarted agents are back in theirs


def test_netns_needs_root(monkeypatch, tmp_path):
    from slacker import local_cluster
    from slacker.errors import SlackerError

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(SlackerError, match="--netns needs root"):
        local_cluster.up(tmp_path / "run", nodes=2, netns=True)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    monkeypatch.setattr(netns.os, "access", lambda p, m: False)
    with pytest.raises(SlackerError, match="ip command is not installed"):
        local_cluster.up(tmp_path / "run", nodes=2, netns=True)


def test_no_password_crosses_plain_http_to_another_host(make_cluster):
    """The same nodes, but the cluster file no longer says their bridge stays inside this machine
    (as on real hosts without TLS): the agents refuse to hand out credentials and a migration
    refuses to send the tenant's passwords, before anything is copied."""
    from slacker import local_cluster
    from slacker.agent.client import AgentClient
    from slacker.errors import InsecureChannel, SlackerError

    from benchkit.migration import start_migration, wait_migration

    c = make_cluster(nodes=2, netns=True)
    agents, _ = cluster_clients(c)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "t1", "buffer_pool_bytes": 32 << 20}, timeout_s=180)
    text = c.path.read_text()
    c.path.write_text("".join(line + "\n" for line in text.splitlines() if not line.startswith("local_subnet")))
    for n in c.nodes:
        d = node_dir(c, n)
        pid = read_pid(d / "agent.pid")
        os.kill(pid, signal.SIGTERM)
        assert wait_gone(pid, 30)
        local_cluster._spawn_agent(d)
        local_cluster._wait_answering(AgentClient(c.node(n).url, c.token(), n, timeout_s=5), d)
    with pytest.raises(InsecureChannel, match="not sent over plain HTTP"):
        resolve("t1", c)
    r = CliRunner().invoke(main, ["locate", "t1", "--defaults-file", str(c.path.parent / "t1.cnf")])
    assert r.exit_code != 0 and "not sent over plain HTTP" in r.output, r.output
    assert not (c.path.parent / "t1.cnf").exists()
    try:  # refused at the start, or failed in its preflight: either way before any request to node-2
        doc = wait_migration(c, "node-1", start_migration(c, "t1", target="node-2")["id"], timeout_s=60)
        assert doc["result"] == "failed"
        message = str(doc["error"])
    except SlackerError as exc:
        message = exc.one_line()
    assert "refusing to send t1's account passwords to node-2" in message
    assert "plain HTTP to another host" in message
    assert not (node_dir(c, "node-2") / "tenants" / "t1").exists()
    _, directory = cluster_clients(c)
    assert directory.lookup("t1").node == "node-1"
