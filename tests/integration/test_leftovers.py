"""No crash leaves files that need a person: an agent SIGKILLed inside the removal of a tenant's
files (a retired source after the flip, a target's partial copy after a rollback) is restarted,
finishes the removal, and the next move of that tenant to that node succeeds with no hand step,
no leftover files, one writable server (the directory's) and every acknowledged write on it."""

import os
import signal
import threading
import time

import pytest

from slacker.agent.client import cluster_clients
from slacker.procs import wait_gone

from benchkit.faults import Scenario
from benchkit.migration import node_dir, start_migration, wait_flipped, wait_migration, wait_phase


@pytest.fixture
def scenario(cluster):
    s = Scenario(cluster)
    yield s
    s.stop()


def migrate(s, target, **kw):
    return start_migration(s.cluster, s.tenant, target=target, lease_ttl_s=4, **kw)["id"]


def wait_log(s, node, text, timeout_s=90):
    """Until the node's agent log says `text` (a hold point reached)."""
    log = node_dir(s.cluster, node) / "agent.log"
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{node} never logged {text!r}"
        time.sleep(0.1)



def tenant_files(s, node):
    """Every file of the node's tenants directory, wherever a removal has put it."""
    root = node_dir(s.cluster, node) / "tenants"
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]


def leftovers(s, node):
    """What a removal left on `node`, which does not own the tenant: its directory, or anything in
    the trash, the half-built area or the quarantine."""
    root = node_dir(s.cluster, node) / "tenants"
    found = [str(root / s.tenant)] if (root / s.tenant).exists() else []
    for area in (".trash", ".building", ".quarantine"):
        found += [str(p) for p in (root / area).glob("*")]
    return found


def leftovers_after(s, node, within_s=10.0):
    """What is still left on `node` `within_s` after a result: a retired copy's files are deleted just
    after the migration reports it, not before."""
    deadline = time.monotonic() + within_s
    while (left := leftovers(s, node)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def move_and_check(s, source, target):
    """The next move of the tenant to `target` succeeds with no hand step, nothing is left on the
    node it leaves, and the usual invariant holds (one writable server, the directory's)."""
    mid = start_migration(s.cluster, s.tenant, target=target, lease_ttl_s=4)["id"]
    doc = wait_migration(s.cluster, source, mid, timeout_s=180)
    assert doc["result"] == "succeeded", doc.get("error")
    assert s.settled(mid) == target
    assert leftovers_after(s, source) == []
    return mid


def test_source_agent_killed_midway_through_retiring_its_copy(scenario):
    """The orphan of issue 41: the source agent SIGKILLed just after the flip, while it removes its
    retired copy. No hook into the removal: the agent is stepped (SIGSTOP/SIGCONT) through its
    cleanup and killed the moment part of the copy's files are gone."""
    s = scenario
    mid = migrate(s, "node-2", hold_s={"flipped": 2})
    wait_flipped(s.cluster, mid)
    before = len(tenant_files(s, "node-1"))
    assert before > 50
    pid = s.agent_pid("node-1")
    deadline = time.monotonic() + 120
    os.kill(pid, signal.SIGSTOP)
    try:
        while True:
            left = len(tenant_files(s, "node-1"))
            if 0 < left < before * 0.7:
                break
            assert left > 0, "the removal ran to its end between two steps"
            assert time.monotonic() < deadline, f"the removal never started ({left} of {before} files)"
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.0003)
            os.kill(pid, signal.SIGSTOP)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    assert wait_gone(pid, 10)
    s.restart_agent("node-1")
    _finished_forward_and_clean(s, mid, ended_before_kill=True)  # the files go after the result


def _finished_forward_and_clean(s, mid: str, ended_before_kill: bool = False) -> None:
    """After the source agent's restart: the move succeeded, node-2 owns the tenant, nothing is left on
    node-1, and moving the tenant back there works with no hand step. A move that had ended before the
    kill (its old copy's files are deleted after the result) is one the restarted agent never heard of."""
    if not ended_before_kill:
        assert wait_migration(s.cluster, "node-1", mid)["result"] == "succeeded"
    assert s.settled(mid) == "node-2"
    assert leftovers(s, "node-1") == []
    move_and_check(s, "node-2", "node-1")
    s.check(mid)


