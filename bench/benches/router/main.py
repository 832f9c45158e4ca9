"""What a router in front of a tenant costs: direct vs byte pipes vs `slacker router`.

Starts a one-node local cluster with one tenant, loads sysbench's oltp_read_write
tables, and puts these in front of the tenant, all in one run, interleaved:

  direct     sysbench to the tenant's own port
  py-pipe    a bare Python asyncio byte pipe (uvloop when installed), no parsing
  py-parse   the same pipe reading packet by packet (header, then payload), as a Python router would
  go-pipe    the compiled router binary in -pipe mode: io.Copy both ways, no parsing
  router     `slacker router`'s data path: its own login (USER@TENANT, double-SHA1),
             the owner's login, packet headers read client->owner

Each path runs sysbench oltp_read_write at a fixed offered load (--rate, default 300
txn/s) and at saturation (no rate), in --repeats rounds (>= 3) of shuffled order. Figures: per-transaction
latency p50/p99 from sysbench's histogram, latency added per statement = (path - direct)
/ statements per transaction (sysbench's queries per transaction, BEGIN and COMMIT
included), the pipe's CPU per statement (from /proc), and saturation throughput as a
ratio of direct. Medians over repeats with min..max.

    bench/run router [--repeats 8] [--time 5] [--rate 300] [--variants] [--json FILE] [--plot FILE]

Handover mode (--handover N): a two-node cluster with `slacker router` in front; sysbench
oltp_read_write (prepared statements, every error counted, none fatal) and probe clients (one
autocommit UPDATE at a time, each timed) run on the router's address while the tenant is migrated
N times back and forth. Figures: failed client requests per migration (goal 0), the longest wait a
probe saw during each handover (statements overlapping the router's hold, from the hold's start to
its release; and over the whole migration, copy included) and the router's longest hold
(p50/p99/max over migrations), against each migration's freeze window.

    bench/run router --handover 30 [--ho-rate 100] [--ho-threads 4] [--json FILE] [--plot FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.client import resolve
from slacker.config import load_cluster
from slacker.router.binary import router_binary
from benchkit.stats import pct

PY_PIPE = r'''
import asyncio, sys
try:
    import uvloop; uvloop.install(); kind = "uvloop"
except ImportError:
    kind = "asyncio"
host, port, lport, parse = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "parse"
async def packets(r, w):
    # What the router does to every packet, the way Python would: read the header, then the payload.
    try:
        while True:
            h = await r.readexactly(4)
            n = h[0] | h[1] << 8 | h[2] << 16
            w.write(h + await r.readexactly(n))
            if not r._buffer:
                await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        w.close()
async def pump(r, w):
    try:
        while True:
            b = await r.read(65536)
            if not b:
                break
            w.write(b)
            await w.drain()
    finally:
        w.close()
async def handle(cr, cw):
    sr, sw = await asyncio.open_connection(host, port)
    relay = packets if parse else pump
    await asyncio.gather(relay(cr, sw), relay(sr, cw), return_exceptions=True)
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", lport)
    print(kind, flush=True)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
'''


# The compiled pipe's variants (--variants): its default (Go scheduler on half the CPUs), on all of
# them. (Also measured, 2026-11-25, and dropped: blocking reads on a thread per direction, and one
# thread's own epoll loop: no less CPU per round trip than Go's poller; the kernel's share dominates.)
GO_PIPES = [("go-pipe", {}, []), ("go-pipe-allp", {"GOMAXPROCS": str(os.cpu_count())}, [])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    """CPU seconds of all the process's threads, to the nanosecond (schedstat; stat counts 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def hist_pct(hist: list[tuple[float, int]], q: float) -> float:
    total = sum(c for _, c in hist)
    acc = 0
    for v, c in hist:
        acc += c
        if acc >= q * total:
            return v
    return hist[-1][0] if hist else float("nan")


