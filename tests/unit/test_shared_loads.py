"""A shared tenant's own load (slacker/agent/tenant_stats.py, SharedLoads): its transactions from the shared
server's per-user summary, and its share of the server's CPU in proportion to its own sessions' CPU, read once
for every tenant of the server. Pure logic: the server's counters are scripted, its CPU is the test process's."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slacker.agent import tenant_stats
from slacker.agent.tenant_stats import SharedLoads, TenantStats, apportion, usage_by_tenant
from slacker.mariadb import shared as sql


def test_accounts_add_up_per_tenant_and_the_server_s_own_are_left_out():
    by_user = {"t42_app": (1.0, 10.0, 0.5), "t42_ro": (0.5, 5.0, 0.25), "t43_app": (2.0, 4.0, 1.0),
               "slacker_repl": (9.0, 9.0, 9.0), "root": (1.0, 1.0, 1.0), None: (3.0, 3.0, 3.0),
               "t99_app": (7.0, 7.0, 7.0)}
    assert usage_by_tenant(by_user, ["t42", "t43", "t44"]) == {"t42": (1.5, 15.0, 0.75), "t43": (2.0, 4.0, 1.0)}


@given(st.floats(0, 8), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.floats(-1, 5), min_size=1))
def test_the_shares_add_up_to_the_server_s_cpu_and_follow_each_tenant_s_own(server, own):
    share = apportion(server, own)
    assert sum(share.values()) == pytest.approx(server, abs=1e-9)
    mine = {t: max(0.0, x) for t, x in own.items()}
    if sum(mine.values()) > 0:
        for a in own:
            for b in own:
                if mine[a] > mine[b]:
                    assert share[a] >= share[b]
    assert apportion(None, own) == {t: None for t in own}


class FakeServer:
    def __init__(self, root):
        self.datadir = root
        self.running = True
        self.the_pid = os.getpid()

    def get(self):
        return self

    def is_running(self):
        return self.running

    def pid(self):
        return self.the_pid

    def admin_connect(self, timeout_s=2):
        return SimpleNamespace(close=lambda: None)


class FakeManager:
    def __init__(self, root, ids):
        self.server = FakeServer(root)
        self.ids = list(ids)
        self.fenced = set()

    def list(self):
        return [SimpleNamespace(id=t, fenced=t in self.fenced) for t in self.ids]


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    counters = {}
    monkeypatch.setattr(sql, "usage_by_user",  # as the server: the CPU only when asked
                        lambda conn, cpu=True: {u: (a, b, c if cpu else 0.0) for u, (a, b, c) in counters.items()})
    monkeypatch.setattr(sql, "usage_fingerprint",  # as the server: the tenants' accounts' rows summed
                        lambda conn: (lambda rows: (len(rows), sum(r[1] for r in rows), sum(r[0] for r in rows)))(
                            [v for u, v in counters.items() if "_" in u and not u.startswith("slacker_")]))
    cpu = [100.0]
    monkeypatch.setattr(tenant_stats, "process_cpu_s", lambda pid: cpu[0])
    for t in ("t1", "t2", "t3"):
        (tmp_path / t).mkdir()
        (tmp_path / t / "a.ibd").write_bytes(b"x" * (1000 * int(t[1])))
    clock = [0.0]
    mgr = FakeManager(tmp_path, ["t1", "t2", "t3"])
    loads = SharedLoads(mgr, window_s=10, step_s=2, interval_s=6, clock=lambda: clock[0], wall=lambda: 1e9 + clock[0])
    return SimpleNamespace(counters=counters, cpu=cpu, clock=clock, mgr=mgr, loads=loads)


def step(sc, dt, busy=frozenset(), **per_tenant):
    """Advance the clock; each tenant's (transactions, latency each, own CPU s) added since the last step."""
    sc.clock[0] += dt
    for tid, (n, lat, cpu) in per_tenant.items():
        s, c, u = sc.counters.get(f"{tid}_app", (0.0, 0.0, 0.0))
        sc.counters[f"{tid}_app"] = (s + n * lat, c + n, u + cpu)
    return sc.loads.tick(set(busy))


