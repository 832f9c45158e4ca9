#!/usr/bin/env python3
"""The demo behind scripts/demo: every step is a `slacker` command an operator could type.

1. a local two-node cluster on loopback (`slacker cluster up`)
2. a tenant on node-1, a row written and read back through `slacker locate`
3. the tenant loaded and driven by the open-loop harness (`slacker ycsb`) through the router
4. a live migration to node-2 under a latency setpoint, with its summary
5. the run's plot (`slacker plot`), the harness's report, and the cluster down
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLACKER = [sys.executable, "-m", "slacker"]
RUN = REPO / "run"
OUT = RUN / "demo"


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def sh(*args: str, capture: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    print("$ slacker " + " ".join(shlex.quote(a) for a in args), flush=True)
    p = subprocess.run(SLACKER + list(args), cwd=REPO, text=True,
                       stdout=subprocess.PIPE if capture else None)
    if check and p.returncode != 0:
        sys.exit(f"demo: `slacker {' '.join(args)}` failed with exit code {p.returncode}")
    return p


def have(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    ap.add_argument("--records", type=int, default=30000, help="rows to load (1 KB each)")
    ap.add_argument("--tps", type=float, default=40, help="offered transactions/s during the migration")
    ap.add_argument("--setpoint", default="", help="latency setpoint (default: measured baseline x 3)")
    args = ap.parse_args()
    os.environ["SLACKER_CLUSTER"] = str(RUN / "cluster.toml")
    OUT.mkdir(parents=True, exist_ok=True)

    say("1. a local two-node cluster on loopback")
    sh("cluster", "up", "--nodes", "2", "--dir", str(RUN))
    sh("status")

    say("2. a tenant on node-1; write and read a row through `slacker locate`")
    if sh("locate", "demo", capture=True, check=False).returncode == 0:
        sh("tenant", "delete", "demo", "--yes")
    sh("tenant", "create", "demo", "--on", "node-1")
    loc = json.loads(sh("locate", "demo", "--json", capture=True).stdout)
    print(f"   slacker locate demo -> {loc['host']}:{loc['port']} on {loc['node']} (epoch {loc['epoch']})")
    import pymysql
    pw = Path(loc["app_password_file"]).read_text().strip()
    conn = pymysql.connect(host=loc["host"], port=loc["port"], user=loc["app_user"], password=pw, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS hello")
        cur.execute("CREATE TABLE IF NOT EXISTS hello.greetings (id INT PRIMARY KEY, text VARCHAR(64))")
        cur.execute("REPLACE INTO hello.greetings VALUES (1, 'hello from node-1')")
        cur.execute("SELECT text FROM hello.greetings WHERE id = 1")
        print(f"   wrote and read back: {cur.fetchone()[0]!r}")
    conn.close()

    harness = None
    series = OUT / "ycsb.jsonl"
    if have("slacker.ycsb.runner"):
        say(f"3. load {args.records} rows and drive the tenant at {args.tps:g} transactions/s (open loop)")
        sh("ycsb", "load", "demo", "-P", "workloads/slacker", "-p", f"recordcount={args.records}")
        series.unlink(missing_ok=True)
        cmd = SLACKER + ["ycsb", "run", "demo", "-P", "workloads/slacker", "-p", f"recordcount={args.records}",
                         "--rate", str(args.tps), "--duration", "30m", "--metrics-port", "9464",
                         "--out", str(series)]
        if loc.get("routers"):  # as an application would: the router's one address, never the node's
            rhost, rport = loc["routers"][0]["address"].rsplit(":", 1)
            cmd += ["--host", rhost, "--port", rport, "--user", "app@demo",
                    "--password-file", loc["app_password_file"]]
            print(f"   the harness connects to the router at {rhost}:{rport} as app@demo, as a stock client would")
        print("$ " + " ".join(shlex.quote(c) for c in cmd[2:]).replace("-m slacker", "slacker") + " &")
        harness = subprocess.Popen(cmd, cwd=REPO, stdout=open(OUT / "ycsb-report.txt", "w"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(8)
    else:
        say("3. (the benchmark harness is not built yet: migrating an idle tenant)")

    try:
        say("4. live migration of demo to node-2")
        mig = ["migrate", "demo", "--to", "node-2", "--verify"]
        if harness is not None and have("slacker.throttle"):
            setpoint = args.setpoint or _setpoint_from_baseline(series)
            mig += ["--setpoint", setpoint, "--max-rate", "100MB/s",
                    "--latency-source", "prometheus,url=http://127.0.0.1:9464/metrics,tenant=demo"]
        else:
            mig += ["--rate", "20MB/s"]
        p = sh(*mig, "--json", capture=True, check=False)
        doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else None
        if doc is None or doc.get("result") != "succeeded":
            print(p.stdout)
            sys.exit("demo: the migration did not succeed (the source keeps serving)")
        from slacker.cli.migrate_cmd import print_summary
        print_summary(doc)
        (OUT / "migration.json").write_text(json.dumps(doc, indent=2))
        sh("locate", "demo")
        after = json.loads(sh("locate", "demo", "--json", capture=True).stdout)
        conn = pymysql.connect(host=after["host"], port=after["port"], user="app", password=pw, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("SELECT text FROM hello.greetings WHERE id = 1")
            print(f"   the row, read from the new owner ({after['node']}): {cur.fetchone()[0]!r}")
        conn.close()
        if after.get("routers"):  # the router's address never moved: the same row through it
            host, port = after["routers"][0]["address"].rsplit(":", 1)
            conn = pymysql.connect(host=host, port=int(port), user="app@demo", password=pw, autocommit=True)
            with conn.cursor() as cur:
                cur.execute("SELECT text FROM hello.greetings WHERE id = 1")
                print(f"   the row, read through the router at {host}:{port}: {cur.fetchone()[0]!r}")
            conn.close()
        if have("slacker.plot"):
            say("5. the run's plot")
            series_path = Path(doc["series_path"])
            sh("plot", str(series_path), "-o", str(OUT / "migration.png"))
    finally:
        if harness is not None:
            harness.send_signal(signal.SIGINT)
            try:
                harness.wait(timeout=30)
            except subprocess.TimeoutExpired:
                harness.kill()
            say("the harness's report (latency from scheduled arrival to commit)")
            print((OUT / "ycsb-report.txt").read_text()[-3000:])
        if not args.keep:
            say("cluster down")
            sh("cluster", "down", "--dir", str(RUN))
    print(f"\ndemo done; artefacts in {OUT}")
    return 0


def _setpoint_from_baseline(series: Path) -> str:
    """Three times the latency measured before the copy, at least 50ms: a setpoint with slack to use."""
    lat = []
    for line in series.read_text().splitlines() if series.exists() else []:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        v = d.get("latency_mean_s") or d.get("mean_s") or d.get("latency_s")
        if isinstance(v, (int, float)) and v > 0:
            lat.append(v)
    base = sorted(lat)[len(lat) // 2] if lat else 0.02
    return f"{max(50, int(base * 3000))}ms"


if __name__ == "__main__":
    sys.exit(main())
