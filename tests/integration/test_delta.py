"""The delta phase under conflicting writes, with the concurrent applier and catch-up mode (issue 13).

Real agents, real mariadbd on both nodes. Writers deliberately conflict: a few hot
rows updated by several connections at once, and a table without a primary key.
Outcomes checked: the migration succeeds, checksums are equal at the freeze and
after, every acknowledged write is on the new owner, and a SIGKILL of the new
owner's server right after the flip loses nothing.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pymysql
import pytest

from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.procs import alive, read_pid, wait_gone

from benchkit.migration import (acked_ids_present, create_loaded_tenant, follow, node_dir, start_migration,
                                tenant_checksums, wait_migration, wait_phase)


class ConflictingWriters:
    """Threads that update a few hot rows and a table without a primary key, back to back."""

    def __init__(self, cluster, tenant: str, threads: int = 4, hot_rows: int = 5, pause_s: float = 0.005) -> None:
        self.cluster, self.tenant = cluster, tenant
        self.pause_s = pause_s
        self.hot = list(range(hot_rows))
        self.stop_ev = threading.Event()
        self.commits = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def setup(self) -> "ConflictingWriters":
        def ddl(c):
            with c.cursor() as cur:
                cur.execute("CREATE TABLE shop.nopk (k INT, v INT, note VARCHAR(40))")  # no primary key
                cur.execute("INSERT INTO shop.nopk VALUES " + ",".join(f"({i % 20}, 0, 'n')" for i in range(200)))
                cur.execute("ALTER TABLE shop.items ADD COLUMN hits INT NOT NULL DEFAULT 0")
        follow(self.cluster, self.tenant).run(ddl)
        return self

    def start(self) -> "ConflictingWriters":
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(60)

    def _run(self, i: int) -> None:
        # One statement per transaction (autocommit): a writer holding row locks across statements
        # would make the source's freeze (FLUSH TABLES WITH READ LOCK) wait out its lock timeout.
        rng = random.Random(i)
        client = follow(self.cluster, self.tenant)
        statements = [
            ("UPDATE shop.items SET hits = hits + 1 WHERE id = %s", lambda: (rng.choice(self.hot),)),
            ("UPDATE shop.nopk SET v = v + 1 WHERE k = %s", lambda: (rng.randrange(20),)),
            ("INSERT INTO shop.nopk VALUES (%s, 1, 'ins')", lambda: (rng.randrange(20),)),
            ("DELETE FROM shop.nopk WHERE k = %s AND note = 'ins' LIMIT 1", lambda: (rng.randrange(20),)),
            ("UPDATE shop.items SET hits = hits + 1, name = CONCAT('hot-', id) WHERE id IN (%s, %s)",
             lambda: tuple(rng.sample(self.hot, 2))),
        ]
        while not self.stop_ev.is_set():
            sql, args = rng.choice(statements)
            try:
                conn = client.connection()
                with conn.cursor() as cur:
                    cur.execute(sql, args())
                with self.lock:
                    self.commits += 1
                # Paced (at most 1/pause_s statements/s per thread): the test is about conflicts, not
                # about outrunning the applier on a busy 2-core machine.
                time.sleep(self.pause_s)
            except (pymysql.err.MySQLError, *client.CONNECTION_ERRORS):
                client.close()
                time.sleep(0.02)
            except Exception:  # noqa: BLE001 - reconnecting through the directory during the flip
                time.sleep(0.05)


def migrate_under_conflicts(cluster, writers: int = 4, pause_s: float = 0.005, acked_per_s: float = 150,
                            **options):
    create_loaded_tenant(cluster, "mig", rows=2000)
    _, directory = cluster_clients(cluster)
    before = directory.lookup("mig")
    hot = ConflictingWriters(cluster, "mig", threads=writers, pause_s=pause_s).setup()
    writer = AckedWriter(follow(cluster, "mig"), rate_per_s=acked_per_s).start()
    hot.start()
    try:
        time.sleep(1.0)
        # The hold lets a backlog of conflicting transactions pile up for the applier to drain.
        doc = start_migration(cluster, "mig", target="node-2", verify=True, hold_s={"delta": 2}, **options)
        doc = wait_migration(cluster, "node-1", doc["id"], timeout_s=240)
        time.sleep(0.5)
    finally:
        hot.stop()
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    after = directory.lookup("mig")
    assert (after.node, after.epoch) == ("node-2", before.epoch + 1)
    assert doc["verified"] is True  # every table equal at one position, before the handover
    assert hot.commits > 100 and len(writer.acked) > 100
    assert acked_ids_present(cluster, "mig", writer.acked) == set(), "acknowledged writes lost"
    return doc, hot, writer


def test_concurrent_applier_with_hot_rows_and_a_table_without_primary_key(cluster):
    doc, hot, _ = migrate_under_conflicts(cluster, delta_applier="concurrent", delta_mpl=4)
    d = doc["delta"]
    assert d["applier"] == "concurrent" and d["mpl_mode"] == "fixed"
    assert doc["rounds"] and all(r["mpl"] == 4 for r in doc["rounds"])
    # Catch-up mode was left before the freeze, and it cost something measurable there, not in the freeze.
    assert d["durable"] and d["durable"]["durable"] is True
    assert d["catchup"] is False
    # Rows on the new owner: the table without a primary key kept every insert and delete.
    conn = follow(cluster, "mig").connection()
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(v) FROM shop.nopk")
        rows, total = cur.fetchone()
    assert rows >= 200 and total > 0


def test_adaptive_mpl_reports_its_choice(cluster):
    doc, _, _ = migrate_under_conflicts(cluster, delta_applier="concurrent", delta_mpl="auto")
    d = doc["delta"]
    assert d["applier"] == "concurrent" and d["mpl_mode"] == "auto"
    assert 1 <= d["mpl"] <= 16
    assert all(r["mpl"] is not None and 1 <= r["mpl"] <= 16 for r in doc["rounds"])


def test_serial_applier_still_works(cluster):
    # A paced load: four writers and the acked one wrote 536/s in a CI run where the serial applier's best was
    # 495/s, two of them 254/s where it applied 175/s, and each time the migration rightly refused to go on
    # (the delta cannot converge). This test is about the serial applier applying correctly, so its load is
    # bounded by its pacing (two writers at <= 40/s each, the acked one at 60/s: <= 140/s, about 100/s with
    # each statement's own time), not by the machine's speed.
    doc, _, _ = migrate_under_conflicts(cluster, writers=2, pause_s=0.025, acked_per_s=60, delta_applier="serial")
    assert doc["delta"]["applier"] == "serial"
    assert all(r["mpl"] == 0 for r in doc["rounds"])


def test_invalid_delta_options_are_refused_with_one_line(cluster):
    from slacker.errors import InvalidInput

    create_loaded_tenant(cluster, "mig", rows=100)
    with pytest.raises(InvalidInput, match="--delta-mpl 0 is out of range"):
        start_migration(cluster, "mig", target="node-2", delta_mpl=0)
    with pytest.raises(InvalidInput, match="unknown delta applier"):
        start_migration(cluster, "mig", target="node-2", delta_applier="magic")


def test_new_owner_killed_right_after_the_flip_loses_nothing(cluster):
    """Catch-up mode relaxed the target's commits; it must be fully durable once it owns the tenant."""
    create_loaded_tenant(cluster, "mig", rows=2000)
    writer = AckedWriter(follow(cluster, "mig"), rate_per_s=200).start()
    target_dir = node_dir(cluster, "node-2") / "tenants" / "mig"
    try:
        time.sleep(0.5)
        doc = start_migration(cluster, "mig", target="node-2", delta_applier="concurrent", delta_mpl="auto",
                              hold_s={"delta": 2})
        wait_phase(cluster, "node-1", doc["id"], "cleanup", timeout_s=180)
        # The directory names node-2 now. Kill its server at once, as a power cut would.
        tpid = read_pid(target_dir / "run" / "mariadbd.pid")
        # The cleanup phase activates the target first; wait until it takes writes (read_only off).
        admin = _target_admin(cluster)
        deadline = time.monotonic() + 30
        while True:
            with admin.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.innodb_flush_log_at_trx_commit, "
                            "@@GLOBAL.read_only")
                durability = cur.fetchone()
            if durability[2] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        admin.close()
        os.kill(tpid, signal.SIGKILL)
        assert wait_gone(tpid, 30)
        acked_at_kill = list(writer.acked)
        doc = wait_migration(cluster, "node-1", doc["id"], timeout_s=120)
        # The agent's supervisor restarts the owned tenant; the writer follows it.
        deadline = time.monotonic() + 90
        while True:
            npid = read_pid(target_dir / "run" / "mariadbd.pid")
            if npid and npid != tpid and alive(npid):
                break
            assert time.monotonic() < deadline, "the new owner was not restarted"
            time.sleep(0.5)
        time.sleep(2.0)
    finally:
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    assert durability == (1, 1, 0), "the target was promoted while still in catch-up mode"
    assert len(acked_at_kill) > 100
    assert acked_ids_present(cluster, "mig", writer.acked) == set(), "acknowledged writes lost in the crash"
    checks = tenant_checksums(cluster, "mig")
    assert checks.get("acks.log") is not None and checks.get("shop.items") is not None


