"""The fleet under test: `nodes` network-namespace nodes on a three-member etcd, a router, tenants with
data, and the loads (acknowledged writers through the router, `slacker ycsb run`) on them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchkit.host import interrupt
from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.config import load_cluster
from slacker.errors import Conflict
from slacker.router import local as local_router

from benchkit import REPO as ROOT  # noqa: E402  (the repository, wherever the bench sits)


class Fleet:
    def __init__(self, run_dir: Path, nodes: int, stats_interval_s: float = 1.0,
                 cpu_per_node: float | None = None, latency_terms: str = "router") -> None:
        self.run_dir = run_dir
        self.latency_terms = latency_terms  # how node_latency reads a node: "router" or "server"
        last = None
        for block in range(8):  # a subnet no other run holds (like tests/integration/conftest.py)
            subnet = f"10.{88 + block}.{(os.getpid() + block * 37) % 250}.0/24"
            try:
                path = local_cluster.up(run_dir, nodes=nodes, directory="etcd", netns=True, netns_subnet=subnet,
                                        stats_interval_s=stats_interval_s, cpu_per_node=cpu_per_node)
                break
            except Conflict as exc:
                last = exc
        else:
            raise last
        self.path = path
        self.cluster = load_cluster(str(path))
        os.environ["SLACKER_CLUSTER"] = str(path)
        # The router on the root namespace's address on the bridge: the agents (in their namespaces) hold it
        # during each handover, so it must be reachable from them (127.0.0.1 there is their own loopback).
        import json

        host = json.loads((run_dir / "netns.json").read_text())["root_address"]
        self.admin = local_router.start(run_dir, path, f"{host}:0")
        self.listen = local_router.listening(run_dir)
        self.agents, self.directory = cluster_clients(self.cluster)
        self.procs: list[subprocess.Popen] = []
        self.loads: list = []

    def nodes(self) -> list[str]:
        return sorted(self.agents, key=lambda n: int(n.split("-")[-1]))

    def create(self, tenant: str, node: str, records: int, buffer_pool_bytes: int = 32 * 1024 * 1024) -> None:
        self.agents[node].request("POST", "/v1/tenants", {"id": tenant, "buffer_pool_bytes": buffer_pool_bytes},
                                  timeout_s=300)
        slacker("ycsb", "load", tenant, "-P", "workloads/slacker", "-p", f"recordcount={records}")

    def owners(self) -> dict[str, str]:
        return {o.tenant: o.node for o in self.directory.list()}

    def ycsb(self, tenants: list[str], records: int, rate_per_tenant: float) -> None:
        """The harness on `tenants` at a fixed offered rate each, for as long as the bench runs (one process
        drives them all: forty Python processes would be a load of their own on a small machine)."""
        rate = ",".join(str(rate_per_tenant) for _ in tenants)
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "slacker", "ycsb", "run", ",".join(tenants), "-P", "workloads/slacker",
             "-p", f"recordcount={records}", "--rate", rate, "--mpl", "2", "--duration", "6h", "--quiet"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))

    def oltp(self, tenant: str, threads: int = 2, think_s: float = 0.05):
        """sysbench-style OLTP (slacker/oltp.py: bank transfers, row locks on hot accounts) through the router."""
        from slacker import oltp
        from slacker.client import resolve

        password = resolve(tenant, self.cluster).password
        conn = RouterClient(self.listen, tenant, password).connection()
        oltp.load(conn, accounts=200)
        conn.close()
        load = oltp.TransferLoad(lambda: RouterClient(self.listen, tenant, password), threads=threads,
                                 accounts=200, hot_accounts=4, think_s=think_s).start()
        self.loads.append(load)
        return load

    def kill_agent(self, node: str) -> None:
        """SIGKILL of `node`'s agent (its tenants' servers and the copies' processes keep running)."""
        import signal

        from slacker.procs import read_pid, wait_gone

        pid = read_pid(self.run_dir / node / "agent.pid")
        os.kill(pid, signal.SIGKILL)
        if not wait_gone(pid, 10):
            raise RuntimeError(f"{node}'s agent outlived SIGKILL")

    def restart(self) -> None:
        """What an operator types after a crash: `cluster up --dir` starts the agents that are not running,
        with the cluster's recorded options (the CPU quota included)."""
        slacker("cluster", "up", "--dir", str(self.run_dir), timeout_s=300)

    def close(self) -> None:
        for load in self.loads:
            load.stop()
        interrupt(self.procs, 20)
        local_router.stop(self.run_dir)
        local_cluster.down(self.run_dir, purge=True)


def slacker(*args: str, timeout_s: float = 900) -> str:
    p = subprocess.run([sys.executable, "-m", "slacker", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout_s, env=dict(os.environ))
    if p.returncode != 0:
        raise RuntimeError(f"slacker {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def node_latency(fleet: "Fleet", node: str, exclude: set[str] = frozenset()) -> tuple[float | None, float]:
    """The node's tenants' transaction-weighted mean latency, and their txn/s, in the fleet's terms: "router"
    (what the routed clients saw over the last complete second: what the migrations' default latency source
    reads for a tenant reached through a router) or "server" (the agent's last interval, performance_schema)."""
    if fleet.latency_terms == "router":
        return router_node_latency(fleet, node, exclude)
    return server_node_latency(fleet.agents[node], exclude)


def router_node_latency(fleet: "Fleet", node: str, exclude: set[str] = frozenset()) -> tuple[float | None, float]:
    from slacker.latency import _router_recent

    total_s = count = 0.0
    for tenant in sorted(t for t, n in fleet.owners().items() if n == node and t not in exclude):
        doc = _router_recent(fleet.admin, {"tenant": tenant, "seconds": 1, "kind": "transactions"}, 2.0)
        total_s, count = total_s + float(doc["sum_s"]), count + float(doc["count"])
    return (total_s / count if count else None), count


def server_node_latency(agent, exclude: set[str] = frozenset()) -> tuple[float | None, float]:
    """The node's tenants' transaction-weighted mean latency over the agent's last interval, and their txn/s."""
    doc = agent.request("GET", "/v1/tenant-stats", query={"history": 0}, timeout_s=5)
    rows = [t for t in doc.get("tenants", []) if t.get("latency_s") is not None and t.get("transactions_per_s")
            and t.get("id", t.get("tenant")) not in exclude]
    tps = sum(t["transactions_per_s"] for t in rows)
    return (sum(t["latency_s"] * t["transactions_per_s"] for t in rows) / tps if tps > 0 else None), tps


def wait_until(pred, timeout_s: float, poll_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll_s)
    raise TimeoutError


class RouterClient:
    """A connection to a tenant through the router (what slacker.oltp.TransferLoad asks of a client)."""

    import pymysql as _pymysql
    CONNECTION_ERRORS = (_pymysql.err.OperationalError, _pymysql.err.InterfaceError)

    def __init__(self, listen: str, tenant: str, password: str) -> None:
        self.host, port = listen.rsplit(":", 1)
        self.port, self.tenant, self.password = int(port), tenant, password
        self._conn = None

    def connection(self):
        import pymysql

        if self._conn is None or not self._conn.open:
            self._conn = pymysql.connect(host=self.host, port=self.port, user=f"app@{self.tenant}",
                                         password=self.password, connect_timeout=10, read_timeout=60,
                                         write_timeout=60, autocommit=False)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a connection the router already dropped
                pass
            self._conn = None
