"""Backup binlog positions, GTID positions and binlog distances (pure logic)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slacker.backup import BackupPosition, parse_binlog_info
from slacker.delta.gtid import (binlog_bytes_between, format_gtid_pos, parse_gtid_pos, reached,
                                transactions_between)
from slacker.errors import InvalidInput, MigrationFailed


def test_mariadb_binlog_info():
    assert parse_binlog_info("binlog.000003\t4711\t0-12-345\n") == BackupPosition("binlog.000003", 4711, "0-12-345")
    assert parse_binlog_info("binlog.000003\t4711\t0-12-345,1-3-7").gtid == "0-12-345,1-3-7"
    assert parse_binlog_info("binlog.000001\t4\t").gtid == ""
    assert parse_binlog_info("mysql-bin.000002 155").binlog_pos == 155


@pytest.mark.parametrize("bad", ["", "binlog.000001", "binlog.000001\tforty"])
def test_bad_binlog_info(bad):
    with pytest.raises(MigrationFailed):
        parse_binlog_info(bad)


def test_gtid_positions():
    assert parse_gtid_pos("0-1-100,1-2-5") == {0: (1, 100), 1: (2, 5)}
    assert parse_gtid_pos("") == {}
    assert format_gtid_pos({1: (2, 5), 0: (1, 100)}) == "0-1-100,1-2-5"
    assert reached("0-1-100", "0-1-99") and reached("0-1-100", "0-1-100") and not reached("0-1-99", "0-1-100")
    assert not reached("0-1-100", "0-1-1,1-1-1")  # a domain the target has not seen
    assert reached("0-5-100", "0-1-100")  # sequence numbers count, not the server that wrote them
    assert transactions_between("0-1-100", "0-1-130") == 30
    assert transactions_between("", "0-1-7,1-1-3") == 10
    with pytest.raises(InvalidInput):
        parse_gtid_pos("0-1")


@given(st.dictionaries(st.integers(0, 9), st.tuples(st.integers(1, 2**31), st.integers(0, 2**40)), max_size=4))
def test_gtid_round_trip(pos):
    assert parse_gtid_pos(format_gtid_pos(pos)) == pos
    assert reached(format_gtid_pos(pos), format_gtid_pos(pos))


def test_binlog_distance():
    logs = [("binlog.000001", 1000), ("binlog.000002", 500), ("binlog.000003", 300)]
    assert binlog_bytes_between(logs, ("binlog.000001", 400), ("binlog.000001", 900)) == 500
    assert binlog_bytes_between(logs, ("binlog.000001", 400), ("binlog.000003", 100)) == 600 + 500 + 100
    assert binlog_bytes_between(logs, ("binlog.000003", 100), ("binlog.000001", 400)) == 0
    # a purged start file: fall back to what can be known
    assert binlog_bytes_between(logs[1:], ("binlog.000001", 400), ("binlog.000003", 100)) == 0
