"""Fixtures that start real mariadbd processes and agents on loopback, in short temp dirs.

Every fixture cleans up after itself even when the test fails: tenants are
stopped and their directories removed, agents are shut down.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from slacker import local_cluster, netns
from slacker.client import Endpoint
from slacker.config import load_cluster
from slacker.errors import Conflict
from slacker.procs import kill_group
from slacker.router import local as local_router
from slacker.tenants import TenantManager

from benchkit.migration import processes_mentioning

# Tests keep their tenants out of the way of a demo cluster (13306-23305 on 127.0.0.2+), below the kernel's
# ephemeral ports (32768-60999). Tests run side by side (pytest-xdist workers, or another checkout's run with
# SLACKER_TEST_SLOT set): each slot has ports and loopback blocks of its own, so a tenant's port (a hash of
# its id) and a cluster's addresses never collide with another slot's.
SLOTS = 9
PORTS_PER_SLOT = 1000
BLOCKS_PER_SLOT = 16


def _slot() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return (int(os.environ.get("SLACKER_TEST_SLOT", "0") or 0) + index) % SLOTS


SLOT = _slot()
TEST_PORT_RANGE = (23306 + SLOT * PORTS_PER_SLOT, 23306 + (SLOT + 1) * PORTS_PER_SLOT - 1)


def pytest_collection_modifyitems(items):
    # A conftest's hook sees every item of the session: mark only this directory's.
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def short_tmp():
    """A temp dir with a short path: unix socket paths must stay under 108 bytes."""
    d = tempfile.mkdtemp(prefix="sl-", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def tenants(short_tmp):
    mgr = TenantManager(short_tmp / "node", host="127.0.0.1", node="test", port_range=TEST_PORT_RANGE)
    yield mgr
    for t in mgr.list():
        mgr.kill_tenant(t)


@pytest.fixture
def tenant(tenants):
    """One running tenant `t1` on 127.0.0.1."""
    return tenants.create("t1")


@pytest.fixture
def tenant_endpoint(tenant) -> Endpoint:
    """Application credentials of the running tenant `t1`."""
    return Endpoint(tenant=tenant.id, host=tenant.host, port=tenant.port, user="app",
                    password=tenant.app_password(), node="test", epoch=1)


def _free_port(host: str) -> int:
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


_next_block = [0]


def next_loopback_block() -> str:
    """The first node address of a 127.0.x.0/24 block of its own (among this slot's): sockets of earlier
    tests, and of tests running beside this one, stay apart."""
    _next_block[0] += 1
    return f"127.0.{100 + SLOT * BLOCKS_PER_SLOT + _next_block[0] % BLOCKS_PER_SLOT}.2"


def next_subnet() -> str:
    """A /24 for a netns cluster, different for each slot and each try (a taken one is tried again)."""
    _next_block[0] += 1
    k = _next_block[0]
    return f"10.{78 + k % 8}.{(SLOT * 27 + k * 37) % 250}.0/24"


@pytest.fixture
def make_cluster(short_tmp):
    """Factory: a local cluster (real agents as daemons) on a loopback block of its own."""
    made = []

    def make(nodes: int = 2, port_range: tuple[int, int] = TEST_PORT_RANGE, name: str = "run",
             directory_node: str = "node-1", directory: str = "sqlite", cpu_per_node: float | None = None,
             netns: bool = False, stats_interval_s: float | None = None, tls: bool = False,
             disk_read_per_node: float | None = None, **budget):
        run_dir = short_tmp / name
        made.append(run_dir)
        if netns:
            return _make_netns(run_dir, nodes, port_range, directory_node, directory, cpu_per_node, tls,
                               stats_interval_s)
        first = next_loopback_block()
        port = _free_port(first)
        etcd_ports = {}
        if directory == "etcd":  # three members on the block's first three addresses, ports of their own
            client = _free_port(first)
            peer = _free_port(first)
            while len({port, client, peer}) < 3:
                peer = _free_port(first)
            etcd_ports = {"etcd_client_port": client, "etcd_peer_port": peer}
        path = local_cluster.up(run_dir, nodes=nodes, first_address=first, api_port=port,
                                port_range="%d-%d" % port_range, directory_node=directory_node,
                                fault_injection=True, directory=directory, cpu_per_node=cpu_per_node,
                                stats_interval_s=stats_interval_s, tls=tls, disk_read_per_node=disk_read_per_node,
                                **etcd_ports, **budget)
        os.environ["SLACKER_CLUSTER"] = str(path)
        return load_cluster(str(path))

    yield make
    os.environ.pop("SLACKER_CLUSTER", None)
    for run_dir in made:
        tear_down(run_dir)


def tear_down(run_dir: Path) -> None:
    """A test cluster down, whatever state a fault left it in."""
    try:
        local_cluster.down(run_dir)
    except Exception:
        pass
    # Whatever a fault left behind (an agent killed mid-step), no process of this cluster survives it.
    for pid, _ in processes_mentioning(str(run_dir)):
        kill_group(pid)
    try:
        netns.teardown(run_dir)  # namespaces, veths and the bridge, even if `down` failed
    except Exception:
        pass


def _make_netns(run_dir: Path, nodes: int, port_range, directory_node: str, directory: str,
                cpu_per_node: float | None, tls: bool = False, stats_interval_s: float | None = None):
    """A cluster whose nodes are network namespaces on a bridge with a /24 of this run's own:
    several test runs (and demo clusters on 10.77.0.0/24) can live side by side."""
    last = None
    for _ in range(20):
        subnet = next_subnet()
        try:
            path = local_cluster.up(run_dir, nodes=nodes, api_port=7701, port_range="%d-%d" % port_range,
                                    directory_node=directory_node, fault_injection=True, directory=directory,
                                    cpu_per_node=cpu_per_node, netns=True, netns_subnet=subnet, tls=tls,
                                    stats_interval_s=stats_interval_s)
        except Conflict as exc:  # another run holds that subnet: try the next one
            last = exc
            netns.teardown(run_dir)
            continue
        os.environ["SLACKER_CLUSTER"] = str(path)
        return load_cluster(str(path))
    raise last


netns_available = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                     reason="network namespaces need root and iproute2")


@contextlib.contextmanager
def routed_cluster(nodes: int = 2, stats_interval_s: float | None = None):
    """A cluster with a router for a module's tests to share (its fixture's body): (cluster, run dir, the
    router's admin address, the router's client address); down and removed afterwards, whatever happened.
    `stats_interval_s`: the agents' load-history interval (a module that reads tenants' loads shortens it)."""
    tmp = Path(tempfile.mkdtemp(prefix="sl-", dir="/tmp"))
    run_dir = tmp / "run"
    first = next_loopback_block()
    try:
        path = local_cluster.up(run_dir, nodes=nodes, first_address=first, api_port=_free_port(first),
                                port_range="%d-%d" % TEST_PORT_RANGE, directory_node="node-1", fault_injection=True,
                                stats_interval_s=stats_interval_s)
        os.environ["SLACKER_CLUSTER"] = str(path)
        admin = local_router.start(run_dir, path, "127.0.0.1:0")
        yield load_cluster(str(path)), run_dir, admin, local_router.listening(run_dir)
    finally:
        os.environ.pop("SLACKER_CLUSTER", None)
        try:
            local_router.stop(run_dir)
        except Exception:
            pass
        tear_down(run_dir)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def cluster(make_cluster):
    """A local two-node cluster; SLACKER_CLUSTER points at its cluster file."""
    return make_cluster()


@pytest.fixture
def routed(make_cluster):
    """A two-node cluster with a router on 127.0.0.1 (started as `cluster up` does)."""
    cluster = make_cluster(nodes=2)
    admin = local_router.start(cluster.path.parent, cluster.path, "127.0.0.1:0")
    yield cluster, local_router.listening(cluster.path.parent), admin
    local_router.stop(cluster.path.parent)
