"""bench/run drain_many: `node drain` of a node of many small tenants, several moves at once against one at a time.

A local three-node cluster with a router (loopback, temp dir). node-1 holds --tenants tenants (shared by default,
or whole servers with --kind server), each with --rows rows of ~1 KB and an acknowledged-writes writer through
the router as app@TENANT (--writer-rate each); node-2 and node-3 start empty. Each repeat drains node-1 twice,
the order rotated: `slacker node drain node-1 --max-parallel N` (the node's one latency budget decides how many
run, each target receiving one copy at a time) and `--max-parallel 1` (one move at a time). After each drain the
tenants are moved back (node-2 and node-3 drained into node-1 at once: not measured) for the next one.

Per drain: its time, the moves' freezes, and node-1's latency (what the drain's own controller reads: its agent's
tenant-stats, once a second while the drain runs) against the drain's setpoint. In all: the time of the
drain with several at once ÷ the one at a time, paired per repeat; acknowledged writes lost (every acknowledged id
must be in its tenant's table: 0) and failed requests (errors and unknown outcomes: 0) over every move.

    bench/run drain_many [--tenants 100] [--rows 1000] [--kind shared|server] [--repeats 3] [--max-parallel 4]
                         [--sla 50ms] [--writer-rate 2] [--json FILE] [--plot PNG]
    bench/run drain_many --replot RUN.json [RUN.json ...] --plot PNG

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slacker import local_cluster
from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.client import Endpoint, TenantClient, resolve
from slacker.config import load_cluster
from slacker.router import local as local_router
from slacker.sources.node import node_latency
from slacker.units import parse_duration
from benchkit.host import machine as host_machine
from benchkit.migration import routed_cluster_gone
from benchkit.stats import pct, spread

ROW_BYTES = 1000
CHUNK_ROWS = 1000


def parse(argv=None):
    p = argparse.ArgumentParser(prog="bench/run drain_many", description=__doc__.splitlines()[0])
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--rows", type=int, default=1000, help="rows of ~1 KB per tenant")
    p.add_argument("--kind", choices=["shared", "server"], default="shared")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-parallel", type=int, default=4, help="the cap of the drain with several at once")
    p.add_argument("--sla", default="50ms", help="the drains' --sla")
    p.add_argument("--writer-rate", type=float, default=2.0, help="acknowledged writes per second per tenant")
    p.add_argument("--first-address", default="127.0.91.1")
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    p.add_argument("--replot", type=Path, nargs="+", metavar="JSON")
    return p.parse_args(argv)


def slacker(path: Path, *args: str, timeout_s: float = 7200) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "slacker", "--cluster", str(path), *args], capture_output=True,
                       text=True, timeout=timeout_s)
    return r.returncode, r.stdout, r.stderr


class NodeLatency(threading.Thread):
    """node-1's latency as the drain reads it (its agent's tenant-stats), once a second."""

    def __init__(self, agent) -> None:
        super().__init__(daemon=True)
        self.agent, self.samples, self._done = agent, [], threading.Event()

    def run(self) -> None:
        while not self._done.wait(1.0):
            try:
                doc = self.agent.request("GET", "/v1/tenant-stats", query={"history": 0}, timeout_s=5)
                lat = node_latency(doc.get("tenants", []))
            except Exception:  # noqa: BLE001 - a busy agent: that second is missing
                continue
            if lat is not None:
                self.samples.append((time.time(), lat))

    def stop(self) -> list:
        self._done.set()
        self.join(5)
        return self.samples


def overlap(agent, mids: set[str]) -> dict:
    """How the drain's moves lay in time, from their documents on the source's agent: the moves at once (the
    sum of their times over the span from the first start to the last end), the share of that span with none
    running, and each phase's median seconds."""
    import datetime as dt

    spans, phases = [], {}
    for d in agent.request("GET", "/v1/migrations", timeout_s=30).get("migrations", []):
        if d.get("id") not in mids or not d.get("phases"):
            continue
        t0 = dt.datetime.fromisoformat(d["phases"][0]["started_at"]).timestamp()
        spans.append((t0, t0 + float(d.get("duration_s") or 0)))
        for p in d["phases"]:
            if p.get("duration_s") is not None:
                phases.setdefault(p["name"], []).append(p["duration_s"])
    if not spans:
        return {}
    spans.sort()
    lo, hi = spans[0][0], max(e for _, e in spans)
    idle, reach = 0.0, lo
    for s, e in spans:
        idle += max(0.0, s - reach)
        reach = max(reach, e)
    return {"moves": len(spans), "at_once": round(sum(e - s for s, e in spans) / (hi - lo), 2) if hi > lo else None,
            "idle_share": round(idle / (hi - lo), 3) if hi > lo else None,
            "phase_s": {k: round(statistics.median(v), 3) for k, v in phases.items()}}


