"""The analysis of bench/setpoint's results: pure functions over the harness's per-second records,
the migrations' series and results.json, and the text tables of the report.

Nothing here starts a process; the files it reads are the ones a run wrote
(`*.harness.jsonl`, `*.migration.jsonl`), so `--report-only` recomputes from them.

Definitions of the controller comparison (issue 14, `--only compare`):
- a setpoint binds when the unthrottled copy's mean latency is >= 1.3x it, and
  does not bind when the unthrottled copy stays <= 0.8x it;
- spread = standard deviation of the per-second mean latencies during the copy;
- the oracle = the highest fixed rate of the Figure 5 sweep whose mean latency
  met the setpoint;
- time to 90 % = from the start of the copy to the first controller step whose
  measured copy throughput reached 90 % of the final rate (the mean throughput
  over the last third of the copy).
"""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime
from pathlib import Path

MB = 1e6
KINDS = ("model", "pid", "threshold", "oracle", "unthrottled")
LABELS = {"model": "model (default)", "pid": "velocity PID",
          "threshold": "on/off threshold", "oracle": "fixed at oracle", "unthrottled": "unthrottled"}
COLOURS = {"model": "#9467bd", "pid": "#1f77b4", "threshold": "#ff7f0e", "oracle": "#d62728",
           "unthrottled": "#7f7f7f"}
CONTROLLERS = ("model", "pid")  # the latency-steered ones, also run at the non-binding setpoint


# ----------------------------------------------------------------------------------------------
# reading what a run wrote

