"""The controllers judged on a plant that holds still (issue 40): `--only stable`.

The plant: two nodes under a CPU budget each (`cluster up --cpu-per-node --cpu-period --cpu-weight`),
the load generator and the sampler outside it, the load at constant arrivals at half the tenant's
measured capacity under that budget. Every run is gated before its copy (achieved = offered in every
second, the load's own latency near its calibration median); a run that fails the gate is repeated,
never kept. The setpoint of a run is a multiple of the load's own latency measured just before it.

    calibrate  capacity; the load alone; the unthrottled copy; fixed rates around the rate whose copy
               lasts 60 s; the setpoint multiples (protocol.choose_multiples); 5 repeats of one fixed
               rate, which must agree within 5 % of their mean latency
    blocks     {load alone, 3 fixed rates, model, PID at the binding setpoint, unthrottled, model and
               PID at the non-binding one} in an order rotated each block; the oracle read off the
               block's own fixed rates; paired differences within blocks

Pure parts in protocol.py; the table in report(); raw runs in results.json (`stable`).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from . import log, protocol
from .analysis import MB, latency_stats, mbs, ms, table
from .runner import Bench, drop_page_cache, load_class

MEMBERS = ["alone", "fixed:0", "fixed:1", "fixed:2", "model:b", "pid:b", "unthrottled", "model:nb", "pid:nb"]

STALL_PROBE = r"""
import sys, time
end = time.monotonic() + float(sys.argv[1])
gaps = []
last = time.monotonic()
while last < end:
    now = time.monotonic()
    if now - last > 0.0005:
        gaps.append(now - last)
    last = now
