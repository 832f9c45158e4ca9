"""The stable plant's protocol (bench/benches/setpoint/protocol.py): gates, the oracle, the setpoints, rotation."""

from __future__ import annotations

import math

import pytest

from benches.setpoint import protocol as pr


def test_load_gate_takes_the_window_within_two_percent_and_no_lasting_shortfall():
    # at 200 tps over 9 s: 2 % + 2 transactions of 1800
    ok = pr.load_gate([(200.0, 205.0, 1.0)] * 8 + [(200.0, 194.5, 1.0)])
    assert ok.ok and ok.worst == pytest.approx(5.5 / 200)
    # one stall caught up on the next second (constant arrivals served late): not saturated
    assert pr.load_gate([(200.0, 200.0, 1.0)] * 6 + [(200.0, 170.0, 1.0), (200.0, 230.0, 1.0), (200.0, 200.0, 1.0)]).ok
    # three seconds in a row 4 % short: a queue that grows -- saturated, even with the window's total in bounds
    bad = pr.load_gate([(200.0, 203.0, 1.0)] * 6 + [(200.0, 192.0, 1.0)] * 3)
    assert not bad.ok and "192.0 of 200" in bad.why and "3 seconds in a row" in bad.why
    # the window's total short: saturated
    tot = pr.load_gate([(200.0, 196.0, 1.0), (200.0, 191.0, 1.0)] * 5)
    assert not tot.ok and "over the window" in tot.why
    # at 40 tps two transactions a second are 5 %: seconds that trade two across their boundaries pass
    assert pr.load_gate([(40.0, 42.0, 1.0), (40.0, 38.0, 1.0)] * 3 + [(40.0, 41.0, 1.0)]).ok
    assert not pr.load_gate([(40.0, 37.0, 1.0)] * 6).ok


def test_load_gate_needs_enough_seconds():
    g = pr.load_gate([(100.0, 100.0, 1.0)] * 3)
    assert not g.ok and "only 3 seconds" in g.why


def test_latency_gate():
    assert pr.latency_gate(0.0105, 0.010).ok
    g = pr.latency_gate(0.0115, 0.010)
    assert not g.ok and "15%" in g.why
    assert not pr.latency_gate(None, 0.010).ok


def test_calibration_spread_is_the_largest_deviation_from_the_mean():
    c = pr.calibration([10.0, 10.4, 9.6, 10.0, 10.0])
    assert c["spread"] == pytest.approx(0.04) and c["ok"]
    assert not pr.calibration([10.0, 11.0, 9.0, 10.0, 10.0])["ok"]


def test_oracle_is_read_off_the_monotone_curve_with_its_bracket():
    # a non-monotone middle point is pooled with its neighbour before the crossing is read
    pts = [(2.0, 1.1), (4.0, 1.6), (5.0, 1.4), (8.0, 2.4)]
    o = pr.oracle(pts, 2.0)
    curve = o["curve"]
    assert [y for _, y in curve] == sorted(y for _, y in curve)
    assert o["bracket"] == (5.0, 8.0)
    # pooled (4.5, 1.5) -> (8, 2.4): 2.0 is reached at 4.5 + 3.5 * 0.5 / 0.9
    assert o["rate"] == pytest.approx(4.5 + 3.5 * 0.5 / 0.9)


def test_oracle_not_bracketed_says_on_which_side():
    pts = [(2.0, 1.1), (4.0, 1.3), (8.0, 1.6)]
    assert pr.oracle(pts, 2.0)["rate"] is None and "above" in pr.oracle(pts, 2.0)["side"]
    assert pr.oracle(pts, 1.0)["rate"] is None and "below" in pr.oracle(pts, 1.0)["side"]
    assert pr.oracle([(2.0, 1.1)], 1.1)["side"] == "too few rates"


def test_latency_at_a_rate_interpolates_inside_the_measured_rates_only():
    pts = [(2.0, 1.0), (6.0, 2.0)]
    assert pr.latency_at_rate(pts, 4.0) == pytest.approx(1.5)
    assert pr.latency_at_rate(pts, 1.0) is None and pr.latency_at_rate(pts, 7.0) is None


