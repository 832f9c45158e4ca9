"""The default controller on the simulated plant: it finds the slack in seconds and does not swing.

Compared on the same plant and seeds with the velocity PID (`--controller pid`),
which ramps by a fixed share per step and cycles around the knee. Also the PID's
clip fix: a latency spike that clamps the output at 0 must not kick the rate up
when it clears.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from slacker.controller import FixedRate, Gains, SlackController, ThrottleController
from slacker.errors import InvalidInput
from slacker.latency import LatencySample

try:
    import plant as plant_mod
except ModuleNotFoundError:  # tests/unit became a package
    from . import plant as plant_mod

Plant, simulate = plant_mod.Plant, plant_mod.simulate
MAX_RATE = 50_000_000
SEEDS = (1, 2, 3, 4)


def sample(latency_s: float | None, t: float) -> LatencySample:
    if latency_s is None:
        return LatencySample("fake", t, window_s=3.0)
    return LatencySample("fake", t, sum_s=latency_s * 100, count=100, window_s=3.0)


def steps_to_reach(fractions: list[float], level: float) -> int:
    return next(k for k, f in enumerate(fractions) if f >= level)


@pytest.mark.parametrize("setpoint_s", [0.3, 1.0])
def test_finds_the_slack_in_seconds_where_the_pid_needs_tens(setpoint_s: float) -> None:
    for seed in SEEDS:
        slack = simulate(SlackController(setpoint_s, MAX_RATE), Plant(seed=seed), 300).fractions()
        pid = simulate(ThrottleController(setpoint_s, MAX_RATE), Plant(seed=seed), 300).fractions()
        settled = statistics.mean(slack[100:])
        # From 2 % of max to 90 % of the rate it settles at: seconds, not tens of them.
        assert steps_to_reach(slack, 0.9 * settled) <= 6
        assert steps_to_reach(pid, 0.9 * settled) >= 10


def per_step_run(controller, plant: "Plant", steps: int) -> tuple[list[float], list[float]]:
    """Fractions and per-step mean latencies (the bench's per-second means), not window averages."""
    source = plant.source()
    fractions, latencies = [], []
    for _ in range(steps):
        s0, c0 = plant.snapshot()
        plant.advance(controller.rate_bytes_per_s)
        s1, c1 = plant.snapshot()
        fractions.append(controller.step(source.read(), plant.t, plant.bytes_done).fraction)
        if c1 > c0:
            latencies.append((s1 - s0) / (c1 - c0))
    return fractions, latencies


def oracle(make_plant, setpoint_s: float, steps: int, settle: int) -> tuple[float, float]:
    """The best fixed rate that meets the setpoint on this plant (a Figure 5 sweep): (fraction, latency sd)."""
    best = (0.0, 0.0)
    for i in range(55, 85):
        fr, lat = per_step_run(FixedRate(i / 100 * MAX_RATE), make_plant(), steps)
        tail = lat[settle:]
        if statistics.fmean(tail) <= setpoint_s:
            best = (i / 100, statistics.pstdev(tail))
    return best


def _stalls(seed: int):
    # A shared machine: now and then the disk is busy elsewhere for a second (speed x0.25).
    return lambda t: 0.25 if random.Random(int(t) * 7919 + seed).random() < 0.04 else 1.0


PLANTS = {
    "plain": lambda seed: Plant(seed=seed),
    "shared machine": lambda seed: Plant(seed=seed, speed_noise=0.1, disk_speed=_stalls(seed)),
}


@pytest.mark.parametrize("plant_kind", list(PLANTS))
@pytest.mark.parametrize("setpoint_s", [0.3, 1.0])
def test_copies_as_fast_as_the_best_fixed_rate_with_its_spread(plant_kind: str, setpoint_s: float) -> None:
    # The goals, on the plant: copy speed >= 0.9x the oracle's, latency spread <= 1.5x the
    # oracle's, mean not above the setpoint. On the shared machine the old controller cut in
    # proportion to every noisy window and copied at 0.87x the oracle at 300 ms.
    speeds, spreads, means = [], [], []
    for seed in (1, 2, 3, 4, 5, 6):  # an early stall can pin one seed under a low knee: judge the median
        make = lambda: PLANTS[plant_kind](seed)  # noqa: E731
        best, best_sd = oracle(make, setpoint_s, 400, 100)
        fr, lat = per_step_run(SlackController(setpoint_s, MAX_RATE), make(), 400)
        speeds.append(statistics.fmean(fr[100:]) / best)
        spreads.append(statistics.pstdev(lat[100:]) / best_sd)
        means.append(statistics.fmean(lat[100:]) / setpoint_s)
    assert statistics.median(speeds) >= 0.9, speeds
    assert statistics.median(spreads) <= 1.5, spreads
    assert statistics.median(means) <= 1.1, means


def test_holds_the_setpoint_without_settling_above_it() -> None:
    for seed in SEEDS:
        trace = simulate(SlackController(0.3, MAX_RATE), Plant(seed=seed), 500)
        assert 0.85 < trace.mean_latency(100) / 0.3 < 1.1  # 0.73-0.83 before the noise-proof landing
        for start in (100, 200, 300, 400):  # never settles far above it in any stretch of 100 s
            assert trace.mean_latency(start, start + 100) < 1.25 * 0.3


def test_no_sustained_oscillation_after_the_knee_is_found() -> None:
    # Count the big swings of the rate (a drop of a fifth of max within 5 s) after the first
    # minute: the PID keeps cycling on this plant, the slack controller settles.
    def big_drops(fractions: list[float]) -> int:
        return sum(1 for k in range(60, len(fractions) - 5) if fractions[k] - min(fractions[k:k + 5]) > 0.2)

    for seed in SEEDS:
        slack = simulate(SlackController(0.3, MAX_RATE), Plant(seed=seed), 400).fractions()
        pid = simulate(ThrottleController(0.3, MAX_RATE), Plant(seed=seed), 400).fractions()
        assert big_drops(slack) < big_drops(pid) / 2, (big_drops(slack), big_drops(pid))


def test_follows_a_40_percent_load_step_and_a_load_that_falls() -> None:
    setpoint_s = 0.3
    cut = []
    for seed in range(1, 7):
        trace = simulate(SlackController(setpoint_s, MAX_RATE),
                         Plant(arrival_rate=lambda t: 18.0 if t < 150 else 18.0 * 1.4, seed=seed), 350)
        before = statistics.mean(trace.fractions()[100:150])
        cut.append(min(trace.fractions()[150:162]) / before)
        assert trace.mean_latency(165, 350) < 1.1 * setpoint_s
        fixed = simulate(FixedRate(before * MAX_RATE),
                         Plant(arrival_rate=lambda t: 18.0 if t < 150 else 18.0 * 1.4, seed=seed), 350)
        assert fixed.mean_latency(250, 350) > 2 * setpoint_s  # the step breaks a fixed rate (2.4-109x here)
    # Cut within 12 steps of the step. Not on every seed: where the rate before the step sat lower under
    # its knee, the step's overshoot is mild and a 2 % landing plus the aim's trim is enough (a 3-seed
    # version of this test failed or passed with the seeds' luck: main's controller lost seed 5, 0.93).
    assert sum(c < 0.85 for c in cut) >= 4 and statistics.median(cut) < 0.8, cut
    # Load halves: the knee it remembered loosens and the copy takes the freed slack.
    trace = simulate(SlackController(setpoint_s, MAX_RATE),
                     Plant(arrival_rate=lambda t: 22.5 if t < 150 else 10.0, seed=1), 350)
    assert statistics.mean(trace.fractions()[100:150]) < 0.8
    assert statistics.mean(trace.fractions()[280:]) > 0.95


def test_cuts_under_the_knee_once_then_waits_then_cuts_deeper_each_time() -> None:
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.1)
    applied = []
    for k in range(4):  # far below the setpoint: x2 per step
        applied.append(c.fraction)
        c.step(sample(0.25, float(k)), float(k))
    assert c.fraction == pytest.approx(1.0)
    first = c.step(sample(2.0, 4.0), 4.0)
    # The window shows the rate of 3 steps ago (0.2 here): land under it, not at u / r.
    assert first.fraction == pytest.approx(0.98 * applied[1]) and "over setpoint" in first.note
    # The window still shows the old queue for a few steps: no second cut while it cannot show.
    for k in range(5, 7):
        out = c.step(sample(2.2, float(k)), float(k))
        assert out.fraction == first.fraction and "waiting" in out.note
    # Still rising a full lag later: cut again, deeper (x0.85), then x0.72.
    second = c.step(sample(2.5, 7.0), 7.0)
    assert second.fraction == pytest.approx(0.85 * first.fraction)
    for k in range(8, 10):
        c.step(sample(2.6, float(k)), float(k))
    assert c.step(sample(2.7, 10.0), 10.0).fraction == pytest.approx(0.85 ** 2 * second.fraction)