def ts_of(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def harness_records(path: str | Path) -> list[dict]:
    """The harness's per-interval records (`slacker ycsb run --out`), each with its wall-clock `_start`, `_end`.

    A line that does not parse (the last one while the harness still writes) is skipped."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        r["_end"] = ts_of(r["time"])
        r["_start"] = r["_end"] - r["interval_s"]
        out.append(r)
    return out


def migration_series(m: dict) -> list[dict]:
    """A migration's time series: kept in the run's record, or read back from its series file."""
    if m.get("series") is not None:
        return m["series"]
    return [json.loads(x) for x in Path(m["series_path"]).read_text().splitlines() if x.strip()]


# ----------------------------------------------------------------------------------------------
# formatting

def ms(v: float | None, nd: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1000:.{nd}f}"


def mbs(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v / MB:.{nd}f}"


def fmt(v, nd: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def table(headers: list[str], rows: list[list], title: str = "") -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    out = [title] if title else []
    out.append("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def parse_list(text: str, parse) -> list[float]:
    return [parse(p.strip()) for p in str(text).split(",") if p.strip()]


def key(sp: float) -> str:
    """A setpoint as the results' keys and run names spell it: 0.03 -> '30ms'."""
    return f"{sp * 1000:g}ms"


# ----------------------------------------------------------------------------------------------
# latency

def aggregate(records: list[dict], t0: float, t1: float) -> list[dict]:
    """Per-second records of all tenants in [t0, t1] merged by interval end: one mean per second."""
    by_end: dict[float, list[dict]] = {}
    for r in records:
        if r["phase"] != "run":
            continue
        mid = (r["_start"] + r["_end"]) / 2
        if t0 <= mid <= t1:
            by_end.setdefault(round(r["t_s"], 1), []).append(r)
    out = []
    for k in sorted(by_end):
        rs = by_end[k]
        n = sum(r["completed"] for r in rs)
        tot = sum((r["latency_mean_s"] or 0) * r["completed"] for r in rs)
        out.append({"t_s": k, "end": max(r["_end"] for r in rs), "completed": n,
                    "mean": tot / n if n else None, "queue": sum(r["queue_length"] for r in rs),
                    "offered": sum(r["offered_tps"] for r in rs),
                    "p99": max((r["latency_p99_s"] or 0) for r in rs)})
    return out


def latency_stats(records: list[dict], t0: float, t1: float, setpoint: float | None = None) -> dict:
    """Transaction-weighted mean latency in [t0, t1], std dev of the per-second means, and more."""
    secs = aggregate(records, t0, t1)
    secs_v = [s for s in secs if s["mean"] is not None]
    n = sum(s["completed"] for s in secs_v)
    if not secs_v or n == 0:
        return {"seconds": len(secs), "mean_s": None, "std_s": None, "completed": 0}
    mean = sum(s["mean"] * s["completed"] for s in secs_v) / n
    means = [s["mean"] for s in secs_v]
    out = {"seconds": len(secs), "completed": n, "mean_s": mean,
           "std_s": statistics.pstdev(means) if len(means) > 1 else 0.0,
           "median_1s_s": statistics.median(means), "max_1s_s": max(means),
           "p99_max_s": max(s["p99"] for s in secs_v), "queue_max": max(s["queue"] for s in secs),
           "tps": n / max(1e-9, (t1 - t0))}
    if setpoint:
        # Share of seconds whose 3 s trailing average (the controller's view) is above 1.1 x setpoint.
        sm = smooth([s["mean"] for s in secs_v], 3)
        out["above_110pct_share"] = sum(1 for v in sm if v > 1.1 * setpoint) / len(sm)
    return out


def smooth(values: list[float], k: int) -> list[float]:
    out = []
    for i in range(len(values)):
        w = values[max(0, i - k + 1): i + 1]
        out.append(sum(w) / len(w))
    return out


# ----------------------------------------------------------------------------------------------
# the load step (fig13a)

def step_wall(run: dict) -> float | None:
    """When the harness's offered rate first rose above its starting rate (the load step)."""
    recs = harness_records(run["harness_path"])
    base = recs[0]["target_tps"] if recs else None
    for r in recs:
        if base and r["target_tps"] > base * 1.01:
            return r["_start"]
    return None


def fig13a_repeats_summary(res: dict) -> list[str]:
    """With several Figure 13a repeats (the table above shows the first): per throttle, the seconds back
    within 1.1x the setpoint after the step in each repeat and their median (the issue's goal: <= 10 s)."""
    reps = res.get("fig13a_repeats") or []
    if len(reps) < 2:
        return []
    out = [f"over {len(reps)} repeats, back <= 1.1x the setpoint after the step (s; the goal: <= 10):"]
    for which in ("pid", "fixed"):
        values = [(f.get(which + "_analysis") or {}).get("recovery_s") for f in reps]
        shown = ", ".join("never" if v is None else f"{v:.0f}" for v in values)
        med = statistics.median(math.inf if v is None else v for v in values)
        label = reps[0].get("controller", "pid") if which == "pid" else "fixed"
        out.append(f"  {label}: {shown} (median {'never' if math.isinf(med) else f'{med:.0f}'})")
    return out


def step_analysis(run: dict, sp: float, tail_exclude_s: float) -> dict:
    """Latency after the load step: recovery time to within 10% of setpoint, means before/after."""
    m = run["migration"]
    recs = harness_records(run["harness_path"])
    step = step_wall(run)
    c0, c1 = m["snapshot_start"], m["snapshot_end"] - tail_exclude_s
    out = {"step_wall": step, "copy_start": c0, "copy_end": c1,
           "step_at_fraction_of_copy": (step - c0) / (m["snapshot_end"] - c0) if step else None}
    if step is None:
        return out
    secs = [s for s in aggregate(recs, c0, c1) if s["mean"] is not None]
    sm = smooth([s["mean"] for s in secs], 3)
    after = [(s["end"], v) for s, v in zip(secs, sm) if s["end"] > step]
    rec_s = recovery_s(after, step, sp)
    series = migration_series(m)
    snap = [s for s in series if s.get("phase") == "snapshot"]
    bytes_at = lambda t: max([s["bytes_done"] for s in snap if ts_of(s["ts"]) <= t] or [0])  # noqa: E731
    out.update({
        "before": latency_stats(recs, c0, step, sp), "after": latency_stats(recs, step, c1, sp),
        "after_10s": latency_stats(recs, step + 10, c1, sp) if c1 > step + 12 else None,
        "recovery_s": rec_s,
        "first_back_s": first_back_s(after, step, sp),
        "rate_before": bytes_at(step) / max(1e-9, step - c0),
        "rate_after": (m["bytes"] - bytes_at(step)) / max(1e-9, m["snapshot_end"] - step),
        "peak_3s_after_s": max((v for _, v in after), default=None),
    })
    return out


def recovery_s(after: list[tuple[float, float]], step: float, sp: float) -> float | None:
    """Seconds from the load step until latency (3 s average, the controller's view) is back at or below
    1.1 x setpoint after its highest point since the step; 0 if it never went above; None if it never came back."""
    if not after:
        return None
    i_peak = max(range(len(after)), key=lambda i: after[i][1])
    if after[i_peak][1] <= 1.1 * sp:
        return 0.0
    for t, v in after[i_peak:]:
        if v <= 1.1 * sp:
            return t - step
    return None


def first_back_s(after: list[tuple[float, float]], step: float, sp: float) -> float | None:
    """Seconds from the load step until latency (3 s average) first comes back to 1.1 x setpoint after first
    going above it: the step's own response, without a later excursion (which recovery_s counts); 0 if it
    never went above; None if it never came back."""
    above = next((i for i, (_, v) in enumerate(after) if v > 1.1 * sp), None)
    if above is None:
        return 0.0 if after else None
    return next((t - step for t, v in after[above:] if v <= 1.1 * sp), None)


# ----------------------------------------------------------------------------------------------
# fig5: the unloaded latency, the knee, the setpoints

def knee(fig5: dict) -> dict:
    """Unloaded latency; the knee = first level where latency grows without bound or jumps."""
    unloaded = fig5["base"]["mean_s"]
    stable, knee_rate = [], None
    for lv in fig5["levels"]:
        st = lv["stats"]
        if st["mean_s"] is None:
            continue
        growing = (lv["second_half_s"] or 0) > 1.5 * (lv["first_half_s"] or math.inf) and st["queue_max"] > 20
        if growing or st["mean_s"] > 20 * (unloaded or st["mean_s"]):
            knee_rate = lv["achieved_rate"]
            break
        stable.append(lv)
    knee_latency = max((lv["stats"]["mean_s"] for lv in stable), default=None)
    return {"unloaded_s": unloaded, "knee_rate": knee_rate, "knee_latency_s": knee_latency,
            "max_stable_rate": stable[-1]["achieved_rate"] if stable else None}


def choose_setpoints(k: dict, setpoints: list[float] | None = None, factors: list[float] | None = None,
                     n: int = 4) -> list[float]:
    """The given setpoints; or these multiples of the unloaded latency; or n from 1.5x unloaded to the knee."""
    if setpoints:
        return setpoints
    if factors:
        u = k["unloaded_s"] or 0.01
        return [round(f * u * 1000) / 1000 for f in factors]
    lo = 1.5 * (k["unloaded_s"] or 0.01)
    hi = max(k["knee_latency_s"] or 0, 3 * lo)
    sps = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return [round(s * 1000) / 1000 if s >= 0.01 else round(s * 10000) / 10000 for s in sps]


def oracle_rates(fig5: dict, setpoints: list[float]) -> dict[str, float | None]:
    """For each setpoint: the highest fixed-rate level of the sweep whose mean latency met it."""
    out: dict[str, float | None] = {}
    for sp in setpoints:
        ok = [lv["rate"] for lv in fig5["levels"]
              if lv["stats"].get("mean_s") is not None and lv["stats"]["mean_s"] <= sp]
        out[key(sp)] = max(ok) if ok else None
    return out


# ----------------------------------------------------------------------------------------------
# the fixed throttle's curve

def isotonic(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pool-adjacent-violators: latency made non-decreasing in rate (the fixed throttle's curve)."""
    blocks = [[x, y, 1] for x, y in sorted(points)]
    i = 0
    while i < len(blocks) - 1:
        if blocks[i][1] > blocks[i + 1][1]:
            x0, y0, n0 = blocks[i]
            x1, y1, n1 = blocks[i + 1]
            blocks[i] = [(x0 * n0 + x1 * n1) / (n0 + n1), (y0 * n0 + y1 * n1) / (n0 + n1), n0 + n1]
            del blocks[i + 1]
            i = max(0, i - 1)
        else:
            i += 1
    return [(b[0], b[1]) for b in blocks]


def rate_at_latency(curve: list[tuple[float, float]], lat: float) -> float | None:
    """The fixed rate whose mean latency is `lat`, by linear interpolation on the monotone curve."""
    if len(curve) < 2 or lat < curve[0][1]:
        return None
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if y0 <= lat <= y1:
            return x0 if y1 == y0 else x0 + (x1 - x0) * (lat - y0) / (y1 - y0)
    return curve[-1][0] if lat >= curve[-1][1] else None


def fixed_curve(res: dict) -> list[tuple[float, float]]:
    pts = []
    f5 = res["runs"].get("fig5")
    if f5:
        pts += [(lv["achieved_rate"], lv["stats"]["mean_s"]) for lv in f5["levels"] if lv["stats"]["mean_s"]]
    for pair in res.get("fig11", []):
        r = res["runs"].get(pair["fixed"])
        if r and r["copy"]["mean_s"]:
            pts.append((r["migration"]["avg_rate"], r["copy"]["mean_s"]))
    return isotonic(pts)



# ----------------------------------------------------------------------------------------------
# the controller comparison (issue 14)

def _copy_points(migration: dict, tail_exclude_s: float, field: str) -> list[tuple[float, float]]:
    t0, t1 = migration["snapshot_start"], migration["snapshot_end"] - tail_exclude_s
    series = migration.get("series")
    if series is None and migration.get("series_path") and Path(migration["series_path"]).exists():
        series = migration_series(migration)
    pts = []
    for s in series or []:
        if s.get("phase") != "snapshot" or s.get(field) is None:
            continue
        t = ts_of(s["ts"])
        if t0 <= t <= t1:
            pts.append((t - t0, float(s[field])))
    return pts


def ramp_s(migration: dict, tail_exclude_s: float) -> float | None:
    """Seconds from the copy's start until its rate first reaches 90 % of its final rate (the mean over the
    copy's last third). The rate is bytes copied per interval between the series' samples (one a second):
    the copy's own rate, not the progress line's smoothed throughput (see `ramp_progress_s`)."""
    pts = _copy_points(migration, tail_exclude_s, "bytes_done")
    if len(pts) < 3:
        return None
    rates = [(t1, (b1 - b0) / (t1 - t0)) for (t0, b0), (t1, b1) in zip(pts, pts[1:]) if t1 > t0]
    span = pts[-1][0]
    tail = [p for p in pts if p[0] >= span * 2 / 3]
    if len(tail) < 2 or tail[-1][0] <= tail[0][0]:
        return None
    final = (tail[-1][1] - tail[0][1]) / (tail[-1][0] - tail[0][0])
    return next((t for t, v in rates if v >= 0.9 * final), None)


def ramp_progress_s(migration: dict, tail_exclude_s: float) -> float | None:
    """The same from the progress line's throughput (a moving average, 0.6/0.4 a second: it trails the
    copy's rate by 1-2 s); the figure the fifth session's tables gave as "time to 90 %"."""
    pts = _copy_points(migration, tail_exclude_s, "throughput_bytes_per_s")
    if len(pts) < 3:
        return None
    span = pts[-1][0]
    tail = [v for t, v in pts if t >= span * 2 / 3] or [pts[-1][1]]
    final = statistics.fmean(tail)
    return next((t for t, v in pts if v >= 0.9 * final), None)


def run_figures(run: dict, tail_exclude_s: float, head_exclude_s: float = 0.0) -> dict:
    """A run's figures for the comparison. With `head_exclude_s` the latency figures leave out the copy's
    first seconds (read again from the harness file): the backup tool's own start, which stalls the
    tenant whatever the copy rate on a disk-bound host, like the final lock stage at the tail."""
    m = run["migration"]
    copy = run["copy"]
    if head_exclude_s > 0 and Path(run.get("harness_path") or "").exists():
        copy = latency_stats(harness_records(run["harness_path"]), m["snapshot_start"] + head_exclude_s,
                             m["snapshot_end"] - tail_exclude_s)
    return {"mean_s": copy.get("mean_s"), "sd_s": copy.get("std_s"),
            "rate": m["avg_rate"], "copy_s": m["snapshot_s"], "migration_s": m.get("duration_s"),
            "ramp_s": ramp_s(m, tail_exclude_s), "ramp_progress_s": ramp_progress_s(m, tail_exclude_s),
            "result": m["result"],
            "others_cores": (run.get("cpu_during_copy") or {}).get("others_cores")}


def _med(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def _rng(values: list) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    return (min(v), max(v)) if v else (None, None)


def summarise(res: dict, head_exclude_s: float = 0.0) -> dict:
    """Medians and ranges per (setpoint, controller) over the repeats, and the goals they meet."""
    cmp_ = res.get("compare") or {}
    tail = res.get("config", {}).get("tail_exclude", 2.0)
    cells: dict[tuple[str, str], list[dict]] = {}
    for item in cmp_.get("runs", []):
        run = res["runs"].get(item["name"])
        if not run:
            continue
        f = run_figures(run, tail, head_exclude_s)
        f["rep"] = item["rep"]
        sp_key = key(item["setpoint_s"]) if item["setpoint_s"] else "-"
        cells.setdefault((sp_key, item["kind"]), []).append(f)
    out = {}
    unthr = cells.get(("-", "unthrottled"), [])
    u_mig = _med([f["migration_s"] for f in unthr])
    u_mean = _med([f["mean_s"] for f in unthr])
    for (sp_key, kind), fs in cells.items():
        sp = None if sp_key == "-" else float(sp_key[:-2]) / 1000
        s = {"n": len(fs), "kind": kind, "setpoint_s": sp}
        for name in ("mean_s", "sd_s", "rate", "copy_s", "migration_s", "ramp_s", "ramp_progress_s", "others_cores"):
            s[name] = _med([f[name] for f in fs])
            s[name + "_range"] = _rng([f[name] for f in fs])
        if sp:
            s["ratio"] = s["mean_s"] / sp if s["mean_s"] is not None else None
            s["ratio_range"] = tuple(None if x is None else x / sp for x in s["mean_s_range"])
        out[(sp_key, kind)] = s
    goals = []
    for sp_key in cmp_.get("binding", []):
        orc = out.get((sp_key, "oracle"))
        for kind in (*CONTROLLERS, "threshold"):
            s = out.get((sp_key, kind))
            if not s:
                continue
            sp = s["setpoint_s"]
            g = {"setpoint": sp_key, "kind": kind, "binds": (u_mean / sp if u_mean and sp else None)}
            g["mean_within_10pct"] = s["ratio"] is not None and abs(s["ratio"] - 1) <= 0.10
            g["spread_vs_oracle"] = (s["sd_s"] / orc["sd_s"]) if orc and orc["sd_s"] else None
            g["speed_vs_oracle"] = (s["rate"] / orc["rate"]) if orc and orc["rate"] else None
            g["ramp_ok"] = s["ramp_s"] is not None and s["ramp_s"] <= 10
            goals.append(g)
    nb = cmp_.get("nonbinding")
    for kind in CONTROLLERS:
        s = out.get((key(nb), kind)) if nb else None
        if s:
            goals.append({"setpoint": key(nb), "kind": kind, "binds": (u_mean / nb if u_mean else None),
                          "migration_vs_unthrottled": (s["migration_s"] / u_mig) if u_mig and s["migration_s"] else None,
                          "ramp_ok": s["ramp_s"] is not None and s["ramp_s"] <= 10})
    return {"cells": out, "goals": goals, "unthrottled_mean_s": u_mean, "unthrottled_migration_s": u_mig}


# ----------------------------------------------------------------------------------------------
# the report: one table per experiment

def report(res: dict, head_exclude_s: float = 0.0) -> str:
    out: list[str] = []
    runs = res["runs"]
    f5 = runs.get("fig5")
    if f5:
        rows = [["none", "-", f"{f5['base_window'][1] - f5['base_window'][0]:.0f}", ms(f5["base"]["mean_s"]),
                 ms(f5["base"]["std_s"]), ms(f5["base"].get("max_1s_s")), ms(f5["base"].get("p99_max_s"), 0),
                 f5["base"].get("queue_max", "-"), "-", fmt((f5["base"].get("cpu") or {}).get("others_cores"))]]
        for lv in f5["levels"]:
            st = lv["stats"]
            rows.append([mbs(lv["rate"], 0), mbs(lv["achieved_rate"]), f"{lv['seconds']:.0f}", ms(st["mean_s"]),
                         ms(st["std_s"]), ms(st.get("max_1s_s")), ms(st.get("p99_max_s"), 0), st.get("queue_max", "-"),
                         f"{ms(lv['first_half_s'])}/{ms(lv['second_half_s'])}", fmt(lv["cpu"]["others_cores"])])
        out.append(table(["fixed rate MB/s", "achieved", "s", "mean ms", "sd ms", "max 1s ms", "p99 max ms",
                          "queue max", "1st/2nd half ms", "others' cores"], rows,
                         f"Figure 5 view: {f5['tps'][0] if isinstance(f5['tps'], list) else f5['tps']:g} tps offered, "
                         f"latency during fixed-rate copies"))
        gaps = [ms(g["mean_s"]) for g in f5["gaps"]]
        out.append(f"latency in the {f5.get('gap', 0):g}s pauses after each level (backlog draining; ms): "
                   f"{', '.join(gaps)}")
        k = res.get("knee") or {}
        out.append(f"unloaded latency {ms(k.get('unloaded_s'))} ms; highest stable fixed rate "
                   f"{mbs(k.get('max_stable_rate'))} MB/s at {ms(k.get('knee_latency_s'))} ms; knee (latency runs away) "
                   f"at {mbs(k.get('knee_rate'))} MB/s")
        out.append("")
    curve = fixed_curve(res)
    if res.get("fig11"):
        rows = []
        for pair in res["fig11"]:
            p, f = runs.get(pair["pid"]), runs.get(pair["fixed"])
            if not p:
                continue
            pc = p["copy"]
            fc = f["copy"] if f else {}
            eq = rate_at_latency(curve, pc["mean_s"]) if pc["mean_s"] else None
            rows.append([
                ms(pair["setpoint_s"], 0), ms(pc["mean_s"]), fmt(p["ratio"]), ms(pc["std_s"]),
                mbs(p["migration"]["avg_rate"]), f"{p['migration']['snapshot_s']:.0f}", ms(p["copy_whole"]["mean_s"]),
                ms(fc.get("mean_s")), ms(fc.get("std_s")), mbs(f["migration"]["avg_rate"]) if f else "-",
                fmt(fc["mean_s"] / pc["mean_s"]) if fc.get("mean_s") and pc["mean_s"] else "-",
                fmt(fc["std_s"] / pc["std_s"]) if fc.get("std_s") and pc["std_s"] else "-",
                mbs(eq) if eq else "-", fmt(p["migration"]["avg_rate"] / eq) if eq else "-",
                fmt(p["cpu_during_copy"]["others_cores"]) + "/" + fmt(f["cpu_during_copy"]["others_cores"] if f else None),
            ])
        out.append(table(["setpoint", "PID mean", "ratio", "PID sd", "PID MB/s", "copy s", "whole-phase mean",
                          "fixed mean", "fixed sd", "fixed MB/s", "lat fixed/PID", "sd fixed/PID",
                          "fixed MB/s at PID's latency", "speed PID/fixed", "others' cores PID/fixed"], rows,
                         "Figure 11 view: PID vs a fixed throttle at the PID run's average rate (latency in ms)"))
        out.append("fixed-throttle curve used for 'at equal latency' (rate MB/s -> mean ms, monotone fit): "
                   + ", ".join(f"{x / MB:.1f}->{y * 1000:.1f}" for x, y in curve))
        out.append("")
    f13 = res.get("fig13a")
    if f13:
        rows = []
        sp = f13["setpoint_s"]
        for which in ("pid", "fixed"):
            r = runs.get(f13[which])
            an = f13.get(which + "_analysis") or {}
            if not r or not an.get("before"):
                continue
            a10 = an.get("after_10s") or {}
            rows.append([f13.get("controller", "pid") if which == "pid" else which, fmt(an.get("step_at_fraction_of_copy")), mbs(an["rate_before"]), mbs(an["rate_after"]),
                         ms(an["before"]["mean_s"]), fmt(an["before"]["mean_s"] / sp if an["before"]["mean_s"] else None),
                         ms(an["after"]["mean_s"]), fmt(an["after"]["mean_s"] / sp if an["after"]["mean_s"] else None),
                         ms(a10.get("mean_s")), fmt(a10["mean_s"] / sp if a10.get("mean_s") else None),
                         ms(an.get("peak_3s_after_s"), 0),
                         fmt(an.get("recovery_s"), 0) if an.get("recovery_s") is not None else "never",
                         fmt(an.get("first_back_s"), 0) if an.get("first_back_s") is not None else "-",
                         f"{r['migration']['snapshot_s']:.0f}", fmt(r["cpu_during_copy"]["others_cores"])])
        out.append(table(["throttle", "step at", "MB/s before", "MB/s after", "before ms", "/sp", "after ms", "/sp",
                          "after+10s ms", "/sp", "peak 3s ms", "back <=1.1 sp in s",
                          "first back s", "copy s", "others' cores"], rows,
                         f"Figure 13a view: offered load {f13.get('tps_before', 0):g} -> {f13.get('tps_after', 0):g} tps "
                         f"during the copy, setpoint {ms(sp, 0)} ms"))
        out.append(f"fixed rate = the PID's rate over the last 10 s before the step: {mbs(f13['pid_pre_step_rate'])} MB/s "
                   f"(its average since the copy started: {mbs(f13.get('pid_pre_step_avg_rate'))} MB/s)")
        out.extend(fig13a_repeats_summary(res))
        out.append("")
    th = res.get("threshold")
    if th:
        sp = th["setpoint_s"]
        rows = []
        pid_name = next((p["pid"] for p in res.get("fig11", []) if abs(p["setpoint_s"] - sp) < 1e-9), None)
        for label, name in (("PID", pid_name), ("on/off threshold", th["run"])):
            r = runs.get(name) if name else None
            if not r:
                continue
            c = r["copy"]
            rows.append([label, ms(c["mean_s"]), fmt(r["ratio"]), ms(c["std_s"]), ms(c.get("max_1s_s"), 0),
                         fmt(c.get("above_110pct_share")), mbs(r["migration"]["avg_rate"]),
                         f"{r['migration']['snapshot_s']:.0f}", fmt(r["cpu_during_copy"]["others_cores"])])
        out.append(table(["throttle", "mean ms", "/setpoint", "sd ms", "max 1s ms", "share of s >1.1 sp", "MB/s",
                          "copy s", "others' cores"], rows, f"On/off threshold vs PID at setpoint {ms(sp, 0)} ms"))
        out.append("")
    gs = res.get("gains")
    if gs:
        sp = gs["setpoint_s"]
        rows = []
        for item in gs["runs"]:
            r = runs.get(item["run"])
            if not r:
                continue
            c = r["copy"]
            rows.append([item["gains"], ms(r["pre"]["mean_s"]), ms(c["mean_s"]), fmt(r["ratio"]), ms(c["std_s"]),
                         ms(c.get("max_1s_s"), 0), fmt(c.get("above_110pct_share")), mbs(r["migration"]["avg_rate"]),
                         f"{r['migration']['snapshot_s']:.0f}", fmt(r["cpu_during_copy"]["others_cores"])])
        out.append(table(["gains kp,ki,kd", "before ms", "during ms", "/setpoint", "sd ms", "max 1s ms",
                          "share of s >1.1 sp", "MB/s", "copy s", "others' cores"], rows,
                         f"PID gains on real runs, setpoint {ms(sp, 0)} ms"))
        out.append("")
    f13b = res.get("fig13b")
    if f13b:
        sp = f13b["setpoint_s"]
        rows = []
        for which in ("pid", "fixed"):
            r = runs.get(f13b[which])
            if not r:
                continue
            c = r["copy"]
            tg = r.get("target") or {}
            rows.append([f13b.get("controller", "pid") if which == "pid" else which, ms(r["pre"]["mean_s"]),
                         ms(c["mean_s"]), fmt(r["ratio"]), ms(c["std_s"]),
                         ms(c.get("max_1s_s"), 0), mbs(r["migration"]["avg_rate"]), f"{r['migration']['snapshot_s']:.0f}",
                         ms((tg.get("pre") or {}).get("mean_s")), ms((tg.get("copy") or {}).get("mean_s")),
                         f"{tg['target_binds_steps']}/{tg['steps']}" if tg else "-",
                         fmt(r["cpu_during_copy"]["others_cores"])])
        out.append(table(["throttle", "before ms", "during ms", "/setpoint", "sd ms", "max 1s ms", "MB/s", "copy s",
                          "target before ms", "target during ms", "target bound (steps)", "others' cores"], rows,
                         f"Figure 13b view: five tenants, one migrating, latency over all five, setpoint {ms(sp, 0)} ms"))
        out.append("")
    out.append(report_compare(res))
    if head_exclude_s > 0:
        out.append(report_compare(res, head_exclude_s))
    return "\n".join(out)
def report_compare(res: dict, head_exclude_s: float = 0.0) -> str:
    """The comparison's two tables (markdown): figures per (setpoint, controller), and the goals."""
    cmp_ = res.get("compare")
    if not cmp_:
        return ""
    sm = summarise(res, head_exclude_s)
    lines = ["", "## Controllers compared (issue 14): medians over repeats, [min-max]"
             + (f"; latency without the copy's first {head_exclude_s:g} s" if head_exclude_s > 0 else ""), ""]
    orc = cmp_.get("oracle", {})
    lines.append("oracle fixed rates (Figure 5 sweep): "
                 + ", ".join(f"{k}: {'-' if v is None else f'{v / MB:g} MB/s'}" for k, v in orc.items()))
    lines.append(f"unthrottled copy: mean latency {ms(sm['unthrottled_mean_s'], 0)} ms, "
                 f"migration {fmt(sm['unthrottled_migration_s'], 1)} s")
    lines.append("")
    lines.append("| setpoint | controller | n | mean / sp | spread (sd of 1 s means) ms | copy rate MB/s | copy s | "
                 "time to 90 % s | (progress line's) | migration s | others' CPU |")
    lines.append("|---|---|---:|---|---|---|---:|---|---:|---:|---:|")
    order = [key(s) for s in cmp_.get("binding_s", [])] + ([key(cmp_["nonbinding"])] if cmp_.get("nonbinding") else [])
    for sp_key in order + ["-"]:
        for kind in KINDS:
            s = sm["cells"].get((sp_key, kind))
            if not s:
                continue
            rr, sr, ra, rp = s.get("ratio_range"), s["sd_s_range"], s["rate_range"], s["ramp_s_range"]
            lines.append(
                f"| {sp_key} | {LABELS[kind]} | {s['n']} | "
                + (f"{fmt(s['ratio'])} [{fmt(rr[0])}-{fmt(rr[1])}]" if rr else f"({ms(s['mean_s'], 0)} ms)")
                + f" | {ms(s['sd_s'], 0)} [{ms(sr[0], 0)}-{ms(sr[1], 0)}] | {fmt((s['rate'] or 0) / MB, 1)} "
                f"[{fmt((ra[0] or 0) / MB, 1)}-{fmt((ra[1] or 0) / MB, 1)}] | {fmt(s['copy_s'], 0)} | "
                f"{fmt(s['ramp_s'], 0)} [{fmt(rp[0], 0)}-{fmt(rp[1], 0)}] | {fmt(s['ramp_progress_s'], 0)} | "
                f"{fmt(s['migration_s'], 1)} | "
                f"{fmt(s['others_cores'])} |")
    lines.append("")
    lines.append("| setpoint | controller | unthrottled / sp | mean within ±10 % | spread / oracle's (≤ 1.5) | "
                 "speed / oracle's (≥ 0.9) | migration / unthrottled (≤ 1.15) | 90 % in ≤ 10 s |")
    lines.append("|---|---|---:|---|---:|---:|---:|---|")
    for g in sm["goals"]:
        lines.append(f"| {g['setpoint']} | {LABELS[g['kind']]} | {fmt(g['binds'])} | "
                     f"{'-' if 'mean_within_10pct' not in g else ('yes' if g['mean_within_10pct'] else 'no')} | "
                     f"{fmt(g.get('spread_vs_oracle'))} | {fmt(g.get('speed_vs_oracle'))} | "
                     f"{fmt(g.get('migration_vs_unthrottled'))} | {'yes' if g['ramp_ok'] else 'no'} |")
    return "\n".join(lines)