def _target_admin(cluster):
    from slacker.config import load_agent_config
    from slacker.tenants import TenantManager

    cfg = load_agent_config(cluster.path.parent / "node-2" / "agent.toml")
    return TenantManager(cfg.data_root, host=cfg.tenant_host, node="node-2").get("mig").admin_connect()


def test_leaving_catchup_mode_puts_the_redo_log_on_disk_without_a_gtid_of_its_own(tenants):
    """innodb_flush_log_at_trx_commit=0 keeps the redo log in the server; restore_durability must sync it,
    prove it (Innodb_lsn_flushed), and must not add a transaction of the target's own to its binlog."""
    from slacker.mariadb import durability

    t = tenants.create("cu")
    conn = t.admin_connect(timeout_s=10)
    try:
        durability.relax_durability(conn)
        with conn.cursor() as cur:
            assert durability.durability(cur) == durability.RELAXED
            cur.execute("CREATE DATABASE cu")
            cur.execute("CREATE TABLE cu.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(200))")
            for _ in range(300):
                cur.execute("INSERT INTO cu.t (v) VALUES (REPEAT('x', 200))")
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            gtid_before = cur.fetchone()[0]
            lsn_written, _ = durability.redo_lsns(cur)
        out = durability.restore_durability(conn, t.datadir)
        with conn.cursor() as cur:
            assert durability.durability(cur) == durability.DURABLE
            _, flushed = durability.redo_lsns(cur)
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            gtid_after = cur.fetchone()[0]
    finally:
        conn.close()
    assert flushed >= lsn_written and out["redo_flushed_lsn"] >= out["redo_lsn"] >= lsn_written
    assert gtid_after == gtid_before, "leaving catch-up mode wrote to the binlog"


