"""Everything that knows MariaDB specifics: binaries, server config, connections, status SQL.

Kept in one module (as Patroni keeps PostgreSQL specifics in one package) so the
tenant lifecycle and the migration phase machine talk to the server through a
few functions, not scattered SQL and flags.
"""

from __future__ import annotations

import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

import pymysql
from pymysql.constants import CLIENT

from ..errors import MissingDependency, TenantError

ADMIN_USER = "slacker"
APP_USER = "app"
# Least privilege: each of Slacker's channels logs in as an account that can do its job and no more.
# The admin account (everything) only over the tenant's unix socket, so never from another host;
# the backup account only what mariabackup checks for and uses (BACKUP STAGE/FTWRL need RELOAD,
# its lock on non-InnoDB tables LOCK TABLES, the list of running queries PROCESS, the binlog
# position BINLOG MONITOR), also socket only; the replication account REPLICATION SLAVE from
# anywhere (the target connects over the network). Neither of the two can read or write user tables.
BACKUP_USER = "slacker_backup"
REPL_USER = "slacker_repl"
BACKUP_PRIVILEGES = "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR"
REPL_PRIVILEGES = "REPLICATION SLAVE"
SERVICE_USERS = (ADMIN_USER, BACKUP_USER, REPL_USER)

# Where distributions put server binaries; /usr/sbin is often not on a user's PATH.
_EXTRA_BIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")

# program -> Debian package that ships it
PACKAGES = {
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariabackup": "mariadb-backup",
    "mbstream": "mariadb-backup",
    "pv": "pv",
    "nc": "netcat-openbsd",
}


def find_program(name: str) -> str:
    """Absolute path of a system program, or a MissingDependency naming its package."""
    path = shutil.which(name)
    if path:
        return path
    for d in _EXTRA_BIN_DIRS:
        candidate = os.path.join(d, name)
        if os.access(candidate, os.X_OK):
            return candidate
    pkg = PACKAGES.get(name, name)
    raise MissingDependency(
        f"{name} not found",
        f"the system package {pkg} is not installed",
        f"run scripts/install, or apt-get install {pkg}",
    )


def error_lines(text: str, lines: int = 8) -> str:
    """The lines of a server log that say what went wrong (its [ERROR] lines), else its tail."""
    all_lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in all_lines if "ERROR" in ln]
    return " | ".join((errors or all_lines)[-lines:]) or "(empty log)"


def server_id_for(node: str, tenant_id: str) -> int:
    """A server_id unique per (node, tenant): source and target of a migration must differ,
    or replication would skip the source's events as its own."""
    return (zlib.crc32(f"{node}/{tenant_id}".encode()) & 0x7FFFFFFF) or 1


# performance_schema sized to what Slacker reads: per-user transaction summaries
# (latency source, per-tenant stats). Everything else it would allocate up front
# (statement/stage/wait/memory summaries per thread, histories, digests, table
# and file instances) is sized to 0: with the defaults an idle tenant with a
# 16 MiB buffer pool was 191 MiB RSS, pfs alone 94 MiB; sized like this it is
# ~99 MiB, pfs 3 MiB (docs/results.md, "performance_schema's cost").
PERFORMANCE_SCHEMA_OPTIONS = (
    "performance_schema = ON",
    "performance_schema_instrument = 'transaction=ON'",
    "performance_schema_consumer_statements_digest = OFF",
    *(f"performance_schema_{name} = 0" for name in (
        "digests_size", "max_digest_length", "max_sql_text_length",
        "events_statements_history_size", "events_statements_history_long_size",
        "events_stages_history_size", "events_stages_history_long_size",
        "events_waits_history_size", "events_waits_history_long_size",
        "events_transactions_history_size", "events_transactions_history_long_size",
        "max_table_instances", "max_table_handles", "max_index_stat", "max_table_lock_stat",
        "max_file_instances", "max_memory_classes", "accounts_size", "hosts_size",
        "max_stage_classes", "max_mutex_classes", "max_rwlock_classes", "max_cond_classes",
        "max_file_classes", "max_socket_classes", "max_statement_classes")),
    "performance_schema_max_statement_stack = 2",
    # Per-connection attribute buffers and the file-handle table (32768 slots by default): nothing reads
    # them (the file classes above are sized out already).
    "performance_schema_session_connect_attrs_size = 0",
    "performance_schema_max_file_handles = 0",
)


