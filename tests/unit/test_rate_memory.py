"""The node's memory of its controlled copies (slacker.controller.memory): what a copy held seeds the next
comparable one; fixed-rate and unthrottled copies never enter it; it survives a restart and can be reset."""

from __future__ import annotations

import json
from types import SimpleNamespace

from slacker.controller import ModelController
from slacker.controller.budget import NodeBudget
from slacker.controller.memory import MAX_AGE_S, RateMemory, held_rate
from slacker.controller.report import StepReport
from slacker.controller.settings import ControllerSettings


def test_held_rate_is_the_second_halfs_median_within_the_setpoint():
    steps = [(10e6, 0.02, True)] * 3 + [(20e6, 0.03, False)] * 4 + [(60e6, 0.04, False)] * 4
    rate, mean = held_rate(steps, 0.05)
    assert rate == 60e6 and mean == 0.04  # the unmarked second half; the tool's start (marked) left out
    # A load that doubled mid-copy: its seconds over the setpoint at a low rate say nothing of the usual load.
    doubled = [(60e6, 0.04, False)] * 4 + [(5e6, 0.2, False)] * 4 + [(60e6, 0.045, False)] * 3
    assert held_rate(doubled, 0.05)[0] == 60e6
    assert held_rate([(60e6, 0.1, False)] * 8, 0.05) is None  # never within the setpoint: nothing to remember
    assert held_rate([(60e6, 0.04, False)] * 5, 0.05) is None  # too short to say


def test_a_comparable_copy_is_seeded_by_the_newest_entry_and_nothing_else_is(tmp_path):
    now = [1_000_000.0]
    m = RateMemory(tmp_path / "m.json", clock=lambda: now[0])
    assert m.record(kind="fixed", setpoint_s=0.05, load_latency_s=0.02, rate_bytes_per_s=9e6, mean_latency_s=0.03,
                    seconds=20) is None  # a fixed rate says nothing of what a controller would hold
    m.record(kind="model", setpoint_s=0.05, load_latency_s=0.02, rate_bytes_per_s=40e6, mean_latency_s=0.045,
             seconds=20, migration="m1")
    now[0] += 10
    m.record(kind="model", setpoint_s=0.05, load_latency_s=0.02, rate_bytes_per_s=50e6, mean_latency_s=0.045,
             seconds=20, migration="m2")
    assert m.lookup(0.06, 0.025)["migration"] == "m2"
    assert m.lookup(0.2, 0.02) is None  # a setpoint 4x looser: another plant's point
    assert m.lookup(0.05, 0.05) is None  # a load 2.5x slower: another load
    # survives a restart; an old entry seeds nothing
    again = RateMemory(tmp_path / "m.json", clock=lambda: now[0] + MAX_AGE_S + 60)
    assert len(again.status()["entries"]) == 2 and again.lookup(0.05, 0.02) is None
    assert again.reset() == 2 and RateMemory(tmp_path / "m.json").status()["entries"] == []


def test_a_memory_that_cannot_be_read_seeds_nothing(tmp_path):
    (tmp_path / "m.json").write_text("{not json")
    assert RateMemory(tmp_path / "m.json").lookup(0.05, 0.02) is None


class Policy:
    """A RatePolicy with a real model controller, stepped at a fixed latency."""

    def __init__(self, latency_s: float = 0.03) -> None:
        self.controller = ModelController(0.05, 200e6)
        self.kind = "model"
        self.baseline_latency_s = 0.02
        self.baseline_idle = False
        self.latency_source = {"kind": "performance_schema"}
        self.metrics = None
        self.unthrottled_at_max = True
        self.latency_s = latency_s
        self.source = SimpleNamespace(read=lambda: None)

    def step(self, now, bytes_done, mark=None, bytes_total=None):
        return 30_000_000, StepReport(t=now, setpoint_s=0.05, rate_bytes_per_s=30_000_000, bytes_done=bytes_done,
                                      latency_s=self.latency_s, note="law")

    def initial_rate(self):
        return self.controller.rate_bytes_per_s

    def close(self):
        pass


def _copy(budget: NodeBudget, policy: Policy, seconds: int = 12) -> int | None:
    c = ControllerSettings(setpoint_s=0.05)
    share = budget.join("t1", "node-2", c, lambda guards: policy, None, "fair")
    start = share.initial_rate()
    for i in range(seconds):
        share.step(100.0 + i, 30_000_000 * i, bytes_total=10**10)
    share.close()
    return start


def test_the_nodes_budget_remembers_its_copy_and_seeds_the_next(tmp_path):
    b = NodeBudget()
    b.memory = RateMemory(tmp_path / "rate-memory.json")
    assert _copy(b, Policy()) == 10_000_000  # a first move: the safe start
    entry = json.loads((tmp_path / "rate-memory.json").read_text())["entries"][-1]
    assert entry["rate_bytes_per_s"] == 30_000_000 and entry["kind"] == "model"
    p = Policy()
    assert _copy(b, p) == 30_000_000  # the next starts where the last held
    assert p.latency_source["seeded"]["rate_bytes_per_s"] == 30_000_000
    b.memory.reset()
    assert _copy(b, Policy()) == 10_000_000


def test_a_pid_or_fixed_policy_is_never_seeded(tmp_path):
    b = NodeBudget()
    b.memory = RateMemory(tmp_path / "rate-memory.json")
    _copy(b, Policy())
    p = Policy()
    p.kind = "pid"
    assert _copy(b, p) == 10_000_000  # the PID keeps its own start (only the model takes a seed)