def test_a_knee_underestimated_by_a_fast_ramp_is_bisected_back_up() -> None:
    # x2 per step: the first window over shows the rate of 3 steps earlier, 1/8 of the rate the
    # overshoot happened at. With latency far below the setpoint there, the knee is bisected towards
    # that rate one lag at a time, instead of creeping back at 1 % per step (70+ steps).
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.1)
    for k in range(3):
        c.step(sample(0.1, float(k)), float(k))
    crossing = c.fraction
    assert c.step(sample(1.5, 3.0), 3.0).fraction < crossing / 4
    fractions = [c.step(sample(0.1, float(k)), float(k)).fraction for k in range(4, 20)]
    assert fractions[-1] >= 0.8 * crossing and max(fractions) <= crossing


def test_a_ramps_overshoot_is_bisected_with_latency_clearly_but_not_far_under_the_setpoint() -> None:
    # Real runs on a disk-bound host: x2 a step to 22 MB/s, the window showed it 4 steps late, the knee
    # was learnt at 5.6 MB/s (a quarter of where the overshoot happened), and latency at 5.6 MB/s was
    # 0.3-0.7x the setpoint, never under the 0.2x that bisection asked for: the copy crept 1 %/step from
    # there (0.68x the oracle's speed). The first halving (to the geometric mean of the knee and the
    # overshoot's rate, when that rate is over 1.5x the knee) needs latency under 0.8x, and goes there
    # in steps of at most 1/latency ratio, one a lag; later halvings still need 0.2x.
    learnt, ceiling = 0.08, 0.64
    for lat_ms in (45, 70):
        c = SlackController(0.1, MAX_RATE)
        lat = [0.01] * 5 + [0.2, 0.15, 0.12, 0.08] + [lat_ms / 1000] * 16
        fractions, knees, aims = [], [], []
        for k, x in enumerate(lat):
            fractions.append(c.step(sample(x, float(k)), float(k)).fraction)
            knees.append(c.knee)
            aims.append(c.state()["aim"])
        assert min(fractions[5:9]) < 0.1  # the overshoot cut to the knee it showed
        assert c.knee >= 0.9 * (learnt * ceiling) ** 0.5, (lat_ms, knees)  # and went towards where it happened
        # ... by at most 1/ratio a lag, the ratio taken against the aim (the copy's mean trim), + loosening
        for a, b, aim in zip(knees[9:], knees[10:], aims[10:]):
            assert b / a <= 1.01 * aim * 100 / lat_ms, (lat_ms, knees, aims)
        if lat_ms == 70:  # 1/0.7 a lag is less than the way to the goal (x2.26): in steps, not one leap
            assert sum(1 for a, b in zip(knees[9:], knees[10:]) if b > 1.05 * a) >= 2, knees
        assert max(fractions) <= ceiling and fractions[-1] < 0.5
    # Latency at 0.95x (0.83x of the aim the copy's low mean raises to 1.15): too close to the setpoint
    # for a leap; the knee stays and the rate creeps.
    c = SlackController(0.1, MAX_RATE)
    lat = [0.01] * 5 + [0.2, 0.15, 0.12, 0.08] + [0.095] * 12
    fractions = [c.step(sample(x, float(k)), float(k)).fraction for k, x in enumerate(lat)]
    assert c.knee < 0.11 and fractions[-1] < 0.11  # one step at the overshoot's 0.08 tail, none after


def test_a_runaway_queue_is_cut_as_deep_as_it_takes() -> None:
    # Run 2 at 25 ms (docs/results.md): after the first cut latency went on to 80x the setpoint
    # and the old controller cut by at most 15 % per lag while the queue ran away.
    c = SlackController(0.025, MAX_RATE, initial_fraction=0.5)
    c.step(sample(0.02, 0.0), 0.0)
    c.step(sample(0.024, 1.0), 1.0)
    first = c.step(sample(0.05, 2.0), 2.0).fraction
    assert 0 < first < 0.5
    for k, lat in ((3, 0.03), (4, 0.3)):  # waiting for the cut to show, unless it gets far worse...
        c.step(sample(lat, float(k)), float(k))
    assert c.fraction < first  # ...which it did (x6 the latency at the cut): cut again at once
    out = c.step(sample(2.0, 5.0), 5.0)  # 80x and rising: far worse again, in proportion: a stop
    assert out.fraction == 0.0 and "stopped" in out.note


def test_a_single_noisy_window_costs_little() -> None:
    # At a steady rate, one window at 2.4x the setpoint (a shared machine's hiccup) used to cut the
    # rate to u / 2.4; now it lands 2 % under the rate that showed it (only r >= 2.5 cuts in proportion).
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.6)
    for k in range(40):  # at 0.9x the setpoint the ramp is slow (see the next test): let it settle
        c.step(sample(0.9, float(k)), float(k))
    before = c.fraction
    assert before == 1.0
    out = c.step(sample(2.4, 40.0), 40.0)
    assert out.fraction >= 0.95 * before


