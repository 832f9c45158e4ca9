"""bench/run revert: moves that keep their source, reverts onto the kept copy, and what a kept copy costs the new owner.

A local two-node cluster with a router (loopback, temp dir), one whole-server tenant loaded with about --mb MB,
--writers acknowledged-writes writers (--writer-rate each) writing through the router as app@TENANT throughout
parts 1 and 2.

1. Reverts: --reverts times, `slacker migrate TENANT --to node-2 --keep-source 1h`, then (once the kept copy
   on node-1 has caught up) `slacker migrate --revert TENANT`. Per revert: its freeze, bytes copied (must be 0),
   its duration; their p50 / p99 (goal: <= 50 / 100 ms over >= 10).
2. Bank transfers (slacker.oltp: multi-statement, row-lock waits on hot accounts) through the router across one
   more move and its revert: no client dies, the consistency check passes.
3. The cost of a kept copy on the new owner: the tenant on node-2 with its copy kept on node-1, blocks of
   --block-s with the kept copy replicating (after it caught up) or its replication stopped, in rotated pairs
   (--pairs); in each, --cost-threads closed-loop writers through the router (throughput, and latency at
   saturation), then the same writers paced at half the pair's unreplicated throughput (latency with
   headroom). Per pair the ratio with/without; median and spread (goal: <= 1.05 for throughput lost and
   latency). Twice: with both nodes on all of this machine's cores (the kept copy's own apply competes with the
   owner: an upper bound), and isolated (the kept copy's server alone on CPU 1, the rest of the cluster and the
   clients on CPU 0: the two nodes as separate hosts, as far as CPU goes; they still share one disk).

Printed: each part's figures, acknowledged writes lost (must be 0) and failed requests (must be 0).

    bench/run revert [--mb 50] [--writers 10] [--writer-rate 50] [--reverts 10] [--pairs 3] [--block-s 15]
                     [--cost-threads 4] [--json FILE] [--plot PNG]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from slacker import local_cluster, oltp
from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.cli import main as cli
from slacker.client import Endpoint, TenantClient, resolve
from slacker.config import load_cluster
from slacker.router import local as local_router
from slacker.tenants import Tenant, TenantInfo
from benchkit.host import machine as host_machine
from benchkit.migration import writers_verdict, create_loaded_tenant, node_dir, routed_cluster_gone
from benchkit.stats import pct, spread

TENANT = "r1"
CONNECTION = "slacker_migration"


def parse(argv=None):
    p = argparse.ArgumentParser(prog="bench/run revert", description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=50.0, help="the tenant's data, in MB")
    p.add_argument("--writers", type=int, default=10)
    p.add_argument("--writer-rate", type=float, default=50.0, help="acknowledged writes per second per writer")
    p.add_argument("--reverts", type=int, default=10)
    p.add_argument("--pairs", type=int, default=3, help="with/without pairs of the kept copy's cost")
    p.add_argument("--block-s", type=float, default=15.0, help="each cost block's measured seconds")
    p.add_argument("--cost-threads", type=int, default=4)
    p.add_argument("--first-address", default="127.0.93.1")
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path, help="the freeze per revert and the cost ratios per pair (PNG)")
    return p.parse_args(argv)


def run_cli(path: Path, *args: str):
    r = CliRunner().invoke(cli, ["--cluster", str(path), *args])
    if r.exit_code != 0:
        raise SystemExit(f"slacker {' '.join(args)}: exit {r.exit_code}: {r.output.strip()[-400:]}")
    return r


def kept(agents) -> list[dict]:
    return [k for a in agents.values() for k in a.request("GET", "/v1/kept")["kept"]]


def wait_kept_caught_up(agents, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ks = [k for k in kept(agents) if k["replicating"] and k["lag_s"] == 0]
        if ks:
            return ks[0]
        time.sleep(0.2)
    raise SystemExit(f"the kept copy did not catch up in {timeout_s:.0f}s: {kept(agents)}")


def kept_admin(cluster, node: str):
    """An admin connection to node's copy of the tenant (its socket), to pause and resume its replication."""
    root = node_dir(cluster, node) / "tenants" / TENANT
    info = TenantInfo(**json.loads((root / "tenant.json").read_text()))
    return Tenant(root, info, node_dir(cluster, node) / "sock").admin_connect(timeout_s=10)


