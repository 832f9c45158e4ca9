"""Least privilege on a real server: the backup and replication accounts can do their job and nothing
else, the admin account cannot log in over the network, and a migration uses them without a password
ever showing up in a process's argv, an agent log or an API answer."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pymysql
import pytest

from slacker import mariadb
from slacker.backup import MariaBackup
from slacker.errors import TenantError

from benchkit.migration import create_loaded_tenant, follow, node_dir, start_migration, wait_migration

ACCESS_DENIED = (1044, 1045, 1142, 1227)  # db, login, table, "you need the X privilege"


def _user_table(tenant) -> None:
    conn = tenant.admin_connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20))")
        cur.execute("INSERT INTO shop.items VALUES (1, 'one')")
    conn.close()


def _denied(conn, sql: str) -> int:
    with pytest.raises(pymysql.err.MySQLError) as info:
        with conn.cursor() as cur:
            cur.execute(sql)
    return info.value.args[0]


def test_backup_and_replication_accounts_cannot_touch_user_tables(tenant):
    _user_table(tenant)
    backup = mariadb.connect(user=mariadb.BACKUP_USER, password=tenant.backup_password(), socket=tenant.socket)
    repl = mariadb.connect(user=mariadb.REPL_USER, password=tenant.repl_password(), host=tenant.host,
                           port=tenant.port)
    for conn in (backup, repl):
        for sql in ("INSERT INTO shop.items VALUES (2, 'two')", "UPDATE shop.items SET name = 'x'",
                    "DELETE FROM shop.items", "SELECT * FROM shop.items", "DROP TABLE shop.items",
                    "CREATE USER 'evil'@'%'", "SET GLOBAL read_only = OFF"):
            assert _denied(conn, sql) in ACCESS_DENIED, sql
        conn.close()
    # The admin account exists only on the unix socket: no login from the network.
    with pytest.raises(TenantError, match="Access denied"):
        mariadb.connect(user=mariadb.ADMIN_USER, password=tenant.admin_password(), host=tenant.host,
                        port=tenant.port)
    # The backup account is not reachable over the network either.
    with pytest.raises(TenantError, match="Access denied"):
        mariadb.connect(user=mariadb.BACKUP_USER, password=tenant.backup_password(), host=tenant.host,
                        port=tenant.port)
    conn = tenant.admin_connect()
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), MAX(name) FROM shop.items")
        assert cur.fetchone() == (1, "one")
    conn.close()


def test_a_tenant_from_before_the_service_accounts_gets_them(tenant):
    """A tenant created before the backup and replication accounts existed has neither them nor their
    passwords; ensure_service_accounts creates both on the running server, and they can log in."""
    conn = tenant.admin_connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP USER '{mariadb.BACKUP_USER}'@'localhost', '{mariadb.REPL_USER}'@'%'")
    conn.close()
    tenant.backup_password_file.unlink()
    tenant.repl_password_file.unlink()
    tenant.ensure_service_accounts()
    backup = mariadb.connect(user=mariadb.BACKUP_USER, password=tenant.backup_password(), socket=tenant.socket)
    repl = mariadb.connect(user=mariadb.REPL_USER, password=tenant.repl_password(), host=tenant.host,
                           port=tenant.port)
    with repl.cursor() as cur:
        cur.execute("SHOW GRANTS")
        assert any("REPLICATION SLAVE" in row[0] for row in cur.fetchall())
    backup.close()
    repl.close()


def test_mariabackup_runs_with_the_backup_account_alone(tenant, short_tmp):
    _user_table(tenant)
    tool = MariaBackup()
    defaults = short_tmp / "backup.cnf"
    mariadb.write_secret(defaults, tool.backup_defaults(tenant.config_file.read_text(), mariadb.BACKUP_USER,
                                                        tenant.backup_password(), tenant.socket))
    (short_tmp / "work").mkdir()
    proc = subprocess.run(tool.stream_argv(defaults, short_tmp / "work"), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "missing required privilege" not in proc.stderr
    assert "completed OK" in proc.stderr
    assert tenant.backup_password() not in proc.stderr


def test_mariabackup_on_a_tls_tenant_reads_the_socket_without_a_handshake(short_tmp):
    """A tenant of a TLS cluster offers TLS; the backup tool reaches it by the socket, where TLS protects
    nothing, and its client library would otherwise negotiate it (0.2 s and twice the tool's CPU)."""
    from slacker import tls
    from slacker.tenants import TenantManager

    pki = tls.ensure_cluster_pki(short_tmp / "tls", {"n": ["127.0.0.1"]})
    mgr = TenantManager(short_tmp / "node", host="127.0.0.1", node="n", port_range=(23306, 32305),
                        tls=pki["n"], require_tls=True)
    tenant = mgr.create("tt")
    try:
        tool = MariaBackup()
        defaults = short_tmp / "backup.cnf"
        mariadb.write_secret(defaults, tool.backup_defaults(tenant.config_file.read_text(), mariadb.BACKUP_USER,
                                                            tenant.backup_password(), tenant.socket))
        (short_tmp / "work").mkdir()

        def ssl_accepts():
            conn = tenant.admin_connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
                    return int(cur.fetchone()[1])
            finally:
                conn.close()

        before = ssl_accepts()
        proc = subprocess.run(tool.stream_argv(defaults, short_tmp / "work"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert ssl_accepts() == before, "the backup tool negotiated TLS over the unix socket"
    finally:
        mgr.kill_tenant(tenant)


def test_migration_uses_its_accounts_and_never_shows_a_password(cluster):
    from slacker.ackwriter import AckedWriter
    from slacker.agent.client import cluster_clients
    from slacker.tenants import TenantManager

    create_loaded_tenant(cluster, "mig", rows=1500)
    passwords = _secrets_on(cluster, "node-1", "mig")
    src = TenantManager(node_dir(cluster, "node-1"), node="node-1").get("mig")
    seen_argv: list[str] = []
    dump_users: set[str] = set()
    repl_logins = [0]
    stop = threading.Event()

    def watch_argv() -> None:
        while not stop.is_set():
            for d in Path("/proc").iterdir():
                if d.name.isdigit():
                    try:
                        cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        continue
                    if any(p in cmd for p in passwords):
                        seen_argv.append(cmd)
            time.sleep(0.05)

    def watch_source() -> None:
        # Its own thread and one kept connection: the replication link can live for well under a
        # second on a small tenant, and a /proc scan on a loaded machine takes longer than that.
        # performance_schema.users counts the link's login even after it is gone.
        conn = None
        while not stop.is_set():
            try:
                conn = conn or src.admin_connect(timeout_s=1)
                with conn.cursor() as cur:
                    cur.execute("SELECT USER FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
                    dump_users.update(r[0] for r in cur.fetchall())
                    cur.execute("SELECT TOTAL_CONNECTIONS FROM performance_schema.users WHERE USER = %s",
                                (mariadb.REPL_USER,))
                    row = cur.fetchone()
                    repl_logins[0] = max(repl_logins[0], row[0] if row else 0)
            except Exception:
                conn = None
            time.sleep(0.01)

    watchers = [threading.Thread(target=w, daemon=True) for w in (watch_argv, watch_source)]
    writer = AckedWriter(follow(cluster, "mig"), rate_per_s=100).start()
    for w in watchers:
        w.start()
    try:
        time.sleep(0.5)
        doc = start_migration(cluster, "mig", target="node-2", rate_bytes_per_s=3_000_000)
        doc = wait_migration(cluster, "node-1", doc["id"])
    finally:
        stop.set()
        writer.stop()
        for w in watchers:
            w.join(10)
    assert doc["result"] == "succeeded", doc.get("error")
    assert seen_argv == []  # mariabackup and everything else got them through 0600 files
    # The replication link logged in as its own account, and no other account ever read the binlog.
    assert repl_logins[0] >= 1
    assert dump_users <= {mariadb.REPL_USER}
    agents, _ = cluster_clients(cluster)
    answers = [agents["node-1"].request("GET", f"/v1/migrations/{doc['id']}"),
               agents["node-1"].request("GET", "/v1/migrations"),
               agents["node-2"].request("GET", "/v1/tenants/mig")]
    logs = [(node_dir(cluster, n) / "agent.log").read_text(errors="replace") for n in ("node-1", "node-2")]
    for text in [str(a) for a in answers] + logs:
        assert not any(p in text for p in passwords)
    # The target holds the same four accounts' passwords (it is the source of the next migration).
    assert _secrets_on(cluster, "node-2", "mig") == passwords


def _secrets_on(cluster, node: str, tenant_id: str) -> list[str]:
    d = node_dir(cluster, node) / "tenants" / tenant_id / "secrets"
    return [(d / f"{name}.password").read_text().strip() for name in ("admin", "app", "backup", "repl")]
