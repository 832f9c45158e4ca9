"""Plots for docs/results.md from bench/run delta's JSON files.

    bench/run delta_plot --drain standard.json --mpl mpl.json --live live.json --out docs/img
writes delta-fig6.png (Madeus Fig. 6 view: apply rate per configuration and load)
and delta-fig3.png (Middle-R Fig. 3 view: drain rate vs MPL, the adaptive choice marked).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from benchkit import REPO


def medians(results, key, group=("config",)):
    out: dict = {}
    for r in results:
        out.setdefault(tuple(r[g] for g in group), []).append(r[key])
    return {k: statistics.median(v) for k, v in out.items()}


def fig6(drain: dict | None, live: dict | None, out: Path) -> Path:
    panels = (1 if drain else 0) + (1 if live else 0)
    fig = Figure(figsize=(6.5 * panels, 4.2))
    FigureCanvasAgg(fig)
    i = 1
    if drain:
        ax = fig.add_subplot(1, panels, i)
        i += 1
        names = [s["config"] for s in drain["summary"]]
        vals = [s["median_tps"] for s in drain["summary"]]
        ax.barh(names[::-1], vals[::-1], color=["#888" if "durable" in n else "#3a7" for n in names[::-1]])
        for y, v in enumerate(vals[::-1]):
            ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
        ax.set_xlabel("drain rate of a fixed backlog (txn/s, median)")
        ax.set_title(f"Drain rate, backlog {drain['args']['backlog']:,} txns")
    if live:
        ax = fig.add_subplot(1, panels, i)
        res = live["results"]
        for r in res:
            r["kept"] = r["apply_tps"] / r["source_tps"] if r["source_tps"] else 1.0
        m = medians(res, "kept", ("offered", "config"))
        src = medians(res, "source_tps", ("offered",))
        loads = list(dict.fromkeys(r["offered"] for r in res))
        configs = list(dict.fromkeys(r["config"] for r in res))
        w = 0.8 / len(configs)
        for j, c in enumerate(configs):
            xs = [k + j * w for k in range(len(loads))]
            ax.bar(xs, [m.get((ld, c), 0) for ld in loads], width=w, label=c)
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
        ax.set_xticks([k + 0.4 - w / 2 for k in range(len(loads))],
                      [("closed loop" if ld == "closed" else f"offered {ld:.0f}/s") + f"\n(source {src[(ld,)]:.0f}/s)"
                       for ld in loads])
        ax.set_ylabel("apply rate / source commit rate during the load")
        ax.set_ylim(0, 1.15)
        ax.set_title("Keeping up under load (1.0 = applies all it gets)")
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = out / "delta-fig6.png"
    fig.savefig(path, dpi=110)
    return path


def fig3(mpl: dict, live: dict | None, out: Path) -> Path:
    fig = Figure(figsize=(6.5, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    pts = []
    for s in mpl["summary"]:
        mt = re.match(r"optimistic-(\d+)(-catchup)?$", s["config"])
        if mt:
            pts.append((int(mt.group(1)), s["median_tps"], min(s["rates"]), max(s["rates"])))
    pts.sort()
    xs = [p[0] for p in pts]
    ax.plot(xs, [p[1] for p in pts], "o-", label="optimistic parallel, fixed MPL (median)")
    ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], alpha=0.2, label="min..max of repetitions")
    serial = next((s for s in mpl["summary"] if s["config"] == "serial-catchup"), None)
    if serial:
        ax.axhline(serial["median_tps"], color="#888", linestyle=":", label="serial, catch-up mode")
    # The adaptive loop draining the same backlog: its median drain rate, at the MPL it settled on.
    adaptive = [r for r in mpl["results"] if r["config"].startswith("adaptive") and "mpl_end" in r]
    if adaptive:
        c = int(statistics.median(r["mpl_end"] for r in adaptive))
        y = statistics.median(r["drain_tps"] for r in adaptive)
        best = max(p[1] for p in pts)
        ax.plot([c], [y], "r*", markersize=15,
                label=f"adaptive: {y:,.0f}/s = {y / best:.2f} x best fixed, settled at MPL {c} (median of {len(adaptive)})")
    elif live:
        chosen = [r["mpl_end"] for r in live["results"] if r["config"].startswith("adaptive")
                  and r["offered"] == "closed"]
        if chosen:
            c = int(statistics.median(chosen))
            y = dict((p[0], p[1]) for p in pts).get(c)
            ax.axvline(c, color="r", linestyle="--", label=f"adaptive loop settled at MPL {c} (median of {len(chosen)})")
            if y:
                ax.plot([c], [y], "r*", markersize=14)
    ax.set_xlabel("MPL (slave_parallel_threads)")
    ax.set_ylabel("drain rate (txn/s)")
    ax.set_title(f"Drain rate vs MPL, backlog {mpl['args']['backlog']:,} txns, heavy write load")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out / "delta-fig3.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drain", help="bench/run delta --json of drains: the left panel of delta-fig6.png")
    ap.add_argument("--mpl", help="bench/run delta --configs mpl (or mpl3) --json: delta-fig3.png")
    ap.add_argument("--live", help="bench/run delta --live --json: the right panel of delta-fig6.png")
    ap.add_argument("--out", default=str(REPO / "docs" / "img"), help="directory for the PNGs (default docs/img)")
    a = ap.parse_args()
    out = Path(a.out)
    load = lambda p: json.loads(Path(p).read_text()) if p else None  # noqa: E731
    drain, mpl, live = load(a.drain), load(a.mpl), load(a.live)
    if drain or live:
        print(fig6(drain, live, out))
    if mpl:
        print(fig3(mpl, live, out))


if __name__ == "__main__":
    main()
