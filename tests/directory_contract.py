"""The directory contract, as tests any DirectoryStore must pass.

A test module imports these functions and provides a `store` fixture (a fresh,
empty store); the same tests then run against SQLite and against real etcd.
"""

from __future__ import annotations

import threading
import time

import pytest

from slacker.errors import Conflict, InvalidInput, NotFound


def test_register_lookup_list_remove(store):
    a = store.register("t1", "node-1", "127.0.0.2", 20001)
    assert (a.node, a.epoch, a.port) == ("node-1", 1, 20001)
    store.register("t2", "node-2", "127.0.0.3", 20002)
    assert store.lookup("t1") == a
    assert [o.tenant for o in store.list()] == ["t1", "t2"]
    with pytest.raises(Conflict, match="already exists"):
        store.register("t1", "node-2", "127.0.0.3", 20003)
    with pytest.raises(Conflict, match="port 20002 is taken"):
        store.register("t3", "node-2", "127.0.0.3", 20002)
    with pytest.raises(Conflict):
        store.remove("t1", expected_epoch=7)
    store.remove("t1", expected_epoch=1)
    with pytest.raises(NotFound):
        store.lookup("t1")
    with pytest.raises(NotFound):
        store.remove("t1")
    store.register("t3", "node-1", "127.0.0.2", 20001)  # its port is free again


def test_a_record_keeps_its_kind_and_shared_tenants_share_their_nodes_port(store):
    """A record's kind (none given: a whole server) is kept by a compare-and-set; a node's shared tenants
    share its shared server's port, which no whole server and no other node's shared tenant may take, and
    which the node keeps when its last shared tenant is removed."""
    assert store.register("w1", "node-1", "127.0.0.2", 20001).kind == "server"
    a = store.register("s1", "node-1", "127.0.0.2", 20010, kind="shared")
    b = store.register("s2", "node-1", "127.0.0.2", 20010, kind="shared")
    assert (a.kind, b.kind, b.port) == ("shared", "shared", 20010)
    assert store.lookup("s2") == b and {o.tenant: o.kind for o in store.list()} == {
        "w1": "server", "s1": "shared", "s2": "shared"}
    with pytest.raises(Conflict, match="port 20010 is taken"):
        store.register("w2", "node-1", "127.0.0.2", 20010)
    with pytest.raises(Conflict, match="port 20010 is taken"):
        store.register("s3", "node-2", "127.0.0.3", 20010, kind="shared")
    with pytest.raises(Conflict, match="port 20001 is taken"):
        store.register("s3", "node-1", "127.0.0.2", 20001, kind="shared")
    with pytest.raises(InvalidInput, match="unknown tenant kind"):
        store.register("s3", "node-1", "127.0.0.2", 20010, kind="database")
    assert store.compare_and_set("s1", 1, "node-1", "127.0.0.2", 20010).kind == "shared"
    store.remove("s1")
    store.remove("s2")
    with pytest.raises(Conflict, match="port 20010 is taken"):
        store.register("w2", "node-2", "127.0.0.3", 20010)
    assert store.register("s4", "node-1", "127.0.0.2", 20010, kind="shared").epoch == 1


def test_a_shared_server_s_port_is_claimed_before_its_first_tenant_arrives(store):
    """A node that gets its first shared tenant by a move claims its shared server's port alone: again by the
    same node is a no-op; a whole server's port or another node's claim is PortTaken; the tenant then flips
    to it, and no whole server may register there afterwards."""
    store.register("w1", "node-1", "127.0.0.2", 20001)
    store.register("s1", "node-1", "127.0.0.2", 20010, kind="shared")
    store.claim_shared_port("node-2", 20020)
    store.claim_shared_port("node-2", 20020)
    for node, port in (("node-2", 20001), ("node-2", 20010), ("node-1", 20020)):
        with pytest.raises(Conflict, match=f"port {port} is taken"):
            store.claim_shared_port(node, port)
    with pytest.raises(Conflict, match="port 20020 is taken"):
        store.register("w2", "node-1", "127.0.0.2", 20020)
    assert store.compare_and_set("s1", 1, "node-2", "127.0.0.3", 20020).port == 20020
    assert store.register("s2", "node-2", "127.0.0.3", 20020, kind="shared").port == 20020
    with pytest.raises(Conflict, match="port 20010 is taken"):  # node-1's stays node-1's shared server's
        store.register("w3", "node-1", "127.0.0.2", 20010)
    assert store.compare_and_set("s1", 2, "node-1", "127.0.0.2", 20010).port == 20010  # and back
    with pytest.raises(Conflict, match="port 20001 is taken"):  # never a whole server's port
        store.compare_and_set("s1", 3, "node-2", "127.0.0.3", 20001)
    # a port no node claimed (a target of a build before claims): the flip claims it for the new node
    assert store.compare_and_set("s2", 1, "node-3", "127.0.0.4", 20030).port == 20030
    with pytest.raises(Conflict, match="port 20030 is taken"):
        store.claim_shared_port("node-1", 20030)


