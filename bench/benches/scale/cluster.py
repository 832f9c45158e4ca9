"""A local cluster for the scale bench: N agents, a three-member etcd directory, a router; and what its
processes cost, read from /proc."""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from slacker import local_cluster, local_etcd
from slacker.procs import read_pid
from slacker.router import local as local_router

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port(host: str) -> int:
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included), in seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree(pid: int) -> list[int]:
    """The process and its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def memory_mib(pid: int) -> dict:
    """RSS and Pss of a process, MiB (0 if it is gone)."""
    try:
        roll = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {"rss": 0.0, "pss": 0.0}
    get = lambda k: int(re.search(rf"^{k}:\s+(\d+)", roll, re.M).group(1)) / 1024  # noqa: E731
    return {"rss": get("Rss"), "pss": get("Pss")}


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


@dataclass
class ScaleCluster:
    run_dir: Path
    nodes: int
    first_address: str
    port_range: str
    path: Path | None = None
    router_admin: str | None = None
    router_listen: str | None = None
    started: list[str] = field(default_factory=list)

    def up(self) -> None:
        api = free_port(self.first_address)
        client, peer = free_port(self.first_address), free_port(self.first_address)
        while len({api, client, peer}) < 3:
            peer = free_port(self.first_address)
        self.path = local_cluster.up(self.run_dir, nodes=self.nodes, first_address=self.first_address, api_port=api,
                                     port_range=self.port_range, directory="etcd", etcd_client_port=client,
                                     etcd_peer_port=peer)
        self.router_admin = local_router.start(self.run_dir, self.path, "127.0.0.1:0")
        self.router_listen = local_router.listening(self.run_dir)

    def down(self) -> None:
        local_router.stop(self.run_dir)
        local_cluster.down(self.run_dir, purge=True)

    def agent_pids(self) -> list[int]:
        return [p for p in (read_pid(self.run_dir / f"node-{i + 1}" / "agent.pid") for i in range(self.nodes))
                if p is not None]

    def etcd_pids(self) -> list[int]:
        etcd_dir = self.run_dir / "etcd"
        return [p for p in (local_etcd.member_pid(etcd_dir, m.name) for m in local_etcd.members_of(etcd_dir))
                if p is not None]

    def etcd_endpoints(self) -> list[str]:
        return [m.client_url for m in local_etcd.members_of(self.run_dir / "etcd")]

    def router_pids(self) -> list[int]:
        pid = read_pid(self.run_dir / "router" / "router.pid")
        return tree(pid) if pid is not None else []