gaps.sort()
print(len(gaps), gaps[-1] if gaps else 0.0, gaps[int(len(gaps) * 0.99)] if gaps else 0.0, sum(gaps))
"""


def quota_stall(bench: Bench, cpus: float, period_s: float, seconds: float = 3.0) -> dict:
    """A busy loop in a group with the nodes' quota and period: how long it is held off the CPU at a
    time (the quota's own stalls, plus the machine's scheduling)."""
    from slacker import cgroups
    g = cgroups.create(bench.run_dir, "probe", cpus, period_s, bench.args.cpu_weight)
    try:
        p = subprocess.Popen([sys.executable, "-c", STALL_PROBE, str(seconds)], stdout=subprocess.PIPE, text=True,
                             preexec_fn=lambda: g.add(0))
        out, _ = p.communicate(timeout=seconds + 30)
    finally:
        cgroups.remove(bench.run_dir, "probe")
    n, mx, p99, total = out.split()
    return {"cpus": cpus, "period_s": period_s, "gaps": int(n), "max_gap_s": float(mx), "p99_gap_s": float(p99),
            "held_share": float(total) / seconds}


class Stable:
    def __init__(self, bench: Bench) -> None:
        self.bench, self.a = bench, bench.args
        self.tenant = self.a.tenant
        self.st: dict = bench.results.setdefault("stable", {"rejected": [], "blocks": [], "calibration": {}})
        self.offered: float | None = None
        self.calib_latency_s: float | None = None

    # --- one gated run ------------------------------------------------------------------------------------
    def lat(self, stats: dict) -> float | None:
        """A run's latency by --latency-stat: the median of its per-second means (default) or the mean."""
        return stats.get("median_1s_s" if self.a.latency_stat == "median" else "mean_s")

    def _seconds(self, recs: list[dict], t0: float, t1: float) -> list[tuple[float, float, float]]:
        return [(r["offered_tps"], r["achieved_tps"], r["interval_s"]) for r in recs
                if r["phase"] == "run" and t0 <= r["_end"] <= t1 and r.get("offered_tps")]

    def run(self, name: str, kind: str, *, rate: float | None = None, mult: float | None = None,
            abort_after_s: float | None = None, tps: float | None = None, gate_latency: bool = True) -> dict:
        """Start the load, gate the seconds before the copy, then run `kind` (alone, fixed, unthrottled,
        model, pid); a run that fails the gate is repeated up to --max-attempts times."""
        a, b = self.a, self.bench
        tps = tps or self.offered
        for attempt in range(1, a.max_attempts + 1):
            b.ensure_home(self.tenant)
            if a.disk_read_bps:
                drop_page_cache()
            tag = name if attempt == 1 else f"{name}-try{attempt}"
            h = load_class(a)(b, tag, [self.tenant], [tps], a.records)
            try:
                h.wait_ready()
                time.sleep(a.warmup)
                t_pre1 = time.time()
                recs = h.records()
                pre = latency_stats(recs, t_pre1 - a.pre_window, t_pre1)
                gate = protocol.load_gate(self._seconds(recs, t_pre1 - a.pre_window, t_pre1))
                if gate.ok and gate_latency and self.calib_latency_s:
                    gate = protocol.latency_gate(self.lat(pre), self.calib_latency_s, a.latency_tolerance)
                if not gate.ok:
                    self.st["rejected"].append({"name": tag, "why": gate.why, "at": time.time()})
                    log(f"{tag}: rejected before the copy: {gate.why}")
                    continue
                # The setpoint (and every ratio) against the session's reference, the calibration median of
                # the load's own latency: the gate has held this run's within +-10 % of it, and dividing by
                # the run's own reading adds that reading's noise where the copy's cost does not scale with
                # it (on the disk-bound host the copy's queue is added to the load's latency, not a multiple)
                ref = self.calib_latency_s or self.lat(pre)
                sp = mult * ref if mult else None
                mig = None
                if kind == "alone":
                    time.sleep(a.level)
                    c0, c1 = t_pre1, time.time()
                else:
                    if kind in ("unthrottled", "fixed"):
                        mig = b.migrate(self.tenant, rate=rate, name=tag, abort_after_s=abort_after_s)
                    else:
                        mig = b.migrate(self.tenant, controller=b.controller(kind, sp, h), name=tag)
                    c0, c1 = mig["snapshot_start"], mig["snapshot_end"] - (a.tail_exclude if mig["result"] ==
                                                                           "succeeded" else 0.0)
                    time.sleep(a.post)
            finally:
                h.stop()
            recs = h.records()
            copy = latency_stats(recs, c0, c1, sp)
            if copy["mean_s"] is None and mig is not None:  # a copy shorter than the tail left out
                copy = latency_stats(recs, c0, mig["snapshot_end"], sp)
            lat, own = self.lat(copy), self.lat(pre)
            run = {"name": tag, "kind": kind, "attempt": attempt, "tps": tps, "fixed_rate": rate, "mult": mult,
                   "setpoint_s": sp, "pre": pre, "gate_worst_load_dev": gate.worst, "copy": copy,
                   "latency_s": lat, "own_s": own, "ref_s": ref, "stat": self.a.latency_stat,
                   "ratio": lat / ref if lat and ref else None,
                   "ratio_own": lat / own if lat and own else None,
                   "harness_path": str(h.out_path), "cpu_during_copy": b.cpu.summary(c0, c1),
                   "loadavg": __import__("os").getloadavg()}
            if mig is not None:
                run["migration"] = {k: v for k, v in mig.items() if k != "series"}
                run["rate"] = mig["avg_rate"]
                run["sp_ratio"] = lat / sp if sp and lat else None
                run["sp_ratio_mean"] = copy["mean_s"] / sp if sp and copy["mean_s"] else None
            b.results["runs"][tag] = run
            b.save()
            log(f"{tag}: own {ms(own)} ms (ref {ms(ref)}); " + (
                f"{mig['result']} {mig['bytes'] / MB:.0f} MB in {mig['snapshot_s']:.1f}s = {mbs(mig['avg_rate'])} MB/s, "
                if mig else "no copy, ") + f"{a.latency_stat} {ms(lat)} ms (mean {ms(copy['mean_s'])}) = {run['ratio'] or 0:.2f}x the reference"
                + (f", {run['sp_ratio']:.2f}x setpoint {ms(sp)} ms" if run.get("sp_ratio") else "")
                + f"; others {run['cpu_during_copy']['others_cores']} cores")
            return run
        log(f"{name}: {a.max_attempts} attempts failed the validity gate; left out (stable.invalid)")
        self.st.setdefault("invalid", []).append(name)
        return None

    # --- calibration ----------------------------------------------------------------------------------------
    def capacity(self) -> float:
        """The tenant's capacity under the budget: the load with no rate limit, achieved tps (median second)."""
        a, b = self.a, self.bench
        h = load_class(a)(b, "stable-capacity", [self.tenant], [a.capacity_probe_tps], a.records)
        try:
            h.wait_ready()
            time.sleep(a.warmup + a.level)
        finally:
            h.stop()
        recs = [r for r in h.records() if r["phase"] == "run"]
        secs = [r["achieved_tps"] for r in recs][int(a.warmup):]
        cap = statistics.median(secs)
        self.st["calibration"]["capacity_tps"] = cap
        self.st["calibration"]["capacity_seconds"] = len(secs)
        log(f"capacity under the budget: {cap:.1f} tps (median of {len(secs)} s); the load: {a.load_fraction:g} of it")
        return cap

    def calibrate(self) -> None:
        a, b, cal = self.a, self.bench, self.st["calibration"]
        if a.cpu_per_node:
            cal["quota_stall"] = [quota_stall(b, a.cpu_per_node, p) for p in sorted({a.cpu_period, 0.1})]
            for q in cal["quota_stall"]:
                log(f"quota stall probe: {q['cpus']:g} CPU per {q['period_s'] * 1000:g} ms: max {ms(q['max_gap_s'])} "
                    f"ms, p99 {ms(q['p99_gap_s'])} ms off the CPU")
        self.offered = round(a.load_fraction * (a.offered or self.capacity()), 1)
        cal["offered_tps"] = self.offered
        size = b.data_bytes(self.tenant)
        cal["data_bytes"] = size
        alone = self._must(self.run("cal-alone", "alone", gate_latency=False))
        u = self._must(self.run("cal-unthrottled", "unthrottled", gate_latency=False))
        cap_rate = size / protocol.MIN_ORACLE_COPY_S
        rates = sorted({min(u["rate"] * 0.9, cap_rate * f) for f in a.sweep_factors})
        sweep = [self._must(self.run(f"cal-fixed-{mbs(r, 1)}MBps", "fixed", rate=r, abort_after_s=a.level,
                                     gate_latency=False)) for r in rates]
        # the session's reference: the load's own latency, median over the calibration's runs so far;
        # every ratio so far is re-read against it, and from here on runs are gated on it
        self.calib_latency_s = statistics.median([r["own_s"] for r in [alone, u] + sweep if r["own_s"]])
        for r in [alone, u] + sweep:
            r["ref_s"] = self.calib_latency_s
            r["ratio"] = r["latency_s"] / self.calib_latency_s if r["latency_s"] else None
        b.save()
        pts = [(s["rate"], s["ratio"]) for s in sweep if s["ratio"] is not None]
        mult = protocol.choose_multiples(pts, (u["rate"], u["ratio"]), size)
        cal.update(alone=alone["name"], unthrottled=u["name"], sweep=[s["name"] for s in sweep], multiples=mult)
        log(f"setpoints: binding {mult['binding']:g}x the load's own latency (margin allows {mult['by_margin']:.2f}x, "
            f"a >= 60 s copy {mult['by_copy_time'] or 0:.2f}x), non-binding {mult['nonbinding']:g}x")
        if not mult["binds"]:
            log("no binding setpoint exists on this plant (the copy costs the load too little); blocks run the "
                "non-binding setpoint only")
        orc = protocol.oracle(pts + [(u["rate"], u["ratio"])], mult["binding"])
        self.rates = self._bracket_rates(orc["rate"] or cap_rate)
        rep_rate = self.rates[1]
        # the repeats are gated like the blocks' runs: the calibration judges the runs a controller is judged on
        reps = [self._must(self.run(f"cal-repeat{i}-{mbs(rep_rate, 1)}MBps", "fixed", rate=rep_rate,
                                    abort_after_s=a.level))
                for i in range(1, a.calibration_repeats + 1)]
        c = protocol.calibration([r["latency_s"] for r in reps])
        curve_pts = pts + [(u["rate"], u["ratio"])]
        cal.update(repeats=[r["name"] for r in reps], repeat_rate=rep_rate, spread=c, rates=self.rates,
                   load_latency_median_s=self.calib_latency_s, stat=a.latency_stat,
                   spread_of_means=protocol.calibration([r["copy"]["mean_s"] for r in reps]),
                   ratio_spread=protocol.calibration([r["ratio_own"] for r in reps]),
                   rate_spread=protocol.calibration([r["rate"] for r in reps]),
                   elasticity=protocol.elasticity(curve_pts, rep_rate),
                   rate_corrected=protocol.calibration(protocol.rate_corrected(
                       [(r["rate"], r["ratio"]) for r in reps], curve_pts, rep_rate)))
        b.save()
        el = cal["elasticity"]
        log(f"calibration: {len(reps)} repeats at {mbs(rep_rate)} MB/s: {a.latency_stat} latency during the copy "
            f"{ms(c['mean'])} ms, spread {c['spread']:.1%} ({'within' if c['ok'] else 'NOT within'} 5 %); "
            f"of the means {cal['spread_of_means']['spread']:.1%}; achieved rates spread "
            f"{cal['rate_spread']['spread']:.1%}, the curve's elasticity there "
            f"{'-' if el is None else f'{el:.2f}'}, corrected to one rate {cal['rate_corrected']['spread']:.1%}; "
            f"as multiples of each run's own latency {cal['ratio_spread']['spread']:.1%}; the reference "
            f"{ms(self.calib_latency_s)} ms")

    @staticmethod
    def _must(run: dict | None) -> dict:
        if run is None:
            raise SystemExit("a calibration run failed its validity gate every time: the plant does not hold "
                             "still (stable.rejected in results.json says why)")
        return run

    def _bracket_rates(self, centre: float) -> list[float]:
        return [centre * f for f in self.a.bracket]

    # --- blocks -----------------------------------------------------------------------------------------------
    def block(self, k: int) -> dict:
        a, mult = self.a, self.st["calibration"]["multiples"]
        members = [m for m in MEMBERS if mult["binds"] or not m.endswith(":b") and not m.startswith("fixed")]
        order = protocol.rotated(members, k)
        blk = {"block": k, "order": order, "runs": {}, "started": time.time()}
        self.st["blocks"].append(blk)
        log(f"block {k}: {' '.join(order)}")
        for m in order:
            kind, _, arg = m.partition(":")
            name = f"b{k}-{m.replace(':', '-')}"
            if kind == "fixed":
                r = self.run(name, "fixed", rate=self.rates[int(arg)], abort_after_s=a.level)
            elif kind in ("model", "pid"):
                r = self.run(name, kind, mult=mult["binding"] if arg == "b" else mult["nonbinding"])
            else:
                r = self.run(name, kind)
            if r is not None:
                blk["runs"][m] = r["name"]
            self.bench.save()
        blk["ended"] = time.time()
        blk["figures"] = block_figures(self.bench.results, blk, mult)
        self.bench.save()
        log(f"block {k} done: " + ", ".join(f"{k2} {v:.2f}" for k2, v in blk["figures"].items()
                                            if isinstance(v, float)))
        return blk


