"""YCSB's generators: keys, zipfian skew, hotspot shares, latest, operation choice."""

from __future__ import annotations

import collections
import math
import random

import pytest

from slacker.ycsb.generators import (
    SCRAMBLED_ZETAN,
    AcknowledgedCounter,
    DiscreteChooser,
    ExponentialGenerator,
    HotspotGenerator,
    ScrambledZipfianGenerator,
    SequentialGenerator,
    SkewedLatestGenerator,
    UniformGenerator,
    ValueGenerator,
    ZipfianGenerator,
    build_key_name,
    fnvhash64,
    key_namer,
    zeta,
    zeta_static,
)

N = 200_000


# --- keys ---------------------------------------------------------------------------------


def test_hashed_key_names_match_stock_ycsb():
    # The first rows stock YCSB inserts with insertorder=hashed (as its load logs show).
    assert build_key_name(0) == "user6284781860667377211"
    assert build_key_name(1) == "user8517097267634966620"
    assert build_key_name(2) == "user1820151046732198393"


def test_ordered_keys_and_zero_padding():
    assert build_key_name(7, 1, ordered=True) == "user7"
    assert build_key_name(7, 5, ordered=True) == "user00007"
    assert build_key_name(12345, 3, ordered=True) == "user12345"  # padding never truncates


def test_fnvhash64_is_java_abs_of_fnv1a():
    # Reference FNV-1a-64 over the 8 little-endian bytes, then Java's Math.abs of the signed value.
    def reference(v: int) -> int:
        h = 0xCBF29CE484222325
        for b in v.to_bytes(8, "little", signed=True):
            h = ((h ^ b) * 0x100000001B3) % (1 << 64)
        signed = h - (1 << 64) if h >= 1 << 63 else h
        return abs(signed)

    rng = random.Random(7)
    for v in [0, 1, 2, 255, 256, 10**9, 2**40 + 3, 2**62] + [rng.randrange(2**62) for _ in range(500)]:
        assert fnvhash64(v) == reference(v)
    assert all(fnvhash64(v) >= 0 for v in range(10_000))


def test_key_namer_matches_build_key_name():
    for pad, ordered in [(1, False), (1, True), (8, False), (8, True)]:
        f = key_namer(pad, ordered)
        for k in (0, 1, 42, 99_999):
            assert f(k) == build_key_name(k, pad, ordered)


# --- zipfian ---------------------------------------------------------------------------------


def test_zeta_incremental_equals_direct():
    assert zeta_static(0, 10, 0.99) == pytest.approx(sum(1 / (i ** 0.99) for i in range(1, 11)))
    z100 = zeta_static(0, 100, 0.99)
    assert zeta_static(100, 50_000, 0.99, z100) == pytest.approx(zeta(50_000, 0.99), rel=1e-12)


def test_zipfian_rank_frequencies():
    """Gray et al.: ranks 0 and 1 are exact; later ranks follow 1/i^0.99 within the method's error."""
    rng = random.Random(42)
    items = 1000
    z = ZipfianGenerator(0, items - 1, rng)
    counts = collections.Counter(z.next() for _ in range(N))
    zn = zeta(items, 0.99)

    def p(rank: int) -> float:
        return 1.0 / ((rank + 1) ** 0.99) / zn

    assert all(0 <= v < items for v in counts)
    for rank in (0, 1):
        assert counts[rank] / N == pytest.approx(p(rank), rel=0.03)
    # The approximation overshoots ranks 2-5 by up to ~15%.
    for rank in range(2, 6):
        assert counts[rank] / N == pytest.approx(p(rank), rel=0.2)
    # Bands of ranks further out match closely.
    for lo, hi in ((10, 100), (100, 1000)):
        observed = sum(counts[r] for r in range(lo, hi)) / N
        expected = sum(p(r) for r in range(lo, hi))
        assert observed == pytest.approx(expected, rel=0.05)
    # Popularity falls with rank.
    assert counts[0] > counts[1] > counts[5] > counts[50]


def test_scrambled_zipfian_hot_keys_are_ycsbs():
    """The hottest rows are fnvhash64(0) % n, fnvhash64(1) % n, ... as in YCSB."""
    rng = random.Random(3)
    g = ScrambledZipfianGenerator(0, 999, rng)
    counts = collections.Counter(g.next() for _ in range(N))
    top = [k for k, _ in counts.most_common(2)]
    assert top == [fnvhash64(0) % 1000, fnvhash64(1) % 1000] == [211, 620]
    # Rank 0 of 10^10 items: 1/zeta(10^10, 0.99).
    assert counts[211] / N == pytest.approx(1 / SCRAMBLED_ZETAN, rel=0.05)
    assert all(0 <= k <= 999 for k in counts)


def test_scrambled_zipfian_with_offset_stays_in_range():
    g = ScrambledZipfianGenerator(500, 599, random.Random(1))
    assert all(500 <= g.next() <= 599 for _ in range(10_000))


