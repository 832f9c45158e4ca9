"""bench/setpoint's plots (matplotlib, Agg): drawn from results.json and the series files a run wrote."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from . import log
from .analysis import (COLOURS, KINDS, LABELS, MB, aggregate, harness_records, key, migration_series, run_figures,
                       smooth, ts_of)

def _fig(w: float = 9, h: float = 6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _plain(*axes) -> None:
    """Log axes with plain numbers (10, 20, 50) instead of 2x10^1."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    for ax in axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                f = ScalarFormatter()
                f.set_scientific(False)
                axis.set_major_formatter(f)
                axis.set_minor_formatter(NullFormatter())


def plot_fig5(res: dict, path: Path) -> None:
    f5 = res["runs"]["fig5"]
    recs = harness_records(f5["harness_path"])
    t_ref = f5["base_window"][0]
    secs = aggregate(recs, t_ref - 5, max(lv["window"][1] for lv in f5["levels"]) + 5) if f5["levels"] else []
    fig = _fig(10, 6.5)
    ax1, ax2 = fig.subplots(2, 1, height_ratios=[3, 2])
    xs = [s["end"] - t_ref for s in secs]
    ys = [s["mean"] * 1000 if s["mean"] else math.nan for s in secs]
    ax1.plot(xs, smooth([y for y in ys], 3), color="#1f77b4", lw=1.1, label="latency, 3 s avg")
    for lv in f5["levels"]:
        w0, w1 = lv["window"][0] - t_ref, lv["window"][1] - t_ref
        ax1.axvspan(w0, w1, color="#f3d9c7", lw=0, zorder=0)
        ax1.text((w0 + w1) / 2, 0.97, f"{lv['rate'] / MB:g}", transform=ax1.get_xaxis_transform(), ha="center",
                 va="top", fontsize=8)
    ax1.set_yscale("log")
    ax1.set_ylabel("txn latency (ms, log)")
    ax1.set_xlabel("seconds (shaded: fixed-rate copy, MB/s on top)")
    ax1.grid(True, alpha=0.3)
    ax1.legend(loc="upper left", fontsize=8)
    lv = [x for x in f5["levels"] if x["stats"]["mean_s"]]
    ax2.errorbar([0] + [x["achieved_rate"] / MB for x in lv],
                 [f5["base"]["mean_s"] * 1000] + [x["stats"]["mean_s"] * 1000 for x in lv],
                 yerr=[f5["base"]["std_s"] * 1000] + [x["stats"]["std_s"] * 1000 for x in lv],
                 marker="o", color="#d62728", capsize=3, lw=1.2)
    ax2.set_yscale("log")
    ax2.set_xlabel("copy rate (MB/s)")
    ax2.set_ylabel("mean latency ± sd (ms)")
    ax2.grid(True, alpha=0.3)
    fig.suptitle(f"Fixed-rate copies at {f5['tps']:g} tps offered (Figures 5 and 7 view)", fontsize=11)
    _plain(ax1, ax2)
    fig.savefig(path)


