"""bench/run hotspot: Madeus's hot-spot experiment: off a hot shared node, move its heavy tenant or a light one.

A local two-node cluster with a router and a CPU quota per node (--quota). node-1's shared server holds three
tenants of the same size (--records YCSB rows each): a and c light, b heavy; node-2's holds one idle tenant (its
shared server is there before the first move). Each of a, b, c has its own YCSB load through the router as
app@TENANT (workloads/slacker): a and c open-loop at --light-tps (latency from the scheduled arrival to the
commit, so queueing counts), b closed-loop, its clients back to back (the heavy one: it takes what the node has).

1. Calibration: all three at --light-tps; node-1's latency then (the clients' mean over its tenants, weighted by
   transactions) times --sla-factor is the node's SLA. b's rate then rises by x1.5 steps from --light-tps until
   node-1's latency is at least --hot-factor x the SLA: node-1 is hot, because of b. A load that cannot make it
   hot within --max-heavy-tps ends the bench (exit 2): nothing was compared.
2. The planner's answer for that node: `slacker rebalance --json` (no --execute) with that SLA, once the agents'
   history holds enough samples: which tenant it would move, and why.
3. --repeats blocks, each of two trials in rotated order: the loads started afresh, --pre seconds, move b (heavy)
   or c (light) from node-1 to node-2 with `slacker migrate` at the rebalancer's setpoint (the SLA, or node-1's
   latency + 25 % when that is above it), watch --post seconds, then move it back (at a fixed rate, not
   measured), stop the loads (their queues dropped) and rest --settle seconds.

Reported per trial and per choice (medians and spread over the repeats, and heavy ÷ light paired per block):
- the time to move (`slacker migrate` start to end) and the result;
- the latency of the tenants left behind on node-1 (the two not moved; the clients' transaction-weighted mean
  per second) over the --pre seconds before the move, during it, and over the --post seconds after it;
- how long from the move's start until node-1's latency (the tenants left behind) is back under the SLA and
  stays there --hold seconds: "never" when it is not within the move and --post.

    bench/run hotspot [--repeats 3] [--quota 0.5] [--records 20000] [--light-tps 20] [--json FILE] [--plot PNG]
    bench/run hotspot --replot RUN.json --plot PNG

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

from click.testing import CliRunner

from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.cli import main as cli
from slacker.client import Endpoint, resolve
from slacker.config import load_cluster
from slacker.rebalance.planner import Settings, setpoint_for
from slacker.router import local as local_router
from slacker.ycsb.loader import LoadConfig, load_table
from slacker.ycsb.properties import load_workload
from slacker.ycsb.runner import Harness, RunConfig
from slacker.ycsb.targets import TenantTarget
from benchkit import REPO
from benchkit.host import interrupt, machine as host_machine
from benchkit.migration import cgroups_usable, routed_cluster_gone
from benchkit.stats import spread

TENANTS = ("a", "b", "c")
HEAVY, LIGHT = "b", "c"
IDLE = "d"  # on node-2, so its shared server exists before the first move


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def parse(argv=None):
    p = argparse.ArgumentParser(prog="bench/run hotspot", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="blocks of (heavy, light) trials, order rotated")
    p.add_argument("--quota", type=float, default=0.5, help="CPUs per node (a cgroup per node)")
    p.add_argument("--records", type=int, default=20000, help="YCSB rows (~1 KB) per tenant")
    p.add_argument("--ops", type=int, default=4, help="operations per transaction")
    p.add_argument("--light-tps", type=float, default=20.0, help="a light tenant's open-loop rate (and b's, for "
                   "the SLA's load)")
    p.add_argument("--max-heavy-clients", type=int, default=16, help="the most clients b's calibration tries")
    p.add_argument("--sla-factor", type=float, default=2.0, help="the SLA: this x node-1's latency, all light")
    p.add_argument("--hot-factor", type=float, default=2.0, help="hot: node-1's latency >= this x the SLA")
    p.add_argument("--pre", type=float, default=15.0, help="seconds watched before each move")
    p.add_argument("--post", type=float, default=40.0, help="seconds watched after each move")
    p.add_argument("--hold", type=float, default=5.0, help="seconds under the SLA that count as back under it")
    p.add_argument("--settle", type=float, default=15.0, help="seconds after each move back")
    p.add_argument("--max-freeze", default="1s")
    p.add_argument("--stats-interval", type=float, default=5.0, help="the agents' load-history interval")
    p.add_argument("--first-address", default="127.0.0.31")
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    p.add_argument("--replot", type=Path)
    return p.parse_args(argv)


class Seconds:
    """Every tenant's per-second interval records, stamped with the wall clock: the in-process harness's as they
    arrive, and those of the heavy load's own process read from its --out file when asked."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._lock = threading.Lock()
        self._files: dict[Path, int] = {}  # a heavy run's --out file -> bytes read of it

    def add(self, rec) -> None:
        if rec.phase == "run":
            self._keep(time.time(), rec.tenant, rec.completed, rec.latency_mean_s, rec.latency_p95_s,
                       sum(rec.failures.values()), sum(rec.abandoned.values()))

    def _keep(self, t, tenant, n, mean, p95, failures, abandoned) -> None:
        with self._lock:
            self.rows.append({"t": t, "tenant": tenant, "n": n, "mean": mean, "p95": p95, "failures": failures,
                              "abandoned": abandoned})

    def follow(self, path: Path) -> None:
        self._files[path] = 0

    def _read_files(self) -> None:
        from datetime import datetime
        for path, done in list(self._files.items()):
            try:
                with open(path, "rb") as f:
                    f.seek(done)
                    data = f.read()
            except OSError:
                continue
            whole = data[:data.rfind(b"\n") + 1]
            self._files[path] = done + len(whole)
            for line in whole.decode().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("phase") != "run":
                    continue
                t = datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp()
                self._keep(t, r["tenant"], r["completed"], r.get("latency_mean_s"), r.get("latency_p95_s"),
                           sum((r.get("failures") or {}).values()), sum((r.get("abandoned") or {}).values()))

    def between(self, t0: float, t1: float, tenants) -> list[dict]:
        self._read_files()
        with self._lock:
            return [r for r in self.rows if t0 < r["t"] <= t1 and r["tenant"] in tenants]


