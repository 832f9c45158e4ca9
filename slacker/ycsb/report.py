"""Human-readable forms of the harness's records: the per-interval line and the end-of-run summary."""

from __future__ import annotations

from .loader import LoadProgress, LoadResult
from .results import SUSTAINED_RATIO, IntervalRecord, RunResult


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    v = seconds * 1000.0
    if v < 10:
        return f"{v:.2f}"
    if v < 1000:
        return f"{v:.1f}"
    return f"{v:.0f}"


INTERVAL_HEADER = (f"{'time':>7}  {'tenant':<10} {'target':>7} {'offered':>8} {'achieved':>8} {'queue':>6} "
                   f"{'mean':>7} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}  {'fail':>4}")
INTERVAL_UNITS = (f"{'s':>7}  {'':<10} {'txn/s':>7} {'txn/s':>8} {'txn/s':>8} {'txns':>6} "
                  f"{'ms':>7} {'ms':>7} {'ms':>7} {'ms':>7} {'ms':>7}  {'':>4}")


def interval_line(r: IntervalRecord) -> str:
    fails = sum(r.failures.values())
    mark = " drain" if r.phase == "drain" else ""
    return (f"{r.t_s:>7.1f}  {r.tenant:<10.10} {r.target_tps:>7.1f} {r.offered_tps:>8.1f} {r.achieved_tps:>8.1f} "
            f"{r.queue_length:>6d} {ms(r.latency_mean_s):>7} {ms(r.latency_p50_s):>7} {ms(r.latency_p95_s):>7} "
            f"{ms(r.latency_p99_s):>7} {ms(r.latency_max_s):>7}  {fails:>4d}{mark}")


def summary_lines(res: RunResult) -> list[str]:
    out = []
    out.append("")
    head = "run interrupted" if res.interrupted else "run complete"
    out.append(f"{head}: {res.duration_s:.1f}s of {res.arrival} arrivals, MPL {res.mpl}, driver {res.driver}, "
               f"seed {res.seed}" + (f", rate steps {' '.join(res.rate_steps)}" if res.rate_steps else ""))
    out.append(f"{'tenant':<10} {'offered':>8} {'achieved':>8} {'ratio':>6} {'txns':>8} {'mean':>7} {'p50':>7} "
               f"{'p95':>7} {'p99':>7} {'max':>7} {'qmax':>6} {'failed':>6}")
    out.append(f"{'':<10} {'txn/s':>8} {'txn/s':>8} {'':>6} {'':>8} {'ms':>7} {'ms':>7} {'ms':>7} {'ms':>7} "
               f"{'ms':>7} {'txns':>6} {'txns':>6}")
    for t in res.tenants:
        ratio = t.achieved_ratio
        lat = t.latency
        out.append(f"{t.tenant:<10.10} {t.offered_tps:>8.1f} {t.achieved_tps:>8.1f} "
                   f"{(f'{ratio * 100:.1f}%' if ratio is not None else '-'):>6} {t.completed:>8d} {ms(lat.mean_s):>7} "
                   f"{ms(lat.p50_s):>7} {ms(lat.p95_s):>7} {ms(lat.p99_s):>7} {ms(lat.max_s):>7} {t.queue_max:>6d} "
                   f"{sum(t.abandoned.values()):>6d}")
    for t in res.tenants:
        if not t.sustained:
            out.append(f"{t.tenant}: NOT SUSTAINED: achieved {t.achieved_tps:.1f} of {t.offered_tps:.1f} txn/s offered "
                       f"(below {SUSTAINED_RATIO:.0%}); {t.queue_at_end} queued when arrivals stopped")
        total_ops = t.operations_total
        if total_ops:
            mix = ", ".join(f"{name} {c / total_ops:.1%}" for name, c in t.operations.items() if c)
            out.append(f"{t.tenant}: {total_ops} operations ({mix})")
        if t.failures:
            fails = ", ".join(f"{k} {v}" for k, v in sorted(t.failures.items()))
            out.append(f"{t.tenant}: failed attempts: {fails}; given up: "
                       + (", ".join(f"{k} {v}" for k, v in sorted(t.abandoned.items())) or "none"))
        if t.unfinished:
            out.append(f"{t.tenant}: {t.unfinished} transactions arrived but never ran (drain timeout or stop)")
        for g in t.gaps:
            moved = f"epoch {g.epoch_before} -> {g.epoch_after}" if g.epoch_after != g.epoch_before else \
                f"same owner (epoch {g.epoch_after})"
            out.append(f"{t.tenant}: gap of {ms(g.gap_s)} ms at {g.start_s:.1f}s ({g.reason}; {moved}"
                       + (f", {g.node_before} -> {g.node_after}" if g.node_after != g.node_before else "") + ")")
    cpu = res.harness_cpu_s
    rate = f"{res.ops_per_cpu_s:,.0f} operations per CPU-second" if res.ops_per_cpu_s else "-"
    out.append(f"harness CPU: {cpu:.2f}s for {res.operations_total} operations ({rate})")
    if res.ignored_properties:
        out.append("ignored properties: " + "; ".join(res.ignored_properties))
    if res.out_path:
        out.append(f"time series: {res.out_path}")
    return out


def load_progress_line(p: LoadProgress) -> str:
    pct = 100.0 * p.rows_done / p.rows_total if p.rows_total else 100.0
    eta = f", ETA {p.eta_s:.0f}s" if p.eta_s is not None and p.rows_done < p.rows_total else ""
    return f"loaded {p.rows_done:,}/{p.rows_total:,} rows ({pct:.0f}%), {p.rows_per_s:,.0f} rows/s{eta}"


def load_summary_line(r: LoadResult) -> str:
    return (f"loaded {r.rows:,} rows into {r.database}.{r.table} on {r.tenant} ({r.endpoint}) in {r.elapsed_s:.1f}s: "
            f"{r.rows_per_s:,.0f} rows/s, ~{r.approx_bytes / 1e6:,.0f} MB, {r.threads} connections, "
            f"{r.batch_rows} rows per INSERT")