# The rest of a tenant's memory sized for a small tenant: MariaDB's defaults allocate and touch caches a
# tenant of Slacker does not use. An idle tenant was ~105 MiB RSS (82 MiB its own) with pfs sized as above;
# with these it is ~59 MiB (36 MiB its own): ~23 MiB is the mariadbd binary's and libraries' pages every
# tenant on the host shares, 8.7 MiB its static data and 4 MiB the two minimum-size redo log buffers, which
# no option shrinks (docs/results.md, "A lean tenant"). The buffer pool is per tenant (`tenant create --buffer-pool`).
MEMORY_OPTIONS = (
    # The redo log buffer at this version's minimum (MariaDB's default 16M): an idle server touches one whole
    # buffer, 14 MiB of its own memory more at 16M. A migration's target applies the delta in catch-up mode
    # (innodb_flush_log_at_trx_commit=0, slacker/mariadb/durability.py): draining a backlog at 3 and at
    # 14 MB/s of redo (7x the buffer each second), the target waited for a full buffer (Innodb_log_waits)
    # 0-1 times per drain, at 0.90-0.98x the drain rate with 16M (medians of paired runs, within their
    # spread), and live moves under a write-heavy load converged as often
    # (bench/run delta --configs logbuf, bench/run delta_migrate; docs/results/lean.md).
    "innodb_log_buffer_size = 2M",
    # MyISAM's index cache (default 128M, ~23 MiB touched at start): tenants' tables are InnoDB and the
    # system tables Aria, so nothing reads through it.
    "key_buffer_size = 1M",
    # Aria's page cache (default 128M, ~6 MiB touched at start): the system tables and on-disk
    # internal temporary tables (a large GROUP BY or ORDER BY) read through it.
    "aria_pagecache_buffer_size = 8M",
    # The query cache stays off (query_cache_type=OFF is the default) and allocates nothing.
    "query_cache_size = 0",
)