def weighted(rows: list[dict]) -> float | None:
    """The transaction-weighted mean latency of these tenant-seconds."""
    n = sum(r["n"] for r in rows if r["mean"] is not None)
    return sum(r["mean"] * r["n"] for r in rows if r["mean"] is not None) / n if n else None


def per_second(rows: list[dict]) -> list[tuple[float, float]]:
    """(second, weighted mean latency) over the tenants in `rows`, one point per second."""
    by: dict[int, list[dict]] = {}
    for r in rows:
        by.setdefault(int(r["t"]), []).append(r)
    return [(float(s), w) for s, rs in sorted(by.items()) if (w := weighted(rs)) is not None]


def back_under(series: list[tuple[float, float]], start: float, sla: float, hold_s: float) -> float | None:
    """Seconds from `start` to the first second from which the mean of the next hold_s seconds is <= sla (one
    second of a light load is a few dozen transactions: its own mean is noisy); None: never in the series."""
    pts = [(t, v) for t, v in series if t >= start]
    for i, (t, _) in enumerate(pts):
        window = [w for u, w in pts[i:] if u < t + hold_s]
        if pts[-1][0] < t + hold_s - 1:
            break
        if window and statistics.fmean(window) <= sla:
            return max(0.0, t - start)
    return None


def migrate(path: Path, tenant: str, to: str, *how: str) -> tuple[dict, float]:
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, ["--cluster", str(path), "migrate", tenant, "--to", to, *how, "--json"])
    took = time.monotonic() - t0
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = {"result": "failed", "error": (r.stderr or r.output or "").strip()[-300:]}
    return doc, took