def plot_fig11(res: dict, path: Path) -> None:
    runs = res["runs"]
    fig = _fig(11, 4.8)
    ax1, ax2 = fig.subplots(1, 2)
    curve_pts = []
    f5 = runs.get("fig5")
    if f5:
        curve_pts += [(lv["achieved_rate"], lv["stats"]["mean_s"], lv["stats"]["std_s"]) for lv in f5["levels"]
                      if lv["stats"]["mean_s"]]
    fixed_pts, pid_pts = [], []
    for pair in res.get("fig11", []):
        p, f = runs.get(pair["pid"]), runs.get(pair["fixed"])
        if p and p["copy"]["mean_s"]:
            pid_pts.append((p["migration"]["avg_rate"], p["copy"]["mean_s"], p["copy"]["std_s"], pair["setpoint_s"]))
        if f and f["copy"]["mean_s"]:
            fixed_pts.append((f["migration"]["avg_rate"], f["copy"]["mean_s"], f["copy"]["std_s"], pair["setpoint_s"]))
    if curve_pts:
        c = sorted(curve_pts)
        ax1.plot([x / MB for x, _, _ in c], [y * 1000 for _, y, _ in c], "s--", color="#d62728", alpha=0.6,
                 label="fixed rate (fig5 levels)")
    if fixed_pts:
        ax1.errorbar([x / MB for x, *_ in fixed_pts], [y * 1000 for _, y, *_ in fixed_pts],
                     yerr=[s * 1000 for _, _, s, _ in fixed_pts], fmt="s", color="#d62728", capsize=3,
                     label="fixed at PID's average rate")
    if pid_pts:
        ax1.errorbar([x / MB for x, *_ in pid_pts], [y * 1000 for _, y, *_ in pid_pts],
                     yerr=[s * 1000 for _, _, s, _ in pid_pts], fmt="o", color="#1f77b4", capsize=3, label="PID")
        for x, y, _, sp in pid_pts:
            ax1.annotate(f"{sp * 1000:g}", (x / MB, y * 1000), textcoords="offset points", xytext=(5, 5), fontsize=7,
                         color="#1f77b4")
    ax1.set_yscale("log")
    ax1.set_xlabel("average copy rate (MB/s)")
    ax1.set_ylabel("mean latency during copy ± sd (ms)")
    ax1.set_title("(a) fixed throttle vs PID (labels: setpoint ms)", fontsize=9)
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=7)
    if pid_pts:
        sps = [sp * 1000 for *_, sp in pid_pts]
        lo, hi = min(sps) * 0.8, max(sps) * 1.2
        ax2.plot([lo, hi], [lo, hi], color="#888888", lw=1, label="setpoint")
        ax2.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="#cccccc", alpha=0.4,
                         label="±10%")
        ax2.errorbar(sps, [y * 1000 for _, y, *_ in pid_pts], yerr=[s * 1000 for _, _, s, _ in pid_pts], fmt="o",
                     color="#1f77b4", capsize=3, label="PID achieved")
        if fixed_pts:
            ax2.errorbar([sp * 1000 * 1.02 for *_, sp in fixed_pts], [y * 1000 for _, y, *_ in fixed_pts],
                         yerr=[s * 1000 for _, _, s, _ in fixed_pts], fmt="s", color="#d62728", capsize=3,
                         alpha=0.7, label="fixed, same avg rate")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
    ax2.set_xlabel("setpoint (ms)")
    ax2.set_ylabel("mean latency during copy ± sd (ms)")
    ax2.set_title("(b) setpoint vs achieved latency", fontsize=9)
    ax2.grid(True, alpha=0.3, which="both")
    ax2.legend(fontsize=7)
    _plain(ax1, ax2)
    fig.savefig(path)