def test_a_rate_probed_past_a_stale_knee_is_not_lost_to_one_window_over() -> None:
    # Real 100 ms runs (tenth/eleventh sessions): the knee learnt early stayed at ~10 MB/s while the
    # rate probed to 14.9 MB/s under the setpoint; one window at 1.2x then cut back to the old knee
    # (14.9 -> 10.2 MB/s) and the copy crept back for 40 s: its mean sat at 0.81x the setpoint.
    # A lag of windows under the setpoint at the probed rates raises the knee to them.
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.4)
    c.step(sample(1.2, 0.0), 0.0)  # an overshoot teaches a knee at 0.4
    assert c.knee == pytest.approx(0.4)
    for k in range(1, 41):
        c.step(sample(0.5, float(k)), float(k))
    before = c.fraction
    assert before > 1.25 * 0.4  # probed well past the knee it was taught
    out = c.step(sample(1.5, 41.0), 41.0)
    assert "over setpoint" in out.note
    assert 0.9 * before <= out.fraction < before


def test_never_stuck_at_zero_once_latency_is_back_under_the_setpoint() -> None:
    # The disk slows to 35 % for 30 s (someone else's load): the queue runs away even with the copy
    # stopped. Once latency is back under the setpoint the copy restarts and is back at speed in
    # seconds; the old controller kept the knee its cuts had lowered and needed 130-180 s.
    for seed in (1, 2, 3):
        plant = Plant(seed=seed, disk_speed=lambda t: 0.35 if 150 <= t < 180 else 1.0)
        trace = simulate(SlackController(0.3, MAX_RATE), plant, 300)
        f = trace.fractions()
        lat = [s.latency_s for s in trace.steps]
        before = statistics.mean(f[100:150])
        assert min(f[150:185]) == 0.0  # it did stop
        back = next(k for k in range(180, 300) if lat[k] is not None and lat[k] < 0.3)
        assert all(f[k] > 0 for k in range(back, 300))
        assert next(k for k in range(back, 300) if f[k] >= 0.8 * before) - back <= 10
        assert trace.mean_latency(back + 20, 300) < 1.25 * 0.3  # and holds near the setpoint again


def test_a_spike_that_stops_the_copy_does_not_kick_the_rate_up_when_it_clears() -> None:
    # The defect noted for the PID (clip at 0, then the recovery applied in full): the slack
    # controller restarts below the rate that showed the knee, never above where it was.
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.3)
    for k in range(6):
        c.step(sample(0.95, float(k)), float(k))
    before = c.fraction
    assert c.step(sample(200.0, 6.0), 6.0).fraction == 0.0
    after = [c.step(sample(0.9, float(k)), float(k)).fraction for k in range(7, 12)]
    assert after[0] > 0 and max(after) <= before


def test_a_new_setpoint_forgets_the_old_knee() -> None:
    # Latency over a setpoint nobody can meet: the copy stops (no knee learnt at the starting rate)...
    c = SlackController(0.001, MAX_RATE)
    for k in range(12):
        c.step(sample(0.05, float(k)), float(k))
    assert c.fraction == 0.0 and c.knee is None
    # ...raised live far above the latency: the ramp is fast again, not a creep under the old knee.
    c.set_setpoint(5.0)
    for k in range(12, 24):
        c.step(sample(0.05, float(k)), float(k))
    assert c.fraction == 1.0


def test_a_burst_at_the_start_of_the_copy_is_held_through_and_teaches_no_knee() -> None:
    # The backup tool's start stalls a disk-bound tenant for a few seconds at any rate: mariabackup reads
    # the first 10 MiB chunk of each file it copies (--parallel of them) at once, whatever the pipe's
    # rate (seen at 4 MB/s as 10-20x the setpoint). Stopping the pipe does not end those reads; it only
    # delayed the ramp by ~5 s. Learnt as the knee it pinned the copy at the starting rate.
    c = SlackController(0.07, MAX_RATE)
    lat = [0.9, 1.4, 0.8, 0.2, 0.01] + [0.01] * 20
    fractions = [c.step(sample(x, float(k)), float(k)).fraction for k, x in enumerate(lat)]
    assert min(fractions) == pytest.approx(0.02)  # held at the starting rate, never stopped
    assert max(fractions[:4]) == pytest.approx(0.02)
    assert c.knee is None
    assert fractions[-1] >= 0.5, fractions  # and ramps again (x2 per step), not a creep from 2 %


def test_a_start_burst_seen_after_the_first_doubling_goes_back_to_the_starting_rate() -> None:
    # Real run at 100 ms: the first window (server-side) was quiet, the rate doubled to 8 MB/s, then the
    # backup's start showed (12x the setpoint). The window still showed the starting rate: no knee.
    c = SlackController(0.1, MAX_RATE)
    lat = [0.04, 0.31, 1.08, 0.9, 0.68, 0.32, 0.05, 0.004] + [0.01] * 15
    fractions = [c.step(sample(x, float(k)), float(k)).fraction for k, x in enumerate(lat)]
    assert fractions[0] > 0.02 and min(fractions) == pytest.approx(0.02)
    assert c.knee is None and fractions[-1] >= 0.5, fractions


def test_latency_over_the_setpoint_past_the_start_window_is_cut_to_a_stop() -> None:
    # Not the backup's start: a tenant over its setpoint before and during the copy. The hold ends with
    # the start window; then the copy stops (and no knee at the starting rate is learnt).
    c = SlackController(0.1, MAX_RATE)
    fractions = [c.step(sample(0.5, float(k)), float(k)).fraction for k in range(25)]
    assert fractions[c.start_hold_steps - 1] == pytest.approx(0.02)
    assert fractions[-1] == 0.0
    lat_back = [c.step(sample(0.01, 25.0 + k), 25.0 + k).fraction for k in range(12)]
    assert c.knee is None and lat_back[-1] >= 0.3, lat_back


def test_the_start_hold_can_be_turned_off() -> None:
    c = SlackController(0.07, MAX_RATE, start_hold_steps=0)
    fractions = [c.step(sample(x, float(k)), float(k)).fraction for k, x in enumerate([0.9, 1.4, 0.8])]
    assert min(fractions) < 0.02
    with pytest.raises(InvalidInput):
        SlackController(0.07, MAX_RATE, start_hold_steps=-1)


def test_an_overshoot_after_the_ramp_still_teaches_the_knee() -> None:
    c = SlackController(0.1, MAX_RATE)
    for k in range(5):
        c.step(sample(0.01, float(k)), float(k))  # ramping: 0.02 -> 0.64
    assert c.fraction > 0.3
    c.step(sample(0.2, 5.0), 5.0)
    assert c.knee is not None and c.knee > 0.05


