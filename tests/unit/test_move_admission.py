"""How copies join a source's latency budget: one at a time, each only after the node's controller has
read the latency with the ones already started, only while the latency leaves room for another (the
controller at its maximum, or copies not using their rate), and only while the rate leaves each a share."""

from __future__ import annotations

import pytest

from slacker.migration.options import MigrationOptions, MigrationRequest
from slacker.rebalance.moves import ADMIT_AFTER_S, MoveRunner


def _request(tenant: str, target: str) -> MigrationRequest:
    return MigrationRequest(tenant, MigrationOptions(target=target))


class _Agent:
    def __init__(self) -> None:
        self.budget = {"active": False, "copying": 0, "rate_bytes_per_s": None}
        self.n = 0

    def request(self, method, path, body=None, **_):
        if path == "/v1/budget":
            return dict(self.budget)
        if method == "POST" and path == "/v1/migrations":
            self.n += 1
            return {"id": f"m{self.n}", "active": True, "phase": "preflight", "tenant": body["tenant"]}
        raise AssertionError(path)


def _runner(agent):
    r = MoveRunner({"node-1": agent}, max_parallel=8)
    r.budget_of = lambda node: dict(agent.budget)  # no 1 s cache in a test
    return r


def test_an_idle_node_takes_one_copy_not_a_batch():
    agent = _Agent()
    r = _runner(agent)
    assert r.may_start("node-1", "node-2")
    assert not r.may_start("node-1", "node-3", pending=1, pending_targets=("node-2",))
    assert "one new copy at a time" in r.why_not and "budget" in r.why_not  # the drain stops its batch on it


def test_the_next_copy_waits_until_the_controller_has_measured_the_newest():
    agent = _Agent()
    r = _runner(agent)
    first = r.start("a", "node-1", "node-2", _request("a", "node-2"))
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 50e6, "fraction": 1.0}
    assert not r.may_start("node-1", "node-3")
    assert "not yet measured" in r.why_not
    first.started_at -= ADMIT_AFTER_S
    first.doc["phase"] = "snapshot"
    assert r.may_start("node-1", "node-3")  # measured, at its maximum, and 25 MB/s each with one more
    # At its maximum, but two copies would get less than the least share.
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 1.5e6, "fraction": 1.0}
    assert not r.may_start("node-1", "node-3") and "no room" in r.why_not


def _measured_copy(agent):
    r = _runner(agent)
    first = r.start("a", "node-1", "node-2", _request("a", "node-2"))
    first.started_at -= ADMIT_AFTER_S
    first.doc["phase"] = "snapshot"
    return r


def test_a_copy_the_latency_holds_back_takes_no_company():
    """The node's controller holds its copy under its maximum for the latency and the copy uses that rate: a
    second copy would split the same rate and add what it costs the source whatever its rate."""
    agent = _Agent()
    r = _measured_copy(agent)
    held = {"active": True, "copying": 1, "rate_bytes_per_s": 12e6, "fraction": 0.06, "flow_bytes_per_s": 11.5e6,
            "held_bytes_per_s": 12e6, "latency_s": 0.0037, "setpoint_s": 0.0038, "load_latency_s": 0.0023}
    agent.budget = held
    assert not r.may_start("node-1", "node-3")
    assert "latency budget is spent" in r.why_not and "budget" in r.why_not  # the drain stops its batch on it
    assert "93% of the room" in r.why_not
    # A load's latency measured high (the machine busy then) shows room the model's fit of the copy says is not there.
    agent.budget = dict(held, load_latency_s=0.0036, model_load_latency_s=0.0023)
    assert not r.may_start("node-1", "node-3") and "93% of the room" in r.why_not
    # The copies leave rate unused while the latency is held: what holds it is not the rate, no company either.
    agent.budget = dict(held, flow_bytes_per_s=3e6)
    assert not r.may_start("node-1", "node-3")
    # An agent that does not report the load's latency (an older one): the room counts from 0 ms.
    agent.budget = {k: v for k, v in held.items() if k not in ("flow_bytes_per_s", "held_bytes_per_s", "load_latency_s")}
    assert not r.may_start("node-1", "node-3")
    # No latency read yet: one copy at a time, the safe side.
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 12e6, "fraction": 0.06}
    assert not r.may_start("node-1", "node-3")


