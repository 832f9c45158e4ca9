"""A real migration steered by latency: harness-driven tenant, Prometheus latency, PID rate.

Asserts on the recorded series, not on timing: with a setpoint below the
latency the controller cuts the copy to a pause; raised live with --set, it
lets the copy run again and the migration completes.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from .test_cli import one_line_error, slacker


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@pytest.mark.slow
def test_controller_steers_the_copy(cluster, tmp_path):
    assert slacker("tenant", "create", "pid1", "--buffer-pool", "64M")[0] == 0
    rc, out, err = slacker("ycsb", "load", "pid1", "-P", "workloads/slacker", "-p", "recordcount=20000")
    assert rc == 0, err
    port = free_port()
    harness = subprocess.Popen(
        [sys.executable, "-m", "slacker", "ycsb", "run", "pid1", "-P", "workloads/slacker",
         "-p", "recordcount=20000", "--rate", "30", "--duration", "10m", "--metrics-port", str(port), "--quiet",
         "--seed", "7"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(5)
        source = f"prometheus,url=http://127.0.0.1:{port}/metrics,tenant=pid1"
        # A setpoint nobody can meet is refused up front, with the measured latency in the message...
        rc, out, err = slacker("migrate", "pid1", "--to", "node-2", "--setpoint", "0.1ms",
                               "--latency-source", source)
        one_line_error(rc, err, "below the latency measured now", "the median of")
        # ... and a source that does not answer fails before any byte moves.
        one_line_error(*slacker("migrate", "pid1", "--to", "node-2", "--setpoint", "1s", "--latency-source",
                                f"prometheus,url=http://127.0.0.1:{free_port()}/metrics")[::2],
                       "cannot read the latency source")
        one_line_error(*slacker("migrate", "pid1", "--to", "node-2", "--setpoint", "1s", "--gains", "a,b,c")[::2],
                       "gains")
        # With --force it starts, and the controller pauses the copy: latency is above the setpoint.
        rc, out, err = slacker("migrate", "pid1", "--to", "node-2", "--setpoint", "0.1ms", "--force",
                               "--max-rate", "20MB/s", "--latency-source", source, "--detach")
        assert rc == 0, err
        deadline = time.monotonic() + 30
        while True:
            doc = json.loads(slacker("status", "--json")[1])
            mig = [m for n in doc["nodes"] for m in n.get("migrations", []) if m.get("tenant") == "pid1" and m.get("direction") != "incoming"][0]
            if (mig.get("controller") or {}).get("rate_bytes_per_s") == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert mig["controller"]["rate_bytes_per_s"] == 0, mig["controller"]
        assert mig["phase"] == "snapshot"
        rc, out, err = slacker("status")
        assert "vs setpoint 0ms" in out or "setpoint" in out
        paused_bytes = mig["bytes_done"]
        # The load alone is over the setpoint: the migration says it cannot finish, within a minute of its
        # start, with the figures and what to do, in status and its --json, and gives no ETA.
        while not (mig.get("controller") or {}).get("verdict") and time.monotonic() < deadline + 30:
            time.sleep(1)
            doc = json.loads(slacker("status", "--json")[1])
            mig = [m for n in doc["nodes"] for m in n.get("migrations", []) if m.get("tenant") == "pid1" and m.get("direction") != "incoming"][0]
        verdict = mig["controller"]["verdict"]
        assert verdict["what"] == "cannot finish: the load alone is over the setpoint", verdict
        assert verdict["figures"]["load_latency_s"] > verdict["figures"]["setpoint_s"]
        assert mig["eta_s"] is None
        rc, out, err = slacker("status")
        assert "CANNOT FINISH" in out and "--set setpoint=" in out, out
        # Raise the setpoint live: the copy resumes and the migration completes.
        rc, out, err = slacker("migrate", "pid1", "--set", "setpoint=5s")
        assert rc == 0, err
        deadline = time.monotonic() + 120
        while True:
            doc = json.loads(slacker("status", "--json")[1])
            mig = [m for n in doc["nodes"] for m in n.get("migrations", []) if m.get("tenant") == "pid1" and m.get("direction") != "incoming"][-1]
            if not mig["active"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        # The whole error as text (a dict is elided in pytest's report: a prepare failure seen once in six
        # full runs showed no reason).
        assert mig["result"] == "succeeded", json.dumps(mig.get("error"))
    finally:
        harness.send_signal(signal.SIGINT)
        try:
            harness.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(harness.pid, signal.SIGKILL)
    series = [json.loads(line) for line in open(mig["series_path"])]
    snap = [s for s in series if s["phase"] == "snapshot" and "setpoint_s" in s]
    low = [s for s in snap if s["setpoint_s"] < 0.001]
    high = [s for s in snap if s["setpoint_s"] >= 1]
    assert low and high, "both settings must have controller steps"
    # Latency above the setpoint: the rate was cut to a pause, and the copy held still meanwhile.
    assert all(s["latency_s"] is None or s["latency_s"] > s["setpoint_s"] for s in low)
    assert low[-1]["rate_bytes_per_s"] == 0
    assert max(s["bytes_done"] for s in low) <= paused_bytes + 2_000_000
    # Latency far below the new setpoint: the controller raised the rate again, within a few steps.
    assert max(s["rate_bytes_per_s"] for s in high[:3]) > 0, [s["rate_bytes_per_s"] for s in high[:5]]
    assert all(0 <= s["rate_bytes_per_s"] <= 20_000_000 for s in snap)
    # What the default controller (the model) has learnt is in every step and in status: its lag, its load.
    assert all("model_lag_s" in s for s in snap)
    assert "model_lag_s" in mig["controller"] and "model_load_latency_s" in mig["controller"]
    # The backup's start is marked in the series (the model controller leaves those seconds out).
    assert any(s.get("mark") in ("read-in", "backup start") for s in snap)