def test_shares_the_pids_safety_rules() -> None:
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.6)
    c.step(sample(0.5, 0.0), 0.0)
    f = c.fraction
    assert c.step(sample(None, 1.0), 1.0).fraction == f  # idle: hold
    bad = LatencySample.failed("fake", 2.0, "connection refused")
    assert c.step(bad, 2.0).fraction == f
    assert c.step(LatencySample.failed("fake", 3.0, "x"), 3.0).fraction == f
    assert c.step(LatencySample.failed("fake", 4.0, "x"), 4.0).fraction == pytest.approx(f / 2)
    c.pause()
    assert c.rate_bytes_per_s == 0
    with pytest.raises(InvalidInput):
        SlackController(1.0, MAX_RATE, growth_max=0.5)


# --- the velocity PID's clip at 0 -----------------------------------------------------------


@pytest.mark.parametrize("gains", [Gains(0.2, 0.05, 0.0), Gains(0.2, 0.05, 0.1)])
def test_pid_spike_that_clamps_at_zero_does_not_kick_the_rate_up(gains: Gains) -> None:
    c = ThrottleController(1.0, MAX_RATE, gains, initial_fraction=0.05)
    now = 0.0
    for _ in range(5):
        now += 1
        c.step(sample(0.9, now), now)
    before = c.fraction
    now += 1
    assert c.step(sample(4.0, now), now).fraction == 0.0  # the spike's drop is clipped at 0
    after = []
    for _ in range(4):
        now += 1
        after.append(c.step(sample(0.9, now), now).fraction)
    # Back where it was (plus the integral's own small drive), not above it. Without the fix
    # the P recovery is applied in full: 0.05 -> 0 -> 0.2, four times the rate before the spike.
    assert after[-1] <= before + 4 * gains.ki * 0.1 + 1e-9
    if gains.kd == 0:
        assert max(after) <= before + 4 * gains.ki * 0.1 + 1e-9


def test_the_ramp_starts_at_full_speed_when_the_start_burst_is_over() -> None:
    # A real run at 70 ms (server-side 3 s windows, the backup's start at t=2-5): when the window came back
    # under the setpoint the smoothed ratio still held the burst ("just back under: holding"), then the
    # window falling-then-rising read as a climb ("rising towards the setpoint: holding"): 2 s lost before
    # the first doubling. The burst is the backup tool's, not the copy's: the ramp starts at once, x2.
    c = SlackController(0.07, MAX_RATE)
    lat = [0.0436, 0.458, 0.543, 0.412, 0.182, 0.0315, 0.0250, 0.0166]
    fractions = [c.step(sample(x, float(k)), float(k)).fraction for k, x in enumerate(lat)]
    assert max(fractions[1:5]) == pytest.approx(0.02) and c.knee is None
    assert fractions[5] == pytest.approx(0.04)  # x2 as soon as the window is back under
    assert fractions[7] >= 0.08


def seconds(window_s: float, last_s: float, t: float) -> LatencySample:
    """A 3 s window and its newest second alone."""
    return LatencySample("fake", t, sum_s=window_s * 300, count=300, window_s=3.0, last_sum_s=last_s * 100,
                         last_count=100)


def test_the_start_hold_ends_when_the_newest_second_is_quiet_not_when_the_window_is() -> None:
    # A real run at 100 ms: the backup's start stalled the tenant at t=1-2 (858, 491 ms a second), the
    # tenant was quiet from t=3 (9.6 ms), the 3 s window came back under only at t=5. Ramping from the
    # quiet second gains the two steps the window lags; the window's fall is no trend (no brake).
    c = SlackController(0.1, MAX_RATE)
    window = [0.1002, 0.4651, 0.5738, 0.4241, 0.2096, 0.0157, 0.0345]
    last = [0.0614, 0.8584, 0.4915, 0.0096, 0.0444, 0.0040, 0.0635]
    out = [c.step(seconds(w, x, float(k)), float(k)) for k, (w, x) in enumerate(zip(window, last))]
    fractions = [o.fraction for o in out]
    assert fractions[1:3] == [pytest.approx(0.02)] * 2  # held through the burst
    assert fractions[3] == pytest.approx(0.04) and fractions[4] == pytest.approx(0.08), fractions
    assert fractions[5] == pytest.approx(0.16) and c.knee is None


def test_a_start_burst_that_comes_back_after_a_jump_is_undone_and_then_forgotten() -> None:
    # The newest second over the setpoint right after the ramp's x2 jump off a quiet second: the burst
    # again, or the jump past the knee (fourteenth session: every 70 ms run). Back to the rate before the
    # jump at once (the sixth session held the jump, which cost the 70 ms copies their spread). Here it
    # was the burst: latency is far under the setpoint, so once the climb back is within 1.2x of the jump
    # the knee is forgotten and the ramp goes on.
    c = SlackController(0.1, MAX_RATE)
    window = [0.3, 0.5, 0.45, 0.4, 0.35, 0.05] + [0.03] * 24
    last = [0.5, 0.6, 0.01, 0.4, 0.02, 0.01] + [0.02] * 24
    steps = [c.step(seconds(w, x, float(k)), float(k)) for k, (w, x) in enumerate(zip(window, last))]
    fractions = [s.fraction for s in steps]
    assert fractions[2] == pytest.approx(0.04)  # the quiet second: ramp
    assert fractions[3] == pytest.approx(0.02) and "after a jump" in steps[3].note  # the burst: undone
    assert max(fractions[3:12]) <= 0.04, fractions  # no jump again while the window still shows it
    assert c.knee is None and fractions[-1] >= 0.3, fractions  # and nothing learnt from it


def test_a_ramp_that_overshot_only_twice_the_knee_it_taught_is_bisected_too() -> None:
    # A real run at 70 ms (sixth session): 4 -> 8 -> 15.7 MB/s, the brake held 2 steps, the window showed
    # the overshoot with the knee learnt at 8 MB/s (the culprit) and 15.7 as the ceiling: 1.96x, under
    # the 2.5x the fifth session's rule asked for. Latency at 8 MB/s was 0.4-0.9x the setpoint, never
    # 0.2x: the copy crept 1 %/step from 7.8 MB/s for the rest of the copy (0.8x the oracle's speed).
    # No probe overshoots by half: anything over 1.5x the knee came from the ramp.
    c = SlackController(0.07, 200e6)  # no --max-rate: 2 % is 4 MB/s
    # The window's lag no longer lets such a ramp run past 1/r of the rates it showed (the test after
    # this one): replayed, these windows would not find it there. The bisection still serves ramps far
    # under the setpoint (r < VOUCH_FROM), so it is tested with that rule off.
    c.VOUCH_FROM = math.inf
    # The newest second over after the x1.4 jump (t=7) would now undo it at once and keep the jump as the
    # ceiling; these replayed windows cannot show what that would have done, so the jump's undo is off too
    # (it is tested on its own below).
    c.JUMP = math.inf
    mb = 1e6 / 200e6
    lat_ms = [40.1, 434.3, 684.4, 543.2, 302.1, 35.8, 44.7, 65.7, 104.5, 102.6, 96.9,
              63.4, 63.9, 51.5, 45.8, 31.6, 39.3, 40.0, 31.1, 41.1, 52.1, 63.8, 42.9, 29.6, 27.4]
    last_ms = [40.0, 900.0, 500.0, 300.0, 30.0, 36.0, 50.0, 80.0, 120.0, 90.0, 70.0,
               40.0, 60.0, 45.0, 40.0, 30.0, 40.0, 40.0, 30.0, 45.0, 55.0, 60.0, 40.0, 30.0, 25.0]
    fractions = [c.step(seconds(x / 1000, y / 1000, float(k)), float(k)).fraction
                 for k, (x, y) in enumerate(zip(lat_ms, last_ms))]
    assert max(fractions[4:8]) >= 15 * mb  # the ramp's overshoot
    assert min(fractions[8:12]) < 8.5 * mb  # cut to the knee the window showed
    assert fractions[-1] >= 10 * mb, [round(f / mb, 1) for f in fractions]  # and bisected back up


