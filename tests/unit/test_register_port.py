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


def _node(tmp_path, local_ports=()):
    store = CountingStore(tmp_path / "d.sqlite")
    return SimpleNamespace(directory=store, name="node-1", config=SimpleNamespace(tenant_host="10.0.0.1"),
                           tenants=SimpleNamespace(port_range=RANGE, local_ports=lambda: set(local_ports)),
                           REGISTER_TRIES=Node.REGISTER_TRIES), store


def test_a_taken_port_moves_the_tenant_to_the_next_without_a_list(tmp_path):
    node, store = _node(tmp_path)
    want = preferred_port("t1", RANGE)
    store.register("other", "node-2", "10.0.0.2", want)
    with pytest.raises(PortTaken):
        store.register("t2", "node-2", "10.0.0.2", want)
    own, port = Node._register(node, "t1")
    assert port == (want - RANGE[0] + 1) % 100 + RANGE[0] and own.port == port and own.node == "node-1"
    assert store.lists == 0


def test_a_crowded_range_is_read_once_and_a_full_one_refused(tmp_path):
    node, store = _node(tmp_path)
    want = preferred_port("t1", RANGE)
    for i in range(40):  # the 40 ports from the id's own on are taken
        store.register(f"o{i}", "node-2", "10.0.0.2", (want - RANGE[0] + i) % 100 + RANGE[0])
    own, port = Node._register(node, "t1")
    assert port == (want - RANGE[0] + 40) % 100 + RANGE[0] and store.lists == 1
    for i in range(41, 100):
        store.register(f"p{i}", "node-2", "10.0.0.2", (want - RANGE[0] + i) % 100 + RANGE[0])
    with pytest.raises(Conflict, match="no free port"):
        Node._register(node, "t9")
