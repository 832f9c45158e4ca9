"""The phase-aimed chaos mode's figure: time to writable of every run, by the phase its fault landed in."""

from __future__ import annotations

import random

from . import phases

NEVER_S = 150.0  # where a run whose writer never got a write in is drawn (above the bench's 120 s wait)


def draw(runs: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    landed = [p for p in phases.LANDED if any(r.get("landed") == p for r in runs)]
    kinds = [k for k in phases.KINDS_SHARED if any(r["kind"] == k for r in runs)]
    colors = {k: plt.get_cmap("tab10")(i) for i, k in enumerate(kinds)}
    rng = random.Random(0)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, key, title in ((axes[0], "ttw_direct_s", "direct (the owner's address, re-located)"),
                           (axes[1], "ttw_router_s", "through the router (127.0.0.1, a stock client)")):
        for r in runs:
            if r.get("landed") not in landed:
                continue
            x = landed.index(r["landed"]) + rng.uniform(-0.3, 0.3)
            v = r.get(key)
            y = NEVER_S if v is None else max(v, 0.005)
            ax.scatter(x, y, s=18, color=colors[r["kind"]], marker="x" if v is None else "o",
                       label=r["kind"])
            if r.get("hand_steps"):
                ax.scatter(x, y, s=70, facecolors="none", edgecolors="black", linewidths=0.7,
                           label="a later move needed a hand step")
        ax.axhline(10, color="red", lw=0.8, ls="--")
        ax.text(len(landed) - 0.5, 11, "10 s", color="red", ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(landed)))
        ax.set_xticklabels(landed, rotation=40, ha="right")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("time to writable after the restart (s, log; x: never)")
    handles, labels = axes[0].get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    fig.legend(seen.values(), seen.keys(), loc="lower center", ncol=min(5, len(seen)), fontsize=8)
    seeds = sorted({r.get("seed") for r in runs})
    fig.suptitle(f"bench/run chaos --phases: {len(runs)} faulted moves, seed{'s' if len(seeds) > 1 else ''} "
                 f"{', '.join(map(str, seeds))}", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