def test_a_compare_and_set_may_change_the_kind_and_the_port_index_follows(store):
    """A whole server packed into a shared server (and given a server of its own again): the flip writes the
    new kind; the whole server's own port is free afterwards, the shared server's stays its node's, and the
    port of the tenant's new server is its own. A port that is not the target's to take refuses the flip."""
    store.register("c1", "node-1", "127.0.0.2", 20001)
    store.register("s1", "node-2", "127.0.0.3", 20020, kind="shared")
    store.register("w9", "node-2", "127.0.0.3", 20009)
    with pytest.raises(Conflict, match="port 20009 is taken"):  # a whole server's port is no shared server's
        store.compare_and_set("c1", 1, "node-2", "127.0.0.3", 20009, kind="shared")
    own = store.compare_and_set("c1", 1, "node-2", "127.0.0.3", 20020, kind="shared")
    assert (own.kind, own.port, own.epoch) == ("shared", 20020, 2) and store.lookup("c1") == own
    assert store.register("w2", "node-1", "127.0.0.2", 20001).port == 20001  # its old port is free
    with pytest.raises(Conflict, match="port 20020 is taken"):  # out again: not onto a shared server's port
        store.compare_and_set("c1", 2, "node-3", "127.0.0.4", 20020, kind="server")
    with pytest.raises(Conflict, match="port 20009 is taken"):
        store.compare_and_set("c1", 2, "node-3", "127.0.0.4", 20009, kind="server")
    own = store.compare_and_set("c1", 2, "node-3", "127.0.0.4", 20003, kind="server")
    assert (own.kind, own.port, store.lookup("c1").kind) == ("server", 20003, "server")
    with pytest.raises(Conflict, match="port 20003 is taken"):
        store.register("w3", "node-3", "127.0.0.4", 20003)
    assert store.register("s2", "node-2", "127.0.0.3", 20020, kind="shared").port == 20020  # node-2's still
    with pytest.raises(InvalidInput, match="unknown tenant kind"):
        store.compare_and_set("c1", 3, "node-1", "127.0.0.2", 20004, kind="database")


def test_compare_and_set_moves_and_bumps_epoch(store):
    store.register("t1", "node-1", "127.0.0.2", 20001)
    own = store.compare_and_set("t1", 1, "node-2", "127.0.0.3", 20001)
    assert (own.node, own.host, own.epoch) == ("node-2", "127.0.0.3", 2)
    assert store.lookup("t1") == own
    with pytest.raises(Conflict, match="expected epoch 1, directory has 2"):
        store.compare_and_set("t1", 1, "node-3", "127.0.0.4", 20001)
    with pytest.raises(NotFound):
        store.compare_and_set("nope", 1, "node-3", "127.0.0.4", 20001)


