"""The stable plant's protocol (issue 40), its pure parts: the validity gates, the oracle read off the
fixed rates' monotone latency-rate curve, the choice of the setpoints, the blocks' rotated order and the
paired statistics over blocks. bench/benches/setpoint/stable.py runs it; tests/unit/test_setpoint_protocol.py
checks it.

Latencies here are ratios: a run's mean latency during the copy divided by the load's own latency
measured just before that run, so runs whose load drifted a little stay comparable, and a setpoint
is a multiple of the load's own latency.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .analysis import isotonic

LOAD_TOLERANCE = 0.02      # achieved = offered +-2 % over the window before the copy, no lasting shortfall
LATENCY_TOLERANCE = 0.10   # the load's own latency within +-10 % of its calibration median
CALIBRATION_SPREAD = 0.05  # repeats of one fixed rate within 5 % of their mean latency
BINDING_MARGIN = 1.3       # binding: the unthrottled copy's mean >= 1.3x the setpoint
MIN_ORACLE_COPY_S = 60.0   # binding: the oracle's copy lasts >= 60 s
RATE_JITTER = 0.02         # a fixed rate's achieved mean between runs (12.3-12.75 MB/s asked 13, 2026-11-27)
# The steepest curve a 5 % calibration can resolve: where latency moves more than this times the
# achieved rate's jitter, repeats of one rate differ by more than 5 % however still the plant is.
MAX_ELASTICITY = CALIBRATION_SPREAD / RATE_JITTER


@dataclass(frozen=True)
class Gate:
    ok: bool
    why: str
    worst: float  # the worst relative deviation seen


def load_gate(seconds: list[tuple[float, float, float]], tolerance: float = LOAD_TOLERANCE,
              min_seconds: int = 5, max_short_run: int = 2) -> Gate:
    """The load is not saturated: over the window (offered tps, achieved tps, interval s per second)
    achieved = offered within `tolerance` plus the two transactions the window's two ends can shift,
    and no more than `max_short_run` seconds in a row each short of offered by more than `tolerance`
    plus two transactions. A second short then caught up on (constant arrivals served late after a
    stall of the shared machine) is the machine's noise, which the load's own latency measures; a
    shortfall that lasts is a queue that grows: saturation. (Judged per second alone, one stall of a
    box with a load average of 40 rejected every run: 4 of 4 attempts of a calibration rate.)"""
    if len(seconds) < min_seconds:
        return Gate(False, f"only {len(seconds)} seconds of load before the copy (need {min_seconds})", 1.0)
    off = sum(o * i for o, _, i in seconds)
    ach = sum(a * i for _, a, i in seconds)
    total = abs(ach - off) / off
    worst, run, longest, at = total, 0, 0, None
    for offered, achieved, interval in seconds:
        short = (offered - achieved) / offered
        worst = max(worst, abs(achieved - offered) / offered)
        if short > tolerance + 2.0 / (offered * interval):
            run += 1
            if run > longest:
                longest, at = run, (offered, achieved)
        else:
            run = 0
    if total > tolerance + 2.0 / off:
        return Gate(False, f"achieved {ach:.0f} of {off:.0f} offered transactions over the window "
                           f"(allowed +-{tolerance:.0%})", worst)
    if longest > max_short_run:
        return Gate(False, f"achieved {at[1]:.1f} of {at[0]:g} offered tps, short {longest} seconds in a row "
                           f"(allowed {max_short_run})", worst)
    return Gate(True, "", worst)


def latency_gate(latency_s: float | None, calibration_s: float, tolerance: float = LATENCY_TOLERANCE) -> Gate:
    """The load's own latency just before a run within `tolerance` of its calibration median."""
    if latency_s is None:
        return Gate(False, "no latency measured before the copy", 1.0)
    dev = abs(latency_s / calibration_s - 1)
    if dev > tolerance:
        return Gate(False, f"the load's own latency {latency_s * 1000:.1f} ms is {dev:.0%} off its calibration "
                           f"median {calibration_s * 1000:.1f} ms (allowed +-{tolerance:.0%})", dev)
    return Gate(True, "", dev)


def spread(values: list[float]) -> float:
    """The largest deviation from the mean, relative to the mean."""
    m = statistics.fmean(values)
    return max(abs(v - m) for v in values) / m


def calibration(values: list[float], limit: float = CALIBRATION_SPREAD) -> dict:
    """Repeats of one fixed rate: do they agree within `limit` of their mean?"""
    s = spread(values)
    return {"n": len(values), "mean": statistics.fmean(values), "spread": s, "ok": len(values) >= 2 and s <= limit,
            "limit": limit}


