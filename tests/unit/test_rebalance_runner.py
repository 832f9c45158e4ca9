"""The rebalancer's state in a real (SQLite) directory: the lock held elsewhere, moves recorded and settled."""

from __future__ import annotations

from slacker.directory import SQLiteStore
from slacker.rebalance.planner import Move, Settings
from slacker.rebalance.runner import LOCK_NAME, MOVES_PREFIX, RunOptions, read_state, run

NOW = 1_800_000_000.0


def test_a_run_that_finds_the_lock_taken_moves_nothing_and_names_the_holder(tmp_path):
    d = SQLiteStore(tmp_path / "dir.sqlite")
    d.acquire_lock(LOCK_NAME, "host-a:1", 60)
    res = run({}, d, Settings(), RunOptions(execute=True, holder="host-b:2"))
    assert res.plan.decision == "none" and "host-a:1" in res.plan.reason and not res.executed
    assert d.lock_info(LOCK_NAME).holder == "host-a:1"  # untouched
    # A dry run says the same without trying to take it.
    assert "host-a:1" in run({}, d, Settings(), RunOptions()).plan.reason
    # Once released, an executing run takes it and gives it back.
    d.release_lock(LOCK_NAME, "host-a:1")
    res = run({}, d, Settings(), RunOptions(execute=True, holder="host-b:2"))
    assert res.lock == "taken by host-b:2" and d.lock_info(LOCK_NAME) is None
    assert d.state_get("rebalance/last-run")["holder"] == "host-b:2"


def test_moves_are_read_settled_and_pruned(tmp_path):
    d = SQLiteStore(tmp_path / "dir.sqlite")
    s = Settings(tenant_cooldown_s=1800, node_cooldown_s=600, no_return_s=7200)
    d.state_put(MOVES_PREFIX + "old", Move("old", "node-1", "node-2", NOW - 9000, 0.1, NOW - 8000, "succeeded").to_dict())
    d.state_put(MOVES_PREFIX + "done", Move("done", "node-1", "node-2", NOW - 100, 0.1, NOW - 50, "succeeded").to_dict())
    d.state_put(MOVES_PREFIX + "lost", Move("lost", "node-2", "node-3", NOW - 100, 0.1).to_dict())  # crashed run
    d.state_put(MOVES_PREFIX + "live", Move("live", "node-3", "node-1", NOW - 10, 0.1).to_dict())
    by_hand = Move("manual", "node-2", "node-1", NOW, result="running")
    state = read_state(d, [Move("live", "node-3", "node-1", NOW), by_hand], s, NOW)
    got = {m.tenant: m for m in state.moves}
    assert "old" not in got and d.state_get(MOVES_PREFIX + "old") is None  # older than every cool-down: pruned
    assert got["done"].result == "succeeded"
    assert got["lost"].result == "unknown" and got["lost"].finished_at == NOW  # no agent runs it: settled
    assert got["live"].result == "running" and got["manual"].result == "running"


class _Agent:
    """Stands in for an agent's HTTP API: the target's tenant-stats, the source's /set route."""

    def __init__(self) -> None:
        self.latency_s = 0.01
        self.sets: list[dict] = []

    def request(self, method, path, body=None, query=None, timeout_s=None):
        if path == "/v1/tenant-stats":
            return {"tenants": [{"tenant": "x", "latency_s": self.latency_s, "transactions_per_s": 50.0}]}
        self.sets.append(body)
        return {}


def test_target_guard_pauses_the_copy_while_the_target_is_above_the_sla():
    from slacker.rebalance.runner import TargetGuard

    target, source, events = _Agent(), _Agent(), []
    guard = TargetGuard(target, source, "m1", 0.050, events, lambda msg: None)
    copying = {"active": True, "phase": "snapshot"}
    guard.check(copying)
    assert source.sets == []
    target.latency_s = 0.080
    guard.check(copying)
    guard.check(copying)  # still above: paused once, not twice
    assert source.sets == [{"pause": True}]
    target.latency_s = 0.030
    guard.check(copying)
    assert source.sets == [{"pause": True}, {"resume": True}]
    # Past the copy the guard lets the migration be.
    target.latency_s = 0.5
    guard.check({"active": True, "phase": "delta"})
    assert len(source.sets) == 2 and [e["action"] for e in events] == ["paused", "resumed"]
