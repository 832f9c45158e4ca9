"""The default throttle controller: an explicit, online model of latency against copy rate.

The server is a queue: far below its knee the copy costs the tenants little, near it latency
climbs steeply. In the reciprocal, z = 1 / latency, that curve is close to a straight line that
falls with the copy rate x and reaches 0 at the knee (M/M/1: 1/y = (1 - x/K) / L0):

    z ≈ a − b·x        a = 1 / (the load's own latency),   knee = a / b

Each step the controller

1. pairs the newest second's latency with the copy rate that moved `lag` seconds earlier (the
   bytes the pipe really moved, not its limit) and updates (a, b) with a Kalman filter whose
   parameters walk (recursive least squares with per-parameter forgetting): `a` may move as
   fast as the load, `b` forgets over `horizon_s`. Seconds the migration marks as not the
   copy's doing (the backup tool's read-in and start, a pause) are left out, and so is every
   second within a lag of them. One filter runs for each lag from 0 to `max_lag` steps; the
   lag whose filter predicts best is the loop's lag (measured, not assumed);
2. sets the rate x where the model's mean latency, with `margin` standard deviations of its
   own uncertainty, meets the setpoint: (a − b·x − margin·σ(x)) = (1 + cv²) / setpoint, where
   σ(x) is the parameters' uncertainty at x and cv² the measurement noise's relative variance
   (the mean of a noisy latency is over the reciprocal of the mean reciprocal by that much);
3. caps a rise at `rise` times the fastest rate whose latency it has seen; cuts are never capped.

Its state — the load's own latency 1/a, the knee a/b, the rate the setpoint allows, the lag and
the fit's noise — is in `state()` (status, `--json`, the time series, the plot).
"""

from __future__ import annotations

import math
from collections import deque

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, LatencySample
from .pid import DEFAULT_GAINS, Gains, ThrottleController


