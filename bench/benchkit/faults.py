"""Faults around the ownership flip, and the check every one of them must pass afterwards:
exactly one server of the tenant accepts writes, it is the one the directory names, every
acknowledged write is on it, nothing of the migration is left on either node, and it stays
so after both agents are restarted once more."""

from __future__ import annotations

import json
import os
import signal
import time

from slacker import local_cluster, mariadb, oltp
from slacker.ackwriter import AckedWriter, WriteProber
from slacker.agent.client import AgentClient, cluster_clients
from slacker.client import resolve
from slacker.procs import alive, read_pid, wait_gone

from .migration import acked_ids_present, create_loaded_tenant, follow, node_dir, processes_mentioning


def tls_client(cluster):
    """A client context for a TLS cluster's tenants, or None in plain text."""
    if cluster.tls_ca is None:
        return None
    from slacker.tls import client_context
    return client_context(cluster.tls_ca)


def restart_agent(cluster, node: str) -> None:
    """SIGKILL the node's agent (if it runs) and start it again, as its service manager would."""
    d = node_dir(cluster, node)
    pid = read_pid(d / "agent.pid")
    if pid and alive(pid):
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 10)
    spec = cluster.node(node)
    local_cluster._spawn_agent(d)
    local_cluster._wait_answering(AgentClient(spec.url, cluster.token(), spec.name, timeout_s=5,
                                              ca_file=cluster.tls_ca), d)