def drain(path: Path, agents, node: str, max_parallel: int, sla: str) -> dict:
    probe = NodeLatency(agents[node])
    probe.start()
    t0 = time.monotonic()
    rc, out, err = slacker(path, "node", "drain", node, "--sla", sla, "--max-parallel", str(max_parallel), "--json")
    took = time.monotonic() - t0
    samples = probe.stop()
    try:
        doc = json.loads(out)
    except ValueError:
        doc = {"outcome": "failed", "reason": err.strip()[-300:], "tenants": []}
    moved = [t for t in doc.get("tenants", []) if t.get("state") == "moved"]
    setpoints = [t["setpoint_s"] for t in moved if t.get("setpoint_s")]
    lat = [v for _, v in samples]
    sp = statistics.median(setpoints) if setpoints else None
    return {"max_parallel": max_parallel, "rc": rc, "outcome": doc.get("outcome"), "reason": doc.get("reason"),
            "s": round(took, 1), "moved": len(moved), "failed": sum(t.get("state") == "failed" for t in doc.get("tenants", [])),
            "freeze_ms": [t.get("freeze_ms") for t in moved if t.get("freeze_ms") is not None],
            "move_s": [t.get("duration_s") for t in moved if t.get("duration_s") is not None],
            "setpoint_s": sp, "latency_mean_s": statistics.fmean(lat) if lat else None,
            "latency_ratio": (statistics.fmean(lat) / sp) if lat and sp else None,
            "latency_samples": len(lat),
            # the source keeps its last KEEP_FINISHED ended migrations: the drain's last moves
            "overlap": overlap(agents[node], {str(t.get("migration")) for t in moved})}


