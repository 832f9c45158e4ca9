"""Online verification (--verify): what it adds to the freeze, how long it takes, what it costs the tenant.

One local two-node cluster per tenant size (loopback, temp dir), a tenant preloaded to about
--sizes (rows of ~2.5 KB), a steady acknowledged write load (AckedWriter). The tenant is
migrated back and forth under the latency controller at one --setpoint, migrations with and
without --verify alternating, in --repeats blocks of --migrations pairs. Prints a row per
migration and, per size, as median (min-max) over the repeats:

- the freeze window's p50 and p99 with --verify and without, and their ratio (goal: p99 <= 1.2x);
- verification time / snapshot time of the same migration (both at the same setpoint);
- the tenant's latency during verification and during the snapshot, as the controller measured
  it each step, over the setpoint (median and p95 of latency / setpoint);
- acknowledged writes lost (must be 0) and whether every verification found the copy equal.

    bench/run verify [--sizes 100MB,1GB] [--repeats 3] [--migrations 2] [--json F] [--plot F.png]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


from slacker import local_cluster
from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.client import TenantClient, resolve
from slacker.config import load_cluster
from slacker.units import parse_size
from benchkit.stats import fmt_spread as fmt, num, pct, spread
from benchkit.host import machine as host_machine
from benchkit.migration import cluster_down

ROW_BYTES = 2400  # REPEAT(MD5(i), 32) x 75




class Run:
    def __init__(self, label: str, size: int, tmp: Path, k: int, args) -> None:
        self.label, self.size, self.args = label, size, args
        self.run_dir = tmp / label
        path = local_cluster.up(self.run_dir, nodes=2, first_address=f"127.0.{87 + k}.2", api_port=7890 + k,
                                port_range=f"{46306 + 500 * k}-{46805 + 500 * k}")
        self.cluster = load_cluster(str(path))
        self.agents, self.directory = cluster_clients(self.cluster)
        self.rows: list[dict] = []
        self.writers: list[AckedWriter] = []

    def load(self) -> None:
        self.agents["node-1"].request("POST", "/v1/tenants", {"id": "bench"}, timeout_s=180)
        conn = resolve("bench", self.cluster).connect()
        n = self.size // ROW_BYTES
        t0 = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), body TEXT)")
            for s in range(0, n, 1000):
                cur.execute("INSERT INTO shop.items VALUES " + ",".join(
                    f"({i}, 'item-{i}', REPEAT(MD5({i}), 75))" for i in range(s, min(n, s + 1000))))
        conn.close()
        print(f"{self.label}: loaded {n} rows in {time.monotonic() - t0:.0f}s", flush=True)
        self.writers = [AckedWriter(TenantClient.for_cluster("bench", self.cluster), writer_id=w + 1,
                                    rate_per_s=self.args.rate / self.args.writers).start()
                        for w in range(self.args.writers)]

    def migrate(self, repeat: int, n: int, verify: bool) -> dict:
        own = self.directory.lookup("bench")
        target = "node-2" if own.node == "node-1" else "node-1"
        doc = self.agents[own.node].request("POST", "/v1/migrations", {
            "tenant": "bench", "target": target, "verify": verify, "max_freeze_s": self.args.max_freeze,
            "controller": {"setpoint_s": self.args.setpoint, "force": True}}, timeout_s=120)
        while doc["active"]:
            time.sleep(0.2)
            doc = self.agents[own.node].request("GET", f"/v1/migrations/{doc['id']}")
        series = [json.loads(x) for x in
                  self.agents[own.node].request("GET", f"/v1/migrations/{doc['id']}/series")["lines"]]
        phases = {p["name"]: p.get("duration_s") for p in doc["phases"] if p["name"] in ("snapshot", "verify")}

        def over(phase):  # latency / setpoint per controller step of the phase
            return [x["latency_s"] / x["setpoint_s"] for x in series
                    if x["phase"] == phase and x.get("latency_s") is not None and x.get("setpoint_s")]

        v = doc.get("verify") or {}
        r = {"label": self.label, "repeat": repeat, "n": n, "verify": verify, "result": doc["result"],
             "freeze_ms": doc["freeze_ms"], "steps_ms": doc.get("handover_steps_ms"),
             "snapshot_s": phases.get("snapshot"),
             "verify_s": v.get("duration_s"), "verify_result": v.get("result"), "verify_rows": v.get("rows"),
             "target_held_s": v.get("target_held_s"), "bytes": doc["bytes_total"],
             "lat_snapshot": over("snapshot"), "lat_verify": over("verify"),
             "error": (doc.get("error") or {}).get("what")}
        self.rows.append(r)
        ratio = f"{r['verify_s'] / r['snapshot_s']:.2f}" if verify and r["verify_s"] and r["snapshot_s"] else "-"
        lv = pct(r["lat_verify"], 0.5)
        print(f"{self.label:6} {repeat}.{n} {'verify' if verify else 'plain ':6} {r['result']:9} freeze "
              f"{r['freeze_ms'] or 0:6.1f} ms  snapshot {r['snapshot_s'] or 0:6.1f}s  verify "
              f"{r['verify_s'] or 0:6.1f}s ({ratio}x)  latency/setpoint snapshot p50 "
              f"{pct(r['lat_snapshot'], 0.5) or 0:.2f} verify p50 {lv or 0:.2f}"
              + (f"  ({r['error']})" if r["error"] else ""), flush=True)
        return r

    def finish(self) -> dict:
        for w in self.writers:
            w.stop()
        conn = resolve("bench", self.cluster).connect()
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM acks.log")
            have = {r[0] for r in cur.fetchall()}
        conn.close()
        ids = [i for w in self.writers for i in w.acked]
        per = []
        for rep in sorted({r["repeat"] for r in self.rows}):
            rows = [r for r in self.rows if r["repeat"] == rep and r["result"] == "succeeded"]
            plain = [r["freeze_ms"] for r in rows if not r["verify"]]
            ver = [r["freeze_ms"] for r in rows if r["verify"]]
            ratios = [r["verify_s"] / r["snapshot_s"] for r in rows if r["verify"] and r["verify_s"] and r["snapshot_s"]]
            lat_v = [x for r in rows for x in r["lat_verify"]]
            lat_s = [x for r in rows for x in r["lat_snapshot"]]
            per.append({k: num(v) for k, v in {"freeze_p50_plain": pct(plain, 0.5), "freeze_p50_verify": pct(ver, 0.5),
                        "freeze_p99_plain": pct(plain, 0.99), "freeze_p99_verify": pct(ver, 0.99),
                        "p99_ratio": (pct(ver, 0.99) / pct(plain, 0.99)) if plain and ver else None,
                        "verify_over_snapshot": statistics.median(ratios) if ratios else None,
                        "lat_verify_p50": pct(lat_v, 0.5), "lat_verify_p95": pct(lat_v, 0.95),
                        "lat_snapshot_p50": pct(lat_s, 0.5), "lat_snapshot_p95": pct(lat_s, 0.95),
                        "succeeded": len(rows), "migrations": len([r for r in self.rows if r["repeat"] == rep])}.items()})
        ok = [r for r in self.rows if r["result"] == "succeeded"]
        pooled = {f"{k}_{q}": num(pct([r["freeze_ms"] for r in ok if r["verify"] == (k == "verify")], p))
                  for k in ("plain", "verify") for q, p in (("p50", 0.5), ("p99", 0.99))}
        return {"label": self.label, "bytes": self.size, "repeats": per, "pooled_freeze_ms": pooled,
                **{k: spread([b[k] for b in per]) for k in per[0]},
                "acked": len(ids), "acked_lost": len(set(ids) - have),
                "all_equal": all(r["verify_result"] == "equal" for r in self.rows if r["verify"])}

    def down(self) -> None:
        cluster_down(self.run_dir, self.label)


def plot(rows: list[dict], setpoint_s: float, out: Path, machine: str) -> None:
    """Freeze per migration with and without --verify; verification / snapshot time; latency / setpoint."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = list(dict.fromkeys(r["label"] for r in rows))
    fig = Figure(figsize=(13, 4.2))
    ax, bx, cx = fig.add_subplot(1, 3, 1), fig.add_subplot(1, 3, 2), fig.add_subplot(1, 3, 3)
    for i, lab in enumerate(labels):
        for j, verify in enumerate((False, True)):
            f = [r["freeze_ms"] for r in rows if r["label"] == lab and r["verify"] == verify and r["freeze_ms"]]
            x = i * 3 + j
            ax.scatter([x] * len(f), f, s=14, alpha=0.7, color="tab:orange" if verify else "tab:blue")
            if f:
                ax.hlines(statistics.median(f), x - 0.3, x + 0.3, color="black")
        ratios = [r["verify_s"] / r["snapshot_s"] for r in rows
                  if r["label"] == lab and r["verify"] and r["verify_s"] and r["snapshot_s"]]
        bx.scatter([i] * len(ratios), ratios, s=18)
        lv = [x for r in rows if r["label"] == lab for x in r["lat_verify"]]
        ls = [x for r in rows if r["label"] == lab for x in r["lat_snapshot"]]
        cx.boxplot([ls, lv], positions=[i * 3, i * 3 + 1], widths=0.7)
    ax.set_xticks([i * 3 + j for i in range(len(labels)) for j in (0, 1)],
                  [f"{lab}\n{'--verify' if j else 'without'}" for lab in labels for j in (0, 1)], fontsize=7)
    ax.set_ylabel("freeze window (ms); line: median")
    ax.set_title("freeze window per migration")
    bx.set_xticks(range(len(labels)), labels)
    bx.set_ylabel("verification time / snapshot time")
    bx.set_title(f"same migration, setpoint {setpoint_s * 1000:.0f} ms")
    cx.set_xticks([i * 3 + j for i in range(len(labels)) for j in (0, 1)],
                  [f"{lab}\n{'verify' if j else 'snapshot'}" for lab in labels for j in (0, 1)], fontsize=7)
    cx.axhline(1.0, color="red", linestyle=":", label="setpoint")
    cx.set_yscale("log")  # a second of someone else's load on the shared machine shows as 10x and more
    cx.set_ylabel("tenant latency / setpoint, per controller step")
    cx.set_title("latency during the phase")
    cx.legend(fontsize=7)
    fig.suptitle(f"bench/run verify, {machine}", fontsize=8)
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100MB", help="comma-separated tenant sizes, one cluster each, in turn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--migrations", type=int, default=2, help="pairs (without, with --verify) per repeat")
    ap.add_argument("--setpoint", type=float, default=0.05, help="latency setpoint in seconds (default 50 ms)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=100, help="offered acknowledged writes/s across writers")
    ap.add_argument("--max-freeze", type=float, default=0.5)
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--replot", default=None, metavar="JSON")
    args = ap.parse_args()
    machine = host_machine()
    if args.replot:
        doc = json.loads(Path(args.replot).read_text())
        plot(doc["migrations"], doc["args"]["setpoint"], Path(args.plot or "verify.png"), doc["machine"])
        return 0
    sizes = [(x.strip(), parse_size(x.strip())) for x in args.sizes.split(",") if x.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="slbench-", dir="/tmp"))
    summaries, rows = [], []
    try:
        for k, (label, size) in enumerate(sizes):  # one size at a time: the machine is shared
            run = Run(label, size, tmp, k, args)
            try:
                run.load()
                time.sleep(3)
                for rep in range(1, args.repeats + 1):
                    for n in range(1, args.migrations + 1):
                        for verify in ((False, True) if (rep + n) % 2 else (True, False)):  # alternate the order
                            run.migrate(rep, n, verify)
                            time.sleep(2)
                summaries.append(run.finish())
                rows += run.rows
            finally:
                run.down()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nsummary ({machine}; loopback); setpoint {args.setpoint * 1000:.0f} ms, {args.rate:.0f} writes/s; "
          f"median (min-max) over {args.repeats} repeats of {args.migrations} pairs")
    for s in summaries:
        print(f"  {s['label']:6} freeze p50 without {fmt(s['freeze_p50_plain'], ' ms')}, with --verify "
              f"{fmt(s['freeze_p50_verify'], ' ms')}; p99 without {fmt(s['freeze_p99_plain'], ' ms')}, with "
              f"{fmt(s['freeze_p99_verify'], ' ms')}; p99 with / without {fmt(s['p99_ratio'], 'x')}")
        p = s["pooled_freeze_ms"]
        print(f"  {'':6} all repeats pooled: freeze p50 without {p['plain_p50']:.1f} ms, with {p['verify_p50']:.1f} ms; "
              f"p99 without {p['plain_p99']:.1f} ms, with {p['verify_p99']:.1f} ms "
              f"({p['verify_p99'] / p['plain_p99']:.2f}x)")
        print(f"  {'':6} verification / snapshot time {fmt(s['verify_over_snapshot'], 'x')}; latency / setpoint "
              f"during verification p50 {fmt(s['lat_verify_p50'])}, p95 {fmt(s['lat_verify_p95'])}; during the "
              f"snapshot p50 {fmt(s['lat_snapshot_p50'])}, p95 {fmt(s['lat_snapshot_p95'])}")
        print(f"  {'':6} acknowledged {s['acked']}, lost {s['acked_lost']}; every verification equal: {s['all_equal']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"machine": machine, "args": vars(args), "summaries": summaries,
                                                   "migrations": rows}, indent=2))
    if args.plot:
        plot(rows, args.setpoint, Path(args.plot), machine)
        print(f"plot: {args.plot}")
    ok = all(s["acked_lost"] == 0 and s["all_equal"] for s in summaries)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
