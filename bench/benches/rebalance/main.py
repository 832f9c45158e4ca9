"""`slacker rebalance` from cron under a hot spot that moves, beside the same cluster without it.

Two identical local clusters run side by side ("rebalanced" and "baseline"),
each of three nodes with a CPU quota of --quota: tenants a1..a3 on node-1,
b1..b3 on node-2, c1 on node-3. `slacker ycsb run` drives them open-loop with
the same schedule on both: for the first half the a-tenants get --hot-tps and
the b-tenants --cool-tps (node-1 is the hot spot); at half time the rates swap
(node-2 is). Every --cron seconds the bench runs `slacker rebalance --execute`
on the rebalanced cluster only, like cron would. A sampler reads every agent's
/v1/tenant-stats every few seconds (node latency, load) and the directory
(who owns what).

Reported: the moves made (when, what, where, how long), per-node latency over
time for both clusters (plot), and for each move the client p95 latency of the
tenants that stayed on the hot node in the --window before the move started and
after it ended, beside the same tenants over the same windows on the baseline.
Client latency is `slacker ycsb`'s (arrival -> commit, so queueing counts); "p95"
over a window is the median of its per-second p95 values.

    bench/run rebalance                      # 12 minutes
    bench/run rebalance --minutes 10 --quota 0.3 --hot-tps 70

Everything it starts is stopped at the end, also on failure and Ctrl-C.
Raw results (JSON), the harness series and a PNG go to --out-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.config import load_cluster
from slacker.units import parse_duration
from benchkit import REPO
from benchkit.host import interrupt

LAYOUT = {"node-1": ["a1", "a2", "a3"], "node-2": ["b1", "b2", "b3"], "node-3": ["c1"]}
# --mixed: node-1's tenants are databases of its shared server (node-3's too, a shared server to move into);
# node-2's stay whole servers: the first hot spot is a shared node, the second a node of whole servers.
MIXED_KINDS = {"node-1": "shared", "node-2": "server", "node-3": "shared"}


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def slacker(env: dict, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slacker", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


class Cluster:
    def __init__(self, name: str, run_dir: Path, address: str, api_port: int, a) -> None:
        self.name, self.run_dir, self.a = name, run_dir, a
        log(f"{name}: cluster up at {address}")
        path = local_cluster.up(run_dir, nodes=3, first_address=address, api_port=api_port,
                                port_range="24000-30000", cpu_per_node=a.quota, stats_interval_s=a.stats_interval)
        self.cluster = load_cluster(str(path))
        self.env = dict(os.environ, SLACKER_CLUSTER=str(path))
        self.agents, self.directory = cluster_clients(self.cluster)
        self.procs: list[subprocess.Popen] = []
        self.samples: list[dict] = []

    def create(self) -> None:
        for node, tenants in LAYOUT.items():
            for t in tenants:
                kind = MIXED_KINDS[node] if self.a.mixed else "server"
                body = {"id": t, "kind": "shared"} if kind == "shared" else {"id": t, "buffer_pool_bytes": 32 << 20}
                self.agents[node].request("POST", "/v1/tenants", body, timeout_s=300)
                r = slacker(self.env, "ycsb", "load", t, "-P", "workloads/slacker", "-p",
                            f"recordcount={self.a.records}")
                if r.returncode:
                    raise SystemExit(f"{self.name}: ycsb load {t}: {r.stderr.strip()}")
        log(f"{self.name}: 7 tenants created and loaded" + (" (node-1's and node-3's shared)" if self.a.mixed else ""))

    def drive(self, out_dir: Path, total_s: float, shift_s: float) -> None:
        a = self.a
        up, down = a.hot_tps / a.cool_tps, a.cool_tps / a.hot_tps
        groups = [("a1,a2,a3", a.hot_tps, f"{shift_s:.0f}s:x{down:g}"),
                  ("b1,b2,b3", a.cool_tps, f"{shift_s:.0f}s:x{up:g}"),
                  ("c1", a.cool_tps, None)]
        for tenants, tps, step in groups:
            out = out_dir / f"{self.name}-{tenants.split(',')[0][0]}.jsonl"
            cmd = [sys.executable, "-m", "slacker", "ycsb", "run", tenants, "-P", "workloads/slacker",
                   "-p", f"recordcount={a.records}", "-p", f"operationspertransaction={a.ops}",
                   "--rate", str(tps), "--mpl", "8", "--duration", f"{total_s:.0f}s", "--out", str(out),
                   "--quiet", "--seed", "11", "--retry-timeout", "60s"]
            if step:
                cmd += ["--rate-step", step]
            self.procs.append(subprocess.Popen(cmd, env=self.env, cwd=REPO, stdout=subprocess.DEVNULL,
                                               stderr=open(out_dir / f"{self.name}-ycsb.log", "a"),
                                               start_new_session=True))

    def sample(self, t0: float) -> None:
        row = {"t": time.time() - t0, "nodes": {}, "owners": {}}
        try:
            row["owners"] = {o.tenant: o.node for o in self.directory.list()}
        except Exception as exc:  # noqa: BLE001 - a sample may miss; the run goes on
            row["error"] = str(exc)
        for name, agent in self.agents.items():
            try:
                doc = agent.request("GET", "/v1/tenant-stats", timeout_s=5)
            except Exception:  # noqa: BLE001
                continue
            ts = [t for t in doc["tenants"] if t.get("latency_s") is not None and t["transactions_per_s"] > 0]
            tps = sum(t["transactions_per_s"] for t in ts)
            lat = sum(t["latency_s"] * t["transactions_per_s"] for t in ts) / tps if tps else None
            load = sum((h[-1].get("cpu_s_per_s") or 0) for h in (doc.get("history") or {}).values() if h)
            row["nodes"][name] = {"latency_s": lat, "tps": tps, "load": load}
        self.samples.append(row)

    def stop(self) -> None:
        interrupt(self.procs, 60)

    def down(self) -> None:
        try:
            local_cluster.down(self.run_dir, purge=True)
        except Exception as exc:  # noqa: BLE001
            log(f"{self.name}: cluster down: {exc}")


def records(out_dir: Path, name: str) -> list[dict]:
    rows = []
    for f in out_dir.glob(f"{name}-*.jsonl"):
        for line in f.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def p95_window(recs: list[dict], tenants: set[str], t0: float, t1: float) -> float | None:
    vals = [r["latency_p95_s"] for r in recs if r["tenant"] in tenants and t0 <= _wall(r) < t1
            and r.get("latency_p95_s") is not None]
    return statistics.median(vals) if vals else None


def _wall(r: dict) -> float:
    from datetime import datetime
    return datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp()


def plot(path: Path, results: dict, recs: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    # Bottom: client p95 of the tenants that stayed on each hot node, per 10 s, both clusters.
    ax = axes[2]
    t0 = results["t0"]
    for m, colour in zip(results["moves"], ("tab:blue", "tab:orange", "tab:green", "tab:red")):
        stayed = set(LAYOUT[m["source"]]) - {m["tenant"]}
        for name, ls in (("rebalanced", "-"), ("baseline", ":")):
            buckets: dict[int, list[float]] = {}
            for r in recs[name]:
                if r["tenant"] in stayed and r.get("latency_p95_s") is not None:
                    buckets.setdefault(int((_wall(r) - t0) // 10), []).append(r["latency_p95_s"])
            xs = sorted(buckets)
            ax.plot([(x * 10 + 5) / 60 for x in xs], [statistics.median(buckets[x]) * 1000 for x in xs], ls=ls,
                    color=colour, label=f"{name}: {','.join(sorted(stayed))} ({m['source']})")
        ax.axvspan(m["start_s"] / 60, m["end_s"] / 60, color="orange", alpha=0.25)
    ax.axvline(results["shift_s"] / 60, color="grey", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_ylabel("client p95 (ms)")
    ax.set_title("client p95 of the tenants that stayed on each hot node (solid: rebalanced, dotted: baseline)")
    ax.legend(loc="upper right", fontsize=8)
    for ax, name in zip(axes, ("rebalanced", "baseline")):
        samples = results["samples"][name]
        for node in LAYOUT:
            pts = [(s["t"] / 60, s["nodes"][node]["latency_s"] * 1000) for s in samples
                   if node in s["nodes"] and s["nodes"][node]["latency_s"] is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=node)
        ax.axvline(results["shift_s"] / 60, color="grey", ls="--", lw=1)
        ax.axhline(results["sla_s"] * 1000, color="red", ls=":", lw=1)
        if name == "rebalanced":
            for m in results["moves"]:
                ax.axvspan(m["start_s"] / 60, m["end_s"] / 60, color="orange", alpha=0.25)
                ax.text(m["start_s"] / 60, ax.get_ylim()[1] * 0.9 if ax.get_ylim()[1] else 1,
                        f" {m['tenant']}→{m['target']}", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("node latency (ms, server-side)")
        ax.set_title(f"{name}: per-node mean transaction latency (dashed: hot spot shifts; dotted: SLA)")
        ax.legend(loc="upper right")
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def node_latency_window(samples: list[dict], node: str, t0: float, t1: float) -> float | None:
    vals = [s["nodes"][node]["latency_s"] for s in samples if t0 <= s["t"] < t1 and node in s["nodes"]
            and s["nodes"][node]["latency_s"] is not None]
    return statistics.mean(vals) if vals else None


def node_minutes_over(recs: list[dict], samples: list[dict], t0: float, sla_s: float) -> tuple[float, float]:
    """(node-minutes over the SLA, node-minutes with a figure), by the clients' latency: each second, each node's
    transaction-weighted mean over the tenants it owned then (the directory as the sampler last read it)."""
    import bisect
    times = [s["t"] for s in samples]
    per: dict[tuple[str, int], list[float]] = {}
    for r in recs:
        if r.get("latency_mean_s") is None or not r.get("completed"):
            continue
        t = _wall(r) - t0
        i = bisect.bisect_right(times, t) - 1
        node = samples[max(i, 0)]["owners"].get(r["tenant"]) if samples else None
        if node is None:
            continue
        acc = per.setdefault((node, int(t)), [0.0, 0.0])
        acc[0] += r["latency_mean_s"] * r["completed"]
        acc[1] += r["completed"]
    over = sum(1 for total, n in per.values() if total / n > sla_s)
    return over / 60, len(per) / 60


def report(out_dir: Path, results: dict) -> None:
    """Per-move figures and the plot, from results.json and the harness files (also with --analyze)."""
    t0, window = results["t0"], results["args"]["window"]
    recs = {name: records(out_dir, name) for name in ("rebalanced", "baseline")}
    for m in results["moves"]:
        stayed = set(LAYOUT[m["source"]]) - {m["tenant"]}
        m["stayed"] = sorted(stayed)
        for name in ("rebalanced", "baseline"):
            m[f"{name}_p95_before_s"] = p95_window(recs[name], stayed, t0 + m["start_s"] - window, t0 + m["start_s"])
            m[f"{name}_p95_after_s"] = p95_window(recs[name], stayed, t0 + m["end_s"], t0 + m["end_s"] + window)
            # The last minute of the hot phase this move belonged to: relieved or not, after any backlog drained.
            phase_end = results["shift_s"] if m["start_s"] < results["shift_s"] else results["args"]["minutes"] * 60
            m[f"{name}_p95_phase_end_s"] = p95_window(recs[name], stayed, t0 + phase_end - 60, t0 + phase_end)
            smp = results["samples"][name]
            m[f"{name}_node_latency_before_s"] = node_latency_window(smp, m["source"], m["start_s"] - window,
                                                                     m["start_s"])
            m[f"{name}_node_latency_after_s"] = node_latency_window(smp, m["source"], m["end_s"],
                                                                    m["end_s"] + window)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    plot(out_dir / "rebalance.png", results, recs)

    def ms(v):
        return "-" if v is None else f"{v * 1000:.0f}ms"

    print()
    print(f"{'move':<22}{'at':>6}{'took':>6}  {'client p95 of the tenants that stayed':<40}  source node latency")
    print(f"{'':<22}{'':>6}{'':>6}  {'rebalanced':<19}  {'baseline':<19}  {'rebalanced':<17}  baseline")
    for m in results["moves"]:
        print(f"{m['tenant'] + ' ' + m['source'] + '->' + m['target']:<22}{m['start_s'] / 60:>5.1f}m"
              f"{(m['end_s'] - m['start_s']):>5.0f}s  "
              f"{ms(m['rebalanced_p95_before_s']) + ' -> ' + ms(m['rebalanced_p95_after_s']):<19}  "
              f"{ms(m['baseline_p95_before_s']) + ' -> ' + ms(m['baseline_p95_after_s']):<19}  "
              f"{ms(m['rebalanced_node_latency_before_s']) + ' -> ' + ms(m['rebalanced_node_latency_after_s']):<17}  "
              f"{ms(m['baseline_node_latency_before_s'])} -> {ms(m['baseline_node_latency_after_s'])}"
              f"  ({m['result']}, setpoint {ms(m['setpoint_s'])})")
    print("client p95 of those tenants in the last minute of their hot phase: "
          + "; ".join(f"{','.join(m['stayed'])}: {ms(m['rebalanced_p95_phase_end_s'])} rebalanced vs "
                      f"{ms(m['baseline_p95_phase_end_s'])} baseline" for m in results["moves"]))
    for name in ("rebalanced", "baseline"):
        over, total = node_minutes_over(recs[name], results["samples"][name], t0, results["sla_s"])
        results.setdefault("node_minutes_over_sla", {})[name] = {"over": round(over, 2), "sampled": round(total, 2)}
        print(f"{name}: {over:.1f} of {total:.1f} node-minutes over the {results['sla_s'] * 1000:.0f}ms SLA by the clients' latency "
              f"({over / total:.1%})" if total else f"{name}: no node latency sampled")
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"moves: {len(results['moves'])} (the episodes' bound: 2, one per hot spot); "
          f"tenants moved twice: {results['moved_twice'] or 'none'}; "
          f"windows: {window:g}s before the move started and after it ended; plot: {out_dir / 'rebalance.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=12)
    ap.add_argument("--cron", type=float, default=60, help="seconds between rebalance runs")
    ap.add_argument("--quota", type=float, default=0.12, help="CPUs per node")
    ap.add_argument("--stats-interval", type=float, default=10)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--ops", type=int, default=4, help="operations per transaction")
    ap.add_argument("--hot-tps", type=float, default=60)
    ap.add_argument("--cool-tps", type=float, default=8)
    ap.add_argument("--sla", default="1s", help="high on a shared machine: its fsync and scheduling noise "
                    "reach every node alike; load decides")
    ap.add_argument("--load-floor", default="0.03", help="CPU s/s (small quotas want a small floor)")
    ap.add_argument("--node-cooldown", default="5m")
    ap.add_argument("--max-freeze", default="2s", help="handovers run on a node at its quota on a shared machine")
    ap.add_argument("--tenant-cooldown", default="30m")
    ap.add_argument("--window", type=float, default=90, help="seconds before/after a move for the p95s")
    ap.add_argument("--mixed", action="store_true", help="node-1's and node-3's tenants shared (databases of "
                    "their node's shared server), node-2's whole servers")
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "out" / "rebalance"))
    ap.add_argument("--analyze", action="store_true", help="only redo the report and plot of --out-dir's run")
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    if a.analyze:
        report(out_dir, json.loads((out_dir / "results.json").read_text()))
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in out_dir.glob("*.jsonl"):
        f.unlink()
    tmp = Path(tempfile.mkdtemp(prefix="sl-rb-", dir="/tmp"))
    total_s, shift_s = a.minutes * 60, a.minutes * 30
    clusters: list[Cluster] = []
    runs: list[dict] = []
    stop = threading.Event()
    try:
        clusters = [Cluster("rebalanced", tmp / "reb", "127.0.211.2", 7811, a),
                    Cluster("baseline", tmp / "base", "127.0.212.2", 7812, a)]
        for c in clusters:
            c.create()
        t0 = time.time()
        for c in clusters:
            c.drive(out_dir, total_s, shift_s)
        log(f"driving for {a.minutes:g} min; the hot spot moves from node-1 to node-2 at {shift_s / 60:g} min")

        def sampler():
            while not stop.wait(5):
                for c in clusters:
                    c.sample(t0)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        reb = clusters[0]
        rules = ["--sla", a.sla, "--load-floor", a.load_floor, "--max-freeze", a.max_freeze, "--node-cooldown", a.node_cooldown,
                 "--tenant-cooldown", a.tenant_cooldown]
        next_run = t0 + a.cron
        while time.time() < t0 + total_s:
            time.sleep(max(0.0, next_run - time.time()))
            if time.time() >= t0 + total_s:
                break
            start = time.time()
            r = slacker(reb.env, "rebalance", "--execute", "--json", *rules)
            end = time.time()
            try:
                doc = json.loads(r.stdout)
            except ValueError:
                doc = {"error": r.stderr.strip()}
            runs.append({"start_s": start - t0, "end_s": end - t0, "rc": r.returncode, "doc": doc})
            p = doc.get("plan") or {}
            log(f"cron: {p.get('decision')}: {p.get('reason')}" + (f" -> {doc.get('result')}" if doc.get("executed")
                                                                    else ""))
            while next_run <= time.time():
                next_run += a.cron
        stop.set()
        th.join(10)
        for c in clusters:
            c.stop()
        moves = []
        for r in runs:
            d = r["doc"]
            if d.get("executed"):
                mv = d["plan"]["move"]
                moves.append({"start_s": r["start_s"], "end_s": r["end_s"], "tenant": mv["tenant"],
                              "source": mv["source"], "target": mv["target"], "result": d.get("result"),
                              "setpoint_s": mv["setpoint_s"], "load_before": mv["source_load_before"],
                              "load_after": mv["source_load_after"],
                              "duration_s": (d.get("migration") or {}).get("duration_s"),
                              "freeze_ms": (d.get("migration") or {}).get("freeze_ms")})
        counts: dict[str, int] = {}
        for m in moves:
            counts[m["tenant"]] = counts.get(m["tenant"], 0) + 1
        results = {"args": vars(a), "t0": t0, "shift_s": shift_s, "sla_s": parse_duration(a.sla),
                   "moves": moves, "moved_twice": [t for t, n in counts.items() if n > 1], "runs": runs,
                   "samples": {c.name: c.samples for c in clusters}, "loadavg": os.getloadavg()}
        report(out_dir, results)
    finally:
        stop.set()
        for c in clusters:
            c.stop()
            c.down()
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