@dataclass(frozen=True)
class ServerConfig:
    """The generated my.cnf of one tenant. No secrets in here."""

    tenant_id: str
    datadir: Path
    socket: Path
    pid_file: Path
    error_log: Path
    host: str
    port: int
    server_id: int
    buffer_pool_bytes: int
    tmpdir: Path
    # A fenced server (a migration's retired source, or a target not yet the owner) starts read-only,
    # whoever starts it: the supervisor, an agent restart or an operator.
    read_only: bool = False
    # TLS for TCP clients and replication: the node's certificate and key, the cluster CA; with
    # require_secure_transport a TCP client without TLS is refused (the unix socket stays open).
    ssl_ca: Path | None = None
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    require_secure_transport: bool = False
    # 0 for every whole-server tenant (a migration's target is a copy of its source); a node's shared server
    # has one unique in the fleet (slacker/shared_server.py): one database moving out of it replicates
    # into another shared server, whose own writes and the source's must keep positions apart.
    gtid_domain_id: int = 0
    # A whole server's copy on its target binlogs what it replicates (it becomes the tenant). A shared server
    # must not: its binlog holds its own domain only, or a later move out of it would carry another server's
    # domain into a third server's position (docs/shared-engine.md, "Delta of one database").
    log_slave_updates: bool = True
    # Per-account counters (information_schema.USER_STATISTICS: CPU_TIME, rows read and changed): the shared
    # server's tenants are its accounts, so this is where each one's own load is read (agent/tenant_stats.py).
    user_statistics: bool = False
    # A shared server's replication connections carry a table filter set at runtime (one database each), which a
    # restart forgets: started by itself, a connection would apply every database of its source, the neighbours'
    # included. So it starts none; its agent sets each filter again and starts it (kinds/shared.py).
    skip_slave_start: bool = False
    # Bytes per connection for its attributes in performance_schema (0: none kept). A shared server keeps them:
    # its fence tells the router's own logins (attribute _slacker_router) from the tenant's other sessions.
    connect_attrs_bytes: int = 0

    def render(self) -> str:
        lines = [
            f"# generated by slacker for tenant {self.tenant_id}; edits are overwritten",
            "[mysqld]",
            f"datadir = {self.datadir}",
            f"socket = {self.socket}",
            f"pid-file = {self.pid_file}",
            f"log-error = {self.error_log}",
            f"tmpdir = {self.tmpdir}",
            f"bind-address = {self.host}",
            f"port = {self.port}",
            f"server_id = {self.server_id}",
            # Migration needs a complete, row-based change log with GTIDs.
            f"log-bin = {self.datadir}/binlog",
            "binlog_format = ROW",
            "binlog_row_image = FULL",
            "binlog_row_metadata = FULL",
            f"log_slave_updates = {'ON' if self.log_slave_updates else 'OFF'}",
            f"gtid_domain_id = {self.gtid_domain_id}",
            # Acknowledged commits must survive a crash of either side.
            "sync_binlog = 1",
            "innodb_flush_log_at_trx_commit = 1",
            f"innodb_buffer_pool_size = {self.buffer_pool_bytes}",
            "innodb_log_file_size = 64M",
            *PERFORMANCE_SCHEMA_OPTIONS,
            *MEMORY_OPTIONS,
            "skip-name-resolve",
            "max_connections = 300",
            "character-set-server = utf8mb4",
            "collation-server = utf8mb4_general_ci",
            # The target of a migration starts read-only and must not run events twice.
            "event_scheduler = OFF",
            # A tenant's own account (no SUPER) may create triggers and stored functions: with row-based binlogs
            # a routine's effects are logged as rows, so the check this turns off guards nothing here.
            "log_bin_trust_function_creators = ON",
        ]
        if self.read_only:
            lines.append("read_only = ON")
        if self.user_statistics:
            lines.append("userstat = ON")
        if self.skip_slave_start:
            lines.append("skip-slave-start")
        if self.connect_attrs_bytes:  # after PERFORMANCE_SCHEMA_OPTIONS' 0: the later line is the one read
            lines.append(f"performance_schema_session_connect_attrs_size = {self.connect_attrs_bytes}")
        if self.ssl_cert is not None:
            lines += [f"ssl_ca = {self.ssl_ca}", f"ssl_cert = {self.ssl_cert}", f"ssl_key = {self.ssl_key}",
                      "tls_version = TLSv1.2,TLSv1.3"]
            if self.require_secure_transport:
                lines.append("require_secure_transport = ON")
        if os.geteuid() == 0:
            lines.append("user = root")
        return "\n".join(lines) + "\n"


def client_defaults(user: str, password: str, socket: Path | None = None,
                    host: str | None = None, port: int | None = None, group: str = "client") -> str:
    """A defaults file body holding credentials; callers write it with mode 0600."""
    lines = [f"[{group}]", f"user = {user}", f'password = "{_escape_option(password)}"']
    if socket is not None:
        lines.append(f"socket = {socket}")
    if host is not None:
        lines.append(f"host = {host}")
    if port is not None:
        lines.append(f"port = {port}")
    return "\n".join(lines) + "\n"


