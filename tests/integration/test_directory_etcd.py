"""The directory contract against a real three-member etcd cluster, plus what only etcd has:
compaction under a watch, a member SIGKILLed, and no quorum failing closed."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from slacker import local_etcd
from slacker.directory import EtcdStore
from slacker.directory.etcd import _b64
from slacker.errors import Conflict, DirectoryUnavailable
from tests.directory_contract import *  # noqa: F401,F403  (the contract's tests run here on etcd)

from .conftest import _free_port  # noqa: E402

pytestmark = [pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed"),
              pytest.mark.xdist_group("etcd_directory")]  # one worker starts the module's etcd


def start_etcd(tmp: Path) -> tuple[Path, list[str]]:
    """Three members on addresses of a loopback block of their own."""
    block = 10 + os.getpid() % 90
    hosts = [f"127.1.{block}.{i}" for i in (2, 3, 4)]
    client = _free_port(hosts[0])
    peer = _free_port(hosts[1])
    while peer == client:
        peer = _free_port(hosts[1])
    etcd_dir = tmp / "etcd"
    return etcd_dir, local_etcd.start(etcd_dir, local_etcd.plan(hosts, client, peer))


@pytest.fixture(scope="module")
def etcd():
    tmp = Path(tempfile.mkdtemp(prefix="sl-etcd-", dir="/tmp"))
    etcd_dir, endpoints = start_etcd(tmp)
    yield etcd_dir, endpoints
    local_etcd.stop(etcd_dir)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def store(etcd):
    """A fresh, empty directory: its own key prefix on the shared cluster."""
    return EtcdStore(etcd[1], prefix=f"/test-{uuid.uuid4().hex[:8]}")


def test_health_names_members_and_leader(etcd, store):
    h = store.health()
    assert h["backend"] == "etcd" and h["healthy"] is True
    assert [m["name"] for m in h["members"]] == ["etcd-1", "etcd-2", "etcd-3"]
    assert h["members_up"] == 3 and h["leader"] in {"etcd-1", "etcd-2", "etcd-3"}
    assert sum(1 for m in h["members"] if m["leader"]) == 1


def test_changes_after_compaction_are_a_snapshot_with_the_latest_owner(store):
    """A follower whose revision was compacted away gets a snapshot (reset) naming the latest owner,
    and follows on from there."""
    store.register("t1", "node-1", "127.0.0.2", 20001)
    store.register("t2", "node-1", "127.0.0.2", 20002)
    stale = store.changes(None, 0).revision
    for i in range(3):
        store.compare_and_set("t1", i + 1, f"node-{i + 2}", "127.0.0.3", 20001)
    store.remove("t2")
    head = int(store.gw.call("/kv/range", {"key": _b64("/")}, idempotent=True)["header"]["revision"])
    store.gw.call("/kv/compaction", {"revision": str(head), "physical": True}, idempotent=True)
    ch = store.changes(stale, 5)
    assert ch.reset and [(o.tenant, o.epoch, o.node) for o in ch.owners] == [("t1", 4, "node-4")]
    store.compare_and_set("t1", 4, "node-1", "127.0.0.2", 20001)
    nxt = store.changes(ch.revision, 5)
    assert not nxt.reset and [(o.tenant, o.epoch) for o in nxt.owners] == [("t1", 5)]


def test_watch_resumes_after_compaction(store):
    """A watch whose start revision was compacted away re-reads and still reports the latest epoch."""
    store.register("t1", "node-1", "127.0.0.2", 20001)
    _, stale = store._read(store._key("tenants", "t1"))
    for i in range(3):
        store.compare_and_set("t1", i + 1, f"node-{i + 2}", "127.0.0.3", 20001)
    head = int(store.gw.call("/kv/range", {"key": _b64("/")}, idempotent=True)["header"]["revision"])
    store.gw.call("/kv/compaction", {"revision": str(head), "physical": True}, idempotent=True)
    real_read = store._read
    calls = []

    def read_once_stale(key):  # the first read happens "before" the compaction: its revision is gone
        kv, rev = real_read(key)
        calls.append(rev)
        if len(calls) == 1:
            own = store._ownership(kv)
            kv = dict(kv, value=_b64(__import__("json").dumps(dict(own.to_dict(), epoch=1))))
            return kv, stale
        return kv, rev

    store._read = read_once_stale
    own = store.watch("t1", 1, timeout_s=10)
    assert own is not None and own.epoch == 4 and own.node == "node-4"
    assert len(calls) >= 2  # it re-read after etcd said "compacted"


def test_one_member_killed_the_directory_still_answers(etcd, tmp_path):
    """SIGKILL one member (the leader if we can find it): lookups, CAS, watch and locks go on."""
    etcd_dir, endpoints = etcd
    store = EtcdStore(endpoints, prefix=f"/test-{uuid.uuid4().hex[:8]}")
    store.register("t1", "node-1", "127.0.0.2", 20001)
    leader = store.health()["leader"]
    pid = local_etcd.member_pid(etcd_dir, leader)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    try:
        t0 = time.monotonic()
        # A write racing the election may report an unknown outcome; the caller reads and retries.
        deadline = time.monotonic() + 30
        while True:
            try:
                own = store.compare_and_set("t1", 1, "node-2", "127.0.0.3", 20001)
                break
            except DirectoryUnavailable:
                assert time.monotonic() < deadline
                if store.lookup("t1").epoch == 2:
                    own = store.lookup("t1")
                    break
                time.sleep(0.2)
        failover_s = time.monotonic() - t0
        assert own.epoch == 2 and store.lookup("t1").node == "node-2"
        assert store.watch("t1", 1, timeout_s=5).epoch == 2
        assert store.acquire_lock("rebalance", "a", 10).holder == "a"
        with pytest.raises(Conflict):
            store.acquire_lock("rebalance", "b", 10)
        h = store.health()
        assert h["healthy"] is True and h["members_up"] == 2 and h["leader"] != leader
        print(f"failover after SIGKILL of leader {leader}: writes back after {failover_s:.2f}s")
    finally:
        local_etcd.start(etcd_dir, [])  # bring the member back for the tests that follow
    assert store.health()["members_up"] == 3


def test_no_quorum_fails_closed(tmp_path):
    """Two of three members down: reads and the compare-and-set fail (no stale answer, no second owner);
    when the quorum returns, the directory answers with what it had."""
    etcd_dir, endpoints = start_etcd(tmp_path)
    try:
        store = EtcdStore(endpoints, prefix="/q", timeout_s=2.0)
        store.register("t1", "node-1", "127.0.0.2", 20001)
        for m in local_etcd.members_of(etcd_dir)[1:]:
            os.kill(local_etcd.member_pid(etcd_dir, m.name), signal.SIGKILL)
        with pytest.raises(DirectoryUnavailable):
            store.lookup("t1")
        with pytest.raises(DirectoryUnavailable) as err:
            store.compare_and_set("t1", 1, "node-2", "127.0.0.3", 20001)
        assert "etcd" in str(err.value)
        assert store.health()["healthy"] is False
        local_etcd.start(etcd_dir, [])
        own = store.lookup("t1")
        # The write that timed out was never committed: without a quorum nothing is.
        assert own.epoch == 1 and own.node == "node-1"
    finally:
        local_etcd.stop(etcd_dir)


def test_lock_holder_in_another_process_view(etcd):
    """Two stores (two hosts' crons) on the same etcd: the lock is one lock."""
    prefix = f"/test-{uuid.uuid4().hex[:8]}"
    a, b = EtcdStore(etcd[1], prefix=prefix), EtcdStore(list(reversed(etcd[1])), prefix=prefix)
    a.acquire_lock("rebalance", "cron-a", 5)
    with pytest.raises(Conflict, match="held by cron-a"):
        b.acquire_lock("rebalance", "cron-b", 5)
    assert b.lock_info("rebalance").holder == "cron-a"
    # b may refresh on a's behalf only by naming a: the holder id is the capability.
    assert b.refresh_lock("rebalance", "cron-a").holder == "cron-a"
    assert a.release_lock("rebalance", "cron-a")
    assert b.acquire_lock("rebalance", "cron-b", 5).holder == "cron-b"


def test_a_snapshot_reads_every_tenant_in_pages_at_one_revision(store):
    for i in range(7):
        store.register(f"p{i}", "node-1", "127.0.0.2", 21000 + i)
    store.SNAPSHOT_PAGE = 3
    snap = store.changes(None, 0)
    assert snap.reset and [o.tenant for o in snap.owners] == [f"p{i}" for i in range(7)]
    assert not store.changes(snap.revision, 0.3).owners


def test_owners_reads_only_the_tenants_asked_for_in_txns_of_point_reads(store, monkeypatch):
    import slacker.directory.etcd as etcd_store

    for i in range(7):
        store.register(f"o{i}", "node-1" if i % 2 else "node-2", "127.0.0.2", 22000 + i)
    monkeypatch.setattr(etcd_store, "OWNERS_PER_TXN", 3)
    calls = []
    real = store.gw.call
    monkeypatch.setattr(store.gw, "call", lambda path, *a, **k: calls.append(path) or real(path, *a, **k))
    got = store.owners(["o1", "o2", "o5", "o6", "gone"])
    assert {t: o.node for t, o in got.items()} == {"o1": "node-1", "o2": "node-2", "o5": "node-1", "o6": "node-2"}
    assert calls == ["/kv/txn", "/kv/txn"]  # 5 keys in txns of 3: never a range over the fleet
    assert store.owners([]) == {}