def latency_at_rate(points: list[tuple[float, float]], rate: float) -> float | None:
    """The monotone curve's latency at `rate` (linear between measured rates); None outside them."""
    curve = isotonic(points)
    if not curve or rate < curve[0][0] or rate > curve[-1][0]:
        return None
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= rate <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (rate - x0) / (x1 - x0)
    return curve[-1][1]


def elasticity(points: list[tuple[float, float]], rate: float) -> float | None:
    """How steep the monotone curve is at `rate`: d ln latency / d ln rate on the segment holding it.
    Repeats of one fixed rate whose achieved rates differ by x % should differ in latency by about
    this times x %, whatever the plant's own noise; None outside the measured rates."""
    curve = isotonic(points)
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= rate <= x1 and x1 > x0 and y0 > 0 and y1 > 0:
            return math.log(y1 / y0) / math.log(x1 / x0)
    return None


def rate_corrected(runs: list[tuple[float, float]], points: list[tuple[float, float]], to_rate: float) -> list[float]:
    """Each run's (achieved rate, latency) moved along the monotone curve of `points` to `to_rate`: what
    is left of the repeats' spread is the plant's, not the achieved rates' (a run outside the curve's
    rates is left as measured)."""
    out = []
    for rate, lat in runs:
        here, there = latency_at_rate(points, rate), latency_at_rate(points, to_rate)
        out.append(lat * there / here if here and there else lat)
    return out


def oracle(points: list[tuple[float, float]], target: float) -> dict:
    """The fixed rate whose latency meets `target`, read off the monotone (isotonic) curve of the
    measured (rate, latency) points, with the measured rates that bracket it. Not bracketed (every
    rate above or below the target) -> rate None and the side the target lies on."""
    curve = isotonic(points)
    out = {"rate": None, "bracket": None, "curve": curve, "side": None}
    if len(curve) < 2:
        out["side"] = "too few rates"
        return out
    if target < curve[0][1]:
        out["side"] = "below the lowest rate's latency"
        return out
    if target > curve[-1][1]:
        out["side"] = "above the highest rate's latency"
        return out
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if y0 <= target <= y1:
            rate = x0 if y1 == y0 else x0 + (x1 - x0) * (target - y0) / (y1 - y0)
            lo = max((x for x, _ in points if x <= rate), default=x0)
            hi = min((x for x, _ in points if x >= rate), default=x1)
            out.update(rate=rate, bracket=(lo, hi))
            return out
    return out


def choose_multiples(points: list[tuple[float, float]], unthrottled: tuple[float, float], size_bytes: float,
                     min_copy_s: float = MIN_ORACLE_COPY_S, margin: float = BINDING_MARGIN,
                     max_elasticity: float | None = MAX_ELASTICITY) -> dict:
    """The setpoints, as multiples of the load's own latency, from the calibration's fixed rates and
    unthrottled copy ((rate, latency ratio) each): binding = the largest multiple whose oracle copy
    still lasts `min_copy_s`, that the unthrottled copy exceeds by `margin`, and that lies where the
    curve is no steeper than `max_elasticity` (past a knee the oracle's latency is not reproducible:
    there the largest multiple is the latency where the steep part begins); non-binding = twice what
    the unthrottled copy costs."""
    u_rate, u_ratio = unthrottled
    cap_rate = size_bytes / min_copy_s
    curve = isotonic(points + [unthrottled])
    at_cap = latency_at_rate(points + [unthrottled], min(cap_rate, u_rate))
    if at_cap is None and curve and cap_rate < curve[0][0]:
        at_cap = curve[0][1]  # slower than every measured rate: no more than the slowest one costs
    by_margin = u_ratio / margin
    by_knee = None
    if max_elasticity is not None:
        for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
            if x1 > x0 and y0 > 0 and math.log(y1 / y0) / math.log(x1 / x0) > max_elasticity:
                by_knee = y0  # the steep part starts at x0
                break
    binding = min(v for v in (by_margin, at_cap, by_knee) if v is not None)
    binding = int(binding * 20) / 20  # down to a 0.05 step
    return {"binding": binding, "nonbinding": round(2 * u_ratio, 2), "by_margin": by_margin,
            "by_copy_time": at_cap, "by_knee": by_knee, "max_elasticity": max_elasticity, "cap_rate": cap_rate,
            "binds": binding > 1.0}


def rotated(members: list, block: int) -> list:
    """Block `block` (1-based) runs the members in order rotated by block-1."""
    k = (block - 1) % len(members) if members else 0
    return members[k:] + members[:k]