def test_each_tenant_gets_its_own_latency_and_rate_and_its_share_of_the_server(scripted):
    sc = scripted
    sc.counters.update({"t1_app": (0, 0, 0), "t2_app": (0, 0, 0), "t3_app": (0, 0, 0), "slacker_repl": (0, 0, 5)})
    stats, samples, present = step(sc, 0)
    assert present == {"t1", "t2", "t3"} and samples == {}
    for _ in range(3):  # 2 s ticks: t1 busy (300 tx/s at 5 ms, 0.6 CPU s/s), t2 light, t3 idle
        sc.cpu[0] += 2 * 0.9
        stats, samples, _ = step(sc, 2, t1=(600, 0.005, 1.2), t2=(20, 0.002, 0.2))
    assert stats["t1"].latency_s == pytest.approx(0.005) and stats["t1"].transactions_per_s == pytest.approx(300)
    assert stats["t2"].latency_s == pytest.approx(0.002) and stats["t3"].latency_s is None
    assert {s.kind for s in stats.values()} == {"shared"}
    assert set(samples) == {"t1", "t2", "t3"}  # the interval (6 s) closed
    s1, s2, s3 = samples["t1"], samples["t2"], samples["t3"]
    assert s1.cpu_s_per_s == pytest.approx(0.9 * 0.6 / 0.7, abs=1e-3)  # the server's 0.9 split 6:1:0
    assert s2.cpu_s_per_s == pytest.approx(0.9 * 0.1 / 0.7, abs=1e-3) and s3.cpu_s_per_s == 0.0
    assert s1.own_cpu_s_per_s == pytest.approx(0.6) and s1.transactions_per_s == pytest.approx(300)
    assert (s1.data_bytes, s2.data_bytes, s3.data_bytes) == (1000, 2000, 3000)
    assert all(s.ok for s in samples.values())


def test_a_tenant_being_moved_has_no_sample_but_its_sessions_still_count_in_the_split(scripted):
    sc = scripted
    sc.counters.update({"t1_app": (0, 0, 0), "t2_app": (0, 0, 0), "t3_app": (0, 0, 0)})
    step(sc, 0)
    for _ in range(3):
        sc.cpu[0] += 2 * 1.0
        stats, samples, _ = step(sc, 2, busy={"t1"}, t1=(100, 0.01, 1.0), t2=(100, 0.01, 1.0))
    assert "t1" not in stats and "t1" not in samples
    assert samples["t2"].cpu_s_per_s == pytest.approx(0.5, abs=1e-3)  # not the whole server's


def test_a_restarted_server_starts_its_window_and_interval_again(scripted):
    sc = scripted
    sc.counters.update({"t1_app": (0, 0, 0)})
    step(sc, 0)
    step(sc, 2, t1=(100, 0.01, 0.5))
    sc.counters.clear()
    sc.counters.update({"t1_app": (0.0, 0.0, 0.0)})  # counters from zero: a new process
    sc.mgr.server.the_pid += 1
    stats, samples, _ = step(sc, 2)
    assert stats["t1"].latency_s is None and stats["t1"].transactions_per_s == 0.0 and samples == {}
    stats, _, _ = step(sc, 2, t1=(10, 0.004, 0.1))  # read twice a window (10 s): the last read's figures
    assert stats["t1"].latency_s is None
    stats, _, _ = step(sc, 2, t1=(10, 0.004, 0.1))
    assert stats["t1"].latency_s == pytest.approx(0.004) and stats["t1"].transactions_per_s == pytest.approx(5)


def test_a_failed_read_fails_every_tenant_s_sample_and_a_stopped_server_gives_none(scripted, monkeypatch):
    sc = scripted

    def broken(conn, cpu=True):
        raise RuntimeError("Lost connection to server during query\nmore")
    monkeypatch.setattr(sql, "usage_by_user", broken)
    stats, samples, present = step(sc, 2)
    assert {t: (s.ok, s.error) for t, s in stats.items()} == {
        t: (False, "Lost connection to server during query") for t in ("t1", "t2", "t3")}
    assert [r["error"] for r in sc.loads.counters(set(), {"t2"})] == ["Lost connection to server during query"] * 2
    sc.mgr.server.running = False
    assert step(sc, 2) == ({}, {}, {"t1", "t2", "t3"}) and sc.loads.counters(set(), set()) == []