def plot_compare(res: dict, items: list[tuple[str, str, str]], sp: float, path: Path, title: str,
                 mark_step: bool = False) -> None:
    """Latency (3 s avg, client side) and copy rate over time since the copy started, several runs overlaid."""
    runs = res["runs"]
    fig = _fig(10, 7.5)
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True, height_ratios=[3, 2, 1.3])
    for label, name, colour in items:
        r = runs.get(name)
        if not r:
            continue
        m = r["migration"]
        t0 = m["snapshot_start"]
        recs = harness_records(r["harness_path"])
        secs = [s for s in aggregate(recs, t0 - 15, m["snapshot_end"] + 3) if s["mean"] is not None]
        ax1.plot([s["end"] - t0 for s in secs], [v * 1000 for v in smooth([s["mean"] for s in secs], 3)],
                 color=colour, lw=1.2, label=f"{label}: {r['migration']['avg_rate'] / MB:.1f} MB/s avg, "
                                             f"copy {m['snapshot_s']:.0f}s")
        ax1.axvline(m["snapshot_s"], color=colour, ls=":", lw=1)
        series = migration_series(m)
        snap = [s for s in series if s.get("phase") == "snapshot"]
        if snap:
            ax2.step([ts_of(s["ts"]) - t0 for s in snap], [(s["rate_bytes_per_s"] or 0) / MB for s in snap],
                     where="post", color=colour, lw=1.2, label=f"{label}: rate limit")
            ax2.plot([ts_of(s["ts"]) - t0 for s in snap], [s["throughput_bytes_per_s"] / MB for s in snap],
                     color=colour, lw=0.8, alpha=0.45)
        ms_ = r.get("machine_series") or {}
        dk = ms_.get("disk") or []
        dk = [d for d in dk if t0 - 15 <= d[0] <= m["snapshot_end"] + 3]
        if dk:
            ax3.plot([d[0] - t0 for d in dk], [d[2] for d in dk], color=colour, lw=0.9)
        cpu = [c for c in (ms_.get("cpu") or []) if t0 - 15 <= c[0] <= m["snapshot_end"] + 3]
        if cpu:
            ax3b = getattr(ax3, "_twin", None) or ax3.twinx()
            ax3._twin = ax3b
            ax3b.plot([c[0] - t0 for c in cpu], [max(0.0, c[1] - min(c[1], c[2])) for c in cpu], color=colour, lw=0.8,
                      ls=":")
            ax3b.set_ylabel("others' CPU\n(cores, dotted)", fontsize=7)
            ax3b.set_ylim(0, 2)
        if mark_step:
            an = (res.get("fig13a") or {}).get(("fixed" if "-fixed-" in name else "pid") + "_analysis") or {}
            if an.get("step_wall"):
                for ax in (ax1, ax2):
                    ax.axvline(an["step_wall"] - t0, color=colour, ls="--", lw=1, alpha=0.7)
    ax1.axhline(sp * 1000, color="#444444", ls="--", lw=1, label=f"setpoint {sp * 1000:g} ms")
    ax1.axhspan(sp * 900, sp * 1100, color="#dddddd", alpha=0.5, lw=0)
    ax1.set_yscale("log")
    ax1.set_ylabel("txn latency, 3 s avg (ms, log)")
    ax1.grid(True, alpha=0.3, which="both")
    ax1.legend(fontsize=7, loc="upper left")
    ax2.set_ylabel("copy rate (MB/s)\n(step: limit, faint: measured)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=7, loc="upper right")
    ax3.set_ylabel("disk writes\n(MB/s, solid)", fontsize=7)
    ax3.grid(True, alpha=0.3)
    ax3.set_xlabel("seconds since the copy started" + (" (dashed: +40% load step; dotted: copy end)" if mark_step
                                                        else " (dotted: copy end)"))
    fig.suptitle(title, fontsize=11)
    _plain(ax1)
    fig.savefig(path)




def plot_compare_summary(res: dict, path: Path) -> None:
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



def plot_stable(res: dict, path: Path) -> None:
    """Left: latency (multiple of the load's own) against copy rate: calibration, each block's fixed
    rates (its monotone curve), the controllers; the setpoints as lines. Right: the calibration repeats."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .protocol import isotonic
    st, runs = res["stable"], res["runs"]
    cal, mult = st["calibration"], st["calibration"]["multiples"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1]})
    cal_runs = [runs[n] for n in cal.get("sweep", []) + [cal.get("unthrottled")] if n in runs]
    ax.scatter([r["rate"] / MB for r in cal_runs], [r["ratio"] for r in cal_runs], marker="x", color="grey",
               label="calibration (fixed, unthrottled)")
    colours = {"model": "tab:blue", "pid": "tab:red", "unthrottled": "black"}
    labelled: set = set()
    for b in st["blocks"]:
        fixed = sorted((runs[n]["rate"] / MB, runs[n]["ratio"]) for m, n in b["runs"].items()
                       if m.startswith("fixed") and runs[n].get("ratio"))
        if fixed:
            curve = isotonic(fixed)
            ax.plot([x for x, _ in curve], [y for _, y in curve], color="tab:green", alpha=0.4,
                    label="fixed rates, a block's monotone curve" if b["block"] == 1 else None)
            ax.scatter([x for x, _ in fixed], [y for _, y in fixed], color="tab:green", s=12)
        for m, n in b["runs"].items():
            kind, _, arg = m.partition(":")
            r = runs[n]
            if kind in colours and r.get("rate") and r.get("ratio"):
                label = f"{kind}" + (" (not binding)" if arg == "nb" else "")
                ax.scatter([r["rate"] / MB], [r["ratio"]], color=colours[kind], marker="o" if arg != "nb" else "s",
                           facecolors="none" if arg == "nb" else colours[kind],
                           label=None if label in labelled else label)
                labelled.add(label)
    if mult.get("binds"):
        ax.axhline(mult["binding"], color="tab:blue", ls="--", lw=1, label=f"binding setpoint {mult['binding']:g}x")
        ax.axhspan(0.9 * mult["binding"], 1.1 * mult["binding"], color="tab:blue", alpha=0.08)
    ax.axhline(mult["nonbinding"], color="grey", ls=":", lw=1, label=f"non-binding setpoint {mult['nonbinding']:g}x")
    ax.set_xlabel("copy rate (MB/s, achieved mean)")
    ax.set_yscale("log")
    ax.set_ylabel(f"latency during the copy ({cal.get('stat') or res['config'].get('latency_stat', 'mean')} of the seconds) / the load's own (log)")
    done = sum(1 for b in st['blocks'] if b.get('figures'))
    ax.set_title(f"{res['config'].get('load')}: {done} complete blocks, {len(st['rejected'])} runs rejected by the gate")
    ax.legend(fontsize=7)
    reps = [runs[n] for n in cal.get("repeats", []) if n in runs]
    if reps:
        ax2.bar(range(1, len(reps) + 1), [(r.get("latency_s") or r["copy"]["mean_s"]) * 1000 for r in reps], color="tab:grey")
        m = sum(r.get("latency_s") or r["copy"]["mean_s"] for r in reps) / len(reps) * 1000
        ax2.axhspan(0.95 * m, 1.05 * m, color="tab:green", alpha=0.15, label="mean +-5 %")
        ax2.set_title(f"calibration: {len(reps)} x {cal['repeat_rate'] / MB:.1f} MB/s, spread "
                      f"{cal['spread']['spread']:.1%}", fontsize=9)
        ax2.set_ylabel(f"latency during the copy, {cal.get('stat') or res['config'].get('latency_stat', 'mean')} of the seconds (ms)")
        ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_plots(res: dict, out_dir: Path) -> list[Path]:
    made = []
    runs = res["runs"]

    def attempt(fn, *a):
        try:
            fn(*a)
            made.append(next(x for x in a if isinstance(x, Path)))
        except Exception as exc:  # noqa: BLE001 - a plot must not hide the results
            log(f"plot failed: {exc}")

    if res.get("stable") and res["stable"]["calibration"].get("multiples"):
        attempt(plot_stable, res, out_dir / f"setpoint-stable-{res['config'].get('load', 'ycsb')}.png")
    if runs.get("fig5") and runs["fig5"]["levels"]:
        attempt(plot_fig5, res, out_dir / "setpoint-fig5.png")
    if res.get("fig11"):
        attempt(plot_fig11, res, out_dir / "setpoint-fig11.png")
        pairs = res["fig11"]
        mid = pairs[len(pairs) // 2]
        if mid["pid"] in runs:
            try:
                from slacker.plot import plot_file
                plot_file(runs[mid["pid"]]["migration"]["series_path"], out_dir / "setpoint-fig12.png",
                          title=f"PID migration, setpoint {mid['setpoint_s'] * 1000:g} ms (controller's view)")
                made.append(out_dir / "setpoint-fig12.png")
            except Exception as exc:  # noqa: BLE001
                log(f"plot failed: {exc}")
        attempt(plot_compare, res, [("PID", mid["pid"], "#1f77b4"), ("fixed", mid["fixed"], "#d62728")],
                mid["setpoint_s"], out_dir / "setpoint-fig11-series.png",
                f"PID vs fixed at the same average rate, setpoint {mid['setpoint_s'] * 1000:g} ms")
    if res.get("fig13a"):
        f = res["fig13a"]
        attempt(plot_compare, res, [(f.get("controller", "PID"), f["pid"], "#1f77b4"), ("fixed", f["fixed"], "#d62728")],
                f["setpoint_s"], out_dir / "setpoint-fig13a.png", "+40% offered load one third into the copy (Figure 13a view)", True)
    if res.get("gains"):
        gs = res["gains"]
        colours = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
        attempt(plot_compare, res, [(f"gains {it['gains']}", it["run"], colours[i % len(colours)])
                                    for i, it in enumerate(gs["runs"])],
                gs["setpoint_s"], out_dir / "setpoint-gains.png", "PID gains on real runs")
    if res.get("threshold"):
        th = res["threshold"]
        pid_name = next((p["pid"] for p in res.get("fig11", []) if abs(p["setpoint_s"] - th["setpoint_s"]) < 1e-9), None)
        items = ([("PID", pid_name, "#1f77b4")] if pid_name else []) + [("on/off threshold", th["run"], "#ff7f0e")]
        attempt(plot_compare, res, items, th["setpoint_s"], out_dir / "setpoint-threshold.png",
                "On/off threshold throttle vs PID at the same setpoint")
    if res.get("compare") and res["compare"].get("runs"):
        c = res["compare"]
        attempt(plot_compare_summary, res, out_dir / "setpoint-compare.png")
        for sp in c.get("binding_s", [])[:1] + ([c["nonbinding"]] if c.get("nonbinding") else []):
            items = [(LABELS[i["kind"]], i["name"], COLOURS[i["kind"]])
                     for i in c["runs"] if i["rep"] == 1 and (i["setpoint_s"] == sp or i["kind"] == "unthrottled")]
            attempt(plot_compare, res, items, sp, out_dir / f"setpoint-compare-{key(sp)}.png",
                    f"Controllers side by side, setpoint {key(sp)} (repeat 1)")
    if res.get("fig13b"):
        f = res["fig13b"]
        attempt(plot_compare, res, [(f.get("controller", "PID"), f["pid"], "#1f77b4"), ("fixed", f["fixed"], "#d62728")],
                f["setpoint_s"], out_dir / "setpoint-fig13b.png", "Five tenants on the source, one migrating: latency over all five "
                                                 "(Figure 13b view)")
    return made

