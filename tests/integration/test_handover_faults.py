"""Every kind of fault, before and after the directory's compare-and-set (the point of no return).

Before it the migration rolls back: the source is unfenced and serving. After it the migration
only goes forward: the target becomes writable and the source is retired. Either way, exactly
one server accepts writes, the directory names it, and every acknowledged write is on it.
"""

import time

import pytest

from slacker.agent.client import cluster_clients
from slacker.errors import Conflict

from benchkit.faults import Scenario, directory_stopped
from benchkit.migration import (wait_flipped, evict_backup_tool, processes_mentioning, start_migration, wait_migration, wait_phase,
                                wait_reading_in)

FAST = {"lease_ttl_s": 4}


@pytest.fixture
def scenario(cluster):
    s = Scenario(cluster)
    yield s
    s.stop()


@pytest.fixture
def scenario3(make_cluster):
    """Three nodes; node-3 serves the directory and takes no part in the migration."""
    s = Scenario(make_cluster(nodes=3, directory_node="node-3"))
    yield s
    s.stop()


def migrate(s, **kw):
    return start_migration(s.cluster, s.tenant, target="node-2", **FAST, **kw)["id"]


def result(s, mid, timeout_s=120):
    agents, _ = cluster_clients(s.cluster)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            doc = agents["node-1"].request("GET", f"/v1/migrations/{mid}", timeout_s=5)
            if not doc["active"]:
                return doc
        except Exception:
            pass  # the source agent is being restarted
        assert time.monotonic() < deadline, "migration did not end"
        time.sleep(0.3)


# ---- --abort ----------------------------------------------------------------------------------
def test_abort_while_fenced_rolls_back(scenario):
    s = scenario
    # The abort cuts the hold short; a long hold keeps a loaded machine from reaching the flip first.
    mid = migrate(s, hold_s={"fenced": 20}, max_freeze_s=30)
    s.wait_fenced()
    assert s.writable() == [], "fenced source and fenced target: nobody takes writes"
    agents, _ = cluster_clients(s.cluster)
    agents["node-1"].request("POST", f"/v1/migrations/{mid}/abort", {})
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
    assert doc["result"] == "aborted" and doc["epoch_after"] is None
    assert s.check(mid) == "node-1"


def test_abort_after_flip_is_refused_and_it_finishes(scenario):
    s = scenario
    mid = migrate(s, hold_s={"flipped": 4})
    wait_flipped(s.cluster, mid)
    agents, _ = cluster_clients(s.cluster)
    with pytest.raises(Conflict, match="past the point of no return"):
        agents["node-1"].request("POST", f"/v1/migrations/{mid}/abort", {})
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
    assert doc["result"] == "succeeded"
    assert s.check(mid) == "node-2"


# ---- SIGKILL of the source agent ----------------------------------------------------------------
def test_source_agent_killed_while_it_reads_the_backup_tool_in(scenario):
    # A cold backup tool is read into memory at the copy's rate before it starts (slacker.pagecache):
    # at 0.5 MB/s that is most of a minute in which the journal says snapshot and nothing runs yet.
    s = scenario
    if not evict_backup_tool():
        pytest.skip("mariabackup's pages could not be dropped from the page cache here")
    mid = start_migration(s.cluster, s.tenant, target="node-2", rate_bytes_per_s=500_000, **FAST)["id"]
    wait_reading_in(s.cluster, mid)
    s.kill_agent("node-1")
    assert not [p for p, cmd in processes_mentioning(mid) if "mariabackup" in cmd]
    assert s.writable() == ["node-1"], "the source serves on while its agent is down"
    s.restart_agent("node-1")
    doc = result(s, mid)
    assert doc["result"] == "failed" and doc["recovered"]
    assert s.check(mid) == "node-1"  # nothing left on the target, every acknowledged write on the source


def test_source_agent_killed_while_fenced(scenario):
    s = scenario
    mid = migrate(s, hold_s={"fenced": 30}, max_freeze_s=60)
    s.wait_fenced()
    s.kill_agent("node-1")
    time.sleep(1)
    assert s.writable() == [], "the fence outlives the agent and its freeze connection"
    s.restart_agent("node-1")
    doc = result(s, mid)
    assert doc["result"] == "failed" and doc["recovered"]
    assert s.check(mid) == "node-1"


def test_source_agent_killed_after_flip(scenario):
    s = scenario
    mid = migrate(s, hold_s={"flipped": 30})
    wait_flipped(s.cluster, mid)
    s.kill_agent("node-1")  # the directory's agent too, in a two-node cluster
    time.sleep(2)
    assert "node-1" not in s.writable(), "the retired source stays fenced"
    s.restart_agent("node-1")
    doc = result(s, mid)
    assert doc["result"] == "succeeded"
    assert s.check(mid) == "node-2"


# ---- SIGKILL of the target agent ----------------------------------------------------------------
def test_target_agent_killed_during_delta(scenario):
    s = scenario
    mid = migrate(s, hold_s={"delta": 5})
    wait_phase(s.cluster, "node-1", mid, "delta", timeout_s=90)
    s.kill_agent("node-2")
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=90)
    assert doc["result"] == "failed"
    s.restart_agent("node-2")
    assert s.check(mid) == "node-1"


