"""The SQLite directory against the shared directory contract, plus the lock's invariant under any schedule."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from slacker.directory import SQLiteStore
from slacker.errors import Conflict
from tests.directory_contract import *  # noqa: F401,F403  (the contract's tests run here on SQLite)


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "directory.sqlite")
    yield s
    s.close()


def test_lock_survives_a_restart_of_the_store_and_still_expires(tmp_path):
    now = [1000.0]
    s = SQLiteStore(tmp_path / "d.sqlite", clock=lambda: now[0])
    s.acquire_lock("rebalance", "a", 60)
    s.close()
    s = SQLiteStore(tmp_path / "d.sqlite", clock=lambda: now[0])
    assert s.lock_info("rebalance").holder == "a"
    now[0] += 61
    assert s.lock_info("rebalance") is None
    assert s.acquire_lock("rebalance", "b", 60).holder == "b"
    s.close()


HOLDERS = ["a", "b", "c"]


class LockMachine(RuleBasedStateMachine):
    """Any interleaving of acquire/refresh/release by three holders and the passing of time:
    at most one holder at any time, and the store agrees with a simple model of leases."""

    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="sl-lock-")
        self.now = 0.0
        self.store = SQLiteStore(f"{self.dir}/d.sqlite", clock=lambda: self.now)
        self.model: tuple[str, float, float] | None = None  # holder, expires_at, ttl

    def _model_holder(self):
        if self.model is not None and self.model[1] <= self.now:
            self.model = None
        return self.model[0] if self.model else None

    @rule(h=st.sampled_from(HOLDERS), ttl=st.floats(1, 30))
    def acquire(self, h, ttl):
        cur = self._model_holder()
        try:
            info = self.store.acquire_lock("l", h, ttl)
        except Conflict:
            assert cur is not None and cur != h
            return
        assert cur in (None, h)
        assert info.holder == h
        self.model = (h, self.now + ttl, ttl)

    @rule(h=st.sampled_from(HOLDERS))
    def refresh(self, h):
        cur = self._model_holder()
        try:
            self.store.refresh_lock("l", h)
        except Conflict:
            assert cur != h
            return
        assert cur == h
        self.model = (h, self.now + self.model[2], self.model[2])

    @rule(h=st.sampled_from(HOLDERS))
    def release(self, h):
        cur = self._model_holder()
        released = self.store.release_lock("l", h)
        assert released == (cur == h)
        if released:
            self.model = None

    @rule(dt=st.floats(0, 20))
    def time_passes(self, dt):
        self.now += dt

    @invariant()
    def one_holder_at_most_and_it_is_the_models(self):
        info = self.store.lock_info("l")
        expected = self._model_holder()
        assert (info.holder if info else None) == expected
        if info:
            assert 0 < info.expires_in_s <= info.ttl_s

    def teardown(self):
        import shutil
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestLockMachine = LockMachine.TestCase
TestLockMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


def test_a_directory_made_before_tenant_kinds_reads_its_tenants_as_whole_servers(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE ownership (tenant TEXT PRIMARY KEY, node TEXT NOT NULL, host TEXT NOT NULL, "
               "port INTEGER NOT NULL, epoch INTEGER NOT NULL, updated_at REAL NOT NULL)")
    db.execute("INSERT INTO ownership VALUES ('t1', 'node-1', '127.0.0.2', 20001, 3, 1.0)")
    db.commit()
    db.close()
    s = SQLiteStore(path)
    try:
        assert (s.lookup("t1").kind, s.lookup("t1").epoch) == ("server", 3)
        assert s.register("t2", "node-1", "127.0.0.2", 20002, kind="shared").kind == "shared"
    finally:
        s.close()