def test_a_ramp_goes_no_higher_than_the_windows_rates_allow() -> None:
    # Thirteenth session, 100 ms run 2: from 16 MB/s held, windows at 0.76x and 0.8x the setpoint raised
    # the rate x1.31 and then x1.25 within one lag: 27.5 MB/s, twice what the windows had shown, and
    # latency went to 300-450 ms (the worst seconds of the copy's spread). The window vouches for the
    # slowest rate of its lag: the ramp goes no higher than that rate x 1/r.
    def run(vouch_from: float) -> list[float]:
        c = SlackController(0.1, 200e6, initial_fraction=0.08)  # 16 MB/s, above the start rules' low start
        c.VOUCH_FROM = vouch_from
        return [c.step(sample(latency, float(k)), float(k)).fraction
                for k, latency in enumerate([0.099] * 4 + [0.076, 0.08, 0.07, 0.075])]
    capped, free = run(SlackController.VOUCH_FROM), run(math.inf)
    assert max(capped) <= 0.08 / 0.7 * 1.02, capped  # at most the held rate x 1/r (r >= 0.7 here)
    assert max(free) >= 1.5 * 0.08, free  # the old ramp compounded the factor step after step
    assert capped[-1] > 0.08  # it still ramps


def test_after_the_start_the_newest_second_steers_and_only_the_first_halving_is_quick() -> None:
    # A real run at 70 ms (sixth session, 1.43x the setpoint over the copy): the hold ended on a quiet
    # second (t=4), the ramp went 8 -> 16, and at t=6 the window (4.9, 27, 89 ms: the burst just out of
    # it) read 0.54x and the ramp leapt to 29.7 MB/s while the newest second was already 89 ms; the
    # window showed it a lag later (228 ms a second), and after the knee of 4 MB/s two quick halvings
    # towards 29.7 took the rate to 17.8 MB/s at 0.59x: a second overshoot (163 ms a second).
    c = SlackController(0.07, 200e6)
    mb = 1e6 / 200e6
    # The steady tail is longer since the fifteenth session: a jump undone is climbed back to a quarter of
    # the way a lag once latency is over 0.3x (the window at 0.6x here), not in one step.
    window = [95.2, 416.4, 497.3, 365.0, 169.3, 37.7, 112.4, 177.0, 138.4, 89.3, 18.3, 19.6, 21.4, 33.5,
              44.7, 45.4, 42.1, 41.2, 40.0, 41.0, 42.0, 41.0, 40.0, 41.0] + [41.0, 40.0] * 5
    last = [409.1, 804.6, 341.9, 4.9, 27.2, 89.0, 218.7, 209.6, 6.6, 44.1, 9.2, 7.7, 43.2, 46.1, 45.1,
            45.2, 35.4, 43.0, 40.0, 42.0, 41.0, 40.0, 42.0, 40.0] + [40.0, 42.0] * 5
    fractions = [c.step(seconds(w / 1000, x / 1000, float(k)), float(k)).fraction / mb
                 for k, (w, x) in enumerate(zip(window, last))]
    assert fractions[3] == pytest.approx(8.0) and fractions[4] == pytest.approx(16.0)
    # The newest second over right after the jump: no leap to 30, and (fourteenth session) not held at 16
    # either, where the window showed 112-177 ms a lag later: back to 8 at once.
    assert fractions[5] == pytest.approx(8.0), fractions
    assert max(fractions) <= 16.0 + 1e-9, fractions  # no second overshoot
    assert fractions[-1] >= 10.0, fractions  # the first halving still quick


def test_a_jump_the_newest_second_shows_over_is_undone_before_the_window_shows_it() -> None:
    # Fourteenth session, every 70 ms run: the start hold ended on one quiet newest second, the ramp
    # jumped x2 (8 -> 16 MB/s, the knee near 11), the newest seconds went over at once (107-125 ms) and
    # the rate was held for 2-3 s until the window showed it, then cut 2 %: the copy's worst seconds.
    def run(jump: float) -> tuple[list[float], list[str], list]:
        c = SlackController(0.07, 200e6)
        c.JUMP = jump
        rows = [(0.12, 0.25), (0.2, 0.3), (0.15, 0.1), (0.09, 0.01),  # the start's burst, then a quiet second
                (0.08, 0.11),  # the jump's first second
                (0.11, 0.12), (0.1, 0.08), (0.08, 0.05)] + [(0.042, 0.042)] * 12  # its window, then 0.6x
        steps = [c.step(seconds(w, x, float(k)), float(k)) for k, (w, x) in enumerate(rows)]
        return [s.fraction for s in steps], [s.note for s in steps], c.state()

    fractions, notes, state = run(SlackController.JUMP)
    assert fractions[3] == pytest.approx(0.04)  # the quiet second: x2
    assert fractions[4] == pytest.approx(0.02) and "after a jump" in notes[4], (fractions, notes[4])
    assert fractions[5] >= 0.98 * 0.02 - 1e-9  # the window over that follows: the usual 2 %, no deeper cut
    assert max(fractions[5:]) < 0.04, fractions  # never back at the jump ...
    assert fractions[-1] >= 1.3 * 0.02, fractions  # ... but climbed back towards it (the jump kept as the ceiling)
    assert state["knee_bytes_per_s"] is not None
    held, _, _ = run(math.inf)
    assert held[4] == pytest.approx(0.04)  # without the rule: held at the jump until the window showed it


