"""The throttle controllers side by side on a family of simulated plants (bench/benchkit/plant.py).

Each plant is a seeded Scenario (knee position and sharpness, CPU- or disk-bound shape, lag 1-4 s,
per-second noise 5-40 %, stalls, the backup's read-in and start, drift of the load's own latency,
a +40 % load step for the "loadstep" class). For each plant: the unthrottled copy classifies it
(binding: its mean >= 1.3x the setpoint; not binding: <= 0.8x), the oracle is the best fixed rate
whose copy meets the setpoint (bisection), and every controller runs the same copy through the
migration's own glue (RatePolicy: the marks, the verdict). The table gives, per controller, the
share of plants meeting each of issue 32's goals and the medians behind them; the "cannot" class
(setpoint under the load's own latency) gives the seconds to the verdict. Seconds, no servers.

    bench/run controller_plant --plants 120 --seed 1
"""

from __future__ import annotations

import argparse
import statistics

from benchkit import plant
from slacker.controller import ModelController, PidController

KINDS = {"model": lambda sp, m: ModelController(sp, m), "pid": lambda sp, m: PidController(sp, m)}


def percent(x: float) -> str:
    return "-" if x != x else f"{100 * x:.0f} %"


def plot(rows: list[dict], kinds: list[str], path: str, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    fig = Figure(figsize=(4.2 * len(kinds), 4.2))
    FigureCanvasAgg(fig)
    for i, k in enumerate(kinds):
        ax = fig.add_subplot(1, len(kinds), i + 1)
        for shape, colour in (("disk", "#1f77b4"), ("cpu", "#d62728")):
            pts = [(r[k]["speed"], r[k]["mean"]) for r in rows
                   if r["class"] == "binding" and r["shape"] == shape and "speed" in r[k]]
            ax.scatter([min(x, 2.0) for x, _ in pts], [min(y, 2.5) for _, y in pts], s=14, c=colour,
                       label=f"{shape}-bound", alpha=0.75)
        ax.add_patch(Rectangle((0.9, 0.9), 1.1, 0.2, fill=False, ls="--", ec="black"))
        g = plant.goals(rows, k)
        ax.set_title(f"{k}: {100 * g['binding_both']:.0f} % in the goal's box")
        ax.set_xlim(0, 2.0)
        ax.set_ylim(0, 2.5)
        ax.set_xlabel("copy speed / the oracle's (clipped at 2)")
        if i == 0:
            ax.set_ylabel("mean latency / setpoint (clipped at 2.5)")
            ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"Binding copies on the simulated plant family ({title})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plants", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--controllers", default=",".join(KINDS))
    ap.add_argument("--cannot", type=int, default=20, help="plants whose setpoint is under the load's own latency")
    ap.add_argument("--plot", default=None, help="write a PNG: each binding plant's mean / setpoint against its speed "
                    "/ the oracle's, one panel per controller, the goal's box drawn")
    a = ap.parse_args()
    kinds = {k: KINDS[k] for k in a.controllers.split(",")}
    family = plant.family(a.plants, seed=a.seed, kinds=("binding", "nonbinding", "loadstep", "binding"))
    rows = [plant.evaluate(sc, kinds) for sc in family]
    counts = {c: sum(1 for r in rows if r["class"] == c) for c in ("binding", "nonbinding", "loadstep", "between")}
    print(f"{a.plants} plants (seed {a.seed}): " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    print()
    print("| controller | binding: mean / sp (median) | within ±10 % | speed / oracle's (median) | >= 0.9x | "
          "both | not binding: time / unthrottled (median) | <= 1.15x | +40 % load step back in 10 s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in kinds:
        g = plant.goals(rows, k)
        print(f"| {k} | {g['binding_mean_median']:.2f} | {percent(g['binding_within_10pct'])} | "
              f"{g['binding_speed_median']:.2f} | {percent(g['binding_speed_ok'])} | {percent(g['binding_both'])} | "
              f"{g['nonbinding_time_median']:.2f} | {percent(g['nonbinding_ok'])} | {percent(g['loadstep_back_10s'])} |",
              flush=True)
    print()
    print("| controller | shape | binding plants | mean / sp (median) | speed / oracle's (median) | both goals |")
    print("|---|---|---:|---:|---:|---:|")
    for k in kinds:
        for shape in ("disk", "cpu"):
            sel = [r for r in rows if r["shape"] == shape]
            g = plant.goals(sel, k)
            print(f"| {k} | {shape} | {g['binding_n']} | {g['binding_mean_median']:.2f} | "
                  f"{g['binding_speed_median']:.2f} | {percent(g['binding_both'])} |")
    if a.plot:
        plot(rows, list(kinds), a.plot, f"{a.plants} plants, seed {a.seed}")
    print()
    cannot = plant.family(a.cannot, seed=a.seed + 1000, kinds=("cannot",))
    false = {k: sum(1 for r in rows if r["class"] in ("binding", "nonbinding") and r[k]["verdict_s"] is not None)
             for k in kinds}
    print("| controller | setpoint under the load's own latency: seconds to the verdict (median, max) | said "
          "within 60 s | verdicts on binding / non-binding plants |")
    print("|---|---|---:|---:|")
    for k, make in kinds.items():
        said = [plant.run_copy(sc, make, max_s=120).verdict_s for sc in cannot]
        got = [s for s in said if s is not None]
        med = f"{statistics.median(got):.0f}, {max(got):.0f}" if got else "-"
        print(f"| {k} | {med} | {sum(1 for s in said if s is not None and s <= 60)} of {len(said)} | "
              f"{false[k]} of {counts['binding'] + counts['nonbinding']} |")


if __name__ == "__main__":
    main()
