"""A cutover the operator times (docs/migration.md, "Cutover"): a migration started with `--cutover manual`
copies, catches up and waits ready, the target applying every write while the source serves them, and cuts over
only on `--cutover-now`; a wait that outlasts `--cutover-timeout ...,abort` rolls back with the source serving;
a plan in the past or malformed is refused before anything starts. Both tenant kinds, writers through the router.
One cluster for the module, in order."""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.cli import main
from slacker.client import Endpoint, TenantClient, resolve
from slacker.procs import read_pid

from benchkit.faults import restart_agent
from benchkit.migration import acked_ids_present, create_loaded_tenant, node_dir, wait_migration

from .conftest import routed_cluster

pytestmark = pytest.mark.xdist_group("cutover")  # one cluster, in order, on one worker


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def cw():
    """node-1: whole-server tenant w1 (with data) and shared tenant s1; node-2: shared tenant s2."""
    with routed_cluster() as (cluster, run_dir, admin, listen):
        agents, directory = cluster_clients(cluster)
        create_loaded_tenant(cluster, "w1", rows=1000)
        made = {"w1": resolve("w1", cluster)}
        for tid, node in (("s1", "node-1"), ("s2", "node-2")):
            r = cli("tenant", "create", tid, "--shared", "--on", node)
            assert r.exit_code == 0, r.output
            made[tid] = resolve(tid, cluster)
        host, port = listen.rsplit(":", 1)
        yield SimpleNamespace(cluster=cluster, agents=agents, directory=directory, made=made, host=host,
                              port=int(port))


def routed_client(cw, tenant: str) -> TenantClient:
    ep = Endpoint(tenant, cw.host, cw.port, f"app@{tenant}", cw.made[tenant].password)
    return TenantClient(tenant, lambda: ep, reconnect_timeout_s=10)


def doc_of(cw, node: str, tenant: str) -> dict:
    return cw.agents[node].request("GET", f"/v1/migrations/{tenant}")


def ready_for(cw, tenant: str, seconds: float) -> list[dict]:
    """The source's documents, every 0.25 s for `seconds`, while the migration waits ready."""
    docs, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        d = doc_of(cw, "node-1", tenant)
        assert d["active"] and d["phase"] == "ready", (d["phase"], d.get("error"))
        docs.append(d)
        time.sleep(0.25)
    return docs


def writable(ep) -> bool:
    conn = ep.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@read_only")
            return cur.fetchone()[0] == 0
    finally:
        conn.close()


@pytest.mark.parametrize("tenant, verify", [("w1", False), ("s1", True)])
def test_a_manual_cutover_waits_ready_while_the_source_serves_then_goes_on_request(cw, tenant, verify):
    before = cw.directory.lookup(tenant)
    writer = AckedWriter(routed_client(cw, tenant), rate_per_s=50).start()
    try:
        r = cli("migrate", tenant, "--to", "node-2", "--rate", "50MB/s", "--cutover", "manual")
        # The command returns once the migration is ready: the agents keep it there.
        assert r.exit_code == 0, r.output
        assert "READY" in r.output and f"slacker migrate --cutover-now {tenant}" in r.output, r.output
        n0 = len(writer.acked)
        docs = ready_for(cw, tenant, 3.0)
        # Writes go on through the router, to the source: nothing is frozen and the directory did not move.
        assert len(writer.acked) - n0 >= 50, "writes stalled while ready"
        assert cw.directory.lookup(tenant).epoch == before.epoch
        assert writable(resolve(tenant, cw.cluster))
        r = docs[-1]["ready"]
        assert r["cutover"] == "manual" and r["waiting_for"].startswith("waiting for `slacker migrate --cutover-now`")
        # The lag is end to end and small under this load; the cost to the source is shown.
        assert r["keeps_up"] and r["lag_ms"] is not None and r["lag_p99_ms"] < 1000, r
        assert r["binlog_bytes"] > 0 and r["binlog_bytes_per_s"] > 0, r
        status = cli("status")
        assert status.exit_code == 0 and "ready" in status.output, status.output

        out = cli("migrate", "--cutover-now", tenant, *(["--verify"] if verify else []))
        assert out.exit_code == 0 and "cutting over now" in out.output, out.output
        doc = wait_migration(cw.cluster, "node-1", docs[-1]["id"], timeout_s=120)
        time.sleep(0.3)
    finally:
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    assert [p["name"] for p in doc["phases"]].count("ready") == 1
    if verify:  # --cutover-now --verify: compared after the wait, before the handover
        names = [p["name"] for p in doc["phases"]]
        assert names.index("verify") > names.index("ready") and doc["verified"] is True, names
    assert doc["freeze_ms"] is not None and doc["freeze_ms"] < 500
    after = cw.directory.lookup(tenant)
    assert (after.node, after.epoch) == ("node-2", before.epoch + 1)
    assert writer.acked and not writer.unknown, writer.errors
    assert acked_ids_present(cw.cluster, tenant, writer.acked) == set(), "acknowledged writes lost"


