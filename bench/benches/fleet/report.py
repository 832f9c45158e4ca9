"""The table bench/fleet prints and the figure docs/results.md shows."""

from __future__ import annotations

from .runs import median_spread


def _fmt(m, lo, hi, unit="", digits=2) -> str:
    if m is None:
        return "-"
    return f"{m:.{digits}f}{unit} [{lo:.{digits}f}-{hi:.{digits}f}]"


def summary(doc: dict) -> dict:
    drains, pairs = doc["drains"], doc["pairs"]
    out = {"drain": {}, "pair": {}, "ratios": {}}
    for v in ("serial", "fair", "smallest"):
        rows = [d for d in drains if d["variant"] == v]
        out["drain"][v] = {"drain_s": median_spread([d["drain_s"] for d in rows]),
                           "latency_over_setpoint": median_spread([d["latency_over_setpoint"] for d in rows]),
                           "failed_requests": sum(d["failed_requests"] for d in rows),
                           "all_drained": all(d["outcome"] == "drained" and not d["left_on_node"] for d in rows)}
    # Paired ratios: each repeat's shared drain over the same repeat's one-at-a-time drain.
    for v in ("fair", "smallest"):
        ratios = []
        for r in sorted({d["repeat"] for d in drains}):
            a = [d["drain_s"] for d in drains if d["repeat"] == r and d["variant"] == v]
            b = [d["drain_s"] for d in drains if d["repeat"] == r and d["variant"] == "serial"]
            if a and b:
                ratios.append(a[0] / b[0])
        out["ratios"][f"{v}/serial"] = median_spread(ratios)
    for b in ("fair", "own"):
        rows = [p for p in pairs if p["budget"] == b]
        out["pair"][b] = {"latency_over_setpoint": median_spread([p["latency_over_setpoint"] for p in rows])}
    return out


def table(doc: dict) -> str:
    s = summary(doc)
    lines = ["drain of node-1 (median [min-max] over repeats)",
             f"{'variant':10} {'drain s':>22} {'latency/setpoint':>22} {'failed req':>10} {'drained':>8}"]
    for v, r in s["drain"].items():
        lines.append(f"{v:10} {_fmt(*r['drain_s'], digits=1):>22} {_fmt(*r['latency_over_setpoint']):>22} "
                     f"{r['failed_requests']:>10} {str(r['all_drained']):>8}")
    for k, r in s["ratios"].items():
        lines.append(f"drain time {k}: {_fmt(*r)} (paired per repeat)")
    lines.append("two moves off one source: the source's latency (all its tenants) / setpoint while both copy")
    for b, r in s["pair"].items():
        lines.append(f"  {'shared budget' if b == 'fair' else 'two controllers':16} {_fmt(*r['latency_over_setpoint'])}")
    for d in doc.get("interrupted") or []:
        lines.append(f"drain interrupted (SIGINT of the CLI, SIGKILL of the source agent): {d['outcome']} in "
                     f"{d['drain_s']:.1f}s; exits {[r['rc'] for r in d['runs']]}; each tenant moved once: "
                     f"{d['moved_once']} {d['epoch_steps']}; failed requests {d['failed_requests']}")
    lines.append(f"acknowledged writes lost: {doc.get('lost_acks')}; OLTP check: {doc.get('oltp_check')}")
    return "\n".join(lines)


def plot(doc: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    variants = ["serial", "fair", "smallest"]
    for i, v in enumerate(variants):
        ys = [d["drain_s"] for d in doc["drains"] if d["variant"] == v]
        ax[0].scatter([i] * len(ys), ys, color="C0")
        ls = [d["latency_over_setpoint"] for d in doc["drains"] if d["variant"] == v and d["latency_over_setpoint"]]
        ax[1].scatter([i] * len(ls), ls, color="C1")
    ax[0].set_xticks(range(3), ["one at a time", "shared, fair", "shared, smallest"])
    ax[0].set_ylabel("drain time (s)")
    ax[0].set_ylim(bottom=0)
    ax[1].set_xticks(range(3), ["one at a time", "shared, fair", "shared, smallest"])
    ax[1].axhline(1.0, color="k", lw=0.8, ls="--")
    ax[1].axhline(1.1, color="r", lw=0.8, ls=":")
    ax[1].set_ylabel("drained node's tenants' latency / setpoint")
    for i, b in enumerate(["fair", "own"]):
        ls = [p["latency_over_setpoint"] for p in doc["pairs"] if p["budget"] == b and p["latency_over_setpoint"]]
        ax[2].scatter([i] * len(ls), ls, color="C2")
    ax[2].axhline(1.0, color="k", lw=0.8, ls="--")
    ax[2].axhspan(0.9, 1.1, color="g", alpha=0.1)
    ax[2].set_xticks(range(2), ["shared budget", "two controllers"])
    ax[2].set_ylabel("source latency / setpoint, both copying")
    m = doc["meta"]
    ran = len({d["repeat"] for d in doc.get("drains", [])} | {p["repeat"] for p in doc.get("pairs", [])})
    fig.suptitle(f"bench/fleet: {m['nodes']} netns nodes, {m['tenants']} tenants, drain of {m['drained']} "
                 f"({m['drained_bytes'] / 1e6:.0f} MB), {ran} of {m['repeats']} repeat(s) run; 2-core machine"
                 + (f", {m['cpu_per_node']} CPU per node" if m.get("cpu_per_node") else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