class Scenario:
    """A loaded tenant on node-1 under a steady acknowledged write load, with a prober writing to
    every node's copy of it every 100 ms."""

    def __init__(self, cluster, tenant: str = "mig", rows: int = 2000, rate_per_s: float = 50,
                 oltp_clients: int = 0) -> None:
        self.cluster = cluster
        self.tenant = tenant
        create_loaded_tenant(cluster, tenant, rows=rows)
        self.writer = AckedWriter(follow(cluster, tenant), rate_per_s=rate_per_s).start()
        self.oltp = None  # with oltp_clients: multi-statement transactions on hot rows beside the writer
        if oltp_clients:
            conn = resolve(tenant, cluster).connect()
            try:
                oltp.load(conn)
            finally:
                conn.close()
            self.oltp = oltp.TransferLoad(lambda: follow(cluster, tenant), threads=oltp_clients).start()
        _, directory = cluster_clients(cluster)
        port = directory.lookup(tenant).port
        password = (node_dir(cluster, "node-1") / "tenants" / tenant / "secrets" / "app.password").read_text().strip()
        self.password = password
        self.servers = {n.name: (n.tenant_host, port) for n in cluster.nodes.values()}
        self.tls = tls_client(cluster)
        self.prober = WriteProber(self.servers, mariadb.APP_USER, password,
                                  ssl_ca=str(cluster.tls_ca) if cluster.tls_ca else None).start()

    def stop(self) -> None:
        self.writer.stop()
        if self.oltp is not None:
            self.oltp.stop()
        self.prober.stop()

    def oltp_check(self):
        """The OLTP load's transfers on the owner: none acknowledged lost, none refused present."""
        conn = resolve(self.tenant, self.cluster).connect()
        try:
            return oltp.check(conn, self.oltp.acked, self.oltp.failed)
        finally:
            conn.close()

    # ---- faults ------------------------------------------------------------------------
    def agent_pid(self, node: str) -> int:
        return read_pid(node_dir(self.cluster, node) / "agent.pid")

    def kill_agent(self, node: str) -> None:
        pid = self.agent_pid(node)
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid, 10)

    def restart_agent(self, node: str) -> None:
        restart_agent(self.cluster, node)

    def tenant_pid(self, node: str) -> int | None:
        return read_pid(node_dir(self.cluster, node) / "tenants" / self.tenant / "run" / "mariadbd.pid")

    def kill_tenant_server(self, node: str) -> None:
        pid = self.tenant_pid(node)
        assert pid and alive(pid), f"no server of {self.tenant} on {node}"
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid, 10)

    def fenced_on(self, node: str) -> bool:
        meta = node_dir(self.cluster, node) / "tenants" / self.tenant / "tenant.json"
        try:
            return bool(json.loads(meta.read_text()).get("fenced"))
        except (OSError, ValueError):
            return False

    def wait_fenced(self, node: str = "node-1", timeout_s: float = 90) -> None:
        """Until the fence is persisted and live (the server refuses the application's writes)."""
        deadline = time.monotonic() + timeout_s
        while not self.fenced_on(node):
            assert time.monotonic() < deadline, f"{self.tenant} never fenced on {node}"
            time.sleep(0.02)
        while node in self.writable():
            assert time.monotonic() < deadline, f"{self.tenant} fenced on disk but still writable on {node}"
            time.sleep(0.02)

    # ---- the check -----------------------------------------------------------------------
    def writable(self) -> list[str]:
        """Nodes whose copy of the tenant accepts an INSERT through the application account now."""
        return writable_nodes(self.servers, self.password, self.tls)

    def owner(self) -> str:
        _, directory = cluster_clients(self.cluster)
        return directory.lookup(self.tenant).node

    def leftovers(self, owner: str, mid: str) -> list[str]:
        found = []
        for n in self.cluster.nodes:
            d = node_dir(self.cluster, n)
            found += [str(p) for p in (d / "journal").glob("*.json")]
            if (d / "migrations" / mid).exists():
                found.append(str(d / "migrations" / mid))
            if n != owner and (d / "tenants" / self.tenant).exists():
                found.append(str(d / "tenants" / self.tenant))
                found += [cmd for _, cmd in processes_mentioning(str(d / "tenants" / self.tenant))]
            for area in (d / "tenants" / ".trash", d / "tenants" / ".building", d / "migrations" / ".trash"):
                found += [str(p) for p in area.glob("*")]  # a removal or creation a crash cut short
        found += [cmd for _, cmd in processes_mentioning(mid)]
        return found

    def settled(self, mid: str, timeout_s: float = 90) -> str:
        """Wait until the invariant holds; returns the owner. Fails with what still differs."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                owner = self.owner()
                w = self.writable()
                left = self.leftovers(owner, mid)
                if w == [owner] and not left:
                    return owner
                state = f"owner {owner}, writable {w}, leftovers {left}"
            except Exception as exc:  # an agent still coming up
                state = repr(exc)
            assert time.monotonic() < deadline, f"not settled after {timeout_s}s: {state}"
            time.sleep(0.5)

    def check(self, mid: str) -> str:
        """The full check, then both agents restarted once more and the check again."""
        owner = self.settled(mid)
        self.stop()
        assert self.prober.double_writable == [], f"two writable servers at once: {self.prober.double_writable}"
        assert acked_ids_present(self.cluster, self.tenant, self.writer.acked) == set()
        assert len(self.writer.acked) > 20
        for n in self.cluster.nodes:
            self.restart_agent(n)
        time.sleep(3)  # a supervisor tick and a reconciliation on each
        assert self.settled(mid) == owner
        assert acked_ids_present(self.cluster, self.tenant, self.writer.acked) == set()
        return owner


def writable_nodes(servers: dict, password: str, tls=None, user: str = mariadb.APP_USER,
                   database: str = "acks") -> list[str]:
    """Of `servers` (node -> (host, port) of its copy of a tenant), the nodes whose copy accepts an
    INSERT into `database`.probe through the application account `user` now."""
    out = []
    for name, (host, port) in servers.items():
        try:
            conn = mariadb.connect(user=user, password=password, host=host, port=port,
                                   timeout_s=1, ssl_context=tls)
        except Exception:
            continue
        try:
            with conn.cursor() as cur:
                # A freeze (FLUSH TABLES WITH READ LOCK) makes a write wait, not fail: between the fence
                # reaching disk and read_only reaching the server, an unbounded probe would wait out the
                # whole freeze. Waiting for the lock is not accepting the write: give up after 1 s.
                cur.execute("SET SESSION lock_wait_timeout = 1")
                cur.execute(f"INSERT INTO `{database}`.probe VALUES (%s, -1, %s)", (name, time.time()))
            out.append(name)
        except Exception:
            pass
        finally:
            conn.close()
    return out


def directory_stopped(scenario: Scenario, node: str):
    """SIGSTOP the agent that serves the directory; returns a function that resumes it."""
    pid = scenario.agent_pid(node)
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)
