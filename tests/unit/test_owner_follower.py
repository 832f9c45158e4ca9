"""The reconciler's view of every tenant's owner, followed on the directory's change stream (pure logic, a
scripted directory): it answers only while the stream is fresh, and a discrepancy it shows is confirmed with a
read of the directory before anything is fenced."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from slacker.directory.base import OwnerChanges
from slacker.migration.reconcile import OwnerFollower, Reconciler


def own(tenant, node):
    return SimpleNamespace(tenant=tenant, node=node)


class Stream:
    def __init__(self, owners):
        self.truth = dict(owners)
        self.events: list = []
        self.rev = 1
        self.cond = threading.Condition()
        self.reads: list = []
        self.broken = False

    def changes(self, since, timeout_s):
        if self.broken:
            raise OSError("unreachable")
        with self.cond:
            if since is None:
                return OwnerChanges(self.rev, True, tuple(own(t, n) for t, n in self.truth.items()))
            self.cond.wait_for(lambda: self.rev > since, timeout=min(timeout_s, 0.2))
            if self.rev == since:
                return OwnerChanges(since, False)
            return OwnerChanges(self.rev, False, tuple(own(t, self.truth[t]) for t in self.events))

    def move(self, tenant, node, tell=True):
        with self.cond:
            self.truth[tenant] = node
            if tell:
                self.rev += 1
                self.events = [tenant]
                self.cond.notify_all()

    def owners(self, tenants):
        tenants = list(tenants)
        self.reads.append(tenants)
        return {t: own(t, self.truth[t]) for t in tenants if t in self.truth}


def wait(cond, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_follower_answers_while_fresh_and_follows_each_change():
    d = Stream({f"t{i}": "node-1" for i in range(100)})
    f = OwnerFollower(d, wait_s=0.2)
    assert f.owners(["t1"]) is None  # not started: the caller reads the directory itself
    f.start()
    wait(lambda: f.owners(["t1"]) is not None)
    d.move("t7", "node-2")
    wait(lambda: f.owners(["t7"])["t7"].node == "node-2")
    d.broken = True
    d.move("t8", "node-2")
    wait(lambda: f.owners(["t1"]) is None, timeout_s=15)  # the stream broke: no answer, not a stale one


class Manager:
    def __init__(self, ids):
        self.ids, self.fenced, self.acts = list(ids), set(), []

    def list(self):
        return [SimpleNamespace(id=t) for t in self.ids]

    def fenced_ids(self):
        return sorted(self.fenced)

    def fence_here(self, tid):
        self.acts.append(("fence", tid))
        self.fenced.add(tid)

    def unfence_here(self, tid):
        self.acts.append(("unfence", tid))
        self.fenced.discard(tid)


def test_a_tick_reads_only_the_discrepancies_and_confirms_each_before_it_fences():
    ids = [f"t{i}" for i in range(1000)]
    d = Stream({t: "node-1" for t in ids})
    mgr = Manager(ids)
    node = SimpleNamespace(name="node-1", directory=d, kinds={"shared": mgr}, supervisor=SimpleNamespace(busy=set()))
    r = Reconciler(node)
    r.follower.wait_s = 0.2
    r.shared()  # the first tick starts the stream: every owner read from the directory, unless it answered already
    assert d.reads in ([ids], []) and mgr.acts == []
    wait(lambda: r.follower.owners(["t1"]) is not None)
    d.reads.clear()
    r.shared()
    assert d.reads == [] and mgr.acts == []  # an idle node: nothing read
    d.move("t5", "node-2")  # moved elsewhere by hand: fenced, after a read of its own
    wait(lambda: r.follower.owners(["t5"])["t5"].node == "node-2")
    r.shared()
    assert d.reads == [["t5"]] and mgr.acts == [("fence", "t5")]
    # the stream says t6 is elsewhere but the directory (the stream a moment behind a flip back) says here
    with r.follower._lock:
        r.follower._owners["t6"] = own("t6", "node-2")
    d.reads.clear()
    r.shared()
    assert d.reads == [["t6"]] and ("fence", "t6") not in mgr.acts