def test_compare_and_set_race_has_one_winner(store):
    """Two writers flip the same epoch at once: exactly one wins, the loser sees Conflict."""
    for round_ in range(5):
        tid = f"race{round_}"
        store.register(tid, "node-1", "127.0.0.2", 21000 + round_)
        barrier = threading.Barrier(2)
        results: dict[str, object] = {}

        def flip(node):
            barrier.wait()
            try:
                results[node] = store.compare_and_set(tid, 1, node, "127.0.0.9", 21000 + round_)
            except Conflict as exc:
                results[node] = exc

        threads = [threading.Thread(target=flip, args=(n,)) for n in ("node-2", "node-3")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        winners = [n for n, r in results.items() if not isinstance(r, Exception)]
        assert len(winners) == 1, results
        final = store.lookup(tid)
        assert (final.node, final.epoch) == (winners[0], 2)


def test_watch_is_monotonic_and_reaches_the_latest(store):
    store.register("t1", "node-1", "127.0.0.2", 20001)
    moves = 12
    seen: list[int] = []

    def mover():
        for i in range(moves):
            store.compare_and_set("t1", i + 1, f"node-{(i + 1) % 3 + 1}", "127.0.0.2", 20001)
            time.sleep(0.01 * (i % 3))

    t = threading.Thread(target=mover)
    t.start()
    last = 1
    deadline = time.monotonic() + 30
    while last < moves + 1 and time.monotonic() < deadline:
        own = store.watch("t1", last, timeout_s=5)
        if own is None:
            continue
        assert own.epoch > last  # never an older (or the same) epoch than already reported
        seen.append(own.epoch)
        last = own.epoch
    t.join(30)
    assert last == moves + 1
    assert seen == sorted(set(seen))
    assert store.lookup("t1").epoch == moves + 1


def test_watch_times_out_then_resumes(store):
    store.register("t1", "node-1", "127.0.0.2", 20001)
    t0 = time.monotonic()
    assert store.watch("t1", 1, timeout_s=0.5) is None
    assert 0.4 <= time.monotonic() - t0 < 5
    store.compare_and_set("t1", 1, "node-2", "127.0.0.3", 20001)
    # A watcher that dropped out (None above) and comes back still learns of the change at once.
    own = store.watch("t1", 1, timeout_s=5)
    assert own is not None and own.epoch == 2 and own.node == "node-2"


def test_watch_wakes_on_change_and_on_removal(store):
    store.register("t1", "node-1", "127.0.0.2", 20001)
    box: dict = {}

    def watcher(after):
        try:
            box["own"] = store.watch("t1", after, timeout_s=20)
        except NotFound as exc:
            box["err"] = exc

    th = threading.Thread(target=watcher, args=(1,))
    th.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    store.compare_and_set("t1", 1, "node-2", "127.0.0.3", 20001)
    th.join(20)
    assert box["own"].epoch == 2 and time.monotonic() - t0 < 5
    box.clear()
    th = threading.Thread(target=watcher, args=(2,))
    th.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    store.remove("t1")
    th.join(20)
    assert isinstance(box.get("err"), NotFound) and time.monotonic() - t0 < 5
    with pytest.raises(NotFound):
        store.watch("t1", 2, timeout_s=1)


def test_changes_snapshot_then_each_change_once(store):
    """One stream for every tenant: a snapshot, then creations, moves and removals in one call each."""
    store.register("t1", "node-1", "127.0.0.2", 20001)
    snap = store.changes(None, 0)
    assert snap.reset and [o.tenant for o in snap.owners] == ["t1"] and not snap.removed
    t0 = time.monotonic()
    idle = store.changes(snap.revision, 0.5)
    assert not idle.reset and not idle.owners and not idle.removed and idle.revision == snap.revision
    assert 0.4 <= time.monotonic() - t0 < 5
    store.register("t2", "node-2", "127.0.0.3", 20002)
    ch = store.changes(snap.revision, 5)
    assert not ch.reset and [(o.tenant, o.epoch) for o in ch.owners] == [("t2", 1)] and ch.revision > snap.revision
    store.compare_and_set("t1", 1, "node-2", "127.0.0.3", 20001)
    store.remove("t2")
    seen: dict = {}
    rev = ch.revision
    deadline = time.monotonic() + 10
    while ("t1" not in seen or "t2" not in seen) and time.monotonic() < deadline:
        ch = store.changes(rev, 5)
        assert not ch.reset
        seen |= {o.tenant: o for o in ch.owners} | {t: None for t in ch.removed}
        rev = ch.revision
    assert seen["t1"].epoch == 2 and seen["t1"].node == "node-2" and seen["t2"] is None
    assert not store.changes(rev, 0.3).owners  # nothing is told twice


def test_changes_wake_a_waiting_follower(store):
    rev = store.changes(None, 0).revision
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("ch", store.changes(rev, 20)))
    th.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    store.register("t9", "node-1", "127.0.0.2", 20009)
    th.join(20)
    assert [o.tenant for o in box["ch"].owners] == ["t9"] and time.monotonic() - t0 < 2


