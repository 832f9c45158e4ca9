"""A target agent SIGKILLed while mariabackup prepares the copy: the prepare runs on in a session of
its own. When the restarted agent removes that copy (the directory never named it), the prepare must
go with it, or it writes on, by path, into the next copy of the tenant laid out at the same place."""

import os
import signal
import time

from slacker import local_cluster
from slacker.agent.client import AgentClient
from slacker.procs import pids_with_arg, read_pid, wait_gone

from benchkit.migration import create_loaded_tenant, node_dir, start_migration, wait_migration


def test_the_copy_removed_after_a_kill_takes_its_prepare_with_it(cluster):
    create_loaded_tenant(cluster, "mig", rows=4000)
    d = node_dir(cluster, "node-2")
    datadir = d / "tenants" / "mig" / "data"
    mid = start_migration(cluster, "mig", target="node-2", lease_ttl_s=4)["id"]
    deadline = time.monotonic() + 120
    while not (prepare := pids_with_arg(f"--target-dir={datadir}")):
        assert time.monotonic() < deadline, "the target never prepared the copy"
        time.sleep(0.01)
    pid = read_pid(d / "agent.pid")
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10)
    try:
        for p in prepare:  # held still: surely there when the agent comes back, however fast it is
            os.kill(p, signal.SIGSTOP)
        doc = wait_migration(cluster, "node-1", mid)
        assert doc["result"] == "failed"
        spec = cluster.node("node-2")
        local_cluster._spawn_agent(d)
        local_cluster._wait_answering(AgentClient(spec.url, cluster.token(), spec.name, timeout_s=5), d)
        deadline = time.monotonic() + 60
        while (d / "tenants" / "mig").exists():
            assert time.monotonic() < deadline, "the restarted target never removed the copy"
            time.sleep(0.1)
        assert pids_with_arg(f"--target-dir={datadir}") == [], "the copy's prepare runs on after its removal"
    finally:
        for p in pids_with_arg(f"--target-dir={datadir}"):
            os.kill(p, signal.SIGKILL)
    doc = wait_migration(cluster, "node-1", start_migration(cluster, "mig", target="node-2", lease_ttl_s=4)["id"])
    assert doc["result"] == "succeeded", doc.get("error")
