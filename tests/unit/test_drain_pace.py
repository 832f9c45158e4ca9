"""A drain of many small tenants is paced by its moves, not by its own loop: with moves that end at once, ten
tenants drain in well under a second each (the loop looked once a second, and each start read every agent's
history and every ended migration's document: a hundred small shared tenants took as long several at a time as
one at a time)."""

from __future__ import annotations

import itertools
import time

from slacker.directory import SQLiteStore
from slacker.rebalance.drain import DrainOptions, drain
from slacker.rebalance.planner import Settings

TENANTS = [f"s{i}" for i in range(10)]


class Fleet:
    """Three agents' HTTP APIs over one real directory: a started move ends at once and flips the owner."""

    def __init__(self, directory) -> None:
        self.directory = directory
        self.ids = itertools.count(1)
        self.docs: dict[str, dict] = {}
        self.asked: list[tuple[str, str, dict | None]] = []

    def agent(self, name: str):
        fleet = self

        class Agent:
            def request(self, method, path, body=None, query=None, timeout_s=None):
                fleet.asked.append((method, path, query))
                return fleet.answer(name, method, path, body)
        return Agent()

    def answer(self, name, method, path, body):
        if path == "/v1/tenant-stats":
            mine = [o.tenant for o in self.directory.list() if o.node == name]
            return {"tenants": [{"tenant": t, "latency_s": 0.001, "transactions_per_s": 5.0, "window_s": 10}
                                for t in mine],
                    "history": {t: [{"t": time.time(), "cpu_s_per_s": 0.001, "transactions_per_s": 5.0,
                                     "latency_s": 0.001, "data_bytes": 1000, "kind": "shared"}] for t in mine}}
        if path in ("/v1/kept",):
            return {"kept": []}
        if path == "/v1/budget":
            return {"active": False, "copying": 0}
        if path == "/v1/migrations" and method == "GET":
            return {"migrations": [d for d in self.docs.values() if d["active"]]}
        if path == "/v1/migrations" and method == "POST":
            mid = f"m{next(self.ids)}"
            own = self.directory.lookup(body["tenant"])
            self.directory.compare_and_set(body["tenant"], own.epoch, body["target"], "127.0.0.9", own.port)
            self.docs[mid] = {"id": mid, "tenant": body["tenant"], "target": body["target"], "active": True,
                              "phase": "preflight", "result": None}
            return dict(self.docs[mid])
        if path.startswith("/v1/migrations/") and method == "GET":
            doc = self.docs[path.rsplit("/", 1)[1]]
            doc.update(active=False, phase="done", result="succeeded", duration_s=0.01, freeze_ms=5.0)
            return dict(doc)
        raise AssertionError(f"unexpected {method} {path}")


def _drained(tmp_path, fleet_kind, max_parallel):
    """node-1's shared TENANTS drained over `fleet_kind`'s agents: (the directory, the fleet, result, seconds)."""
    d = SQLiteStore(tmp_path / "dir.sqlite")
    for t in TENANTS:
        d.register(t, "node-1", "127.0.0.2", 20010, kind="shared")
    fleet = fleet_kind(d)
    agents = {n: fleet.agent(n) for n in ("node-1", "node-2", "node-3")}
    t0 = time.monotonic()
    res = drain(agents, d, "node-1", Settings(sla_s=0.05), DrainOptions(max_parallel=max_parallel, holder="test:1"))
    took = time.monotonic() - t0
    assert res.outcome == "drained", (res.outcome, res.reason)
    return d, fleet, res, took


def test_ten_small_moves_drain_at_the_pace_of_the_moves(tmp_path):
    d, fleet, res, took = _drained(tmp_path, Fleet, 1)
    assert {d.lookup(t).node for t in TENANTS} <= {"node-2", "node-3"}
    assert took < 0.6 * len(TENANTS), f"{took:.1f}s for {len(TENANTS)} moves that end at once"
    # Only the running migrations are asked for, and each agent's history is read about once a second, not per start.
    assert all(q == {"active": 1} for m, p, q in fleet.asked if (m, p) == ("GET", "/v1/migrations"))
    history_reads = sum(1 for _, p, q in fleet.asked if p == "/v1/tenant-stats" and not q)
    assert history_reads <= 3 * (took / DrainOptions().poll_s + 2), history_reads


class SlowFleet(Fleet):
    """Moves that take MOVE_S each, followed by long polls as the agent answers them; no history yet (the
    tenants arrived a moment ago): their sizes only in the window's rows."""

    MOVE_S = 0.3

    def __init__(self, directory) -> None:
        super().__init__(directory)
        self.spans: dict[str, list[float]] = {}

    def agent(self, name: str):
        fleet = self

        class Agent:
            def request(self, method, path, body=None, query=None, timeout_s=None):
                return fleet.answer(name, method, path, body, query or {})
        return Agent()

    def answer(self, name, method, path, body, query=None):
        if path == "/v1/tenant-stats":
            mine = [o.tenant for o in self.directory.list() if o.node == name]
            return {"tenants": [{"tenant": t, "latency_s": 0.001, "transactions_per_s": 5.0, "window_s": 10,
                                 "data_bytes": 100_000, "kind": "shared"} for t in mine], "history": {}}
        if path.startswith("/v1/migrations/") and method == "GET":
            mid = path.rsplit("/", 1)[1]
            start = self.spans[mid][0]
            wait = float((query or {}).get("wait") or 0)
            time.sleep(max(0.0, min(wait, start + self.MOVE_S - time.monotonic())))
            doc = self.docs[mid]
            if time.monotonic() >= start + self.MOVE_S and doc["active"]:
                self.spans[mid].append(time.monotonic())
                doc.update(active=False, phase="done", result="succeeded", duration_s=self.MOVE_S, freeze_ms=5.0)
            return dict(doc)
        got = super().answer(name, method, path, body)
        if path == "/v1/migrations" and method == "POST":
            self.spans[got["id"]] = [time.monotonic()]
        return got


def test_small_tenants_with_no_history_yet_move_one_per_target_at_once_each_next_as_one_ends(tmp_path):
    _, fleet, res, took = _drained(tmp_path, SlowFleet, 4)
    assert all(m.data_bytes == 100_000 for m in res.tenants.values())  # the size from the rows
    spans = sorted(fleet.spans.values())
    overlaps = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
    assert overlaps >= len(spans) // 2, spans  # two targets: two copies at once (one each), not one after another
    one_after_another = len(TENANTS) * SlowFleet.MOVE_S
    assert took < 0.75 * one_after_another, f"{took:.2f}s for {len(TENANTS)} moves of {SlowFleet.MOVE_S}s"
