"""Online verification (--verify): source and target compared at one GTID position between the delta
rounds and the handover, while the tenant keeps serving.

Under a write load with multi-statement transactions the copy is verified equal and every
acknowledged write is on the target; a row changed on the target's copy behind Slacker's back is
found and named, and the migration fails with the source serving; either agent killed while the
chunks are being summed rolls back like any fault before the flip.
"""

import json
import time

import pytest

from slacker.agent.client import cluster_clients
from slacker.client import resolve
from slacker.config import load_agent_config
from slacker.tenants import TenantManager

from benchkit.faults import Scenario
from benchkit.migration import node_dir, start_migration, wait_migration, wait_phase

FAST = {"lease_ttl_s": 4}


@pytest.fixture
def scenario(cluster):
    s = Scenario(cluster, oltp_clients=4)
    yield s
    s.stop()


def migrate(s, **kw):
    return start_migration(s.cluster, s.tenant, target="node-2", verify=True, **FAST, **kw)["id"]


def set_(s, mid, body):
    agents, _ = cluster_clients(s.cluster)
    return agents["node-1"].request("POST", f"/v1/migrations/{mid}/set", body)


def status(s, mid):
    agents, _ = cluster_clients(s.cluster)
    return agents["node-1"].request("GET", f"/v1/migrations/{mid}")


def target_copy(s):
    """The incoming copy on node-2, as its agent manages it (admin connection over its socket)."""
    cfg = load_agent_config(node_dir(s.cluster, "node-2") / "agent.toml")
    return TenantManager(cfg.data_root, host=cfg.tenant_host, node="node-2").get(s.tenant)


def test_verified_migration_under_oltp_load_paced_paused_and_resumed(scenario):
    s = scenario
    conn = resolve(s.tenant, s.cluster).connect()  # a table without a primary key: summed whole
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE shop.notes (k INT, note TEXT)")
        cur.execute("INSERT INTO shop.notes VALUES (1, 'a'), (1, 'a'), (2, NULL), (3, '')")
        # a composite key, in several chunks (the first holds 200 rows): ranges over (a, b)
        cur.execute("CREATE TABLE shop.pairs (a INT, b VARCHAR(12), v INT, PRIMARY KEY (a, b))")
        cur.execute("INSERT INTO shop.pairs VALUES " + ",".join(f"({i % 7}, 'k{i}', {i})" for i in range(1000)))
    conn.close()
    # Under the latency controller, as a copy is: same setpoint, same target guard, --set works.
    mid = migrate(s, hold_s={"verify": 2}, controller={"setpoint_s": 2.0, "force": True})
    wait_phase(s.cluster, "node-1", mid, "verify", timeout_s=120)
    set_(s, mid, {"pause": True})  # --set pause: verification starts paused, like a paused copy
    time.sleep(3)
    doc = status(s, mid)
    assert doc["phase"] == "verify" and doc["verify"]["bytes_done"] == 0, doc["verify"]
    assert doc["verify"]["rate_bytes_per_s"] == 0 and doc["eta_s"] is None
    set_(s, mid, {"resume": True})
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=180)
    assert doc["result"] == "succeeded", doc.get("error")
    v = doc["verify"]
    assert v["result"] == "equal" and doc["verified"] is True, v
    assert v["tables_done"] == v["tables_total"] >= 4 and v["rows"] > 2000, v  # shop.*, acks.*, the OLTP tables
    assert "verified" not in doc["handover_steps_ms"]
    assert v["chunks"] >= v["tables_total"] + 1, v  # shop.pairs and shop.items took more than one chunk
    assert "shop.notes" in v["whole_tables"] and any("--verify sums each" in w for w in doc["warnings"]), doc
    names = [p["name"] for p in doc["phases"]]
    assert names[names.index("verify") + 1] == "delta", names  # the rounds catch up before the handover
    agents, _ = cluster_clients(s.cluster)
    series = [json.loads(x) for x in agents["node-1"].request("GET", f"/v1/migrations/{mid}/series")["lines"]]
    steered = [x for x in series if x["phase"] == "verify" and x.get("setpoint_s") == 2.0 and "verify_tables_done" in x]
    assert steered and any(x["rate_bytes_per_s"] == 0 for x in steered), "verification steps in the time series"
    assert all("target_latency_s" in x for x in steered), "the target guard steers verification too"
    assert s.check(mid) == "node-2"  # every acknowledged write on the target, nothing left on node-1
    r = s.oltp_check()
    assert r.ok, r


