"""Latency-targeting throttle on real migrations: the paper's Figures 5, 11, 12, 13a, 13b.

Sets up its own local two-node cluster (loopback, temp dir), a tenant of
--records 1 KB rows (workloads/slacker) with a --buffer-pool buffer pool,
drives it with `slacker ycsb run` at a fixed offered rate (--tps), and
migrates it back and forth between the two nodes:

  fig5       Baseline: latency with no copy, then a fixed-rate copy at each of
             --fixed-rates (each level a migration aborted after --level or when
             the copy ends): where is the slack, where is the knee?
  fig11      For each setpoint (--setpoints, or chosen between the unloaded latency
             and the knee measured by fig5): a PID migration, then a fixed-rate
             migration at the PID run's average copy rate. Mean latency during the
             copy vs setpoint, latency std dev, average copy rate, side by side.
  fig13a     +40% offered load one third into the copy (ycsb --rate-step), PID vs a
             fixed rate equal to the PID run's pre-step average rate; --fig13a-repeats
             pairs, with the seconds back within 1.1x the setpoint per repeat and
             their median.
  threshold  The on/off threshold throttle (gh-ost/freno style) at the same setpoint
             as fig13a, beside the PID run of fig11 at that setpoint.
  compare    (issues 14, 32) Every controller side by side: model (the default), the
             velocity PID, on/off threshold, a fixed rate at the oracle (the best
             --fixed-rates level of fig5 that met the setpoint; run fig5 in the same
             command) and unthrottled, at each of --setpoints (binding) and one
             setpoint that does not bind (--nonbinding-setpoint, default twice the
             first unthrottled copy's mean latency), --repeats times, the order of
             the controllers rotated each repeat. Analysis: bench/benches/setpoint/analysis.py.
  fig13b     Five tenants on node-1 (--mt-records rows each, --mt-tps split evenly),
             one migrating under PID, then under a fixed rate at the PID's average;
             latency averaged over all five (the controller reads the harness's
             histogram summed over all tenants).
  stable     (issue 40) The controllers judged on a plant that holds still: nodes under a CPU
             budget (--cpu-per-node, --cpu-period, --cpu-weight), the load at constant arrivals at
             --load-fraction of the tenant's measured capacity, the load generator in a group of
             --loadgen-weight, every run gated before its copy (the load not saturated over the
             window, its own latency within 10 % of the session's reference) and repeated when the
             gate fails; a run's latency the median of its per-second means (--latency-stat); the
             binding setpoint kept off a knee the calibration cannot resolve; calibration (5 repeats
             of one fixed rate within 5 %), then
             --blocks blocks of {load alone, 3 fixed rates, model, PID, unthrottled, model and PID
             not binding} in rotated order, the oracle read off each block's fixed rates
             (bench/benches/setpoint/stable.py, protocol.py):
               bench/run setpoint --only stable --load sysbench --cpu-per-node 0.5
  oltp       The controllers on an OLTP load, judged by paired differences within blocks, the
             loads through a router of the bench's cluster (so the router's latency source is
             real). Each of --blocks blocks: the capacity through the router (--capacity-s of
             sysbench closed loop, or the harness at --capacity-probe-tps), the load at
             --load-fraction of it (sysbench at constant arrivals with its own clock per second,
             or the harness), the load's own latency over --pre-window after --warmup, the
             binding setpoint --binding-mult times it; --warmup-moves unthrottled moves (not
             judged): the fixed rates are --oracle-factors times the rate where the line in
             1/latency from the load's own to the warm-up's crosses the setpoint, and the non-binding setpoint
             is --nonbinding-mult times the own latency, or 1.25x the warm-up's if higher;
             then in an order rotated each block: the fixed rates (each a move aborted after
             --level: the oracle), the model with the router's source (the default), the model
             with the server's, PID with the router's, all at the binding setpoint; unthrottled;
             the model (router) at the non-binding one; the load step (a second load at
             (--step-factor - 1) x the rate for --step-s, from --step-delay into the copy),
             model with each source. Per block: mean / setpoint, speed / the fastest fixed
             rate (or the unthrottled move) that met the setpoint, non-binding time /
             unthrottled, seconds until back under the setpoint after the step ends, and per second
             the router's and the server's latency against the load's own clock (correlation,
             ratio); the median and 90 % interval over blocks. --until HH:MM starts no block that
             would end after it (bench/benches/setpoint/oltp.py, protocol.py):
               bench/run setpoint --only oltp --load sysbench --blocks 5

"Latency" is the harness's client-side latency: scheduled arrival -> commit, so
queueing counts. "During the copy" is the snapshot phase (the throttled stream),
matched by wall-clock timestamps against the harness's per-second records, without
its last --tail-exclude seconds (mariabackup's final BLOCK_COMMIT lock stage stalls
commits whatever the copy rate; the tables also give the whole-phase mean). Std dev
is over the per-second means. A monitor thread records how much CPU other
processes on the machine used during each run (the VM is shared).

Everything it starts is stopped at the end, also on failure and Ctrl-C (harness
killed, `cluster down --purge`, temp dir removed). Raw results (JSON), the
harness's and the migrations' time series, and PNG plots go to --out-dir.

    bench/run setpoint                          # everything, defaults
    bench/run setpoint --only fig5 --records 200000
    bench/run setpoint --only fig11 --setpoints 40ms,80ms --gains 0.2,0.05,0.1
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path


from benches.setpoint import analysis, compare, fig5, fig11, fig13a, fig13b, gains, log, oltp, stable, threshold  # noqa: E402
from benches.setpoint.analysis import mbs, ms, parse_list, report, step_analysis  # noqa: E402
from benches.setpoint.plots import make_plots  # noqa: E402
from benches.setpoint.runner import Bench, guarded, machine_info  # noqa: E402
from slacker.units import parse_duration, parse_rate  # noqa: E402
from benchkit import REPO

EXPERIMENTS = ("fig5", "fig11", "fig13a", "threshold", "fig13b", "gains", "compare", "stable", "oltp")
DEFAULT_EXPERIMENTS = ("fig5", "fig11", "fig13a", "threshold", "fig13b")


# ----------------------------------------------------------------------------------------------
# main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="bench/run setpoint", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("scale and workload")
    g.add_argument("--records", type=int, default=1_000_000, help="rows of the single tenant (1 KB each; default 1M, ~1 GB)")
    g.add_argument("--buffer-pool", default="128M", help="tenant buffer pool (default 128M, as in the paper)")
    g.add_argument("--tps", type=float, default=850,
                   help="offered transactions/s (default 850: on this 2-core VM the copy then has a knee, see docs/results.md)")
    g.add_argument("--mpl", type=int, default=10, help="harness worker connections per tenant (default 10)")
    g.add_argument("--seed", type=int, default=None, help="harness seed (default: random per run)")
    g.add_argument("--load", choices=["ycsb", "sysbench"], default="ycsb",
                   help="the load: the project's harness (default), or sysbench oltp_read_write at --tps with "
                        "--sb-threads threads (binary prepared statements); with sysbench the controller reads its "
                        "default source (performance_schema) and the figures are the tenant's per-second mean "
                        "transaction latency from performance_schema (bench/benches/setpoint/sysbench.py)")
    g.add_argument("--sb-threads", type=int, default=16, help="sysbench threads (default 16)")
    g.add_argument("--sb-tables", type=int, default=8, help="sysbench tables (default 8)")
    g.add_argument("--sb-table-size", type=int, default=500_000,
                   help="rows per sysbench table (default 500000: ~1 GB over 8 tables)")
    g = ap.add_argument_group("experiments")
    g.add_argument("--only", default=",".join(DEFAULT_EXPERIMENTS),
                   help=f"comma-separated subset of {','.join(EXPERIMENTS)} (default: all but gains)")
    g.add_argument("--fixed-rates", default="10MB/s,20MB/s,40MB/s,60MB/s,80MB/s,120MB/s",
                   help="fig5 fixed copy rates")
    g.add_argument("--level", type=parse_duration, default=15.0, help="fig5: seconds per fixed-rate level (default 15s)")
    g.add_argument("--base", type=parse_duration, default=20.0, help="fig5: seconds with no copy first (default 20s)")
    g.add_argument("--gap", type=parse_duration, default=8.0, help="fig5: seconds with no copy between levels (default 8s)")
    g.add_argument("--setpoints", default=None,
                   help="fig11 setpoints, e.g. 20ms,40ms,80ms,160ms (default: chosen from fig5's unloaded latency and knee)")
    g.add_argument("--setpoint-factors", default=None,
                   help="choose the setpoints as these multiples of fig5's unloaded latency, e.g. 3,6")
    g.add_argument("--n-setpoints", type=int, default=4, help="how many setpoints to choose when --setpoints is not given")
    g.add_argument("--step-setpoint", type=parse_duration, default=None,
                   help="setpoint for fig13a, threshold and fig13b (default: the second of the fig11 setpoints)")
    g.add_argument("--step-pct", type=float, default=40, help="fig13a load step in percent (default 40)")
    g.add_argument("--step-after", type=parse_duration, default=None,
                   help="fig13a: step the load this long after the copy starts (default: a third of the copy time "
                        "expected from fig11's PID rate at that setpoint)")
    g.add_argument("--step-tps", type=float, default=None,
                   help="fig13a offered load before the step (default --tps/(1+step): the step ends at --tps)")
    g.add_argument("--mt-records", type=int, default=None,
                   help="fig13b: rows of each of the four added tenants, and rows the harness touches on each of "
                        "the five (default records/5)")
    g.add_argument("--mt-tps", type=float, default=None,
                   help="fig13b: offered transactions/s over all five tenants, split evenly (default --tps/2: five "
                        "servers and five times the connections cost more CPU per transaction than one)")
    g.add_argument("--mt-setpoint", type=parse_duration, default=None, help="fig13b setpoint (default --step-setpoint)")
    g.add_argument("--fig13a-repeats", type=fig13a.parse_repeats, default=1,
                   help="fig13a: repeats of the pair (controller, fixed rate), with medians over them (default 1)")
    g.add_argument("--step-controller", default="model", choices=["model", "pid", "threshold"],
                   help="fig13a, fig13b: the controller run against the fixed rate (default model, the default)")
    g.add_argument("--busy-target-tps", type=float, default=None,
                   help="fig13b: also load tenant b1 on the target node at this rate (a busy target)")
    g.add_argument("--mt-buffer-pool", default="32M", help="fig13b buffer pool per tenant (default 32M)")
    g.add_argument("--repeats", type=int, default=3, help="compare: repeats of every (setpoint, controller) (default 3)")
    g.add_argument("--nonbinding-only", action="store_true",
                   help="compare: run only the unthrottled copy and the setpoint that does not bind (model, slack, PID), "
                        "e.g. after a change that can only affect a copy the setpoint does not hold back")
    g.add_argument("--controllers", type=compare.parse_controllers, default=list(compare.KINDS),
                   help="compare: the controllers run at the binding setpoints, comma-separated subset of "
                        "model,pid,threshold,oracle (default all; the setpoint that does not bind runs model "
                        "and pid when listed), e.g. model,oracle to check a change to the default controller")
    g.add_argument("--once", type=compare.parse_controllers, default=[],
                   help="compare: of --controllers, these run in the first repeat only (e.g. threshold, "
                        "measured once beside the others)")
    g.add_argument("--cannot-setpoint", type=parse_duration, default=None,
                   help="compare: also migrate once with the model controller at this setpoint, under what the load "
                        "alone costs, and report when the migration says it cannot finish (aborted after "
                        "--cannot-abort)")
    g.add_argument("--cannot-abort", type=parse_duration, default=90.0,
                   help="compare: abort the --cannot-setpoint migration after this long in its snapshot (default 90s)")
    g.add_argument("--nonbinding-setpoint", type=parse_duration, default=None,
                   help="compare: the setpoint that does not bind (default: twice the first unthrottled copy's mean)")
    g.add_argument("--oracle-rates", default=None,
                   help="compare: fixed oracle rates, one per --setpoints (default: from the fig5 sweep)")
    g = ap.add_argument_group("the stable plant (--only stable, issue 40)")
    g.add_argument("--cpu-per-node", type=float, default=None,
                   help="each node's CPU quota (`cluster up --cpu-per-node`; default none; stable: 0.5)")
    g.add_argument("--cpu-period", type=parse_duration, default=0.01,
                   help="the quota's period (default 10ms: the quota's own stalls stay ~10 ms)")
    g.add_argument("--cpu-weight", type=int, default=1000,
                   help="each node's CPU weight, 1-10000 (default 1000: ten busy sessions)")
    g.add_argument("--loadgen-weight", type=int, default=10000,
                   help="the CPU weight of the group holding the load generator, the sampler and the controller, "
                        "1-10000 (default 10000, the most: they measure the plant, so on a contended box they run "
                        "first when they wake; they have no quota and use a fraction of a core)")
    g.add_argument("--latency-stat", choices=["median", "mean"], default="median",
                   help="a run's latency (the load's own before the copy, and during it): the median of its "
                        "per-second means (default; one slow second of the machine's does not move it) or the "
                        "transaction-weighted mean")
    g.add_argument("--load-fraction", type=float, default=0.5, help="offered load as a share of the measured capacity")
    g.add_argument("--offered", type=float, default=None, help="offered tps (default: --load-fraction x capacity)")
    g.add_argument("--capacity-probe-tps", type=float, default=None,
                   help="offered tps of the capacity probe (default: sysbench closed loop; the harness 3000)")
    g.add_argument("--pre-window", type=parse_duration, default=15.0,
                   help="the seconds before the copy that the validity gate checks and the setpoint is a multiple of")
    g.add_argument("--latency-tolerance", type=float, default=0.10,
                   help="the gate: the load's own latency before a run within this share of the session's "
                        "reference (default 0.10, the issue's; a diagnostic run may widen it to see whether the "
                        "copy's latency repeats while the load's own does not)")
    g.add_argument("--max-attempts", type=int, default=3, help="attempts of a run whose gate fails (default 3)")
    g.add_argument("--calibration-repeats", type=int, default=5)
    g.add_argument("--sweep-factors", default="0.5,1,2",
                   help="calibration's fixed rates, as multiples of the rate whose copy lasts 60 s")
    g.add_argument("--bracket", default="0.5,1,2",
                   help="each block's fixed rates, as multiples of the calibration's oracle rate")
    g.add_argument("--blocks", type=int, default=5)
    g = ap.add_argument_group("oltp (--only oltp: the loads through a router, paired within blocks)")
    g.add_argument("--binding-mult", type=float, default=1.6,
                   help="the binding setpoint: this times the load's own latency measured at the block's start")
    g.add_argument("--nonbinding-mult", type=float, default=4.0, help="the non-binding setpoint's multiple (default 4)")
    g.add_argument("--oracle-factors", default="0.5,1,2",
                   help="the block's fixed rates: multiples of the rate where the line in 1/latency from the load's "
                        "own latency to the unthrottled warm-up's crosses the binding setpoint (below the "
                        "unthrottled rate); "
                        "fractions of the unthrottled rate where the warm-up stayed under it")
    g.add_argument("--members", default=None,
                   help="oltp: the block's members to run, comma-separated (default all: fixed:0..n, "
                        "model-router:b, model-server:b, pid-router:b, unthrottled, model-router:nb, step:...); "
                        "'fixed:*' names every fixed rate")
    g.add_argument("--warmup-moves", type=int, default=1, help="unthrottled moves at a block's start, not judged")
    g.add_argument("--capacity-s", type=parse_duration, default=8.0,
                   help="how long the capacity probe before each block runs (default 8s)")
    g.add_argument("--judge-clock", choices=["response", "service"], default="response",
                   help="sysbench's clock the setpoints and means are taken on: from each transaction's scheduled "
                        "arrival (default: what a client sees, a late thread's queue included, as the harness "
                        "measures) or from its start (what the router and the server can time); both are recorded")
    g.add_argument("--move-timeout", type=parse_duration, default=120.0,
                   help="a move still copying after this long is aborted and judged on what it copied (default "
                        "2min; the bench's limit, the same for every move: a controller is not capped otherwise)")
    g.add_argument("--move-gap", type=parse_duration, default=3.0, help="seconds between moves (default 3s)")
    g.add_argument("--recover-max", type=parse_duration, default=90.0,
                   help="oltp: before each move, wait at most this long for the load to be back under the binding "
                        "setpoint on its own clock (default 90s)")
    g.add_argument("--step-factor", type=float, default=2.0,
                   help="the load step: the load times this, by a second load at (factor-1) x the rate (default 2)")
    g.add_argument("--step-s", type=parse_duration, default=20.0, help="how long the load step lasts (default 20s)")
    g.add_argument("--step-delay", type=parse_duration, default=4.0,
                   help="the step starts this long into the copy (default 4s)")
    g.add_argument("--block-estimate", type=parse_duration, default=300.0,
                   help="a block's length for the ETA and --until before the first block ends (default 5min)")
    g.add_argument("--until", default=None, help="HH:MM UTC: start no block that would end after it")
    g.add_argument("--data-copy", default=None, help="also write results.json here after every run (e.g. docs/data/...)")
    g = ap.add_argument_group("controller")
    g.add_argument("--gains", default=None, help="PID gains kp,ki,kd (default: the controller's defaults)")
    g.add_argument("--max-rate", type=parse_rate, default=None,
                   help="controller's max rate, the rate at fraction 1 (default: none given, i.e. the node's "
                        "200MB/s scale, and at its maximum the copy runs unthrottled)")
    g.add_argument("--gain-sets", default="0.2,0.05,0.1;0.1,0.02,0.1;0.05,0.01,0.05",
                   help="the gains experiment: PID runs at --step-setpoint with each kp,ki,kd set (';'-separated)")
    g = ap.add_argument_group("timing")
    g.add_argument("--warmup", type=parse_duration, default=15.0, help="harness warm-up before each migration (default 15s)")
    g.add_argument("--settle-max", type=parse_duration, default=240.0,
                   help="longest wait for the freshly loaded tenant's dirty pages to flush (default 4min)")
    g.add_argument("--post", type=parse_duration, default=3.0, help="harness time after each migration (default 3s)")
    g.add_argument("--tail-exclude", type=parse_duration, default=2.0,
                   help="seconds at the end of the snapshot phase left out of 'during the copy' (default 2s)")
    g.add_argument("--head-exclude", type=parse_duration, default=0.0,
                   help="compare: also report the latency figures without the copy's first seconds (the backup "
                        "tool's start, which stalls a disk-bound tenant whatever the rate; default 0: not shown)")
    g.add_argument("--migration-timeout", type=parse_duration, default=900.0)
    g = ap.add_argument_group("output and cluster")
    g.add_argument("--out-dir", default=str(REPO / "bench" / "out" / "setpoint"))
    g.add_argument("--img-dir", default=None, help="also copy the PNGs here (e.g. docs/img)")
    g.add_argument("--target-tmpfs", default="/dev/shm",
                   help="put node-2's data root in RAM so the copy does not land on the source's disk (one VM "
                        "plays both machines): a tmpfs mounted at RUN_DIR/node-2 (root), else a directory on this "
                        "tmpfs; 'none' keeps both nodes on one disk (default /dev/shm)")
    g.add_argument("--disk-read-bps", type=parse_rate, default=None,
                   help="limit each node's disk reads (`cluster up --disk-read-per-node`), e.g. 30MB/s: a host "
                        "with a slow disk, where the copy competes with the tenant's page reads (the paper's "
                        "plant); the page cache is dropped before each run. Use with --target-tmpfs none "
                        "(default: no limit)")
    g.add_argument("--address", default="127.0.88.2", help="loopback address of node-1 (default 127.0.88.2)")
    g.add_argument("--api-port", type=int, default=7788)
    g.add_argument("--port-range", default="28306-29305", help="tenant ports (default below the kernel's ephemeral range)")
    g.add_argument("--cluster", default=None,
                   help="use this running cluster and its already loaded --tenant instead of setting one up "
                        "(nothing is created or torn down; for iterating)")
    g.add_argument("--tenant", default="t1", help="the single tenant's id (default t1)")
    g.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    g.add_argument("--report-only", default=None, metavar="RESULTS_JSON",
                   help="print the tables and redraw the plots from a previous results.json")
    a = ap.parse_args(argv)
    a.only = [x.strip() for x in a.only.split(",") if x.strip()]
    bad = [x for x in a.only if x not in EXPERIMENTS]
    if bad:
        ap.error(f"unknown experiment(s) {', '.join(bad)}; choose from {', '.join(EXPERIMENTS)}")
    a.fixed_rates = [float(x) for x in parse_list(a.fixed_rates, parse_rate)]
    a.setpoints = parse_list(a.setpoints, parse_duration) if a.setpoints else None
    a.setpoint_factors = [float(x) for x in a.setpoint_factors.split(",")] if a.setpoint_factors else None
    a.oracle_rates = [float(x) for x in parse_list(a.oracle_rates, parse_rate)] if a.oracle_rates else None
    a.gain_sets = [x.strip() for x in a.gain_sets.split(";") if x.strip()]
    if a.mt_records is None:
        a.mt_records = max(1000, a.records // 5)
    if a.mt_tps is None:
        a.mt_tps = a.tps / 2
    if a.step_tps is None:
        a.step_tps = round(a.tps / (1 + a.step_pct / 100))
    a.sweep_factors = [float(x) for x in a.sweep_factors.split(",")]
    a.bracket = [float(x) for x in a.bracket.split(",")]
    a.oracle_factors = [float(x) for x in a.oracle_factors.split(",")]
    if "oltp" in a.only:
        if len(a.only) > 1:
            ap.error("--only oltp runs alone (its blocks share one load and one router)")
        if len(a.oracle_factors) < 3:
            ap.error("--oracle-factors needs at least 3 rates")
        a.router, a.own_clock = True, True  # the loads through the router; sysbench's own clock per second
        a.sb_paced, a.arrival = True, "constant"
        if a.capacity_probe_tps is None:
            a.capacity_probe_tps = 3000
    if "stable" in a.only:
        if a.cpu_per_node is None:
            a.cpu_per_node = 0.5
        a.sb_paced, a.arrival = True, "constant"  # constant arrivals: a per-second gate can hold
        if a.capacity_probe_tps is None:
            a.capacity_probe_tps = 0 if a.load == "sysbench" else 3000
        a.warmup = max(a.warmup, a.pre_window + 5)  # the gate's window is the warm-up's end, past the start
        if len(a.bracket) < 3:
            ap.error("--bracket needs at least 3 rates")
    if a.until:
        import datetime as dt
        hh, mm = (int(x) for x in a.until.split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        a.until = now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report_only:
        res = json.loads(Path(args.report_only).read_text())
        # recompute the load-step analysis from the saved series, so a change to it applies to old runs
        tail_exclude_s = res.get("config", {}).get("tail_exclude", args.tail_exclude)
        reps = res.get("fig13a_repeats") or ([res["fig13a"]] if res.get("fig13a") else [])
        for f13 in reps:
            for key in ("pid", "fixed"):
                run = res["runs"].get(f13[key])
                if run and Path(run["harness_path"]).exists():
                    f13[key + "_analysis"] = step_analysis(run, f13["setpoint_s"], tail_exclude_s)
        if reps:
            res["fig13a"] = reps[0]  # the first repeat is the single-run table (a copy of it after a reload)
        for blk in (res.get("stable") or {}).get("blocks", []):  # recomputed: a change to them applies to old runs
            if blk.get("ended"):
                blk["figures"] = stable.block_figures(res, blk, res["stable"]["calibration"]["multiples"])
        if (res.get("oltp") or {}).get("blocks"):
            for blk in res["oltp"]["blocks"]:
                if blk.get("figures"):
                    oltp.refigure(blk, (res.get("config") or {}).get("judge_clock") or "response")
            res["oltp"]["summary"] = oltp.summary(res["oltp"])
        print(report(res, args.head_exclude))
        print(stable.report(res))
        print(oltp.report(res))
        if args.data_copy and res.get("oltp"):
            Path(args.data_copy).write_text(json.dumps(res, indent=1, default=str))
        if args.data_copy and res.get("stable"):
            # the per-second series of every run, beside the raw results (docs/data)
            series_path = Path(args.data_copy).with_name(Path(args.data_copy).stem + "-series.json")
            series_path.write_text(json.dumps(stable.series(res)))
            print(f"series: {series_path}")
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for p in make_plots(res, out_dir) + oltp.plot(res, out_dir):
            print(f"plot: {p}")
            if args.img_dir:
                Path(args.img_dir).mkdir(parents=True, exist_ok=True)
                shutil.copy(p, Path(args.img_dir) / p.name)
        return 0

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    # Started in the background (`cmd &` without job control) SIGINT arrives ignored, and an ignored
    # signal stays ignored across exec: the harness could then not be stopped with SIGINT. A handler
    # here makes Ctrl-C work for us and gives children the default disposition.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bench = Bench(args)
    res = bench.results
    res["config"] = {k: v for k, v in vars(args).items()}
    res["command"] = " ".join([".venv/bin/python", "bench/run setpoint", *(argv if argv is not None else sys.argv[1:])])
    res["machine"] = machine_info()
    started = time.monotonic()

    def experiments() -> None:
        bench.setup()
        if not args.cluster:
            res["tenant"] = bench.create_and_load(args.tenant, args.records, args.buffer_pool)
            res["tenant"]["settle_s"] = round(bench.settle(args.tenant, args.settle_max), 1)
        k = {}
        if "fig5" in args.only:
            f5 = fig5.run(bench)
            k = analysis.knee(f5)
            res["knee"] = k
            log(f"unloaded {ms(k['unloaded_s'])} ms; highest stable fixed rate {mbs(k['max_stable_rate'])} MB/s at "
                f"{ms(k['knee_latency_s'])} ms; latency runs away at {mbs(k['knee_rate'])} MB/s")
        need_sp = "stable" not in args.only and any(x in args.only for x in ("fig11", "fig13a", "threshold", "fig13b", "gains", "compare"))
        setpoints = args.setpoints or (analysis.choose_setpoints(k, args.setpoints, args.setpoint_factors,
                                                                  args.n_setpoints) if k else None)
        if need_sp and not setpoints:
            raise SystemExit("give --setpoints (or run fig5 so they can be chosen)")
        res["setpoints"] = setpoints
        if setpoints:
            log(f"setpoints: {', '.join(ms(s, 1) for s in setpoints)} ms")
        sp_step = args.step_setpoint or (setpoints[1] if setpoints and len(setpoints) > 1 else (setpoints or [None])[0])
        if "gains" in args.only:
            gains.run(bench, sp_step)
        if "fig11" in args.only:
            fig11.run(bench, setpoints)
        expected = None
        for pair in res.get("fig11", []):
            if abs(pair["setpoint_s"] - sp_step) < 1e-9:
                expected = res["runs"][pair["pid"]]["migration"]["avg_rate"]
        if "fig13a" in args.only:
            n = args.fig13a_repeats
            for rep in range(1, n + 1):
                fig13a.run(bench, sp_step, expected, rep if n > 1 else 0)
        if "threshold" in args.only:
            threshold.run(bench, sp_step)
        if "fig13b" in args.only:
            fig13b.run(bench, args.mt_setpoint or sp_step)
        if "compare" in args.only:
            compare.run(bench, setpoints)
        if "stable" in args.only:
            stable.run(bench)
        if "oltp" in args.only:
            oltp.run(bench)

    rc = guarded(bench, experiments)
    res["elapsed_s"] = round(time.monotonic() - started, 1)
    bench.save()
    print()
    print(report(res, args.head_exclude))
    print(stable.report(res))
    print(oltp.report(res))
    made = make_plots(res, bench.out_dir) + oltp.plot(res, bench.out_dir)
    for p in made:
        print(f"plot: {p}")
        if args.img_dir:
            Path(args.img_dir).mkdir(parents=True, exist_ok=True)
            shutil.copy(p, Path(args.img_dir) / p.name)
    print(f"raw results: {bench.out_dir / 'results.json'}  (elapsed {res['elapsed_s'] / 60:.1f} min)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