def test_target_agent_killed_after_flip_finishes_forward(scenario):
    s = scenario
    mid = migrate(s, hold_s={"flipped": 3})
    wait_flipped(s.cluster, mid)
    agents, _ = cluster_clients(s.cluster)
    s.kill_agent("node-2")
    deadline = time.monotonic() + 30
    while True:
        doc = agents["node-1"].request("GET", f"/v1/migrations/{mid}")
        if doc["phase"] == "finishing" and doc["finishing_reason"]:
            break
        assert doc["active"] and time.monotonic() < deadline, doc
        time.sleep(0.2)
    assert "node-2" in doc["finishing_reason"]
    with pytest.raises(Conflict, match="past the point of no return"):
        agents["node-1"].request("POST", f"/v1/migrations/{mid}/abort", {})
    s.restart_agent("node-2")
    try:
        agents["node-1"].request("POST", f"/v1/migrations/{mid}/finish", {})
    except Conflict as exc:
        # The machine's own backoff retry may reach the restarted agent before our request does.
        assert "already ended" in str(exc) and "succeeded" in str(exc), exc
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
    assert doc["result"] == "succeeded"
    assert s.check(mid) == "node-2"


# ---- SIGKILL of the source tenant's server --------------------------------------------------------
def test_source_server_killed_during_delta(scenario):
    s = scenario
    mid = migrate(s, hold_s={"delta": 3})
    wait_phase(s.cluster, "node-1", mid, "delta", timeout_s=90)
    s.kill_tenant_server("node-1")
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=90)
    assert doc["result"] == "failed"
    assert s.check(mid) == "node-1"


def test_source_server_killed_after_flip(scenario):
    s = scenario
    mid = migrate(s, hold_s={"flipped": 3})
    wait_flipped(s.cluster, mid)
    s.kill_tenant_server("node-1")
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
    assert doc["result"] == "succeeded"
    assert s.check(mid) == "node-2"


# ---- SIGKILL of the target tenant's server --------------------------------------------------------
def test_target_server_killed_while_frozen(scenario):
    """Before the flip: the target cannot confirm the final position, the source is unfrozen."""
    s = scenario
    mid = migrate(s, hold_s={"frozen": 3}, max_freeze_s=30)
    wait_phase(s.cluster, "node-1", mid, "handover", timeout_s=90)
    time.sleep(0.5)
    s.kill_tenant_server("node-2")
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=90)
    assert doc["result"] == "failed" and doc["epoch_after"] is None
    assert s.check(mid) == "node-1"


def test_target_server_killed_after_flip(scenario):
    """Promoted, durable, then killed: restarted by the activation, nothing acknowledged lost."""
    s = scenario
    mid = migrate(s, hold_s={"flipped": 3})
    wait_flipped(s.cluster, mid)
    s.kill_tenant_server("node-2")
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
    assert doc["result"] == "succeeded"
    assert s.check(mid) == "node-2"


# ---- the directory unreachable ---------------------------------------------------------------------
@pytest.mark.slow
def test_directory_stopped_while_fenced_then_abort(scenario3):
    """No directory needed to roll back: the abort unfences the source."""
    s = scenario3
    mid = migrate(s, hold_s={"fenced": 5}, max_freeze_s=30)
    # The operator's clients know the nodes from before the outage (the members are in the directory).
    agents, _ = cluster_clients(s.cluster)
    s.wait_fenced()
    resume = directory_stopped(s, "node-3")
    try:
        agents["node-1"].request("POST", f"/v1/migrations/{mid}/abort", {})
        doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
        assert doc["result"] == "aborted"
    finally:
        resume()
    assert s.check(mid) == "node-1"


def test_directory_stopped_at_the_flip_fails_closed(scenario3):
    """The flip's outcome is unknown while the directory is stopped: nobody takes writes until it
    answers, then the migration goes the way the directory says; the outage is reported."""
    s = scenario3
    # The directory stops inside the hold, so the compare-and-set is sent to a stopped directory.
    mid = migrate(s, hold_s={"fenced": 4}, max_freeze_s=30)
    agents, _ = cluster_clients(s.cluster)  # before the outage: the members are in the directory
    s.wait_fenced()
    resume = directory_stopped(s, "node-3")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert s.writable() == []
            doc = agents["node-1"].request("GET", f"/v1/migrations/{mid}")
            if "directory unreachable" in (doc.get("finishing_reason") or ""):
                break
            assert time.monotonic() < deadline, doc
            time.sleep(0.5)
        assert doc["active"]
        time.sleep(4)  # an outage of at least 4 s, still failing closed
        assert s.writable() == []
        with pytest.raises(Conflict, match="point of no return"):
            agents["node-1"].request("POST", f"/v1/migrations/{mid}/abort", {})
    finally:
        resume()
    doc = wait_migration(s.cluster, "node-1", mid, timeout_s=60)
    assert doc["result"] == "succeeded"
    assert doc["directory_outage_s"] >= 4
    assert s.check(mid) == "node-2"
