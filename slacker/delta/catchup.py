"""Catch-up mode: a migration target that is not yet the owner trades durability for apply speed.

While the target is disposable (any failure throws it away) its commits need not
reach the disk one by one: `relax_durability` stops the per-commit fsyncs of the
binlog and the redo log. `restore_durability` puts them back and forces
everything applied so far to disk, before the freeze begins, so the target is as
durable as the source when it is promoted.
"""

from __future__ import annotations

import os
from pathlib import Path

# innodb_flush_log_at_trx_commit=2 still *writes* the redo log to the OS at every
# commit (0 would leave up to a second of it in the server's own buffer), so an
# fsync of the files afterwards is enough to make every earlier commit durable.
RELAXED = {"sync_binlog": 0, "innodb_flush_log_at_trx_commit": 2}
DURABLE = {"sync_binlog": 1, "innodb_flush_log_at_trx_commit": 1}


def set_durability(cur, values: dict[str, int]) -> None:
    for name, value in values.items():
        cur.execute(f"SET GLOBAL {name} = %s", (value,))


def durability(cur) -> dict[str, int]:
    cur.execute("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.innodb_flush_log_at_trx_commit")
    sb, fl = cur.fetchone()
    return {"sync_binlog": int(sb), "innodb_flush_log_at_trx_commit": int(fl)}


def relax_durability(conn) -> None:
    with conn.cursor() as cur:
        set_durability(cur, RELAXED)


def restore_durability(conn, datadir: Path | str | None) -> dict[str, float]:
    """Per-commit fsyncs back on, then everything committed so far forced to disk.

    Returns where the time went (ms). FLUSH BINARY LOGS waits for a binlog group
    commit in flight, so every commit that ran under the relaxed settings has
    been written to the OS before the files are fsynced.
    """
    import time

    t0 = time.monotonic()
    with conn.cursor() as cur:
        set_durability(cur, DURABLE)
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SELECT @@GLOBAL.log_bin_basename, @@GLOBAL.datadir")
        basename, server_datadir = cur.fetchone()
    t1 = time.monotonic()
    synced = fsync_server_logs(Path(datadir or server_datadir), basename)
    t2 = time.monotonic()
    return {"settings_ms": round((t1 - t0) * 1000, 1), "fsync_ms": round((t2 - t1) * 1000, 1), "files": synced}


def fsync_server_logs(datadir: Path, binlog_basename: str | None) -> int:
    """fsync the redo log, the binlogs and their index (and the directory that names them)."""
    paths = sorted(datadir.glob("ib_logfile*"))
    if binlog_basename:
        base = Path(binlog_basename)
        paths += sorted(base.parent.glob(base.name + ".*"))
    paths += [datadir / "ibdata1"]
    n = 0
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
            n += 1
        finally:
            os.close(fd)
    for d in {datadir} | ({Path(binlog_basename).parent} if binlog_basename else set()):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return n
