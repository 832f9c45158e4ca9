"""The model controller (`--controller model`, the default): an explicit, online model of latency against copy rate,
and an integral law whose gain is the model's slope.

The server is a queue: far below its knee the copy costs the tenants little, near it latency
climbs steeply. In the reciprocal, z = 1 / latency, that curve is close to a straight line that
falls with the copy rate x and reaches 0 at the knee (M/M/1: 1/y = (1 - x/K) / L0):

    z ≈ a − b·x        a = 1 / (the load's own latency L0),   knee K = a / b

Past the knee nothing serves the excess: a queue builds, and it keeps latency high after the copy
slows until it drains (the real disk-bound host: ~0.7 s of latency a second, both ways). Those
seconds are the backlog's, not the curve's.

Each step (docs/controller.md, "The model controller"):

1. fit — pair the newest second's latency with the fastest rate the copy really moved (bytes the
   pipe sent, not its limit) over the last `lag` + 1 seconds; least squares over the last
   `horizon_s` such pairs (no spread of rates: the slope kept, the intercept follows the load).
   A second in a queue (it or the window over OVER x the setpoint) is not fitted, except at the rate
   that built the queue (censored at OVER x the setpoint), and that rate bounds later rises (for
   `horizon_s`). Seconds the migration marks as not the copy's doing (slacker.controller.marks) are
   not fitted, but for one in which a queue built: fitted provisionally, and dropped (with the queue's
   bound) once the unmarked seconds' line misses it by more than SPREAD x their noise -- the start's
   burst was not the copy's cost; a queue the copy did build stays in line and is kept. The lag is
   measured: the delay at which latency's changes follow the rate's most; and the pipe's dead time, the delay
   at which the throughput follows the rate set (2-3 s behind on sysbench at half capacity). The latency seen now
   shows the rate set dead + lag seconds ago; rates set since are in flight, not evidence;
2. act — a Newton step on the line towards the aim, spread over the loop's delay, on the window as it will be
   once the rates in flight show (a Smith predictor: 1/window − b'·(rate set − rate shown)):
   Δx = (that − 1/aim) / (b' · (lag + 2)); rises count from the rate shown, a queue halves it once per delay; b' the slope `margin` standard errors steeper for a
   rise, the estimate for a cut; aim = setpoint × setpoint / (the copy's mean so far), within
   ±`catch_up` (the goal is the copy's mean, a queue's seconds included). No rise past the evidence: the
   rate at most g x the flow whose cost the newest latency shows (the start until it shows), g = `rise` where
   the copy costs nothing over the load's own latency, down to RISE_NEAR at ROOM of the room to the aim -- at
   most g-fold per loop delay, each rise a probe held until its answer; past the limit only where the pipe
   moves well under it (the limit does not bind). Latency rising steadily (the newest seconds, by more than
   their noise) and heading over the aim within the delay in flight: no rise, and over the setpoint a cut as
   far as it heads over the aim (the slope, before the level crosses). A window over OVER x the setpoint
   is a queue: half the rate, or the model's rate for the aim if lower. The start is a rate in bytes/s
   (a server's knee is), whatever the max rate.

Its state — the load's own latency, the knee, the rate the aim allows, the lag, the noise, a
confidence and the queue's rate bound — is in `state()` (status, `--json`, the time series).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, LatencySample
from .base import check_max_rate, check_positive
from .guarded import GuardedController


# Where a copy's rate starts when nothing tells it more (a node's memory of its last copies does).
START_RATE_BYTES_PER_S = 10e6

class _Fit:
    """z = a − b·x by least squares over the last `horizon` fitted seconds (older evidence is forgotten:
    the load drifts). z = 1 / latency in 1/s, x a fraction of max. Unweighted: a second near a queue
    (z small) counts as much as any, no more. A point may be provisional (a marked second: the backup's
    start, a pause): fitted like the others until `judge()` keeps it or drops it."""

    def __init__(self, horizon: int) -> None:
        self.pts: deque[tuple[float, float, bool]] = deque(maxlen=horizon)  # (x, z, provisional)
        self.a = self.b = 0.0
        self.sd_b = math.inf  # the slope's standard error (inf: no spread of rates yet)
        self.sd_z = 0.0  # the residuals' standard deviation
        self.mean_z = 0.0

    @property
    def n(self) -> int:
        return len(self.pts)

    @property
    def provisional(self) -> int:
        return sum(1 for p in self.pts if p[2])

    def add(self, x: float, z: float, provisional: bool = False) -> None:
        self.pts.append((x, z, provisional))
        self.a, self.b, self.sd_b, self.sd_z, self.mean_z = self._solve(self.pts, self.b, self.sd_b)

    @staticmethod
    def _solve(pts, b_kept: float, sd_b_kept: float) -> tuple[float, float, float, float, float]:
        """(a, b, se(b), residuals' sd, mean z) of the points."""
        n = len(pts)
        mx = sum(p[0] for p in pts) / n
        mz = sum(p[1] for p in pts) / n
        sxx = sum((p[0] - mx) ** 2 for p in pts)
        sxz = sum((p[0] - mx) * (p[1] - mz) for p in pts)
        if sxx <= 1e-6 * max(1e-6, mx * mx) * n or n < 3:
            # No spread of rates in the horizon: the slope is what it was (no evidence moved it), the
            # intercept follows the load.
            return mz + b_kept * mx, b_kept, sd_b_kept, math.sqrt(sum((p[1] - mz) ** 2 for p in pts) / max(1, n - 1)), mz
        b = max(0.0, -sxz / sxx)  # the copy never makes the tenants faster
        a = mz + b * mx
        sd_z = math.sqrt(sum((p[1] - (a - b * p[0])) ** 2 for p in pts) / (n - 2))
        return a, b, sd_z / math.sqrt(sxx), sd_z, mz

    def judge(self, spread: float) -> int:
        """Drop the provisional points the others say were not the copy's cost: latency higher than the line
        of the others explains by more than `spread` x their noise (the residuals' sd and the line's own error
        at that rate). Asked every unmarked second while any is left, until they leave the horizon. Returns
        how many were dropped (none while the others are under 3)."""
        rest = [p for p in self.pts if not p[2]]
        if len(rest) < 3 or len(rest) == len(self.pts):
            return 0
        a, b, sd_b, sd_z, _ = self._solve(rest, self.b, self.sd_b)
        mx = sum(p[0] for p in rest) / len(rest)

        def out_of_line(x: float, z: float) -> bool:
            se = math.sqrt(sd_z ** 2 * (1 + 1 / len(rest)) + (0.0 if math.isinf(sd_b) else (sd_b * (x - mx)) ** 2))
            return z < a - b * x - spread * max(se, 1e-9)

        keep = deque((p for p in self.pts if not (p[2] and out_of_line(p[0], p[1]))), maxlen=self.pts.maxlen)
        dropped = len(self.pts) - len(keep)
        if dropped:
            self.pts = keep
            self.a, self.b, self.sd_b, self.sd_z, self.mean_z = self._solve(self.pts, self.b, self.sd_b)
        return dropped

    def rate_for(self, z: float) -> float | None:
        """The rate at which the line gives z; None with no slope."""
        return None if self.b <= 1e-12 else max(0.0, (self.a - z) / self.b)


@dataclass(frozen=True)
class _Step:
    """What one step of the law works from: rates are fractions of the max, latencies in seconds."""
    rate: float  # the rate set now
    latency_s: float  # the window's mean latency
    newest_s: float  # the newest second's latency
    aim_s: float  # what the window is steered to (the setpoint, corrected by the copy's mean so far)
    seen: float  # the rate set whose effect the newest second's latency shows (dead + lag seconds ago)
    shown: float  # the flow (the rate the copy really moved) whose cost the newest second shows
    delay: int  # the loop's delay in steps: the lag and the window's mean age


class ModelController(GuardedController):
    """An integral law in 1/latency whose gain is the fitted slope; the safety rules (failed or stale
    samples, empty windows, pause) are the ones it shares with the PID (GuardedController)."""

    FREE = 0.5  # latency under this share of the aim: no knee in sight
    ROOM = 0.5  # the share of the room used at which the rise per delay is down to RISE_NEAR
    RISE_NEAR = 1.25  # the rise per loop delay where the copy already uses all of the room to the aim
    KNEE = 3.0  # the sharpest knee assumed: latency x3 over a 30 % rise of the rate (the sharp-knee plants')
    FAR = 4.0  # the most a rise per loop delay grows beyond `rise` where the aim is far over KNEE x the latency
    TREND = 2.0  # a rise over three seconds larger than this many times the per-second noise is the copy's slope
    PIPE_BOUND = 0.7  # a pipe moving under this share of its limit, held over a delay: the limit does not bind
    OVER = 2.0  # a window this many times the setpoint is a queue: cut at once, not fitted
    LAG_AFTER = 5  # seconds in which the rate moved before the lag is measured (until then: 2 s)
    LAG_MEMORY_S = 120.0  # the lag's measurement forgets over this
    NOISE = 0.2  # the per-second noise of a load's mean latency assumed until the fit measures it (5-40 % seen)
    DEAD_DEFAULT = 0  # the pipe's delay (rate set -> throughput) until measured: its bucket applies a rate within 0.1 s
    SPREAD = 3.0  # a marked second whose latency the others' line misses by this many sd was not the copy's
    # A cut to under this rate stops the copy (no trickle). In bytes/s, not a share of the cap: a small
    # server's knee can sit below any share of a large cap (a 0.5-core node's at 0.9 MB/s, 0.45 % of 200 MB/s).
    STOP_BYTES_PER_S = 64 * 1024
    STOP_SHARE = 0.002  # ... and never over this share of the cap (a cap of a few KB/s is all rate)

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        *,
        step_s: float = DEFAULT_STEP_S,
        start_rate_bytes_per_s: float = START_RATE_BYTES_PER_S,
        max_lag: int = 5,
        horizon_s: float = 30.0,
        margin: float = 0.5,
        rise: float = 3.0,
        catch_up: float = 0.3,
        **safety: float,
    ) -> None:
        start = check_positive("start rate", start_rate_bytes_per_s, "for example 10MB/s")
        super().__init__(setpoint_s, max_rate_bytes_per_s, step_s=step_s,
                         initial_fraction=min(1.0, start / check_max_rate(max_rate_bytes_per_s)), **safety)
        for label, value, lo, hi in (("horizon", horizon_s, 3.0, 1e5), ("margin", margin, 0.0, 10.0),
                                     ("rise", rise, 1.0, 100.0), ("catch-up", catch_up, 0.0, 0.9)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not lo <= value <= hi:
                raise InvalidInput(f"invalid {label} {value!r}", f"it must be between {lo:g} and {hi:g}")
        if not isinstance(max_lag, int) or isinstance(max_lag, bool) or not 1 <= max_lag <= 30:
            raise InvalidInput(f"invalid maximum lag {max_lag!r}", "expected a whole number of steps, 1-30")
        self.max_lag, self.horizon_s = max_lag, float(horizon_s)
        self.margin, self.rise, self.catch_up = float(margin), float(rise), float(catch_up)
        self.start_rate_bytes_per_s = start
        self._reset_model()

    # --- the model ---------------------------------------------------------------------------

    def _reset_model(self) -> None:
        self._fit = _Fit(max(3, int(round(self.horizon_s / self.step_s))))
        self._z_prev: float | None = None  # the last second's z (the lag's measurement)
        self._xcorr = [0.0] * (self.max_lag + 1)  # per lag: how latency's changes followed the rate's
        self._moves = 0  # seconds in which the rate moved enough to tell the lags apart
        self._lag = min(2, self.max_lag)
        # fraction of max moved, newest last; nothing moved before the copy
        self._flows: deque[float] = deque([0.0] * (2 * self.max_lag + 3), maxlen=2 * self.max_lag + 3)
        # The rate in force over each second (set the step before), aligned with _flows: the pipe's own delay
        # (dead time: buffers, the tool's read-ahead) is measured between the two, as the lag is between the
        # flow and latency. The rate before the copy was 0.
        self._sets: deque[float] = deque([0.0] * (2 * self.max_lag + 3), maxlen=2 * self.max_lag + 3)
        self._dcorr = [0.0] * (self.max_lag + 1)  # per delay: how the flow's changes followed the rate set
        self._dmoves = 0
        self._dead = min(self.DEAD_DEFAULT, self.max_lag)
        self._unanswered = 0  # seconds the pipe has moved nothing since a rate over 0 was set (the first answer)
        self._dead_floor = 0  # the longest such wait seen: the dead time is at least that
        self._used_seen: tuple[float, float] | None = None  # (room used, the rise it allows) of the last copy's second
        self._answered = False  # the pipe has moved (later waits are the server holding the copy back, not delay)
        self._marked: deque[bool] = deque(maxlen=self.max_lag + 2)  # ... and whether that second was marked
        self._queue_x: float | None = None  # the lowest rate that built a queue (over the last horizon_s)
        self._queue_t = 0.0  # seconds since it did
        self._queue_marked = False  # ... and whether it was built in a marked second (provisional)
        self._dropped = 0  # marked seconds the fit of the others dropped
        self._in_queue = False
        self._bytes: tuple[float, int] | None = None
        self._sum_y, self._n_y = 0.0, 0
        self._mark: str | None = None
        self._allowed: float | None = None
        self._last_sample: LatencySample | None = None
        self._load_s: float | None = getattr(self, "_load_s", None)  # kept across a reset: measured before the copy
        self._recent_y: deque[float] = deque(maxlen=8)  # the newest seconds' latencies, newest last
        self._proven: deque[tuple[float, float]] = deque()  # (when, rate) the copy moved within the aim
        self._proven_t = 0.0

    def seed_rate(self, rate_bytes_per_s: float | None) -> None:
        """Start where the node's memory says copies held under a comparable setpoint and load (the node's
        budget's, slacker.controller.memory): before the first step only. The seed is the rate a rise counts from
        until the copy's own evidence arrives; nothing past it is assumed (a rise from it is bounded per loop
        delay as from any start)."""
        if rate_bytes_per_s is None or not rate_bytes_per_s > 0 or not math.isfinite(rate_bytes_per_s):
            return
        with self._lock:
            if self._last_now is not None:
                return  # stepping already: the copy's own evidence counts, not a memory
            self.start_rate_bytes_per_s = float(rate_bytes_per_s)
            self.initial_fraction = self._fraction = self._start

    @property
    def _start(self) -> float:
        """The start rate as a fraction of max (the server's knee is in bytes/s, not a share of the cap)."""
        return min(1.0, self.start_rate_bytes_per_s / self.max_rate_bytes_per_s)

    def set_mark(self, mark: str | None) -> None:
        self._mark = mark or None

    def set_setpoint(self, setpoint_s: float) -> None:
        """The model is of the server, not of the setpoint: kept. The account of the mean starts again: a
        mean run up under another setpoint owes nothing to this one (a node's budget keeps one controller
        through a drain; one that kept the account of copies under a laxer setpoint held the next copies at
        0 B/s for 17 minutes while latency was under the new setpoint)."""
        with self._lock:
            changed = setpoint_s != self.setpoint_s
        super().set_setpoint(setpoint_s)
        if changed:
            with self._lock:
                self._sum_y, self._n_y = 0.0, 0

    def set_load_latency(self, latency_s: float | None) -> None:
        """The load's own latency, measured before any byte moved (slacker.throttle.measure): the zero of
        the copy's cost, so "no knee in sight" is judged on what the copy adds, not on the load's share."""
        with self._lock:
            self._load_s = latency_s if latency_s and latency_s > 0 else None

    def _room_used(self, latency_s: float, aim: float) -> float:
        """How much of the room between the load's own latency and the aim the copy uses, on the model's
        scale (1/latency falls in a line with the rate: the copy's cost is 1/L0 - 1/latency, the room
        1/L0 - 1/aim), or latency / aim if less (far under the aim is room, whatever the load's share). With
        no load latency known, or the load alone over FREE x the aim (then a few seconds' noise in the
        baseline is as large as the room): latency / aim."""
        l0 = self._load_s
        if l0 is None or l0 >= self.FREE * aim:
            # unknown, or the load alone near the aim: the room is within the baseline's own noise
            return latency_s / aim
        # the lesser of the two: a latency far under the aim is room whatever the load's share of it
        return min(latency_s / aim, max(0.0, (1.0 / l0 - 1.0 / latency_s) / (1.0 / l0 - 1.0 / aim)))

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        old = self.max_rate_bytes_per_s
        super().set_max_rate(max_rate_bytes_per_s)
        with self._lock:  # the model's rates are fractions of max: rescale them
            s = old / self.max_rate_bytes_per_s
            self._flows = deque((f * s for f in self._flows), maxlen=self._flows.maxlen)
            self._queue_x = None if self._queue_x is None else self._queue_x * s
            self._proven = deque((t, x * s) for t, x in self._proven)
            self._allowed = None if self._allowed is None else self._allowed * s
            fit = self._fit
            fit.pts = deque(((x * s, z, p) for x, z, p in fit.pts), maxlen=fit.pts.maxlen)
            fit.b /= s
            fit.sd_b /= s

    def _step(self, sample: LatencySample, now: float, bytes_done: int):
        # The copy's real rate over the last step (bytes the pipe moved), a fraction of max.
        flow = None
        if self._bytes is not None and now > self._bytes[0] and bytes_done >= self._bytes[1]:
            flow = (bytes_done - self._bytes[1]) / (now - self._bytes[0]) / self.max_rate_bytes_per_s
        self._bytes = (now, bytes_done)
        if self._mark == "read-in":
            flow = self._fraction  # the read-in: the pipe reads the tool's program at the rate, no data counted
        elif flow is None:
            # The first step: what the pipe moved since it began, at most one step ago (at most the rate set).
            # Read as 0 ("the pipe has not answered") it gave every copy a dead time of one step.
            flow = min(bytes_done / self.step_s / self.max_rate_bytes_per_s, self._fraction)
        self._flows.append(flow)
        self._sets.append(self._fraction)
        self._marked.append(self._mark is not None or self._paused)
        self._measure_dead()
        self._last_sample = sample
        return super()._step(sample, now, bytes_done)

    def _observe(self, y: float, window_s: float) -> None:
        """Measure the lag, then fit the newest second's latency against the rate that made it."""
        z = 1.0 / y
        self._measure_lag(z)
        x = max(list(self._flows)[-self._lag - 1:])
        queue = max(y, window_s) > self.OVER * self.setpoint_s
        marked = any(list(self._marked)[-self._lag - 1:])
        if queue and not self._in_queue and x > 0:
            # A queue built: the rate that built it is past the server's saturation. Remember it (the
            # lowest such rate over the horizon) as a bound on the rate -- provisionally if built in a
            # marked second (dropped with the marked seconds if the fit says they were not the copy's cost).
            if self._queue_x is None or x < self._queue_x:
                self._queue_x, self._queue_marked = x, marked
            self._queue_t = 0.0
        self._in_queue = queue
        self._queue_t += self.step_s
        if self._queue_x is not None and self._queue_t > self.horizon_s:
            self._queue_x = None
        if not marked:
            self._sum_y += y  # the account the aim steers by: the seconds at this setpoint (set_setpoint)
            self._n_y += 1
        if self._mark == "read-in":
            return  # no data moves in the read-in: the rate is not known
        # A marked second (the backup's start, a pause) in which a queue built is fitted provisionally: the
        # queue may be the copy's (a start that overran the server) or not (the tool's own burst); the fit of
        # the others decides once the mark has ended (judge()). One with no queue restricts nothing: left out.
        self._proven_t += self.step_s
        while self._proven and self._proven_t - self._proven[0][0] > self.horizon_s:
            self._proven.popleft()
        if not queue and not marked and y <= self._aim_s():
            self._proven.append((self._proven_t, x))  # the copy moved x at a latency within the aim
        if not queue:
            if not marked:
                self._fit.add(x, z)
        elif self._queue_x is not None and x >= self._queue_x:
            # The rate that built the queue: its latency is at least OVER x the setpoint (censored there:
            # how far past it is the backlog's). The seconds that drain it at lower rates are not fitted.
            self._fit.add(x, 1.0 / (self.OVER * self.setpoint_s), provisional=marked)
        if not marked and self._fit.provisional:
            dropped = self._fit.judge(self.SPREAD)
            self._dropped += dropped
            if dropped and self._queue_marked:
                self._queue_x = None  # built in the seconds just dropped: not the copy's rate

    def _measure_lag(self, z: float) -> None:
        """The loop's lag: the delay d at which latency's changes follow the rate's most (the sum of
        −Δz·Δx over the seconds in which the rate moved, forgetting over LAG_MEMORY_S)."""
        prev, self._z_prev = self._z_prev, z
        f = list(self._flows)
        if prev is None or len(f) < self.max_lag + 2 or any(list(self._marked)[-self.max_lag - 2:-1]):
            return
        dz = (z - prev) / max(z, prev)
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

    def _measure_dead(self) -> None:
        """The pipe's dead time: the delay d at which the flow's changes follow the rate set's most (the sum of
        Δflow·Δset over the seconds in which the rate set moved, forgetting over LAG_MEMORY_S); marked seconds
        (the tool's start, a pause) say nothing of the pipe."""
        f, s = list(self._flows), list(self._sets)
        # The first answer: a pipe that has moved nothing for k seconds since it was given a rate is at least k
        # seconds late (before any move of the rate has measured it).
        if f[-1] > 0.05 * s[-1]:
            self._answered = True
        if not self._answered and s[-1] > 0:
            self._unanswered += 1
            self._dead_floor = max(self._dead_floor, min(self._unanswered, self.max_lag))
            if self._dmoves < self.LAG_AFTER:
                self._dead = max(self._dead, self._dead_floor)
        else:
            self._unanswered = 0
        if len(f) < self.max_lag + 2 or any(list(self._marked)[-self.max_lag - 2:]):
            return
        df = f[-1] - f[-2]
        keep = 1.0 - self.step_s / self.LAG_MEMORY_S
        moved = False
        for d in range(self.max_lag + 1):
            ds = s[-1 - d] - s[-2 - d]
            moved = moved or abs(ds) > 0.1 * max(s[-1 - d], s[-2 - d], 1e-9)
            self._dcorr[d] = keep * self._dcorr[d] + df * ds
        self._dmoves += moved
        if self._dmoves >= self.LAG_AFTER:
            best = max(range(self.max_lag + 1), key=lambda d: self._dcorr[d])
            # The flow must follow one delay clearly (half the evidence at least): a pipe the server holds back
            # (the flow not following the rate at all) measures nothing, and the delay stays what it was.
            if self._dcorr[best] > 0.5 * sum(abs(x) for x in self._dcorr):
                self._dead = best

    def _seen(self) -> float:
        """The rate set whose effect the newest second's latency shows: the rate set `dead` seconds before the
        flow that the latency shows `lag` seconds later. Rates set since are in flight, not evidence."""
        s = list(self._sets)
        return s[len(s) - 1 - self._dead - self._lag]

    def _cut_shown(self) -> bool:
        """Whether the rate the latency shows was itself a cut (lower than the rate set the second before)."""
        s = list(self._sets)
        i = len(s) - 1 - self._dead - self._lag
        return i >= 1 and s[i] < s[i - 1]

    # --- the law: one step on a good window ---------------------------------------------------------

    def _law(self, latency_s: float, dt: float) -> tuple[float, str, float, float, float]:
        """Fit the newest second, then: drain a queue, or step along the model's slope towards the aim with
        rises capped; then the bounds (a marked second, the max rate, the stop). (new, note, Δ, 0, 0)."""
        rate = self._fraction
        newest_s = self._newest_latency(latency_s)
        if newest_s > 0:
            self._observe(newest_s, latency_s)
            if not (self._marked and self._marked[-1]):
                self._recent_y.append(newest_s)
        if latency_s <= 0:
            return rate, "no latency yet: holding", 0.0, 0.0, 0.0
        aim_s = self._aim_s()
        self._allowed = self._fit.rate_for(1.0 / aim_s)
        st = _Step(rate=rate, latency_s=latency_s, newest_s=newest_s, aim_s=aim_s, seen=self._seen(),
                   shown=list(self._flows)[-self._lag - 1], delay=self._lag + 2)
        if latency_s > self.OVER * self.setpoint_s:
            new, note = self._drain_queue(st)
        else:
            new, note = self._along_the_slope(st)
        new, note = self._bounded(st, new, note)
        return new, note, new - rate, 0.0, 0.0

    def _newest_latency(self, window_s: float) -> float:
        """The newest second's latency (the window's mean when the source gives none)."""
        s = self._last_sample
        return s.last_latency_s if s is not None and s.last_latency_s is not None else window_s

    def _aim_s(self) -> float:
        """What counts is the mean over the copy, a queue's seconds included: the window is steered to the
        setpoint x (setpoint / the copy's mean so far), at most `catch_up` either way."""
        sp = self.setpoint_s
        mean = self._sum_y / self._n_y if self._n_y else sp
        return sp * max(1.0 - self.catch_up, min(1.0 + self.catch_up, sp / mean))

    def _drain_queue(self, st: _Step) -> tuple[float, str]:
        """A queue: no small step drains it. Half the rate that built it (the one shown), or the model's rate
        for the aim if lower; a cut already in flight is waited for, not halved again each second. A queue
        still there once a cut has shown is not (all) the copy's: as far down as latency is over the aim (at
        least half) -- a load that alone holds the server at 20x the setpoint stops the copy within a delay
        or two, not a halving a delay."""
        cut = min(0.5, st.aim_s / st.latency_s) if self._cut_shown() else 0.5
        from_rate = st.seen if st.seen > 0 else st.rate
        allowed = self._allowed if self._allowed is not None else st.rate
        new = min(st.rate, from_rate * cut, allowed)
        return new, f"over {self.OVER:g}x the setpoint (a queue): down to {new * self._mb:.1f} MB/s"

    def _along_the_slope(self, st: _Step) -> tuple[float, str]:
        """Under a queue: the Newton step towards the aim, unless the rise it asks is over the cap (or no knee
        is in sight: then the rise is the cap); then the latency's slope: heading over the aim, no rise, and
        over the setpoint a cut as far as it is heading over the aim."""
        new = self._newton_step(st)
        note = f"towards the setpoint along the model's slope ({(new - st.rate) * self._mb:+.1f} MB/s)"
        cap, free = self._rise_cap(st)
        capped = not free and new > cap and new > st.rate
        if free:  # no knee in sight: the cap is the rise (or, under the rate set, where it goes back to)
            new = cap if new <= st.rate else max(st.rate, cap)
        elif capped:
            new = cap
        if free or (capped and new > st.rate):
            note = f"rising, at most x{cap / max(st.shown, 1e-12):.2g} the rate shown ({new * self._mb:.1f} MB/s)" \
                if st.shown > 0 else f"holding the start until its cost shows ({new * self._mb:.1f} MB/s)"
        heading = self._trend(st)
        if heading is not None and heading > st.aim_s and new >= min(st.rate, st.seen or st.rate):
            from_rate = min(st.rate, st.seen) if st.seen > 0 else st.rate
            cut = from_rate * min(1.0, st.aim_s / heading) if heading > self.setpoint_s else min(new, st.rate)
            if cut < new:
                new = cut
                note = (f"latency rising towards {heading * 1e3:.0f} ms: "
                        + ("holding" if cut >= st.rate else f"down to {new * self._mb:.1f} MB/s"))
        return new, note

    def _newton_step(self, st: _Step) -> float:
        """A Smith predictor on the model's line: the window's 1/latency as it will be once the rates set but
        not yet shown arrive (the line's slope times their change), so a step is not taken again each second
        on evidence that is `dead` + `lag` seconds old; then a Newton step to 1/aim spread over the delay."""
        fit = self._fit
        z_load = fit.a if fit.n else 1.0 / st.latency_s  # the line's 1/latency with no copy
        # The slope for a rise: `margin` standard errors steeper (an uncertain model rises carefully; with no
        # spread of rates yet, as steep as a knee at the max rate); for a cut, the estimate.
        slope_rise = fit.b + self.margin * min(fit.sd_b, z_load)
        if slope_rise <= 1e-12:
            slope_rise = z_load
        z_predicted = 1.0 / st.latency_s - slope_rise * (st.rate - st.seen)
        z_room = z_predicted - 1.0 / st.aim_s  # > 0: under the aim
        slope = slope_rise if z_room > 0 else max(fit.b, 1e-12)
        if slope <= 1e-12:
            slope = z_load
        new = max(0.0, st.rate + z_room / (slope * st.delay))
        if new < st.rate:
            # A cut under OVER x the setpoint goes no deeper than a queue's would at this latency (the rate as
            # far down as latency is over the aim): a slope fitted too flat must not take the copy to 0 for a
            # window a little over the aim -- the stop that starts the limit cycle.
            from_rate = min(st.rate, st.seen if st.seen > 0 else st.rate)
            new = max(new, from_rate * min(1.0, st.aim_s / st.latency_s))
        return new

    def _rise_cap(self, st: _Step) -> tuple[float, bool]:
        """(the highest rate a rise may reach, whether no knee is in sight). No rise past the evidence: at most
        g x the fastest flow whose cost the newest latency shows (the start until the copy's own flow shows),
        g = `rise` where the copy uses none of the room to the aim, down to RISE_NEAR where it uses all of it.
        The flow shown trails the rate set by the loop's delay (the pipe's dead time, the lag, the window's
        second), so the rate grows at most g-fold per loop delay, and each rise is a probe held until its
        answer shows -- never straight to the cap on latency measured at a rate far below it (a real run: 40 to
        195 MB/s on 21 ms against a 62 ms aim, past a knee at ~100 MB/s). Past the limit only where the limit is
        not what holds the copy (the pipe moves well under it: _pipe_bound). Never past a queue's rate remembered."""
        worst_s = max(st.latency_s, st.newest_s, self._load_s or 0.0)  # under the load's own latency is noise
        # The cost is what the latency shows beyond the load's own noise (the residuals' sd: a noisy second
        # is not the copy's cost).
        fit = self._fit
        noise = fit.sd_z / fit.mean_z if fit.n >= 3 and fit.mean_z > 0 else self.NOISE
        used = self._room_used(worst_s / (1.0 + min(noise, 1.0)), st.aim_s)
        g = self._rise_factor(worst_s / (1.0 + min(noise, 1.0)), st.aim_s)
        if self._mark in (None, "read-in") or self._used_seen is None:
            self._used_seen = (used, g)
        else:
            # The tool's start, its lock, a pause: this latency is not the copy's cost; the last that was holds.
            used, g = self._used_seen
        evidence = max(st.shown, self._start / g)  # before the copy's flow shows: the start, no more
        # ... or back to a rate the copy moved within the aim over the horizon (after a cut, the way back to a
        # rate whose cost was shown is not past the evidence, and no further than it)
        cap = max(g * evidence, max((x for _, x in self._proven), default=0.0))
        if self._queue_x is not None and self._allowed is not None and self._allowed > self._queue_x:
            self._queue_x = None  # the curve, fitted since, meets the aim past it: a stall or a burst built it
        if self._queue_x is not None:
            cap = min(cap, max(st.rate, self._queue_x * (1 - 1 / st.delay)))
        # No knee in sight -- the copy using under FREE of the room, no queue remembered, and no line that
        # meets the aim under the cap -- the rise is the cap: the Newton step's slope is then a guess.
        free = used < self.FREE and self._queue_x is None and (self._allowed is None or self._allowed >= cap)
        if free and self._pipe_bound():
            cap = 1.0  # the limit does not bind: the pipe's own speed does (unthrottled costs nothing more)
        return cap, free

    def _rise_factor(self, latency_s: float, aim: float) -> float:
        """The rise a loop delay allows: `rise` where the copy costs nothing the latency shows over the load's own
        (L0, measured before the copy, else the line's intercept), down to RISE_NEAR once it uses ROOM of the room
        between L0 and the aim (on the line's scale, 1/latency). With no L0 known, the latency's share of the aim."""
        if self.rise <= self.RISE_NEAR:
            return self.rise
        fit = self._fit
        l0 = self._load_s or (1.0 / fit.a if fit.n >= 3 and fit.b > 1e-12 and fit.a > 0 else None)
        if l0 is None:
            share = latency_s / aim
        elif l0 >= aim:
            share = 1.0
        else:
            share = max(0.0, (1.0 / l0 - 1.0 / latency_s) / (1.0 / l0 - 1.0 / aim))
        g = max(self.RISE_NEAR, 1.0 + (self.rise - 1.0) * (1.0 - min(1.0, share / self.ROOM) ** 2))
        # Far under the aim -- further than the sharpest knee assumed would take it (latency x KNEE over a 30 %
        # rise of the rate) -- a probe that overshoots a knee still lands under the aim: a larger rise, at most
        # FAR x more.
        far = aim / (self.KNEE * latency_s) if latency_s > 0 else 1.0
        return g * min(self.FAR, far) if far > 1.0 else g

    def _pipe_bound(self) -> bool:
        """Whether the limit is not what holds the copy: over the loop's whole delay (and a second) the rate in
        force was held, and the pipe moved under PIPE_BOUND of it, no second marked (a tool's start or a
        pause also moves less than the limit)."""
        k = self._dead + self._lag + 2
        f, s, m = list(self._flows), list(self._sets), list(self._marked)
        if len(m) < k or any(m[-k:]) or len(s) < k + self._dead:
            return False
        sets = s[len(s) - k - self._dead:len(s) - self._dead] if self._dead else s[-k:]
        held = max(sets) <= 1.001 * min(sets) and min(sets) > 0
        return held and all(fi < self.PIPE_BOUND * si for fi, si in zip(f[-k:], sets))

    def _trend(self, st: _Step) -> float | None:
        """The latency the rise now under way is heading for: the newest seconds rising steadily (each over the
        one before, by more than TREND x their noise in all), extrapolated over the delay still in flight (the
        pipe's dead time and the lag). None when they are not rising so."""
        y = list(self._recent_y)
        if len(y) < 3 or not (y[-1] > y[-2] > y[-3]):
            return None
        fit = self._fit
        noise = fit.sd_z / fit.mean_z if fit.n >= 3 and fit.mean_z > 0 else self.NOISE
        if y[-1] - y[-3] <= self.TREND * noise * y[-3]:
            return None
        return y[-1] + (y[-1] - y[-3]) / 2.0 * (self._dead + self._lag)

    def _bounded(self, st: _Step, new: float, note: str) -> tuple[float, str]:
        """A marked second cuts no deeper than the start but for a queue; the max rate; a cut to under the
        floor stops the copy."""
        if self._marked and self._marked[-1]:
            # Not the copy's doing: no cut under the starting rate but for a queue.
            floor = min(st.rate, self._start)
            if self._mark != "read-in" and st.latency_s <= self.OVER * self.setpoint_s and new < floor:
                new = floor
            note += f" ({self._mark}: not fitted)"
        if new >= 1.0:
            new, note = 1.0, "at max rate"
        if new < min(self.STOP_BYTES_PER_S / self.max_rate_bytes_per_s, self.STOP_SHARE) and new <= st.rate:
            # Only a cut stops: a rise from a stop moves in the model's steps, however small, else a copy
            # whose every step from 0 is under the floor stays stopped with latency far under the aim.
            new, note = 0.0, "stopped: latency over the setpoint"
        return new, note

    @property
    def _mb(self) -> float:
        """MB/s per unit of fraction (the notes' rates)."""
        return self.max_rate_bytes_per_s / 1e6

    def state(self) -> dict:
        """The model: the load's own latency, the knee, the rate the setpoint allows, the loop's lag, the noise."""
        with self._lock:
            out: dict = {"model_lag_s": self._lag * self.step_s, "model_dead_s": self._dead * self.step_s}
            fit = self._fit
            if fit.n == 0:
                return out
            m = self.max_rate_bytes_per_s
            out["model_load_latency_s"] = round(1.0 / fit.a, 6) if fit.a > 0 else None
            out["model_knee_bytes_per_s"] = round(fit.a / fit.b * m) if fit.b > 1e-12 and fit.a > 0 else None
            out["model_allowed_bytes_per_s"] = None if self._allowed is None else round(self._allowed * m)
            out["model_noise"] = round(fit.sd_z / fit.mean_z, 3) if fit.mean_z > 0 else None
            out["model_confidence"] = round(1.0 / (1.0 + fit.sd_b / fit.b), 3) if fit.b > 1e-12 else 0.0
            out["model_queue_bytes_per_s"] = None if self._queue_x is None else round(self._queue_x * m)
            return out
