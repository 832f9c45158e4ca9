"""`slacker migrate` as a user runs it: summary, --json, abort, and every bad-input path."""

import json
import signal
import subprocess
import sys
import time

from benchkit.migration import create_loaded_tenant, node_dir, start_migration, wait_flipped, wait_phase
from .test_cli import one_line_error, slacker


def test_migrate_json_and_summary(cluster):
    create_loaded_tenant(cluster, "cli1", rows=800)
    rc, out, err = slacker("migrate", "cli1", "--to", "node-2", "--rate", "50MB/s", "--max-freeze", "300ms",
                           "--verify", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["result"] == "succeeded" and doc["verified"] is True and doc["max_freeze_ms"] == 300
    assert doc["rate_bytes_per_s"] == 50_000_000
    assert open(doc["series_path"]).readline().startswith("{")
    rc, out, err = slacker("migrate", "cli1", "--to", "node-1", "--mode", "stop-and-copy")
    assert rc == 0, err
    assert "SUCCEEDED" in out and "freeze window" in out and "PHASE" in out and "copy" in out
    assert slacker("locate", "cli1")[1].strip().startswith(cluster.node("node-1").tenant_host)


def test_verify_only_rehearses_the_move_and_leaves_the_source_alone(cluster):
    create_loaded_tenant(cluster, "cli3", rows=800)
    rc, out, err = slacker("migrate", "cli3", "--to", "node-2", "--verify-only")
    assert rc == 0, err
    assert "VERIFIED" in out and "checksums          equal at 0-" in out and "verify" in out, out
    assert "freeze window      -" in out, "never frozen"
    assert slacker("locate", "cli3", "--owner")[1].strip().startswith(cluster.node("node-1").tenant_host)
    assert not (node_dir(cluster, "node-2") / "tenants" / "cli3").exists(), "the rehearsal's copy is removed"
    one_line_error(*slacker("migrate", "cli3", "--to", "node-2", "--verify-only", "--mode", "stop-and-copy")[::2],
                   "--verify-only needs a live migration")


def test_migrate_bad_input(cluster):
    create_loaded_tenant(cluster, "cli2", rows=200)
    one_line_error(*slacker("migrate", "nope", "--to", "node-2")[::2], "tenant nope not found")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-9")[::2], "node-9", "not a member of the cluster")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-1")[::2], "already on node-1")
    one_line_error(*slacker("migrate", "cli2")[::2], "missing --to")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-2", "--rate", "20MBps")[::2], "invalid rate")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-2", "--max-freeze", "5 parsecs")[::2],
                   "invalid duration")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-2", "--max-freeze", "2m")[::2], "out of range")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-2", "--rate", "1MB/s", "--unthrottled")[::2],
                   "exclude each other")
    one_line_error(*slacker("migrate", "cli2", "--to", "node-2", "--mode", "teleport")[::2], "teleport")
    one_line_error(*slacker("migrate", "BAD", "--to", "node-2")[::2], "invalid tenant id")
    one_line_error(*slacker("migrate", "--abort", "cli2")[::2], "no migration")
    # the tenant after --set (as the README once showed it): say the form that works
    one_line_error(*slacker("migrate", "--set", "cli2", "setpoint=900ms")[::2], "the tenant goes before --set",
                   "slacker migrate cli2 --set setpoint=900ms")
    # a tenant already migrating
    doc = start_migration(cluster, "cli2", target="node-2", hold_s={"delta": 20})
    wait_phase(cluster, "node-1", doc["id"], "delta", timeout_s=60)
    one_line_error(*slacker("migrate", "cli2", "--to", "node-2")[::2], "already migrating")
    rc, out, err = slacker("status")
    assert f"migration {doc['id']}" in out and "phase delta" in out
    rc, out, err = slacker("migrate", "--abort", "cli2")
    assert rc == 0 and "aborting" in out


def test_ctrl_c_aborts(cluster):
    create_loaded_tenant(cluster, "cli3", rows=2000)
    # As typed in a terminal: SIGINT at its default disposition even when this suite runs as a background
    # job (which starts everything with SIGINT ignored, and an ignored signal stays ignored across exec).
    p = subprocess.Popen([sys.executable, "-m", "slacker", "migrate", "cli3", "--to", "node-2", "--rate", "200kB/s"],  # copy outlasts the 4 s
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(4)
    p.send_signal(2)  # SIGINT, as Ctrl-C
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert "aborting the migration" in err and "ABORTED" in out
    assert slacker("locate", "cli3")[1].strip().startswith(cluster.node("node-1").tenant_host)


def test_abort_after_flip_is_refused_with_one_line(cluster):
    from benchkit.migration import wait_migration

    create_loaded_tenant(cluster, "cli4", rows=300)
    doc = start_migration(cluster, "cli4", target="node-2", hold_s={"flipped": 6})
    wait_flipped(cluster, doc["id"], timeout_s=60)
    one_line_error(*slacker("migrate", "--abort", "cli4")[::2], "cannot be aborted", "past the point of no return")
    one_line_error(*slacker("migrate", "--abort", "--finish", "cli4")[::2], "exclude each other")
    rc, out, err = slacker("migrate", "--finish", "cli4")
    assert rc == 0 and "retrying its forward steps" in out
    assert wait_migration(cluster, "node-1", doc["id"], timeout_s=60)["result"] == "succeeded"
    one_line_error(*slacker("migrate", "--finish", "cli4")[::2], "no migration")