def summary(values: list[float | None]) -> dict:
    """Median and range over blocks (None values, e.g. an unbracketed oracle, are counted, not used)."""
    v = [x for x in values if x is not None]
    return {"n": len(v), "missing": len(values) - len(v), "median": statistics.median(v) if v else None,
            "min": min(v) if v else None, "max": max(v) if v else None}


def paired(a: list[float | None], b: list[float | None]) -> dict:
    """a - b within each block (blocks where either is missing are left out), summarised."""
    return summary([x - y if x is not None and y is not None else None for x, y in zip(a, b)])


def met(values: list[float | None], lo: float, hi: float) -> str:
    """How many of the blocks' values fall in [lo, hi], as 'k of n'."""
    v = [x for x in values if x is not None]
    return f"{sum(1 for x in v if lo <= x <= hi)} of {len(v)}"


# --- the OLTP protocol (`--only oltp`, bench/benches/setpoint/oltp.py): its pure parts ----------------------------

def interval(values: list[float | None], level: float = 0.9) -> dict:
    """Median and the central `level` interval over blocks (percentiles by linear interpolation between
    the sorted values; with 5 blocks the 90 % interval runs from between the two lowest to between the
    two highest). None values (a run that did not happen) are counted, not used."""
    v = sorted(x for x in values if x is not None)
    out = {"n": len(v), "missing": len(values) - len(v), "median": None, "lo": None, "hi": None, "level": level}
    if not v:
        return out

    def pct(q: float) -> float:
        pos = q * (len(v) - 1)
        i = int(math.floor(pos))
        j = min(i + 1, len(v) - 1)
        return v[i] + (v[j] - v[i]) * (pos - i)

    out.update(median=statistics.median(v), lo=pct((1 - level) / 2), hi=pct(1 - (1 - level) / 2))
    return out


def best_oracle(fixed: list[tuple[float, float]], setpoint_s: float) -> float | None:
    """The fastest fixed rate of the block whose mean latency during the copy met the setpoint
    ((achieved rate, mean latency s) each); None when none met it."""
    met_rates = [rate for rate, lat in fixed if lat is not None and lat <= setpoint_s]
    return max(met_rates) if met_rates else None


def oracle_rates(unthrottled_rate: float, factors: list[float], own_s: float | None = None,
                 unthrottled_mean_s: float | None = None, setpoint_s: float | None = None) -> list[float]:
    """The block's fixed rates, around where the setpoint should bind. With the warm-up's latency known
    (the load's own `own_s`, `unthrottled_mean_s` during the unthrottled copy): multiples of the rate where
    the line in 1/latency from (0, 1/own) to (unthrottled rate, 1/its mean) crosses 1/setpoint -- a queue's
    latency falls in a line with the load it carries (M/M/1: 1/latency = (1 - utilisation) / service time),
    and an unthrottled copy that built a queue (its latency 1000x the load's) still places the crossing
    where the copy leaves the load its room, not at 0 as a line in latency does; a sharper knee sits lower,
    a gentler one higher, so the factors spread both ways. Rates at or above the unthrottled one are
    dropped (it is a candidate of its own). Without the warm-up's latency (or where the unthrottled copy
    stayed under the setpoint): `factors` are fractions of the unthrottled rate."""
    if (own_s is not None and unthrottled_mean_s is not None and setpoint_s is not None
            and unthrottled_mean_s > setpoint_s > own_s):
        crossing = unthrottled_rate * (1 / own_s - 1 / setpoint_s) / (1 / own_s - 1 / unthrottled_mean_s)
        rates = sorted({crossing * f for f in factors if f > 0 and crossing * f < 0.95 * unthrottled_rate})
        if rates:
            return rates
        return [crossing]
    return sorted({unthrottled_rate * min(f, 0.95) for f in factors if f > 0})


def nonbinding_setpoint(own_s: float, mult: float, unthrottled_mean_s: float | None, margin: float = 1.25) -> float:
    """A setpoint that does not bind: `mult` times the load's own latency, raised to `margin` times the
    latency the unthrottled warm-up copy caused where that is higher (on a load whose latency an
    unthrottled copy multiplies, a fixed multiple of its own would bind)."""
    return max(mult * own_s, margin * unthrottled_mean_s if unthrottled_mean_s else 0.0)