class Loop:
    """`threads` writers through the router, each on its own connection: INSERTs, autocommit; closed loop, or
    paced at `rate` statements/s in all. Per statement latency."""

    def __init__(self, ep: Endpoint, threads: int) -> None:
        self.ep, self.threads = ep, threads
        conn = ep.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE IF NOT EXISTS cost")
                cur.execute("CREATE TABLE IF NOT EXISTS cost.w (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                            "t INT, body VARCHAR(200))")
        finally:
            conn.close()

    def run(self, seconds: float, rate: float | None = None, warmup_s: float = 2.0) -> dict:
        lat: list[float] = []
        errors = [0]
        lock = threading.Lock()
        t_end = time.monotonic() + warmup_s + seconds
        t_measure = time.monotonic() + warmup_s
        gap = self.threads / rate if rate else 0.0

        def worker(i: int) -> None:
            conn = self.ep.connect()
            mine: list[float] = []
            nxt = time.monotonic()
            try:
                with conn.cursor() as cur:
                    while (now := time.monotonic()) < t_end:
                        if gap:
                            if now < nxt:
                                time.sleep(nxt - now)
                            nxt += gap
                        t0 = time.monotonic()
                        try:
                            cur.execute("INSERT INTO cost.w (t, body) VALUES (%s, REPEAT('x', 150))", (i,))
                        except Exception:  # noqa: BLE001 - counted, the loop goes on
                            errors[0] += 1
                            continue
                        if t0 >= t_measure:
                            mine.append(time.monotonic() - t0)
            finally:
                conn.close()
                with lock:
                    lat.extend(mine)

        ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return {"ops_per_s": round(len(lat) / seconds, 1), "mean_ms": round(1000 * sum(lat) / max(1, len(lat)), 3),
                "p99_ms": round(1000 * pct(lat, 0.99), 3), "errors": errors[0]}


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus` (a process's affinity call moves one thread only)."""
    import os

    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, PermissionError):
            pass


def isolate(run_dir: Path, kept_pid: int | None) -> None:
    """With `kept_pid`: the kept copy's server alone on CPU 1, everything else of the cluster (agents, router, the
    owner's server) and this process on CPU 0, as if the two nodes were separate hosts. None: all back on all."""
    import os
    import subprocess

    every = set(range(os.cpu_count() or 1))
    out = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    for pid in [int(x) for x in out] + [os.getpid()]:
        pin(pid, every if kept_pid is None else ({1} if pid == kept_pid else {0}))


def set_replication(cluster, agents, node: str, on: bool) -> None:
    conn = kept_admin(cluster, node)
    try:
        with conn.cursor() as cur:
            cur.execute(f"{'START' if on else 'STOP'} SLAVE '{CONNECTION}'")
    finally:
        conn.close()
    if on:
        wait_kept_caught_up(agents)


def cost_pairs(cluster, agents, loop: Loop, args) -> dict:
    """--pairs rotated pairs of blocks, the kept copy replicating or not; the ratios with/without per pair."""
    pairs = []
    for i in range(args.pairs):
        order = [True, False] if i % 2 == 0 else [False, True]
        got = {}
        for on in order:
            set_replication(cluster, agents, "node-1", on)
            got[on] = {"saturated": loop.run(args.block_s)}
        base = got[False]["saturated"]["ops_per_s"]
        for on in order:
            set_replication(cluster, agents, "node-1", on)
            got[on]["paced"] = loop.run(args.block_s, rate=base / 2)
        ratio = {"throughput": round(got[True]["saturated"]["ops_per_s"] / got[False]["saturated"]["ops_per_s"], 3),
                 "latency_sat": round(got[True]["saturated"]["mean_ms"] / got[False]["saturated"]["mean_ms"], 3),
                 "latency_paced": round(got[True]["paced"]["mean_ms"] / got[False]["paced"]["mean_ms"], 3)}
        pairs.append({"order": ["with" if o else "without" for o in order], "with": got[True],
                      "without": got[False], "ratio": ratio})
        print(f"pair {i + 1} ({'/'.join(pairs[-1]['order'])}): throughput {got[True]['saturated']['ops_per_s']:.0f} "
              f"vs {got[False]['saturated']['ops_per_s']:.0f}/s ({ratio['throughput']:.3f}), mean latency "
              f"saturated {ratio['latency_sat']:.3f}x, paced at {base / 2:.0f}/s {ratio['latency_paced']:.3f}x",
              flush=True)
    return {"pairs": pairs, **{k: spread([p["ratio"][k] for p in pairs])
                               for k in ("throughput", "latency_sat", "latency_paced")}}


def plot(summary: dict, out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(2, 1)
    r = summary["reverts"]
    ax1.plot([x["n"] for x in r], [x["freeze_ms"] for x in r], marker="o", label="revert freeze")
    ax1.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax1.axhline(50, color="grey", linestyle="--", linewidth=1)
    ax1.set_ylabel("freeze (ms)")
    ax1.set_xlabel("revert")
    ax1.set_title(f"reverts onto a kept copy under {summary['writes_per_s']:.0f} acknowledged writes/s through the "
                  "router (0 bytes copied)", fontsize=9)
    for mode, style in (("shared cores", ":"), ("isolated", "-")):
        pairs = summary["cost"][mode]["pairs"]
        n = list(range(1, len(pairs) + 1))
        for key, label in (("throughput", "closed-loop throughput"), ("latency_sat", "latency, saturated"),
                           ("latency_paced", "latency, paced at half")):
            ax2.plot(n, [p["ratio"][key] for p in pairs], marker="o", linestyle=style, label=f"{label} ({mode})")
    ax2.axhline(1.0, color="grey", linewidth=1)
    ax2.axhline(1.05, color="grey", linestyle=":", linewidth=1)
    ax2.set_ylabel("kept copy replicating ÷ not")
    ax2.set_xlabel("pair")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv=None) -> int:
    args = parse(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-revert-"))
    run_dir = tmp / "run"
    writers: list[AckedWriter] = []
    try:
        path = local_cluster.up(run_dir, nodes=2, first_address=args.first_address)
        cluster = load_cluster(str(path))
        local_router.start(run_dir, path, "127.0.0.1:0")
        host, port = local_router.listening(run_dir).rsplit(":", 1)
        agents, directory = cluster_clients(cluster)
        create_loaded_tenant(cluster, TENANT, rows=int(args.mb * 400))  # ~2.5 KB a row
        made = resolve(TENANT, cluster)
        ep = Endpoint(TENANT, host, int(port), f"app@{TENANT}", made.password)

        def client():
            return TenantClient(TENANT, lambda: ep, reconnect_timeout_s=10)

        for i in range(args.writers):
            writers.append(AckedWriter(client(), writer_id=i + 1, rate_per_s=args.writer_rate).start())
        time.sleep(3)
        t_writes, n_writes = time.monotonic(), sum(len(w.acked) for w in writers)

        # 1. reverts
        reverts = []
        for n in range(1, args.reverts + 1):
            run_cli(path, "migrate", TENANT, "--to", "node-2", "--keep-source", "1h")
            wait_kept_caught_up(agents)
            doc = json.loads(run_cli(path, "migrate", "--revert", TENANT, "--json").output)
            reverts.append({"n": n, "result": doc["result"], "freeze_ms": doc.get("freeze_ms"),
                            "bytes_copied": doc["bytes_done"], "duration_s": doc["duration_s"],
                            "handover_attempts": len(doc.get("handover_attempts") or [])})
            print(f"revert {n}: {doc['result']}, freeze {doc.get('freeze_ms')} ms, {doc['bytes_done']} bytes copied, "
                  f"{doc['duration_s']:.1f} s", flush=True)
        writes_per_s = (sum(len(w.acked) for w in writers) - n_writes) / (time.monotonic() - t_writes)

        # 2. bank transfers across a move and its revert
        conn = resolve(TENANT, cluster).connect()
        try:
            oltp.load(conn, accounts=1000)
        finally:
            conn.close()
        bank = oltp.TransferLoad(client, threads=8, think_s=0.02).start()
        time.sleep(2)
        run_cli(path, "migrate", TENANT, "--to", "node-2", "--keep-source", "1h")
        time.sleep(2)
        wait_kept_caught_up(agents)
        run_cli(path, "migrate", "--revert", TENANT)
        time.sleep(2)
        alive = all(t.is_alive() for t in bank._workers)
        bank.stop()
        conn = resolve(TENANT, cluster).connect()
        try:
            check = oltp.check(conn, bank.acked, bank.failed)
        finally:
            conn.close()
        bank_doc = {"transfers_acked": len(bank.acked), "unknown": len(bank.unknown), "clients_alive": alive,
                    "consistent": check.ok, "missing_acked": len(check.missing_acked),
                    "balance_errors": len(check.balance_errors), "tps": bank.summary().get("tps")}
        print(f"bank transfers across a move and its revert: {len(bank.acked)} acknowledged, consistent "
              f"{check.ok}, clients alive {alive}, unknown {len(bank.unknown)}", flush=True)

        # the writers' verdict before the cost blocks
        time.sleep(1)
        acked, lost, failed = writers_verdict(cluster, TENANT, writers)

        # 3. the kept copy's cost on the new owner
        run_cli(path, "migrate", TENANT, "--to", "node-2", "--keep-source", "1h")
        wait_kept_caught_up(agents)
        loop = Loop(ep, args.cost_threads)
        loop.run(5)  # warm the owner's buffer pool and the router's connections
        kept_pid = int((node_dir(cluster, "node-1") / "tenants" / TENANT / "run" / "mariadbd.pid").read_text())
        cost = {}
        for mode in ("shared cores", "isolated"):
            isolate(run_dir, kept_pid if mode == "isolated" else None)
            cost[mode] = cost_pairs(cluster, agents, loop, args)
        isolate(run_dir, None)
        set_replication(cluster, agents, "node-1", True)
        run_cli(path, "migrate", "--release", TENANT)
        left = (node_dir(cluster, "node-1") / "tenants" / TENANT).exists()

        freezes = [r["freeze_ms"] for r in reverts if r["freeze_ms"] is not None]
        summary = {
            "machine": host_machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "writes_per_s": round(writes_per_s, 1), "reverts": reverts,
            "succeeded": sum(r["result"] == "succeeded" for r in reverts),
            "bytes_copied": sum(r["bytes_copied"] for r in reverts),
            "freeze_ms": {"p50": pct(freezes, 0.5), "p99": pct(freezes, 0.99), "max": max(freezes, default=None)},
            "revert_s": spread([r["duration_s"] for r in reverts]),
            "bank": bank_doc, "acked": len(acked), "lost": lost, "failed_requests": failed,
            "cost": cost,
            "released_leaves_nothing": not left,
        }
        print(f"\n{summary['succeeded']}/{len(reverts)} reverts succeeded, {summary['bytes_copied']} bytes copied; "
              f"freeze p50 {summary['freeze_ms']['p50']:.0f} ms, p99 {summary['freeze_ms']['p99']:.0f} ms, max "
              f"{summary['freeze_ms']['max']:.0f} ms; revert duration median {summary['revert_s']['median']} s")
        print(f"acknowledged writes: {len(acked)}, lost {lost}; failed requests {failed}; bank transfers consistent "
              f"{check.ok}")
        for mode, c in cost.items():
            print(f"kept copy's cost on the owner, {mode} (replicating / not, {len(c['pairs'])} pairs): throughput "
                  f"{c['throughput']}, mean latency saturated {c['latency_sat']}, paced {c['latency_paced']}")
        print(f"after --release: {'the old node still holds the tenant' if left else 'nothing left on node-1'}")
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        if args.plot:
            plot(summary, args.plot)
        ok = (summary["succeeded"] == len(reverts) and summary["bytes_copied"] == 0 and lost == 0 and failed == 0
              and check.ok and alive and not left)
        return 0 if ok else 1
    finally:
        routed_cluster_gone(run_dir, tmp, "revert", writers)


if __name__ == "__main__":
    raise SystemExit(main())
