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
    reason: str       # explore | peak | refine | climb | descend | thrashing
    peak: float | None = None  # the fitted parabola's peak, when it has one


class MplController:
    FLOOR = 0.02  # the least weight an MPL once measured keeps

    def __init__(self, lo: int = 1, hi: int = 16, start: int = 4, fade: float = 0.75, max_step: int = 4,
                 thrash_drop: float = 0.15, tie: float = 0.05) -> None:
        if not 1 <= lo <= hi:
            raise ValueError("need 1 <= lo <= hi")
        self.lo, self.hi = lo, hi
        self.mpl = min(hi, max(lo, start))
        self.fade = fade
        self.max_step = max_step
        self.thrash_drop = thrash_drop
        self.tie = tie
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

    def _ties(self) -> tuple[int, int] | None:
        """The lowest and highest MPL whose throughput is within `tie` of the best: on a flat
        stretch the measurements cannot tell these apart, so the search must look beyond both."""
        avg = self.averages()
        if not avg:
            return None
        top = max(avg.values())
        ties = [m for m, t in avg.items() if t >= (1 - self.tie) * top]
        return min(ties), max(ties)

    @property
    def explored(self) -> bool:
        """True once the search has seen enough of the range to trust a "no MPL is fast enough"."""
        if self.lo == self.hi:
            return bool(self.tried)
        ties = self._ties()
        if ties is None or len(self.tried) < min(3, self.hi - self.lo + 1):
            return False
        lo_t, hi_t = ties
        # The best MPLs have a tried MPL below and above them that does clearly worse, or sit at a bound.
        below = lo_t == self.lo or any(t < lo_t for t in self.tried)
        above = hi_t == self.hi or any(t > hi_t for t in self.tried)
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
        # The whole MPL nearest the goal on the log2 scale the parabola is fitted on (a peak at 1.46
        # is nearer 2 than 1 there), at most max_step away from the current one.
        goal = min(self.hi, max(self.lo, goal))
        fl, ce = max(self.lo, math.floor(goal)), min(self.hi, math.ceil(goal))
        target = min((fl, ce), key=lambda m: abs(math.log2(m) - math.log2(goal)))
        return self._clamp(cur + max(-self.max_step, min(self.max_step, target - cur)))

    def _decide(self, cur: int, tps: float) -> MplDecision:
        avg = self.averages()
        # Thrashing: a lower MPL did clearly better than this one did just now. Back off to it.
        lower = {m: t for m, t in avg.items() if m < cur}
        if lower:
            m_best, t_best = max(lower.items(), key=lambda kv: kv[1])
            if tps < (1 - self.thrash_drop) * t_best:
                return MplDecision(m_best, "thrashing")
        if not self.explored:
            # Bracket the best MPL first: one tried MPL above it and one below (or a bound). Without
            # that, a flat stretch of the curve (within the noise) can send the search the wrong way
            # for good, e.g. upwards from 6 on a curve whose peak is at 2.
            return MplDecision(self._explore(avg), "explore")
        fit = self._fit()
        if fit is None:  # fewer than 3 MPLs and yet explored: the range is that small
            return MplDecision(max(avg, key=lambda k: avg[k]), "peak")
        a, b, _c = fit
        x = math.log2(cur)
        if a < 0:
            peak = 2 ** min(math.log2(self.hi), max(math.log2(self.lo), -b / (2 * a)))
            nxt = self._toward(cur, peak)
            best = max(avg, key=lambda k: avg[k])
            if nxt in avg and avg[nxt] < avg[best]:
                # The parabola is a rough shape (real curves are skewed): where it points was measured
                # worse than the best MPL measured, so trust the measurement.
                nxt = self._toward(cur, best)
            if nxt == cur:
                probe = self._refine(cur, avg)
                if probe is not None:
                    return MplDecision(probe, "refine", round(peak, 2))
            return MplDecision(nxt, "peak" if nxt == cur else ("climb" if nxt > cur else "descend"), round(peak, 2))
        # No maximum inside (rising or inverted parabola): follow the slope at the current MPL.
        if 2 * a * x + b > 0:
            nxt, reason = self._toward(cur, cur * 2), "climb"
        else:
            nxt, reason = self._toward(cur, cur / 2), "descend"
        if nxt == cur:
            # At a bound the slope points out of the range: a curve that falls steeply and then
            # flattens (convex on log2) hides a peak between the bound and its tried neighbour.
            probe = self._refine(cur, avg)
            if probe is not None:
                return MplDecision(probe, "refine")
        return MplDecision(nxt, reason)

    def _explore(self, avg: dict[int, float]) -> int:
        """The next MPL to try while the best ones are not bracketed: twice the highest of them if
        nothing above was tried (first: a start in the middle of the range looks up first), else
        half the lowest."""
        lo_t, hi_t = self._ties()
        if hi_t < self.hi and not any(t > hi_t for t in self.tried):
            return min(self.hi, hi_t * 2)
        if lo_t > self.lo and not any(t < lo_t for t in self.tried):
            return max(self.lo, lo_t // 2)
        # Bracketed, but fewer than three MPLs measured (no curve to fit yet): one more, outside them.
        if min(self.tried) > self.lo:
            return max(self.lo, min(self.tried) // 2)
        if max(self.tried) < self.hi:
            return min(self.hi, max(self.tried) * 2)
        return max(avg, key=lambda k: avg[k])

    def _refine(self, cur: int, avg: dict[int, float]) -> int | None:
        """Holding at the best MPL measured, with an untried gap to a tried neighbour (the better
        neighbour's side first): probe the gap's middle (geometric). The coarse search doubles and halves, and a skewed curve can
        hide its peak in such a gap where the parabola does not point."""
        if cur != max(avg, key=lambda k: avg[k]):
            return None
        below = max((t for t in self.tried if t < cur), default=None)
        above = min((t for t in self.tried if t > cur), default=None)
        near = [n for n in (below, above) if n is not None]
        if not near:
            return None
        for n in sorted(near, key=lambda k: -avg[k]):  # the better neighbour's side first
            if abs(n - cur) <= 1:
                continue
            mid = round(math.sqrt(n * cur))
            if mid in (n, cur):
                mid = cur + (1 if n > cur else -1)
            mid = self._clamp(cur + max(-self.max_step, min(self.max_step, mid - cur)))
            if mid not in self.tried:
                return mid
        return None

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
