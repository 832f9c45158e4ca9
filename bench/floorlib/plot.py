"""bench/floor's plot: seconds against stream size, bare pipeline and each variant, with the fits."""

from __future__ import annotations

from pathlib import Path

from .analysis import MB, runs_of, summary


def make_plot(res: dict, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    s = summary(res)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = [("bare", runs_of(res, "bare"))] + [(v, runs_of(res, "migrate", variant=v)) for v in res["variants"]]
    for i, (name, rs) in enumerate(series):
        color = f"C{i}"
        label = "bare pipeline" if name == "bare" else f"slacker migrate --unthrottled ({name})"
        ax.scatter([r["bytes"] / MB for r in rs], [r["total_s"] for r in rs], s=14, color=color, label=label)
        f = s["fits"].get(name)
        if f:
            xs = [0, max(r["bytes"] for r in rs) / MB * 1.05]
            ax.plot(xs, [f["intercept_s"] + x * f["slope_s_per_mb"] for x in xs], color=color, lw=1,
                    label=f"  fit: {f['intercept_s']:.2f} s + size / {f['marginal_mb_s']:.0f} MB/s")
    ax.set_xlabel("backup stream (MB)")
    ax.set_ylabel("seconds (start to done)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Unthrottled live migration against its floor (2 shared cores)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
