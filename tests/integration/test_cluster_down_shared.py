"""`cluster down` after an agent died (SIGKILL): no tenant process of the node survives, its shared server
(the one `mariadbd` of all its shared tenants) included."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from slacker import local_cluster
from slacker.agent.client import cluster_clients


def _servers(run_dir) -> list[str]:
    return subprocess.run(["pgrep", "-f", f"^/usr/sbin/mariadbd.*{run_dir}/"], capture_output=True,
                          text=True).stdout.split()


def test_down_after_the_agent_was_killed_stops_the_shared_server(make_cluster, short_tmp):
    cluster = make_cluster(nodes=1, name="down")
    run = short_tmp / "down"
    agents, _ = cluster_clients(cluster)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "x1", "kind": "shared"}, timeout_s=120)
    os.kill(int((run / "node-1" / "agent.pid").read_text()), signal.SIGKILL)
    assert _servers(run), "the shared server runs on after its agent died"
    local_cluster.down(run)
    deadline = time.monotonic() + 10
    while _servers(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _servers(run), "cluster down left the shared server running"
