"""The router's latency source: a load through the router is measured per tenant by the router (client-visible
transaction time), read back by slacker.latency.RouterLatencySource close to the client's own clock, and chosen by
default for a tenant reached through a router; a tenant whose clients do not go through one falls back to the
server's performance_schema, and the migration's --json says which and why."""

import json
import threading
import time

import pytest

from slacker.agent.client import cluster_clients
from slacker.client import resolve
from slacker.latency import RouterLatencySource
from slacker.controller.settings import ControllerSettings
from slacker.migration.options import MigrationOptions, MigrationRequest
from slacker.migration.remote import follow, start_migration
from slacker.router.control import registered_routers

from .test_cli import slacker
from .test_router import _connect, _tenant


class _Load:
    """One client through the router: BEGIN; INSERT; a 15 ms statement; COMMIT, timed on the client's clock."""

    def __init__(self, listen: str, user: str, password: str) -> None:
        self.conn = _connect(listen, user, password)
        with self.conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS w")
            cur.execute("CREATE TABLE IF NOT EXISTS w.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        self.times: list[tuple[float, float]] = []  # (end, seconds)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            with self.conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("INSERT INTO w.t (v) VALUES (1)")
                cur.execute("SELECT SLEEP(0.015)")
                cur.execute("COMMIT")
            t1 = time.monotonic()
            self.times.append((t1, t1 - t0))
            time.sleep(0.005)  # the client's own think time between transactions: not latency

    def mean_since(self, since: float) -> float:
        xs = [d for t, d in self.times if t >= since]
        return sum(xs) / len(xs)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.conn.close()


def _admins(directory) -> list[str]:
    return [r["admin"] for r in registered_routers(directory) if r.get("admin")]


@pytest.mark.slow
def test_the_routers_latency_is_the_clients(routed):
    cluster, listen, admin = routed
    ep = _tenant(cluster, admin, "lat1", "node-1")
    _, directory = cluster_clients(cluster)
    deadline = time.monotonic() + 15
    while not _admins(directory):
        assert time.monotonic() < deadline, "the router never announced itself"
        time.sleep(0.2)
    load = _Load(listen, "app@lat1", ep.password)
    try:
        src = RouterLatencySource("lat1", lambda: _admins(directory), window_s=3.0, step_s=1.0)
        samples = []
        for _ in range(6):
            time.sleep(1.0)
            samples.append((time.monotonic(), src.read()))
        t, last = samples[-1]
        assert last.ok and last.count >= 20, last
        client = load.mean_since(t - last.window_s)
        # The router's time excludes the client's own (its driver, the wire to the router): a little under.
        print(f"router {last.latency_s * 1000:.2f} ms over {last.count:.0f} transactions, client {client * 1000:.2f} ms")
        assert 0.8 * client <= last.latency_s <= 1.05 * client, (last.latency_s, client)
        assert last.latency_s >= 0.015  # the statement's own 15 ms: a transaction, not a statement

        # The only tenant on its node, reached through the router: the load's latency before the copy is the
        # router's last seconds, read at once -- the agent answers the request (which returns once the copy's
        # controller is built) without seconds of measuring first.
        agents, _ = cluster_clients(cluster)
        t0 = time.monotonic()
        doc = start_migration(agents["node-1"], MigrationRequest.checked(
            "lat1", MigrationOptions(target="node-2", controller=ControllerSettings(setpoint_s=2.0))))
        took = time.monotonic() - t0
        doc = follow(agents["node-1"], doc)
        assert doc["result"] == "succeeded", doc["error"]
        assert doc["latency_source"]["kind"] == "router", doc["latency_source"]
        assert doc["latency_source"]["load_latency_from"] == "router window", doc["latency_source"]
        print(f"request to the copy's start: {took:.2f} s")
        assert took < 2.0, took

        # A tenant with no routed clients, on the same node: a migration steers by the routers' latency for the
        # routed tenant and by the server's own for the other, and says so.
        _tenant(cluster, admin, "lat2", "node-2")
        rc, out, err = slacker("migrate", "lat1", "--to", "node-1", "--setpoint", "2s", "--json")
        assert rc == 0, err
        doc = json.loads(out)
        chosen = doc["latency_source"]
        assert chosen["kind"] == "mixed", chosen
        assert chosen["tenants"]["lat1"]["source"] == "router", chosen
        assert admin in chosen["tenants"]["lat1"]["routers"], chosen
        assert chosen["tenants"]["lat2"]["source"] == "performance_schema", chosen
        assert "carries its clients" in chosen["tenants"]["lat2"]["why"], chosen
    finally:
        load.close()


def test_no_router_traffic_falls_back_to_the_server(make_cluster):
    """No router at all: the default is the server's per-transaction time, and the record says why. The load's
    own latency before the copy comes from the agent's per-tenant window (the load ran before the move), not
    from seconds measured before the copy starts."""
    make_cluster(stats_interval_s=1.0)
    rc, _, err = slacker("tenant", "create", "lat3", "--on", "node-1")
    assert rc == 0, err
    conn = resolve("lat3").connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE w")
        cur.execute("CREATE TABLE w.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        until = time.monotonic() + 5  # the agent samples the tenant's window meanwhile (10 s, each tick)
        while time.monotonic() < until:
            cur.execute("INSERT INTO w.t (v) VALUES (1)")
            time.sleep(0.01)
    conn.close()
    rc, out, err = slacker("migrate", "lat3", "--to", "node-2", "--setpoint", "2s", "--json")
    assert rc == 0, err
    chosen = json.loads(out)["latency_source"]
    assert chosen["kind"] == "performance_schema", chosen
    assert chosen["tenants"]["lat3"] == {"source": "performance_schema",
                                         "why": "no router is announced in the directory"}, chosen
    assert chosen["load_latency_from"] == "agent history", chosen
