"""Tenant id validation and the id -> port function."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slacker.errors import Conflict, InvalidInput
from slacker.config import parse_port_range
from slacker.tenants import choose_port, preferred_port, validate_tenant_id


@pytest.mark.parametrize("good", ["t1", "t42", "shop-eu-1", "a", "0", "x" * 32])
def test_valid_ids(good):
    assert validate_tenant_id(good) == good


@pytest.mark.parametrize("bad", ["", "T1", "-t", "t_1", "t.1", "x" * 33, "t 1", "tenant/1", "ü", None, 42])
def test_invalid_ids(bad):
    with pytest.raises(InvalidInput):
        validate_tenant_id(bad)


ids = st.from_regex(r"^[a-z0-9][a-z0-9-]{0,31}$", fullmatch=True)


@given(ids, st.integers(min_value=1024, max_value=60000), st.integers(min_value=0, max_value=5000))
def test_port_is_a_fixed_function_within_range(tid, lo, width):
    rng = (lo, min(65535, lo + width))
    p = preferred_port(tid, rng)
    assert rng[0] <= p <= rng[1]
    assert p == preferred_port(tid, rng)
    assert choose_port(tid, rng, taken=()) == p


@given(ids)
def test_collision_moves_to_next_free_port(tid):
    rng = (20000, 20009)
    p = preferred_port(tid, rng)
    q = choose_port(tid, rng, taken={p})
    assert q != p and rng[0] <= q <= rng[1]


def test_exhausted_range():
    with pytest.raises(Conflict) as e:
        choose_port("t1", (20000, 20002), taken={20000, 20001, 20002})
    assert "no free port" in str(e.value)


@pytest.mark.parametrize("bad", ["1-2", "20000", "3000-2000", "x-y", "1000-70000"])
def test_bad_port_ranges(bad):
    with pytest.raises(InvalidInput):
        parse_port_range(bad)


def test_port_range_ok():
    assert parse_port_range("13306-23305") == (13306, 23305)