def test_choose_multiples_binding_needs_margin_and_a_long_enough_copy():
    mb = 1e6
    # 600 MB: a 60 s copy runs at 10 MB/s, where the curve says 1.5x; the unthrottled copy costs 3x
    pts = [(5 * mb, 1.2), (10 * mb, 1.5), (20 * mb, 2.0)]
    m = pr.choose_multiples(pts, (60 * mb, 3.0), 600 * mb)
    assert m["binding"] == pytest.approx(1.5) and m["binds"] and m["nonbinding"] == pytest.approx(6.0)
    # a cheap copy: the unthrottled one costs 1.56x, so 1.3x margin allows 1.2x
    m = pr.choose_multiples(pts, (60 * mb, 1.56), 6000 * mb)
    assert m["binding"] == pytest.approx(1.2)
    # a 60 s copy slower than every measured rate: bounded by the slowest one's cost
    m = pr.choose_multiples(pts, (60 * mb, 3.0), 120 * mb)
    assert m["binding"] == pytest.approx(1.2)
    # the copy costs nothing: no binding setpoint
    assert not pr.choose_multiples([(5 * mb, 1.0), (10 * mb, 1.0)], (60 * mb, 1.02), 600 * mb)["binds"]


def test_choose_multiples_keeps_the_binding_setpoint_off_a_knee_it_cannot_resolve():
    # today's disk-bound calibration: 6.4 MB/s 6.6x, 12.7 MB/s 9.5x, 16.5 MB/s 341x, unthrottled 26 MB/s 1788x;
    # a 60 s copy of 781 MB runs at 13.0 MB/s, just past the knee: read there, the setpoint was 35x -- a
    # latency a 2 % difference in achieved rate moves by ~27 % (elasticity 13.6)
    mb = 1e6
    pts = [(6.4 * mb, 6.6), (12.7 * mb, 9.5), (16.5 * mb, 341.0)]
    m = pr.choose_multiples(pts, (26.2 * mb, 1788.0), 781 * mb)
    assert m["by_copy_time"] > 30 and m["binding"] == pytest.approx(9.5) and m["by_knee"] == pytest.approx(9.5)
    assert pr.elasticity(pts, 14 * mb) > pr.MAX_ELASTICITY >= pr.elasticity(pts, 9 * mb)
    # with no bound it is the old choice, on the knee
    assert pr.choose_multiples(pts, (26.2 * mb, 1788.0), 781 * mb, max_elasticity=None)["binding"] > 30


def test_rotation_starts_each_block_one_member_later():
    m = ["alone", "fixed", "model", "pid"]
    assert pr.rotated(m, 1) == m
    assert pr.rotated(m, 2) == ["fixed", "model", "pid", "alone"]
    assert pr.rotated(m, 5) == m
    # every member takes every position once in len(m) blocks
    assert {tuple(pr.rotated(m, k)).index("pid") for k in range(1, 5)} == {0, 1, 2, 3}


def test_paired_differences_skip_blocks_where_either_is_missing():
    s = pr.paired([1.0, 1.2, None, 0.9], [0.8, 1.3, 1.0, None])
    assert s["n"] == 2 and s["missing"] == 2
    assert s["median"] == pytest.approx(0.05) and s["min"] == pytest.approx(-0.1) and s["max"] == pytest.approx(0.2)
    assert pr.met([0.95, 1.2, None, 1.05], 0.9, 1.1) == "2 of 3"


def test_elasticity_is_the_curves_log_slope_where_the_rate_lies():
    # the disk-bound host's calibration: flat-ish under the knee, steep past it
    pts = [(6.2e6, 40.0), (12.8e6, 93.0), (15.5e6, 1100.0)]
    low = pr.elasticity(pts, 9e6)
    assert low == pytest.approx(math.log(93 / 40) / math.log(12.8 / 6.2))
    assert pr.elasticity(pts, 14e6) > 10 * low  # past the knee a 1 % rate difference is >10 % latency
    assert pr.elasticity(pts, 20e6) is None  # outside the measured rates


def test_rate_corrected_moves_each_repeat_to_one_rate_along_the_curve():
    pts = [(10e6, 50.0), (14e6, 90.0)]
    # two repeats that differ only because one ran a little faster: corrected, they agree
    runs = [(11e6, 60.0), (13e6, 80.0)]
    out = pr.rate_corrected(runs, pts, 12e6)
    assert out == pytest.approx([70.0, 70.0])
    assert pr.calibration(out)["ok"] and not pr.calibration([y for _, y in runs])["ok"]
    # a repeat outside the curve's rates is left as measured
    assert pr.rate_corrected([(20e6, 99.0)], pts, 12e6) == [99.0]