@pytest.mark.parametrize("budget", [
    {"rate_bytes_per_s": None, "fraction": 1.0},  # unthrottled: the latency is under the setpoint at full speed
    {"rate_bytes_per_s": 3e6, "fraction": 1.0},  # at a --max-rate cap: the cap binds, not the latency
    # a rate rising with the latency a third of the way from the load's own to the setpoint: no knee in sight
    {"rate_bytes_per_s": 76e6, "fraction": 0.38, "flow_bytes_per_s": 75e6, "held_bytes_per_s": 41e6,
     "latency_s": 0.0032, "setpoint_s": 0.0049, "load_latency_s": 0.0023},
])
def test_room_for_another_copy_where_the_latency_does_not_hold_the_copies_back(budget):
    agent = _Agent()
    r = _measured_copy(agent)
    agent.budget = {"active": True, "copying": 1, **budget}
    assert r.may_start("node-1", "node-3"), r.why_not


def test_a_move_past_its_copy_does_not_hold_the_next_copy_back():
    agent = _Agent()
    r = _runner(agent)
    first = r.start("a", "node-1", "node-2", _request("a", "node-2"))
    first.doc["phase"] = "prepare"  # its copy ended: the target prepares, the source's budget is free
    assert r.may_start("node-1", "node-3")


def test_moves_with_controllers_of_their_own_are_counted_only():
    agent = _Agent()
    r = MoveRunner({"node-1": agent}, max_parallel=2, budget=False)
    r.start("a", "node-1", "node-2", _request("a", "node-2"))
    assert r.may_start("node-1", "node-3", pending=0)
    assert not r.may_start("node-1", "node-4", pending=1, pending_targets=("node-3",))
    assert "--max-parallel 2" in r.why_not


class _AbortingAgent(_Agent):
    def __init__(self) -> None:
        super().__init__()
        self.aborted: list[str] = []

    def request(self, method, path, body=None, **kw):
        if path.endswith("/abort"):
            self.aborted.append(path.split("/")[3])
            return {}
        return super().request(method, path, body, **kw)


def test_a_node_whose_copies_are_all_held_at_zero_sheds_its_newest_and_takes_one_fewer():
    from slacker.rebalance.moves import SHED_AFTER_S

    agent = _AbortingAgent()
    r = _runner(agent)
    old = r.start("a", "node-1", "node-2", _request("a", "node-2"))
    new = r.start("b", "node-1", "node-3", _request("b", "node-3"))
    old.started_at, new.started_at = 100.0, 110.0
    for m in (old, new):
        m.doc["phase"] = "snapshot"
    agent.budget = {"active": True, "copying": 2, "rate_bytes_per_s": 0}
    assert r.shed_one("node-1", now=200.0) is None  # held at zero: the clock starts
    agent.budget = {"active": True, "copying": 2, "rate_bytes_per_s": 8e6}
    assert r.shed_one("node-1", now=200.0 + SHED_AFTER_S) is None  # it moved again: the clock resets
    agent.budget = {"active": True, "copying": 2, "rate_bytes_per_s": 0}
    assert r.shed_one("node-1", now=300.0) is None
    assert r.shed_one("node-1", now=300.0 + SHED_AFTER_S) is new  # the newest copy goes
    assert agent.aborted == [new.mid] and new.shed and not old.shed
    assert r.cap["node-1"] == 1
    r.running.pop("b")
    old.started_at = 0.0
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 50e6}
    assert not r.may_start("node-1", "node-3") and "at most 1 at once" in r.why_not


