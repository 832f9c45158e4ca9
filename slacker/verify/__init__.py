"""Verifying a migration's copy against its source, online, at one GTID position (docs/migration.md).

`online` is the source's role in phase `verify`; `target` is the target agent's half. The SQL is in
`slacker.mariadb.rowsums`.
"""
