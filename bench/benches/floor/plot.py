"""bench/floor's plot: seconds against stream size, bare pipeline and each variant, with the fits."""

from __future__ import annotations

from pathlib import Path

from .analysis import MB, med, pairs, runs_of, summary


def make_plot(res: dict, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    s = summary(res)
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(11, 4.5))
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
    ax.set_title("seconds against size, with the fits", fontsize=9)
    # the paired ratios: each migration over the bare run just before it, per size
    sizes = {t: row["bytes"] / MB for t, row in s["sizes"].items()}
    for i, v in enumerate(res["variants"], start=1):
        pr = pairs(res, v)
        xs, ys = [], []
        for t, rs in pr.items():
            xs += [sizes[t]] * len(rs)
            ys += rs
        rx.scatter(xs, ys, s=14, color=f"C{i}", alpha=0.6)
        ts = [t for t in sizes if pr.get(t)]
        rx.plot([sizes[t] for t in ts], [med(pr[t]) for t in ts], color=f"C{i}", marker="o", label=f"{v} (median)")
    rx.axhline(1.0, color="C0", lw=1, label="bare pipeline")
    rx.set_xlabel("backup stream (MB)")
    rx.set_ylabel("migration / bare run just before it")
    rx.set_xlim(left=0)
    rx.set_ylim(bottom=0)
    rx.grid(alpha=0.3)
    rx.legend(fontsize=7)
    rx.set_title("paired ratio", fontsize=9)
    fig.suptitle("Unthrottled live migration against its floor (2 cores, shared)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
