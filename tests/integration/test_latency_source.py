"""The default latency source on real servers: per transaction, however the client sends statements.

Text protocol, PREPARE/EXECUTE in SQL, binary-protocol prepared statements
(MariaDB's connector, as sysbench, JDBC and Go's database/sql use them) and
stored procedures must all reach the controller; a source that cannot see a
tenant's traffic must say so, before the copy and during it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from types import SimpleNamespace

import mariadb as mariadb_connector
import pymysql
import pytest

from slacker.latency import LatencySample
from slacker.throttle import DEFAULT_SOURCES, build_source

from .test_cli import one_line_error, slacker


def _delta(tenants, run, spec: str = DEFAULT_SOURCES[0], tenant_id: str = "t1") -> LatencySample:
    """What the source, built as `slacker migrate --setpoint` builds it, saw while `run()` ran.

    A fresh source each time, with a window long enough that its second read
    covers everything since its first.
    """
    node = SimpleNamespace(name="test", tenants=tenants)
    source = build_source(node, spec, window_s=600, step_s=1, tenant_id=tenant_id)
    try:
        source.read()
        run()
        return source.read()
    finally:
        source.close()


def test_default_source_counts_transactions_however_they_are_sent(tenants, tenant):
    pw = tenant.app_password()
    text = pymysql.connect(host=tenant.host, port=tenant.port, user="app", password=pw, autocommit=True)
    binary = mariadb_connector.connect(host=tenant.host, port=tenant.port, user="app", password=pw,
                                       autocommit=True)

    def sql(statement, args=None):
        with text.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchall()

    sql("CREATE DATABASE shop")
    sql("CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, qty INT) ENGINE=InnoDB")
    sql("CREATE PROCEDURE shop.place(IN q INT) BEGIN INSERT INTO shop.orders (qty) VALUES (q); END")
    try:
        def text_protocol():
            for i in range(20):
                sql("INSERT INTO shop.orders (qty) VALUES (%s)", (i,))

        def sql_prepare_execute():
            sql("PREPARE ins FROM 'INSERT INTO shop.orders (qty) VALUES (?)'")
            for i in range(20):
                sql("SET @q = %s", (i,))
                sql("EXECUTE ins USING @q")
            sql("DEALLOCATE PREPARE ins")

        def binary_protocol():
            cur = binary.cursor(prepared=True)
            for i in range(20):
                cur.execute("INSERT INTO shop.orders (qty) VALUES (?)", (i,))
            cur.close()

        def stored_procedure():
            for i in range(20):
                sql("CALL shop.place(%s)", (i,))

        for way in (text_protocol, sql_prepare_execute, binary_protocol, stored_procedure):
            s = _delta(tenants, way)
            assert s.ok, (way.__name__, s.error)
            # One transaction per insert (a first CALL may also read the procedure's definition).
            assert 20 <= s.count <= 22, (way.__name__, s.count)
            assert s.latency_s is not None and s.latency_s > 0
            assert s.server_commits is not None and s.server_commits >= 20

        # Per transaction, not per statement: a transaction's latency covers all of it.
        def slow_transactions():
            for _ in range(5):
                text.begin()
                sql("INSERT INTO shop.orders (qty) VALUES (1)")
                sql("DO SLEEP(0.05)")
                sql("INSERT INTO shop.orders (qty) VALUES (2)")
                text.commit()

        s = _delta(tenants, slow_transactions)
        assert s.count == 5 and s.latency_s >= 0.05, s
        # Slacker's own reads and connections are not tenant transactions: nothing else ran.
        s = _delta(tenants, lambda: time.sleep(1.1))
        assert s.ok and s.empty and s.server_commits == 0
    finally:
        text.close()
        binary.close()


def test_a_filter_that_leaves_the_application_out_is_blind(tenants, tenant):
    blind = "performance-schema,user=nobody"
    conn = pymysql.connect(host=tenant.host, port=tenant.port, user="app", password=tenant.app_password(),
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY) ENGINE=InnoDB")
            s = _delta(tenants, lambda: [cur.execute("INSERT INTO shop.t VALUES (%s)", (i,)) for i in range(30)],
                       blind)
        assert not s.ok and s.blind and "cannot see this tenant's traffic" in s.error
        s = _delta(tenants, lambda: time.sleep(1.1), blind)  # nothing committed: idle, not blind
        assert s.ok and s.empty and not s.blind
    finally:
        conn.close()


class _Load:
    """Application transactions against a tenant, in a thread, until stopped."""

    def __init__(self, host: str, port: int, password: str) -> None:
        self.conn = pymysql.connect(host=host, port=port, user="app", password=password, autocommit=True)
        with self.conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS app")
            cur.execute("CREATE TABLE IF NOT EXISTS app.load (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("INSERT INTO app.load (v) VALUES (1)")
                time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.conn.close()


def _endpoint(tenant_id: str):
    doc = json.loads(slacker("locate", tenant_id, "--json")[1])
    return doc["host"], doc["port"], open(doc["app_password_file"]).read().strip()


def _migration(tenant_id: str) -> dict | None:
    doc = json.loads(slacker("status", "--json")[1])
    found = [m for n in doc["nodes"] for m in n.get("migrations", [])
             if m.get("tenant") == tenant_id and m.get("direction") != "incoming"]
    return found[-1] if found else None


def test_blind_source_refused_before_the_copy_and_shown_during_it(cluster):
    assert slacker("tenant", "create", "b1", "--buffer-pool", "32M")[0] == 0
    host, port, pw = _endpoint("b1")
    blind = "performance-schema,user=nobody"
    # Serving traffic and the source sees none of it: one line, nothing copied.
    with _Load(host, port, pw):
        time.sleep(1)
        rc, out, err = slacker("migrate", "b1", "--to", "node-2", "--setpoint", "1s", "--latency-source", blind)
    one_line_error(rc, err, "the latency source sees no transactions", "cannot see this tenant's traffic",
                   "nothing was copied")
    assert _migration("b1") is None
    assert slacker("locate", "b1", "--json")[1] and json.loads(slacker("locate", "b1", "--json")[1])["node"] == "node-1"

    # Idle, the same source is accepted (nothing to see), and the status says the tenant is idle.
    rc, out, err = slacker("migrate", "b1", "--to", "node-2", "--setpoint", "1s", "--max-rate", "1MB/s",
                           "--latency-source", blind, "--detach")
    assert rc == 0, err
    try:
        deadline = time.monotonic() + 30
        while ((_migration("b1") or {}).get("controller") or {}).get("source_state") != "idle":
            assert time.monotonic() < deadline, _migration("b1")
            time.sleep(0.5)
        assert "(tenant idle)" in slacker("status")[1]
        time.sleep(3)  # the backup tool's own work on an idle tenant must not look like blindness
        idle_series = [json.loads(line) for line in open(_migration("b1")["series_path"])]
        assert not [s for s in idle_series if "cannot see" in (s.get("note") or "")]
        # Traffic starts mid-copy: the state turns blind, visibly, and the controller stops trusting it.
        with _Load(host, port, pw):
            deadline = time.monotonic() + 30
            while (mig := _migration("b1"))["controller"].get("source_state") != "blind":
                assert time.monotonic() < deadline and mig["active"], mig
                time.sleep(0.5)
            status = slacker("status")[1]
            assert "LATENCY SOURCE BLIND" in status and "cannot see this tenant's traffic" in status
            assert mig["phase"] == "snapshot"
            time.sleep(4)  # past the grace steps: the rate is cut, never raised
            mig = _migration("b1")
    finally:
        slacker("migrate", "b1", "--abort")
    series = [json.loads(line) for line in open(mig["series_path"])]
    blind_steps = [s for s in series if "cannot see this tenant's traffic" in (s.get("note") or "")]
    assert blind_steps, "the time series must record the blind source"
    assert any("cutting rate" in s["note"] for s in blind_steps)
    rates = [s["rate_bytes_per_s"] for s in blind_steps]
    assert all(b <= a for a, b in zip(rates, rates[1:]))


def test_agent_serves_per_tenant_transaction_latency_and_rate(cluster):
    from slacker.agent.client import cluster_clients

    assert slacker("tenant", "create", "s1", "--on", "node-1", "--buffer-pool", "32M")[0] == 0
    assert slacker("tenant", "create", "s2", "--on", "node-1", "--buffer-pool", "32M")[0] == 0
    agents, _ = cluster_clients(cluster)
    host, port, pw = _endpoint("s1")

    def stats() -> dict:
        doc = agents["node-1"].request("GET", "/v1/tenant-stats")
        return {t["tenant"]: t for t in doc["tenants"]}

    with _Load(host, port, pw):  # ~100 inserts/s on s1, nothing on s2
        deadline = time.monotonic() + 30
        while (stats().get("s1") or {}).get("transactions_per_s", 0) < 20:
            assert time.monotonic() < deadline, stats()
            time.sleep(1)
        doc = stats()
        req = urllib.request.Request(cluster.node("node-1").url + "/metrics",
                                     headers={"Authorization": f"Bearer {cluster.token()}"})
        metrics = urllib.request.urlopen(req, timeout=10).read().decode()
    s1, s2 = doc["s1"], doc["s2"]
    assert s1["ok"] and 20 <= s1["transactions_per_s"] <= 200 and 0 < s1["latency_s"] < 1.0
    assert s2["ok"] and s2["transactions_per_s"] == 0 and s2["latency_s"] is None  # idle: no latency, not 0
    assert 'slacker_tenant_transactions_per_second{node="node-1",tenant="s1"}' in metrics
    assert 'slacker_tenant_transaction_latency_seconds{node="node-1",tenant="s2"} NaN' in metrics
