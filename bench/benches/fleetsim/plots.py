"""bench/fleetsim's figure: nodes over the SLA and cumulative moves over time, per policy."""

from __future__ import annotations

from pathlib import Path


def fleet(doc: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for policy, res in doc["results"].items():
        recs = res["records"]
        hours = [r["minute"] / 60 for r in recs]
        ax1.plot(hours, [r["over_sla"] for r in recs], lw=0.8, label=policy)
        total, cum = 0, []
        for r in recs:
            total += r["moves"]
            cum.append(total)
        ax2.plot(hours, cum, lw=1.2, label=f"{policy} ({res['summary']['moves_per_hour']:.0f}/h)")
    bound = next(iter(doc["results"].values()))
    m = doc["model"]
    ax1.set_xlabel("hours")
    ax1.set_ylabel(f"nodes over the SLA (of {m['nodes']})")
    ax1.set_title(f"{m['nodes']} nodes, {m['tenants']} tenants")
    ax1.legend()
    ax2.set_xlabel("hours")
    ax2.set_ylabel("moves (cumulative)")
    ax2.set_title("moves; the bound per policy in the table")
    ax2.legend()
    _ = bound
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