def test_the_node_s_stats_hold_both_kinds_and_the_target_guard_reads_the_shared_tenants(scripted):
    sc = scripted
    whole = SimpleNamespace(list=lambda: [])
    stats = TenantStats("node-1", whole, set(), window_s=10, step_s=2, interval_s=6, clock=lambda: sc.clock[0])
    stats.shared = sc.loads
    sc.counters.update({"t1_app": (0.0, 0.0, 0.0), "t2_app": (0.0, 0.0, 0.0)})
    stats.tick()
    for _ in range(3):
        sc.cpu[0] += 2
        sc.clock[0] += 2
        s, c, u = sc.counters["t1_app"]
        sc.counters["t1_app"] = (s + 1.0, c + 100, u + 1.0)
        stats.tick()
    assert {t: s.kind for t, s in stats.snapshot().items()} == {"t1": "shared", "t2": "shared", "t3": "shared"}
    assert [len(h) for h in stats.history().values()] == [1, 1, 1]
    assert stats.history()["t1"][0].cpu_s_per_s == pytest.approx(1.0, abs=1e-3)
    assert stats.cpu_totals()["t1"] == pytest.approx(3.0)
    rows = {r["tenant"]: r for r in stats.counters(exclude={"t3"})}
    assert set(rows) == {"t1", "t2"} and rows["t1"]["count"] == 300 and rows["t1"]["sum_s"] == pytest.approx(3.0)
    sc.mgr.ids.remove("t2")  # deleted: its history goes
    stats.tick()
    assert set(stats.history()) == {"t1", "t3"}


def test_an_idle_node_reads_its_accounts_rows_again_only_when_one_of_them_counted_something(scripted, monkeypatch):
    """A node of a thousand idle tenants: one row (the fingerprint) a read instead of a row per account; one
    tenant's transactions, or an account dropped, make the next read a full one, and the figures stay right."""
    sc = scripted
    full = []
    read = sql.usage_by_user
    monkeypatch.setattr(sql, "usage_by_user", lambda conn, cpu=True: full.append(cpu) or read(conn, cpu))
    sc.counters.update({"t1_app": (0.5, 100, 0), "t2_app": (0.2, 50, 0), "t3_app": (0, 0, 0)})
    step(sc, 0)
    for _ in range(4):
        step(sc, 6)  # idle: every tick reads, none reads the accounts whole but where an interval closes (CPU)
    assert full == [True] * 5
    full.clear()
    sc.loads.interval_s = 1e9  # no interval closes from here: the CPU is not read
    step(sc, 6)
    step(sc, 6)
    assert full == []
    stats, _, _ = step(sc, 6, t2=(30, 0.004, 0.0))  # t2 counted something: read whole, and its latency is right
    assert full == [False] and stats["t2"].latency_s == pytest.approx(0.004)
    del sc.counters["t3_app"]  # an account dropped (zeros before and after: the same figures)
    step(sc, 6)
    assert full == [False, False]


def test_a_tenant_s_files_are_walked_where_it_committed_and_an_idle_one_s_only_every_few_intervals(scripted):
    sc = scripted
    sc.counters.update({"t1_app": (0, 0, 0), "t2_app": (0, 0, 0), "t3_app": (0, 0, 0)})
    step(sc, 0)
    _, samples, _ = step(sc, 6)
    assert samples["t1"].data_bytes == 1000 and samples["t3"].data_bytes == 3000
    for t in ("t1", "t3"):
        (sc.mgr.server.datadir / t / "b.ibd").write_bytes(b"y" * 500)
    _, samples, _ = step(sc, 6, t1=(10, 0.001, 0.0))
    assert samples["t1"].data_bytes == 1500  # it committed: walked again
    assert samples["t3"].data_bytes == 3000  # idle: the last walk's figure stands
    for _ in range(tenant_stats.SIZE_EVERY_INTERVALS):
        _, samples, _ = step(sc, 6)
    assert samples["t3"].data_bytes == 3500  # and is walked again within SIZE_EVERY_INTERVALS intervals


def test_a_tenant_s_size_is_in_its_window_row_before_its_first_interval_closes(scripted):
    # A drain plans tenants that arrived a moment ago: what a move of each copies is known from its first row.
    sc = scripted
    stats, samples, _ = step(sc, 0)
    assert samples == {}
    assert {t: s.data_bytes for t, s in stats.items()} == {"t1": 1000, "t2": 2000, "t3": 3000}