def test_an_overshoot_never_lands_above_the_rate_it_is_at() -> None:
    # The first window over lands just under the rate it blames (a lag ago, or a step before a newest
    # second over the setpoint in the start hold's tail). If the rate fell meanwhile (here a source that
    # failed: hold, then halve; also a restart after a stop), that rate is above the current one: a
    # "cut" to 98 % of it raised the rate while latency was over the setpoint.
    c = SlackController(0.1, 200e6)
    c.JUMP = math.inf  # the newest second over after the tail's jumps would undo them (tested above): not this path
    mb = 1e6 / 200e6
    for k, (w, x) in enumerate([(0.3, 0.5), (0.5, 0.6), (0.45, 0.01), (0.4, 0.02), (0.08, 0.15)]):
        c.step(seconds(w, x, float(k)), float(k))
    assert c.fraction == pytest.approx(16 * mb)
    for k in range(5, 10):
        c.step(LatencySample.failed("fake", float(k), "down"), float(k))
    before = c.fraction
    assert before < 8 * mb
    c.step(seconds(0.05, 0.05, 10.0), 10.0)
    u = c.fraction
    out = c.step(seconds(0.2, 0.2, 11.0), 11.0)
    assert "over setpoint" in out.note and out.fraction < u, (u / mb, out.fraction / mb)


def test_the_backup_tools_read_in_ramps_but_the_copy_starts_at_the_first_doubling() -> None:
    # The pipe reads a cold backup tool's program at the controller's rate before starting it
    # (slacker.pagecache). Latency is low meanwhile: the read-in ramps as usual (held at the first doubling
    # before, a 26 MB tool at a --max-rate of 2 MB/s took over two minutes at 80 kB/s). But the copy, and its first
    # 10 MiB chunk read at the disk's full speed, starts at the first doubling of the initial rate, and the
    # start's rules count from the copy's start. A real run that started the copy at the read-in's 15 MB/s
    # took mariabackup's first chunk for an overshoot and learnt a knee of 5.4 MB/s (0.66x the setpoint).
    c = SlackController(0.1, 200e6)
    mb = 1e6 / 200e6
    c.set_warming(True)
    fractions = [c.step(seconds(0.004, 0.004, float(k)), float(k)).fraction for k in range(6)]
    assert fractions[-1] >= 16 * fractions[0]  # x2 a step: the read-in is not held at 8 MB/s
    assert "backup tool is read in" in c.step(seconds(0.004, 0.004, 6.0), 6.0).note or c.fraction == 1.0
    c.set_warming(False)
    # The copy starts; its first chunk's burst: held, no knee, then the ramp goes on.
    out = c.step(seconds(0.02, 0.15, 7.0), 7.0)
    assert out.fraction == pytest.approx(8 * mb) and "holding" in out.note  # the newest second: no ramp into it
    for k, (w, x) in enumerate([(0.12, 0.11), (0.1, 0.03), (0.05, 0.02), (0.03, 0.02), (0.02, 0.02)], start=8):
        c.step(seconds(w, x, float(k)), float(k))
    assert c.knee is None  # the burst taught nothing
    assert c.fraction > 8 * mb  # and the ramp goes on past it


def test_the_rates_of_the_read_in_are_never_blamed_for_the_copys_first_overshoot() -> None:
    # A real run at 100 ms (seventh session): 4 MB/s while the tool was read in, 8 at its end, the copy's
    # first step ramped to 16, and its first chunk's second went over: the window blamed the rate three
    # steps back, 4 MB/s of the read-in, and the copy crept from 8 MB/s for a minute (0.77x the oracle).
    c = SlackController(0.1, 200e6)
    mb = 1e6 / 200e6
    c.set_warming(True)
    for k, (w, x) in enumerate([(0.154, 0.367), (0.133, 0.101), (0.133, 0.004), (0.039, 0.004)]):
        c.step(seconds(w, x, float(k)), float(k))
    c.set_warming(False)
    fractions = [c.step(seconds(w, x, float(k)), float(k)).fraction / mb
                 for k, (w, x) in enumerate([(0.019, 0.058), (0.048, 0.082), (0.104, 0.172), (0.124, 0.129),
                                             (0.104, 0.004), (0.066, 0.037)], start=4)]
    assert fractions[0] == pytest.approx(16.0), fractions
    # In the copy's start window (counted from the rate it started at, 8 MB/s), the overshoot is held
    # at that rate; no knee under it is ever learnt.
    assert c.knee is None or c.knee >= 8 * mb, (c.knee / mb, fractions)
    assert min(fractions) >= 7.5, fractions


def test_a_read_in_that_ends_between_steps_keeps_the_copys_start_rules() -> None:
    # Figure 13a, seventh session (100 ms, 4 MB/s initial): the read-in ended between two steps at
    # 4.8 MB/s, the copy's first step ramped x2 to 9.5, and the first chunk's second (275 ms) came
    # past the start rules (their bound was 2.2x the initial rate, not the copy's starting rate): cut
    # as an overshoot, a knee of 4.8 MB/s learnt, and the copy crept at 0.42x the setpoint for 100 s.
    c = SlackController(0.1, 200e6)
    mb = 1e6 / 200e6
    c.set_warming(True)
    for k, (w, x) in enumerate([(0.0997, 0.2266), (0.0707, 0.0035), (0.0825, 0.0032)]):
        c.step(seconds(w, x, float(k)), float(k))
    c.set_warming(False)
    trace = [(0.0034, 0.0034), (0.1092, 0.2749), (0.0987, 0.0032), (0.1030, 0.0313), (0.0128, 0.0034),
             (0.0219, 0.0315), (0.0127, 0.0038), (0.0134, 0.0036), (0.0213, 0.0262), (0.0112, 0.0034)]
    fractions = [c.step(seconds(w, x, float(k)), float(k)).fraction / mb for k, (w, x) in enumerate(trace, start=3)]
    assert c.knee is None, (c.knee / mb, fractions)  # the first chunk's burst taught nothing
    assert min(fractions) >= 4.7, fractions  # held at the copy's starting rate, not cut under it
    assert fractions[-1] >= 19, fractions  # and the ramp went on (the real run: 5 MB/s, creeping)


def test_its_state_shows_the_knee_it_remembers_and_the_aim() -> None:
    # The time series and status carry both: without them a creeping copy cannot be told from a held one.
    c = SlackController(0.1, 200e6)
    assert c.state() == {"aim": 1.0, "knee_bytes_per_s": None}
    for k, (w, x) in enumerate([(0.03, 0.03)] * 8 + [(0.3, 0.4)]):
        c.step(seconds(w, x, float(k)), float(k))
    st = c.state()
    assert st["knee_bytes_per_s"] is not None and st["knee_bytes_per_s"] == round(c.knee * 200e6)
    assert ThrottleController(0.1, 200e6).state() == {}