def block_figures(res: dict, blk: dict, mult: dict) -> dict:
    """One block's figures: the oracle off its fixed rates, each controller against the setpoint, the
    oracle's speed and the fixed rate at its own achieved mean; the non-binding time ratios."""
    runs = {m: res["runs"][n] for m, n in blk["runs"].items()}
    f: dict = {}
    fixed = [(r["rate"], r["ratio"]) for m, r in runs.items() if m.startswith("fixed") and r.get("ratio")]
    if "unthrottled" in runs:
        u = runs["unthrottled"]
        f["unthrottled_ratio"] = u["ratio"]
        u_time = u["migration"]["duration_s"]
    if mult["binds"]:
        orc = protocol.oracle(fixed, mult["binding"])
        f["oracle_rate"] = orc["rate"]
        f["oracle_bracket"] = orc["bracket"]
        f["oracle_side"] = orc["side"]
        for c in ("model", "pid"):
            r = runs.get(f"{c}:b")
            if not r:
                continue
            f[f"{c}_mean_over_sp"] = r["sp_ratio"]
            f[f"{c}_speed_over_oracle"] = r["rate"] / orc["rate"] if orc["rate"] else None
            at = protocol.latency_at_rate(fixed, r["rate"])
            f[f"{c}_fixed_at_own_rate_ratio"] = at
            f[f"{c}_minus_fixed_at_own_rate"] = r["ratio"] - at if at is not None and r["ratio"] else None
    for c in ("model", "pid"):
        r = runs.get(f"{c}:nb")
        if r and "unthrottled" in runs:
            f[f"{c}_nb_time_over_unthrottled"] = r["migration"]["duration_s"] / u_time
            # the copy alone: the delta phase after it varies with the backlog the load built meanwhile
            f[f"{c}_nb_copy_over_unthrottled"] = r["migration"]["snapshot_s"] / u["migration"]["snapshot_s"]
            f[f"{c}_nb_mean_over_sp"] = r["sp_ratio"]
    if "alone" in runs:
        f["alone_ratio"] = runs["alone"]["ratio"]
    return f