def test_a_row_changed_on_the_target_is_found_named_and_the_source_keeps_serving(scenario):
    s = scenario
    mid = migrate(s, hold_s={"verify": 4}, verify_chunk_bytes=64 * 1024)  # several chunks per table
    wait_phase(s.cluster, "node-1", mid, "verify", timeout_s=120)
    # Behind Slacker's back: not in the source's binlog, so replication will never undo it.
    conn = target_copy(s).admin_connect(timeout_s=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("UPDATE shop.items SET name = 'changed' WHERE id = 1500")
            assert cur.rowcount == 1
    finally:
        conn.close()
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=180)
    assert doc["result"] == "failed" and doc["verified"] is False
    e = doc["error"]
    assert e["phase"] == "verify" and e["what"].startswith("verification failed at 0-"), e
    # the table and the primary-key range of the differing chunk, on one line
    assert e["why"].startswith("shop.items rows id > ") and "\n" not in e["why"], e
    lo = int(e["why"].split("id > ")[1].split()[0])
    hi = int(e["why"].split("<= ")[1].split(":")[0]) if "<= " in e["why"] else 10 ** 9
    assert lo < 1500 <= hi and hi - lo < 1000, e["why"]  # the differing chunk, not the whole table
    assert doc["freeze_ms"] is None and doc["epoch_after"] is None  # never frozen, never flipped
    assert s.check(mid) == "node-1"


def test_a_difference_under_a_composite_key_is_named_by_its_key_range(scenario):
    s = scenario
    conn = resolve(s.tenant, s.cluster).connect()
    with conn.cursor() as cur:  # sorts before shop.items: the first difference found is here
        cur.execute("CREATE TABLE shop.a_pairs (a INT, b VARCHAR(12), pad TEXT, PRIMARY KEY (a, b))")
        cur.execute("INSERT INTO shop.a_pairs VALUES "
                    + ",".join(f"({i % 7}, 'k{i}', REPEAT('x', 200))" for i in range(3000)))
    conn.close()
    mid = migrate(s, hold_s={"verify": 4}, verify_chunk_bytes=64 * 1024)
    wait_phase(s.cluster, "node-1", mid, "verify", timeout_s=120)
    conn = target_copy(s).admin_connect(timeout_s=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DELETE FROM shop.a_pairs WHERE a = 2 AND b = 'k1500'")  # a row missing on the target
            assert cur.rowcount == 1
    finally:
        conn.close()
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=180)
    e = doc["error"]
    assert doc["result"] == "failed" and e["phase"] == "verify", doc
    assert e["why"].startswith("shop.a_pairs rows (a,b) "), e
    src_rows = int(e["why"].split("source ")[1].split()[0])
    assert f"target {src_rows - 1} rows" in e["why"], e  # the missing row, counted

    def key(text):
        a, b = text.strip("()").split(",")
        return int(a), b

    why = e["why"].split(": source")[0]
    lo = key(why.split("> ")[1].split(" and")[0]) if "> " in why else (-1, "")
    hi = key(why.split("<= ")[1]) if "<= " in why else (99, "")
    assert lo < (2, "k1500") <= hi, why
    assert s.check(mid) == "node-1"


@pytest.mark.parametrize("node", ["node-1", "node-2"])
def test_agent_killed_while_verifying_rolls_back(scenario, node):
    s = scenario
    mid = migrate(s, hold_s={"verify": 2})
    wait_phase(s.cluster, "node-1", mid, "verify", timeout_s=120)
    set_(s, mid, {"rate_bytes_per_s": 300_000})  # slow enough to be killed mid-way (~5 MB of rows)
    wait_phase(s.cluster, "node-1", mid, "verify", timeout_s=60, min_bytes=1)  # both snapshots open, summing
    s.kill_agent(node)
    assert "node-1" in s.writable(), "the source serves on, never frozen"
    if node == "node-2":
        doc = wait_migration(s.cluster, "node-1", mid, timeout_s=90)
        assert doc["result"] == "failed" and doc["error"]["phase"] == "verify", doc["error"]
        s.restart_agent("node-2")
    else:
        s.restart_agent("node-1")
        agents, _ = cluster_clients(s.cluster)
        deadline = time.monotonic() + 90
        while True:
            try:
                doc = agents["node-1"].request("GET", f"/v1/migrations/{mid}", timeout_s=5)
                if not doc["active"]:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert doc["result"] == "failed" and doc["recovered"]
    assert s.check(mid) == "node-1"