def _escape_option(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def write_secret(path: Path, text: str) -> None:
    """Write a file only its owner can read, never briefly world-readable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.chmod(path, 0o600)


def service_accounts_sql(backup_password: str, repl_password: str) -> list[str]:
    """The backup and replication accounts (idempotent statements)."""
    b = pymysql.converters.escape_string(backup_password)
    r = pymysql.converters.escape_string(repl_password)
    return [
        f"CREATE USER IF NOT EXISTS '{BACKUP_USER}'@'localhost' IDENTIFIED BY '{b}'",
        f"GRANT {BACKUP_PRIVILEGES} ON *.* TO '{BACKUP_USER}'@'localhost'",
        f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'%' IDENTIFIED BY '{r}'",
        f"GRANT {REPL_PRIVILEGES} ON *.* TO '{REPL_USER}'@'%'",
    ]


def create_service_accounts(conn, backup_password: str, repl_password: str) -> None:
    """Run `service_accounts_sql` on a running server (a tenant created before these accounts existed)."""
    with conn.cursor() as cur:
        for stmt in service_accounts_sql(backup_password, repl_password):
            cur.execute(stmt)


# What an application may do in its own database(s); a whole server's account has it on *.* with SHOW DATABASES
# and PROCESS besides, a shared tenant's on its database alone (slacker/mariadb/shared.py).
DATABASE_PRIVILEGES = (
    "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, CREATE TEMPORARY TABLES, "
    "LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, "
    "TRIGGER, REFERENCES"
)


def bootstrap_sql(admin_password: str, app_password: str | None, backup_password: str | None = None,
                  repl_password: str | None = None) -> str:
    """Accounts a new tenant gets: Slacker's admin (socket only), the backup and replication
    accounts, and the application's (none for a node's shared server: each of its tenants has its own).

    The application account has no SUPER/READ_ONLY ADMIN so `read_only` holds it
    off a migration target until the handover.
    """
    a = pymysql.converters.escape_string(admin_password)
    app_privs = DATABASE_PRIVILEGES + ", SHOW DATABASES, PROCESS"
    stmts = [
        f"CREATE USER IF NOT EXISTS '{ADMIN_USER}'@'localhost' IDENTIFIED BY '{a}'",
        f"GRANT ALL PRIVILEGES ON *.* TO '{ADMIN_USER}'@'localhost' WITH GRANT OPTION",
    ]
    p = pymysql.converters.escape_string(app_password or "")
    for host in (("%", "localhost") if app_password is not None else ()):
        stmts += [
            f"CREATE USER IF NOT EXISTS '{APP_USER}'@'{host}' IDENTIFIED BY '{p}'",
            f"GRANT {app_privs} ON *.* TO '{APP_USER}'@'{host}'",
        ]
    if backup_password is not None and repl_password is not None:
        stmts += service_accounts_sql(backup_password, repl_password)
    return "\n".join(s + ";" for s in stmts) + "\n"


def connect(*, user: str, password: str, socket: Path | str | None = None, host: str | None = None,
            port: int | None = None, database: str | None = None, timeout_s: float = 5.0,
            autocommit: bool = True, ssl_context=None, multi_statements: bool = False) -> pymysql.connections.Connection:
    """A PyMySQL connection over the unix socket (local) or TCP (remote); TLS over TCP with
    `ssl_context` (slacker.tls.client_context: the cluster CA, checked against the address).
    `multi_statements`: one `execute` may send several statements (the fence's round trips)."""
    # Never PyMySQL's own TLS defaults: they load the system CA store on every connect (~30 ms,
    # inside the freeze). Slacker's own connections are local (unix socket); TCP ones pass a context.
    kwargs = dict(user=user, password=password, connect_timeout=timeout_s, autocommit=autocommit,
                  database=database, charset="utf8mb4")
    if multi_statements:
        kwargs["client_flag"] = CLIENT.MULTI_STATEMENTS
    if ssl_context is not None and socket is None:
        kwargs["ssl"] = ssl_context
    else:
        kwargs["ssl_disabled"] = True
    if socket is not None:
        kwargs["unix_socket"] = str(socket)
    else:
        kwargs["host"] = host
        kwargs["port"] = int(port or 3306)
    try:
        return pymysql.connect(**kwargs)
    except pymysql.err.OperationalError as exc:
        where = socket if socket is not None else f"{host}:{port}"
        raise TenantError(f"cannot connect to MariaDB at {where}", str(exc.args[-1]),
                          "check that the tenant is running (slacker status)") from None


def global_status(conn, names: tuple[str, ...]) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" % ",".join(["%s"] * len(names)), names)
        return {k: int(v) for k, v in cur.fetchall()}


def gtid_binlog_pos(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        return cur.fetchone()[0] or ""
