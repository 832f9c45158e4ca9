"""The model controller (`--controller model`, experimental): an explicit, online model of latency
against copy rate.

The server is a queue: far below its knee the copy costs the tenants little, near it latency
climbs steeply. In the reciprocal, z = 1 / latency, that curve is close to a straight line that
falls with the copy rate x and reaches 0 at the knee (M/M/1: 1/y = (1 - x/K) / L0):

    z ≈ a − b·x        a = 1 / (the load's own latency L0),   knee K = a / b

Each step (docs/controller.md, "The control law"):

1. fit — pair the newest second's latency with the fastest rate the copy really moved (bytes the
   pipe sent, not its limit) over the last `lag` + 1 seconds, and update (a, b) by a Kalman filter
   with random-walk parameters (recursive least squares with per-parameter forgetting): `a` may
   move `load_change` a second, `b` forgets over `horizon_s`; an innovation beyond 3 sd counts as
   3 sd; five that agree in sign beyond their noise open `a` (the load stepped). Seconds the
   migration marks as not the copy's doing (slacker.controller.marks) are not fitted. One filter
   per lag 0..`max_lag`; the one that predicts best, while the rates move, is the loop's lag;
2. predict — the mean latency at x is bias / z(x), bias the running mean of latency over the
   model's (the mean of a noisy latency is over the reciprocal of its mean reciprocal; stalls count);
3. choose — `sure` is the fastest x with z(x) − margin·σ(x) ≥ bias / setpoint (σ(x): the
   parameters' uncertainty at x), `mean` the same with no margin. Over `mean`: down to it. Under
   `sure`: up to it, at most `rise` times the fastest rate seen with latency under the setpoint
   (over the last `horizon_s`; before any, the starting rate). Between:
   hold. A move smaller than a ramp (x3) or a cut without an overshoot (window under 2x the
   setpoint) goes 1/`smooth_s` of the way a second: the rate's own swings cost latency on a convex
   curve, and a steady rate is what the best fixed rate is. Stopped with the window under the
   setpoint while the model says the load alone is over: `a` is stale (a queue drained), its
   uncertainty goes back to the prior's.

Its state — the load's own latency, the knee, the rate the setpoint allows, the lag, the noise and
a confidence — is in `state()` (status, `--json`, the time series, the plot).
"""

from __future__ import annotations

import math
from collections import deque

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, LatencySample
from .pid import DEFAULT_GAINS, Gains, ThrottleController


CHANGE_N, CHANGE_SD = 5, 3.0  # the change test: this many innovations whose mean is this many sd off


class _Fit:
    """z = a − b·x with random-walk parameters (a Kalman filter on two parameters)."""

    def __init__(self, a: float, var_a: float, var_b: float) -> None:
        self.var_b = var_b  # the prior's: forgetting never makes the slope less known than that
        self.th = [a, 0.0]
        self.P = [[var_a, 0.0], [0.0, var_b]]
        self.n = 0
        self.recent: deque[float] = deque(maxlen=CHANGE_N)  # the last innovations, relative (the change test)

    def predict(self, x: float) -> tuple[float, float]:
        """(z at x, the parameters' variance of it)."""
        a, b = self.th
        P = self.P
        return a - b * x, P[0][0] - 2 * x * P[0][1] + x * x * P[1][1]

    def update(self, x: float, z: float, r: float, q_a: float, q_b: float) -> None:
        P = self.P
        P[0][0] += q_a
        P[1][1] = min(P[1][1] + q_b, self.var_b)
        zp, var = self.predict(x)
        e = z - zp
        s = var + r
        # A plant that moved (a load step, the disk busy elsewhere): the last innovations agree in sign
        # by more than their noise allows. Open the intercept by their mean's square so it moves now.
        self.recent.append(e)
        if len(self.recent) == self.recent.maxlen:
            m = sum(self.recent) / len(self.recent)
            if abs(m) > CHANGE_SD * math.sqrt(s / len(self.recent)):
                P[0][0] += m * m
                self.recent.clear()
                s = self.predict(x)[1] + r
        # Huber: an innovation beyond 3 sd (a stall, a burst) moves the fit as one at 3 sd.
        lim = 3.0 * math.sqrt(s)
        e = max(-lim, min(lim, e))
        phi = (1.0, -x)
        Pphi = (P[0][0] * phi[0] + P[0][1] * phi[1], P[1][0] * phi[0] + P[1][1] * phi[1])
        k = (Pphi[0] / s, Pphi[1] / s)
        self.th[0] = max(1e-3 * z, self.th[0] + k[0] * e)
        self.th[1] = max(0.0, self.th[1] + k[1] * e)  # the copy never makes the tenants faster
        for i in range(2):
            for j in range(2):
                P[i][j] -= k[i] * Pphi[j]
        self.n += 1


