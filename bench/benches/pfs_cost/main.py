"""What the latency source costs a tenant: memory of performance_schema, and the transaction instrument's overhead.

Memory: for each server config (performance_schema OFF; ON with MariaDB's
defaults, as tenants had before; Slacker's sized config with the transaction
instrument), start --tenants idle tenants with a 16 MiB buffer pool, run a few
hundred transactions on each, wait, and read VmRSS and performance_schema's
own total (SHOW ENGINE PERFORMANCE_SCHEMA STATUS).

Overhead: one tenant with Slacker's config; --connections client threads run
short read-write transactions (BEGIN; SELECT by key; UPDATE by key; COMMIT)
closed-loop, in --rounds alternating blocks of --block-s with the `transaction`
instrument on and off (switched at runtime, so the same server and data serve
both). Reports client-side mean latency and transactions/s, medians over rounds.

    bench/run pfs_cost --tenants 3 --rounds 6 --block-s 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pymysql

from slacker import mariadb
from slacker.mariadb import server as engine_server
from slacker.tenants import TenantManager
from benchkit.host import machine

DEFAULTS_ON = ("performance_schema = ON",)  # what tenants had before issue 14
OFF = ("performance_schema = OFF",)
CONFIGS = {"pfs OFF": OFF, "pfs ON, MariaDB defaults": DEFAULTS_ON,
           "Slacker (sized, transactions on)": engine_server.PERFORMANCE_SCHEMA_OPTIONS}
PORTS = (34400, 34600)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def pfs_mib(tenant) -> float:
    conn = tenant.admin_connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW ENGINE PERFORMANCE_SCHEMA STATUS")
            rows = [r for r in cur.fetchall() if r[1] == "performance_schema.memory"]
        return int(rows[0][2]) / 2**20 if rows else 0.0
    finally:
        conn.close()


def app_conn(tenant):
    return pymysql.connect(host=tenant.host, port=tenant.port, user="app", password=tenant.app_password(),
                           autocommit=True)


def prepare_table(tenant, rows: int = 1000) -> None:
    conn = app_conn(tenant)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench")
        cur.execute("CREATE TABLE IF NOT EXISTS bench.kv (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
        cur.executemany("INSERT IGNORE INTO bench.kv VALUES (%s, 0)", [(i,) for i in range(rows)])
    conn.close()


def memory(root: Path, n: int) -> list[tuple[str, float, float]]:
    out = []
    for k, (label, options) in enumerate(CONFIGS.items()):
        engine_server.PERFORMANCE_SCHEMA_OPTIONS = options  # ServerConfig.render reads it at call time
        mgr = TenantManager(root / f"config{k}", host="127.0.0.1", node="bench", port_range=PORTS)
        try:
            tenants = [mgr.create(f"m{i}", buffer_pool_bytes=16 * 2**20) for i in range(n)]
            for t in tenants:
                prepare_table(t, 300)
            time.sleep(5)
            rss = [rss_mib(t.pid()) for t in tenants]
            pfs = [pfs_mib(t) for t in tenants]
            out.append((label, statistics.median(rss), statistics.median(pfs)))
            print(f"  {label:34s} RSS per tenant {', '.join(f'{r:.0f}' for r in rss)} MiB; "
                  f"performance_schema {statistics.median(pfs):.1f} MiB", flush=True)
        finally:
            for t in mgr.list():
                mgr.kill_tenant(t)
    engine_server.PERFORMANCE_SCHEMA_OPTIONS = CONFIGS["Slacker (sized, transactions on)"]
    return out


def run_block(tenant, connections: int, seconds: float) -> tuple[float, float]:
    stop = time.monotonic() + seconds
    lat: list[list[float]] = [[] for _ in range(connections)]

    def worker(k: int) -> None:
        conn = app_conn(tenant)
        cur = conn.cursor()
        i = k
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            conn.begin()
            cur.execute("SELECT v FROM bench.kv WHERE id = %s", (i % 1000,))
            cur.fetchall()
            cur.execute("UPDATE bench.kv SET v = v + 1 WHERE id = %s", (i % 1000,))
            conn.commit()
            lat[k].append(time.perf_counter() - t0)
            i += connections
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    all_lat = [x for part in lat for x in part]
    return statistics.fmean(all_lat), len(all_lat) / seconds


def overhead(root: Path, rounds: int, block_s: float, connections: int) -> dict[str, list[tuple[float, float]]]:
    mgr = TenantManager(root / "overhead", host="127.0.0.1", node="bench", port_range=PORTS)
    results: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    try:
        t = mgr.create("o1", buffer_pool_bytes=64 * 2**20)
        prepare_table(t)
        admin = t.admin_connect()
        run_block(t, connections, 2.0)  # warm up
        for r in range(rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for state in order:
                with admin.cursor() as cur:
                    flag = "YES" if state == "on" else "NO"
                    cur.execute(f"UPDATE performance_schema.setup_instruments SET ENABLED = '{flag}', "
                                f"TIMED = '{flag}' WHERE NAME = 'transaction'")
                results[state].append(run_block(t, connections, block_s))
            print(f"  round {r + 1}: on {results['on'][-1][0] * 1000:.2f} ms {results['on'][-1][1]:.0f}/s, "
                  f"off {results['off'][-1][0] * 1000:.2f} ms {results['off'][-1][1]:.0f}/s", flush=True)
    finally:
        for x in mgr.list():
            mgr.kill_tenant(x)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block-s", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-overhead", action="store_true")
    args = ap.parse_args()
    print(f"machine: {machine()}; "
          f"{mariadb.find_program('mariadbd')}")
    root = Path(tempfile.mkdtemp(prefix="pfs-", dir="/tmp"))
    try:
        if not args.skip_memory:
            print(f"memory, {args.tenants} idle tenants per config (16 MiB buffer pool):")
            rows = memory(root, args.tenants)
            print("\n| server config | RSS per idle tenant (median) | performance_schema |\n|---|---:|---:|")
            for label, rss, pfs in rows:
                print(f"| {label} | {rss:.0f} MiB | {pfs:.1f} MiB |")
        if not args.skip_overhead:
            print(f"\noverhead, {args.connections} connections, {args.rounds} rounds of {args.block_s:g}s each way:")
            res = overhead(root, args.rounds, args.block_s, args.connections)
            med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
            spread = {k: (min(x[0] for x in v), max(x[0] for x in v)) for k, v in res.items()}
            print("\n| transaction instrument | mean latency (median of rounds) | range | transactions/s |\n|---|---:|---:|---:|")
            for k in ("off", "on"):
                print(f"| {k} | {med[k][0] * 1000:.2f} ms | {spread[k][0] * 1000:.2f}–{spread[k][1] * 1000:.2f} ms "
                      f"| {med[k][1]:.0f} |")
            print(f"\non/off: latency {med['on'][0] / med['off'][0]:.3f}x, throughput {med['on'][1] / med['off'][1]:.3f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
