"""A local cluster on the etcd directory: agents, CLI, a live migration, and an etcd member killed mid-migration."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest
from click.testing import CliRunner

from slacker import local_etcd
from slacker.agent.client import AgentClient, DirectoryClient, cluster_clients
from slacker.cli import main
from slacker.directory import EtcdStore
from slacker.errors import Conflict

from benchkit.migration import node_dir, processes_mentioning, start_migration, wait_migration, wait_phase
from .test_migration import run_migration_under_load

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed")


@pytest.fixture
def etcd_cluster(make_cluster):
    return make_cluster(nodes=2, directory="etcd")


def test_cluster_file_status_and_down(etcd_cluster):
    c = etcd_cluster
    assert c.directory_backend == "etcd" and len(c.etcd_endpoints) == 3
    _, directory = cluster_clients(c)
    assert isinstance(directory, EtcdStore)
    r = CliRunner().invoke(main, ["status"])
    assert r.exit_code == 0, r.output
    assert "directory: etcd healthy, 3/3 members up, leader etcd-" in r.output
    r = CliRunner().invoke(main, ["status", "--json"])
    doc = json.loads(r.output)
    assert doc["directory_backend"] == "etcd" and doc["directory_health"]["healthy"] is True
    etcd_dir = c.path.parent / "etcd"
    pids = [local_etcd.member_pid(etcd_dir, m.name) for m in local_etcd.members_of(etcd_dir)]
    assert all(pids)
    r = CliRunner().invoke(main, ["cluster", "down", "--dir", str(c.path.parent)])
    assert r.exit_code == 0 and "etcd" in r.output, r.output
    assert [m.name for m in local_etcd.members_of(etcd_dir) if local_etcd.member_pid(etcd_dir, m.name)] == []
    assert processes_mentioning(str(etcd_dir)) == []  # no etcd member outlives `cluster down`


def test_every_agent_serves_the_directory_and_its_lock(etcd_cluster):
    """With etcd no agent is special: a lock taken through node-1's API is seen through node-2's."""
    token = etcd_cluster.token()
    via = {n: DirectoryClient(AgentClient(spec.url, token, n)) for n, spec in etcd_cluster.nodes.items()}
    info = via["node-1"].acquire_lock("rebalance", "cron@host-a", 10)
    assert info.holder == "cron@host-a"
    with pytest.raises(Conflict, match="held by cron@host-a"):
        via["node-2"].acquire_lock("rebalance", "cron@host-b", 10)
    assert via["node-2"].lock_info("rebalance").holder == "cron@host-a"
    assert via["node-2"].refresh_lock("rebalance", "cron@host-a").expires_in_s > 0
    via["node-2"].state_put("cooldown/tenant/t1", {"until": 42})
    assert via["node-1"].state_get("cooldown/tenant/t1") == {"until": 42}
    assert via["node-1"].state_list("cooldown/") == {"cooldown/tenant/t1": {"until": 42}}
    assert via["node-1"].release_lock("rebalance", "cron@host-a") is True
    assert via["node-2"].lock_info("rebalance") is None
    assert via["node-1"].health()["backend"] == "etcd"


def test_live_migration_on_the_etcd_directory(etcd_cluster):
    doc, writer = run_migration_under_load(etcd_cluster)
    assert doc["mode"] == "live"
    _, directory = cluster_clients(etcd_cluster)
    assert directory.lookup("mig").epoch == 2
    # A shared tenant there and back: node-2 has no shared server, so the move makes one on a port it claims
    # in etcd; each flip lands on the new node's claimed port and leaves the old node's claim in place.
    from slacker.client import resolve

    r = CliRunner().invoke(main, ["tenant", "create", "t60", "--shared", "--on", "node-1"])
    assert r.exit_code == 0, r.output
    conn = resolve("t60", etcd_cluster).connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY)")
        cur.execute("INSERT INTO kv VALUES (1), (2)")
    conn.close()
    home = directory.lookup("t60").port
    for dst in ("node-2", "node-1"):
        r = CliRunner().invoke(main, ["migrate", "t60", "--to", dst, "--unthrottled"])
        assert r.exit_code == 0, (r.output, r.stderr)
        own = directory.lookup("t60")
        assert own.node == dst and (own.port == home) == (dst == "node-1"), own
        conn = resolve("t60", etcd_cluster).connect()
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM kv")
            assert cur.fetchone()[0] == 2
        conn.close()


def test_etcd_leader_killed_mid_migration(etcd_cluster):
    """SIGKILL the etcd leader while the migration copies: the flip waits out the election and the
    migration succeeds with no acknowledged write lost; the directory names exactly one owner."""
    etcd_leader_killed_mid_migration(etcd_cluster)


def etcd_leader_killed_mid_migration(c) -> None:
    from slacker.ackwriter import AckedWriter

    from benchkit.migration import acked_ids_present, create_loaded_tenant, follow

    create_loaded_tenant(c, "mig", rows=6000)
    _, directory = cluster_clients(c)
    etcd_dir = c.path.parent / "etcd"
    writer = AckedWriter(follow(c, "mig"), rate_per_s=200).start()
    try:
        time.sleep(0.5)
        doc = start_migration(c, "mig", target="node-2", rate_bytes_per_s=5_000_000)
        wait_phase(c, "node-1", doc["id"], "snapshot", timeout_s=60)
        leader = directory.health()["leader"]
        os.kill(local_etcd.member_pid(etcd_dir, leader), signal.SIGKILL)
        doc = wait_migration(c, "node-1", doc["id"], timeout_s=240)
        time.sleep(1.0)
    finally:
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    own = directory.lookup("mig")
    assert (own.node, own.epoch) == ("node-2", 2)
    assert acked_ids_present(c, "mig", writer.acked) == set(), "acknowledged writes lost"
    assert not (node_dir(c, "node-1") / "tenants/mig").exists()
    h = directory.health()
    assert h["healthy"] and h["members_up"] == 2 and h["leader"] != leader


def _fenced_on_disk(cluster, node: str, tenant: str) -> bool:
    try:
        return bool(json.loads((node_dir(cluster, node) / "tenants" / tenant / "tenant.json").read_text()).get("fenced"))
    except (OSError, ValueError):
        return False


def test_no_etcd_quorum_at_the_flip_fails_closed(etcd_cluster):
    """Two of three etcd members die while the source is fenced just before the compare-and-set:
    the migration neither flips nor unfences; it waits with the source fenced, says why, and once the
    quorum is back the directory's answer decides. Never two owners, no acknowledged write lost."""
    no_etcd_quorum_at_the_flip(etcd_cluster)


