"""The adaptive MPL controller on simulated throughput curves (Middle-R's parabola with fading memory)."""

from __future__ import annotations

import math
import random

import pytest

from slacker.delta.mpl import MplController


def curve(peak_mpl: float, peak_tps: float = 8000.0, thrash: float = 0.08):
    """Rises to a peak, then falls in the thrashing region (and never below a residual)."""
    def f(m: int) -> float:
        x = m / peak_mpl
        return max(0.25 * peak_tps, peak_tps * x * math.exp(1 - x) - thrash * peak_tps * max(0.0, m - peak_mpl))
    return f


def run(ctrl: MplController, f, periods: int, noise: float = 0.03, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    seen = []
    m = ctrl.mpl
    for _ in range(periods):
        seen.append(m)
        m = ctrl.observe(m, f(m) * (1 + rng.uniform(-noise, noise))).mpl
    return seen


def best_fixed(f, lo: int, hi: int) -> float:
    return max(f(m) for m in range(lo, hi + 1))


@pytest.mark.parametrize("peak", [2, 5, 9, 14])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_settles_within_10_percent_of_the_best_fixed_mpl(peak, seed):
    f = curve(peak)
    ctrl = MplController(lo=1, hi=16, start=4)
    seen = run(ctrl, f, 25, seed=seed)
    settled = seen[-8:]
    assert all(1 <= m <= 16 for m in seen)
    # The throughput it runs at after settling is within 10% of the best any fixed MPL gets.
    assert min(f(m) for m in settled) >= 0.9 * best_fixed(f, 1, 16), (peak, seen)


def test_backs_off_from_the_thrashing_region():
    f = curve(3)
    ctrl = MplController(lo=1, hi=16, start=16)
    seen = run(ctrl, f, 15)
    assert seen[0] == 16
    assert max(seen[-6:]) <= 5
    assert any(d.reason == "thrashing" for _, _, d in ctrl.history) or ctrl.history[1][2].mpl < 16


def test_stays_within_bounds_on_a_monotone_curve():
    ctrl = MplController(lo=2, hi=6, start=2)
    seen = run(ctrl, lambda m: 1000.0 * m, 20)
    assert all(2 <= m <= 6 for m in seen)
    assert seen[-5:] == [6] * 5
    assert ctrl.explored and ctrl.best()[0] == 6


def test_flat_curve_is_explored_and_does_not_wander_out_of_bounds():
    ctrl = MplController(lo=1, hi=16, start=4)
    seen = run(ctrl, lambda m: 5000.0, 20, noise=0.02)
    assert all(1 <= m <= 16 for m in seen)
    assert ctrl.explored


def test_follows_a_change_of_workload():
    """Fading memory: after the peak moves from 12 to 3, the MPL follows it down."""
    ctrl = MplController(lo=1, hi=16, start=4)
    run(ctrl, curve(12), 20)
    assert ctrl.mpl >= 8
    seen = run(ctrl, curve(3), 20, seed=5)
    assert min(curve(3)(m) for m in seen[-6:]) >= 0.85 * best_fixed(curve(3), 1, 16), seen


def test_fixed_bounds_hold_one_mpl():
    ctrl = MplController(lo=4, hi=4, start=9)
    assert run(ctrl, curve(8), 5) == [4] * 5
    assert ctrl.explored


# --- properties (hypothesis) -----------------------------------------------------------------------
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(1, 8), span=st.integers(0, 15), start=st.integers(1, 32),
       rates=st.lists(st.floats(0, 50_000, allow_nan=False), min_size=1, max_size=40))
def test_any_measurements_keep_the_mpl_in_bounds_and_moves_bounded(lo, span, start, rates):
    hi = lo + span
    ctrl = MplController(lo=lo, hi=hi, start=start)
    assert lo <= ctrl.mpl <= hi
    m = ctrl.mpl
    for r in rates:
        d = ctrl.observe(m, r)
        assert lo <= d.mpl <= hi
        # A move is a bounded step, or a back-off straight to an MPL already measured, or the
        # first exploration (doubling or halving).
        assert abs(d.mpl - m) <= ctrl.max_step or d.mpl in ctrl.tried or d.reason == "explore", (m, d)
        m = d.mpl


@settings(max_examples=300, deadline=None)
@given(peak=st.floats(1.5, 14), peak_tps=st.floats(1_000, 20_000), thrash=st.floats(0.0, 0.15),
       seed=st.integers(0, 1000), start=st.integers(1, 16))
# Found by hypothesis (fifth session of issue 14): peak between 1 and 2, flat beyond 5; the fit has no
# interior maximum and the slope pointed below the lower bound, so MPL 2 was never tried (0.89x).
@example(peak=1.78125, peak_tps=1000.0, thrash=0.09375, seed=0, start=12)
def test_settles_near_the_best_fixed_mpl_on_any_single_peaked_curve(peak, peak_tps, thrash, seed, start):
    f = curve(peak, peak_tps, thrash)
    ctrl = MplController(lo=1, hi=16, start=start)
    seen = run(ctrl, f, 30, seed=seed)
    # What it runs at after its search (the last 8 periods, an occasional probe included) is within
    # 10 % of the best any fixed MPL gets: the goal for the adaptive loop.
    assert sum(f(m) for m in seen[-8:]) / 8 >= 0.9 * best_fixed(f, 1, 16), (peak, seen)