def sysbench(conf: Path, host: str, port: int, user: str, args, rate: int | None, threads: int) -> dict:
    cmd = ["sysbench", "oltp_read_write", f"--config-file={conf}", f"--mysql-host={host}", f"--mysql-port={port}",
           f"--mysql-user={user}", "--mysql-db=sbtest", f"--tables={args.tables}", f"--table-size={args.table_size}",
           f"--threads={threads}", f"--time={args.time}", "--histogram=on", "--percentile=99",
           "--db-ps-mode=disable" if args.text else "--db-ps-mode=auto"]
    if rate:
        cmd.append(f"--rate={rate}")
    out = subprocess.run(cmd + ["run"], capture_output=True, text=True, timeout=args.time + 120)
    if out.returncode != 0:
        raise RuntimeError(f"sysbench failed ({out.returncode}): {out.stderr[-800:]} {out.stdout[-800:]}")
    text = out.stdout
    hist = [(float(m.group(1)), int(m.group(2)))
            for m in re.finditer(r"^\s*([0-9.]+)\s*\|\**\s+(\d+)\s*$", text, re.M)]
    txn = int(re.search(r"transactions:\s+(\d+)", text).group(1))
    queries = int(re.search(r"queries:\s+(\d+)", text).group(1))
    tps = float(re.search(r"transactions:\s+\d+\s+\(([0-9.]+) per sec", text).group(1))
    errors = int(re.search(r"ignored errors:\s+(\d+)", text).group(1))
    return {"txn": txn, "queries": queries, "tps": tps, "errors": errors,
            "p50_ms": hist_pct(hist, 0.50), "p99_ms": hist_pct(hist, 0.99)}


