"""The model controller where issue 67's real runs overshot: a sharp knee (latency x3 over a 30 % rise of the
rate), a short copy (8-15 s at the pipe's speed), the pipe 2 s behind its limit and latency 1-2 s behind that,
read through the trailing 3 s window (benchkit.plant.sharp_family); setpoints tight (1.6x the load's own
latency), loose (4x, under the unthrottled copy's) and not binding (1.3x the unthrottled copy's).

Before issue 67 the law rose to the cap where latency was under half the aim ("no knee in sight"): on these
plants 13 of the 40 tight and loose copies over 1.1x the setpoint, the worst 1.40x (the real runs: up to 1.59x).
Now a rise is at most x3 the flow whose cost the latency shows, held a loop delay for its answer, and a
steady rise of latency heading over the aim holds or cuts the rate: 0 of 40 (worst 1.05x). A node's memory
(`seeded`: the rate the last copy held) gives later moves their speed back. The law's constants were chosen
on seeds 1 and 2; these run on 3 and 4 (held out)."""

from __future__ import annotations

import statistics

import pytest

from slacker.controller import ModelController

from benchkit import plant as P

HELD_OUT = (3, 4)
N = 30  # per seed: 10 tight, 10 loose, 10 not binding


def make(sp, m):
    return ModelController(sp, m)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(tag, first|seeded) -> [(mean / setpoint, speed / the oracle's, or time / unthrottled)]."""
    out: dict = {}
    for seed in HELD_OUT:
        for sc in P.sharp_family(N, seed=seed):
            free = P.run_copy(sc)
            best = P.oracle(sc) if sc.tag != "nonbinding" else None
            for when, m in (("first", make), ("seeded", P.seeded(sc, make))):
                r = P.run_copy(sc, m)
                out.setdefault((sc.tag, when), []).append(
                    (r.mean_ratio, r.rate / best.rate if best else r.seconds / free.seconds))
    return out


def test_the_family_is_what_it_says():
    for sc in P.sharp_family(N, seed=HELD_OUT[0]):
        free = P.run_copy(sc)
        assert 7 <= free.seconds <= 17  # a short copy
        # binding: the unthrottled copy over the setpoint (1.06-3.6x); not binding: 0.64-0.85x
        assert free.mean_ratio > 1.0 if sc.tag != "nonbinding" else free.mean_ratio <= 0.9
        x = sc.knee_bps  # somewhere past the knee's start the latency triples over +30 % of the rate
        assert any(sc.curve(c * 1.3)[0] >= 3 * sc.curve(c)[0] for c in (x * f / 20 for f in range(1, 20)))


@pytest.mark.parametrize("when", ["first", "seeded"])
def test_no_overshoot_at_a_tight_or_a_loose_setpoint(runs, when):
    means = [m for tag in ("tight", "loose") for m, _ in runs[(tag, when)]]
    assert sum(1 for m in means if m > 1.1) <= 1, sorted(means)[-5:]  # measured 0 of 40 (the law before: 13)
    assert max(means) <= 1.2  # measured 1.05 first, 1.07 seeded (before: 1.40)


def test_a_seeded_move_is_fast(runs):
    """The node's memory: the start where the last copy held. Tight: median 0.84 of the oracle's speed (a first
    move 0.74); not binding: median 1.07 x the unthrottled time (a first move 1.77, from 10 MB/s)."""
    assert statistics.median(s for _, s in runs[("tight", "seeded")]) >= 0.8
    assert statistics.median(s for _, s in runs[("nonbinding", "seeded")]) <= 1.15
    assert statistics.median(s for _, s in runs[("tight", "first")]) >= 0.65




def test_after_a_cut_the_copy_goes_back_to_a_rate_it_has_shown_and_no_further():
    """A load's own bump (latency 1.9x the setpoint for 8 s, whatever the rate) cuts the copy to under 1 MB/s.
    The rate it held within the aim before (49 MB/s here) is evidence over the horizon: the copy goes straight
    back to it (measured: in the second after the bump) and not past it, where the law that knew only the flow
    shown rose to 38 and then 80 MB/s, 1.6x the rate the server had shown it could take."""
    from slacker.latency import LatencySample

    sp, l0, knee = 0.0104, 0.007, 150e6
    c = ModelController(sp, 200e6, catch_up=0.0)  # without the aim's catch-up: what is tested is the cap
    c.set_load_latency(l0)
    done, x, rates = 0.0, 0.0, []
    for k in range(70):
        y = l0 / max(0.05, 1.0 - x / knee)
        if 40 <= k < 48:
            y = 1.9 * sp  # the load's own, whatever the rate
        done += x
        s = LatencySample("fake", float(k), sum_s=y * 300, count=300, window_s=3.0, last_sum_s=y * 100, last_count=100)
        x = c.step(s, float(k), int(done)).rate_bytes_per_s
        x = 200e6 if x is None else x
        rates.append(x)
    held = statistics.median(rates[25:40])
    assert min(rates[42:48]) < 0.1 * held  # the bump cut it
    assert max(rates[48:]) <= 1.3 * held, [round(r / 1e6, 1) for r in rates[46:60]]
    back = next(k for k in range(48, 70) if rates[k] >= 0.8 * held) - 48
    assert back <= 3, [round(r / 1e6, 1) for r in rates[46:60]]
