"""A lean tenant: idle memory with MariaDB's defaults against Slacker's sized config, and the default
latency source's figures under the same load on both.

Memory: --tenants idle tenants of each config run at once (so both see the same host and share the
mariadbd binary's pages alike); after --settle-s each one's VmRSS, Pss (its share of pages shared with
other processes) and RssAnon (memory of its own) are read from /proc.

  before: MariaDB's defaults for the caches and threads (innodb_log_buffer_size 16M, key_buffer_size
          128M, aria_pagecache_buffer_size 128M, query_cache_size 1M, 4 InnoDB read, write and purge
          threads) and the 128M buffer pool tenants had by default;
  after:  slacker.mariadb.server.MEMORY_OPTIONS and slacker.tenants.DEFAULT_BUFFER_POOL_BYTES.

Both have Slacker's sized performance_schema (the default latency source reads it).

Latency: one tenant of each config with the same --rows-row table (fits both buffer pools); in
--rounds rounds, each config in turn (the order alternates) runs --connections closed-loop clients of
short read-write transactions for --block-s. For each block: the clients' mean transaction latency,
and the mean the default latency source reports (performance_schema's per-transaction summary,
Slacker's own account excluded, as the controller and the agent's stats read it). The claim is judged
on the after/before ratios per round (median and range), and on the share of the clients' latency the
source sees (source / clients per block): on a shared machine the absolute latency moves with the
neighbours, while that share says whether the source still measures the same thing.

    bench/run lean --out docs/data/lean.json --plot docs/img/lean.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pymysql

from slacker import mariadb
from slacker.mariadb import server as engine_server
from slacker.mariadb.perfschema import latency_totals, performance_schema_sql
from slacker.tenants import DEFAULT_BUFFER_POOL_BYTES, TenantManager

MIB = 1 << 20
# MariaDB's defaults, as tenants had them before: no MEMORY_OPTIONS, a 128M buffer pool.
CONFIGS = {"before": ((), 128 * MIB), "after": (engine_server.MEMORY_OPTIONS, DEFAULT_BUFFER_POOL_BYTES)}
PORTS = (34700, 34899)


def proc_memory_mib(pid: int) -> dict:
    """VmRSS and RssAnon from /proc/PID/status, Pss from smaps_rollup, in MiB."""
    out = {}
    status = Path(f"/proc/{pid}/status").read_text()
    for key, name in (("VmRSS", "rss"), ("RssAnon", "anon")):
        out[name] = int(re.search(rf"^{key}:\s+(\d+)", status, re.M).group(1)) / 1024
    out["pss"] = int(re.search(r"^Pss:\s+(\d+)", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M).group(1)) / 1024
    return out


def create(mgr: TenantManager, config: str, tenant_id: str):
    options, pool = CONFIGS[config]
    engine_server.MEMORY_OPTIONS = options  # ServerConfig.render reads it at call time
    try:
        return mgr.create(tenant_id, buffer_pool_bytes=pool)
    finally:
        engine_server.MEMORY_OPTIONS = CONFIGS["after"][0]


def app_conn(tenant):
    return pymysql.connect(host=tenant.host, port=tenant.port, user="app", password=tenant.app_password(),
                           autocommit=True)


def prepare(tenant, rows: int) -> None:
    conn = app_conn(tenant)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench")
        cur.execute("CREATE TABLE IF NOT EXISTS bench.kv (id INT PRIMARY KEY, v INT, pad CHAR(100)) ENGINE=InnoDB")
        for start in range(0, rows, 1000):
            cur.executemany("INSERT IGNORE INTO bench.kv VALUES (%s, 0, REPEAT('x', 100))",
                            [(i,) for i in range(start, min(rows, start + 1000))])
    conn.close()


def memory(root: Path, n: int, settle_s: float) -> dict:
    mgr = TenantManager(root / "memory", host="127.0.0.1", node="bench", port_range=PORTS)
    out: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    try:
        tenants = []
        for i in range(n):  # interleaved, so neither config is created on a quieter machine
            for config in CONFIGS:
                t = create(mgr, config, f"{config[0]}{i}")
                prepare(t, 300)
                tenants.append((config, t))
        time.sleep(settle_s)
        for config, t in tenants:
            out[config].append(proc_memory_mib(t.pid()))
    finally:
        for t in mgr.list():
            mgr.kill_tenant(t)
    return out


def block(tenant, connections: int, seconds: float, rows: int) -> tuple[float, float, int]:
    """(client mean latency, the latency source's mean, transactions) over one block."""
    admin = tenant.admin_connect()
    sql, params = performance_schema_sql("transactions", exclude_users=(mariadb.ADMIN_USER,))
    s0, c0 = latency_totals(admin, sql, params)
    stop = time.monotonic() + seconds
    lat: list[list[float]] = [[] for _ in range(connections)]

    def worker(k: int) -> None:
        conn = app_conn(tenant)
        cur = conn.cursor()
        i = k * 7919
        while time.monotonic() < stop:
            key = i % rows
            t0 = time.perf_counter()
            conn.begin()
            cur.execute("SELECT v FROM bench.kv WHERE id = %s", (key,))
            cur.fetchall()
            cur.execute("UPDATE bench.kv SET v = v + 1 WHERE id = %s", (key,))
            conn.commit()
            lat[k].append(time.perf_counter() - t0)
            i += 104729
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    s1, c1 = latency_totals(admin, sql, params)
    admin.close()
    all_lat = [x for part in lat for x in part]
    return statistics.fmean(all_lat), (s1 - s0) / max(c1 - c0, 1), len(all_lat)


def latency(root: Path, rounds: int, block_s: float, connections: int, rows: int) -> list[dict]:
    mgr = TenantManager(root / "latency", host="127.0.0.1", node="bench", port_range=PORTS)
    out = []
    try:
        tenants = {config: create(mgr, config, f"l{config}") for config in CONFIGS}
        for t in tenants.values():
            prepare(t, rows)
            block(t, connections, 2.0, rows)  # warm the buffer pool
        for r in range(rounds):
            order = list(CONFIGS) if r % 2 == 0 else list(reversed(CONFIGS))
            row = {"round": r + 1}
            for config in order:
                client, source, n = block(tenants[config], connections, block_s, rows)
                row[config] = {"client_s": client, "source_s": source, "transactions": n}
            out.append(row)
            print(f"  round {r + 1}: " + ", ".join(
                f"{c} client {row[c]['client_s'] * 1000:.2f} ms source {row[c]['source_s'] * 1000:.2f} ms "
                f"({row[c]['transactions'] / block_s:.0f}/s)" for c in CONFIGS), flush=True)
    finally:
        for t in mgr.list():
            mgr.kill_tenant(t)
    return out


def summarise(mem: dict, lat: list[dict]) -> dict:
    s: dict = {"memory": {}, "latency": {}}
    for config, rows in mem.items():
        s["memory"][config] = {k: {"median": statistics.median(r[k] for r in rows),
                                   "min": min(r[k] for r in rows), "max": max(r[k] for r in rows)}
                               for k in ("rss", "pss", "anon")}
    for r in lat:
        for c in CONFIGS:
            r[c]["source_over_client"] = r[c]["source_s"] / r[c]["client_s"]
    for key in ("client_s", "source_s", "source_over_client"):
        ratios = [r["after"][key] / r["before"][key] for r in lat]
        s["latency"][key] = {c: statistics.median(r[c][key] for r in lat) for c in CONFIGS}
        s["latency"][key]["ratio_median"] = statistics.median(ratios)
        s["latency"][key]["ratio_range"] = [min(ratios), max(ratios)]
    return s


def plot(doc: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    keys = [("rss", "RSS"), ("pss", "Pss"), ("anon", "own (RssAnon)")]
    x = range(len(keys))
    for j, config in enumerate(CONFIGS):
        vals = [doc["summary"]["memory"][config][k]["median"] for k, _ in keys]
        ax1.bar([i + j * 0.4 for i in x], vals, width=0.4, label=config)
        for i, v in zip(x, vals):
            ax1.text(i + j * 0.4, v + 1, f"{v:.0f}", ha="center", fontsize=8)
    ax1.axhline(50, color="grey", lw=0.8, ls="--")
    ax1.set_xticks([i + 0.2 for i in x], [label for _, label in keys])
    ax1.set_ylabel("MiB per idle tenant (median)")
    ax1.set_title(f"{doc['params']['tenants']} idle tenants per config")
    ax1.legend()
    rounds = [r["round"] for r in doc["latency"]]
    for config, style, colour in zip(CONFIGS, ("o-", "s-"), ("C0", "C1")):
        ax2.plot(rounds, [r[config]["source_s"] * 1000 for r in doc["latency"]], style, color=colour,
                 label=f"{config}: latency source")
        ax2.plot(rounds, [r[config]["client_s"] * 1000 for r in doc["latency"]], style, color=colour, alpha=0.35,
                 label=f"{config}: clients")
    ax2.set_xlabel("round")
    ax2.set_ylabel("mean transaction latency (ms)")
    ax2.set_ylim(bottom=0)
    ax2.set_title(f"{doc['params']['connections']} clients, {doc['params']['block_s']:g} s blocks")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", type=int, default=4, help="idle tenants per config (default 4)")
    ap.add_argument("--settle-s", type=float, default=10.0, help="idle time before reading memory (default 10)")
    ap.add_argument("--rounds", type=int, default=6, help="latency rounds, each config once per round (default 6)")
    ap.add_argument("--block-s", type=float, default=5.0, help="seconds of load per config per round (default 5)")
    ap.add_argument("--connections", type=int, default=4, help="closed-loop clients (default 4)")
    ap.add_argument("--rows", type=int, default=20000, help="rows of ~110 bytes in the load's table (default 20000)")
    ap.add_argument("--out", help="write the raw figures and the summary as JSON here")
    ap.add_argument("--plot", help="write a PNG plot here")
    ap.add_argument("--replot", metavar="JSON", help="only draw --plot from a JSON an earlier run wrote")
    args = ap.parse_args()
    if args.replot:
        if not args.plot:
            ap.error("--replot needs --plot")
        plot(json.loads(Path(args.replot).read_text()), args.plot)
        return
    machine = f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}"
    print(f"machine: {machine}; {mariadb.find_program('mariadbd')}")
    root = Path(tempfile.mkdtemp(prefix="lean-", dir="/tmp"))
    try:
        print(f"memory: {args.tenants} idle tenants per config, all running at once")
        mem = memory(root, args.tenants, args.settle_s)
        print(f"latency: {args.rounds} rounds of {args.block_s:g}s per config, {args.connections} clients")
        lat = latency(root, args.rounds, args.block_s, args.connections, args.rows)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = summarise(mem, lat)
    print("\n| config | RSS | Pss | its own (RssAnon) |\n|---|---:|---:|---:|")
    for config in CONFIGS:
        m = summary["memory"][config]
        print(f"| {config} | " + " | ".join(f"{m[k]['median']:.1f} ({m[k]['min']:.1f}–{m[k]['max']:.1f}) MiB"
                                          for k in ("rss", "pss", "anon")) + " |")
    print("\n| figure | before | after | after/before (median, range over rounds) |\n|---|---:|---:|---:|")
    for key, label in (("source_s", "latency source (performance_schema)"), ("client_s", "clients"),
                       ("source_over_client", "source / clients (what the source sees of the clients' latency)")):
        L = summary["latency"][key]
        unit, scale = ("", 1) if key == "source_over_client" else (" ms", 1000)
        print(f"| {label} | {L['before'] * scale:.2f}{unit} | {L['after'] * scale:.2f}{unit} | "
              f"{L['ratio_median']:.3f} ({L['ratio_range'][0]:.3f}–{L['ratio_range'][1]:.3f}) |")
    doc = {"machine": machine, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "params": vars(args), "configs": {c: {"options": list(o), "buffer_pool_bytes": p}
                                            for c, (o, p) in CONFIGS.items()},
           "memory": mem, "latency": lat, "summary": summary}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        plot(doc, args.plot)


if __name__ == "__main__":
    main()
