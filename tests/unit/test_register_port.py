"""A creation's registration reads no list of tenants: the directory's answer says a port is taken, and the
next one is tried; only a range crowded around the id's port costs one read of every tenant."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slacker.agent.node import Node
from slacker.directory import SQLiteStore
from slacker.errors import Conflict, PortTaken
from slacker.tenants import preferred_port

RANGE = (30000, 30099)


class CountingStore(SQLiteStore):
    lists = 0

    def list(self):
        self.lists += 1
        return super().list()


def _manager(kind: str = "server", ports=(), fixed=None):
    """A node's manager of one tenant kind, as `Node._register` asks it (slacker/kinds/local.py)."""
    return SimpleNamespace(kind=SimpleNamespace(name=kind), port=lambda: fixed, port_for_new=lambda tid: fixed, ports=lambda: set(ports))



def _node(tmp_path, local_ports=(), shared_port=None):
    store = CountingStore(tmp_path / "d.sqlite")
    kinds = {"server": _manager(ports=local_ports), "shared": _manager("shared", fixed=shared_port,
                                                                      ports={shared_port} - {None})}
    node = SimpleNamespace(directory=store, name="node-1", config=SimpleNamespace(tenant_host="10.0.0.1"),
                           tenants=SimpleNamespace(port_range=RANGE), kinds=kinds, REGISTER_TRIES=Node.REGISTER_TRIES)
    node._first_free_port = lambda tid, take: Node._first_free_port(node, tid, take)
    return node, store


def test_a_shared_tenant_takes_its_servers_port_and_a_whole_server_steps_over_it(tmp_path):
    want = preferred_port("t1", RANGE)
    node, store = _node(tmp_path, shared_port=want)
    own, port = Node._register(node, "s1", node.kinds["shared"])
    assert (own.port, own.kind) == (want, "shared")
    own, port = Node._register(node, "s2", node.kinds["shared"])
    assert (own.port, own.kind) == (want, "shared")
    own, port = Node._register(node, "t1", node.kinds["server"])
    assert port != want and own.kind == "server" and store.lists == 0


def test_a_taken_port_moves_the_tenant_to_the_next_without_a_list(tmp_path):
    node, store = _node(tmp_path)
    want = preferred_port("t1", RANGE)
    store.register("other", "node-2", "10.0.0.2", want)
    with pytest.raises(PortTaken):
        store.register("t2", "node-2", "10.0.0.2", want)
    own, port = Node._register(node, "t1", node.kinds["server"])
    assert port == (want - RANGE[0] + 1) % 100 + RANGE[0] and own.port == port and own.node == "node-1"
    assert store.lists == 0


def test_a_crowded_range_is_read_once_and_a_full_one_refused(tmp_path):
    node, store = _node(tmp_path)
    want = preferred_port("t1", RANGE)
    for i in range(40):  # the 40 ports from the id's own on are taken
        store.register(f"o{i}", "node-2", "10.0.0.2", (want - RANGE[0] + i) % 100 + RANGE[0])
    own, port = Node._register(node, "t1", node.kinds["server"])
    assert port == (want - RANGE[0] + 40) % 100 + RANGE[0] and store.lists == 1
    for i in range(41, 100):
        store.register(f"p{i}", "node-2", "10.0.0.2", (want - RANGE[0] + i) % 100 + RANGE[0])
    with pytest.raises(Conflict, match="no free port"):
        Node._register(node, "t9", node.kinds["server"])


def test_a_shared_server_s_port_for_a_tenant_moving_in_is_claimed_as_its_registration_would_be(tmp_path):
    want = preferred_port("s1", RANGE)
    node, store = _node(tmp_path)
    store.register("w1", "node-9", "10.0.0.9", want)  # a whole server elsewhere holds the preferred port
    port = Node.claim_shared_port(node, "s1")
    assert port != want and RANGE[0] <= port <= RANGE[1]
    assert Node.claim_shared_port(node, "s1") == port  # asked again (a retried move): the node's claim stands
    store.register("s1", "node-1", "10.0.0.1", port, kind="shared")  # the tenant's flip lands on it
