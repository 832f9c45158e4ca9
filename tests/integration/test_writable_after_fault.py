"""Back in seconds (issue 46): the target agent SIGKILLed at each step past the ownership flip, then
started again. From the moment its API answers, the tenant takes a write within 3 s (the issue asks
for 10 s), at the owner's address and through the router; exactly one server ever takes writes, the
one the directory names, and every acknowledged write is on it. And `slacker migrate` and `slacker
status` say what the migration waits for meanwhile.

One cluster (two nodes, a router) serves every step, each with a small tenant of its own. The seconds
are printed (-s); SLACKER_TEST_MOVE=node-2:node-1 makes the target the node that serves the directory,
SLACKER_TEST_DOWN_S sets how long the agent stays dead (docs/migration.md, "Time to writable").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pymysql
import pytest

from slacker import mariadb
from slacker.ackwriter import SCHEMA, WriteProber
from slacker.agent.client import cluster_clients

from .conftest import routed_cluster
from benchkit.migration import acked_ids_present, start_migration, wait_migration
from .test_cli import slacker
from .test_router import _tenant
from .test_router_handover import _kill_agent, _start_agent

# The issue asks for writable within 10 s of the agent being back. The target activates itself as its
# agent starts, before its API answers, so 3 s is a wide margin on a loaded machine; waiting for the
# source's next retry (it backed off to 10 s) or for the lease instead took 6-10 s here.
BOUND_S = 3.0
DOWN_S = float(os.environ.get("SLACKER_TEST_DOWN_S", "16"))  # how long the target agent stays dead
LEASE_S = 60  # longer than the fault: the target's lease never decides here (it is for a silent source)
SOURCE, TARGET = os.environ.get("SLACKER_TEST_MOVE", "node-1:node-2").split(":")

# Where the target agent dies, past the flip: (the side that pauses there, its hold_s, --max-freeze).
# flipped: the directory names the target, the source has not asked it to take over yet;
# activating / started / unfencing / unfenced: inside the target's activation (the directory checked; the
# server running without replication, still fenced; unfenced in tenant.json, the running server not told
# yet -- it must be told when the agent is back; writable, the journal not yet cleared);
# activated: the target took over, the source has not released the routers yet.
# The routers' hold lasts 2 x --max-freeze + 5 s: with 0.5 s it ends while the agent is down (new and
# held statements then meet the fenced target until it is activated); with 10 s it outlasts the fault,
# so the held statements must be released to the new owner when it is back, not at the hold's end.
pytestmark = pytest.mark.xdist_group("routed_once")  # the steps share one cluster on one worker

STEPS = {
    "flipped": ("source", {"flipped": 2}, 0.5),
    "activating": ("target", {"activating": 30}, 0.5),
    "started": ("target", {"started": 30}, 10),
    "unfencing": ("target", {"unfencing": 30}, 10),
    "unfenced": ("target", {"unfenced": 30}, 10),
    "activated": ("source", {"activated": 2}, 10),
}


@pytest.fixture(scope="module")
def routed_once():
    """A two-node cluster and a router, shared by every step (each uses a tenant of its own)."""
    with routed_cluster() as (cluster, _, admin, listen):
        yield cluster, listen, admin


class RoutedWriter:
    """INSERTs through the router on one connection, reconnecting after an error; logs what was
    acknowledged and when."""

    def __init__(self, listen: str, tenant: str, password: str) -> None:
        self.host, port = listen.rsplit(":", 1)
        self.port, self.user, self.password = int(port), f"app@{tenant}", password
        self.acked: list[tuple[int, float]] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self):
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               ssl_disabled=True, autocommit=True, connect_timeout=2, read_timeout=30,
                               write_timeout=30)

    def start(self) -> "RoutedWriter":
        conn = self._connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE w")
            cur.execute("CREATE TABLE w.t (id BIGINT PRIMARY KEY, at DOUBLE)")
            for statement in SCHEMA:  # acks.probe: the prober's writes on every node's copy
                cur.execute(statement)
        conn.close()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        conn, n = None, 0
        while not self._stop.is_set():
            n += 1
            try:
                if conn is None:
                    conn = self._connect()
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO w.t VALUES (%s, %s)", (n, time.time()))
                self.acked.append((n, time.monotonic()))
            except Exception:  # noqa: BLE001 - refused or cut: counted, and the writer goes on
                self.refused += 1
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                conn = None
                self._stop.wait(0.05)
            self._stop.wait(0.02)

    def first_after(self, t: float) -> float | None:
        return next((at for _, at in self.acked if at >= t), None)


def _direct_write(cluster, tenant: str, password: str, deadline: float) -> float | None:
    """Seconds-clock time of the first INSERT the owner (as the directory names it now) accepts."""
    _, directory = cluster_clients(cluster)
    while time.monotonic() < deadline:
        try:
            own = directory.lookup(tenant)
            conn = mariadb.connect(user=mariadb.APP_USER, password=password, host=own.host, port=own.port,
                                   timeout_s=1)
            try:
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO w.t VALUES (%s, %s)", (-int(time.time() * 1000), time.time()))
                return time.monotonic()
            finally:
                conn.close()
        except Exception:  # noqa: BLE001 - not writable yet
            time.sleep(0.05)
    return None


def _wait_at(cluster, mid: str, side: str, point: str, timeout_s: float = 120) -> None:
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if side == "source":
                doc = agents[SOURCE].request("GET", f"/v1/migrations/{mid}", timeout_s=5)
                assert doc["active"], f"the migration ended before {point}: {doc['result']} {doc.get('error')}"
            else:
                doc = agents[TARGET].request("GET", f"/v1/incoming/{mid}", timeout_s=5)
            if doc.get("holding") == point:
                return
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - the incoming migration is not created yet
            pass
        assert time.monotonic() < deadline, f"never reached {point}"
        time.sleep(0.02)


@pytest.mark.parametrize("step", list(STEPS))
def test_target_agent_killed_past_the_flip_writable_soon_after_it_is_back(routed_once, step):
    cluster, listen, admin = routed_once
    tenant = f"bk-{step}"
    ep = _tenant(cluster, admin, tenant, SOURCE)
    writer = RoutedWriter(listen, tenant, ep.password).start()
    servers = {n.name: (n.tenant_host, ep.port) for n in cluster.nodes.values()}
    prober = WriteProber(servers, mariadb.APP_USER, ep.password).start()
    try:
        side, hold, max_freeze_s = STEPS[step]
        mid = start_migration(cluster, tenant, target=TARGET, hold_s=hold, lease_ttl_s=LEASE_S,
                              max_freeze_s=max_freeze_s)["id"]
        _wait_at(cluster, mid, side, step)
        _kill_agent(cluster, TARGET)
        time.sleep(DOWN_S)
        _start_agent(cluster, TARGET)
        back = time.monotonic()
        direct = _direct_write(cluster, tenant, ep.password, back + 60)
        deadline = back + 60
        while writer.first_after(back) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        routed = writer.first_after(back)
        doc = wait_migration(cluster, SOURCE, mid, timeout_s=120)
        time.sleep(0.5)
    finally:
        writer.stop()
        prober.stop()
    d = None if direct is None else round(max(0.0, direct - back), 2)
    r = None if routed is None else round(max(0.0, routed - back), 2)
    print(f"\nstep {step}: agent down {DOWN_S:.0f}s; writable after the agent is back: direct {d}s, "
          f"router {r}s; {writer.refused} writes refused through the router")
    assert doc["result"] == "succeeded", doc
    assert d is not None and d <= BOUND_S, f"no write at the owner's address within {BOUND_S}s: {d}"
    assert r is not None and r <= BOUND_S, f"no write through the router within {BOUND_S}s: {r}"
    assert prober.double_writable == [], f"two writable servers at once: {prober.double_writable[:3]}"
    _, directory = cluster_clients(cluster)
    assert directory.lookup(tenant).node == TARGET
    lost = acked_ids_present(cluster, tenant, [i for i, _ in writer.acked], table="t", database="w")
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert prober.accepted[TARGET] > 0, "the prober never saw the new owner take a write"
    assert _writable(servers, ep.password) == [TARGET]


def _writable(servers: dict, password: str) -> list[str]:
    out = []
    for name, (host, port) in servers.items():
        try:
            conn = mariadb.connect(user=mariadb.APP_USER, password=password, host=host, port=port, timeout_s=1)
        except Exception:  # noqa: BLE001 - not running there
            continue
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO acks.probe VALUES (%s, -1, %s)", (name, time.time()))
            out.append(name)
        except Exception:  # noqa: BLE001 - refused
            pass
        finally:
            conn.close()
    return out


def _cli_migration_id(cluster, proc, tenant: str) -> str:
    """The id of the migration a `slacker migrate` process started, once its source agent lists it."""
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        mid = next((m["id"] for m in agents[SOURCE].request("GET", "/v1/migrations")["migrations"]
                    if m["tenant"] == tenant and m.get("active") and m.get("source")), None)
        if mid is not None:
            return mid


def test_migrate_and_status_say_what_a_step_past_the_flip_waits_for(routed_once):
    """Instead of waiting in silence, `slacker migrate` (without a terminal: a line on stderr; --json keeps
    stdout one document) and `slacker status` say that the migration waits for the target agent and that
    the tenant is not writable until it is back; the final document keeps the wait and its length."""
    cluster, listen, admin = routed_once
    tenant = "bk-says"
    _tenant(cluster, admin, tenant, SOURCE)
    said = (f"past the flip: waiting for the target agent {TARGET} to come back; the tenant is not writable "
            "until it does (`slacker status`)")
    proc = subprocess.Popen([sys.executable, "-m", "slacker", "migrate", tenant, "--to", TARGET, "--hold",
                             "flipped=2s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        mid = _cli_migration_id(cluster, proc, tenant)
        _wait_at(cluster, mid, "source", "flipped")
        _kill_agent(cluster, TARGET)
        deadline = time.monotonic() + 30
        while True:
            rc, out, err = slacker("status")
            if said in out:
                break
            assert time.monotonic() < deadline, f"`slacker status` does not say what it waits for:\n{out}{err}"
            time.sleep(0.5)
        rc, out, _ = slacker("status", "--json")
        docs = [m for n in json.loads(out)["nodes"] for m in n.get("migrations", []) if m["id"] == mid]
        assert docs and docs[0]["waiting"]["for"] == "target-agent" and docs[0]["waiting"]["writable"] is False
        time.sleep(2)
        _start_agent(cluster, TARGET)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"slacker: migration {mid}: {said}" in err, err
    assert "going on after" in err, err
    doc = json.loads(out)
    assert doc["result"] == "succeeded" and doc["waiting"] is None
    assert [w["for"] for w in doc["waited"]] == ["target-agent"] and doc["waited"][0]["seconds"] >= 2, doc["waited"]


@pytest.mark.parametrize("point", ["delta", "flipped"])
def test_migrate_waits_for_a_restarted_source_agent(routed_once, point):
    """The source agent SIGKILLed while `slacker migrate` follows it (before the flip: at the delta rounds;
    past it: at the flip): the command says it waits for the agent instead of quitting with "cannot reach
    agent", and once the agent is back it ends with the migration's real result and exit code: failed
    (the source keeps the tenant) before the flip, succeeded past it."""
    cluster, listen, admin = routed_once
    tenant = f"bk-src-{point}"
    ep = _tenant(cluster, admin, tenant, SOURCE)
    servers = {n.name: (n.tenant_host, ep.port) for n in cluster.nodes.values()}
    writer = RoutedWriter(listen, tenant, ep.password).start()
    prober = WriteProber(servers, mariadb.APP_USER, ep.password).start()
    proc = subprocess.Popen([sys.executable, "-m", "slacker", "migrate", tenant, "--to", TARGET, "--hold",
                             f"{point}=30s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, directory = cluster_clients(cluster)
        mid = _cli_migration_id(cluster, proc, tenant)
        _wait_at(cluster, mid, "source", point)
        _kill_agent(cluster, SOURCE)
        time.sleep(3)  # several polls missed: the command must still be waiting
        assert proc.poll() is None, proc.communicate()
        _start_agent(cluster, SOURCE)
        out, err = proc.communicate(timeout=180)
        time.sleep(1)
    finally:
        writer.stop()
        prober.stop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert prober.double_writable == [], f"two writable servers at once: {prober.double_writable[:3]}"
    lost = acked_ids_present(cluster, tenant, [i for i, _ in writer.acked], table="t", database="w")
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert f"waiting for the source agent {SOURCE} to come back" in err, err
    assert f"the source agent {SOURCE} answers again" in err, err
    assert "cannot reach agent" not in err, err
    doc = json.loads(out)
    owner = directory.lookup(tenant).node
    if point == "flipped":
        assert proc.returncode == 0 and doc["result"] == "succeeded", err
        assert owner == TARGET
    else:
        assert proc.returncode != 0 and doc["result"] == "failed", err
        assert "source agent restarted before" in json.dumps(doc["error"]), doc["error"]
        assert owner == SOURCE
    deadline = time.monotonic() + 30
    while _writable(servers, ep.password) != [owner]:  # one writable server, the directory's
        assert time.monotonic() < deadline, (owner, _writable(servers, ep.password))
        time.sleep(0.2)