def test_changing_the_mpl_keeps_the_fetched_backlog(tenants):
    """set_mpl restarts only the SQL thread: the relay log (the backlog fetched so far) is kept, and the new
    number of workers is in effect."""
    from slacker import mariadb
    from slacker.delta.applier import SourceLink
    from slacker.delta.engine import EngineApplier

    src, dst = tenants.create("ms"), tenants.create("md")
    sconn, dconn = src.admin_connect(timeout_s=10), dst.admin_connect(timeout_s=10)
    ap = EngineApplier(lambda: dst.admin_connect(timeout_s=10), kind="concurrent", mpl=2, datadir=dst.datadir)
    try:
        with sconn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            start = cur.fetchone()[0] or ""
        ap.start(SourceLink(src.host, src.port, mariadb.REPL_USER, src.repl_password()), start)
        with sconn.cursor() as cur:
            cur.execute("CREATE DATABASE m")
            cur.execute("CREATE TABLE m.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
            for i in range(200):
                cur.execute("INSERT INTO m.t (v) VALUES (%s)", (i,))
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            end = cur.fetchone()[0]
        ap.wait_for(end, 60)

        def relay():
            with dconn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(f"SHOW SLAVE '{ap.CONNECTION}' STATUS")
                st = cur.fetchone()
            return st["Relay_Log_File"], st["Slave_IO_Running"], st["Slave_SQL_Running"]

        before = relay()
        ap.set_mpl(5)
        after = relay()
        with dconn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.slave_parallel_threads")
            threads = cur.fetchone()[0]
            deadline = time.monotonic() + 10
            while True:
                cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Slave_worker'")
                workers = cur.fetchone()[0]
                if workers == 5 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        # A full STOP/START SLAVE with GTID positions would have started a new relay log from scratch.
        assert after[0] == before[0] and after[1:] == ("Yes", "Yes")
        assert (ap.mpl, threads, workers) == (5, 5, 5)
    finally:
        ap.abort()
        sconn.close()
        dconn.close()


def test_a_freeze_not_granted_is_retried_like_an_attempt_over_budget(cluster):
    """FLUSH TABLES WITH READ LOCK waits for statements in flight: when one holds it back and cannot be
    interrupted, the attempt gives up within its share of the budget, nothing is frozen, and the
    handover is attempted again after more delta rounds instead of failing the migration at once."""
    create_loaded_tenant(cluster, "mig", rows=500)
    _, directory = cluster_clients(cluster)
    before = directory.lookup("mig")
    doc = start_migration(cluster, "mig", target="node-2", handover_attempts=2, hold_s={"delta": 2})
    wait_phase(cluster, "node-1", doc["id"], "delta", timeout_s=120)
    # One transaction holds a row lock and stays open; another statement waits for that row. Both run
    # as the tenant's own admin account, whose statements the freeze never interrupts (it interrupts
    # the application's) and the handover never waits for: so the lock waits for the statement in
    # flight, as an application statement the server could not interrupt would hold it.
    holder, waiter = _admin(cluster, "mig"), _admin(cluster, "mig")
    with holder.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("UPDATE shop.items SET name = 'held' WHERE id = 1")  # not committed
    th = threading.Thread(target=_update_row_1, args=(waiter,), daemon=True)
    th.start()
    try:
        doc = wait_migration(cluster, "node-1", doc["id"], timeout_s=120)
    finally:
        try:
            holder.rollback()
            holder.close()
        except pymysql.err.MySQLError:
            pass
        th.join(30)
    assert doc["result"] == "failed", (doc["handover_attempts"], doc.get("handover_steps_ms"), doc["rounds"][-1:])
    assert doc["error"]["what"].startswith("handover did not fit"), doc["error"]
    assert "lock: not granted" in doc["error"]["why"]
    attempts = doc["handover_attempts"]
    assert [a["outcome"] for a in attempts] == ["over budget", "over budget"], attempts
    # Nothing stayed frozen or fenced: the source still owns the tenant and takes writes.
    after = directory.lookup("mig")
    assert (after.node, after.epoch) == (before.node, before.epoch)
    conn = follow(cluster, "mig").connection()
    with conn.cursor() as cur:
        cur.execute("UPDATE shop.items SET name = 'after' WHERE id = 1")
    conn.commit()


def _admin(cluster, tenant_id: str):
    from slacker.config import load_agent_config
    from slacker.tenants import TenantManager
    cfg = load_agent_config(node_dir(cluster, "node-1") / "agent.toml")
    return TenantManager(cfg.data_root, host=cfg.tenant_host, node="node-1").get(tenant_id).admin_connect(
        autocommit=False)


def _update_row_1(conn) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE shop.items SET name = 'waited' WHERE id = 1")
        conn.commit()
    except pymysql.err.MySQLError:
        pass
    finally:
        conn.close()
