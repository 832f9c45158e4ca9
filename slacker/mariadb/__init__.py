"""The engine package: everything that speaks MariaDB/MySQL.

`server` holds binaries, generated server config, accounts and connections;
`ops` the statements the migration phase machine needs (freeze, fence,
positions, preflight inspection); `checksums` the `--verify` checksums;
replication control lives with the delta applier that drives it
(`slacker.delta.applier`) but goes through these connections.
"""

from .server import (ADMIN_USER, APP_USER, BACKUP_PRIVILEGES, BACKUP_USER, PACKAGES, REPL_PRIVILEGES, REPL_USER,
                     SERVICE_USERS, ServerConfig, bootstrap_sql, client_defaults, connect, find_program,
                     global_status, gtid_binlog_pos, server_id_for, service_accounts_sql, write_secret)

__all__ = ["ADMIN_USER", "APP_USER", "BACKUP_PRIVILEGES", "BACKUP_USER", "PACKAGES", "REPL_PRIVILEGES", "REPL_USER",
           "SERVICE_USERS", "ServerConfig", "bootstrap_sql", "client_defaults", "connect", "find_program",
           "global_status", "gtid_binlog_pos", "server_id_for", "service_accounts_sql", "write_secret"]