def test_zipfian_grows_item_count_incrementally():
    rng = random.Random(5)
    z = ZipfianGenerator(0, 99, rng)
    values = [z.next_long(200) for _ in range(20_000)]
    assert max(values) < 200 and max(values) >= 100
    assert z.zetan == pytest.approx(zeta(200, 0.99), rel=1e-12)


# --- hotspot, uniform, latest, exponential, sequential ---------------------------------------------


@pytest.mark.parametrize("data_fraction,op_fraction", [(0.2, 0.8), (0.1, 0.9), (0.5, 0.5)])
def test_hotspot_fractions(data_fraction, op_fraction):
    rng = random.Random(11)
    lo, hi = 1000, 1999
    g = HotspotGenerator(lo, hi, data_fraction, op_fraction, rng)
    hot_end = lo + int(1000 * data_fraction)
    draws = [g.next() for _ in range(N)]
    assert all(lo <= v <= hi for v in draws)
    hot = sum(1 for v in draws if v < hot_end) / N
    assert hot == pytest.approx(op_fraction, abs=0.01)
    # Uniform within the hot set: its first and second halves get equal shares.
    half = lo + (hot_end - lo) // 2
    first = sum(1 for v in draws if lo <= v < half)
    second = sum(1 for v in draws if half <= v < hot_end)
    assert first / second == pytest.approx(1.0, rel=0.05)


def test_hotspot_with_an_empty_set_does_not_divide_by_zero():
    g = HotspotGenerator(0, 9, 0.0, 0.8, random.Random(1))
    assert all(0 <= g.next() <= 9 for _ in range(1000))
    g = HotspotGenerator(0, 9, 1.0, 0.8, random.Random(1))
    assert all(0 <= g.next() <= 9 for _ in range(1000))


def test_uniform_is_flat():
    g = UniformGenerator(10, 19, random.Random(2))
    counts = collections.Counter(g.next() for _ in range(N))
    assert sorted(counts) == list(range(10, 20))
    assert max(counts.values()) / min(counts.values()) < 1.05


def test_latest_prefers_recent_inserts():
    basis = AcknowledgedCounter(1000)  # rows 0..999 loaded
    g = SkewedLatestGenerator(basis, random.Random(9))
    draws = [g.next() for _ in range(50_000)]
    assert all(0 <= v <= 999 for v in draws)
    counts = collections.Counter(draws)
    assert counts.most_common(1)[0][0] == 999
    assert sum(1 for v in draws if v >= 990) / len(draws) > 0.35
    # After new inserts are acknowledged the newest row becomes the hottest.
    for k in range(1000, 1010):
        assert basis.next_value() == k
        basis.acknowledge(k)
    assert basis.last_value() == 1009
    counts = collections.Counter(g.next() for _ in range(20_000))
    assert counts.most_common(1)[0][0] == 1009


def test_acknowledged_counter_waits_for_the_gap():
    c = AcknowledgedCounter(10)
    a, b, d = c.next_value(), c.next_value(), c.next_value()
    assert (a, b, d) == (10, 11, 12)
    c.acknowledge(12)
    c.acknowledge(11)
    assert c.last_value() == 9  # 10 is still in flight
    c.acknowledge(10)
    assert c.last_value() == 12


def test_exponential_percentile():
    g = ExponentialGenerator(95.0, 100.0, random.Random(4))
    draws = [g.next() for _ in range(N)]
    assert sum(1 for v in draws if v < 100) / N == pytest.approx(0.95, abs=0.005)


def test_sequential_wraps():
    g = SequentialGenerator(5, 7)
    assert [g.next() for _ in range(7)] == [5, 6, 7, 5, 6, 7, 5]


# --- operation choice and values ---------------------------------------------------------------


def test_discrete_chooser_shares():
    ch = DiscreteChooser((0.85, 0.15, 0, 0, 0), random.Random(8))
    counts = collections.Counter(ch.next() for _ in range(N))
    assert set(counts) == {0, 1}
    assert counts[0] / N == pytest.approx(0.85, abs=0.005)


def test_values_have_the_configured_lengths_and_need_no_escaping():
    rng = random.Random(6)
    const = ValueGenerator(100, 1, "constant", rng)
    vals = [const.next() for _ in range(1000)]
    assert {len(v) for v in vals} == {100}
    assert all(v.isalnum() for v in vals)
    assert len(set(vals)) > 990
    uni = ValueGenerator(50, 10, "uniform", rng)
    lengths = [len(uni.next()) for _ in range(5000)]
    assert min(lengths) == 10 and max(lengths) == 50
    zipf = ValueGenerator(50, 1, "zipfian", rng)
    lengths = collections.Counter(len(zipf.next()) for _ in range(5000))
    assert lengths.most_common(1)[0][0] == 1  # zipfian favours short fields


def test_generators_are_deterministic_per_seed():
    a = ScrambledZipfianGenerator(0, 10**6, random.Random(123))
    b = ScrambledZipfianGenerator(0, 10**6, random.Random(123))
    assert [a.next() for _ in range(100)] == [b.next() for _ in range(100)]
    assert not math.isnan(zeta(10, 0.99))
