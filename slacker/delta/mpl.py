"""Adaptive multiprogramming level for the concurrent applier (after Middle-R's load control).

Each measurement period yields (MPL, throughput) while the applier is saturated.
The controller fits throughput = a*m^2 + b*m + c over recent periods by weighted
least squares whose weights fade with age, moves the MPL toward the fitted peak,
backs off hard when throughput fell well below what a lower MPL achieved (the
thrashing region), and never leaves [lo, hi]. Pure logic: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class MplDecision:
    mpl: int          # the MPL to use next
    reason: str       # explore | peak | climb | descend | thrashing | hold
    peak: float | None = None  # the fitted parabola's peak, when it has one


class MplController:
    FLOOR = 0.02  # the least weight an MPL once measured keeps

    def __init__(self, lo: int = 1, hi: int = 16, start: int = 4, fade: float = 0.75, max_step: int = 4,
                 thrash_drop: float = 0.15) -> None:
        if not 1 <= lo <= hi:
            raise ValueError("need 1 <= lo <= hi")
        self.lo, self.hi = lo, hi
        self.mpl = min(hi, max(lo, start))
        self.fade = fade
        self.max_step = max_step
        self.thrash_drop = thrash_drop
        self._points: dict[int, list[float]] = {}  # mpl -> [sum of weight*tps, sum of weight]
        self.tried: set[int] = set()
        self.history: list[tuple[int, float, MplDecision]] = []

    # --- what the controller has learnt ------------------------------------------------------
    def averages(self) -> dict[int, float]:
        """Fading-weighted mean throughput per MPL seen."""
        return {m: w_tps / w for m, (w_tps, w) in self._points.items() if w > 0}

    def best(self) -> tuple[int, float] | None:
        avg = self.averages()
        if not avg:
            return None
        m = max(avg, key=lambda k: avg[k])
        return m, avg[m]

    @property
    def explored(self) -> bool:
        """True once the search has seen enough of the range to trust a "no MPL is fast enough"."""
        if self.lo == self.hi:
            return bool(self.tried)
        b = self.best()
        if b is None or len(self.tried) < min(3, self.hi - self.lo + 1):
            return False
        m = b[0]
        # The best MPL has a tried neighbour on each side that it beats, or sits at a bound.
        below = any(t < m for t in self.tried) or m == self.lo
        above = any(t > m for t in self.tried) or m == self.hi
        return below and above

    # --- the loop --------------------------------------------------------------------------------
    def observe(self, mpl: int, tps: float) -> MplDecision:
        """One measurement period at `mpl` achieved `tps`; returns the MPL for the next period."""
        # Fading memory, per MPL: old periods count less and less, but an MPL once tried keeps a
        # small weight, so a stable load (one MPL for a long time) still leaves a curve to fit.
        for m, acc in self._points.items():
            acc[0] *= self.fade
            acc[1] *= self.fade
            if acc[1] < self.FLOOR:
                acc[0] *= self.FLOOR / acc[1]
                acc[1] = self.FLOOR
        acc = self._points.setdefault(mpl, [0.0, 0.0])
        acc[0] += max(0.0, float(tps))
        acc[1] += 1.0
        self.tried.add(mpl)
        d = self._decide(mpl, tps)
        d.mpl = self._clamp(d.mpl)
        self.mpl = d.mpl
        self.history.append((mpl, tps, d))
        return d

    def _clamp(self, m: float) -> int:
        return int(min(self.hi, max(self.lo, round(m))))

    def _toward(self, cur: int, goal: float) -> int:
        delta = goal - cur
        step = max(-self.max_step, min(self.max_step, delta))
        if abs(step) < 0.5:
            return cur
        return self._clamp(cur + step)

    def _decide(self, cur: int, tps: float) -> MplDecision:
        avg = self.averages()
        # Thrashing: a lower MPL did clearly better than this one did just now. Back off to it.
        lower = {m: t for m, t in avg.items() if m < cur}
        if lower:
            m_best, t_best = max(lower.items(), key=lambda kv: kv[1])
            if tps < (1 - self.thrash_drop) * t_best:
                return MplDecision(m_best, "thrashing")
        fit = self._fit()
        if fit is None:
            return MplDecision(self._explore(cur, avg), "explore")
        a, b, _c = fit
        x = math.log2(cur)
        if a < 0:
            peak = 2 ** min(math.log2(self.hi), max(math.log2(self.lo), -b / (2 * a)))
            nxt = self._toward(cur, peak)
            return MplDecision(nxt, "peak" if nxt == cur else ("climb" if nxt > cur else "descend"), round(peak, 2))
        # No maximum inside (rising or inverted parabola): follow the slope at the current MPL.
        if 2 * a * x + b > 0:
            return MplDecision(self._toward(cur, cur * 2), "climb")
        return MplDecision(self._toward(cur, cur / 2), "descend")

    def _explore(self, cur: int, avg: dict[int, float]) -> int:
        ms = sorted(avg)
        if len(ms) == 1:
            return cur * 2 if cur * 2 <= self.hi else max(self.lo, cur // 2)
        # Two MPLs seen: keep going the way throughput rose, otherwise try the other side.
        lo_m, hi_m = ms[0], ms[-1]
        if avg[hi_m] >= avg[lo_m]:
            return hi_m * 2 if hi_m < self.hi else (lo_m + hi_m) // 2
        return max(self.lo, lo_m // 2) if lo_m > self.lo else (lo_m + hi_m) // 2

    def _fit(self) -> tuple[float, float, float] | None:
        """Weighted least squares for tps = a x^2 + b x + c with x = log2(MPL), in MPL units of the peak.

        Throughput against log2(MPL) is much closer to a parabola than against MPL itself (it
        rises fast at small MPLs and falls slowly), so the fitted peak lands where the data
        says. None with fewer than 3 distinct MPLs.
        """
        if len(self._points) < 3:
            return None
        sw = [0.0] * 5
        sy = [0.0] * 3
        for m, (w_tps, w) in self._points.items():
            x = math.log2(m)
            y = w_tps / w
            p = 1.0
            for k in range(5):
                sw[k] += w * p
                if k < 3:
                    sy[k] += w * p * y
                p *= x
        mat = [[sw[0], sw[1], sw[2]], [sw[1], sw[2], sw[3]], [sw[2], sw[3], sw[4]]]
        det = _det3(mat)
        if abs(det) < 1e-12:
            return None
        sol = []
        for j in range(3):
            mj = [row[:] for row in mat]
            for i in range(3):
                mj[i][j] = sy[i]
            sol.append(_det3(mj) / det)
        c, b, a = sol
        return a, b, c


def _det3(m: list[list[float]]) -> float:
    return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