class _Fit:
    """z = a − b·x with random-walk parameters (a Kalman filter on two parameters)."""

    def __init__(self, a: float, var_a: float, var_b: float) -> None:
        self.var_b = var_b  # the prior's: forgetting never makes the slope less known than that
        self.th = [a, 0.0]
        self.P = [[var_a, 0.0], [0.0, var_b]]
        self.err = None  # EWMA of squared one-step prediction errors (relative), for choosing the lag
        self.n = 0
        self.n_err = 0
        self.recent: deque[float] = deque(maxlen=5)  # the last innovations, relative (the change test)

    def predict(self, x: float) -> tuple[float, float]:
        """(z at x, the parameters' variance of it)."""
        a, b = self.th
        P = self.P
        return a - b * x, P[0][0] - 2 * x * P[0][1] + x * x * P[1][1]

    def update(self, x: float, z: float, r: float, q_a: float, q_b: float, err_keep: float,
               informative: bool = True) -> None:
        P = self.P
        P[0][0] += q_a
        P[1][1] = min(P[1][1] + q_b, self.var_b)
        zp, var = self.predict(x)
        e = z - zp
        s = var + r
        if informative:  # the rates moved: this error tells the lags apart
            rel = min(e * e / max(z * z, 1e-12), 1.0)
            self.err = rel if self.err is None else err_keep * self.err + (1 - err_keep) * rel
            self.n_err += 1
        # A plant that moved (a load step, the disk busy elsewhere): the last innovations agree in sign
        # by more than their noise allows. Open the intercept by their mean's square so it moves now.
        self.recent.append(e)
        if len(self.recent) == self.recent.maxlen:
            m = sum(self.recent) / len(self.recent)
            if abs(m) > 3.0 * math.sqrt(s / len(self.recent)):
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
    RAMP_FROM = 1.5  # a rise to this many times the rate or more is a ramp: not smoothed
    OVER = 1.3  # a window this many times the setpoint is an overshoot: its cut is not smoothed
    NEWEST = True
    SEARCH_TO = 4.0  # rates are searched up to this many times max (past it: unthrottled anyway)
    NOISE_MEMORY_S = 20.0  # the noise estimate's memory
    LAG_AFTER = 10  # seconds of moving rates each lag's filter must have been tested on before the lags are compared

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
        self._fits: list[_Fit] | None = None  # one per lag 1..max_lag, made at the first usable sample
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
            for fit in self._fits or []:
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

    def _observe(self, y: float) -> None:
        """Fit the newest second's latency against the flows of each candidate lag."""
        if self._y_ref is None:
            self._y_ref = y
        z = self._y_ref / y
        if self._fits is None:
            # Prior: the load's own latency is this second's; the knee is unknown (b = 0 ± a per max rate).
            self._fits = [_Fit(z, self.PRIOR_NOISE * z * z, z * z) for _ in range(self.max_lag + 1)]
        fit = self._fits[self._lag]
        if fit.n >= 2 and len(self._flows) > self._lag:
            zp, _ = fit.predict(self._flows[-1 - self._lag])  # before this second is fitted
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
        noise = self._noise if self._noise is not None else self.PRIOR_NOISE
        keep = 1.0 - self.step_s / self.horizon_s
        recent = list(self._flows)
        spread = max(recent) - min(recent)
        informative = spread > 0.2 * max(recent) and spread > 0.005  # the lags can be told apart
        for d, fit in enumerate(self._fits):
            if len(self._flows) <= d or any(list(self._marked)[-d - 1:]):
                continue
            x = self._flows[-1 - d]
            a = max(fit.th[0], 1e-9)
            fit.update(x, z, noise * z * z, (self.load_change * a) ** 2 * self.step_s,
                       fit.P[1][1] * (1.0 / keep - 1.0) + 1e-9, keep, informative)
        # The loop's lag: the filter that predicts best, once every filter was compared on enough seconds.
        ready = [i for i, f in enumerate(self._fits) if f.err is not None and f.n_err >= self.LAG_AFTER]
        if len(ready) == len(self._fits):
            best = min(ready, key=lambda i: self._fits[i].err)
            if self._fits[best].err < 0.8 * self._fits[self._lag].err:
                self._lag = best

    def _rate_where(self, margin: float) -> float | None:
        """The largest rate (fraction of max) at which the model's mean latency, plus `margin` standard
        deviations of the model's own uncertainty, meets the setpoint; 0 when even no copy does."""
        if self._fits is None or self._y_ref is None:
            return None
        fit = self._fits[self._lag]
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
        y = s.last_latency_s if self.NEWEST and s is not None and s.last_latency_s is not None else latency_s
        marked = self._marked[-1] if self._marked else False
        if not marked and y > 0:
            self._observe(y)
        if len(self._flows) > self._lag and not any(list(self._marked)[-self._lag - 1:]):
            self._seen.append(self._flows[-1 - self._lag])  # a rate whose latency has been seen
        sure = self._rate_where(self.margin)  # the model is confident this rate meets the setpoint
        mean = self._rate_where(0.0)  # ... and on its mean, this one does
        self._allowed = sure
        seen = max(self._seen) if self._seen else 0.0
        cap = self.rise * max(seen, self._initial)
        if sure is None or mean is None:
            # No model yet (the backup's start is marked): the starting rate is vouched for by the latency
            # measured before the copy, so up to `rise` times it, as the cap allows any rise.
            new = max(u, min(cap, self.rise * self._initial))
            return new, (f"{self._mark}: no model yet, at most x{self.rise:g} the starting rate" if marked else
                         "no latency yet: holding"), new - u, 0.0, 0.0
        mb = self.max_rate_bytes_per_s / 1e6
        if u > mean:
            new, note = mean, f"over what the model allows ({mean * mb:.1f} MB/s): down to it"
        elif u < sure:
            new = min(sure, cap)
            if marked:
                new = min(new, max(u, self.rise * self._initial))  # not fitted now: no more than the start allows
            note = f"the model allows {sure * mb:.1f} MB/s" + (
                f", rise capped at x{self.rise:g} the fastest rate seen" if new < sure else "")
        else:
            new, note = u, f"within the model's uncertainty ({sure * mb:.1f}-{mean * mb:.1f} MB/s): holding"
        ramp = new > self.RAMP_FROM * u  # far under what the model allows: no knee in sight
        clear_over = latency_s > self.OVER * self.setpoint_s  # the window itself is clearly over
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
            if self._fits is None or self._y_ref is None:
                return out
            a, b = self._fits[self._lag].th
            m = self.max_rate_bytes_per_s
            out["model_load_latency_s"] = round(self._y_ref / a, 6) if a > 0 else None
            out["model_knee_bytes_per_s"] = round(a / b * m) if b > 1e-9 and a > 0 else None
            out["model_allowed_bytes_per_s"] = None if self._allowed is None else round(self._allowed * m)
            out["model_noise"] = None if self._noise is None else round(math.sqrt(self._noise), 3)
            P = self._fits[self._lag].P
            out["model_confidence"] = round(1.0 / (1.0 + math.sqrt(max(0.0, P[1][1])) / max(b, 1e-9 + 0.1 * a)), 3) \
                if a > 0 else 0.0
            return out