def test_one_copy_held_at_zero_is_not_shed():
    agent = _AbortingAgent()
    r = _runner(agent)
    only = r.start("a", "node-1", "node-2", _request("a", "node-2"))
    only.doc["phase"] = "snapshot"
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 0}
    assert r.shed_one("node-1", now=0.0) is None and r.shed_one("node-1", now=1000.0) is None
    assert agent.aborted == []


def test_copies_too_small_to_be_measured_do_not_wait_for_a_measure():
    """A copy that ends within ADMIT_AFTER_S even at the least share can never be measured before it is gone:
    the next small copy starts beside it (a drain of a hundred small tenants ran them one after another), and
    several small ones start in one batch; a large one still waits, and the latency's room still decides."""
    from slacker.rebalance.moves import SMALL_COPY_BYTES

    agent = _Agent()
    r = _runner(agent)
    assert r.may_start("node-1", "node-3", pending=1, pending_targets=("node-2",), small=True)
    r.start("a", "node-1", "node-2", _request("a", "node-2"), data_bytes=SMALL_COPY_BYTES // 4)
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 50e6, "fraction": 1.0}
    assert r.may_start("node-1", "node-3", small=True)
    r.start("b", "node-1", "node-3", _request("b", "node-3"), data_bytes=10**12)
    assert not r.may_start("node-1", "node-4", small=True) and "not yet measured" in r.why_not  # b is not small
    del r.running["b"]
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 50e6, "fraction": 0.5,
                    "latency_s": 0.045, "setpoint_s": 0.05, "load_latency_s": 0.01}
    assert not r.may_start("node-1", "node-4", small=True) and "latency budget is spent" in r.why_not


def test_a_small_copy_does_not_wait_for_the_node_s_first_latency_read_a_large_one_does():
    """A small copy is gone before its node's controller first reads the latency with it: the next small copy
    starts beside it (a drain of a hundred small shared tenants otherwise ran one copy at a time)."""
    from slacker.rebalance.moves import SMALL_COPY_BYTES

    agent = _Agent()
    r = _runner(agent)
    r.start("a", "node-1", "node-2", _request("a", "node-2"), data_bytes=SMALL_COPY_BYTES // 4)
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 1.5e6, "fraction": 0.4,
                    "latency_s": None, "setpoint_s": 0.05}
    assert r.may_start("node-1", "node-3", small=True), r.why_not
    assert not r.may_start("node-1", "node-3") and "has not read the latency" in r.why_not


def test_small_means_gone_before_a_measure_at_the_share_the_copy_would_get():
    """Small is judged at the rate the copy would get: the node's rate over its copies (the start rate when none
    runs), never under the least share; a size not known is never small."""
    from slacker.controller.model import START_RATE_BYTES_PER_S
    from slacker.rebalance.moves import ADMIT_AFTER_S, SMALL_COPY_BYTES

    agent = _Agent()
    r = _runner(agent)
    ten_mb = 10_000_000  # a small shared tenant's files: 4 MB extents beside a few tables
    assert r.is_small("node-1", ten_mb) and not r.is_small("node-1", 0)
    assert not r.is_small("node-1", int(START_RATE_BYTES_PER_S * ADMIT_AFTER_S) + 1)
    agent.budget = {"active": True, "copying": 1, "rate_bytes_per_s": 0, "fraction": 0.0, "latency_s": 0.05}
    assert not r.is_small("node-1", ten_mb) and r.is_small("node-1", SMALL_COPY_BYTES)  # held: the least share
    agent.budget = {"active": True, "copying": 3, "rate_bytes_per_s": 40e6, "fraction": 0.4, "latency_s": 0.01}
    assert r.is_small("node-1", 40e6 / 4 * ADMIT_AFTER_S) and not r.is_small("node-1", 40e6 / 4 * ADMIT_AFTER_S, pending=1)
