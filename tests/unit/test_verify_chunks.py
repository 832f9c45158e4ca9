"""Online verification's pure parts: chunk sizing, key ranges as SQL and as users read them, and
primary-key values carried between the agents as JSON."""

import datetime
import decimal
import json

from hypothesis import given, strategies as st

from slacker.mariadb import rowsums
from slacker.verify.online import FIRST_CHUNK_ROWS, chunk_rows, key_text

PLAN = rowsums.TablePlan("shop.items", "`shop`.`items`", ("id",), ("id",), 0, 0)
WIDE = rowsums.TablePlan("s.t", "`s`.`t`", ("a", "b", "c"), ("a", "b"), 0, 0)


def test_chunk_rows_follow_the_measured_row_size():
    assert chunk_rows(2 << 20, 0, 0) == FIRST_CHUNK_ROWS  # nothing measured yet
    assert chunk_rows(2 << 20, 200, 200 * 2400) == (2 << 20) // 2400
    assert chunk_rows(2 << 20, 10, 10) == 100_000  # tiny rows: bounded
    assert chunk_rows(1024, 10, 10 * 1_000_000) == 10  # huge rows: at least a few


def test_key_ranges_as_users_read_them():
    assert key_text(PLAN, None, None) == "all rows"
    assert key_text(PLAN, None, [800]) == "id <= 800"
    assert key_text(PLAN, [800], [1600]) == "id > 800 and <= 1600"
    assert key_text(WIDE, [1, "x"], None) == "(a,b) > (1,x)"


def test_composite_ranges_expand_to_index_friendly_sql():
    where, args = rowsums._range(WIDE, [1, "x"], [2, "y"])
    assert where == (" WHERE ((`a` > %s) OR (`a` = %s AND `b` > %s))"
                     " AND ((`a` < %s) OR (`a` = %s AND `b` <= %s))")
    assert args == [1, 1, "x", 2, 2, "y"]


@given(st.lists(st.one_of(
    st.integers(-2**63, 2**64 - 1), st.text(max_size=20), st.binary(max_size=20),
    st.decimals(allow_nan=False, allow_infinity=False, places=4),
    st.datetimes(min_value=datetime.datetime(1000, 1, 1)), st.dates(min_value=datetime.date(1000, 1, 1))),
    min_size=1, max_size=4))
def test_keys_survive_json_between_the_agents(values):
    back = rowsums.decode_key(json.loads(json.dumps(rowsums.encode_key(values))))
    for v, b in zip(values, back):
        if isinstance(v, (datetime.datetime, datetime.date)):
            assert b == (v.isoformat(sep=" ") if isinstance(v, datetime.datetime) else v.isoformat())
        elif isinstance(v, decimal.Decimal):
            assert b == v
        else:
            assert b == v