def test_changes_from_an_unknown_revision_is_a_snapshot(store):
    store.register("t1", "node-1", "127.0.0.2", 20001)
    rev = store.changes(None, 0).revision
    ch = store.changes(rev + 1_000_000, 0.2)
    assert ch.reset and [o.tenant for o in ch.owners] == ["t1"]


def test_lock_is_exclusive(store):
    a = store.acquire_lock("rebalance", "host-a:1", 30)
    assert a.holder == "host-a:1" and a.expires_in_s > 0
    with pytest.raises(Conflict, match="held by host-a:1"):
        store.acquire_lock("rebalance", "host-b:2", 30)
    assert store.acquire_lock("rebalance", "host-a:1", 30).holder == "host-a:1"  # re-acquire = refresh
    assert store.lock_info("rebalance").holder == "host-a:1"
    assert store.release_lock("rebalance", "host-b:2") is False
    assert store.lock_info("rebalance").holder == "host-a:1"
    with pytest.raises(Conflict, match="not held by host-b:2"):
        store.refresh_lock("rebalance", "host-b:2")
    assert store.release_lock("rebalance", "host-a:1") is True
    assert store.lock_info("rebalance") is None
    assert store.acquire_lock("rebalance", "host-b:2", 30).holder == "host-b:2"
    # Locks are independent by name.
    assert store.acquire_lock("migrate/t1", "host-a:1", 30).holder == "host-a:1"


