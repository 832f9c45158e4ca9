"""Failures injected in each phase: the source keeps serving with every acknowledged write,
and nothing of the migration is left behind on either node."""

import os
import signal
import time

import pytest

from slacker.agent.client import cluster_clients
from slacker.procs import alive, read_pid, wait_gone

from benchkit.migration import (acked_ids_present, create_loaded_tenant, evict_backup_tool, follow, node_dir,
                                processes_mentioning, start_migration, wait_migration, wait_phase, wait_reading_in)
from slacker.ackwriter import AckedWriter


@pytest.fixture
def loaded(cluster):
    create_loaded_tenant(cluster, "mig", rows=4000)
    writer = AckedWriter(follow(cluster, "mig"), rate_per_s=100).start()
    src_pid = read_pid(node_dir(cluster, "node-1") / "tenants/mig/run/mariadbd.pid")
    yield cluster, writer, src_pid
    writer.stop()


def assert_source_untouched(cluster, writer, src_pid, doc, phase):
    assert doc["result"] in ("failed", "aborted"), doc
    assert doc["error"]["phase"] == phase, doc["error"]
    time.sleep(0.5)
    writer.stop()
    _, directory = cluster_clients(cluster)
    own = directory.lookup("mig")
    assert (own.node, own.epoch) == ("node-1", 1)
    assert alive(src_pid), "the source process must be the same, never restarted"
    assert acked_ids_present(cluster, "mig", writer.acked) == set()
    assert len(writer.acked) > 50
    # the source still takes writes
    conn = follow(cluster, "mig").connection()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO shop.orders (item, qty) VALUES (1, 1)")
    deadline = time.monotonic() + 15
    while processes_mentioning(doc["id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(doc["id"]) == []
    assert processes_mentioning(str(node_dir(cluster, "node-2") / "tenants" / "mig")) == []
    assert not (node_dir(cluster, "node-2") / "tenants" / "mig").exists()
    agents, _ = cluster_clients(cluster)
    assert [t["id"] for t in agents["node-1"].request("GET", "/v1/tenants")["tenants"]] == ["mig"]


def test_transport_killed(loaded):
    cluster, writer, src_pid = loaded
    doc = start_migration(cluster, "mig", target="node-2", rate_bytes_per_s=1_000_000, pipe="pv")
    wait_phase(cluster, "node-1", doc["id"], "snapshot", min_bytes=200_000)
    agents, _ = cluster_clients(cluster)
    incoming = [m for m in agents["node-2"].request("GET", "/v1/status")["migrations"] if m["id"] == doc["id"]]
    port = str(incoming[0]["receiver_port"])
    ncs = [p for p, cmd in processes_mentioning(port) if cmd.split()[0].endswith("nc")]
    assert ncs, "no nc process found"
    for p in ncs:
        os.kill(p, signal.SIGKILL)
    doc = wait_migration(cluster, "node-1", doc["id"])
    assert_source_untouched(cluster, writer, src_pid, doc, "snapshot")


def test_extractor_killed_on_target(loaded):
    cluster, writer, src_pid = loaded
    doc = start_migration(cluster, "mig", target="node-2", rate_bytes_per_s=1_000_000)
    wait_phase(cluster, "node-1", doc["id"], "snapshot", min_bytes=200_000)
    target_dir = str(node_dir(cluster, "node-2") / "tenants" / "mig")
    ext = [p for p, cmd in processes_mentioning(target_dir) if "mbstream" in cmd]
    assert ext
    os.kill(ext[0], signal.SIGKILL)
    doc = wait_migration(cluster, "node-1", doc["id"])
    assert_source_untouched(cluster, writer, src_pid, doc, "snapshot")


def test_target_tenant_killed_during_delta(loaded):
    cluster, writer, src_pid = loaded
    doc = start_migration(cluster, "mig", target="node-2", hold_s={"delta": 4})
    wait_phase(cluster, "node-1", doc["id"], "delta", timeout_s=90)
    target_dir = node_dir(cluster, "node-2") / "tenants" / "mig"
    tpid = read_pid(target_dir / "run" / "mariadbd.pid")
    assert tpid and alive(tpid)
    os.kill(tpid, signal.SIGKILL)
    doc = wait_migration(cluster, "node-1", doc["id"])
    assert_source_untouched(cluster, writer, src_pid, doc, "delta")


def test_target_agent_stopped(loaded):
    cluster, writer, src_pid = loaded
    doc = start_migration(cluster, "mig", target="node-2", rate_bytes_per_s=1_000_000)
    wait_phase(cluster, "node-1", doc["id"], "snapshot", min_bytes=200_000)
    agent_pid = read_pid(node_dir(cluster, "node-2") / "agent.pid")
    os.kill(agent_pid, signal.SIGTERM)
    assert wait_gone(agent_pid, 30)
    doc = wait_migration(cluster, "node-1", doc["id"])
    assert_source_untouched(cluster, writer, src_pid, doc, "snapshot")


def test_abort_during_delta_and_second_migration_refused(loaded):
    cluster, writer, src_pid = loaded
    doc = start_migration(cluster, "mig", target="node-2", hold_s={"delta": 30})
    wait_phase(cluster, "node-1", doc["id"], "delta", timeout_s=90)
    from slacker.errors import Conflict
    with pytest.raises(Conflict, match="already migrating"):
        start_migration(cluster, "mig", target="node-2")
    agents, _ = cluster_clients(cluster)
    agents["node-1"].request("POST", f"/v1/migrations/{doc['id']}/abort", {})
    doc = wait_migration(cluster, "node-1", doc["id"], timeout_s=60)
    assert doc["result"] == "aborted"
    assert_source_untouched(cluster, writer, src_pid, doc, "delta")


def test_target_tenant_killed_while_source_frozen(loaded):
    """The target dies during the freeze: the source is unfrozen and blocked writes commit there."""
    cluster, writer, src_pid = loaded
    doc = start_migration(cluster, "mig", target="node-2", hold_s={"frozen": 3}, max_freeze_s=10)
    wait_phase(cluster, "node-1", doc["id"], "handover", timeout_s=90)
    time.sleep(0.5)  # inside the freeze now
    acked_before = len(writer.acked)
    time.sleep(1.0)
    assert len(writer.acked) <= acked_before + 1, "writes went through while frozen"
    tpid = read_pid(node_dir(cluster, "node-2") / "tenants" / "mig" / "run" / "mariadbd.pid")
    os.kill(tpid, signal.SIGKILL)
    doc = wait_migration(cluster, "node-1", doc["id"])
    assert_source_untouched(cluster, writer, src_pid, doc, "handover")


def test_preflight_refuses_non_innodb_and_warns_on_missing_primary_key(cluster):
    from slacker.client import resolve

    create_loaded_tenant(cluster, "pf", rows=100)
    conn = resolve("pf", cluster).connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE shop.nopk (a INT, b INT)")
        cur.execute("INSERT INTO shop.nopk VALUES (1, 2)")
    doc = wait_migration(cluster, "node-1", start_migration(cluster, "pf", target="node-2")["id"])
    assert doc["result"] == "succeeded"
    assert any("without a primary key" in w and "shop.nopk" in w for w in doc["warnings"])
    conn = resolve("pf", cluster).connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE shop.legacy (a INT PRIMARY KEY) ENGINE=Aria")
    doc = wait_migration(cluster, "node-2", start_migration(cluster, "pf", target="node-1")["id"])
    assert doc["result"] == "failed" and doc["error"]["phase"] == "preflight"
    assert "not in InnoDB" in doc["error"]["why"] and "shop.legacy (Aria)" in doc["error"]["why"]
    _, directory = cluster_clients(cluster)
    assert directory.lookup("pf").node == "node-2"
    with resolve("pf", cluster).connect().cursor() as cur:
        cur.execute("INSERT INTO shop.orders (item, qty) VALUES (1, 1)")
    assert not (node_dir(cluster, "node-1") / "tenants" / "pf").exists()


def test_a_cold_backup_tool_is_read_in_at_the_rate_and_an_abort_there_leaves_nothing(loaded, tmp_path, monkeypatch):
    # A backup tool not in memory is read in at the copy's rate before it starts (slacker.pagecache):
    # at 0.5 MB/s its 26 MB take most of a minute. An abort meanwhile ends the migration as aborted,
    # with no backup process ever started and the source serving every acknowledged write.
    # The source agent runs a private copy of the tool: another test's backup beside this one (parallel
    # workers) would read the shared one back into memory between its eviction and this copy's start.
    import shutil

    from slacker import mariadb

    from .test_router_handover import _kill_agent, _start_agent

    cluster, writer, src_pid = loaded
    private = tmp_path / "bin"
    private.mkdir()
    shutil.copy2(os.path.realpath(mariadb.find_program("mariabackup")), private / "mariabackup")
    monkeypatch.setenv("PATH", f"{private}:{os.environ['PATH']}")
    _kill_agent(cluster, "node-1")
    _start_agent(cluster, "node-1")
    if not evict_backup_tool():
        pytest.skip("mariabackup's pages could not be dropped from the page cache here")
    doc = start_migration(cluster, "mig", target="node-2", rate_bytes_per_s=500_000)
    cur = wait_reading_in(cluster, doc["id"])
    agents, _ = cluster_clients(cluster)
    assert cur["phase"] == "snapshot" and cur["bytes_done"] == 0
    assert not [p for p, cmd in processes_mentioning(doc["id"]) if "mariabackup" in cmd]  # not started yet
    time.sleep(1.0)
    later = agents["node-1"].request("GET", f"/v1/migrations/{doc['id']}")
    assert later["preread_bytes"] - cur["preread_bytes"] <= 1_000_000  # paced at 0.5 MB/s (one burst more)
    agents["node-1"].request("POST", f"/v1/migrations/{doc['id']}/abort", {})
    doc = wait_migration(cluster, "node-1", doc["id"], timeout_s=30)
    assert doc["result"] == "aborted", doc
    assert_source_untouched(cluster, writer, src_pid, doc, "snapshot")


def _migrate_cli(cluster, *args: str):
    """`slacker migrate mig --to node-2 ARGS` as a user runs it; returns the process and its migration's id."""
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-m", "slacker", "migrate", "mig", "--to", "node-2", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "SLACKER_CLUSTER": str(cluster.path)})
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + 60
    while True:
        running = [m for m in agents["node-1"].request("GET", "/v1/migrations")["migrations"] if m["active"]]
        if running:
            return p, running[0]["id"]
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)


def _error_line(p) -> tuple[str, str]:
    out, err = p.communicate(timeout=180)
    assert p.returncode == 8, (out, err)
    lines = err.strip().splitlines()
    assert lines[-1].startswith("slacker: error: migration ") and "Traceback" not in err, err
    return lines[-1], out


def _backup_log_lines(text: str) -> list[str]:
    """Lines of mariabackup's own log quoted in `text` ("[00] 2026-11-25 21:00:00 ..." and its kind)."""
    import re
    return re.findall(r"\[\d\d\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)


def test_target_agent_killed_mid_copy_is_one_line_naming_the_target(loaded):
    cluster, writer, src_pid = loaded
    p, mid = _migrate_cli(cluster, "--rate", "1MB/s")
    wait_phase(cluster, "node-1", mid, "snapshot", min_bytes=300_000)
    os.kill(read_pid(node_dir(cluster, "node-2") / "agent.pid"), signal.SIGKILL)
    line, out = _error_line(p)
    assert "the copy to node-2 broke" in line and "node-2's agent does not answer" in line, line
    assert "retry" in line and "slacker migrate mig --to node-2" in line, line
    assert _backup_log_lines(line) == [] and "BACKUP STAGE" not in line and len(line) < 400, line
    assert "producer stderr" not in out and _backup_log_lines(out) == []
    # The tool's output is still there for whoever needs it: the source agent's log keeps it.
    log = (node_dir(cluster, "node-1") / "agent.log").read_text(errors="replace")
    assert _backup_log_lines(log.split(mid, 1)[1]), "the backup tool's stderr is not in the source agent's log"


def test_backup_tool_killed(loaded):
    """SIGKILL leaves the tool no error of its own: the message says it was killed, with its last line."""
    cluster, writer, src_pid = loaded
    p, mid = _migrate_cli(cluster, "--rate", "1MB/s")
    wait_phase(cluster, "node-1", mid, "snapshot", min_bytes=300_000)
    for pid in [pid for pid, cmd in processes_mentioning(mid) if "mariabackup" in cmd]:
        os.kill(pid, signal.SIGKILL)
    line, out = _error_line(p)
    assert "the backup tool on node-1 failed" in line and "mariabackup was killed by SIGKILL" in line, line
    assert "; its last line: " in line and _backup_log_lines(line) == [] and len(line) < 500, line
    quoted = line.split("; its last line: ", 1)[1].rsplit(" (see node-1's agent log", 1)[0]
    assert quoted in (node_dir(cluster, "node-1") / "agent.log").read_text(errors="replace").split(mid, 1)[1]
    doc = wait_migration(cluster, "node-1", mid)
    assert_source_untouched(cluster, writer, src_pid, doc, "snapshot")


def test_backup_tool_failing_gives_its_own_error_line(loaded):
    """The source's server dies under the backup: mariabackup fails by itself, and the message
    quotes its error line, not its start-up log (which the source agent's log keeps)."""
    cluster, writer, src_pid = loaded
    p, mid = _migrate_cli(cluster, "--rate", "10MB/s")
    wait_phase(cluster, "node-1", mid, "snapshot", min_bytes=300_000)
    os.kill(src_pid, signal.SIGKILL)
    line, out = _error_line(p)
    assert "the backup tool on node-1 failed" in line and "mariabackup exited with code" in line, line
    quoted = line.split("; its error: ", 1)[1].rsplit(" (see node-1's agent log", 1)[0]
    tool_output = (node_dir(cluster, "node-1") / "agent.log").read_text(errors="replace").split(mid, 1)[1]
    assert quoted in tool_output and _backup_log_lines(line) == [] and len(line) < 500, line
    assert "slacker migrate mig --to node-2" in line
