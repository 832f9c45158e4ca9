"""The default throttle controller: find the slack in seconds, then hold near the knee without swinging.

The velocity PID (`--controller pid`) adds a fixed share of the max rate per
step, so from 10 % it needs tens of seconds to reach the slack, and near the
knee of a queueing server, where latency grows steeply with the rate, the same
gain overshoots and the loop settles into a limit cycle (docs/results.md).
This controller works on ratios instead of differences (r = latency / setpoint):

    r < 1: u ← u · min(growth_max, q^−alpha)     q = max(r, smoothed r): fast far below, slow near 1
    r > 1, first window over:   u ← 0.98 · knee   knee = the rate applied `lag` steps earlier
    still rising a lag later:   u ← u · min(0.85^n, (2.5 / r)^beta)  n-th cut: deeper each time,
                                                  in proportion to the overshoot when r > 2.5
    stopped (u = 0) and r < 1:  restart at half the knee (never stuck at 0 below the setpoint)
    r > 1 in the first steps, started low:  hold the starting rate (the backup tool's start-up reads),
                                            until the newest second alone is quiet (not the window)

with rules that keep it off the knee's steep side:
- a jump undone: a raise by JUMP (1.4x) or more that the newest second shows over the setpoint within
  a lag, no knee known yet, goes back to the rate before it at once (the window would show it a lag
  later); the jump is the ceiling, kept through the window over that follows (which blames its lag for
  the knee as usual). The knee climbs back a quarter of the way a lag; within 1.2x of the jump with
  latency under half the setpoint, the jump taught nothing: the knee is forgotten;
- the window's lag: a window at VOUCH_FROM (0.5) of the aim or more vouches for the slowest rate
  of its lag, not the rate applied now, so the ramp goes no higher than that rate x 1/r (up to the
  knee it knows): raises within one lag do not compound the same window's factor;
- a brake: latency rising fast enough to cross the setpoint within the loop's
  lag (window + actuation) holds the rate instead of raising it;
- knee memory: the rate that last drove latency over the setpoint is
  remembered; above 98 % of it the rate only creeps (probe_per_step). The
  memory loosens a little every step without an overshoot, so a load that
  falls frees the slack again, and rises to the rates of the last lag when
  their window is clearly under the aim (< 0.9x), so one window over after a
  probe lands under the probed rate, not back at a stale knee;
- bisection: after a fast ramp the first window over shows a rate 4-8x below
  the one the overshoot happened at, so the knee is underestimated; at the
  knee with latency far below the setpoint (< 0.2x) it moves to the geometric
  mean of itself and that rate, one lag per halving; the first halving of a
  ramp's overshoot (> 1.5x the knee it taught) needs only < 0.8x
  and goes there in steps of at most 1/(latency ratio) a lag;
- one cut, then wait: a cut shows only `lag` steps later; no further cut
  before that (unless latency gets `recut` times worse) nor while the queue is
  already draining.
- anti-windup: a copy that moves clearly under its limit (the source disk, the
  backup tool or the target binds, see _copy_flow) holds the limit instead of
  raising it, and its cuts start from the rate it moved at, not the limit; an
  overshoot that finds it so was not the copy's doing (the load or the machine
  moved the knee) and its first cut is in proportion, flow / r;
- a mild overshoot (r < 1.3) at the knee a ramp taught keeps the ramp's ceiling,
  so the first halving towards it is not lost to one window over the aim.
- the copy's mean: r is taken against aim x setpoint, aim = setpoint / the
  copy's running mean latency (0.85-1.15, 0.01 a step; the mean from the copy's
  10th step, afresh after a load rise), so the copy's mean, not each window,
  sits at the setpoint (_trim_aim).

A single noisy window over the setpoint costs 2 % of the rate (the landing
under the knee), not a cut in proportion to the spike: that proportional cut
was what made the rate swing with the machine's noise on real runs.
"""

from __future__ import annotations

import math
from collections import deque

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, LatencySample
from .base import ControllerStep
from .pid import DEFAULT_GAINS, Gains, ThrottleController