def test_a_wait_past_its_timeout_rolls_back_with_the_source_serving(cw):
    # w1 lives on node-2 now (the test before): it moves back, and the wait times out.
    before = cw.directory.lookup("w1")
    assert before.node == "node-2"
    r = cli("migrate", "w1", "--to", "node-1", "--cutover", "manual", "--cutover-timeout", "2s,abort", "--detach")
    assert r.exit_code == 0, r.output
    doc = doc_of(cw, "node-2", "w1")
    doc = wait_migration(cw.cluster, "node-2", doc["id"], timeout_s=120)
    assert doc["result"] == "aborted", doc
    assert doc["error"]["phase"] == "ready" and "--cutover-timeout" in doc["error"]["what"], doc["error"]
    assert "ready" in [p["name"] for p in doc["phases"]]
    assert cw.directory.lookup("w1") == before  # never flipped
    assert writable(resolve("w1", cw.cluster))
    incoming = [m for m in cw.agents["node-1"].request("GET", "/v1/migrations")["migrations"]
                if m.get("direction") == "incoming"]
    assert incoming == [], incoming  # nothing left on the target


def test_a_source_agent_killed_while_ready_resumes_the_wait_and_loses_nothing(cw):
    # s1 moved to node-2 in the first test: node-2 is its source now.
    before = cw.directory.lookup("s1")
    src, dst = before.node, ("node-1" if before.node == "node-2" else "node-2")
    writer = AckedWriter(routed_client(cw, "s1"), writer_id=2, rate_per_s=50).start()  # 1 wrote s1's ids before
    try:
        r = cli("migrate", "s1", "--to", dst, "--cutover", "manual", "--cutover-timeout", "10m,abort")
        assert r.exit_code == 0 and "READY" in r.output, r.output
        mid = doc_of(cw, src, "s1")["id"]
        restart_agent(cw.cluster, src)  # SIGKILL, then started again as its service manager would
        # The restarted agent resumes the same migration, still ready; the writes never stopped.
        deadline = time.monotonic() + 30
        while True:
            d = doc_of(cw, src, "s1")
            if d["phase"] == "ready" and d.get("ready") and d["ready"]["keeps_up"]:
                break
            assert d["active"] and time.monotonic() < deadline, (d["phase"], d.get("error"))
            time.sleep(0.2)
        assert d["id"] == mid and d["recovered"], d
        assert d["ready"]["cutover_timeout"] == "600s,abort"  # its options came back from the journal
        n0 = len(writer.acked)
        time.sleep(1.0)
        assert len(writer.acked) > n0 and cw.directory.lookup("s1") == before, (n0, writer.errors, len(writer.unknown))
        out = cli("migrate", "--cutover-now", "s1")
        assert out.exit_code == 0, out.output
        doc = wait_migration(cw.cluster, src, mid, timeout_s=120)
        time.sleep(0.3)
    finally:
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    after = cw.directory.lookup("s1")
    assert (after.node, after.epoch) == (dst, before.epoch + 1)
    assert writer.acked and not writer.unknown, writer.errors
    assert acked_ids_present(cw.cluster, "s1", writer.acked) == set(), "acknowledged writes lost"


@pytest.mark.parametrize("args, says", [
    (("--cutover", "at=2020-01-01T00:00"), "is in the past"),
    (("--cutover", "window=25:00-02:00"), "is malformed"),
    (("--cutover", "sometime"), "is not a cutover plan"),
    (("--cutover", "window=02:00-04:00,Mars/Olympus"), "unknown time zone"),
    (("--cutover", "manual", "--mode", "stop-and-copy"), "needs a live migration"),
    (("--cutover", "manual", "--cutover-timeout", "2s,later"), "unknown action"),
])
def test_a_plan_in_the_past_or_malformed_is_refused_in_one_line(cw, args, says):
    own = cw.directory.lookup("w1")
    other = "node-1" if own.node == "node-2" else "node-2"

    def runs():
        return [m["id"] for m in cw.agents[own.node].request("GET", "/v1/migrations")["migrations"]
                if m["tenant"] == "w1"]

    before = runs()
    r = cli("migrate", "w1", "--to", other, *args)
    assert r.exit_code != 0 and says in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    assert cw.directory.lookup("w1") == own
    assert runs() == before  # nothing started


def test_cutover_now_without_a_waiting_migration_is_refused_in_one_line(cw):
    r = cli("migrate", "--cutover-now", "s2")
    assert r.exit_code != 0 and "no migration s2" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_the_source_server_killed_while_ready_rolls_back_and_it_serves_again(cw):
    before = cw.directory.lookup("w1")  # on node-2 since the first test
    other = "node-1" if before.node == "node-2" else "node-2"
    r = cli("migrate", "w1", "--to", other, "--cutover", "manual")
    assert r.exit_code == 0 and "READY" in r.output, r.output
    mid = doc_of(cw, before.node, "w1")["id"]
    pid = read_pid(node_dir(cw.cluster, before.node) / "tenants" / "w1" / "run" / "mariadbd.pid")
    os.kill(pid, signal.SIGKILL)
    doc = wait_migration(cw.cluster, before.node, mid, timeout_s=60)
    assert doc["result"] == "failed" and doc["error"]["phase"] == "ready", doc.get("error")
    assert cw.directory.lookup("w1") == before  # never flipped
    incoming = [m for m in cw.agents[other].request("GET", "/v1/migrations")["migrations"]
                if m.get("direction") == "incoming"]
    assert incoming == [], incoming  # nothing left on the target
    deadline = time.monotonic() + 30  # its supervisor brings the source's server back, writable
    while True:
        try:
            if writable(resolve("w1", cw.cluster)):
                break
        except Exception:  # noqa: BLE001 - still restarting
            pass
        assert time.monotonic() < deadline, "the source's server did not come back"
        time.sleep(0.5)