class Paths:
    """The tenant and the three things in front of it."""

    def __init__(self, tmp: Path, args) -> None:
        self.args = args
        path = local_cluster.up(tmp / "run", nodes=1, first_address=args.address, api_port=args.api_port,
                                port_range=args.port_range)
        self.cluster = load_cluster(str(path))
        agents, _ = cluster_clients(self.cluster)
        agents["node-1"].request("POST", "/v1/tenants", {"id": "bench"}, timeout_s=180)
        self.ep = resolve("bench", self.cluster)
        conn = self.ep.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        conn.close()
        self.conf = tmp / "sysbench.conf"
        self.conf.touch(mode=0o600)
        self.conf.write_text(f"mysql-password={self.ep.password}\n")
        self.procs: list[subprocess.Popen] = []
        subprocess.run(["sysbench", "oltp_read_write", f"--config-file={self.conf}", f"--mysql-host={self.ep.host}",
                        f"--mysql-port={self.ep.port}", f"--mysql-user={self.ep.user}", "--mysql-db=sbtest",
                        f"--tables={args.tables}", f"--table-size={args.table_size}", "prepare"],
                       check=True, capture_output=True, timeout=600)
        self.py = {}
        for name, mode in (("py-pipe", "bytes"), ("py-parse", "parse")):
            port = free_port()
            p = subprocess.Popen([sys.executable, "-c", PY_PIPE, self.ep.host, str(self.ep.port), str(port), mode],
                                 stdout=subprocess.PIPE, text=True)
            self.py_kind = p.stdout.readline().strip()
            self.procs.append(p)
            self.py[name] = ("127.0.0.1", port, self.ep.user, p.pid)
        self.go = {}
        for name, env, extra in GO_PIPES if args.variants else GO_PIPES[:1]:
            port = free_port()
            p = subprocess.Popen([router_binary(), "-listen", f"127.0.0.1:{port}", "-pipe",
                                  f"{self.ep.host}:{self.ep.port}", *extra], stderr=subprocess.DEVNULL,
                                 env={**os.environ, **env})
            self.procs.append(p)
            self.go[name] = ("127.0.0.1", port, self.ep.user, p.pid)
        self.routers = {"router": self.start_router(None)}
        for nice in args.nice:
            self.routers[f"router-nice{nice}"] = self.start_router(lambda n=nice: os.nice(n))
        if args.fifo:
            self.routers["router-fifo"] = self.start_router(
                lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.fifo)))
        time.sleep(0.5)

    def start_router(self, preexec=None) -> tuple:
        port = free_port()
        p = subprocess.Popen([router_binary(), "-listen", f"127.0.0.1:{port}"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             preexec_fn=preexec)
        p.stdout.readline()
        stage2 = hashlib.sha1(hashlib.sha1(self.ep.password.encode()).digest()).hexdigest()
        p.stdin.write(json.dumps({"op": "route", "tenant": "bench", "node": "node-1", "host": self.ep.host,
                                  "port": self.ep.port, "epoch": self.ep.epoch, "user": self.ep.user,
                                  "hash": stage2}) + "\n")
        p.stdin.flush()
        self.procs.append(p)
        return ("127.0.0.1", port, f"{self.ep.user}@bench", p.pid)

    def targets(self) -> dict:
        return {"direct": (self.ep.host, self.ep.port, self.ep.user, None), **self.py, **self.go,
                **self.routers}

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def pingpong(host: str, port: int, user: str, password: str, pid: int | None, n: int) -> dict:
    """One client, one statement at a time (`DO 1`): per-statement latency with no queueing, and the
    pipe's CPU per statement split into user and kernel time."""
    import pymysql
    conn = pymysql.connect(host=host, port=port, user=user, password=password, ssl_disabled=True, autocommit=True)
    cur = conn.cursor()
    for _ in range(200):
        cur.execute("DO 1")
    u0 = s0 = c0 = 0.0
    if pid:
        u0, s0 = cpu_split(pid)
        c0 = cpu_s(pid)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        cur.execute("DO 1")
        lat.append((time.perf_counter() - t) * 1e6)
    out = {"p50_us": pct(lat, 0.5), "p99_us": pct(lat, 0.99)}
    if pid:
        u1, s1 = cpu_split(pid)
        cpu = (cpu_s(pid) - c0) * 1e6 / n
        kernel = (s1 - s0) / max(1e-9, (u1 - u0) + (s1 - s0))  # share from the coarse tick counts
        out |= {"cpu_us": cpu, "cpu_kernel_share": kernel}
    conn.close()
    return out


def cpu_split(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def summarise(rows: list[dict], names: list[str]) -> dict:
    out = {}
    for name in names:
        mine = [r for r in rows if r["path"] == name]
        fixed = [r["fixed"] for r in mine]
        sat = [r["sat"] for r in mine]
        s = {"p50_ms": [f["p50_ms"] for f in fixed], "p99_ms": [f["p99_ms"] for f in fixed],
             "sat_tps": [x["tps"] for x in sat], "fixed_tps": [f["tps"] for f in fixed]}
        if name != "direct":
            s["added_p50_us"] = [r["added_p50_us"] for r in mine]
            s["added_p99_us"] = [r["added_p99_us"] for r in mine]
            s["sat_ratio"] = [r["sat_ratio"] for r in mine]
            s["cpu_us_per_stmt"] = [r["cpu_us_per_stmt"] for r in mine]
        out[name] = {k: {"median": round(statistics.median(v), 3), "min": round(min(v), 3), "max": round(max(v), 3)}
                     for k, v in s.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=8,
                    help="rounds; each runs every path once, in a shuffled order (a shared machine's load moves: "
                         "many short rounds compared within each round beat a few long ones)")
    ap.add_argument("--time", type=int, default=5, help="seconds per sysbench run")
    ap.add_argument("--rate", type=int, default=300, help="fixed offered load, txn/s")
    ap.add_argument("--fixed-threads", type=int, default=8)
    ap.add_argument("--sat-threads", type=int, default=8)
    ap.add_argument("--pings", type=int, default=3000, help="statements of the one-at-a-time run")
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--table-size", type=int, default=10000)
    ap.add_argument("--text", action="store_true", help="text protocol (--db-ps-mode=disable)")
    ap.add_argument("--address", default="127.0.0.60")
    ap.add_argument("--api-port", type=int, default=7761)
    ap.add_argument("--port-range", default="26000-26099")
    ap.add_argument("--variants", action="store_true", help="also the compiled pipe's variants (GO_PIPES)")
    ap.add_argument("--nice", type=int, nargs="*", default=[], metavar="N",
                    help="also the router at these scheduling priorities (`nice`; negative: ahead of the database)")
    ap.add_argument("--fifo", type=int, default=0, metavar="PRIO",
                    help="also the router under SCHED_FIFO at this real-time priority")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--replot", type=Path, nargs="+",
                    help="only draw --plot from --json files of earlier runs (handover mode: several runs pooled)")
    ap.add_argument("--handover", type=int, default=0, metavar="N", help="handover mode: N live migrations under load")
    ap.add_argument("--ho-rate", type=int, default=100, help="handover mode: sysbench's offered load, txn/s")
    ap.add_argument("--ho-threads", type=int, default=4, help="handover mode: sysbench threads")
    ap.add_argument("--ho-probes", type=int, default=2, help="handover mode: probe clients")
    ap.add_argument("--ho-gap", type=float, default=1.0, help="handover mode: seconds between migrations")
    args = ap.parse_args()
    if args.replot:
        docs = [json.loads(p.read_text()) for p in args.replot]
        if "migrations" in docs[0]:
            plot_handover(docs, args.plot)
        else:
            plot(docs[0], args.plot)
        return 0
    if args.handover:
        return handover_mode(args)
    if args.repeats < 3:
        print("note: fewer than 3 repeats give no spread worth reading", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="bench-router-"))
    paths = None
    rows = []
    try:
        paths = Paths(tmp, args)
        targets = paths.targets()
        print(f"bench/run router: {platform.node()} {os.cpu_count()} CPUs, python pipe on {paths.py_kind}, "
              f"sysbench oltp_read_write {args.tables}x{args.table_size} rows, {args.time}s per run, "
              f"fixed {args.rate} txn/s with {args.fixed_threads} threads, saturation {args.sat_threads} threads",
              flush=True)
        pings = []
        for rep in range(1, args.repeats + 1):
            order = list(targets) if rep % 2 else list(reversed(targets))
            got = {name: pingpong(*targets[name][:3], paths.ep.password, targets[name][3], args.pings) for name in order}
            for name in targets:
                g = got[name]
                row = {"repeat": rep, "path": name, **g}
                if name != "direct":
                    row["added_p50_us"] = g["p50_us"] - got["direct"]["p50_us"]
                    row["added_p99_us"] = g["p99_us"] - got["direct"]["p99_us"]
                pings.append(row)
                extra = "" if name == "direct" else (
                    f"  added p50 {row['added_p50_us']:5.0f} us p99 {row['added_p99_us']:5.0f} us  pipe cpu/stmt "
                    f"{g['cpu_us']:5.1f} us ({g['cpu_kernel_share']:.0%} kernel)")
                print(f"ping rep {rep} {name:11} p50 {g['p50_us']:6.0f} us p99 {g['p99_us']:6.0f} us{extra}", flush=True)
        for rep in range(1, args.repeats + 1):
            res = {}
            order = random.Random(rep).sample(list(targets), len(targets))  # no path always first or last
            print(f"round {rep}: load average {os.getloadavg()[0]:.1f}, order {' '.join(order)}", flush=True)
            for name in order:
                host, port, user, pid = targets[name]
                c0 = cpu_s(pid) if pid else 0.0
                fixed = sysbench(paths.conf, host, port, user, args, args.rate, args.fixed_threads)
                cpu = (cpu_s(pid) - c0) if pid else 0.0
                sat = sysbench(paths.conf, host, port, user, args, None, args.sat_threads)
                res[name] = {"fixed": fixed, "sat": sat, "cpu_s": cpu}
            d = res["direct"]
            stmts = d["fixed"]["queries"] / d["fixed"]["txn"]
            for name in targets:
                r = {"repeat": rep, "path": name, **res[name], "stmts_per_txn": round(stmts, 2)}
                if name != "direct":
                    r["added_p50_us"] = (r["fixed"]["p50_ms"] - d["fixed"]["p50_ms"]) * 1000 / stmts
                    r["added_p99_us"] = (r["fixed"]["p99_ms"] - d["fixed"]["p99_ms"]) * 1000 / stmts
                    r["sat_ratio"] = r["sat"]["tps"] / d["sat"]["tps"]
                    r["cpu_us_per_stmt"] = r["cpu_s"] * 1e6 / max(1, r["fixed"]["queries"])
                rows.append(r)
                extra = "" if name == "direct" else (
                    f"  added/stmt p50 {r['added_p50_us']:6.0f} us p99 {r['added_p99_us']:6.0f} us"
                    f"  cpu/stmt {r['cpu_us_per_stmt']:5.1f} us  sat {r['sat_ratio']:.2f}x")
                print(f"rep {rep} {name:11} fixed {r['fixed']['tps']:6.1f} txn/s p50 {r['fixed']['p50_ms']:6.2f} ms "
                      f"p99 {r['fixed']['p99_ms']:6.2f} ms  sat {r['sat']['tps']:7.1f} txn/s{extra}", flush=True)
        summary = summarise(rows, list(targets))
        print(f"\none statement at a time ({args.pings} x `DO 1`, median [min..max] over {args.repeats} repeats)")
        ping_summary = {}
        for name in targets:
            mine = [r for r in pings if r["path"] == name]
            keys = ["p50_us", "p99_us"] + ([] if name == "direct" else ["added_p50_us", "added_p99_us", "cpu_us",
                                                                       "cpu_kernel_share"])
            ping_summary[name] = {k: {"median": round(statistics.median(r[k] for r in mine), 1),
                                      "min": round(min(r[k] for r in mine), 1),
                                      "max": round(max(r[k] for r in mine), 1)} for k in keys}
            ps = ping_summary[name]
            line = f"  {name:11} p50 {ps['p50_us']['median']:.0f} us  p99 {ps['p99_us']['median']:.0f} us"
            if name != "direct":
                line += (f"  added p50 {ps['added_p50_us']['median']:.0f} [{ps['added_p50_us']['min']:.0f}.."
                         f"{ps['added_p50_us']['max']:.0f}] us, p99 {ps['added_p99_us']['median']:.0f} us; pipe cpu/stmt "
                         f"{ps['cpu_us']['median']:.1f} us ({ps['cpu_kernel_share']['median']:.0%} kernel)")
            print(line)
        print(f"\nsysbench (median [min..max] over {args.repeats} repeats; {stmts:.0f} statements per transaction)")
        for name, s in summary.items():
            line = (f"  {name:11} p50 {s['p50_ms']['median']:.2f} ms  p99 {s['p99_ms']['median']:.2f} ms  "
                    f"sat {s['sat_tps']['median']:.0f} txn/s")
            if name != "direct":
                line += (f"  added/stmt p50 {s['added_p50_us']['median']:.0f} [{s['added_p50_us']['min']:.0f}.."
                         f"{s['added_p50_us']['max']:.0f}] us, p99 {s['added_p99_us']['median']:.0f} "
                         f"[{s['added_p99_us']['min']:.0f}..{s['added_p99_us']['max']:.0f}] us; "
                         f"cpu/stmt {s['cpu_us_per_stmt']['median']:.1f} us; sat ratio {s['sat_ratio']['median']:.2f} "
                         f"[{s['sat_ratio']['min']:.2f}..{s['sat_ratio']['max']:.2f}]")
            print(line)
        doc = {"machine": {"host": platform.node(), "cpus": os.cpu_count()}, "date": time.strftime("%Y-%m-%d", time.gmtime()),
               "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "py_pipe": paths.py_kind, "rows": rows, "summary": summary, "pings": pings,
               "ping_summary": ping_summary}
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1))
        if args.plot:
            plot(doc, args.plot)
        return 0
    finally:
        if paths:
            paths.close()
        local_cluster.down(tmp / "run", purge=True)
        shutil.rmtree(tmp, ignore_errors=True)