@pytest.mark.parametrize("step", ["renamed", "removing"])
def test_source_agent_killed_at_each_step_of_retiring(scenario, step):
    """Held by fault injection inside the removal: after the rename into the trash, and halfway
    through deleting it."""
    s = scenario
    mid = migrate(s, "node-2", hold_s={f"retire-{step}": 60})
    wait_log(s, "node-1", f"holding at retire-{step}")
    trash = node_dir(s.cluster, "node-1") / "tenants" / ".trash"
    [entry] = trash.iterdir()
    assert entry.name.startswith(f"tenant~{s.tenant}~retired~{mid}~")
    assert not (node_dir(s.cluster, "node-1") / "tenants" / s.tenant).exists()
    if step == "removing":  # the old copy's files are deleted after the move has its result
        agents, _ = cluster_clients(s.cluster)
        doc = agents["node-1"].request("GET", f"/v1/migrations/{mid}")
        assert doc["result"] == "succeeded" and not doc["active"], doc
    s.kill_agent("node-1")
    s.restart_agent("node-1")
    _finished_forward_and_clean(s, mid, ended_before_kill=step == "removing")


@pytest.mark.parametrize("step", ["renamed", "removing"])
def test_target_agent_killed_at_each_step_of_removing_a_partial_copy(scenario, step):
    """An aborted migration: the target's partial copy is being removed when its agent is killed."""
    s = scenario
    mid = migrate(s, "node-2", hold_s={"delta": 30, f"remove-{step}": 60})
    wait_phase(s.cluster, "node-1", mid, "delta", timeout_s=120)
    agents, _ = cluster_clients(s.cluster)
    # The abort waits for the target's removal (held): send it and do not wait for the answer.
    threading.Thread(target=lambda: _quiet(agents["node-1"].request, "POST", f"/v1/migrations/{mid}/abort", {}),
                     daemon=True).start()
    wait_log(s, "node-2", f"holding at remove-{step}")
    [entry] = (node_dir(s.cluster, "node-2") / "tenants" / ".trash").iterdir()
    assert entry.name.startswith(f"tenant~{s.tenant}~rolled-back~{mid}~")
    s.kill_agent("node-2")
    assert wait_migration(s.cluster, "node-1", mid)["result"] == "aborted"
    s.restart_agent("node-2")
    assert s.settled(mid) == "node-1"
    assert leftovers(s, "node-2") == []
    move_and_check(s, "node-1", "node-2")
    s.check(mid)


def _quiet(fn, *a):
    try:
        fn(*a)
    except Exception:
        pass


def test_an_orphan_left_by_an_older_agent_is_moved_aside(scenario):
    """Files of no known tenant where the tenant would go (what an older agent's cut-short removal
    left): moved aside, kept, shown in `slacker status`, and the move there succeeds."""
    s = scenario
    orphan = node_dir(s.cluster, "node-2") / "tenants" / s.tenant
    (orphan / "data").mkdir(parents=True)
    (orphan / "data" / "ibdata1").write_bytes(b"x" * 1000)
    quarantine = orphan.parent / ".quarantine"
    deadline = time.monotonic() + 60
    while not (quarantine.is_dir() and any(quarantine.iterdir())):
        assert time.monotonic() < deadline, "the agent never moved the orphan aside"
        time.sleep(0.2)
    [moved] = quarantine.iterdir()
    assert (moved / "data" / "ibdata1").read_bytes() == b"x" * 1000
    agents, _ = cluster_clients(s.cluster)
    [warning] = agents["node-2"].request("GET", "/v1/status")["warnings"]
    assert str(moved) in warning and "no known tenant" in warning
    mid = start_migration(s.cluster, s.tenant, target="node-2", lease_ttl_s=4)["id"]
    assert wait_migration(s.cluster, "node-1", mid)["result"] == "succeeded"
    s.check(mid)


def test_the_owners_files_without_their_metadata_are_left_for_a_person(cluster):
    """A directory without tenant.json of a tenant the directory places on this very node is the
    owner's data: never moved, and `status` says what to do until it is whole again."""
    agents, _ = cluster_clients(cluster)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "own", "buffer_pool_bytes": 32 << 20}, timeout_s=180)
    root = node_dir(cluster, "node-1") / "tenants" / "own"
    backup = node_dir(cluster, "node-1") / "own.json.bak"  # outside tenants/: that would be moved aside
    (root / "tenant.json").rename(backup)
    deadline = time.monotonic() + 60
    while not agents["node-1"].request("GET", "/v1/status")["warnings"]:
        assert time.monotonic() < deadline, "no warning for the owner's files without metadata"
        time.sleep(0.2)
    time.sleep(3)  # a few more ticks: still not moved
    [warning] = agents["node-1"].request("GET", "/v1/status")["warnings"]
    assert str(root) in warning and "names this node" in warning and "tenant.json" in warning
    assert (root / "data").is_dir() and not (root.parent / ".quarantine").exists()
    backup.rename(root / "tenant.json")
    deadline = time.monotonic() + 60
    while agents["node-1"].request("GET", "/v1/status")["warnings"]:
        assert time.monotonic() < deadline, "the warning stayed after tenant.json came back"
        time.sleep(0.2)
