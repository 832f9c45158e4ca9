"""Figure 5: latency with no copy, then a fixed-rate copy at each of --fixed-rates (one harness run).

Each level is a migration aborted after --level (or before the copy would end); the tenant
comes back between levels when runs have a direction. analysis.knee reads the result.
"""

from __future__ import annotations

import time

from . import log
from .analysis import MB, latency_stats, mbs
from .runner import Bench, load_class


def run(bench: Bench) -> dict:
    a = bench.args
    name = "fig5"
    log(f"fig5: one harness at {a.tps:g} tps; {a.base:g}s with no copy, then fixed rates "
        f"{', '.join(mbs(r, 0) for r in a.fixed_rates)} MB/s for up to {a.level:g}s each")
    bench.ensure_home(a.tenant)
    est_bytes = bench.data_bytes(a.tenant)
    log(f"fig5: the snapshot will copy about {est_bytes / MB:.0f} MB; levels end before the copy would")
    h = load_class(a)(bench, name, [a.tenant], [a.tps], a.records)
    levels = []
    try:
        h.wait_ready()
        time.sleep(a.warmup)
        base_t0 = time.time()
        time.sleep(a.base)
        base_t1 = time.time()
        gaps = []
        for r in a.fixed_rates:
            level_s = min(a.level, 0.85 * est_bytes / r)
            mig = bench.migrate(a.tenant, rate=r, abort_after_s=level_s, name=f"fig5-{r / MB:g}MBps")
            if mig["result"] == "succeeded":
                bench.results["bytes_estimate"] = mig["bytes"]
                bench.ensure_home(a.tenant)
            levels.append({"rate": r, "mig": {k: v for k, v in mig.items() if k != "series"}})
            log(f"fig5: {r / MB:g} MB/s level: {mig['result']}, {mig['bytes'] / MB:.0f} MB in {mig['snapshot_s']:.1f}s")
            g0 = time.time()
            time.sleep(a.gap)
            gaps.append((g0 + a.gap / 2, time.time()))
    finally:
        h.stop()
    recs = h.records()
    base = latency_stats(recs, base_t0, base_t1)
    base["cpu"] = bench.cpu.summary(base_t0, base_t1)
    gap_stats = [latency_stats(recs, g0, g1) for g0, g1 in gaps]
    rows = []
    for lv in levels:
        m = lv["mig"]
        t0, t1 = m["snapshot_start"], m["snapshot_end"]
        if m["result"] == "succeeded":
            t1 -= a.tail_exclude
        st = latency_stats(recs, t0, t1)
        half = (t0 + t1) / 2
        first, second = latency_stats(recs, t0, half), latency_stats(recs, half, t1)
        rows.append({"rate": lv["rate"], "achieved_rate": m["avg_rate"], "seconds": t1 - t0,
                     "result": m["result"], "stats": st, "first_half_s": first["mean_s"],
                     "second_half_s": second["mean_s"], "cpu": bench.cpu.summary(t0, t1),
                     "window": [t0, t1], "migration": m})
    out = {"tps": a.tps, "harness_path": str(h.out_path), "base": base, "base_window": [base_t0, base_t1],
           "gaps": gap_stats, "gap": a.gap, "levels": rows, "machine_series": bench.cpu.window(h.started, time.time())}
    bench.results["runs"]["fig5"] = out
    bench.save()
    return out
