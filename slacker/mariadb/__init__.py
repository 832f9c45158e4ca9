"""The engine package: everything that speaks MariaDB/MySQL.

Every SQL statement Slacker runs against a tenant's server is here (the
benchmark harness's loads and the directory backend aside); the rest of the
code calls these functions with a connection. This is the seam another engine
(MySQL 8 with XtraBackup) would fill.

- `server`: binaries, generated server config, accounts (`bootstrap_sql`,
  `create_service_accounts`), connections, global status and the GTID position.
- `ops`: what the migration's source side needs: positions (GTID, binlog file
  and offset), fence (`read_only`), flushing to disk, preflight inspection.
- `freeze`: the freeze (FLUSH TABLES WITH READ LOCK, granted under OLTP load)
  and what holds it back.
- `replication`: replication control and positions on the target: seeding the
  GTID state, CHANGE MASTER, start/stop/reset of the migration's replication
  connection, its status, MASTER_GTID_WAIT, the parallel applier's settings.
- `durability`: catch-up durability (per-commit fsyncs off while a target is
  disposable, back on with the logs forced to disk and checked).
- `perfschema`: what the latency sources read (performance_schema summary
  tables, the transaction instrument, Handler_commit).
- `rowsums`: `--verify`: a consistent snapshot at a known GTID position, primary-key chunks and
  their row checksums.
"""

from typing import TYPE_CHECKING

from ..lazy import exports

if TYPE_CHECKING:
    from .server import (ADMIN_USER, APP_USER, BACKUP_PRIVILEGES, BACKUP_USER, PACKAGES, REPL_PRIVILEGES, REPL_USER,
                         SERVICE_USERS, ServerConfig, bootstrap_sql, client_defaults, connect,
                         create_service_accounts, error_lines, find_program, global_status, gtid_binlog_pos, server_id_for,
                         service_accounts_sql, write_secret)

__all__ = ["ADMIN_USER", "APP_USER", "BACKUP_PRIVILEGES", "BACKUP_USER", "PACKAGES", "REPL_PRIVILEGES", "REPL_USER",
           "SERVICE_USERS", "ServerConfig", "bootstrap_sql", "client_defaults", "connect", "create_service_accounts",
           "error_lines", "find_program", "global_status", "gtid_binlog_pos", "server_id_for", "service_accounts_sql", "write_secret"]

# Loaded on first use: the latency sources need only `perfschema`, not the client library `server` loads.
__getattr__ = exports(__name__, {name: "server" for name in __all__})
