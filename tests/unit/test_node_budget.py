"""The node budget (slacker.controller.budget): one controller per node, its rate split among the copies."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slacker.controller.budget import NodeBudget, split_rate
from slacker.controller.report import StepReport
from slacker.controller.settings import ControllerSettings
from slacker.errors import InvalidInput


class FakePolicy:
    """A node controller that gives a fixed rate and records what it was stepped with."""

    def __init__(self, rate: int | None = 40_000_000) -> None:
        self.rate = rate
        self.steps: list[tuple[float, int, float | None]] = []
        self.controller = SimpleNamespace(setpoint_s=None, set_setpoint=self._sp)
        self.source = SimpleNamespace(read=lambda: None)
        self.closed = False
        self.metrics = "node"
        self.kind = "model"
        self.unthrottled_at_max = True
        self.baseline_latency_s = None  # what a RatePolicy measured before the copy (none here)
        self.baseline_idle = False
        self.latency_source = None

    def _sp(self, v: float) -> None:
        self.controller.setpoint_s = v

    def step(self, now, bytes_done, mark=None, bytes_total=None):
        self.steps.append((now, bytes_done, bytes_total))
        return self.rate, StepReport(t=now, setpoint_s=self.controller.setpoint_s, rate_bytes_per_s=self.rate,
                                     bytes_done=bytes_done, note="law")

    def initial_rate(self):
        return 1234

    def close(self) -> None:
        self.closed = True


def _join(budget, tenant, policy, setpoint_s=0.05, split="fair"):
    c = ControllerSettings(setpoint_s=setpoint_s, budget=split)
    return budget.join(tenant, "node-2", c, lambda guards: policy, None, split)


def test_a_lone_move_gets_exactly_what_its_controller_gives():
    b, p = NodeBudget(), FakePolicy()
    s = _join(b, "t1", p)
    assert s.initial_rate() == 1234
    for i in range(5):
        rate, report = s.step(10.0 + i, 1000 * i, bytes_total=10_000)
        assert rate == p.rate and report.rate_bytes_per_s == p.rate and report.note == "law"
    assert [x[1] for x in p.steps] == [0, 1000, 2000, 3000, 4000]  # its own bytes, every step
    s.close()
    assert p.closed and not b.status()["active"]


@pytest.mark.parametrize("split", ["fair", "smallest"])
def test_two_copies_share_one_controller_stepped_once_per_step(split):
    b, p = NodeBudget(), FakePolicy()
    a = _join(b, "big", p, split=split)
    c = _join(b, "small", p, split=split)
    rates = {}
    for i in range(4):
        t = 100.0 + i
        rates["big"], _ = a.step(t, 1000 * i, bytes_total=1_000_000)
        rates["small"], rep = c.step(t + 0.01, 500 * i, bytes_total=10_000)
    assert len(p.steps) == 4  # one controller step per second, not one per copy
    assert p.steps[-1][1] == 3000 + 1000  # the node's bytes: both copies' (small's as of its last step)
    assert sum(rates.values()) <= p.rate and sum(rates.values()) >= p.rate - 2
    if split == "fair":
        assert rates["big"] == rates["small"] == p.rate // 2
    else:
        assert rates["small"] > rates["big"] > 0  # fewest bytes left first; the other keeps going
    assert "node budget" in rep.note
    doc = b.status(now=103.5)
    assert doc["copying"] == 2 and doc["split"] == split
    a.close()
    assert not p.closed  # the other copy still runs on it
    # The one that left stays counted (the controller's byte count never jumps back) and its share goes back.
    rate, _ = c.step(104.0, 2000, bytes_total=10_000)
    assert p.steps[-1][1] == 3000 + 2000 and rate == p.rate
    c.close()
    assert p.closed


def test_a_copy_out_of_its_copy_phase_gives_its_share_back_and_the_strictest_setpoint_rules():
    b, p = NodeBudget(), FakePolicy()
    a = _join(b, "a", p, setpoint_s=0.08)
    c = _join(b, "c", p, setpoint_s=0.05)
    assert p.controller.setpoint_s == 0.05
    a.step(1.0, 10, bytes_total=100)
    c.step(1.0, 10, bytes_total=100)
    rate, _ = c.step(5.0, 20, bytes_total=100)  # a stopped stepping (delta rounds): c alone copies
    assert rate == p.rate
    c.pause(True)
    rate, _ = c.step(6.0, 20, bytes_total=100)
    assert rate == 0
    c.close()
    assert p.controller.setpoint_s == 0.08


def test_split_rate_keeps_unthrottled_and_adds_up():
    assert split_rate(None, {"a": 1, "b": 2}, "smallest") == {"a": None, "b": None}
    s = split_rate(10_000_000, {"a": 5, "b": 1, "c": 9}, "smallest")
    assert max(s, key=s.get) == "b" and sum(s.values()) <= 10_000_000
    assert split_rate(9, {}, "fair") == {}


def test_an_unknown_budget_is_refused_in_one_line():
    with pytest.raises(InvalidInput, match="unknown budget"):
        ControllerSettings(setpoint_s=0.05, budget="greedy")


def test_moves_with_other_controller_settings_do_not_join():
    b, p = NodeBudget(), FakePolicy()
    _join(b, "a", p)
    other = ControllerSettings(setpoint_s=0.05, kind="pid")
    assert b.join("z", "node-3", other, lambda g: FakePolicy(), None, "fair") is None


def test_a_drains_move_steers_over_the_load_its_source_reads_not_under_it():
    """A drain chose its setpoint from the servers' figures (10 ms); the node's controller reads the routers'
    (what clients see), where the load alone is 13 ms. Steering at 10 ms would hold every copy at 0 B/s for
    good; with the drain's headroom the members steer at 13 ms x 1.25, and a move without one as asked."""
    b, p = NodeBudget(), FakePolicy()
    p.baseline_latency_s = 0.013
    c = ControllerSettings(setpoint_s=0.010, setpoint_headroom=0.25)
    a = b.join("a", "node-2", c, lambda guards: p, None, "fair")
    assert p.controller.setpoint_s == pytest.approx(0.01625)
    b.join("b", "node-3", ControllerSettings(setpoint_s=0.030, setpoint_headroom=0.25), lambda g: p, None, "fair")
    assert p.controller.setpoint_s == pytest.approx(0.01625)  # the strictest, each raised on its own
    a.close()
    assert p.controller.setpoint_s == pytest.approx(0.030)   # already over the load: as asked
    b2 = NodeBudget()
    p2 = FakePolicy()
    p2.baseline_latency_s = 0.013
    b2.join("x", "node-2", ControllerSettings(setpoint_s=0.010), lambda g: p2, None, "fair")
    assert p2.controller.setpoint_s == pytest.approx(0.010)  # no headroom (an operator's own move): as asked


def test_the_budget_says_what_its_copies_moved_against_the_least_rate_they_were_held_to():
    b, p = NodeBudget(), FakePolicy(rate=20_000_000)
    s = _join(b, "t1", p)
    assert b.status()["flow_bytes_per_s"] is None  # nothing stepped yet
    for i in range(6):  # 20 MB/s set, 5 MB/s moved: the pipeline, not the rate, limits the copy
        s.step(10.0 + i, 5_000_000 * i, bytes_total=10**9)
    doc = b.status(now=15.5)
    assert doc["flow_bytes_per_s"] == 5_000_000 and doc["held_bytes_per_s"] == 20_000_000
    p.rate = None  # unthrottled for a second: nothing held the copies back in the window
    s.step(16.0, 30_000_000, bytes_total=10**9)
    s.step(17.0, 35_000_000, bytes_total=10**9)
    assert b.status(now=17.5)["held_bytes_per_s"] is None
    s.close()
    assert b.status()["flow_bytes_per_s"] is None  # a new controller starts with no flow