def block_ratios(runs: dict[str, dict], setpoint_s: float, arms: list[str]) -> dict:
    """One block's paired ratios from its moves' summaries ({member: {"mean_s", "rate", "time_s"}}):
    per controller arm at the binding setpoint, mean / setpoint and speed / the best oracle rate that
    met it (the fixed rates and the unthrottled move are the oracle's candidates); per non-binding arm,
    time / the unthrottled move's time. A move that did not happen gives None."""
    fixed = [(r["rate"], r["mean_s"]) for m, r in runs.items() if (m.startswith("fixed") or m == "unthrottled") and r]
    best = best_oracle(fixed, setpoint_s)
    out: dict = {"oracle_rate": best, "setpoint_s": setpoint_s}
    for arm in arms:
        r = runs.get(arm)
        out[f"{arm}:mean/sp"] = r["mean_s"] / setpoint_s if r and r.get("mean_s") is not None else None
        out[f"{arm}:speed/oracle"] = r["rate"] / best if r and best and r.get("rate") else None
    u = runs.get("unthrottled")
    for m, r in runs.items():
        if m.endswith(":nb"):
            out[f"{m}:time/unthr"] = r["time_s"] / u["time_s"] if r and u and u.get("time_s") else None
            # a non-binding setpoint the unthrottled move went over did bind: its time is not comparable
            out[f"{m}:bound"] = bool(u and u.get("mean_s") and r.get("setpoint_s") and u["mean_s"] > r["setpoint_s"])
    return out


def recovery_s(seconds: list[tuple[float, float | None]], setpoint_s: float, step_at: float,
               hold: int = 3) -> float | None:
    """Seconds from `step_at` (the oltp bench passes the load step's end: while the doubled load alone
    fills the tenant no copy rate keeps the setpoint) until the latency is back under the setpoint and
    stays there `hold` seconds in a row ((second's end, mean latency s) each, in order): the end of the
    first second of that run, minus step_at. 0 when it never left; None when it was not back by the
    last second (the copy ended first, or it never came back)."""
    after = [(t, v) for t, v in seconds if t > step_at and v is not None]
    if not after:
        return None
    first_above = next((i for i, (_, v) in enumerate(after) if v > setpoint_s), None)
    if first_above is None:
        return 0.0
    for i in range(first_above, len(after) - hold + 1):
        if all(v <= setpoint_s for _, v in after[i:i + hold]):
            return after[i][0] - step_at
    return None


def agreement(a: dict[int, float], b: dict[int, float]) -> dict:
    """Two per-second latency series ({second: mean s}) over their common seconds: Pearson's
    correlation, the ratio of their means (a / b) and the median of the per-second ratios."""
    common = sorted(k for k in a if k in b and a[k] is not None and b[k] is not None and b[k] > 0)
    out = {"n": len(common), "correlation": None, "ratio_of_means": None, "median_ratio": None}
    if not common:
        return out
    xs, ys = [a[k] for k in common], [b[k] for k in common]
    out["ratio_of_means"] = statistics.fmean(xs) / statistics.fmean(ys)
    out["median_ratio"] = statistics.median(x / y for x, y in zip(xs, ys))
    if len(common) >= 3:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
        sy = math.sqrt(sum((y - my) ** 2 for y in ys))
        if sx > 0 and sy > 0:
            out["correlation"] = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)
    return out


def per_second(buckets: dict[int, tuple[float, float]], t0: float | None = None,
               t1: float | None = None) -> dict[int, float]:
    """{second: (transactions, summed latency s)} -> {second: mean latency s} within [t0, t1]."""
    return {k: s / n for k, (n, s) in sorted(buckets.items())
            if n > 0 and (t0 is None or k >= t0) and (t1 is None or k <= t1)}


def recovered(buckets: dict[int, tuple[float, float]], now: float, limit_s: float, window_s: float = 3.0) -> bool:
    """Whether the load is back on its own before the next move: its mean over the last `window_s` seconds on
    its own clock at or under `limit_s` (the binding setpoint, which the load alone sits under). An open-loop
    client times each transaction from its scheduled arrival, so a queue a move built in the client (its
    connections all busy) drains for seconds after the move ended; a move started on it is judged on the
    last move's queue."""
    mean = window_mean(buckets, now - window_s, now)
    return mean is not None and mean <= limit_s


def window_mean(buckets: dict[int, tuple[float, float]], t0: float, t1: float) -> float | None:
    """The transaction-weighted mean latency of the seconds in [t0, t1]."""
    sel = [(n, s) for k, (n, s) in buckets.items() if t0 <= k <= t1]
    n = sum(x for x, _ in sel)
    return sum(s for _, s in sel) / n if n else None
