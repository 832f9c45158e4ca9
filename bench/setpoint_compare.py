"""bench/setpoint --only compare: every controller side by side, per setpoint, repeated (issue 14).

The experiment runner lives in bench/setpoint (Bench.compare); this module holds
what is specific to the comparison: choosing the oracle fixed rate from the
Figure 5 sweep, the per-run figures, the goals, the table and the plot.

Definitions (issue 14, "Must show"):
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
import statistics
from pathlib import Path

MB = 1e6
KINDS = ("slack", "pid", "threshold", "oracle", "unthrottled")
LABELS = {"slack": "slack (default)", "pid": "velocity PID", "threshold": "on/off threshold",
          "oracle": "fixed at oracle", "unthrottled": "unthrottled"}
COLOURS = {"slack": "#2ca02c", "pid": "#1f77b4", "threshold": "#ff7f0e", "oracle": "#d62728",
           "unthrottled": "#7f7f7f"}


def oracle_rates(fig5: dict, setpoints: list[float]) -> dict[str, float | None]:
    """For each setpoint: the highest fixed-rate level of the sweep whose mean latency met it."""
    out: dict[str, float | None] = {}
    for sp in setpoints:
        ok = [lv["rate"] for lv in fig5["levels"]
              if lv["stats"].get("mean_s") is not None and lv["stats"]["mean_s"] <= sp]
        out[key(sp)] = max(ok) if ok else None
    return out


def key(sp: float) -> str:
    return f"{sp * 1000:g}ms"


def ramp_s(migration: dict, tail_exclude_s: float) -> float | None:
    """Seconds from the copy's start until the measured throughput first reaches 90 % of its final rate."""
    t0, t1 = migration["snapshot_start"], migration["snapshot_end"] - tail_exclude_s
    from datetime import datetime

    series = migration.get("series")
    if series is None and migration.get("series_path") and Path(migration["series_path"]).exists():
        series = [json.loads(x) for x in Path(migration["series_path"]).read_text().splitlines() if x.strip()]
    pts = []
    for s in series or []:
        if s.get("phase") != "snapshot" or s.get("throughput_bytes_per_s") is None:
            continue
        t = datetime.fromisoformat(s["ts"].replace("Z", "+00:00")).timestamp()
        if t0 <= t <= t1:
            pts.append((t - t0, s["throughput_bytes_per_s"]))
    if len(pts) < 3:
        return None
    span = pts[-1][0]
    tail = [v for t, v in pts if t >= span * 2 / 3] or [pts[-1][1]]
    final = statistics.fmean(tail)
    return next((t for t, v in pts if v >= 0.9 * final), None)


def run_figures(run: dict, tail_exclude_s: float) -> dict:
    m = run["migration"]
    return {"mean_s": run["copy"].get("mean_s"), "sd_s": run["copy"].get("std_s"),
            "rate": m["avg_rate"], "copy_s": m["snapshot_s"], "migration_s": m.get("duration_s"),
            "ramp_s": ramp_s(m, tail_exclude_s), "result": m["result"],
            "others_cores": (run.get("cpu_during_copy") or {}).get("others_cores")}