def plot(doc: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in doc["summary"] if n != "direct"]
    x = range(len(names))

    def bars(ax, table, key, scale=1.0):
        med = [table[n][key]["median"] * scale for n in names]
        lo = [m - table[n][key]["min"] * scale for m, n in zip(med, names)]
        hi = [table[n][key]["max"] * scale - m for m, n in zip(med, names)]
        ax.bar(x, med, yerr=[lo, hi], capsize=3)
        ax.set_xticks(list(x), names, rotation=30, ha="right")

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 4.2))
    bars(a, doc["ping_summary"], "added_p50_us")
    a.axhline(60, color="grey", ls="--", lw=0.8)
    a.set_ylabel("µs added per statement (p50)")
    a.set_title("one statement at a time (goal line: 60 µs)")
    bars(b, doc["summary"], "cpu_us_per_stmt")
    b.set_ylabel("relay's CPU µs per statement")
    b.set_title(f"CPU per statement at {doc['args']['rate']} txn/s")
    bars(c, doc["summary"], "sat_ratio")
    c.axhline(0.8, color="grey", ls="--", lw=0.8)
    c.set_ylabel("throughput at saturation / direct")
    c.set_title("saturation (goal line: 0.8)")
    fig.suptitle(f"bench/run router, {doc['date']}, {doc['machine']['cpus']} CPUs (shared), sysbench oltp_read_write; "
                 f"median and min..max of {doc['args']['repeats']} rounds")
    fig.tight_layout()
    fig.savefig(out, dpi=110)