def run(bench: Bench) -> dict:
    s = Stable(bench)
    s.calibrate()
    deadline = bench.args.until
    for k in range(1, bench.args.blocks + 1):
        est = (s.st["blocks"][-1]["ended"] - s.st["blocks"][-1]["started"]) if s.st["blocks"] else 600
        if deadline and time.time() + est > deadline:
            log(f"stopping before block {k}: it would end after --until")
            break
        s.block(k)
    return s.st


# --- the report -------------------------------------------------------------------------------------------

def _f(v, nd=2):
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def report(res: dict) -> str:
    st = res.get("stable")
    if not st:
        return ""
    cal, out = st["calibration"], []
    runs = res["runs"]
    out.append(f"stable plant: {res['config'].get('load')} load at {cal.get('offered_tps')} tps "
               f"(capacity {_f(cal.get('capacity_tps'), 1)} tps under {res['config'].get('cpu_per_node')} CPU per "
               f"node, period {res['config'].get('cpu_period', 0) * 1000:g} ms); tenant {(cal.get('data_bytes') or 0) / MB:.0f} MB")
    for q in cal.get("quota_stall", []):
        out.append(f"  quota stall probe at {q['period_s'] * 1000:g} ms: max {ms(q['max_gap_s'])} ms, "
                   f"p99 {ms(q['p99_gap_s'])} ms off the CPU")
    if cal.get("spread"):
        reps = [runs[n] for n in cal["repeats"]]
        out.append(f"calibration: {len(reps)} repeats of {mbs(cal['repeat_rate'])} MB/s: during the copy "
                   + ", ".join(ms(r.get("latency_s") or r["copy"]["mean_s"]) for r in reps)
                   + f" ms ({cal.get('stat', 'mean')} of the seconds); spread {cal['spread']['spread']:.1%} "
                   + f"({'within' if cal['spread']['ok'] else 'NOT within'} 5 %); as multiples of each run's own: "
                   + ", ".join(f"{r.get('ratio_own', r['ratio']):.2f}" for r in reps)
                   + f" (spread {cal['ratio_spread']['spread']:.1%}); "
                   + (f"achieved rates spread {cal['rate_spread']['spread']:.1%}, the curve's elasticity there "
                      f"{_f(cal['elasticity'])}, corrected to one rate {cal['rate_corrected']['spread']:.1%}; "
                      if cal.get("rate_spread") else "")
                   + f"the load's own latency {ms(cal['load_latency_median_s'])} ms")
        m = cal["multiples"]
        out.append(f"setpoints: binding {m['binding']:g}x the load's own latency, non-binding {m['nonbinding']:g}x")
    rej = st["rejected"]
    n_load = sum(1 for r in rej if r["why"].startswith("achieved"))
    n_lat = sum(1 for r in rej if r["why"].startswith("the load's own"))
    out.append(f"runs rejected by the validity gate: {len(rej)} ({n_load} a second off the offered load, {n_lat} the "
               f"load's own latency off its calibration median, {len(rej) - n_load - n_lat} other); runs left out "
               f"after {res['config'].get('max_attempts')} attempts: {len(st.get('invalid', []))}")
    blocks = [b for b in st["blocks"] if b.get("figures")]
    if not blocks:
        return "\n".join(out)
    cols = [("oracle MB/s", "oracle_rate", 1 / MB), ("model mean/sp", "model_mean_over_sp", 1),
            ("model speed/oracle", "model_speed_over_oracle", 1), ("pid mean/sp", "pid_mean_over_sp", 1),
            ("pid speed/oracle", "pid_speed_over_oracle", 1),
            ("model - fixed@rate", "model_minus_fixed_at_own_rate", 1), ("pid - fixed@rate", "pid_minus_fixed_at_own_rate", 1),
            ("model nb time/unthr", "model_nb_time_over_unthrottled", 1), ("pid nb time/unthr", "pid_nb_time_over_unthrottled", 1),
            ("model nb copy/unthr", "model_nb_copy_over_unthrottled", 1), ("pid nb copy/unthr", "pid_nb_copy_over_unthrottled", 1),
            ("alone/own", "alone_ratio", 1)]
    rows = []
    for b in blocks:
        fg = b["figures"]
        br = fg.get("oracle_bracket")
        rows.append([b["block"]] + [_f(fg.get(k) * s if fg.get(k) is not None else None) for _, k, s in cols]
                    + [f"{mbs(br[0])}-{mbs(br[1])}" if br else (fg.get("oracle_side") or "-")])
    summ = []
    for label, fn in (("median", "median"), ("min", "min"), ("max", "max")):
        summ.append([label] + [_f((protocol.summary([b["figures"].get(k) for b in blocks])[fn] or None) and
                                  protocol.summary([b["figures"].get(k) for b in blocks])[fn] * s)
                               for _, k, s in cols] + [""])
    if cal.get("spread") and not cal["spread"]["ok"]:
        out.append("the calibration did NOT agree within 5 %: by the protocol's rule the blocks below judge no "
                   "controller; they show what this plant resolves")
    out.append(table(["block"] + [c[0] for c in cols] + ["oracle bracket MB/s"], rows + summ,
                     "blocks (ratios; mean/sp goal 0.9-1.1, speed goal >= 0.9, nb time goal <= 1.15)"))
    get = lambda k: [b["figures"].get(k) for b in blocks]  # noqa: E731
    d = protocol.paired(get("model_mean_over_sp"), get("pid_mean_over_sp"))
    e = protocol.paired(get("model_speed_over_oracle"), get("pid_speed_over_oracle"))
    g = protocol.paired(get("model_nb_time_over_unthrottled"), get("pid_nb_time_over_unthrottled"))
    out.append("paired, model - PID within blocks: mean/sp " + _pd(d) + "; speed/oracle " + _pd(e)
               + "; non-binding time/unthrottled " + _pd(g))
    out.append("goals met: binding mean within +-10 %: model " + protocol.met(get("model_mean_over_sp"), 0.9, 1.1)
               + ", PID " + protocol.met(get("pid_mean_over_sp"), 0.9, 1.1)
               + "; speed >= 0.9x oracle: model " + protocol.met(get("model_speed_over_oracle"), 0.9, 1e9)
               + ", PID " + protocol.met(get("pid_speed_over_oracle"), 0.9, 1e9)
               + "; non-binding <= 1.15x: model " + protocol.met(get("model_nb_time_over_unthrottled"), 0, 1.15)
               + ", PID " + protocol.met(get("pid_nb_time_over_unthrottled"), 0, 1.15))
    return "\n".join(out)


