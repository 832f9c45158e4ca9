"""The unit parser: every format the docs promise, and round-trips for any value."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slacker.errors import InvalidInput
from slacker.units import (format_binary_size, format_duration, format_size, parse_duration, parse_rate,
                           parse_server_size, parse_size)


@pytest.mark.parametrize("text,seconds", [
    ("1500ms", 1.5), ("1.5s", 1.5), ("2m", 120.0), ("1h", 3600.0), ("3", 3.0), ("0.25s", 0.25), (" 10 s ", 10.0),
    ("5min", 300.0),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,n", [
    ("128M", 128_000_000), ("128MB", 128_000_000), ("128MiB", 128 * 1024**2), ("512KiB", 524_288),
    ("1.5GB", 1_500_000_000), ("1GiB", 1024**3), ("10k", 10_000), ("10K", 10_000), ("42", 42), ("42B", 42),
])
def test_sizes(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text,n", [
    ("20MB/s", 20_000_000), ("512KiB/s", 524_288), ("0", 0), ("0/s", 0), ("1.5MiB/s", int(1.5 * 1024**2)),
])
def test_rates(text, n):
    assert parse_rate(text) == n


def test_server_sizes_are_binary_like_mariadb():
    assert parse_server_size("128M") == 128 * 1024**2
    assert parse_server_size("128MB") == 128_000_000
    assert parse_server_size("1G") == 1024**3


@pytest.mark.parametrize("bad", ["", "fast", "1.5x", "-1s", "ms", "1e3s", "12 parsecs"])
def test_bad_durations(bad):
    with pytest.raises(InvalidInput) as e:
        parse_duration(bad)
    assert "for example" in str(e.value)


@pytest.mark.parametrize("bad", ["", "20MB/h", "twenty", "-5MB/s", "5XB/s", "20MB"])
def test_bad_rates(bad):
    with pytest.raises(InvalidInput):
        parse_rate(bad)


def test_formatting():
    assert format_duration(0.85) == "850ms"
    assert format_duration(12.34) == "12.3s"
    assert format_duration(245) == "4m05s"
    assert format_size(12_345_678) == "12.3MB"
    assert format_binary_size(128 * 1024**2) == "128MiB"


prefixes = st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi"])
factor = {"": 1, "k": 1000, "M": 10**6, "G": 10**9, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


@given(st.integers(min_value=0, max_value=10**6), prefixes, st.booleans())
def test_size_round_trip(n, prefix, with_b):
    assert parse_size(f"{n}{prefix}{'B' if with_b else ''}") == n * factor[prefix]


@given(st.integers(min_value=0, max_value=10**6), prefixes)
def test_rate_round_trip(n, prefix):
    assert parse_rate(f"{n}{prefix}B/s") == n * factor[prefix]


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from([("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)]))
def test_duration_round_trip(n, unit):
    suffix, mult = unit
    assert parse_duration(f"{n}{suffix}") == pytest.approx(n * mult)


@given(st.floats(min_value=0.001, max_value=86400, allow_nan=False))
def test_formatted_duration_parses_back_close(seconds):
    text = format_duration(seconds)
    if "m" in text and not text.endswith("ms"):
        return  # 4m05s is for humans only
    assert parse_duration(text) == pytest.approx(seconds, rel=0.05, abs=0.001)