class Probe(threading.Thread):
    """One client on the router: an autocommit UPDATE at a time, each one timed; errors kept."""

    def __init__(self, host: str, port: int, user: str, password: str, key: int) -> None:
        super().__init__(daemon=True)
        self.addr, self.user, self.password, self.key = (host, port), user, password, key
        self.done: list[tuple[float, float, float]] = []  # (start on time.monotonic(), seconds, start on time.time())
        self.errors: list[tuple[float, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        import pymysql
        conn = None
        while not self.halt.is_set():
            t0, wall = time.monotonic(), time.time()
            try:
                if conn is None:
                    conn = pymysql.connect(host=self.addr[0], port=self.addr[1], user=self.user, password=self.password,
                                           database="sbtest", autocommit=True, ssl_disabled=True)
                with conn.cursor() as cur:
                    cur.execute("UPDATE probe SET n = n + 1 WHERE id = %s", (self.key,))
                self.done.append((t0, time.monotonic() - t0, wall))
            except pymysql.err.MySQLError as exc:
                self.errors.append((t0, f"{exc.args[0]} {str(exc.args[-1])[:80]}"))
                conn = None
            time.sleep(0.002)


def handover_mode(args) -> int:
    from slacker.router import local as local_router
    from slacker.router.control import fetch_status

    tmp = Path(tempfile.mkdtemp(prefix="bench-router-ho-"))
    run = tmp / "run"
    load = None
    probes: list[Probe] = []
    try:
        path = local_cluster.up(run, nodes=2, first_address=args.address, api_port=args.api_port,
                                port_range=args.port_range)
        cluster = load_cluster(str(path))
        agents, _ = cluster_clients(cluster)
        agents["node-1"].request("POST", "/v1/tenants", {"id": "bench"}, timeout_s=180)
        admin = local_router.start(run, path, "127.0.0.1:0")
        listen = local_router.listening(run)
        host, port = listen.rsplit(":", 1)
        port = int(port)
        deadline = time.monotonic() + 30
        while not any(t["tenant"] == "bench" and t["host"] for t in fetch_status(admin)["tenants"]):
            assert time.monotonic() < deadline, "the router never learned the tenant"
            time.sleep(0.1)
        ep = resolve("bench", cluster)
        user = f"{ep.user}@bench"
        import pymysql
        conn = pymysql.connect(host=host, port=port, user=user, password=ep.password, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
            cur.execute("CREATE TABLE sbtest.probe (id INT PRIMARY KEY, n BIGINT NOT NULL)")
            cur.execute("INSERT INTO sbtest.probe VALUES " + ", ".join(f"({i}, 0)" for i in range(args.ho_probes)))
        conn.close()
        conf = tmp / "sysbench.conf"
        conf.touch(mode=0o600)
        conf.write_text(f"mysql-password={ep.password}\n")
        sb = ["sysbench", "oltp_read_write", f"--config-file={conf}", f"--mysql-host={host}", f"--mysql-port={port}",
              f"--mysql-user={user}", "--mysql-db=sbtest", f"--tables={args.tables}", f"--table-size={args.table_size}"]
        subprocess.run(sb + ["prepare"], check=True, capture_output=True, timeout=600)
        sb_log = tmp / "sysbench.log"
        sb_start = time.monotonic()
        load = subprocess.Popen(sb + [f"--threads={args.ho_threads}", f"--rate={args.ho_rate}", "--time=86400",
                                      "--report-interval=1", "--mysql-ignore-errors=all", "run"],
                                stdout=open(sb_log, "w"), stderr=subprocess.STDOUT)
        probes = [Probe(host, port, user, ep.password, k) for k in range(args.ho_probes)]
        for p in probes:
            p.start()
        print(f"bench/run router --handover {args.handover}: {platform.node()} {os.cpu_count()} CPUs, sysbench "
              f"oltp_read_write {args.tables}x{args.table_size} at {args.ho_rate} txn/s, {args.ho_threads} threads, "
              f"prepared statements; {args.ho_probes} probe clients; all on the router {listen}", flush=True)
        time.sleep(3)
        migrations = []
        for i in range(args.handover):
            target = "node-2" if i % 2 == 0 else "node-1"
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "slacker", "--cluster", str(path), "migrate", "bench", "--to",
                                target, "--json"], capture_output=True, text=True, timeout=600)
            t1 = time.monotonic()
            doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"result": "error", "error": r.stderr}
            st = next(t for t in fetch_status(admin)["tenants"] if t["tenant"] == "bench")
            # The probes' statements that overlapped the migration, and their errors in it.
            waits = [d for p in probes for (s, d, _) in p.done if s < t1 and s + d > t0]
            # ... and those that overlapped the router's hold (router clock = this host's)
            h0, h1 = st.get("hold_started_at", 0), st.get("hold_ended_at", 0)
            in_hold = [d for p in probes for (_, d, w) in p.done if h0 and w < h1 and w + d > h0]
            errs = [e for p in probes for (s, e) in p.errors if t0 <= s <= t1]
            m = {"n": i + 1, "target": target, "result": doc.get("result"), "freeze_ms": doc.get("freeze_ms"),
                 "start_s": round(t0 - sb_start, 3), "end_s": round(t1 - sb_start, 3),
                 "probe_max_wait_ms": round(max(in_hold, default=0) * 1000, 2),
                 "probe_max_in_migration_ms": round(max(waits, default=0) * 1000, 2), "probe_errors": len(errs),
                 "router_hold_wait_max_ms": st["hold_wait_max_us"] / 1000, "router_drain_timeouts": st["drain_timeouts_total"],
                 "router_move_max_ms": st.get("move_max_us", 0) / 1000,
                 "router_ended_at_move": st["ended_at_move_total"], "router_move_failures": st["move_failures_total"]}
            migrations.append(m)
            print(f"migration {i + 1:3} to {target}: {m['result']}, freeze {m['freeze_ms']} ms, longest probe wait "
                  f"{m['probe_max_wait_ms']:.1f} ms (whole migration {m['probe_max_in_migration_ms']:.1f}), router's longest hold {m['router_hold_wait_max_ms']:.1f} ms, "
                  f"longest move {m['router_move_max_ms']:.1f} ms, "
                  f"probe errors {len(errs)}", flush=True)
            time.sleep(args.ho_gap)
        time.sleep(2)
    finally:
        for p in probes:
            p.halt.set()
        if load is not None:
            load.terminate()
            load.wait(30)
    text = sb_log.read_text()
    per_s = [(int(mm.group(1)), float(mm.group(2)), float(mm.group(3)))
             for mm in re.finditer(r"\[ (\d+)s \].*?err/s: ([0-9.]+) reconn/s: ([0-9.]+)", text)]
    sb_errors = round(sum(e for _, e, _ in per_s))
    sb_reconn = round(sum(r for _, _, r in per_s))
    for m in migrations:  # sysbench's errors in the seconds the migration overlapped
        m["sysbench_errors"] = round(sum(e for s, e, _ in per_s if m["start_s"] - 1 < s <= m["end_s"] + 1))
    tps = [float(mm.group(1)) for mm in re.finditer(r"\] thds: \d+ tps: ([0-9.]+)", text)]
    holds = [line.split(" ", 2)[2] for line in (run / "router" / "router.log").read_text().splitlines()
             if "hold" in line]
    print("router log, last holds:\n  " + "\n  ".join(holds[-6:]))
    local_router.stop(run)
    local_cluster.down(run, purge=True)
    n = len(migrations)
    ok = [m for m in migrations if m["result"] == "succeeded"]

    for m in ok:
        if m["freeze_ms"]:
            m["wait_over_freeze"] = round(m["probe_max_wait_ms"] / m["freeze_ms"], 2)

    def dist(key):
        vals = [m[key] for m in ok if m.get(key) is not None]
        return {"p50": round(pct(vals, 0.5), 1), "p99": round(pct(vals, 0.99), 1), "max": round(max(vals), 1)} if vals else {}

    failed = sb_errors + sum(m["probe_errors"] for m in migrations)
    summary = {"migrations": n, "succeeded": len(ok), "failed_requests": failed,
               "failed_per_migration": round(failed / max(1, n), 3), "sysbench_errors": sb_errors,
               "sysbench_reconnects": sb_reconn, "probe_errors": sum(m["probe_errors"] for m in migrations),
               "probe_statements": sum(len(p.done) for p in probes), "sysbench_tps_median": statistics.median(tps) if tps else 0,
               "freeze_ms": dist("freeze_ms"), "probe_max_wait_ms": dist("probe_max_wait_ms"),
               "probe_max_in_migration_ms": dist("probe_max_in_migration_ms"),
               "router_hold_wait_max_ms": dist("router_hold_wait_max_ms"), "router_move_max_ms": dist("router_move_max_ms"),
               "wait_over_freeze": dist("wait_over_freeze")}
    print(f"\n{n} migrations ({len(ok)} succeeded) under sysbench {summary['sysbench_tps_median']:.0f} txn/s + "
          f"{args.ho_probes} probes ({summary['probe_statements']} statements)")
    print(f"  failed client requests: {failed} ({summary['failed_per_migration']} per migration): sysbench errors "
          f"{sb_errors}, reconnects {sb_reconn}, probe errors {summary['probe_errors']}")
    for key, label in (("freeze_ms", "freeze window"), ("probe_max_wait_ms", "longest probe wait (hold)"),
                       ("probe_max_in_migration_ms", "... (whole migration)"),
                       ("router_hold_wait_max_ms", "router's longest hold"), ("router_move_max_ms", "router's longest move"),
                       ("wait_over_freeze", "probe wait / freeze")):
        d = summary[key]
        if d:
            unit = "" if key == "wait_over_freeze" else " ms"
            print(f"  {label:22} p50 {d['p50']}{unit}  p99 {d['p99']}{unit}  max {d['max']}{unit}")
    doc = {"machine": {"host": platform.node(), "cpus": os.cpu_count()}, "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "summary": summary, "migrations": migrations}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.plot:
        plot_handover([doc], args.plot)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if failed == 0 and len(ok) == n else 1


def plot_handover(docs: list[dict], out: Path) -> None:
    """Per migration, the freeze window and the longest waits clients saw; runs side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.4))
    top = 1.0
    for i, doc in enumerate(docs, 1):
        ms = [m for m in doc["migrations"] if m["result"] == "succeeded"]
        fr = [m["freeze_ms"] for m in ms]
        wait = [m["probe_max_wait_ms"] for m in ms]
        hold = [m["router_hold_wait_max_ms"] for m in ms]
        top = max([top, *fr, *wait])
        a.scatter(fr, wait, s=14, label=f"run {i}: longest probe wait")
        a.scatter(fr, hold, s=14, marker="^", label=f"run {i}: router's longest hold")
    a.plot([0, top], [0, top], color="grey", ls="--", lw=0.8, label="= freeze window")
    a.set_xlabel("freeze window of the migration, ms")
    a.set_ylabel("longest wait, ms")
    a.set_title("each migration: waits vs its freeze window")
    a.legend(fontsize=7)
    keys = (("freeze_ms", "freeze"), ("router_hold_wait_max_ms", "router hold"), ("probe_max_wait_ms", "probe wait"))
    width = 0.8 / len(docs)
    for i, doc in enumerate(docs):
        for j, (key, _) in enumerate(keys):
            d = doc["summary"][key]
            b.bar(j + i * width, d["p50"], width, color=f"C{i}", label=f"run {i + 1}" if j == 0 else None)
            b.errorbar(j + i * width, d["p50"], yerr=[[0], [d["max"] - d["p50"]]], color="black", capsize=3, lw=0.8)
    b.set_xticks([j + width * (len(docs) - 1) / 2 for j in range(len(keys))], [k[1] for k in keys])
    b.set_ylabel("ms: median bar, whisker to the max")
    failed = sum(d["summary"]["failed_requests"] for d in docs)
    n = sum(d["summary"]["migrations"] for d in docs)
    b.set_title(f"failed client requests: {failed} in {n} migrations")
    b.legend(fontsize=7)
    d0 = docs[0]
    fig.suptitle(f"bench/run router --handover, {d0['date']}, {d0['machine']['cpus']} CPUs (shared): sysbench "
                 f"{d0['args']['ho_rate']} txn/s ({d0['args']['ho_threads']} threads) + {d0['args']['ho_probes']} probes "
                 "on the router")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
