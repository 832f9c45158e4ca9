"""Both ends guarded by default: a busy target node throttles the copy, with no Prometheus anywhere.

Real agents: the migrating tenant is idle on node-1; a tenant on node-2 runs
transactions that take ~100 ms each. The source agent reads node-2's counters
from node-2's agent every step, so the target side binds: refused up front,
throttled to a stop with --force (shown in status and the time series), and
released by a live setpoint change, after which the migration completes.
"""

import json
import threading
import time

import pytest

from slacker.agent.client import cluster_clients
from slacker.client import resolve

from benchkit.migration import create_loaded_tenant, evict_backup_tool
from .test_cli import one_line_error, slacker


def busy_load(cluster, tenant_id: str, stop: threading.Event) -> threading.Thread:
    """Transactions of ~100 ms (a sleep inside each), one after another, until stopped."""
    def run() -> None:
        conn = resolve(tenant_id, cluster).connect(autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE IF NOT EXISTS w")
                cur.execute("CREATE TABLE IF NOT EXISTS w.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
                conn.commit()
                while not stop.is_set():
                    cur.execute("INSERT INTO w.t (v) VALUES (1)")
                    cur.execute("DO SLEEP(0.1)")
                    conn.commit()
        finally:
            conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def outgoing(tenant_id: str) -> dict:
    doc = json.loads(slacker("status", "--json")[1])
    return [m for n in doc["nodes"] for m in n.get("migrations", [])
            if m.get("tenant") == tenant_id and m.get("direction") != "incoming"][-1]


@pytest.mark.slow
def test_a_busy_target_throttles_the_copy(cluster):
    create_loaded_tenant(cluster, "mv", rows=4000, node="node-1")
    agents, _ = cluster_clients(cluster)
    agents["node-2"].request("POST", "/v1/tenants", {"id": "busy", "buffer_pool_bytes": 32 * 1024 * 1024},
                             timeout_s=180)
    stop = threading.Event()
    loader = busy_load(cluster, "busy", stop)
    try:
        # The refusal up front may take its figure at once from the agents' windows (the migration's seed):
        # wait until the target agent's window holds the load (at least the 3 transactions it needs for a
        # latency), not a fixed 3 s. A window without them reads as an idle target: on a loaded machine
        # the copy was admitted on the source's own figure, held at 0 by the target, and the foreground
        # migrate never returned (timed out after 180 s, 1 run in 16).
        def window() -> list[dict]:
            rows = agents["node-2"].request("GET", "/v1/tenant-stats", query={"history": 0})["tenants"]
            return [r for r in rows if r["tenant"] == "busy" and r.get("latency_s") is not None
                    and r["transactions_per_s"] * r["window_s"] >= 3]

        deadline = time.monotonic() + 30
        while not window() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert window() and window()[0]["latency_s"] > 0.03, window()
        # The target agent publishes the counters the guard reads.
        doc = agents["node-2"].request("GET", "/v1/tenant-stats", query={"counters": 1})
        assert [c["tenant"] for c in doc["counters"]] == ["busy"] and doc["counters"][0]["count"] > 0
        # Refused before any byte moves: the target is over the setpoint, the (idle) source is not.
        rc, out, err = slacker("migrate", "mv", "--to", "node-2", "--setpoint", "30ms")
        one_line_error(rc, err, "target node node-2 is already over its setpoint", "--target-setpoint")
        # With --force the copy starts (at 2 % of 2 MB/s) and the target side throttles it: held through
        # the start window, then cut while it stays over (to 0 given time). The backup tool is cold, so
        # this happens while the pipe reads it in; at this low --max-rate a read-in held at its start
        # rate once took minutes after the setpoint was raised (80 kB/s for a 26 MB program).
        evict_backup_tool()
        rc, out, err = slacker("migrate", "mv", "--to", "node-2", "--setpoint", "30ms", "--force",
                               "--max-rate", "2MB/s", "--detach")
        assert rc == 0, err
        deadline = time.monotonic() + 40
        while True:
            mig = outgoing("mv")
            ctl = mig.get("controller") or {}
            if ((ctl.get("binding") == "target" and ctl.get("rate_bytes_per_s") is not None
                 and ctl["rate_bytes_per_s"] <= 20_000) or time.monotonic() > deadline):
                break
            time.sleep(0.5)
        assert ctl.get("binding") == "target", ctl
        assert ctl["rate_bytes_per_s"] <= 20_000 and mig["phase"] == "snapshot", ctl  # half the initial rate
        assert ctl["target_latency_s"] > 0.05 and ctl["target_setpoint_s"] == 0.03
        assert "target binds" in slacker("status")[1]
        series = [json.loads(x) for x in agents["node-1"].request("GET", f"/v1/migrations/{mig['id']}/series")["lines"]]
        assert any(s.get("binding") == "target" and s.get("target_latency_s") for s in series)
        # The target's setpoint follows the source's: raised live, the copy resumes and completes.
        assert slacker("migrate", "mv", "--set", "setpoint=5s")[0] == 0
        deadline = time.monotonic() + 120
        while mig["active"] and time.monotonic() < deadline:
            time.sleep(0.5)
            mig = outgoing("mv")
        assert mig["result"] == "succeeded", mig.get("error")
    finally:
        stop.set()
        loader.join(10)