def test_a_load_over_the_setpoint_during_a_long_read_in_is_cut_not_held() -> None:
    # At 400 kB/s a cold backup tool takes a minute to read in. The start's hold (the tool's own start-up
    # reads) held the initial rate for all of it: a setpoint nobody could meet never paused the copy.
    c = SlackController(0.0001, 20e6)
    c.set_warming(True)
    outs = [c.step(seconds(0.005, 0.005, float(k)), float(k)) for k in range(20)]
    assert "backup tool's start-up reads" in outs[0].note  # held at first ...
    stopped = next(k for k, o in enumerate(outs) if o.fraction == 0.0)
    assert stopped <= c.start_hold_steps + 2, [o.note for o in outs]  # ... then cut, to a stop
    assert c.knee is None  # a read-in rate taught nothing


def _load_step_run(seed: int, step: float, steps: int = 250) -> tuple[SlackController, list[str], float]:
    """The plant at its default offered load, `step` times it from t=150 s; (controller, notes, knee at 149)."""
    plant = Plant(seed=seed, arrival_rate=lambda t: 22.5 if t < 150 else 22.5 * step)
    c, source, notes, knee_before = SlackController(0.3, MAX_RATE), plant.source(), [], 0.0
    for k in range(steps):
        plant.advance(c.rate_bytes_per_s)
        notes.append(c.step(source.read(), plant.t).note)
        if k == 149:
            knee_before = c.knee or 0.0
    return c, notes, knee_before


def test_after_a_load_increase_the_knee_comes_down_with_it() -> None:
    # Figure 13a (+40 % offered load mid-copy): the knee remembered from before the step is above the new
    # one, and the ramp went straight back to 98 % of it and overshot again (real runs: 2 of 3 without
    # this; after the step's first 10 s the mean was 1.22x the setpoint, 0.84x with it, at the same
    # speed). Back under after the step's overshoot, the transactions over it tell the load rose.
    tripped = 0
    for seed in range(1, 13):
        c, notes, knee_before = _load_step_run(seed, 1.4)
        hits = [k for k, n in enumerate(notes) if "after a load increase" in n]
        if hits:
            tripped += 1
            assert all(k > 150 for k in hits), hits  # never before the step
            assert c.knee is not None and c.knee < knee_before, (c.knee, knee_before)
    # (7 of 12 here: in the others the plant's queue drove the cuts below the new knee anyway)
    assert tripped >= 6, tripped
    # The same plant at a constant load: an overshoot's drained queue alone does not trip it.
    false = sum(any("after a load increase" in n for n in _load_step_run(seed, 1.0)[1]) for seed in range(1, 13))
    assert false <= 1, false


def _capped_run(plant: "Plant", report_bytes: bool, steps: int) -> list:
    """The controller's steps on `plant` (a source cap), with or without the copy's bytes (the old rules)."""
    c = SlackController(0.3, MAX_RATE)
    source, out = plant.source(), []
    for _ in range(steps):
        plant.advance(c.rate_bytes_per_s)
        out.append(c.step(source.read(), plant.t, plant.bytes_done if report_bytes else 0))
    return out


def test_a_copy_that_cannot_use_its_limit_does_not_wind_the_limit_up() -> None:
    # Figure 13a, ninth session: the limit crept to 20-22.5 MB/s while the copy moved 15-17 MB/s
    # (the source disk), so the first two cuts after the load step landed above the real rate.
    # With the copy's bytes the limit stays near what the copy uses (the fast start ramp passes it:
    # the flow needs 4 steps to tell; an overshoot's cut brings it down); without them it creeps to max.
    # The source feeds the copy at most 65 % of max (its disk): the knee (~70 %) is above what the
    # copy can use, latency sits at 0.6-0.7x the setpoint, and the limit is never what binds.
    def median_limit(seed: int, report_bytes: bool) -> float:
        steps = _capped_run(Plant(seed=seed, copy_cap=0.65 * MAX_RATE), report_bytes, 150)
        return statistics.median(s.fraction for s in steps[60:])
    wound = []
    for seed in (1, 2, 3, 4):
        wound.append(median_limit(seed, True))
        assert median_limit(seed, False) > 0.95
    assert statistics.median(wound) < 0.65 / 0.9 * 1.1, wound


def test_a_copy_that_stalls_keeps_a_limit_and_its_knee() -> None:
    # The target or the backup tool stops reading for a while: the copy moves nothing, its flow is 0.
    # An interim version lowered the limit to that flow: a limit of 0 stopped the copy, and the restart
    # that followed replaced the knee it had learnt. The limit is held; the copy goes on when it moves.
    c = SlackController(0.1, MAX_RATE, initial_fraction=0.1, start_hold_steps=0)
    t, done, fractions, knee = 0.0, 0, [], None
    for k, latency in enumerate([0.03] * 5 + [0.2] * 2 + [0.05] * 45):
        if not 25 <= k < 40:  # stalled from step 25 to 39
            done += int(c.rate_bytes_per_s)
        fractions.append(c.step(sample(latency, t), t, done).fraction)
        if k == 24:
            knee = c.knee
        t += 1.0
    assert knee is not None and c.knee is not None and c.knee >= knee, (knee, c.knee)
    assert min(fractions[25:40]) >= fractions[24], fractions
    assert fractions[-1] >= 0.5 * fractions[24], fractions  # and it is back once the copy moves again


def test_a_cut_lands_under_the_rate_the_copy_moved_not_under_its_limit() -> None:
    # The copy moves at 40 % of max under a limit of 80-100 %: a first cut to 0.98x the limit, or a
    # further cut to 0.85x it, would not slow the copy at all.
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.8, start_hold_steps=0)
    moved = 0
    for k in range(8):  # quiet: once the flow tells, the limit holds (the copy does not use it)
        moved += int(0.4 * MAX_RATE)
        out = c.step(sample(0.5, float(k)), float(k), moved)
    assert "the copy moves at 20.0 MB/s, under its limit" in out.note
    moved += int(0.4 * MAX_RATE)
    first = c.step(sample(1.5, 8.0), 8.0, moved)
    # The copy did not speed up into it: the plant moved the knee, and the cut is in proportion (1/1.5).
    assert first.fraction <= 0.4 / 1.5 + 1e-9, first
    for k in range(9, 11):
        moved += int(0.3 * MAX_RATE)
        c.step(sample(1.7, float(k)), float(k), moved)
    moved += int(0.3 * MAX_RATE)
    second = c.step(sample(1.9, 11.0), 11.0, moved)
    assert second.fraction <= 0.85 * first.fraction + 1e-9, second
    # A caller that reports no bytes keeps the limit as the rate it cuts from.
    c = SlackController(1.0, MAX_RATE, initial_fraction=0.8, start_hold_steps=0)
    for k in range(8):
        c.step(sample(0.5, float(k)), float(k))
    assert c.step(sample(1.5, 8.0), 8.0).fraction > 0.7


