"""`slacker cluster down` keeps the data and `cluster up --dir DIR` (no option repeated) brings the same cluster back:
every tenant served by the node that served it, with every row, on loopback, with TLS, and on
network-namespace hosts with etcd; `cluster down --purge` then leaves nothing behind."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from slacker import netns
from slacker.agent.client import cluster_clients
from slacker.cli import main
from slacker.client import resolve
from slacker.config import load_cluster

from .conftest import TEST_PORT_RANGE, netns_available
from benchkit.migration import processes_mentioning

ROWS = 500


def _flags(c, netns_hosts: bool) -> list[str]:
    """The options the cluster was made with, as a user would repeat them to `cluster up`."""
    first = c.node("node-1")
    words = ["--nodes", str(len(c.nodes)), "--dir", str(c.path.parent), "--directory", c.directory_backend,
             "--api-port", first.url.rsplit(":", 1)[1], "--port-range", "%d-%d" % TEST_PORT_RANGE,
             "--fault-injection", "--tls" if c.tls_ca else "--no-tls"]
    if netns_hosts:
        words += ["--netns", "--netns-subnet", c.local_subnet]
    else:
        words += ["--address", first.tenant_host]
        if c.directory_backend == "etcd":
            client = c.etcd_endpoints[0].rsplit(":", 1)[1]
            words += ["--etcd-client-port", client]  # the peer port is kept in RUN/etcd/members.json
    return words


def _write_rows(c, tenant: str, node: str) -> None:
    agents, _ = cluster_clients(c)
    agents[node].request("POST", "/v1/tenants", {"id": tenant, "buffer_pool_bytes": 32 << 20}, timeout_s=180)
    conn = resolve(tenant, c).connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE kept")
        cur.execute("CREATE TABLE kept.t (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.executemany("INSERT INTO kept.t VALUES (%s, %s)", [(i, f"row-{i}") for i in range(ROWS)])
    conn.close()


def _rows(c, tenant: str, timeout_s: float = 120) -> tuple[str, int, int]:
    """(owner, row count, sum of ids), retried while the agent starts the tenant's server again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ep = resolve(tenant, c)
            conn = ep.connect()
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*), SUM(id) FROM kept.t")
                n, total = cur.fetchone()
            conn.close()
            return ep.node, n, int(total)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def down_and_up_keeps_every_tenant(c, netns_hosts: bool = False) -> None:
    run_dir = c.path.parent
    placed = {"t1": "node-1", "t2": "node-2"}
    for tenant, node in placed.items():
        _write_rows(c, tenant, node)
    flags = _flags(c, netns_hosts)
    cli = CliRunner()

    r = cli.invoke(main, ["cluster", "down", "--dir", str(run_dir)])
    assert r.exit_code == 0, r.output
    assert processes_mentioning(str(run_dir)) == []  # really down: no agent, tenant or etcd member left
    if netns_hosts:
        assert not {n.namespace for n in netns.plan(run_dir, list(c.nodes), c.local_subnet).nodes} \
            & netns._namespaces()

    t0 = time.monotonic()  # down again: nothing to stop, and no wait on addresses that left with the namespaces
    r = cli.invoke(main, ["cluster", "down", "--dir", str(run_dir)])
    assert r.exit_code == 0 and time.monotonic() - t0 < 10, (r.output, time.monotonic() - t0)

    r = cli.invoke(main, ["cluster", "up", "--dir", str(run_dir)])  # no option repeated: all from its file
    assert r.exit_code == 0, r.output
    again = load_cluster(str(c.path))
    assert again.tls_ca == c.tls_ca and again.local_subnet == c.local_subnet
    assert (again.directory_backend, again.etcd_endpoints) == (c.directory_backend, c.etcd_endpoints)
    assert {n.name: n.url for n in again.nodes.values()} == {n.name: n.url for n in c.nodes.values()}
    assert {n.name: n.tenant_host for n in again.nodes.values()} == {n.name: n.tenant_host for n in c.nodes.values()}
    for tenant, node in placed.items():
        assert _rows(again, tenant) == (node, ROWS, ROWS * (ROWS - 1) // 2)

    r = cli.invoke(main, ["cluster", "up", *flags])  # the same options repeated: accepted as before
    assert r.exit_code == 0, r.output

    # A different shape is refused with both shapes named, and the cluster keeps running.
    other = [w if w != str(len(c.nodes)) else str(len(c.nodes) + 1) for w in flags]
    r = cli.invoke(main, ["cluster", "up", *other])
    assert r.exit_code != 0 and f"was set up with --nodes {len(c.nodes)}" in r.output, r.output
    assert _rows(again, "t1")[1] == ROWS

    r = cli.invoke(main, ["cluster", "down", "--purge", "--dir", str(run_dir)])
    assert r.exit_code == 0 and "removed its data" in r.output, r.output
    assert not run_dir.exists()
    assert processes_mentioning(str(run_dir)) == []
    if netns_hosts:
        assert not netns._link_exists(netns.plan(run_dir, list(c.nodes), c.local_subnet).bridge)


def test_loopback_cluster_down_and_up(make_cluster):
    down_and_up_keeps_every_tenant(make_cluster(nodes=2))


def test_tls_cluster_down_and_up(make_cluster):
    down_and_up_keeps_every_tenant(make_cluster(nodes=2, tls=True))


@netns_available
def test_netns_etcd_cluster_down_and_up(make_cluster):
    """As `sudo slacker cluster up --nodes 3 --netns --directory etcd` makes it (TLS on)."""
    c = make_cluster(nodes=3, directory="etcd", netns=True, tls=True)
    down_and_up_keeps_every_tenant(c, netns_hosts=True)


@pytest.mark.parametrize("option, value", [("--nodes", "3"), ("--no-tls", "--tls"), ("--address", "127.0.0.2")])
def test_another_shape_on_a_stopped_cluster_is_refused(make_cluster, option, value):
    c = make_cluster(nodes=2)
    run_dir = c.path.parent
    assert CliRunner().invoke(main, ["cluster", "down", "--dir", str(run_dir)]).exit_code == 0
    flags = _flags(c, False)
    if option == "--no-tls":
        flags[flags.index(option)] = value
    else:
        flags[flags.index(option) + 1] = value
    r = CliRunner().invoke(main, ["cluster", "up", *flags])
    assert r.exit_code == 4, r.output
    first = c.node("node-1")
    assert (f"was set up with --nodes 2 --directory sqlite --no-tls --address {first.tenant_host} "
            f"--api-port {first.url.rsplit(':', 1)[1]}") in r.output, r.output
    asked = r.output.split("you asked for", 1)[1]
    assert (value if option != "--nodes" else "--nodes 3") in asked and "--purge" in asked
    assert not (run_dir / "node-1" / "agent.pid").exists()  # refused before anything started
