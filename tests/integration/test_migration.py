"""Live migration with real mariadbd, mariabackup, sockets and agents, under a write load.

Each test checks outcomes a user cares about: every acknowledged commit is on the
new owner, checksums are equal, the old process is gone, the directory moved by
exactly one epoch, and nothing of the migration is left behind.
"""

import json

import pytest

from slacker.agent.client import cluster_clients
from slacker.client import resolve
from slacker.procs import alive
from slacker.tenants import DEFAULT_BUFFER_POOL_BYTES

from benchkit.migration import (acked_ids_present, create_loaded_tenant, follow, node_dir, processes_mentioning,
                                start_migration, tenant_checksums, wait_migration)
from slacker.ackwriter import AckedWriter


def run_migration_under_load(cluster, **options):
    create_loaded_tenant(cluster, "mig")
    agents, directory = cluster_clients(cluster)
    before = directory.lookup("mig")
    src_pid = int(open(node_dir(cluster, "node-1") / "tenants/mig/run/mariadbd.pid").read())
    writer = AckedWriter(follow(cluster, "mig"), rate_per_s=200).start()
    try:
        import time
        time.sleep(1.0)
        doc = start_migration(cluster, "mig", target="node-2", verify=True, **options)
        doc = wait_migration(cluster, "node-1", doc["id"])
        time.sleep(1.0)  # the writer keeps going on the new owner
    finally:
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    after = directory.lookup("mig")
    assert (after.node, after.epoch) == ("node-2", before.epoch + 1)
    assert after.port == before.port  # a tenant keeps its port
    assert doc["verified"] is True
    assert not alive(src_pid)
    assert not (node_dir(cluster, "node-1") / "tenants/mig").exists()
    assert len(writer.acked) > 100
    assert acked_ids_present(cluster, "mig", writer.acked) == set(), "acknowledged writes lost"
    # the writer followed the tenant and wrote on the new owner too
    assert writer.client.endpoint.node == "node-2"
    assert processes_mentioning(doc["id"]) == []
    checks = tenant_checksums(cluster, "mig")
    assert checks.get("shop.items") is not None and checks.get("acks.log") is not None
    return doc, writer


def test_live_migration_unthrottled_under_writes(cluster):
    doc, writer = run_migration_under_load(cluster)
    assert doc["mode"] == "live" and doc["unthrottled"]
    assert doc["rounds"], "no delta round recorded"
    assert doc["freeze_ms"] is not None and doc["freeze_ms"] < 5000
    names = [p["name"] for p in doc["phases"]]
    # --verify: compared at one position between the rounds, then rounds catch up before the handover
    assert names == ["preflight", "snapshot", "prepare", "delta", "verify", "delta", "handover", "cleanup"]
    v = doc["verify"]
    assert v["result"] == "equal" and v["position"] and v["tables_done"] == v["tables_total"] >= 2, v
    assert "verified" not in doc["handover_steps_ms"], "nothing of the verification is in the freeze"


def test_live_migration_fixed_rate(cluster):
    doc, _ = run_migration_under_load(cluster, rate_bytes_per_s=4_000_000)
    # The throttle held: the copy's rate over its seconds, leaving out those under the backup tool's commit
    # lock, which the pipe runs unthrottled so that every tenant's commits wait as briefly as possible (on a
    # loaded machine the tool's last stage copies a redo backlog of several MB there: the whole copy's
    # average then read 5.1 MB/s against the 4 MB/s set). A lock shorter than a sample shows only in the
    # series' running `unthrottled_s`; a pipe may count its bytes a moment late, so the second after a lock
    # is left out too.
    series = [json.loads(line) for line in open(doc["series_path"])]
    snap = [s for s in series if s["phase"] == "snapshot"]
    pairs = list(zip(snap, snap[1:]))
    locked = [bool(a.get("commit_locked") or b.get("commit_locked")
                   or a.get("unthrottled_s", 0) != b.get("unthrottled_s", 0)) for a, b in pairs]
    steps = [p for i, p in enumerate(pairs) if not locked[i] and not (i and locked[i - 1])]
    moved = sum(b["bytes_done"] - a["bytes_done"] for a, b in steps)
    took = sum(b["t"] - a["t"] for a, b in steps)
    assert moved >= 8_000_000 and took >= 1.5, (moved, took, snap)  # ~10+ MB at 4 MB/s take seconds
    assert moved / took < 4_000_000 * 1.25, (moved / took, moved, took, snap)


def test_stop_and_copy(cluster):
    doc, writer = run_migration_under_load(cluster, mode="stop-and-copy")
    assert [p["name"] for p in doc["phases"]] == ["preflight", "copy", "handover", "cleanup"]
    assert doc["freeze_ms"] > 0


def test_migrate_back_and_forth(cluster):
    create_loaded_tenant(cluster, "ping", rows=500)
    agents, directory = cluster_clients(cluster)
    for src, dst in (("node-1", "node-2"), ("node-2", "node-1")):
        d = start_migration(cluster, "ping", target=dst)
        d = wait_migration(cluster, src, d["id"])
        assert d["result"] == "succeeded", d.get("error")
        # The tenant's own buffer pool (64M at create, not the default) moved with it.
        conn = resolve("ping", cluster).connect()
        with conn.cursor() as cur:
            cur.execute("SELECT @@innodb_buffer_pool_size")
            assert cur.fetchone()[0] == 64 << 20 != DEFAULT_BUFFER_POOL_BYTES
        conn.close()
    own = directory.lookup("ping")
    assert (own.node, own.epoch) == ("node-1", 3)
