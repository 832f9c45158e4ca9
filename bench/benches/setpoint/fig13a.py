"""Figure 13a: +--step-pct offered load about a third into the copy, the controller vs a fixed rate equal to
the rate the controller had settled on before the step; --fig13a-repeats times (each repeat a pair of runs)."""

from __future__ import annotations

import argparse
import statistics

from . import log
from .analysis import key, migration_series, step_analysis, step_wall, ts_of
from .runner import Bench


def step_time(bench: Bench, copy_s: float) -> float:
    """Seconds after the harness starts at which the load steps: --step-after, or a third into the copy."""
    pre = statistics.median(bench.preflight_s) if bench.preflight_s else 4.0
    into_copy = bench.args.step_after if bench.args.step_after is not None else copy_s / 3
    return bench.args.warmup + 1.0 + pre + into_copy


def parse_repeats(text: str) -> int:
    """--fig13a-repeats: a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def run(bench: Bench, sp: float, expected_rate: float | None, rep: int = 0) -> dict:
    """One repeat: the controller's run with the step, then the fixed rate's. `rep` > 0 names the runs
    `-r<rep>` (several repeats in one results file); every repeat is kept in `fig13a_repeats`, and the
    first is `fig13a` (the single-run table and plot)."""
    a = bench.args
    suffix = f"-r{rep}" if rep > 0 else ""
    nbytes = bench.results.get("bytes_estimate") or bench.data_bytes(a.tenant)
    rate = expected_rate or (bench.args.max_rate or 200e6) * 0.3
    t_step = step_time(bench, nbytes / rate)
    tps = a.step_tps
    pid = bench.run_tenant(f"fig13a-{a.step_controller}-{key(sp)}{suffix}", a.step_controller, sp, tps=tps,
                           steps=[f"{t_step:.1f}s:+{a.step_pct:g}%"])
    m = pid["migration"]
    step_wall_t = step_wall(pid)
    pre_avg = None
    if step_wall_t is not None and m["snapshot_start"] < step_wall_t < m["snapshot_end"]:
        snap = [s for s in migration_series(m) if s.get("phase") == "snapshot"]

        def bytes_at(t: float) -> int:
            return max([s["bytes_done"] for s in snap if ts_of(s["ts"]) <= t] or [0])
        pre_avg = bytes_at(step_wall_t) / max(1e-9, step_wall_t - m["snapshot_start"])
        # The fixed throttle gets the rate the PID had settled on for the pre-step load: its average over
        # the last 10 s before the step (or the later half of the pre-step copy, if shorter), not the
        # average since the start, which includes the controller's ramp from its initial rate.
        w = min(10.0, (step_wall_t - m["snapshot_start"]) / 2)
        pre_rate = (bytes_at(step_wall_t) - bytes_at(step_wall_t - w)) / w if w >= 2 else pre_avg
    else:
        log("fig13a: the load step did not land inside the PID run's copy; fixed run uses its average rate")
        pre_rate = m["avg_rate"]
    t_step_f = step_time(bench, nbytes / pre_rate)
    fixed = bench.run_tenant(f"fig13a-fixed-{key(sp)}{suffix}", "fixed", sp, rate=pre_rate, tps=tps,
                             steps=[f"{t_step_f:.1f}s:+{a.step_pct:g}%"])
    out = {"setpoint_s": sp, "pid": pid["name"], "fixed": fixed["name"], "pid_pre_step_rate": pre_rate,
           "controller": a.step_controller,
           "pid_pre_step_avg_rate": pre_avg,
           "tps_before": tps, "tps_after": tps * (1 + a.step_pct / 100)}
    for which, r in (("pid", pid), ("fixed", fixed)):
        out[which + "_analysis"] = step_analysis(r, sp, a.tail_exclude)
    reps = bench.results.setdefault("fig13a_repeats", [])
    reps.append(out)
    bench.results["fig13a"] = reps[0]
    bench.save()
    return out
