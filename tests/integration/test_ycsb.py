"""The benchmark harness against real tenants: load, open-loop runs, metrics, CLI, following a tenant."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pymysql
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slacker.ycsb import (
    LATENCY_METRIC,
    Harness,
    LoadConfig,
    RunConfig,
    TenantTarget,
    load_table,
    load_workload,
    run_benchmark,
    run_benchmark_subprocess,
)
from slacker.ycsb.generators import build_key_name

ROWS = 2000


def _wl(**overrides):
    base = {"recordcount": ROWS}
    base.update(overrides)
    return load_workload(["workloads/slacker"], base)


def _conn(ep, database="ycsb"):
    return ep.connect(database=database)


def _rows(ep) -> dict[str, tuple]:
    conn = _conn(ep)
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM usertable")
        out = {r[0]: r[1:] for r in cur.fetchall()}
    conn.close()
    return out


def _status(ep, name: str) -> int:
    conn = ep.connect()
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
        value = int(cur.fetchone()[1])
    conn.close()
    return value


def _slacker(*args, env=None):
    p = subprocess.run([sys.executable, "-m", "slacker", *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    return p.returncode, p.stdout, p.stderr


def _password_file(tmp_path, ep) -> str:
    f = tmp_path / "app.password"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, ep.password.encode() + b"\n")
    os.close(fd)
    return str(f)


def test_load_then_open_loop_run(tenant_endpoint):
    ep = tenant_endpoint
    loaded = load_table(LoadConfig(ep, _wl(), threads=3))
    assert loaded.rows == ROWS and loaded.rows_per_s > 0
    before = _rows(ep)
    assert len(before) == ROWS
    assert build_key_name(0) in before and build_key_name(ROWS - 1) in before
    assert {len(v) for row in before.values() for v in row} == {100}

    # The paper's transactions, with some inserts so written rows can be found afterwards.
    wl = _wl(readproportion=0.8, updateproportion=0.1, insertproportion=0.1)
    commits_before = _status(ep, "Com_commit")
    with Harness(RunConfig([TenantTarget.fixed(ep, 60.0)], wl, mpl=10, duration_s=3.0, seed=11,
                           metrics_port=0)) as h:
        h.start()
        res = h.wait()
        text = urllib.request.urlopen(h.metrics_url, timeout=5).read().decode()
    t = res.tenants[0]
    assert t.arrivals > 120 and t.completed == t.arrivals and not t.abandoned and not t.failures
    # The window's verdict (>= 99 % completed within it): on a machine busy with other tests the last arrivals
    # can still be in service (at most the 10 workers) or queued for one when the window closes (CI: 166 of
    # 180 in a 3 s window); they count as not achieved in it, and every one completed in the drain (above).
    assert t.sustained == (t.completed_in_window >= 0.99 * t.arrivals), t
    assert t.sustained or t.arrivals - t.completed_in_window <= 10 + t.queue_at_end, t
    assert t.latency.p50_s < 0.5

    # Operations executed match the mix.
    ops = t.operations
    total = sum(ops.values())
    assert total == 10 * t.completed
    assert ops["read"] / total == pytest.approx(0.8, abs=0.04)
    assert ops["update"] / total == pytest.approx(0.1, abs=0.03)
    assert ops["insert"] / total == pytest.approx(0.1, abs=0.03)
    # Every transaction was a real SQL transaction with its own COMMIT.
    assert _status(ep, "Com_commit") - commits_before >= t.completed

    # Rows written exist: every insert is there under YCSB's key for the next row numbers...
    after = _rows(ep)
    assert len(after) == ROWS + ops["insert"]
    assert all(build_key_name(k) in after for k in range(ROWS, ROWS + ops["insert"]))
    # ... and updates changed loaded rows (at most one row per update).
    changed = sum(1 for k, row in before.items() if after[k] != row)
    assert 0.5 * ops["update"] < changed <= ops["update"]

    # The metrics endpoint parses, and its histogram counts every committed transaction.
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {s.name: s for s in families[LATENCY_METRIC].samples if s.labels.get("tenant") == ep.tenant
               and s.name != LATENCY_METRIC + "_bucket"}
    assert samples[LATENCY_METRIC + "_count"].value == t.completed
    assert samples[LATENCY_METRIC + "_sum"].value == pytest.approx(t.latency.mean_s * t.completed, rel=1e-6)
    assert {s.labels["tenant"] for s in families["slacker_ycsb_queue_length"].samples} == {ep.tenant}


def test_cli_load_run_and_subprocess_api(tenant_endpoint, tmp_path):
    ep = tenant_endpoint
    pw = _password_file(tmp_path, ep)
    direct = ["--host", ep.host, "--port", str(ep.port), "--password-file", pw]
    rc, out, err = _slacker("ycsb", "load", ep.tenant, "-P", "workloads/slacker", "-p", f"recordcount={ROWS}",
                            *direct)
    assert rc == 0, err
    assert f"loaded {ROWS:,} rows into ycsb.usertable" in out and "rows/s" in out
    assert ep.password not in out + err

    # Loading again would collide with the keys: refused in one line.
    rc, out, err = _slacker("ycsb", "load", ep.tenant, "-P", "workloads/slacker", "-p", f"recordcount={ROWS}",
                            *direct)
    assert rc == 4 and err.startswith("slacker: error: table ycsb.usertable") and "--drop" in err

    # Human report.
    rc, out, err = _slacker("ycsb", "run", ep.tenant, "-P", "workloads/slacker", "-p", f"recordcount={ROWS}",
                            "--rate", "40", "--duration", "1.5s", "--seed", "3", *direct)
    assert rc == 0, err
    assert "offered" in out and "achieved" in out and "p99" in out and "run complete" in out
    assert "operations per CPU-second" in out

    # The subprocess API: the same run as a RunResult, plus the per-interval series.
    series = tmp_path / "series.jsonl"
    res = run_benchmark_subprocess([ep.tenant, "-P", "workloads/slacker", "-p", f"recordcount={ROWS}",
                                    "--rate", "50", "--arrival", "constant", "--duration", "2s",
                                    "--out", str(series), "--seed", "5", *direct], timeout_s=60)
    t = res.tenants[0]
    assert res.arrival == "constant" and res.seed == 5 and res.driver == "mysqlclient"
    assert t.arrivals == 100 and t.completed == 100 and t.sustained
    lines = [json.loads(x) for x in series.read_text().splitlines()]
    assert [x["phase"] for x in lines][:2] == ["run", "run"]
    assert sum(x["completed"] for x in lines) == 100
    assert all(x["tenant"] == ep.tenant for x in lines)

    # SIGTERM (a bench or systemd stopping the load) ends the run like Ctrl-C: the summary still comes,
    # even when the caller started it with SIGINT ignored (a background job of a script).
    import signal as _signal
    proc = subprocess.Popen([sys.executable, "-m", "slacker", "ycsb", "run", ep.tenant, "-P", "workloads/slacker",
                             "-p", f"recordcount={ROWS}", "--rate", "40", "--duration", "60s", "--json", *direct],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: _signal.signal(_signal.SIGINT, _signal.SIG_IGN))
    time.sleep(4)
    proc.send_signal(_signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["tenants"][0]["completed"] > 0 and doc["duration_s"] < 30

    # A tenant that was never loaded: the message says what to do.
    rc, out, err = _slacker("ycsb", "run", ep.tenant, "-P", "workloads/slacker", "--database", "nothing",
                            "--rate", "10", "--duration", "1s", *direct)
    assert rc == 3 and "not found" in err and "slacker ycsb load" in err and len(err.strip().splitlines()) == 1


def test_unreachable_tenant_fails_fast(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    pw = tmp_path / "pw"
    pw.write_text("x\n")
    t0 = time.monotonic()
    rc, out, err = _slacker("ycsb", "run", "t1", "-P", "workloads/slacker", "--rate", "10", "--host", "127.0.0.1",
                            "--port", str(port), "--password-file", str(pw))
    assert time.monotonic() - t0 < 10
    assert rc == 1
    assert err.startswith(f"slacker: error: cannot reach tenant t1 at 127.0.0.1:{port}")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_reconnects_after_the_tenant_restarts(tenants, tenant, tenant_endpoint):
    """The server goes away mid-run and comes back: workers reconnect, the gap is recorded, nothing is lost."""
    ep = tenant_endpoint
    load_table(LoadConfig(ep, _wl(recordcount=500), threads=2))

    def bounce():
        tenants.kill_tenant(tenant)
        time.sleep(0.5)
        tenants.start(tenant.id)

    timer = threading.Timer(1.5, bounce)
    timer.start()
    res = run_benchmark(RunConfig([TenantTarget.fixed(ep, 40.0)], _wl(recordcount=500), duration_s=5.0, seed=2))
    timer.join()
    t = res.tenants[0]
    assert t.failures.get("connection_lost", 0) >= 1
    assert t.reconnects >= 1
    assert not t.abandoned
    assert t.completed == t.arrivals
    assert len(t.gaps) == 1 and t.gaps[0].gap_s >= 0.5 and t.gaps[0].reason == "connection_lost"
    assert t.gaps[0].start_s == pytest.approx(1.5, abs=0.3)
    assert t.latency.max_s >= 0.5  # transactions queued behind the outage count it


def test_follows_a_live_migration(cluster):
    """Resolved through the directory, the benchmark follows its tenant to node-2 and records the handover gap."""
    from slacker.agent.client import cluster_clients
    from slacker.ycsb import cluster_resolver

    from benchkit.migration import start_migration, wait_migration

    agents, directory = cluster_clients(cluster)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "y1", "buffer_pool_bytes": 64 * 1024 * 1024},
                             timeout_s=180)
    rc, out, err = _slacker("ycsb", "load", "y1", "-P", "workloads/slacker", "-p", "recordcount=1000")
    assert rc == 0, err
    wl = load_workload(["workloads/slacker"], {"recordcount": 1000})
    with Harness(RunConfig([TenantTarget("y1", 30.0, cluster_resolver("y1", cluster))], wl, duration_s=60.0,
                           seed=4)) as h:
        h.start()
        time.sleep(1.0)
        mig = start_migration(cluster, "y1", target="node-2")
        doc = wait_migration(cluster, "node-1", mig["id"], timeout_s=120)
        assert doc["result"] == "succeeded", doc.get("error")
        time.sleep(1.5)  # some transactions on the new owner
        h.stop(drain=True)
        res = h.wait(timeout_s=60)
    t = res.tenants[0]
    assert (t.epoch_start, t.epoch_end, t.node_end) == (1, 2, "node-2")
    assert t.reconnects >= 1 and not t.abandoned
    assert t.completed == t.arrivals
    assert any(g.epoch_before == 1 and g.epoch_after == 2 for g in t.gaps), t.gaps
    conn = pymysql.connect(host=t.endpoint.split(":")[0], port=int(t.endpoint.split(":")[1]), user="app",
                           password=cluster_resolver("y1", cluster)().password, database="ycsb")
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM usertable")
        assert cur.fetchone()[0] == 1000
    conn.close()