class ModelController(ThrottleController):
    """Rate where the fitted latency curve, with a margin for its uncertainty, meets the setpoint.
    The safety rules (failed or stale samples, empty windows, pause) are the PID's."""

    PRIOR_NOISE = 0.1  # cv² of one second's latency until measured (a 30 % sd: mid-range of real loads)
    MARKED_RISE = 4.0  # before any fitted second, the rate may go to this many times the starting rate
    RAMP_FROM = 3.0  # a rise to this many times the rate or more is a ramp: not smoothed
    OVER = 2.0  # a window this many times the setpoint is an overshoot: its cut is not smoothed
    SEARCH_TO = 4.0  # rates are searched up to this many times max (past it: unthrottled anyway)
    NOISE_MEMORY_S = 20.0  # the noise estimate's memory
    LAG_AFTER = 5  # seconds in which the rate moved before the lag is measured (until then: 2 s)
    LAG_MEMORY_S = 120.0  # the lag's measurement forgets over this

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        gains: Gains = DEFAULT_GAINS,  # unused; accepted so configs can pass them
        *,
        step_s: float = DEFAULT_STEP_S,
        initial_fraction: float = 0.1,
        max_lag: int = 5,
        horizon_s: float = 30.0,
        load_change: float = 0.05,
        margin: float = 0.5,
        rise: float = 4.0,
        smooth_s: float = 10.0,
        **safety: float,
    ) -> None:
        super().__init__(setpoint_s, max_rate_bytes_per_s, gains, step_s=step_s,
                         initial_fraction=initial_fraction, **safety)
        for label, value, lo, hi in (("horizon", horizon_s, 1.0, 1e5), ("load change", load_change, 0.0, 1.0),
                                     ("margin", margin, 0.0, 10.0), ("rise", rise, 1.0, 100.0),
                                     ("smoothing", smooth_s, 1e-3, 1e5)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not lo <= value <= hi:
                raise InvalidInput(f"invalid {label} {value!r}", f"it must be between {lo:g} and {hi:g}")
        if not isinstance(max_lag, int) or isinstance(max_lag, bool) or not 1 <= max_lag <= 30:
            raise InvalidInput(f"invalid maximum lag {max_lag!r}", "expected a whole number of steps, 1-30")
        self.max_lag, self.horizon_s, self.load_change = max_lag, float(horizon_s), float(load_change)
        self.margin, self.rise, self.smooth_s = float(margin), float(rise), float(smooth_s)
        self._initial = float(initial_fraction)
        self._reset_model()

    # --- the model ---------------------------------------------------------------------------

    def _reset_model(self) -> None:
        self._fit: _Fit | None = None  # made at the first usable sample
        self._z_prev: float | None = None  # the last fitted second's z (the lag's measurement)
        self._xcorr = [0.0] * (self.max_lag + 1)  # per lag: how latency's changes followed the rate's
        self._moves = 0  # seconds in which the rate moved enough to tell the lags apart
        self._lag = min(2, self.max_lag)
        self._flows: deque[float] = deque(maxlen=self.max_lag + 2)  # fraction of max moved, newest last
        self._marked: deque[bool] = deque(maxlen=self.max_lag + 2)  # ... and whether that second was marked
        self._seen: deque[float] = deque(maxlen=max(3, int(round(self.horizon_s / self.step_s))))
        self._bytes: tuple[float, int] | None = None
        self._noise = None  # relative variance of z's measurement (cv²)
        self._bias = 1.0 + self.PRIOR_NOISE  # mean latency / the model's latency (see _observe)
        self._mark: str | None = None
        self._y_ref: float | None = None
        self._allowed: float | None = None
        self._last_sample: LatencySample | None = None

    def set_mark(self, mark: str | None) -> None:
        self._mark = mark or None

    def set_warming(self, warming: bool) -> None:  # the old name of the read-in's mark
        self.set_mark("read-in" if warming else None)

    def set_setpoint(self, setpoint_s: float) -> None:
        super().set_setpoint(setpoint_s)  # the model is of the server, not of the setpoint: kept

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        old = self.max_rate_bytes_per_s
        super().set_max_rate(max_rate_bytes_per_s)
        with self._lock:  # the model's rates are fractions of max: rescale them
            s = old / self.max_rate_bytes_per_s
            self._flows = deque((f * s for f in self._flows), maxlen=self._flows.maxlen)
            self._seen = deque((f * s for f in self._seen), maxlen=self._seen.maxlen)
            for fit in [self._fit] if self._fit is not None else []:
                fit.th[1] /= s
                fit.P[0][1] /= s
                fit.P[1][0] /= s
                fit.P[1][1] /= s * s

    def _step(self, sample: LatencySample, now: float, bytes_done: int):
        # The copy's real rate over the last step (bytes the pipe moved), a fraction of max.
        flow = None
        if self._bytes is not None and now > self._bytes[0] and bytes_done >= self._bytes[1]:
            flow = (bytes_done - self._bytes[1]) / (now - self._bytes[0]) / self.max_rate_bytes_per_s
        self._bytes = (now, bytes_done)
        if flow is None:
            flow = self._fraction
        marked = self._mark is not None or self._paused
        self._flows.append(flow)
        self._marked.append(marked)
        self._last_sample = sample
        return super()._step(sample, now, bytes_done)

    def _paired(self, d: int) -> float:
        """The rate this second's latency is paired with under lag d: the fastest of the last d + 1 seconds'.
        The fastest is the worst case over the lags up to d: a copy
        stopped after an overshoot is not blamed for the queue its last seconds left."""
        return max(list(self._flows)[-1 - d:])

    def _observe(self, y: float) -> None:
        """Measure the lag, then fit the newest second's latency against the rate of that lag."""
        if self._y_ref is None:
            self._y_ref = y
        z = self._y_ref / y
        if self._fit is None:
            # Prior: the load's own latency is this second's; the knee is unknown (b = 0 ± a per max rate).
            self._fit = _Fit(z, self.PRIOR_NOISE * z * z, z * z)
        fit = self._fit
        self._measure_lag(z)
        if fit.n >= 2 and len(self._flows) > self._lag:
            zp, _ = fit.predict(self._paired(self._lag))  # before this second is fitted
            sd = math.sqrt(self._noise if self._noise is not None else self.PRIOR_NOISE)
            # The measurement's noise: a running mean absolute relative error (x1.25: its sd if normal),
            # each error clipped at 3 sd so a stall or a burst does not inflate it for a minute.
            rel = min(abs(z - zp) / z, 3.0 * sd, 1.0) * 1.25
            k = self.step_s / self.NOISE_MEMORY_S
            sd = (1 - k) * sd + k * rel
            self._noise = sd * sd
            # The mean latency over the model's: the fit is of 1/latency, and the mean of a noisy latency is
            # over the reciprocal of its mean reciprocal (by 1 + cv² for small noise, more for stalls).
            # Measured, not assumed: the running mean of latency / the model's latency, stalls included.
            k = self.step_s / self.horizon_s
            self._bias = (1 - k) * self._bias + k * min(10.0, max(0.1, zp / max(z, 1e-9)))
        if len(self._flows) > self._lag and not any(list(self._marked)[-self._lag - 1:]):
            noise = self._noise if self._noise is not None else self.PRIOR_NOISE
            keep = 1.0 - self.step_s / self.horizon_s
            a = max(fit.th[0], 1e-9)
            fit.update(self._paired(self._lag), z, noise * z * z, (self.load_change * a) ** 2 * self.step_s,
                       fit.P[1][1] * (1.0 / keep - 1.0) + 1e-9)

    def _measure_lag(self, z: float) -> None:
        """The loop's lag: the delay d at which latency's changes follow the rate's most (the sum of
        −Δz·Δx over the seconds in which the rate moved, forgetting over LAG_MEMORY_S)."""
        prev, self._z_prev = self._z_prev, z
        f = list(self._flows)
        if prev is None or len(f) < self.max_lag + 2 or any(list(self._marked)[-self.max_lag - 2:-1]):
            return
        dz = z - prev
        keep = 1.0 - self.step_s / self.LAG_MEMORY_S
        moved = False
        for d in range(self.max_lag + 1):
            dx = f[-1 - d] - f[-2 - d]
            moved = moved or abs(dx) > 0.1 * max(f[-1 - d], f[-2 - d], 1e-9)
            self._xcorr[d] = keep * self._xcorr[d] - dz * dx
        self._moves += moved
        if self._moves >= self.LAG_AFTER:
            best = max(range(self.max_lag + 1), key=lambda d: self._xcorr[d])
            if self._xcorr[best] > 0:
                self._lag = best

    def _rate_where(self, margin: float) -> float | None:
        """The largest rate (fraction of max) at which the model's mean latency, plus `margin` standard
        deviations of the model's own uncertainty, meets the setpoint; 0 when even no copy does."""
        if self._fit is None or self._y_ref is None:
            return None
        fit = self._fit
        need = self._y_ref * self._bias / self.setpoint_s  # z the setpoint needs

        def ok(x: float) -> bool:
            zp, var = fit.predict(x)
            return zp - margin * math.sqrt(max(0.0, var)) >= need

        if not ok(0.0):
            return 0.0
        lo, hi = 0.0, self.SEARCH_TO
        if ok(hi):
            return hi
        for _ in range(30):  # z − margin·σ falls with x past the data: bisect for the crossing
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo

    def _law(self, latency_s: float, dt: float) -> tuple[float, str, float, float, float]:
        u = self._fraction
        s = self._last_sample
        y = s.last_latency_s if s is not None and s.last_latency_s is not None else latency_s
        marked = self._marked[-1] if self._marked else False
        if not marked and y > 0:
            self._observe(y)
        if len(self._flows) > self._lag and not any(list(self._marked)[-self._lag - 1:]) \
                and latency_s <= self.setpoint_s:
            self._seen.append(self._flows[-1 - self._lag])  # a rate whose latency has been seen under the setpoint
        if u == 0.0 and latency_s < self.setpoint_s and self._fit is not None \
                and self._rate_where(0.0) == 0.0:
            # Stopped, the model saying the load alone is over, and the window under the setpoint: the
            # evidence says otherwise (the queue an overshoot left has drained). Its intercept is stale:
            # open it to the prior's uncertainty so the next seconds move it.
            a = self._fit.th[0]
            self._fit.P[0][0] = max(self._fit.P[0][0], self.PRIOR_NOISE * a * a)
        sure = self._rate_where(self.margin)  # the model is confident this rate meets the setpoint
        mean = self._rate_where(0.0)  # ... and on its mean, this one does
        self._allowed = sure
        seen = max(self._seen) if self._seen else 0.0
        cap = self.rise * max(seen, self._initial)
        if sure is None or mean is None:
            # No model yet (the backup's start is marked): the starting rate is vouched for by the latency
            # measured before the copy, so up to `rise` times it, as the cap allows any rise.
            new = max(u, min(cap, self.MARKED_RISE * self._initial))
            return new, (f"{self._mark}: no model yet, at most x{self.rise:g} the starting rate" if marked else
                         "no latency yet: holding"), new - u, 0.0, 0.0
        mb = self.max_rate_bytes_per_s / 1e6
        if u > mean:
            new, note = mean, f"over what the model allows ({mean * mb:.1f} MB/s): down to it"
        elif u < sure:
            new = min(sure, cap)
            if marked:
                new = min(new, max(u, self.MARKED_RISE * self._initial))  # not fitted now: no more than the start allows
            note = f"the model allows {sure * mb:.1f} MB/s" + (
                f", rise capped at x{self.rise:g} the fastest rate seen" if new < sure else "")
        else:
            new, note = u, f"within the model's uncertainty ({sure * mb:.1f}-{mean * mb:.1f} MB/s): holding"
        ramp = new > self.RAMP_FROM * u  # far under what the model allows: no knee in sight
        # The window itself clearly over, or over while the model says the load alone is: cut at once.
        clear_over = latency_s > self.OVER * self.setpoint_s or (mean == 0.0 and latency_s > self.setpoint_s)
        if u > 0 and not ramp and not clear_over:
            # Otherwise a correction is mostly the model's noise: move a share of the way (the rate's own
            # variance raises the mean latency on a convex curve; a steady rate is the best one can do).
            new = u + (new - u) * min(1.0, self.step_s / self.smooth_s)
        if marked:
            note += f" ({self._mark}: not fitted)"
        if new >= 1.0:
            new, note = 1.0, "at max rate"
        if new < 0.005:
            new, note = 0.0, "stopped: the model says the load alone is at or over the setpoint"
        return new, note, new - u, 0.0, 0.0

    def state(self) -> dict:
        """The model: the load's own latency, the knee, the rate the setpoint allows, the loop's lag, the noise."""
        with self._lock:
            out: dict = {"model_lag_s": self._lag * self.step_s}
            if self._fit is None or self._y_ref is None:
                return out
            a, b = self._fit.th
            m = self.max_rate_bytes_per_s
            out["model_load_latency_s"] = round(self._y_ref / a, 6) if a > 0 else None
            out["model_knee_bytes_per_s"] = round(a / b * m) if b > 1e-9 and a > 0 else None
            out["model_allowed_bytes_per_s"] = None if self._allowed is None else round(self._allowed * m)
            out["model_noise"] = None if self._noise is None else round(math.sqrt(self._noise), 3)
            P = self._fit.P
            out["model_confidence"] = round(1.0 / (1.0 + math.sqrt(max(0.0, P[1][1])) / max(b, 1e-9 + 0.1 * a)), 3) \
                if a > 0 else 0.0
            return out