def move_back(path: Path) -> None:
    """node-2 and node-3 drained into node-1 at once (both cordoned first: neither takes the other's)."""
    for n in ("node-1",):
        slacker(path, "node", "uncordon", n)
    for n in ("node-2", "node-3"):
        slacker(path, "node", "cordon", n, "--reason", "bench reset")
    procs = [subprocess.Popen([sys.executable, "-m", "slacker", "--cluster", str(path), "node", "drain", n,
                               "--sla", "10s", "--max-parallel", "1", "--json"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for n in ("node-2", "node-3")]
    for p in procs:
        p.wait(timeout=7200)
    for n in ("node-2", "node-3"):
        slacker(path, "node", "uncordon", n)


def plot(runs: list[dict], out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.5))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    labels, times, ratios = [], [], []
    for run in runs:
        for variant in ("several", "one"):
            ds = [r[variant] for r in run["repeats"]]
            labels.append(f"{run['args']['kind']}, {'max ' + str(ds[0]['max_parallel']) if variant == 'several' else 'one at a time'}")
            times.append([d["s"] for d in ds])
            ratios.append([d["latency_ratio"] for d in ds if d["latency_ratio"] is not None])
    import statistics as st
    x = list(range(len(labels)))
    for ax, series, label in ((ax1, times, "drain time (s)"), (ax2, ratios, "node latency during the drain ÷ setpoint (mean)")):
        med = [st.median(v) if v else 0 for v in series]
        lo = [m - min(v) if v else 0 for m, v in zip(med, series)]
        hi = [max(v) - m if v else 0 for m, v in zip(med, series)]
        ax.bar(x, med, yerr=[lo, hi], capsize=4, color="tab:blue")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7, rotation=20)
        ax.set_ylabel(label, fontsize=8)
    ax2.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    a = runs[0]["args"]
    fig.suptitle(f"node drain of {a['tenants']} small tenants with a writer each through the router", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv=None) -> int:
    args = parse(argv)
    if args.replot:
        plot([json.loads(p.read_text()) for p in args.replot], args.plot)
        print(f"wrote {args.plot}")
        return 0
    parse_duration(args.sla)
    tmp = Path(tempfile.mkdtemp(prefix="bench-drain-many-"))
    run_dir = tmp / "run"
    writers: dict[str, AckedWriter] = {}
    try:
        path = local_cluster.up(run_dir, nodes=3, first_address=args.first_address)
        cluster = load_cluster(str(path))
        local_router.start(run_dir, path, "127.0.0.1:0")
        host, port = local_router.listening(run_dir).rsplit(":", 1)
        agents, directory = cluster_clients(cluster)
        ids = [f"d{i}" for i in range(1, args.tenants + 1)]
        made, create_s = {}, []
        for tid in ids:
            t0 = time.monotonic()
            agents["node-1"].request("POST", "/v1/tenants",
                                     {"id": tid, **({"kind": "shared"} if args.kind == "shared" else {})}, timeout_s=180)
            create_s.append(time.monotonic() - t0)
            made[tid] = resolve(tid, cluster)
            conn = made[tid].connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS {tid}")
                    cur.execute(f"CREATE TABLE {tid}.bulk (id INT PRIMARY KEY, body VARCHAR(1000))")
                    for lo in range(0, args.rows, CHUNK_ROWS):
                        cur.execute(f"INSERT INTO {tid}.bulk VALUES " + ",".join(
                            f"({i}, REPEAT(MD5({i}), 30))" for i in range(lo, min(args.rows, lo + CHUNK_ROWS))))
            finally:
                conn.close()
        print(f"{len(ids)} {args.kind} tenants of {args.rows:,} rows made on node-1 (create p50 "
              f"{pct(create_s, 0.5):.2f} s)", flush=True)
        for i, tid in enumerate(ids):
            ep = Endpoint(tid, host, int(port), f"app@{tid}", made[tid].password)
            writers[tid] = AckedWriter(TenantClient(tid, lambda ep=ep: ep, reconnect_timeout_s=10), writer_id=i + 1,
                                       rate_per_s=args.writer_rate, database=tid).start()
        time.sleep(10)
        repeats = []
        for r in range(args.repeats):
            order = ["several", "one"] if r % 2 == 0 else ["one", "several"]
            row = {}
            for variant in order:
                d = drain(path, agents, "node-1", args.max_parallel if variant == "several" else 1, args.sla)
                row[variant] = d
                f = d["freeze_ms"]
                print(f"repeat {r + 1} {variant:7s}: {d['outcome']}, {d['s']:.0f} s, {d['moved']} moved, "
                      f"{d['failed']} failed; freeze p50 {pct(f, 0.5):.0f} / p99 {pct(f, 0.99):.0f} ms; node-1 "
                      f"latency ÷ setpoint {d['latency_ratio'] if d['latency_ratio'] is None else round(d['latency_ratio'], 2)} "
                      f"(setpoint {d['setpoint_s']})" + (f"  ({d['reason']})" if d["outcome"] != "drained" else ""),
                      flush=True)
                o = d.get("overlap") or {}
                if o:
                    print(f"  its last {o['moves']} moves: {o['at_once']} at once, none running {o['idle_share']:.0%} "
                          f"of the time; phases (median s) " + ", ".join(f"{k} {v}" for k, v in o["phase_s"].items()),
                          flush=True)
                move_back(path)
                back = sum(directory.lookup(t).node == "node-1" for t in ids)
                if back != len(ids):
                    print(f"  only {back} of {len(ids)} tenants back on node-1", flush=True)
            row["ratio"] = (row["several"]["s"] / row["one"]["s"]) if row["one"]["s"] else None
            repeats.append(row)
            print(f"repeat {r + 1}: several ÷ one at a time {row['ratio']:.2f}", flush=True)
        time.sleep(2)
        for w in writers.values():
            w.stop()
        lost = failed = acked = 0
        for tid, w in writers.items():
            conn = resolve(tid, cluster).connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT id FROM {tid}.log")
                    present = {x[0] for x in cur.fetchall()}
            finally:
                conn.close()
            lost += len(set(w.acked) - present)
            failed += len(w.unknown) + sum(w.errors.values())
            acked += len(w.acked)
        freezes = [f for row in repeats for v in ("several", "one") for f in row[v]["freeze_ms"]]
        summary = {"machine": host_machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "repeats": repeats, "ratio": spread([row["ratio"] for row in repeats]),
                   "several_s": spread([row["several"]["s"] for row in repeats]),
                   "one_s": spread([row["one"]["s"] for row in repeats]),
                   "latency_ratio": {v: spread([row[v]["latency_ratio"] for row in repeats]) for v in ("several", "one")},
                   "freeze_ms": {"p50": pct(freezes, 0.5), "p99": pct(freezes, 0.99), "max": max(freezes, default=None)},
                   "moves": len(freezes), "acked": acked, "lost": lost, "failed_requests": failed,
                   "create_s": {"p50": pct(create_s, 0.5), "p99": pct(create_s, 0.99)}}
        s = summary
        print(f"\ndrain with several at once: {s['several_s']['median']} s ({s['several_s']['min']}-{s['several_s']['max']}); "
              f"one at a time: {s['one_s']['median']} s ({s['one_s']['min']}-{s['one_s']['max']}); ratio paired "
              f"{s['ratio']['median']} ({s['ratio']['min']}-{s['ratio']['max']})")
        print(f"node-1 latency ÷ setpoint during the drains (mean): several {s['latency_ratio']['several']['median']}, "
              f"one {s['latency_ratio']['one']['median']}")
        print(f"{s['moves']} moves: freeze p50 {s['freeze_ms']['p50']:.0f} ms, p99 {s['freeze_ms']['p99']:.0f} ms; "
              f"acknowledged writes {acked:,}, lost {lost}, failed requests {failed}")
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        if args.plot:
            plot([json.loads(json.dumps(summary, default=str))], args.plot)
        ok = lost == 0 and failed == 0 and all(row[v]["outcome"] == "drained" for row in repeats for v in ("several", "one"))
        return 0 if ok else 1
    finally:
        routed_cluster_gone(run_dir, tmp, "drain_many", writers.values())


if __name__ == "__main__":
    raise SystemExit(main())
