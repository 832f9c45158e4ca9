"""slacker.agent.tenant_stats.data_bytes: the size of a tenant's files, optionally without some of them."""

from __future__ import annotations

from slacker.agent.tenant_stats import data_bytes


def test_counts_every_file_below_the_directory(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "ibdata1").write_bytes(b"x" * 1000)
    (tmp_path / "db" / "t.ibd").write_bytes(b"x" * 300)
    (tmp_path / "binlog.000001").write_bytes(b"x" * 50)
    (tmp_path / "binlog.index").write_bytes(b"x" * 7)
    assert data_bytes(tmp_path) == 1357
    assert data_bytes(tmp_path, ("binlog",)) == 1300
    assert data_bytes(tmp_path, ("binlog", "ibdata")) == 300


def test_a_missing_directory_is_empty(tmp_path):
    assert data_bytes(tmp_path / "nope") == 0
