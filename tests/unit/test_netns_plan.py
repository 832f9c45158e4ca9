"""The netns plan: interface names fit Linux's 15 characters, addresses come from the subnet."""

from pathlib import Path

import pytest

from slacker import netns
from slacker.errors import InvalidInput


def test_plan_names_and_addresses():
    p = netns.plan(Path("/tmp/some/run"), [f"node-{k}" for k in range(1, 65)], "10.77.0.0/24")
    assert p.root_address == "10.77.0.1"
    assert p.etcd_addresses == ("10.77.0.252", "10.77.0.253", "10.77.0.254")
    assert p.node("node-1").address == "10.77.0.2" and p.node("node-64").address == "10.77.0.65"
    for name in [p.bridge] + [n.veth_root for n in p.nodes] + [n.veth_node for n in p.nodes]:
        assert len(name) <= 15, name
    assert len({n.namespace for n in p.nodes}) == 64
    assert netns.Plan.from_dict(p.to_dict()) == p


def test_plans_of_two_run_dirs_do_not_share_names():
    a = netns.plan(Path("/tmp/a/run"), ["node-1"])
    b = netns.plan(Path("/tmp/b/run"), ["node-1"])
    assert a.bridge != b.bridge and a.nodes[0].namespace != b.nodes[0].namespace
    assert a.nodes[0].veth_root != b.nodes[0].veth_root


@pytest.mark.parametrize("subnet,message", [
    ("10.77.0.0/29", "too small"),
    ("10.77.0.1/24", "invalid"),
    ("8.8.8.0/24", "not a private range"),
    ("banana", "invalid"),
])
def test_bad_subnets(subnet, message):
    with pytest.raises(InvalidInput, match=message):
        netns.plan(Path("/tmp/x"), ["node-1", "node-2", "node-3"], subnet)


@pytest.mark.parametrize("flags, want", [
    ([], False), (["--netns"], True), (["--netns", "--no-tls"], False), (["--tls"], True)])
def test_cluster_up_netns_implies_tls(monkeypatch, tmp_path, flags, want):
    """Nodes on separate network hosts encrypt what crosses them unless told not to."""
    from click.testing import CliRunner

    from slacker import local_cluster
    from slacker.cli import main as cli

    seen = {}

    def fake_up(run_dir, **kw):
        seen.update(kw)
        raise SystemExit(3)

    monkeypatch.setattr(local_cluster, "up", fake_up)
    res = CliRunner().invoke(cli, ["cluster", "up", "--dir", str(tmp_path / "run"), *flags])
    assert res.exit_code == 3, res.output
    assert seen["tls"] is want
    assert seen["netns"] is ("--netns" in flags)