def _pd(s: dict) -> str:
    if not s["n"]:
        return "-"
    return f"median {s['median']:+.2f} ({s['min']:+.2f} to {s['max']:+.2f}, n={s['n']})"


def series(res: dict) -> dict:
    """Each stable run's per-second series, compact: [t from the load's start s, offered tps, achieved
    tps, mean latency ms] from its load file (first_time: the first second's UTC end), and the copy's
    window (unix times); for docs/data beside results.json."""
    import json
    from pathlib import Path
    out = {}
    if "stable" not in res:
        return out
    runs = dict(res["runs"])
    where = next((Path(r["harness_path"]).parent for r in runs.values() if r.get("harness_path")), None)
    for rej in res["stable"]["rejected"]:  # the rejected attempts' seconds too: what the gate saw
        if where is not None:
            runs.setdefault(rej["name"], {"harness_path": str(where / f"{rej['name']}.harness.jsonl"),
                                          "rejected": rej["why"]})
    for name, run in runs.items():
        path = Path(run.get("harness_path", ""))
        if not path.exists():
            continue
        rows, first = [], None
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            lat = r.get("latency_mean_s")
            first = first or r.get("time")
            rows.append([r["t_s"], round(r.get("offered_tps") or 0, 1), round(r.get("achieved_tps") or 0, 1),
                         round(lat * 1000, 2) if lat is not None else None])
        mig = run.get("migration") or {}
        out[name] = {"first_time": first, "seconds": rows, "rejected": run.get("rejected"),
                     "copy": [mig.get("snapshot_start"), mig.get("snapshot_end")]}
    return out