class SlackController(ThrottleController):
    """Ratio control with a brake and knee memory; the safety rules are the PID's (see ThrottleController)."""

    RAMP_OVERSHOOT = 1.5  # an overshoot at this many times the knee it taught came from the ramp ...
    RAMP_BISECT_BELOW = 0.8  # ... and its first halving needs latency under this share of the setpoint
    BURST_OVER_BELOW = 0.5  # the backup's start is over when the last second is under this share ...
    MEAN_TRIM = (0.85, 1.15)  # the copy's running mean steers the aim within these shares of the setpoint ...
    MEAN_AFTER_STEPS = 10  # ... counted from the copy's steps after this many (not the backup's start) ...
    MEAN_TRIM_PER_STEP = 0.01  # ... moving the aim by at most this share per step
    LOAD_ROSE = 1.3  # an overshoot's transactions/s at this many times those before it: the load rose ...
    LOAD_SIGMAS = 5.5  # ... by this many standard deviations of a Poisson count (completions come in bursts: 5.1 at a constant load on the plant) ...
    LOAD_REF_STEPS = 20  # ... against the mean of up to this many steps before the overshoot
    KEEP_CEILING_BELOW = 1.3  # an overshoot under this ratio at a ramp's knee keeps the ramp's ceiling
    KNEE_FOLLOWS_BELOW = 0.9  # a window under this share of the aim raises the knee to the rates of its lag
    VOUCH_FROM = 0.5  # a window at this share of the aim or more limits the ramp to its lag's rates (see _law)
    JUMP = 1.4  # a raise by this factor or more, the newest second over the setpoint within a lag: undone ...
    CLIMB_SHARE = 0.25  # ... and climbed back to by this share of the way (in log) a lag ...
    CLIMB_HALF_BELOW = 0.3  # ... half the way under this share of the aim ...
    UNDONE_FORGET_BELOW = 0.5  # ... faster under this share of the aim, and within 1.2x of it there: forgotten
    FLOW_BELOW = 0.9  # the copy moved under this share of every limit in force ...
    FLOW_STEPS = 4  # ... over this many steps (and the one before: the pipe lags the limit) ...
    FLOW_SLACK_BYTES = 2 * 1024 * 1024  # ... by more than the pipe's granularity (it counts whole chunks)

    def __init__(
        self,
        setpoint_s: float,
        max_rate_bytes_per_s: float,
        gains: Gains = DEFAULT_GAINS,  # unused; accepted so configs can pass them
        *,
        step_s: float = DEFAULT_STEP_S,
        initial_fraction: float = 0.02,
        growth_max: float = 2.0,
        alpha: float = 1.0,
        beta: float = 1.0,
        probe_per_step: float = 0.01,
        lag_steps: int = 3,
        knee_loosen_per_step: float = 0.003,
        min_step: float = 0.01,
        backoff: float = 0.98,
        further_cut: float = 0.85,
        deep: float = 2.5,
        recut: float = 2.0,
        smoothing: float = 0.5,
        restart_share: float = 0.5,
        restart_min: float = 0.02,
        bisect: bool = True,
        bisect_below: float = 0.2,
        low_start: float = 0.05,
        start_hold_steps: int = 6,
        **safety: float,
    ) -> None:
        super().__init__(setpoint_s, max_rate_bytes_per_s, gains, step_s=step_s,
                         initial_fraction=initial_fraction, **safety)
        for label, value, lo, hi in (("growth", growth_max, 1.0, 10.0), ("alpha", alpha, 0.0, 5.0),
                                     ("beta", beta, 0.0, 5.0), ("probe", probe_per_step, 0.0, 1.0),
                                     ("knee loosening", knee_loosen_per_step, 0.0, 1.0),
                                     ("minimum step", min_step, 0.0, 1.0), ("backoff", backoff, 0.0, 1.0),
                                     ("further cut", further_cut, 0.0, 1.0), ("deep overshoot", deep, 1.0, 1e6),
                                     ("recut", recut, 1.0, 1e6), ("smoothing", smoothing, 0.0, 1.0),
                                     ("restart share", restart_share, 0.0, 1.0), ("restart minimum", restart_min, 0.0, 1.0),
                                     ("low start", low_start, 0.0, 1.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not lo <= value <= hi:
                raise InvalidInput(f"invalid {label} {value!r}", f"it must be between {lo:g} and {hi:g}")
        if not isinstance(lag_steps, int) or lag_steps < 1:
            raise InvalidInput(f"invalid lag {lag_steps!r}", "expected a whole number of steps >= 1")
        if not isinstance(start_hold_steps, int) or isinstance(start_hold_steps, bool) or start_hold_steps < 0:
            raise InvalidInput(f"invalid start hold {start_hold_steps!r}", "expected a whole number of steps >= 0")
        self.growth_max, self.alpha, self.beta = float(growth_max), float(alpha), float(beta)
        self.probe_per_step, self.lag_steps = float(probe_per_step), lag_steps
        self.knee_loosen_per_step, self.min_step = float(knee_loosen_per_step), float(min_step)
        self.backoff, self.further_cut, self.deep, self.recut = float(backoff), float(further_cut), float(deep), float(recut)
        self.smoothing, self.restart_share, self.restart_min = float(smoothing), float(restart_share), float(restart_min)
        self._initial = float(initial_fraction)
        self.bisect, self.bisect_below = bool(bisect), float(bisect_below)
        self.low_start = float(low_start)  # starting rates up to this learn no knee from the copy's first seconds
        self.start_hold_steps = start_hold_steps  # ... and hold (not cut) through the backup's start-up reads
        self._ceiling: float | None = None
        self.knee: float | None = None  # fraction that last pushed latency over the setpoint
        self._episode_knee: float | None = None  # the knee the current overshoot first showed
        self._applied: deque[float] = deque(maxlen=lag_steps + 1)
        self._hold_until: int | None = None
        self._over = False
        self._cuts = 0  # cuts in the current overshoot
        self._moved = False  # ... whose first cut found the copy under its limit: the plant moved, not the copy
        self._r_cut = 1.0  # latency / setpoint at the last cut
        self._k = 0  # steps (the lag's clock)
        self._copy_k = 0  # ... of them since the copy started (the start window's clock)
        self._warm_k = 0  # ... of them while the backup tool was read in
        self._peak = 0.0  # the fastest rate applied since the copy started
        self._copy_start: float | None = None  # the rate the copy started at (after the backup tool's read-in)
        self._start_held = False  # the last step held through the backup's start
        self._halvings = 0  # bisections towards the current ceiling
        self._ramp_goal: float | None = None  # a ramp's first halving, reached in steps of 1/latency ratio
        self._tail_culprit: tuple[int, float] | None = None  # (step, rate) a newest second over blamed
        self._jump: tuple[int, float] | None = None  # (step, rate before) of the last raise by JUMP or more
        self._undone: int | None = None  # the step a jump was undone at: the ceiling is that jump (see _undo_jump)
        self._burst_tail_until: int | None = None  # the window still holds the start's seconds until then
        self._last_latency: float | None = None  # this step's sample: its newest second alone
        self._warming = False  # the pipe reads the backup tool's program: the copy has not started
        self._warmed = False  # the last step was one of those
        self._mean_sum, self._mean_n, self._copy_steps = 0.0, 0.0, 0  # the copy's latency so far
        self._aim = 1.0  # the share of the setpoint each window is held at (see _trim_aim)
        self._load: deque[float | None] = deque(maxlen=self.LOAD_REF_STEPS + lag_steps)  # newest seconds' counts
        self._load_ref: float | None = None  # transactions a step before the current overshoot
        self._episode_load: list[float] = []  # ... and in it (from a lag before its first cut)
        # (time, bytes copied, limit in force since the step before) per step of the copy (see _copy_flow)
        self._flow: deque[tuple[float, int, float]] = deque(maxlen=self.FLOW_STEPS + 1)

    def _trim_aim(self) -> None:
        """Hold the copy's mean latency, not each window, at the setpoint.

        Every rule here keeps the 3 s window under the setpoint, and on a noisy plant that leaves
        the copy's mean 10-20 % under it (real runs: 0.83-0.88x at 70 ms, the copy at 0.86-0.96x
        the best fixed rate's speed). So the windows are held at `aim` x the setpoint, `aim` =
        setpoint / running mean, within MEAN_TRIM, moving at most MEAN_TRIM_PER_STEP a step. The mean
        counts the copy's steps after the MEAN_AFTER_STEPS-th: the backup's start stalls the tenant at
        any rate (1.5-4x the setpoint on a disk-bound host), and counted, those seconds held the aim
        near 1 and the mean after them at 0.89x (fifteenth session, both setpoints). A load rise
        starts the mean afresh (see _load_rose). Over 1 only once the knee is found (_finding_knee).
        """
        if self._copy_steps <= self.MEAN_AFTER_STEPS or self._mean_n <= 0 or self._mean_sum <= 0:
            return
        lo, hi = self.MEAN_TRIM
        if self._finding_knee():
            # The ramp, a ramp's first halving or the climb back to a jump undone is still looking for the
            # slack, and the setpoint itself bounds it. Aimed over the setpoint, a ramp whose copy lagged
            # its limit (the source disk) went on at windows of 0.9-1.0x and found the knee 50 % past it
            # (sixteenth session, 100 ms: 20 MB/s, the knee near 13, 549 ms a second), and climbs back to
            # a jump undone went on at windows under 0.8x the aim, not the setpoint (two 100 ms runs:
            # 10 -> 12.8 -> 15.3 and 11.3 -> 14.9 -> 17.8 MB/s, the knee near 13, 353 and 218 ms a
            # second). The aim corrects the bias of holding *at* a knee.
            hi = min(hi, 1.0)
        want = min(hi, max(lo, self.setpoint_s / (self._mean_sum / self._mean_n)))
        step = self.MEAN_TRIM_PER_STEP
        self._aim = min(self._aim + step, max(self._aim - step, want))

    def _ramp_halving(self) -> bool:
        """A ramp's overshoot left the knee at a fraction of the rate it happened at: its first halving is
        untried or under way (see _law)."""
        c = self._ceiling
        return c is not None and self.knee is not None and (
            self._ramp_goal is not None or (c > self.RAMP_OVERSHOOT * self.knee and self._halvings == 0))

    def _finding_knee(self) -> bool:
        """No knee yet, or one that a ramp's first halving or the climb back to a jump undone may still move."""
        return self.knee is None or self._undone is not None or self._ramp_halving()

    def state(self) -> dict:
        """The knee it remembers (bytes/s; None: none learnt) and the share of the setpoint it holds
        each window at (the copy's mean trim, see _trim_aim)."""
        with self._lock:
            knee = None if self.knee is None else round(self.knee * self.max_rate_bytes_per_s)
            return {"aim": round(self._aim, 3), "knee_bytes_per_s": knee}

    def _start_load_watch(self) -> None:
        """At an overshoot's first cut: the transactions per step before it, and its own from a lag back
        (a load step shows in the window about a lag after it arrived)."""
        seen = list(self._load)
        before = [c for c in seen[:-self.lag_steps] if c is not None]
        self._load_ref = sum(before) / len(before) if len(before) >= self.LOAD_REF_STEPS // 2 else None
        self._episode_load = [c for c in seen[-self.lag_steps:] if c is not None]

    def _load_rose(self, u: float) -> bool:
        """Back under the setpoint after an overshoot that needed more than one cut: did the load rise?

        The knee remembered is the rate the last further cut was made *from*, with the load that was
        there before. After a load increase (+40 % transactions/s in Figure 13a) the ramp went straight
        back to 98 % of it and overshot again (sixth session: 2 of 3 runs). The transactions completed
        over the whole overshoot count its arrivals (latency is back: the queue has drained), so their
        rate tells a load that rose from a queue that formed and drained. A rise: the knee is the old one
        scaled by before/after (the slack left for the copy shrinks as the load grows), never under the
        rate latency came back at, and the old knee a ceiling a bisection may climb back towards. A client
        whose load falls as latency rises (a closed loop) never trips this. The transactions counted are
        the source's (`LatencySample.newest_load`), whichever side steers.
        """
        ref, seen = self._load_ref, self._episode_load
        self._load_ref, self._episode_load = None, []
        if (self._cuts < 2 and not self._moved) or ref is None or ref <= 0 or len(seen) < 2 * self.lag_steps or u <= 0:
            return False
        expected, got = ref * len(seen), sum(seen)
        if got < self.LOAD_ROSE * expected or got - expected < self.LOAD_SIGMAS * math.sqrt(expected):
            return False
        old = self.knee if self.knee is not None else u
        # The slack left for the copy shrinks as the load grows: the old knee in proportion, never under
        # the rate latency came back at (cuts made while a queue drained can go deeper than the new knee).
        self.knee = self._episode_knee = min(old, max(u, old * expected / got))
        self._ceiling = old if self.bisect and old > 1.05 * self.knee else None
        self._halvings, self._ramp_goal = 0, None
        # The copy's mean so far was under the old load: it says nothing about the slack left now. Held
        # on, an aim at its upper bound (the copy at 0.68x the setpoint before the step) probed back to
        # 1.15x the setpoint after the step's overshoot and overshot again (fifteenth session, Figure 13a:
        # 2 of 6 repeats never back under 1.1x for good). Start it afresh, from at most the setpoint.
        self._mean_sum, self._mean_n, self._copy_steps = 0.0, 0.0, 0
        self._aim = min(self._aim, 1.0)
        return True

    def set_warming(self, warming: bool) -> None:
        self._warming = bool(warming)

    def _copy_flow(self) -> float | None:
        """The rate the copy really moved at (a fraction of max), when it was clearly under the limit.

        Anti-windup: when the copy cannot use the limit (the source disk, the backup tool or the
        target is the bottleneck), probing keeps raising a limit nobody uses, and the first cuts
        after a load step then land above the real rate and do nothing (Figure 13a, ninth session:
        the limit had crept to 20-22.5 MB/s while the copy moved 15-17 MB/s; two cuts, 6 s, were
        wasted). Measured over FLOW_STEPS steps against the lowest limit in force over them and the
        step before (the pipe lags a raise by up to a step), less the pipe's chunk granularity.
        None: no evidence (a caller that reports no bytes, the read-in, a pause, a limit in use).
        """
        f = self._flow
        if len(f) < f.maxlen:
            return None
        (t0, b0, _), (t1, b1, _) = f[0], f[-1]
        lowest = min(rate for _, _, rate in f)
        if t1 <= t0 or lowest <= 0:
            return None
        moved = b1 - b0
        if moved >= self.FLOW_BELOW * lowest * (t1 - t0) - self.FLOW_SLACK_BYTES:
            return None
        return max(0.0, moved / (t1 - t0) / self.max_rate_bytes_per_s)

    def _step(self, sample: LatencySample, now: float, bytes_done: int) -> ControllerStep:
        if self._warming or self._paused or bytes_done <= 0 or (self._flow and bytes_done < self._flow[-1][1]):
            self._flow.clear()
        else:
            self._flow.append((now, bytes_done, self._fraction * self.max_rate_bytes_per_s))
        self._last_latency = sample.last_latency_s
        self._load.append(None if self._warming else sample.newest_load)
        if not self._warming and sample.ok:
            self._copy_steps += 1
            if self._copy_steps > self.MEAN_AFTER_STEPS:  # not the backup's start (see _trim_aim)
                if sample.last_sum_s is not None and sample.last_count:  # the newest second's transactions
                    self._mean_sum += sample.last_sum_s
                    self._mean_n += sample.last_count
                elif sample.latency_s is not None:
                    self._mean_sum += sample.latency_s
                    self._mean_n += 1
                self._trim_aim()
        return super()._step(sample, now, bytes_done)

    def _through_start_burst(self, r: float, rising: float) -> tuple[float, float, bool]:
        """(ratio, rising, burst) to steer on while the window still holds the backup's start.

        The window lags the burst's end by its length (3 s); when the newest second is already
        clearly under the setpoint and the window falls, the start is over: for the window's
        length the newest second steers (no brake: a window falling from the burst is no
        trend; and a window that has just let the burst out reads low while the ramp's newest
        second may already be over). A newest second over the setpoint then holds the rate
        (the burst may not be over, or the ramp went past the knee), teaching nothing.
        """
        if self._last_latency is None or self.knee is not None:
            return r, rising, False
        last_r = self._last_latency / self.setpoint_s
        if self._start_held and r > 1.0 and rising < 0 and last_r < self.BURST_OVER_BELOW:
            self._burst_tail_until = self._k + self.lag_steps
        if self._burst_tail_until is not None and self._k < self._burst_tail_until:
            if last_r >= 1.0 and len(self._applied) >= 2:
                # If this is the ramp going past the knee (not the burst again), its culprit is the
                # rate of a step ago (the newest second lags the rate by the pipe's ~1 s), not the
                # one the window will blame a lag from now.
                self._tail_culprit = (self._k, self._applied[-2])
            return last_r, 0.0, last_r >= 1.0
        return r, rising, False

    def _undo_jump(self, u: float) -> tuple[float, str, float, float, float] | None:
        """A jump of the ramp (x JUMP or more in one step) that the newest second shows over the setpoint
        within a lag, before any knee is known: back to the rate before the jump at once, that rate the
        knee (until the window over that follows blames its lag) and the jump's rate the ceiling (see
        _climb_to_jump).

        The window shows a raise a lag later. A x2 ramp that had just left the backup's start (on one
        quiet newest second, 2-34 ms, the window still over the setpoint) held 16 MB/s for 2-3 s on
        newest seconds at 1.5-1.8x the setpoint and then landed 2 % under it: the knee was 11 MB/s and
        every 70 ms copy of the fourteenth session took its worst seconds there (the spread 1.59x the
        best fixed rate's; from the 20th second on it was the fixed rate's). The newest second is noisy,
        and the start's bursts come back: a jump undone may teach nothing (see _climb_to_jump).
        """
        jump, self._jump = self._jump, None
        if jump is None or self._warming or self.knee is not None or self._last_latency is None:
            return None
        k, before = jump
        if self._k - k > self.lag_steps:
            return None  # the window shows it by now
        if u < self.JUMP * before or self._last_latency < self.setpoint_s:
            self._jump = jump  # still within the lag: a later newest second may show it
            return None
        self.knee = self._episode_knee = before
        self._ceiling, self._undone = (u, self._k) if self.bisect else (None, None)
        self._halvings, self._ramp_goal = 0, None
        self._hold_until = self._k + self.lag_steps
        self._start_held, self._burst_tail_until, self._tail_culprit = False, None, None
        return (before, f"newest second over the setpoint after a jump: back to {before:.2f} of max",
                before - u, 0.0, 0.0)

    def _climb_to_jump(self, c: float, r: float) -> None:
        """Back under the setpoint after a jump undone (see _undo_jump): move the knee towards the jump's
        rate `c`, once the window has seen the knee's rate for a whole lag and latency is under
        RAMP_BISECT_BELOW. A quarter of the way (in log, CLIMB_SHARE) a lag: the plant is convex, and the
        geometric mean of a x2 jump was already past the knee (fifteenth session, 100 ms: 12.1 ->
        17.1 MB/s on a window at 0.6x, the knee near 13, 249 ms a second; on the simulated plant half
        the way at 0.33x the setpoint overshot too); half the way only under CLIMB_HALF_BELOW (the
        newest second undone on a sixth-session trace was the start's, the knee 2.5x the rate undone to,
        latency there 0.26x). While latency is under UNDONE_FORGET_BELOW the
        window need not have seen the knee's rate for a whole lag (the second undone was more likely
        the backup's start than the jump), and within 1.2x of the jump that far under the setpoint the
        jump taught nothing: the knee is forgotten and the ramp goes on.
        """
        far = r < self.UNDONE_FORGET_BELOW
        lowest = self._applied[-1] if far else min(self._applied)  # far under: the rate now is enough
        seen = len(self._applied) == self._applied.maxlen and lowest >= self.backoff * self.knee * 0.99
        if not seen or r >= self.RAMP_BISECT_BELOW:
            return
        if c <= (1.2 if far else 1.05) * self.knee:
            if far:
                self.knee = self._episode_knee = None  # the jump was not what went over: ramp on
            self._ceiling, self._undone = None, None
            return
        share = 0.5 if r < self.CLIMB_HALF_BELOW else self.CLIMB_SHARE
        self.knee = min(self.knee * (c / self.knee) ** share, self.knee / max(r, 1e-6))
        self._hold_until = self._k + self.lag_steps
        self._halvings += 1

    def _at_start(self, window: int | None = None) -> bool:
        """In the copy's first `window` steps, started low, never faster than the first doubling of the
        rate the copy started at (the read-in of the backup tool may have doubled the initial rate already)."""
        window = self.start_hold_steps if window is None else window
        start = self._copy_start if self._copy_start is not None else self._initial  # None: still read in
        # While the tool is read in, its own start window: the hold there cannot last the whole read-in
        # (at a low rate a minute, and a load over the setpoint then must be cut, not held).
        k = self._warm_k if self._warming else self._copy_k
        return self._initial <= self.low_start and k <= window and self._peak <= 2.2 * start

    def set_setpoint(self, setpoint_s: float) -> None:
        # The knee was where latency crossed the old setpoint: meaningless for a new one; the mean so
        # far was held against the old one.
        super().set_setpoint(setpoint_s)
        with self._lock:
            self.knee, self._episode_knee, self._over, self._hold_until = None, None, False, None
            self._ceiling, self._undone, self._jump = None, None, None
            self._mean_sum, self._mean_n, self._copy_steps, self._aim = 0.0, 0.0, 0, 1.0
            self._load_ref, self._episode_load = None, []

    def set_max_rate(self, max_rate_bytes_per_s: float) -> None:
        old = self.max_rate_bytes_per_s
        super().set_max_rate(max_rate_bytes_per_s)
        with self._lock:
            scale = old / self.max_rate_bytes_per_s
            if self.knee is not None:
                self.knee = min(1.0, self.knee * scale)
            if self._episode_knee is not None:
                self._episode_knee = min(1.0, self._episode_knee * scale)
            self._applied = deque((min(1.0, f * scale) for f in self._applied), maxlen=self.lag_steps + 1)

    def _forget(self) -> None:
        super()._forget()
        self._y_prev: float | None = None
        self._lr: float | None = None  # smoothed log(latency / setpoint)

    def _law(self, latency_s: float, dt: float) -> tuple[float, str, float, float, float]:
        self._k += 1
        if self._warming:
            self._warm_k += 1
        else:
            self._copy_k += 1  # the copy's steps: the start's rules count from the backup tool's start
        u = self._fraction
        if self._warmed and not self._warming:
            # The copy starts: the rates applied while the tool was read in drove no copy, and its first
            # seconds (the first chunk's read) must not be blamed on them. A real run learnt a knee of
            # 4 MB/s from its read-in rate that way and crept from 8 MB/s for a minute (0.77x the speed).
            self._applied.clear()
            # The read-in ramps as latency allows (a cold tool at a low --max-rate took minutes at a
            # capped rate), but the copy, and mariabackup's first chunk read at the disk's full speed,
            # starts no higher than the first doubling of the initial rate. A real run that started the
            # copy at the read-in's 15 MB/s took that chunk for an overshoot and learnt a knee of 5.4 MB/s.
            u = min(u, self.growth_max * self._initial)
            self._jump = None
        self._warmed = self._warming
        if not self._warming and self._copy_start is None:
            # The start's rules count from here: a read-in that ended between two steps lets the copy's
            # first step ramp x2 from the read-in's rate; measured from the initial rate, that put the
            # first chunk's burst past the start rules (a real run cut it as an overshoot, learnt a knee
            # of 4.8 MB/s and crept at 0.42x the setpoint for 100 s).
            self._copy_start, self._peak = u, 0.0
        self._applied.append(u)
        self._peak = max(self._peak, u)
        flow = None if self._warming else self._copy_flow()  # the copy's real rate when under the limit
        if self._over and self._load and self._load[-1] is not None:
            self._episode_load.append(self._load[-1])  # an overshoot's transactions (see _load_rose)
        r = latency_s / (self.setpoint_s * self._aim)
        y_prev, self._y_prev = self._y_prev, latency_s
        rising = 0.0 if y_prev is None else (latency_s - y_prev) / self.setpoint_s
        undone = self._undo_jump(u)
        if undone is not None:
            return undone
        r, rising, burst = self._through_start_burst(r, rising)
        if burst:
            return u, "over setpoint in the backup's start (its newest second): holding", 0.0, 0.0, 0.0
        lr = math.log(max(r, 1e-6))
        if self._start_held and r <= 1.0:
            # The backup's start is over: the burst it caused says nothing about the copy's rate, so
            # it neither damps the ramp (smoothed ratio) nor brakes it (a window falling from it).
            self._start_held, self._lr, rising = False, None, 0.0
        self._lr = lr if self._lr is None else (1.0 - self.smoothing) * self._lr + self.smoothing * lr
        waiting = self._hold_until is not None and self._k < self._hold_until

        if u == 0.0:
            if r >= 1.0 and latency_s >= self.setpoint_s:  # under the setpoint itself restarts (aim < 1 too)
                return 0.0, "stopped: latency above setpoint", 0.0, 0.0, 0.0
            # Latency is back under the setpoint: never stay stopped. The cuts that led to the stop
            # lowered the knee to rates applied while a queue (or someone else's load) held latency
            # up; go back to the knee the overshoot first showed, and restart below it.
            if self._episode_knee is not None:
                self.knee = self._episode_knee
            else:
                self.knee = None  # an overshoot that taught no knee (at the start): ramp again, do not creep
            base = self.knee if self.knee is not None else self._initial
            new = min(1.0, max(self.restart_min, self.restart_share * base))
            self._over, self._hold_until, self._lr = False, self._k + self.lag_steps, lr
            return new, f"latency back under the setpoint: restarting at {new:.2f} of max", new, 0.0, 0.0

        if r <= 1.0 and self.knee is None and self._at_start() and self._last_latency is not None \
                and self._last_latency >= self.setpoint_s:
            # The copy's first seconds, the window still under the setpoint but its newest second over it:
            # the backup tool's start-up reads (its first data chunk) arriving. Hold; do not ramp into them.
            return u, "over setpoint at the copy's start (its newest second): holding", 0.0, 0.0, 0.0
        if r > 1.0:
            if self.knee is None and self._at_start():
                # Over the setpoint in the copy's first seconds, the window still showing the starting
                # rate (chosen low): the backup tool's own start. mariabackup reads the first chunk of
                # each file it copies at once (10 MiB, one O_DIRECT read, --parallel of them), whatever
                # the pipe's rate; stopping the pipe does not end those reads, it only delays the
                # ramp. Hold the starting rate until the start window is over;
                # latency still over the setpoint after it is the copy's (or a load's) and is cut.
                new = min(u, self._copy_start if self._copy_start is not None else self._initial)
                self._over, self._start_held = False, True
                return new, "over setpoint at the copy's start (the backup tool's start-up reads): holding", \
                    new - u, 0.0, 0.0
            first = not self._over
            self._over = True
            if first:
                # The window shows the rate applied about `lag` steps ago: that is where the knee is
                # (or below it). Land just under it; a single noisy window then costs 2 %, not a
                # cut in proportion to the spike. Only a deep overshoot cuts in proportion at once.
                culprit, knee_before = self._applied[0], self.knee
                if self._tail_culprit is not None and self._k - self._tail_culprit[0] <= self.lag_steps:
                    culprit = max(culprit, min(u, self._tail_culprit[1]))  # only while the window can show it
                self._tail_culprit = None
                # The window over that follows a jump undone (it lags the newest second) shows the jump's
                # seconds: the jump stays the ceiling, and the window blames its lag as usual (the rate before
                # a jump in a x2 chain was over too: a real 100 ms run kept 16 MB/s undone from 32 for 12 s).
                aftermath = self._undone is not None and self._k - self._undone <= 2 * self.lag_steps
                if self._warming or (self.knee is None
                                     and self._at_start(window=self.start_hold_steps + self.lag_steps)):
                    # Still over the setpoint just after the start window, the window showing the
                    # starting rate: a burst that outlasted the hold, or a load that was there before
                    # the copy (or the tool's read-in, before any copy). Cut as usual, but learn no knee
                    # from it: remembered, it would pin the copy under the starting rate and creep.
                    culprit = 0.0
                # A copy moving under its limit (see _copy_flow) drove latency over at the rate it moved:
                # a limit above that is no knee, and a cut to under it but above the flow does nothing.
                base = u if flow is None else min(u, flow)
                if culprit > 0:
                    culprit = min(culprit, base)
                    self.knee = culprit if self.knee is None else min(self.knee, culprit)
                new = self.backoff * min(base, self.knee if self.knee is not None else base)  # never a raise
                if r >= self.deep:
                    new = min(new, base * (self.deep / r) ** self.beta)
                self._moved = flow is not None
                if self._moved:
                    # The copy did not speed up into this overshoot (it moved under its limit): the load
                    # or the machine moved the knee, by as much as latency says. Landing 2 % under the
                    # old rate left Figure 13a's +40 % load over the setpoint until a second overshoot
                    # (tenth session: 10-12 s back). A noisy window costs a few seconds of ramp back
                    # to the knee (kept); a load that rose scales it down when latency is back (_load_rose).
                    new = min(new, base * (1.0 / r) ** self.beta)
                self._cuts, self._episode_knee = 1, self.knee
                self._start_load_watch()
                # The knee is between the culprit and this rate. A mild overshoot at the knee a ramp taught,
                # while that ramp's first halving is untried or under way, says nothing about the rate the
                # ramp overshot at: keep it as the ceiling (a real 70 ms run crept 1 %/step from a knee at
                # 0.75x the oracle's rate after a window at 0.95x the setpoint reset it, ninth session).
                keep = (self._ceiling is not None and (self._halvings == 0 or self._ramp_goal is not None)
                        and r < self.KEEP_CEILING_BELOW
                        and knee_before is not None and culprit >= 0.95 * knee_before
                        and self._ceiling > self.RAMP_OVERSHOOT * knee_before)
                if not keep and not aftermath:
                    self._ceiling, self._undone = (base if self.bisect else None), None
                self._halvings, self._ramp_goal = 0, None
            elif (waiting and r < self.recut * self._r_cut) or rising < 0:
                # The last cut cannot show yet, or the queue is already draining.
                return u, "over setpoint; waiting for the last cut to show", 0.0, 0.0, 0.0
            else:
                # Still rising a full lag after the last cut (or far worse than at it): this rate is
                # above the knee too. Each further cut is deeper (x0.85, x0.72, ...), and a latency far
                # over the setpoint cuts in proportion to it: a queue that runs away drains only
                # below capacity, and the knee may have moved far (a machine that got busy).
                # A copy under its limit cuts from the rate it moved at (at most half the limit lower:
                # one slow second of the source is no reason to stop the copy).
                base = u if flow is None else min(u, max(flow, 0.5 * u))
                if base > 0 and not self._warming:  # a read-in rate teaches no knee (the copy starts low)
                    self.knee = base if self.knee is None else min(self.knee, base)
                self._cuts += 1
                self._undone = None  # the rate a jump was undone to is over too: the usual bisection
                new = base * min(self.further_cut ** (self._cuts - 1), min(1.0, self.deep / r) ** self.beta)
            self._r_cut = r
            if new < 0.01:
                new = 0.0
            self._hold_until = self._k + self.lag_steps
            note = "stopped: latency above setpoint" if new == 0.0 else f"over setpoint: cut to {new:.2f} of max"
            return new, note, new - u, 0.0, 0.0

        if self._over and self._load_rose(u):
            self._over = False
            return u, "back under the setpoint after a load increase: the knee is here now", 0.0, 0.0, 0.0
        self._over = False
        if waiting:
            return u, "waiting for the last cut to show", 0.0, 0.0, 0.0
        if self.knee is not None:
            self.knee = min(1.0, self.knee * (1.0 + self.knee_loosen_per_step))
            if flow is None and not self._warming and len(self._applied) == self._applied.maxlen \
                    and r < self.KNEE_FOLLOWS_BELOW:
                # Every rate of the last lag is in this window, and it is clearly under the aim: the knee is
                # above them. Probing past a stale knee (1 %/step) taught nothing before, so the next window over
                # cut back to it: a real 100 ms run fell 14.9 -> 10.2 MB/s on one window at 1.2x and crept
                # back for 40 s (eleventh session; the copy's mean was 0.81x the setpoint in the tenth).
                self.knee = min(1.0, max(self.knee, min(self._applied)))
            c = self._ceiling
            # A ramp's overshoot leaves the knee at a fraction of the rate it happened at (x2 a step,
            # the window lagging 3-4 steps): the first halving needs only latency clearly under the
            # setpoint, not far under it (on a disk-bound host latency at half the knee is 0.4-0.7x).
            ramp = self._ramp_halving()
            below = max(self.bisect_below, self.RAMP_BISECT_BELOW) if ramp else self.bisect_below
            if c is not None and self._undone is not None:
                self._climb_to_jump(c, r)
            elif c is not None and u >= self.backoff * self.knee * 0.99 and r < below:
                # At the knee's lower bound with latency well under the setpoint: the knee was
                # underestimated (the window showed a rate of a fast ramp). Bisect towards the
                # rate the overshoot happened at, one lag per halving. A ramp's first halving
                # (latency only clearly under the setpoint) goes in steps of at most 1/latency
                # ratio, one a lag (at 0.7x: x1.43 a lag, not x2.8 at once across a 4-8x gap).
                if c <= 1.05 * self.knee:
                    self._ceiling = None
                else:
                    if ramp:
                        goal = self._ramp_goal or math.sqrt(self.knee * c)
                        self.knee = min(goal, self.knee / max(r, 1e-6))
                        self._ramp_goal = goal if self.knee < 0.999 * goal else None
                    else:
                        self.knee = math.sqrt(self.knee * c)
                    self._hold_until = self._k + self.lag_steps
                    self._halvings += 1
        if r + self.lag_steps * max(0.0, rising) >= 1.0:
            return u, "latency rising towards the setpoint: holding", 0.0, 0.0, 0.0
        if flow is not None:
            # The copy does not use the limit it has: raising it would only wind it up (see _copy_flow).
            # It is held, not lowered to what the copy moves: the copy's share of a disk it shares with
            # the tenant depends on its limit, so a limit set from the flow ratchets down with every
            # slow second (eleventh session: an unthrottled copy, lowered to 1/0.75 of its flow, fell
            # from 26 to 12 MB/s and took 1.59-1.83x the unthrottled time at a setpoint that never bound).
            return u, (f"the copy moves at {flow * self.max_rate_bytes_per_s / 1e6:.1f} MB/s, under its limit: "
                       "holding"), 0.0, 0.0, 0.0
        # Ramp on the larger of this window and the smoothed ratio: one quiet window does not leap.
        q = max(r, math.exp(self._lr))
        factor = min(self.growth_max, q ** -self.alpha) if q > 0 else self.growth_max
        if factor <= 1.0:  # this window under the setpoint, the smoothed ratio still over it
            return u, "latency just back under the setpoint: holding", 0.0, 0.0, 0.0
        new = max(u * factor, u + self.min_step * (factor - 1.0) / (self.growth_max - 1.0 or 1.0))
        note = f"ramping x{factor:.2f}"
        if not self._warming and len(self._applied) == self._applied.maxlen and q >= self.VOUCH_FROM:
            # The window vouches for the slowest rate of its lag, not for the rate applied now: raises
            # made within the lag are not in it yet. Several in a row each took the window's factor
            # again (real runs: x1.31 then x1.25 at 0.76-0.8x the setpoint, 16 -> 27.5 MB/s, and
            # x1.36, x1.49, x1.73 from 7.8 MB/s; each overshot to 300-450 ms and cost the copy's
            # spread). So the ramp goes no higher than that rate times the factor.
            allowed = q ** -self.alpha  # what the window allows, unclamped (q >= VOUCH_FROM > 0)
            vouched = min(self._applied) * allowed
            if self.knee is not None:
                vouched = max(vouched, self.backoff * self.knee)  # back to the knee it knows: no extrapolation
            if new > vouched:
                new = max(u, vouched)
                note = (f"{note}, at most the window's rates x{allowed:.2f}" if new > u else
                        "holding: the window vouches for no more than its lag's rates")
        if self.knee is not None and new > self.backoff * self.knee:
            # Near the rate that overshot before: creep, do not leap.
            creep = u * (1.0 + self.probe_per_step)
            new = max(min(new, self.backoff * self.knee), min(new, creep), u)
            note = "near the last knee: probing"
        if self._warming:
            note = f"{note} while the backup tool is read in"  # the copy will start low (see above)
        if new >= 1.0:
            new, note = 1.0, "at max rate"
        if not self._warming and self.knee is None and self._copy_k > 1 and 0 < u and new >= self.JUMP * u:
            self._jump = (self._k, u)  # the window will show it a lag later (see _undo_jump)
        return new, note, new - u, 0.0, 0.0