def _med(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def _rng(values: list) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    return (min(v), max(v)) if v else (None, None)


def summarise(res: dict) -> dict:
    """Medians and ranges per (setpoint, controller) over the repeats, and the goals they meet."""
    cmp_ = res.get("compare") or {}
    tail = res.get("config", {}).get("tail_exclude", 2.0)
    cells: dict[tuple[str, str], list[dict]] = {}
    for item in cmp_.get("runs", []):
        run = res["runs"].get(item["name"])
        if not run:
            continue
        f = run_figures(run, tail)
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
        for name in ("mean_s", "sd_s", "rate", "copy_s", "migration_s", "ramp_s", "others_cores"):
            s[name] = _med([f[name] for f in fs])
            s[name + "_range"] = _rng([f[name] for f in fs])
        if sp:
            s["ratio"] = s["mean_s"] / sp if s["mean_s"] is not None else None
            s["ratio_range"] = tuple(None if x is None else x / sp for x in s["mean_s_range"])
        out[(sp_key, kind)] = s
    goals = []
    for sp_key in cmp_.get("binding", []):
        orc = out.get((sp_key, "oracle"))
        for kind in ("slack", "pid", "threshold"):
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
    for kind in ("slack", "pid"):
        s = out.get((key(nb), kind)) if nb else None
        if s:
            goals.append({"setpoint": key(nb), "kind": kind, "binds": (u_mean / nb if u_mean else None),
                          "migration_vs_unthrottled": (s["migration_s"] / u_mig) if u_mig and s["migration_s"] else None,
                          "ramp_ok": s["ramp_s"] is not None and s["ramp_s"] <= 10})
    return {"cells": out, "goals": goals, "unthrottled_mean_s": u_mean, "unthrottled_migration_s": u_mig}


def _ms(v, nd=0):
    return "-" if v is None else f"{v * 1000:.{nd}f}"


def _x(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


def report(res: dict) -> str:
    cmp_ = res.get("compare")
    if not cmp_:
        return ""
    sm = summarise(res)
    lines = ["", "## Controllers compared (issue 14): medians over repeats, [min-max]", ""]
    orc = cmp_.get("oracle", {})
    lines.append("oracle fixed rates (Figure 5 sweep): "
                 + ", ".join(f"{k}: {'-' if v is None else f'{v / MB:g} MB/s'}" for k, v in orc.items()))
    lines.append(f"unthrottled copy: mean latency {_ms(sm['unthrottled_mean_s'])} ms, "
                 f"migration {_x(sm['unthrottled_migration_s'], 1)} s")
    lines.append("")
    lines.append("| setpoint | controller | n | mean / sp | spread (sd of 1 s means) ms | copy rate MB/s | copy s | "
                 "time to 90 % s | migration s | others' CPU |")
    lines.append("|---|---|---:|---|---|---|---:|---|---:|---:|")
    order = [key(s) for s in cmp_.get("binding_s", [])] + ([key(cmp_["nonbinding"])] if cmp_.get("nonbinding") else [])
    for sp_key in order + ["-"]:
        for kind in KINDS:
            s = sm["cells"].get((sp_key, kind))
            if not s:
                continue
            rr, sr, ra, rp = s.get("ratio_range"), s["sd_s_range"], s["rate_range"], s["ramp_s_range"]
            lines.append(
                f"| {sp_key} | {LABELS[kind]} | {s['n']} | "
                + (f"{_x(s['ratio'])} [{_x(rr[0])}-{_x(rr[1])}]" if rr else f"({_ms(s['mean_s'])} ms)")
                + f" | {_ms(s['sd_s'])} [{_ms(sr[0])}-{_ms(sr[1])}] | {_x((s['rate'] or 0) / MB, 1)} "
                f"[{_x((ra[0] or 0) / MB, 1)}-{_x((ra[1] or 0) / MB, 1)}] | {_x(s['copy_s'], 0)} | "
                f"{_x(s['ramp_s'], 0)} [{_x(rp[0], 0)}-{_x(rp[1], 0)}] | {_x(s['migration_s'], 1)} | "
                f"{_x(s['others_cores'])} |")
    lines.append("")
    lines.append("| setpoint | controller | unthrottled / sp | mean within ±10 % | spread / oracle's (≤ 1.5) | "
                 "speed / oracle's (≥ 0.9) | migration / unthrottled (≤ 1.15) | 90 % in ≤ 10 s |")
    lines.append("|---|---|---:|---|---:|---:|---:|---|")
    for g in sm["goals"]:
        lines.append(f"| {g['setpoint']} | {LABELS[g['kind']]} | {_x(g['binds'])} | "
                     f"{'-' if 'mean_within_10pct' not in g else ('yes' if g['mean_within_10pct'] else 'no')} | "
                     f"{_x(g.get('spread_vs_oracle'))} | {_x(g.get('speed_vs_oracle'))} | "
                     f"{_x(g.get('migration_vs_unthrottled'))} | {'yes' if g['ramp_ok'] else 'no'} |")
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    """Per setpoint: mean/sp and copy rate of every run (dots) and the medians (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cmp_ = res["compare"]
    sps = [key(s) for s in cmp_.get("binding_s", [])] + ([key(cmp_["nonbinding"])] if cmp_.get("nonbinding") else [])
    tail = res.get("config", {}).get("tail_exclude", 2.0)
    fig, axes = plt.subplots(3, len(sps), figsize=(4.2 * len(sps), 8.5), squeeze=False)
    for col, sp_key in enumerate(sps):
        sp = float(sp_key[:-2]) / 1000
        kinds = [k for k in KINDS if any(i["kind"] == k and (i["setpoint_s"] and key(i["setpoint_s"]) == sp_key
                                                             or k == "unthrottled") for i in cmp_["runs"])]
        for row, (what, label) in enumerate((("ratio", "mean latency / setpoint"), ("sd", "spread (sd of 1 s means) / sp"),
                                             ("rate", "copy rate (MB/s)"))):
            ax = axes[row][col]
            for x, kind in enumerate(kinds):
                vals = []
                for i in cmp_["runs"]:
                    if i["kind"] != kind or (kind != "unthrottled" and key(i["setpoint_s"]) != sp_key):
                        continue
                    run = res["runs"].get(i["name"])
                    if not run:
                        continue
                    f = run_figures(run, tail)
                    v = {"ratio": (f["mean_s"] or 0) / sp, "sd": (f["sd_s"] or 0) / sp, "rate": f["rate"] / MB}[what]
                    vals.append(v)
                if not vals:
                    continue
                ax.bar(x, statistics.median(vals), color=COLOURS[kind], alpha=0.45)
                ax.plot([x] * len(vals), vals, "o", color=COLOURS[kind], ms=4)
            ax.set_xticks(range(len(kinds)))
            ax.set_xticklabels([LABELS[k].replace(" ", "\n", 1) for k in kinds], fontsize=7)
            if what == "ratio":
                ax.axhline(1.0, color="#444444", ls="--", lw=1)
                ax.axhspan(0.9, 1.1, color="#dddddd", alpha=0.6, lw=0)
                ax.set_yscale("log")
                ax.set_title(f"setpoint {sp_key}", fontsize=10)
            ax.set_ylabel(label, fontsize=8)
            ax.grid(True, alpha=0.3, axis="y")
    fig.suptitle("Controllers side by side (bars: median over repeats, dots: runs)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dump(res: dict, path: Path) -> None:
    sm = summarise(res)
    path.write_text(json.dumps({"cells": {f"{k[0]}|{k[1]}": v for k, v in sm["cells"].items()},
                                "goals": sm["goals"]}, indent=1, default=str))