def main(argv=None) -> int:
    args = parse(argv)
    if args.replot:
        if not args.plot:
            raise SystemExit("bench/run hotspot: --replot needs --plot PNG")
        plot(json.loads(args.replot.read_text()), args.plot)
        print(f"wrote {args.plot}")
        return 0
    if not cgroups_usable():
        raise SystemExit("bench/run hotspot: needs CPU cgroups (run as root on a host with cgroup v1 cpu or v2)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-hotspot-"))
    run_dir = tmp / "run"
    harness: list | None = None
    try:
        path = local_cluster.up(run_dir, nodes=2, first_address=args.first_address, cpu_per_node=args.quota,
                                stats_interval_s=args.stats_interval)
        cluster = load_cluster(str(path))
        local_router.start(run_dir, path, "127.0.0.1:0")
        host, port = local_router.listening(run_dir).rsplit(":", 1)
        agents, directory = cluster_clients(cluster)
        wl = load_workload(["workloads/slacker"], {"recordcount": args.records,
                                                   "operationspertransaction": args.ops})
        eps = {}
        for tid, node in [(t, "node-1") for t in TENANTS] + [(IDLE, "node-2")]:
            agents[node].request("POST", "/v1/tenants", {"id": tid, "kind": "shared"}, timeout_s=180)
            made = resolve(tid, cluster)
            eps[tid] = Endpoint(tid, host, int(port), f"app@{tid}", made.password)
            if tid != IDLE:
                load_table(LoadConfig(endpoint=eps[tid], workload=wl, threads=2))
        log(f"tenants a, b, c on node-1 ({args.records:,} rows each), d on node-2; quota {args.quota} CPU per node")
        secs = Seconds()

        password_file = tmp / "b.password"
        password_file.write_text(eps[HEAVY].password)
        password_file.chmod(0o600)
        heavy_runs = iter(range(1, 1000))

        def run_loads(heavy_clients: int | None, duration_s: float) -> list:
            """a and c open-loop at --light-tps; b too (heavy_clients None), or closed-loop with that many
            clients back to back: a load that saturates the node's quota and stays put (an open-loop rate past
            a sharp knee is either under it or a queue without end). b's closed loop runs in a process of its
            own (`slacker ycsb run`): in this one its threads would hold the GIL the light tenants' clocks need."""
            light = [t for t in TENANTS if t != HEAVY or heavy_clients is None]
            h = Harness(RunConfig(targets=[TenantTarget.fixed(eps[t], args.light_tps, tenant=t) for t in light],
                                  workload=wl, mpl=8, duration_s=duration_s, seed=7, retry_timeout_s=60.0,
                                  on_interval=secs.add))
            h.start()
            out: list = [h]
            if heavy_clients is not None:
                series = tmp / f"b-{next(heavy_runs)}.jsonl"
                secs.follow(series)
                out.append(subprocess.Popen(
                    [sys.executable, "-m", "slacker", "ycsb", "run", HEAVY, "-P", "workloads/slacker",
                     "-p", f"recordcount={args.records}", "-p", f"operationspertransaction={args.ops}",
                     "--host", host, "--port", port, "--user", f"app@{HEAVY}", "--password-file", str(password_file),
                     "--mpl", str(heavy_clients), "--duration", f"{duration_s:.0f}s", "--out", str(series),
                     "--quiet", "--seed", "8", "--retry-timeout", "60s"],
                    cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp / "b-ycsb.log", "a"),
                    start_new_session=True))
            return out

        def stop_loads(runs: list) -> dict[str, int]:
            out: dict[str, int] = {}
            for h in runs:
                if isinstance(h, Harness):
                    h.stop()
                    for t, n in tally(h.wait(60)).items():
                        out[t] = out.get(t, 0) + n
                else:
                    interrupt([h], 60)
            return out

        def node_latency(t0: float, t1: float, tenants=TENANTS) -> float | None:
            return weighted(secs.between(t0, t1, tenants))

        # 1. calibration: the SLA from the light load (its second run: the first warms the buffer pool), then b
        # with 1, 2, 4, ... clients back to back until node-1 is hot.
        def latency_at(heavy_clients: int | None) -> float | None:
            runs = run_loads(heavy_clients, 14)
            time.sleep(14)
            lat = node_latency(time.time() - 8, time.time())
            stop_loads(runs)
            return lat

        latency_at(None)
        base = latency_at(None)
        if base is None:
            raise SystemExit("bench/run hotspot: no transactions completed at the light rate")
        sla = base * args.sla_factor
        log(f"all light ({args.light_tps:g} tps each): node-1 {base * 1000:.1f} ms; SLA {sla * 1000:.1f} ms")
        clients, hot = 1, None
        while clients <= args.max_heavy_clients:
            lat = latency_at(clients)
            log(f"b with {clients} clients back to back, a and c at {args.light_tps:g} tps: node-1 "
                + (f"{lat * 1000:.1f} ms" if lat is not None else "no figure"))
            if lat is not None and lat >= args.hot_factor * sla:
                hot = lat
                break
            clients *= 2
        if hot is None:
            log(f"b with {args.max_heavy_clients} clients did not make node-1 hot: nothing compared")
            return 2
        rates = {"a": args.light_tps, "c": args.light_tps, "b clients": clients}
        # The loads until the planner has answered; then one run of them per trial, so every trial starts
        # from the same state.
        harness = run_loads(clients, 24 * 3600)
        time.sleep(max(25.0, 4 * args.stats_interval))
        # 2. the planner's answer
        r = CliRunner().invoke(cli, ["--cluster", str(path), "rebalance", "--json", "--sla", f"{sla * 1000:.1f}ms",
                                     "--samples", "2", "--load-floor", "0.02", "--min-tenant-load", "0.001"])
        try:
            plan = json.loads(r.stdout).get("plan") or {}
        except ValueError:
            plan = {"error": (r.output or "").strip()[-300:]}
        chosen = (plan.get("move") or {}).get("tenant")
        log(f"the planner: {plan.get('decision')}: {plan.get('reason')}")
        failures = stop_loads(harness)
        harness = None
        # 3. the trials
        trials = []
        for block in range(args.repeats):
            order = (HEAVY, LIGHT) if block % 2 == 0 else (LIGHT, HEAVY)
            for mover in order:
                left = [t for t in TENANTS if t != mover]
                harness = run_loads(clients, 24 * 3600)
                t_pre = time.time()
                time.sleep(args.pre)
                src_lat = node_latency(t_pre, time.time())
                # valid: node-1 hot before the move (over the SLA) and not far past its calibrated latency
                steady = src_lat is not None and sla <= src_lat <= 2 * hot
                setpoint, why = setpoint_for(Settings(sla_s=sla), src_lat)
                t_start = time.time()
                doc, took = migrate(path, mover, "node-2", "--setpoint", f"{setpoint * 1000:.1f}ms",
                                    "--max-freeze", args.max_freeze)
                t_end = time.time()
                time.sleep(args.post)
                t_post = time.time()
                series = per_second(secs.between(t_pre, t_post, left))
                back = back_under(series, t_start, sla, args.hold)
                row = {"block": block + 1, "mover": mover, "kind": "heavy" if mover == HEAVY else "light",
                       "result": doc.get("result"), "move_s": round(took, 2), "freeze_ms": doc.get("freeze_ms"),
                       "setpoint_ms": round(setpoint * 1000, 1), "setpoint_reason": why,
                       "left_before_ms": _ms(node_latency(t_pre, t_start, left)),
                       "left_during_ms": _ms(node_latency(t_start, t_end, left)),
                       "left_after_ms": _ms(node_latency(t_end, t_post, left)),
                       "mover_during_ms": _ms(node_latency(t_start, t_end, [mover])),
                       "back_under_s": None if back is None else round(back, 1), "steady_before": steady,
                       "series": [(round(t - t_start, 1), round(v * 1000, 2)) for t, v in series],
                       "error": doc.get("error")}
                trials.append(row)
                log(f"block {block + 1}: moved {mover} ({row['kind']}): {row['result']} in {took:.1f} s; left behind "
                    f"{row['left_before_ms']} -> {row['left_during_ms']} -> {row['left_after_ms']} ms; back under "
                    f"the SLA after {row['back_under_s'] if back is not None else 'never'} s"
                    + ("" if steady else " (left out: node-1 was not hot, or far past its calibrated latency, before it)"))
                back_doc, _ = migrate(path, mover, "node-1", "--rate", "20MB/s", "--max-freeze", args.max_freeze)
                if back_doc.get("result") != "succeeded":
                    log(f"moving {mover} back failed: {back_doc.get('error')}")
                    return 1
                for t, n in stop_loads(harness).items():
                    failures[t] = failures.get(t, 0) + n
                harness = None
                time.sleep(args.settle)
        b_rows = secs.between(0, time.time() + 1, [HEAVY])  # b's own process: its series
        failures[HEAVY] = sum(r["failures"] for r in b_rows)
        failures[f"{HEAVY} given up"] = sum(r["abandoned"] for r in b_rows)
        summary = {"machine": host_machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "sla_ms": round(sla * 1000, 2), "all_light_ms": round(base * 1000, 2), "rates_tps": rates,
                   "hot_ms": round(hot * 1000, 2), "planner": {"chose": chosen, "decision": plan.get("decision"),
                                                              "reason": plan.get("reason"),
                                                              "candidates": plan.get("candidates")},
                   "trials": trials, "client_failures": failures}
        summary["by_kind"] = {}
        for kind in ("heavy", "light"):
            rows = [t for t in trials if t["kind"] == kind and t["steady_before"]]
            summary["by_kind"][kind] = {
                k: spread([t[k] for t in rows if t[k] is not None])
                for k in ("move_s", "left_before_ms", "left_during_ms", "left_after_ms", "mover_during_ms", "freeze_ms")}
            summary["by_kind"][kind]["back_under_s"] = [t["back_under_s"] for t in rows]
        ratios = {"move_s": [], "left_after_ms": []}
        for block in range(1, args.repeats + 1):
            pair = {t["kind"]: t for t in trials if t["block"] == block and t["steady_before"]}
            for k in ratios:
                if pair.get("heavy", {}).get(k) and pair.get("light", {}).get(k):
                    ratios[k].append(pair["heavy"][k] / pair["light"][k])
        summary["heavy_over_light"] = {k: spread(v) for k, v in ratios.items()}
        print()
        print(f"node-1: {summary['all_light_ms']} ms all light; SLA {summary['sla_ms']} ms; hot {summary['hot_ms']} ms "
              f"with b's {clients} clients back to back, a and c at {args.light_tps:g} tps")
        print(f"the planner would move {chosen or 'nothing'}: {plan.get('reason')}")
        for kind in ("heavy", "light"):
            b = summary["by_kind"][kind]
            print(f"move the {kind} one: {b['move_s'].get('median')} s to move; left behind "
                  f"{b['left_before_ms'].get('median')} -> {b['left_during_ms'].get('median')} -> "
                  f"{b['left_after_ms'].get('median')} ms; back under the SLA after "
                  f"{', '.join('never' if v is None else f'{v} s' for v in b['back_under_s'])}")
        r_ = summary["heavy_over_light"]
        print(f"heavy / light per block: time to move {r_['move_s']}, left-behind latency after {r_['left_after_ms']}")
        print(f"client errors (failed attempts, retried; and transactions given up): {failures}")
        unsteady = [f"{t['block']}/{t['mover']}" for t in trials if not t["steady_before"]]
        if unsteady:
            print(f"left out (node-1 under the SLA, or above 2x its calibrated latency, before the move): "
                  f"{', '.join(unsteady)}")
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        if args.plot:
            plot(json.loads(json.dumps(summary, default=str)), args.plot)
        ok = all(t["result"] == "succeeded" for t in trials)
        return 0 if ok else 1
    finally:
        try:
            if harness:
                stop_loads(harness)
        except BaseException:  # noqa: BLE001 - a second Ctrl-C, or a run that will not end: the cluster goes anyway
            pass
        finally:
            routed_cluster_gone(run_dir, tmp, "hotspot")


