"""Membership without processes: the merge of directory members and [[nodes]] seeds, joining and
leaving on a SQLite directory, the new-form cluster file, and the protocol version's skew rule."""

from __future__ import annotations

import time

import pytest

from slacker import protocol_version
from slacker.config import MEMBER_MISS_REFRESH_S, NodeSpec, load_agent_config, load_cluster, merge_members
from slacker.directory import Member, SQLiteStore
from slacker.errors import Conflict, InvalidInput, NotFound, VersionSkew
from slacker.membership import join, leave


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "d.sqlite")
    yield s
    s.close()


def test_members_win_over_seeds_and_a_removed_seed_stays_out():
    seeds = {"node-1": NodeSpec("node-1", "http://old:1", "old"), "node-2": NodeSpec("node-2", "http://b:1", "b"),
             "node-3": NodeSpec("node-3", "http://c:1", "c")}
    got = merge_members(seeds, [Member("node-1", "http://new:1", "new", 2), Member("node-4", "http://d:1", "d", 2)],
                        removed={"node-3"})
    assert list(got) == ["node-1", "node-2", "node-4"]
    assert (got["node-1"].url, got["node-1"].protocol) == ("http://new:1", 2)  # the directory's record
    assert got["node-2"] == seeds["node-2"]  # a seed whose agent has not registered (an old agent)


def test_join_keeps_tenants_reachable_and_leave_refuses_an_owner(store):
    join(store, Member("node-1", "http://10.0.0.1:7000", "10.0.0.1", 2))
    store.register("t1", "node-1", "10.0.0.1", 20001)
    # The same node restarting (an upgrade): in place, nothing else touched.
    again = join(store, Member("node-1", "http://10.0.0.1:7000", "10.0.0.1", 3))
    assert again.protocol == 3 and store.lookup("t1").epoch == 1
    with pytest.raises(Conflict, match="registered at 10.0.0.1"):
        join(store, Member("node-1", "http://10.0.0.9:7000", "10.0.0.9", 2))
    with pytest.raises(Conflict, match=r"node node-1 still owns 1 tenant\(s\) \(t1\).*slacker node drain node-1"):
        leave(store, {}, "node-1")
    assert store.member("node-1") is not None
    store.compare_and_set("t1", 1, "node-2", "10.0.0.2", 20001)
    store.cordon("node-1")
    assert leave(store, {}, "node-1") is True
    assert store.member("node-1") is None and store.cordons() == {} and store.removed_members() == {"node-1"}
    assert leave(store, {}, "node-1") is False  # idempotent
    join(store, Member("node-1", "http://10.0.0.1:7000", "10.0.0.1", 2))  # re-joining undoes the removal
    assert store.removed_members() == set()


def test_leave_refuses_a_node_in_a_running_migration(store):
    class Agent:
        def __init__(self, migs):
            self.migs = migs

        def request(self, *a, **k):
            return {"migrations": self.migs}

    agents = {"node-1": Agent([{"id": "m7", "tenant": "t", "source": "node-1", "target": "node-3", "active": True}]),
              "node-3": Agent([])}
    with pytest.raises(Conflict, match=r"running migration\(s\) \(m7\)"):
        leave(store, agents, "node-3")
    agents["node-1"].migs[0]["active"] = False
    assert leave(store, agents, "node-3") is False


def test_a_cluster_file_without_nodes_reaches_the_directory(tmp_path):
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    f = tmp_path / "cluster.toml"
    f.write_text(f'token_file = "{token}"\ndirectory = "node-1"\ndirectory_url = "http://127.0.0.2:7701"\n')
    c = load_cluster(str(f))
    assert c.seeds == {} and c.directory.url == "http://127.0.0.2:7701"
    f.write_text(f'token_file = "{token}"\n')
    with pytest.raises(InvalidInput, match="does not say where the directory is"):
        load_cluster(str(f))
    f.write_text(f'token_file = "{token}"\ndirectory_backend = "etcd"\netcd_endpoints = ["http://127.0.0.1:2379"]\n')
    assert load_cluster(str(f)).directory_backend == "etcd"


def test_a_follower_finds_a_node_that_joined_later(tmp_path, store):
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    f = tmp_path / "cluster.toml"
    f.write_text(f'token_file = "{token}"\ndirectory = "node-1"\n[[nodes]]\nname = "node-1"\nurl = "http://a:1"\n')
    c = load_cluster(str(f)).follow_members(store)
    assert list(c.nodes) == ["node-1"]  # the seed, nobody registered yet
    join(store, Member("node-4", "http://d:1", "d", 2))  # just after the read: the view is stale
    assert c.node("node-4").url == "http://d:1"
    reads = []
    real = store.members
    store.members = lambda: reads.append(time.monotonic()) or real()
    t0 = time.monotonic()
    for _ in range(3):  # unknown names read the directory again, but at most once per MEMBER_MISS_REFRESH_S
        with pytest.raises(NotFound, match="node 'node-9' is not a member"):
            c.node("node-9")
    assert len(reads) == 3 and all(b - a >= MEMBER_MISS_REFRESH_S * 0.99 for a, b in zip(reads, reads[1:]))
    assert reads[0] - t0 < MEMBER_MISS_REFRESH_S + 0.2


def test_advertised_url_derived_from_listen(tmp_path):
    (tmp_path / "a.toml").write_text('node = "node-4"\ncluster = "c.toml"\ndata_root = "d"\nlisten = "10.0.0.4:7000"\n')
    assert load_agent_config(tmp_path / "a.toml").advertised_url() == "http://10.0.0.4:7000"
    (tmp_path / "a.toml").write_text('node = "node-4"\ncluster = "c.toml"\ndata_root = "d"\nlisten = "0.0.0.0:7000"\n'
                                     'tenant_host = "10.0.0.4"\n')
    assert load_agent_config(tmp_path / "a.toml").advertised_url() == "http://10.0.0.4:7000"
    (tmp_path / "a.toml").write_text('node = "node-4"\ncluster = "c.toml"\ndata_root = "d"\nlisten = "0.0.0.0:7000"\n'
                                     'advertise_url = "https://db4.example.net:7000"\n')
    assert load_agent_config(tmp_path / "a.toml").advertised_url() == "https://db4.example.net:7000"


def test_skew_rule(monkeypatch):
    assert protocol_version.compatible(2, 3) and protocol_version.compatible(3, 2)
    assert protocol_version.spoken(2, 3) == 2
    protocol_version.check(2, 3, "agent node-1", "agent node-2")
    with pytest.raises(VersionSkew) as e:
        protocol_version.check(2, 4, "agent node-1", "agent node-2")
    line = e.value.one_line()
    assert "node-1 speaks 2" in line and "node-2 speaks 4" in line and "upgrade agent node-1" in line
    assert "\n" not in line
    monkeypatch.setenv(protocol_version.ENV, "5")
    assert protocol_version.current() == 5
    monkeypatch.setenv(protocol_version.ENV, "x")
    with pytest.raises(InvalidInput):
        protocol_version.current()
    assert protocol_version.parse(None) == 1
