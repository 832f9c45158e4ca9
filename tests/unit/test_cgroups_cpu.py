"""The CPU budget's settings (slacker/cgroups.py) and their record in the cluster file (slacker/config.py)."""

from __future__ import annotations

import pytest

from slacker import cgroups
from slacker.config import load_cluster
from slacker.errors import InvalidInput


def test_weight_and_v1_shares_map_the_two_defaults_onto_each_other():
    assert cgroups.weight_to_shares(100) == 1024
    assert cgroups.weight_to_shares(1000) == 10240
    assert cgroups.weight_to_shares(1) == 10 and cgroups.weight_to_shares(10_000) == 102_400
    for w in (1, 37, 100, 1000, 10_000):
        assert cgroups.shares_to_weight(cgroups.weight_to_shares(w)) == w


@pytest.mark.parametrize("period_s", [0.0005, 1.5])
def test_a_period_the_kernel_refuses_is_refused_first(period_s):
    with pytest.raises(InvalidInput, match="--cpu-period"):
        cgroups.validate_period(period_s)


@pytest.mark.parametrize("weight", [0, 10_001])
def test_a_weight_out_of_range_is_refused(weight):
    with pytest.raises(InvalidInput, match="--cpu-weight"):
        cgroups.validate_weight(weight)


def _cluster_file(tmp_path, extra: str):
    (tmp_path / "token").write_text("x" * 64 + "\n")
    p = tmp_path / "cluster.toml"
    p.write_text(f'token_file = "token"\ndirectory = "node-1"\n{extra}\n'
                 '[[nodes]]\nname = "node-1"\nurl = "http://127.0.0.2:7701"\n')
    return p


def test_the_cluster_file_records_the_budget(tmp_path):
    p = _cluster_file(tmp_path, "cpu_per_node = 0.5\ncpu_period = 0.01\ncpu_weight = 1000\n"
                                "disk_read_per_node = 30000000")
    c = load_cluster(str(p))
    assert c.node_budget == {"cpu_per_node": 0.5, "cpu_period": 0.01, "cpu_weight": 1000,
                             "disk_read_per_node": 30_000_000}
    assert load_cluster(str(_cluster_file(tmp_path, ""))).node_budget == {}


def test_a_bad_budget_in_the_cluster_file_is_refused(tmp_path):
    with pytest.raises(InvalidInput, match="bad cpu_period"):
        load_cluster(str(_cluster_file(tmp_path, 'cpu_period = "10ms"')))
