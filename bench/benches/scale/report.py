"""The scale table, each figure's growth named from its values at the sizes measured, and the plot."""

from __future__ import annotations

import math
from pathlib import Path

# (key, label, unit) of the figures reported per size.
FIGURES = [
    ("status_s", "`slacker status --json`", "s"),
    ("cli_start_s", "`slacker --version` (the CLI's start)", "s"),
    ("status_api_s", "agents' GET /v1/status, one after another", "s"),
    ("create_s", "`tenant create`", "s"),
    ("login_s", "login through the router (+ SELECT 1)", "ms"),
    ("router_rss_mib", "router memory (RSS)", "MiB"),
    ("router_threads", "router threads", ""),
    ("agent_idle_cpu_s_per_s", "agents' CPU (all nodes, tenants idle)", "CPU s/s"),
    ("agent_cpu_s_per_s", "agents' CPU (all nodes, light load)", "CPU s/s"),
    ("etcd_watchers", "directory watches (etcd watchers)", ""),
    ("etcd_requests_per_s", "etcd requests", "/s"),
    ("etcd_cpu_s_per_s", "etcd CPU (3 members)", "CPU s/s"),
    ("tenant_rss_mib", "tenants' memory (sum of Pss)", "MiB"),
]


def growth(sizes: list[int], values: list[float]) -> tuple[float | None, str]:
    """The exponent b of value ~ size^b between the smallest and largest size (of the part above the
    value at the smallest size extrapolated to 0, so a fixed cost does not hide a per-tenant one), and a
    name for it."""
    pts = [(s, v) for s, v in zip(sizes, values) if v is not None and not math.isnan(v)]
    if len(pts) < 2 or pts[0][1] <= 0 or pts[-1][1] <= 0:
        return None, "-"
    (s0, v0), (s1, v1) = pts[0], pts[-1]
    b = math.log(v1 / v0) / math.log(s1 / s0)
    if b < 0.25:
        name = "flat"
    elif b < 0.8:
        name = "sublinear (a fixed part plus a per-tenant part)"
    elif b <= 1.2:
        name = "linear"
    else:
        name = "faster than linear"
    return b, name


def fmt(x: float | None, unit: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if unit == "ms":
        return f"{x * 1000:.1f} ms"
    if unit in ("s", "CPU s/s"):
        return f"{x:.3f} {unit}" if x < 10 else f"{x:.1f} {unit}"
    return f"{x:.0f} {unit}".strip() if abs(x) >= 10 else f"{x:.1f} {unit}".strip()


# The same for `bench/run scale --aliases` (100 to 10,000 directory entries, bench/benches/scale/tenk.py).
FIGURES_ALIASES = [
    ("router_threads", "router threads (control + data path)", ""),
    ("router_rss_mib", "router memory (RSS)", "MiB"),
    ("etcd_watch_streams", "etcd watch streams (3 members)", ""),
    ("etcd_watchers", "etcd watchers (3 members)", ""),
    ("etcd_requests_per_s", "etcd requests, idle fleet", "/s"),
    ("agent_cpu_s_per_s", "agents' CPU (all nodes)", "CPU s/s"),
    ("status_s", "`slacker status` (summary)", "s"),
    ("status_json_s", "`slacker status --json`", "s"),
    ("tenant_list_s", "`slacker tenant list` (summary)", "s"),
    ("login_p50_s", "login + SELECT 1 via router, p50", "ms"),
    ("login_p99_s", "login + SELECT 1 via router, p99", "ms"),
    ("entry_routable_s", "directory entry to routed login (median)", "ms"),
    ("create_routable_s", "`tenant create` returned to routed login", "ms"),
    ("move_pause_s", "live move: longest gap between SELECT 1s", "ms"),
    ("fault_pause_s", "the same, etcd leader killed + compaction", "ms"),
    ("router_catch_up_s", "router routes every new entry", "s"),
]


def table(levels: list[dict], figures: list = FIGURES) -> str:
    sizes = [lv["tenants"] for lv in levels]
    head = "| figure | " + " | ".join(f"{s} tenants" for s in sizes) + " | growth (exponent) |\n"
    head += "|---|" + "---:|" * len(sizes) + "---|\n"
    rows = []
    for key, label, unit in figures:
        vals = [lv.get(key) for lv in levels]
        spread = [lv.get(key + "_range") for lv in levels]
        cells = []
        for v, r in zip(vals, spread):
            c = fmt(v, unit)
            if r:
                c += f" ({fmt(r[0], unit)}–{fmt(r[1], unit)})"
            cells.append(c)
        b, name = growth(sizes, vals)
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {name}" + (f" ({b:.2f})" if b is not None else "")
                    + " |")
    return head + "\n".join(rows) + "\n"


def plot(levels: list[dict], path: str, figures: list = FIGURES) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = [lv["tenants"] for lv in levels]
    shown = [f for f in figures if any(lv.get(f[0]) for lv in levels)]
    cols = 4
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows))
    for ax, (key, label, unit) in zip(axes.flat, shown):
        vals = [lv.get(key) for lv in levels]
        scale = 1000 if unit == "ms" else 1
        ax.plot(sizes, [v * scale if v is not None else None for v in vals], "o-")
        v0 = vals[0]
        if v0:  # linear from the smallest size, for reference
            ax.plot(sizes, [v0 * scale * s / sizes[0] for s in sizes], ":", color="grey", lw=0.8)
        ax.set_title(label.replace("`", ""), fontsize=8)
        ax.set_xlabel("tenants", fontsize=7)
        ax.set_ylabel(unit, fontsize=7)
        ax.set_ylim(bottom=0)
        if sizes[-1] >= 20 * sizes[0]:
            ax.set_xscale("log")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    fig.suptitle("dotted: linear from the smallest size", fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
