"""An agent SIGKILLed while it creates a tenant (here: inside the install tool's run that makes the node's
seed data directory) leaves nothing that needs a person: the half-built files and the tool are swept
when it restarts, and the directory entry the create had registered can be
deleted with `slacker tenant delete`, after which the same id is created again."""

import os
import shutil
import signal
import threading
import time

from click.testing import CliRunner

from slacker import local_cluster
from slacker.agent.client import AgentClient, cluster_clients
from slacker.cli import main
from slacker.errors import NotFound, SlackerError
from slacker.procs import pids_with_arg, read_pid, wait_gone

from benchkit.migration import node_dir


def test_tenant_delete_clears_what_a_create_killed_midway_left(cluster):
    agents, directory = cluster_clients(cluster)
    d = node_dir(cluster, "node-2")  # not the directory's node: the directory stays up
    building = d / "tenants" / ".building"
    seed_building = d / "seed" / ".building"
    # The node's seed (what mariadb-install-db makes, copied into each tenant) is made by its first create;
    # removing it makes this create run the install tool, a window wide enough to kill the agent in.
    shutil.rmtree(d / "seed", ignore_errors=True)
    pid = read_pid(d / "agent.pid")
    answer: list = []
    t = threading.Thread(target=lambda: answer.append(_create(agents["node-2"], "half")), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not (tools := pids_with_arg(f"--defaults-file={seed_building}/")):
        assert time.monotonic() < deadline, "mariadb-install-db never ran for the node's seed"
        time.sleep(0.02)
    assert [p.name.split("~")[0] for p in building.iterdir()] == ["half"], "not inside the create's layout"
    os.kill(pid, signal.SIGKILL)  # inside the layout
    assert wait_gone(pid, 10)
    try:
        # The killed agent's mariadb-install-db runs on: held still, so it is surely there when the
        # agent comes back (it would otherwise race the restart, writing as the sweep deletes).
        for tool in tools:
            _signal(tool, signal.SIGSTOP)
        t.join(30)
        assert directory.lookup("half").node == "node-2"  # registered before the layout began
        spec = cluster.node("node-2")
        local_cluster._spawn_agent(d)
        local_cluster._wait_answering(AgentClient(spec.url, cluster.token(), spec.name, timeout_s=5), d)
        assert pids_with_arg(f"--defaults-file={seed_building}/") == [], "the killed create's tools run on"
        assert not (d / "tenants" / "half").exists() and list(building.iterdir()) == []
        assert list(seed_building.iterdir()) == [], "the half-built seed was left"
    finally:
        for tool in pids_with_arg(f"--defaults-file={seed_building}/"):
            _signal(tool, signal.SIGKILL)

    cli = CliRunner()
    r = cli.invoke(main, ["tenant", "delete", "half", "--yes"])
    assert r.exit_code == 0, r.output
    try:
        directory.lookup("half")
        raise AssertionError("the directory still names an owner of half")
    except NotFound:
        pass
    r = cli.invoke(main, ["tenant", "create", "half", "--on", "node-2"])
    assert r.exit_code == 0, r.output
    assert agents[directory.lookup("half").node].request("GET", "/v1/tenants/half")["id"] == "half"


def _create(agent, tenant_id):
    try:
        return agent.request("POST", "/v1/tenants", {"id": tenant_id}, timeout_s=120)
    except SlackerError as exc:
        return exc


def _signal(pid, sig):
    """Signal a process found by its arguments a moment ago; one that has ended since (a short-lived
    helper the install tool ran with the same --defaults-file) needs nothing."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
