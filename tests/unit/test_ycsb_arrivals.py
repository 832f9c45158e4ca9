"""Open-loop arrival schedules: Poisson and constant gaps, rate steps, rate lists."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from slacker.errors import InvalidInput
from slacker.ycsb.arrivals import RateProfile, arrival_offsets, parse_rate_step, parse_rates


def _gaps(kind: str, rate: float, n: int, seed: int = 1) -> list[float]:
    times = list(itertools.islice(arrival_offsets(kind, RateProfile(rate), random.Random(seed)), n + 1))
    return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.parametrize("rate", [10.0, 100.0, 2500.0])
def test_poisson_interarrival_mean_and_cv(rate):
    gaps = _gaps("poisson", rate, 50_000)
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean
    assert mean == pytest.approx(1.0 / rate, rel=0.02)
    assert cv == pytest.approx(1.0, abs=0.03)
    assert all(g > 0 for g in gaps)


def test_constant_arrivals_have_no_variation():
    gaps = _gaps("constant", 200.0, 10_000)
    assert statistics.fmean(gaps) == pytest.approx(0.005, rel=1e-9)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) < 1e-6


def test_poisson_counts_follow_a_rate_step():
    profile = RateProfile(100.0, [parse_rate_step("10s:+40%")])
    times = list(itertools.takewhile(lambda t: t < 20.0, arrival_offsets("poisson", profile, random.Random(3))))
    before = sum(1 for t in times if t < 10.0)
    after = len(times) - before
    assert before == pytest.approx(1000, abs=4 * math.sqrt(1000))
    assert after == pytest.approx(1400, abs=4 * math.sqrt(1400))


def test_constant_arrivals_follow_a_rate_step():
    profile = RateProfile(10.0, [parse_rate_step("1s:x2")])
    times = list(itertools.takewhile(lambda t: t < 2.0, arrival_offsets("constant", profile, random.Random(0))))
    assert len(times) == 10 + 20
    assert times[0] == 0.0


def test_rate_zero_pauses_until_the_next_step():
    profile = RateProfile(100.0, [parse_rate_step("1s:=0"), parse_rate_step("2s:=50")])
    times = list(itertools.takewhile(lambda t: t < 3.0, arrival_offsets("poisson", profile, random.Random(2))))
    assert not any(1.0 <= t < 2.0 for t in times)
    assert any(t >= 2.0 for t in times)


def test_rate_zero_forever_ends_the_schedule():
    profile = RateProfile(100.0, [parse_rate_step("0.5s:-100%")])
    times = list(arrival_offsets("poisson", profile, random.Random(2)))
    assert times and max(times) < 0.5


def test_schedule_is_seeded():
    a = list(itertools.islice(arrival_offsets("poisson", RateProfile(50), random.Random(9)), 100))
    b = list(itertools.islice(arrival_offsets("poisson", RateProfile(50), random.Random(9)), 100))
    assert a == b


@pytest.mark.parametrize("text,op,value,at", [
    ("60s:+40%", "*", 1.4, 60.0),
    ("2m:-25%", "*", 0.75, 120.0),
    ("90s:x2", "*", 2.0, 90.0),
    ("30:=150", "=", 150.0, 30.0),
    ("1500ms:*0.5", "*", 0.5, 1.5),
])
def test_parse_rate_step(text, op, value, at):
    s = parse_rate_step(text)
    assert (s.op, s.at_s) == (op, at)
    assert s.value == pytest.approx(value)


@pytest.mark.parametrize("text", ["60s", "60s:40%", "abc:+40%", "60s:+x%", "60s:fast"])
def test_bad_rate_steps(text):
    with pytest.raises(InvalidInput):
        parse_rate_step(text)


def test_profile_segments():
    p = RateProfile(100, [parse_rate_step("60s:+40%"), parse_rate_step("120s:-50%")])
    assert p.rate_at(0) == 100 and p.rate_at(59.9) == 100
    assert p.rate_at(60) == pytest.approx(140) and p.rate_at(130) == pytest.approx(70)
    assert p.segment_at(10) == (100, 60)


def test_parse_rates():
    assert parse_rates("100", 3) == [100.0, 100.0, 100.0]
    assert parse_rates("100,50,50", 3) == [100.0, 50.0, 50.0]
    with pytest.raises(InvalidInput, match="2 rates for 3 tenants"):
        parse_rates("100,50", 3)
    with pytest.raises(InvalidInput, match="positive"):
        parse_rates("0", 1)
    with pytest.raises(InvalidInput):
        parse_rates("fast", 1)


def test_unknown_arrival_kind():
    with pytest.raises(InvalidInput):
        next(arrival_offsets("bursty", RateProfile(1), random.Random(0)))
