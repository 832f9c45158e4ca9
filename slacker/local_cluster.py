"""A local cluster on one machine: N agents on their own loopback addresses.

`up` writes a token, a cluster file and one agent config per node under a run
directory, starts the agents as daemons and waits until each answers. Each
node gets its own 127.0.0.x address, so a tenant keeps its port when it moves
between local nodes, and its own data root.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from .agent.client import AgentClient
from .config import load_agent_config, load_cluster, write_toml
from .errors import AgentUnavailable, Conflict, InvalidInput, SlackerError
from .mariadb import write_secret
from .procs import alive as _alive, read_pid as _read_pid
from .tenants import TenantManager

DEFAULT_API_PORT = 7701
START_TIMEOUT_S = 90.0


def up(run_dir: Path, nodes: int = 2, first_address: str = "127.0.0.2", api_port: int = DEFAULT_API_PORT,
       port_range: str = "13306-23305", directory_node: str = "node-1", fault_injection: bool = False) -> Path:
    """Start `nodes` local agents; returns the cluster file path. Re-running starts missing agents.

    `directory_node` serves the directory; `fault_injection` lets migrations pause at named points
    (tests and rehearsals only)."""
    if not 1 <= nodes <= 64:
        raise InvalidInput(f"--nodes {nodes} is out of range", "a local cluster has 1 to 64 nodes", "")
    try:
        base = ipaddress.IPv4Address(first_address)
    except ValueError:
        raise InvalidInput(f"invalid address {first_address!r}", "expected an IPv4 loopback address",
                           "for example 127.0.0.2") from None
    if not base.is_loopback or not (base + nodes - 1).is_loopback:
        raise InvalidInput(f"address {first_address} with {nodes} nodes leaves 127.0.0.0/8",
                           "a local cluster lives on loopback", "use 127.0.0.2")
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    cluster_file = run_dir / "cluster.toml"
    token_file = run_dir / "token"
    if cluster_file.exists():
        existing = load_cluster(str(cluster_file))
        if len(existing.nodes) != nodes:
            raise Conflict(f"a cluster with {len(existing.nodes)} nodes is already set up in {run_dir}",
                           f"you asked for {nodes}", f"run `slacker cluster down --purge --dir {run_dir}` first")
    if not token_file.exists():
        write_secret(token_file, secrets.token_hex(32) + "\n")
    specs = []
    for i in range(nodes):
        name = f"node-{i + 1}"
        host = str(base + i)
        specs.append({"name": name, "url": f"http://{host}:{api_port}", "tenant_host": host})
    if directory_node not in {s["name"] for s in specs}:
        raise InvalidInput(f"directory node {directory_node!r} is not one of the {nodes} nodes",
                           "it must be node-1 ... node-N", "for example --directory-node node-1")
    write_toml(cluster_file, {"token_file": str(token_file), "directory": directory_node}, {"nodes": specs},
               header="Slacker cluster file, written by `slacker cluster up`.")
    for spec in specs:
        node_dir = run_dir / spec["name"]
        node_dir.mkdir(exist_ok=True)
        write_toml(node_dir / "agent.toml", {
            "node": spec["name"], "cluster": str(cluster_file), "data_root": str(node_dir),
            "listen": f"{spec['tenant_host']}:{api_port}", "tenant_host": spec["tenant_host"],
            "port_range": port_range, "fault_injection": fault_injection},
            header=f"Agent config of {spec['name']}, written by `slacker cluster up`.")
    cluster = load_cluster(str(cluster_file))
    token = cluster.token()
    # The directory node first: the others look tenants up there.
    specs.sort(key=lambda s: s["name"] != directory_node)
    for spec in specs:
        client = AgentClient(spec["url"], token, spec["name"], timeout_s=5)
        if _answers(client):
            continue
        _spawn_agent(run_dir / spec["name"])
    for spec in specs:
        _wait_answering(AgentClient(spec["url"], token, spec["name"], timeout_s=5), run_dir / spec["name"])
    return cluster_file


def _answers(client: AgentClient) -> bool:
    try:
        client.request("GET", "/v1/status")
        return True
    except AgentUnavailable:
        return False


def _spawn_agent(node_dir: Path) -> None:
    log = open(node_dir / "agent.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "slacker", "agent", "--config", str(node_dir / "agent.toml")],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True)
    log.close()
    (node_dir / "agent.pid").write_text(f"{proc.pid}\n")


def _wait_answering(client: AgentClient, node_dir: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _answers(client):
            return
        pid = _read_pid(node_dir / "agent.pid")
        if pid is None or not _alive(pid):
            break
        time.sleep(0.2)
    tail = " | ".join((node_dir / "agent.log").read_text(errors="replace").strip().splitlines()[-6:]) \
        if (node_dir / "agent.log").exists() else "no log"
    raise AgentUnavailable(f"agent {client.name} did not come up", tail, f"see {node_dir / 'agent.log'}")


def down(run_dir: Path, purge: bool = False, timeout_s: float = 60.0) -> list[str]:
    """Stop every agent of the local cluster and its tenants; `purge` also removes the run dir."""
    run_dir = run_dir.resolve()
    cluster_file = run_dir / "cluster.toml"
    if not cluster_file.exists():
        raise SlackerError(f"no local cluster in {run_dir}", "cluster.toml is missing",
                           "pass --dir, or nothing is running")
    cluster = load_cluster(str(cluster_file))
    token = cluster.token()
    stopped = []
    for spec in reversed(list(cluster.nodes.values())):  # the directory node last
        node_dir = run_dir / spec.name
        client = AgentClient(spec.url, token, spec.name, timeout_s=10)
        pid = _read_pid(node_dir / "agent.pid")
        try:
            client.request("POST", "/v1/shutdown", {"stop_tenants": True})
        except AgentUnavailable:
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGTERM)
        if pid is not None:
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        # Whatever the agent did, no tenant process of this node may survive `down`.
        agent_cfg = node_dir / "agent.toml"
        if agent_cfg.exists():
            cfg = load_agent_config(agent_cfg)
            mgr = TenantManager(cfg.data_root, host=cfg.tenant_host, node=cfg.node, port_range=cfg.port_range)
            for t in mgr.list():
                mgr.stop_tenant(t)
        (node_dir / "agent.pid").unlink(missing_ok=True)
        stopped.append(spec.name)
    if purge:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)
    return stopped