def no_etcd_quorum_at_the_flip(c) -> None:
    from slacker.ackwriter import AckedWriter
    from slacker.errors import DirectoryUnavailable

    from benchkit.migration import acked_ids_present, create_loaded_tenant, follow, wait_writer_on

    from slacker.ackwriter import WriteProber
    from slacker.client import resolve

    create_loaded_tenant(c, "mig", rows=1000)
    agents, directory = cluster_clients(c)
    etcd_dir = c.path.parent / "etcd"
    ep = resolve("mig", c)
    # A write tried on every node's copy every 100 ms: two accepting at once would be two owners.
    prober = WriteProber({n.name: (n.tenant_host, ep.port) for n in c.nodes.values()}, ep.user, ep.password).start()
    writer = AckedWriter(follow(c, "mig"), rate_per_s=100).start()
    try:
        time.sleep(0.5)
        doc = start_migration(c, "mig", target="node-2", hold_s={"fenced": 6}, max_freeze_s=30)
        deadline = time.monotonic() + 120
        while not _fenced_on_disk(c, "node-1", "mig"):
            assert time.monotonic() < deadline, "the source was never fenced"
            time.sleep(0.05)
        for m in local_etcd.members_of(etcd_dir)[1:]:
            os.kill(local_etcd.member_pid(etcd_dir, m.name), signal.SIGKILL)
        # The hold ends and the flip meets a directory without quorum: the migration says so and waits.
        deadline = time.monotonic() + 60
        while True:
            mid = agents["node-1"].request("GET", f"/v1/migrations/{doc['id']}")
            assert mid["active"], mid.get("error")
            if "directory unreachable" in mid["finishing_reason"]:
                break
            assert time.monotonic() < deadline, f"no word of the outage: {mid['phase']} {mid['finishing_reason']!r}"
            time.sleep(0.5)
        assert _fenced_on_disk(c, "node-1", "mig")  # still fenced: no writes on the old owner meanwhile
        acked_during = len(writer.acked)
        time.sleep(2)
        assert len(writer.acked) == acked_during, "writes were acknowledged while the directory was down"
        with pytest.raises(DirectoryUnavailable):
            directory.lookup("mig")
        local_etcd.start(etcd_dir, [])  # the quorum returns
        doc = wait_migration(c, "node-1", doc["id"], timeout_s=120)
        if doc["result"] == "succeeded":
            wait_writer_on(writer, "node-2")
    finally:
        writer.stop()
        prober.stop()
    assert prober.double_writable == [], f"two writable servers at once: {prober.double_writable}"
    assert prober.rounds > 10  # it really probed, through the outage
    assert doc["result"] == "succeeded", doc.get("error")
    assert doc["directory_outage_s"] and doc["directory_outage_s"] >= 5
    own = directory.lookup("mig")
    assert (own.node, own.epoch) == ("node-2", 2)  # one flip, one owner
    assert acked_ids_present(c, "mig", writer.acked) == set(), "acknowledged writes lost"
    assert writer.client.endpoint.node == "node-2"