def _capped_load_step(seed: int, report_bytes: bool) -> int:
    """Steps from a +40 % load step until the window is first back under 1.1x the setpoint (Figure 13a's
    measure), on a plant whose source feeds the copy at most 65 % of max (the knee before the step is above
    that, after it well below)."""
    plant = Plant(arrival_rate=lambda t: 22.5 if t < 150 else 22.5 * 1.4, seed=seed, copy_cap=0.65 * MAX_RATE)
    after = [s.latency_s or 0.0 for s in _capped_run(plant, report_bytes, 260)[150:]]
    over = next((i for i, v in enumerate(after) if v > 1.1 * 0.3), None)
    return 0 if over is None else next(i for i in range(over, len(after)) if after[i] <= 1.1 * 0.3)


def test_a_load_step_on_a_copy_under_its_limit_is_cut_in_proportion() -> None:
    # Figure 13a, tenth session: the source's disk held the copy under its limit, the +40 % load made
    # latency cross the setpoint without the copy speeding up, and the first cut landed 2 % under
    # the rate the copy moved at: latency stayed over until a second overshoot (10-12 s back).
    # Without the copy's bytes (the old rules) the same plant takes longer.
    with_flow = [_capped_load_step(seed, True) for seed in range(1, 9)]
    without = [_capped_load_step(seed, False) for seed in range(1, 9)]
    assert statistics.median(with_flow) <= 0.85 * statistics.median(without), (with_flow, without)


def test_a_mild_overshoot_at_a_ramps_knee_keeps_the_ramps_ceiling() -> None:
    # Ninth session, 70 ms run 2: a ramp overshot at 32 MB/s and taught a knee of 7.8 (the rate three
    # steps back); 5 s later a window at 0.95x the setpoint (over the aim) at that knee replaced the
    # ceiling of 32 with 7.8, so no halving was left and the copy crept 1 %/step at 0.83x the oracle.
    def run(mild: float) -> float:
        c = SlackController(1.0, MAX_RATE, initial_fraction=0.1, start_hold_steps=0)
        t = 0.0
        for latency in [0.25] * 4 + [2.0] + [0.6] * 6 + [mild] + [0.7] * 30:
            out = c.step(sample(latency, t), t)
            t += 1.0
        return out.fraction
    assert run(1.05) > 0.55  # the halvings towards the ramp's rate go on (knee 0.33, ceiling 1.0)
    assert run(1.6) < 0.45  # a clear overshoot at the knee is evidence: the knee is there, creep from it


def test_the_copys_mean_leaves_out_the_backups_start() -> None:
    # The backup's start stalls the tenant at any rate (1.5-4x the setpoint for the copy's first seconds on
    # the disk-bound host). Counted in the copy's mean, those seconds held the aim under 1 for the rest of
    # the copy, and the mean after them sat at 0.89x the setpoint (fifteenth session, both setpoints).
    c = SlackController(0.1, MAX_RATE)
    for k, x in enumerate([0.3] * 8 + [0.085] * 10 + [0.15] * 2 + [0.085] * 50):  # a knee found at 0.15
        c.step(seconds(x, x, float(k)), float(k))
    assert c.state()["aim"] >= 1.1, c.state()  # counted from the 1st step it would be ~0.91


def test_the_aim_goes_over_the_setpoint_only_once_a_knee_is_known() -> None:
    # Sixteenth session, 100 ms: the ramp had found no knee yet, the copy lagged its limit (the source's
    # disk), and with the aim at 1.06-1.09 windows at 0.94-1.0x the setpoint still ramped (x1.12-1.21):
    # the knee was found at 20 MB/s, 50 % past the real one, and the overshoot cost 549 ms a second.
    c = SlackController(0.1, MAX_RATE)
    aims = []
    for k in range(40):  # a ramp at 0.8x the setpoint, no overshoot: the setpoint bounds it
        c.step(seconds(0.08, 0.08, float(k)), float(k))
        aims.append(c.state()["aim"])
    assert c.knee is None and max(aims) <= 1.0, aims
    c.step(seconds(0.15, 0.15, 40.0), 40.0)  # an overshoot: the knee is here
    assert c.knee is not None
    for k in range(41, 70):
        c.step(seconds(0.07, 0.07, float(k)), float(k))
    assert c.state()["aim"] > 1.1  # holding at a known knee: the copy's mean steers the aim again


def test_a_load_rise_restarts_the_copys_mean() -> None:
    # Figure 13a: before a +40 % load step the copy's mean was 0.68x the setpoint, so the aim sat at its
    # upper bound (1.15x), and after the step's overshoot the copy probed back up to 1.15x the setpoint
    # and overshot again (fifteenth session: 2 of 6 repeats never back under 1.1x for good). The mean
    # before a load rise says nothing about the slack after it: it starts afresh, the aim at most 1.
    def step(c: SlackController, k: int, window: float, load: float) -> str:
        s = LatencySample("fake", float(k), sum_s=window * 3 * load, count=3 * load, window_s=3.0,
                          last_sum_s=window * load, last_count=load)
        return c.step(s, float(k)).note
    c = SlackController(0.1, MAX_RATE)
    k = 0
    for window in [0.06] * 10 + [0.15] + [0.06] * 40:  # a knee found at step 10 (the aim goes over 1 from there)
        step(c, k, window, 100)
        k += 1
    assert c.state()["aim"] == pytest.approx(1.15)
    for _ in range(8):  # the load rose by 60 %: two cuts
        step(c, k, 0.2, 160)
        k += 1
    note = step(c, k, 0.05, 160)
    assert "after a load increase" in note
    assert c.state()["aim"] <= 1.0
    for _ in range(9):  # the new mean is not counted from the overshoot's seconds: the aim holds a while
        step(c, k := k + 1, 0.05, 160)
    assert c.state()["aim"] <= 1.0


def test_the_aim_stays_at_most_1_while_climbing_back_to_a_jump_undone() -> None:
    # Sixteenth session, two 100 ms runs: a jump undone at the copy's start, then the climb back towards it
    # (a quarter of the way a lag under 0.8x the aim) went on at windows of 0.5-0.8x the setpoint with the
    # aim at 1.06-1.1 (the copy's mean under the setpoint): 10 -> 12.8 -> 15.3 MB/s, the knee near 13, a
    # 353 ms second. While the jump's rate is still the ceiling, the setpoint itself bounds the climb.
    c = SlackController(0.07, 200e6)
    rows = [(0.12, 0.25), (0.2, 0.3), (0.15, 0.1), (0.09, 0.01), (0.08, 0.11),  # the start, a jump undone
            (0.11, 0.12), (0.1, 0.08), (0.08, 0.05)] + [(0.0595, 0.0595)] * 40  # its window, then 0.85x
    aims, climbing = [], []
    for k, (w, x) in enumerate(rows):
        c.step(seconds(w, x, float(k)), float(k))
        aims.append(c.state()["aim"])
        climbing.append(c._undone is not None)
    assert sum(climbing[8:]) >= 30, climbing  # the climb is pending: 0.85x the setpoint is no reason to climb
    assert max(a for a, on in zip(aims, climbing) if on) <= 1.0, aims
