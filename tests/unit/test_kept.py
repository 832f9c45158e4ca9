"""The way back's pure rules: the fence per epoch, and the options a kept source or a revert is refused with."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from slacker.cli import main
from slacker.errors import InvalidInput
from slacker.migration.kept import may_take_writes
from slacker.migration.options import MigrationOptions, MigrationRequest

NODES = st.sampled_from(["node-1", "node-2", "node-3"])


@given(kept_at=st.integers(1, 50), epoch=st.integers(1, 60), owner=NODES, here=NODES)
def test_a_copy_fenced_at_epoch_n_writes_again_only_as_the_owner_of_a_later_epoch(kept_at, epoch, owner, here):
    ok = may_take_writes({"epoch": kept_at, "owner": "x"}, owner, epoch, here)
    assert ok == (owner == here and epoch > kept_at)
    # a copy that is not kept follows the directory alone
    assert may_take_writes(None, owner, epoch, here) == (owner == here)


@pytest.mark.parametrize("options, says", [
    (dict(keep_source_s=-1), "out of range"),
    (dict(keep_source_s=31 * 24 * 3600), "out of range"),
    (dict(keep_source_s=60, mode="stop-and-copy"), "needs a live migration"),
    (dict(keep_source_s=60, verify_only=True), "needs a live migration"),
    (dict(revert=True, snapshot="physical"), "--revert takes no"),
    (dict(revert=True, cutover="manual"), "--revert takes no"),
    (dict(revert="yes"), "true or false"),
])
def test_options_refused(options, says):
    with pytest.raises(InvalidInput) as e:
        MigrationOptions(target="node-2", **options).validate()
    assert says in e.value.one_line()


def test_a_kept_source_travels_on_the_wire_and_back():
    req = MigrationRequest.checked("t42", MigrationOptions(target="node-2", keep_source_s=3600.0))
    back = MigrationRequest.from_wire(req.to_wire())
    assert back.options.keep_source_s == 3600.0 and back.options.revert is False
    assert "keep_source_s" not in MigrationRequest.checked("t42", MigrationOptions(target="node-2")).to_wire()


@pytest.mark.parametrize("args, says", [
    (["--revert", "t42", "--to", "node-2"], "--revert and --to exclude each other"),
    (["--release", "--abort", "t42"], "exclude each other"),
    (["--revert", "--cutover-now", "t42"], "exclude each other"),
    (["--abort", "t42", "--keep-source", "1h"], "--keep-source does not apply to --abort"),
    (["t42", "--to", "node-2", "--keep-source", "soon"], "soon"),
])
def test_the_cli_refuses_before_any_node_is_asked(args, says, tmp_path, monkeypatch):
    monkeypatch.setenv("SLACKER_CLUSTER", str(tmp_path / "none.toml"))  # a node asked would fail otherwise
    r = CliRunner().invoke(main, ["migrate", *args])
    assert r.exit_code != 0 and says in r.output, r.output
    if "soon" not in args:  # ours: one line (click's own usage error for a bad DURATION has its usage lines)
        assert len(r.output.strip().splitlines()) == 1, r.output
    assert "none.toml" not in r.output, r.output