def test_lock_race_has_one_winner(store):
    for round_ in range(3):
        name = f"race/{round_}"
        barrier = threading.Barrier(4)
        winners, losers = [], []

        def take(h):
            barrier.wait()
            try:
                store.acquire_lock(name, h, 30)
                winners.append(h)
            except Conflict:
                losers.append(h)

        threads = [threading.Thread(target=take, args=(f"h{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(winners) == 1 and len(losers) == 3, (winners, losers)
        assert store.lock_info(name).holder == winners[0]


def test_lock_expires_when_not_refreshed(store):
    """A crashed holder (one that stops refreshing) loses the lock after its TTL."""
    info = store.acquire_lock("rebalance", "crashed", 1)
    ttl = info.ttl_s  # a backend may round up (etcd: its minimum lease TTL)
    with pytest.raises(Conflict):
        store.acquire_lock("rebalance", "next", 1)
    deadline = time.monotonic() + ttl + 5
    while store.lock_info("rebalance") is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store.lock_info("rebalance") is None
    assert store.acquire_lock("rebalance", "next", 5).holder == "next"
    with pytest.raises(Conflict, match="not held by crashed"):
        store.refresh_lock("rebalance", "crashed")


def test_refresh_keeps_the_lock(store):
    info = store.acquire_lock("rebalance", "alive", 2)
    ttl = info.ttl_s
    end = time.monotonic() + ttl * 2 + 1
    while time.monotonic() < end:
        assert store.refresh_lock("rebalance", "alive").holder == "alive"
        with pytest.raises(Conflict):
            store.acquire_lock("rebalance", "other", 2)
        time.sleep(ttl / 4)
    assert store.lock_info("rebalance").holder == "alive"


def test_lock_input_is_validated(store):
    with pytest.raises(InvalidInput):
        store.acquire_lock("Bad Name", "h", 10)
    with pytest.raises(InvalidInput):
        store.acquire_lock("ok", "", 10)
    with pytest.raises(InvalidInput):
        store.acquire_lock("ok", "h", 0)


def test_state_put_get_list_delete(store):
    assert store.state_get("cooldown/tenant/t1") is None
    store.state_put("cooldown/tenant/t1", {"until": 123.5, "from": "node-1"})
    store.state_put("cooldown/tenant/t2", {"until": 1})
    store.state_put("cooldown/node/node-1", {"until": 2})
    assert store.state_get("cooldown/tenant/t1") == {"until": 123.5, "from": "node-1"}
    assert set(store.state_list("cooldown/tenant/")) == {"cooldown/tenant/t1", "cooldown/tenant/t2"}
    assert set(store.state_list()) == {"cooldown/tenant/t1", "cooldown/tenant/t2", "cooldown/node/node-1"}
    store.state_put("cooldown/tenant/t1", {"until": 9})
    assert store.state_get("cooldown/tenant/t1") == {"until": 9}
    assert store.state_delete("cooldown/tenant/t1") is True
    assert store.state_delete("cooldown/tenant/t1") is False
    assert store.state_get("cooldown/tenant/t1") is None
    with pytest.raises(InvalidInput):
        store.state_put("cooldown/x", [1, 2])


def test_cordon_uncordon_and_list(store):
    """A cordon is durable state every client of the store sees; cordoning twice keeps the first record."""
    assert store.cordons() == {}
    c = store.cordon("node-2", by="host-a:1", reason="maintenance")
    assert (c.node, c.by, c.reason) == ("node-2", "host-a:1", "maintenance") and c.since > 0
    again = store.cordon("node-2", by="host-b:2", reason="drain")
    assert again == c
    store.cordon("node-3")
    assert set(store.cordons()) == {"node-2", "node-3"}
    assert store.cordons()["node-2"] == c
    # Cordons live beside other state without mixing with it.
    store.state_put("rebalance/last-run", {"at": 1})
    assert set(store.cordons()) == {"node-2", "node-3"}
    assert store.uncordon("node-2") is True
    assert store.uncordon("node-2") is False
    assert set(store.cordons()) == {"node-3"}
    with pytest.raises(InvalidInput):
        store.cordon("Bad Node")


# ---- members ------------------------------------------------------------------------------
def test_members_register_list_update_remove(store):
    from slacker.directory import Member

    assert store.members() == []
    a = store.put_member(Member("node-2", "http://10.0.0.2:7000/", "10.0.0.2", protocol=2))
    assert (a.name, a.url, a.tenant_host, a.protocol) == ("node-2", "http://10.0.0.2:7000", "10.0.0.2", 2)
    assert a.registered_at > 0 and a.updated_at >= a.registered_at
    store.put_member(Member("node-1", "http://10.0.0.1:7000", "10.0.0.1", protocol=2))
    assert [m.name for m in store.members()] == ["node-1", "node-2"]  # by name
    time.sleep(0.01)
    # A re-registration (an agent restarted, upgraded, or moved its API) updates in place and keeps
    # when the node first joined.
    b = store.put_member(Member("node-2", "https://10.0.0.2:7443", "10.0.0.2", protocol=3))
    assert (b.url, b.protocol, b.registered_at) == ("https://10.0.0.2:7443", 3, a.registered_at)
    assert b.updated_at > a.updated_at
    assert store.member("node-2") == b
    assert store.member("node-9") is None
    assert store.remove_member("node-2") is True
    assert store.remove_member("node-2") is False  # idempotent
    assert [m.name for m in store.members()] == ["node-1"]
    # Members are not tenants, cordons or state: none of those sees them.
    assert store.list() == [] and store.cordons() == {}


def test_members_refuse_bad_records(store):
    from slacker.directory import Member

    for bad in (Member("Node 1", "http://h:1", "h"), Member("n/1", "http://h:1", "h"),
                Member("n1", "ftp://h:1", "h"), Member("n1", "http://h", "h"), Member("n1", "http://h:1", ""),
                Member("n1", "http://h:1", "a b"), Member("n1", "http://h:1", "h", protocol=-1)):
        with pytest.raises(InvalidInput):
            store.put_member(bad)
    assert store.members() == []


def test_many_members_in_one_read(store):
    from slacker.directory import Member

    for i in range(40):
        store.put_member(Member(f"node-{i:02d}", f"http://10.0.1.{i}:7000", f"10.0.1.{i}", protocol=2))
    got = store.members()
    assert [m.name for m in got] == [f"node-{i:02d}" for i in range(40)]
    assert got[7].tenant_host == "10.0.1.7"
