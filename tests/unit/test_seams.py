"""The migration's seams are declared, not guessed: few reflective look-ups in the migration, the controller and
the throttle, no private method called from outside its class, and one typed request from the CLI to the
agent, validated once at each edge."""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from slacker.errors import InvalidInput
from slacker.migration.options import MigrationOptions, MigrationRequest

ROOT = Path(__file__).resolve().parents[2]
SEAMED = sorted([*(ROOT / "slacker/migration").glob("*.py"), *(ROOT / "slacker/controller").glob("*.py"),
                 ROOT / "slacker/throttle.py"])
MAX_REFLECTIVE = 10


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            yield node


def reflective(paths=SEAMED) -> list[tuple[Path, int]]:
    """Every getattr()/hasattr() call in `paths`: where the code asks what an object has."""
    return [(p, c.lineno) for p in paths for c in _calls(p)
            if isinstance(c.func, ast.Name) and c.func.id in ("getattr", "hasattr")]


def test_reflective_lookups_are_few_and_each_says_why():
    found = reflective()
    assert len(found) <= MAX_REFLECTIVE, "\n".join(f"{p.relative_to(ROOT)}:{n}" for p, n in found)
    for path, line in found:
        lines = path.read_text().splitlines()
        # the comment on the call's line or the one above says why reflection is needed there
        assert "#" in lines[line - 1] or lines[line - 2].strip().startswith("#"), f"{path.relative_to(ROOT)}:{line}"


