"""The statistics every bench reports: percentiles, and the median with its spread over repeats."""

from __future__ import annotations

import math
import statistics


def pct(values, q: float) -> float:
    """The q-quantile (0..1) of `values`, linearly interpolated between the two nearest ranks.
    NaN for no values (a float, so callers can format or compare it; see `num` for JSON)."""
    s = sorted(values)
    if not s:
        return math.nan
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def num(v: float | None, digits: int | None = None) -> float | None:
    """A figure for JSON, which has no NaN or infinity: those (and None) become null."""
    if v is None or math.isnan(v) or math.isinf(v):
        return None
    return v if digits is None else round(v, digits)


def spread(values, digits: int = 3) -> dict:
    """Median, min and max of the repeats' figures, ignoring the ones that are missing (None, NaN)."""
    vals = [v for v in values if num(v) is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(vals), digits), "min": round(min(vals), digits),
            "max": round(max(vals), digits)}


def fmt_spread(s: dict, unit: str = "") -> str:
    """'median (min-max)' for a `spread`, '-' when there was none."""
    return f"{s['median']}{unit} ({s['min']}-{s['max']})" if s["median"] is not None else "-"
