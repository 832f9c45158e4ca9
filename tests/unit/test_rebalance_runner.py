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


class _Node:
    """An agent's API as a pass uses it: the load history, migrations started and (at once) succeeded, the
    budget; `started` records every move it was asked to start and when."""

    def __init__(self, name, tenants: dict, started: list) -> None:
        self.name, self.tenants, self.started, self.migs = name, tenants, started, {}

    def request(self, method, path, body=None, query=None, timeout_s=None):
        import time

        if path == "/v1/tenant-stats":
            hist = {t: [{"t": time.time() - 60 * (2 - i), "cpu_s_per_s": load, "transactions_per_s": 10.0,
                         "latency_s": 0.005, "data_bytes": 20_000_000} for i in range(3)]
                    for t, load in self.tenants.items()}
            return {"tenants": [], "history": hist}
        if path == "/v1/migrations" and method == "GET":
            return {"migrations": [m for m in self.migs.values() if m["active"]]}
        if path == "/v1/migrations" and method == "POST":
            mid = f"{body['tenant']}-m"
            self.started.append((body["tenant"], self.name, body["target"], time.monotonic()))
            self.migs[mid] = {"id": mid, "tenant": body["tenant"], "target": body["target"], "active": True,
                              "phase": "snapshot", "polls": 0}
            return dict(self.migs[mid])
        if path == "/v1/budget":
            return {"active": False, "copying": 0}
        if path.startswith("/v1/migrations/"):
            m = self.migs[path.split("/")[3]]
            m["polls"] += 1
            if m["polls"] >= 2:  # both are still running when the other is polled: they overlap
                m.update(active=False, result="succeeded", phase="done")
            return dict(m)
        return {}


def test_a_parallel_pass_starts_its_moves_at_once_on_disjoint_pairs_and_records_each(tmp_path):
    d = SQLiteStore(tmp_path / "dir.sqlite")
    started: list = []
    layout = {"node-1": {"a": 0.20, "b": 0.15, "c": 0.10}, "node-2": {"a2": 0.20, "b2": 0.15, "c2": 0.10},
              "node-3": {}, "node-4": {"d": 0.01}}
    agents = {n: _Node(n, ts, started) for n, ts in layout.items()}
    for i, (t, n) in enumerate((t, n) for n, ts in layout.items() for t in ts):
        d.register(t, n, "127.0.0.1", 3306 + i)
    res = run(agents, d, Settings(), RunOptions(execute=True, max_moves=4, poll_s=0.01, holder="h:1"))
    assert res.executed and res.result == "succeeded" and len(res.more) == 1, res.to_dict()
    assert res.more[0]["result"] == "succeeded"
    pairs = [(s, t) for _, s, t, _ in started]
    assert len(pairs) == 2 and len({x for p in pairs for x in p}) == 4  # no node in two moves
    assert max(x[3] for x in started) - min(x[3] for x in started) < 1.0  # started together, not in a row
    recorded = d.state_list(MOVES_PREFIX)
    assert {v["tenant"]: v["result"] for v in recorded.values()} == {tn: "succeeded" for tn, _, _, _ in started}