def test_the_count_sees_a_duck_typed_lookup(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f(x):\n    return getattr(x, 'sides', None) or hasattr(x, 'member')\n")
    assert reflective([p]) == [(p, 2), (p, 2)]


def test_no_private_method_is_called_from_outside_its_class():
    """`obj._m()` on anything but self/cls/super(): a seam used without being declared."""
    bad = []
    for path in SEAMED:
        for c in _calls(path):
            f = c.func
            if not (isinstance(f, ast.Attribute) and re.match(r"_[^_]", f.attr)):
                continue
            v = f.value
            if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                continue
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                continue
            bad.append(f"{path.relative_to(ROOT)}:{c.lineno} .{f.attr}()")
    assert not bad, bad


def test_a_share_of_the_node_budget_and_a_lone_policy_take_the_same_settings():
    """`slacker migrate --set` speaks to either through the CopyRate protocol."""
    from slacker.controller.budget import NodeBudget
    from slacker.controller.loop import RatePolicy
    from slacker.controller.model import ModelController
    from slacker.controller.settings import ControllerSettings
    from slacker.latency import LatencySample, LatencySource
    from slacker.throttle import apply_settings

    class Quiet(LatencySource):
        def read(self) -> LatencySample:
            return LatencySample("quiet", 0.0, sum_s=0.0, count=0, window_s=1.0)

    lone = RatePolicy(Quiet(), ModelController(1.0, 1000))
    budget = NodeBudget()
    settings = ControllerSettings(setpoint_s=1.0)
    share = budget.join("t1", "node-2", settings, lambda guards: RatePolicy(Quiet(), ModelController(1.0, 1000)),
                        None, "fair")
    for policy in (lone, share):
        m = SimpleNamespace(rate_policy=policy, pipe=None)
        apply_settings(m, {"setpoint_s": 0.5})
        assert policy.controller.setpoint_s == 0.5
        apply_settings(m, {"pause": True})
        assert (policy.controller.paused if policy is lone else share.member.paused)
        apply_settings(m, {"resume": True})
        assert not policy.controller.paused and not budget.members["t1"].paused
    share.close()


# ---- one request, validated once at each edge ------------------------------------------------------------
class _Tenants:
    def get(self, tenant_id):
        return SimpleNamespace(id=tenant_id)


def _agent_side(tmp_path):
    """The source agent's route as the HTTP handler runs it: decode the body, start it in the service (whose
    registry and thread are left out), which makes the phase machine."""
    from slacker.migration.service import MigrationService
    from .migration_fakes import FakeNode, World

    node = FakeNode(World(), tmp_path)
    node.tenants = _Tenants()
    node.claim = node.release = lambda tid: None
    started = []
    svc = SimpleNamespace(_lock=threading.Lock(), _outgoing={}, node=node, participants=None, _trim=lambda: None,
                          _rate_policy=lambda tid, opts: None, _run=lambda mig, fn, rp: started.append(mig))
    return svc, started


@pytest.fixture
def counted(monkeypatch):
    """Counts MigrationOptions.validate() calls."""
    calls = []
    real = MigrationOptions.validate

    def validate(self):
        calls.append(self)
        return real(self)

    monkeypatch.setattr(MigrationOptions, "validate", validate)
    return calls


def test_validate_runs_once_at_each_edge_from_the_cli_to_the_phase_machine(tmp_path, monkeypatch, counted):
    from slacker.cli import main
    from slacker.cli.common import CliContext
    from slacker.migration.service import MigrationService

    svc, started = _agent_side(tmp_path)
    seen = {}

    class Source:
        def request(self, method, path, body=None, **kw):
            assert (method, path) == ("POST", "/v1/migrations")
            seen["cli"] = len(counted)  # the CLI's: made from its flags
            request = MigrationRequest.from_wire(body)
            seen["decode"] = len(counted) - seen["cli"]  # the agent's edge
            mig = MigrationService.start(svc, request)
            seen["inward"] = len(counted) - seen["cli"] - seen["decode"]  # service and machine trust it
            seen["body"], seen["opts"] = body, mig.opts
            return {"id": mig.id, "active": True}

    nodes = {"node-1": SimpleNamespace(), "node-2": SimpleNamespace()}
    cluster = SimpleNamespace(nodes=nodes, node=lambda n: nodes[n])
    directory = SimpleNamespace(lookup=lambda tid: SimpleNamespace(node="node-1", kind="server"))
    monkeypatch.setattr(CliContext, "cluster", lambda self: cluster)
    monkeypatch.setattr("slacker.agent.client.cluster_clients", lambda c: ({"node-1": Source()}, directory))
    out = CliRunner().invoke(main, ["migrate", "t1", "--to", "node-2", "--setpoint", "50ms", "--max-freeze", "2s",
                                    "--delta-mpl", "4", "--detach"])
    assert out.exit_code == 0, out.output
    assert (seen["cli"], seen["decode"], seen["inward"]) == (1, 1, 0)
    assert len(started) == 1 and seen["opts"].controller.setpoint_s == 0.05 and seen["opts"].delta_mpl == 4
    # the keys the agents one protocol version apart take: those the CLI always sent, and the options given
    assert set(seen["body"]) == {"tenant", "target", "mode", "max_freeze_s", "handover_attempts", "handover_wait_s",
                                 "verify", "max_rounds", "max_stalled_rounds", "rate_bytes_per_s", "controller",
                                 "delta_mpl"}
    assert seen["body"]["controller"]["setpoint_s"] == 0.05 and seen["body"]["max_freeze_s"] == 2.0


def test_the_wire_round_trip_keeps_the_request():
    from slacker.controller.settings import ControllerSettings

    req = MigrationRequest.checked("t1", MigrationOptions(
        target="node-2", verify_only=True, hold_s={"flipped": 2.0}, delta_catchup=False,
        controller=ControllerSettings(setpoint_s=0.2, budget="smallest")))
    back = MigrationRequest.from_wire(req.to_wire())
    assert back == req and back.options.verify and isinstance(back.options.controller, ControllerSettings)


def test_a_body_as_an_older_cli_sends_it_is_decoded_and_a_bad_one_refused():
    body = {"tenant": "t1", "target": "node-2", "mode": "live", "max_freeze_s": 0.5, "handover_attempts": 3,
            "handover_wait_s": 60.0, "verify": False, "max_rounds": 20, "max_stalled_rounds": 3,
            "rate_bytes_per_s": None, "pipe": "native", "data_path": "auto", "delta_mpl": "auto",
            "controller": {"setpoint_s": 0.1, "kind": None, "gains": None}}
    req = MigrationRequest.from_wire(body)
    assert req.tenant == "t1" and req.options.controller.setpoint_s == 0.1
    with pytest.raises(InvalidInput, match="unknown migration option"):
        MigrationRequest.from_wire(dict(body, colour="red"))
    with pytest.raises(InvalidInput, match="needs a tenant"):
        MigrationRequest.from_wire({k: v for k, v in body.items() if k != "tenant"})
    with pytest.raises(InvalidInput, match="max-freeze"):
        MigrationRequest.from_wire(dict(body, max_freeze_s=600))