def tally(result) -> dict[str, int]:
    """Each tenant's client errors in a run: failed attempts (retried) and, as `T given up`, transactions given up
    (not the ones still queued when the bench stops the run, which it drops)."""
    out = {t.tenant: sum(t.failures.values()) for t in result.tenants}
    out.update({f"{t.tenant} given up": sum(t.abandoned.values()) for t in result.tenants})
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    colours = {"heavy": "tab:red", "light": "tab:blue"}
    seen = set()
    for t in summary["trials"]:
        xs = [p[0] for p in t["series"]]
        ys = [p[1] for p in t["series"]]
        label = None if t["kind"] in seen else f"moving the {t['kind']} tenant ({t['mover']})"
        seen.add(t["kind"])
        ax1.plot(xs, ys, color=colours[t["kind"]], alpha=0.6, lw=1, label=label)
        ax1.axvline(t["move_s"], color=colours[t["kind"]], ls=":", lw=0.8)
    ax1.axhline(summary["sla_ms"], color="k", ls="--", lw=1, label=f"SLA {summary['sla_ms']:.1f} ms")
    ax1.axvline(0, color="grey", lw=0.8)
    ax1.set_xlabel("seconds from the move's start (dotted: its end)")
    ax1.set_ylabel("latency of the tenants left on node-1 (ms)")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8)
    ax1.set_title("off a hot shared node: the heavy tenant or a light one")
    kinds = ["heavy", "light"]
    for i, what in enumerate(("move_s", "back")):
        for j, kind in enumerate(kinds):
            rows = [t for t in summary["trials"] if t["kind"] == kind]
            if what == "move_s":
                vals = [t["move_s"] for t in rows]
            else:
                cap = max(t["move_s"] for t in rows) + summary["args"]["post"]
                vals = [t["back_under_s"] if t["back_under_s"] is not None else cap for t in rows]
            x = i * 3 + j
            ax2.bar(x, statistics.median(vals), color=colours[kind], alpha=0.7,
                    label=f"{kind}" if i == 0 else None)
            ax2.scatter([x] * len(vals), vals, color="k", s=10, zorder=3)
    ax2.set_xticks([0.5, 3.5], ["time to move", "until node-1 is\nunder the SLA (never: top)"])
    ax2.set_ylabel("seconds")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
