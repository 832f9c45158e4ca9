"""Catch-up durability: a migration target that is not yet the owner trades durability for apply speed.

While the target is disposable (any failure throws it away) its commits need not
reach the disk one by one: `relax_durability` stops the per-commit fsyncs of the
binlog and the redo log. `restore_durability` puts them back and forces
everything applied so far to disk, before the freeze begins, so the target is as
durable as the source when it is promoted. The delta applier
(`slacker.delta.engine`) decides when; this module is how, on MariaDB/InnoDB.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# Relaxed: no fsync per commit of the binlog nor of the redo log. innodb_flush_log_at_trx_commit=0
# does not even *write* the redo log at commit (it stays in the server's log buffer, written and
# synced about once a second), so leaving catch-up mode must make InnoDB itself write and sync
# it: restore_durability asks for that and then checks it (Innodb_lsn_flushed reaches the LSN
# read after the per-commit fsyncs were switched back on).
RELAXED = {"sync_binlog": 0, "innodb_flush_log_at_trx_commit": 0}
DURABLE = {"sync_binlog": 1, "innodb_flush_log_at_trx_commit": 1}
REDO_TIMEOUT_S = 10.0


class DurabilityError(RuntimeError):
    """The redo log did not reach the disk in time when leaving catch-up mode."""


def set_durability(cur, values: dict[str, int]) -> None:
    for name, value in values.items():
        cur.execute(f"SET GLOBAL {name} = %s", (value,))


def durability(cur) -> dict[str, int]:
    cur.execute("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.innodb_flush_log_at_trx_commit")
    sb, fl = cur.fetchone()
    return {"sync_binlog": int(sb), "innodb_flush_log_at_trx_commit": int(fl)}


def relax_durability(conn, values: dict[str, int] | None = None) -> None:
    with conn.cursor() as cur:
        set_durability(cur, RELAXED if values is None else values)


def redo_lsns(cur) -> tuple[int, int]:
    """(Innodb_lsn_current, Innodb_lsn_flushed): the redo log generated, and durably on disk."""
    cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_lsn_current', 'Innodb_lsn_flushed')")
    st = {k: int(v) for k, v in cur.fetchall()}
    return st["Innodb_lsn_current"], st["Innodb_lsn_flushed"]


def restore_durability(conn, datadir: Path | str | None, timeout_s: float = REDO_TIMEOUT_S) -> dict:
    """Per-commit fsyncs back on, then everything committed so far forced to disk, and checked.

    Order matters: once innodb_flush_log_at_trx_commit=1 is set, every commit that gets its
    LSN afterwards syncs the redo log itself; every commit that got one before has an LSN at
    most the Innodb_lsn_current read next. `FLUSH LOCAL ENGINE LOGS` makes InnoDB write and
    sync its log buffer (durably, since the setting is 1 by then; LOCAL: a plain FLUSH ENGINE
    LOGS is written to the binlog as a transaction of the target's own and would add a GTID
    the source never had), and Innodb_lsn_flushed >= that LSN proves it. FLUSH BINARY LOGS
    waits for a binlog group commit in flight; the binlogs are written to the OS at every
    commit even with sync_binlog=0, so fsyncing their files makes them durable.
    Returns where the time went (ms); raises DurabilityError if the redo log is not on disk
    within timeout_s.
    """
    t0 = time.monotonic()
    with conn.cursor() as cur:
        set_durability(cur, DURABLE)
        lsn, _ = redo_lsns(cur)
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("FLUSH LOCAL ENGINE LOGS")
        t1 = time.monotonic()
        deadline = t1 + timeout_s
        while True:
            _, flushed = redo_lsns(cur)
            if flushed >= lsn:
                break
            if time.monotonic() > deadline:
                raise DurabilityError(f"the target's redo log reached the disk only up to LSN {flushed:,}, "
                                      f"not {lsn:,}, within {timeout_s:g} s of leaving catch-up mode")
            cur.execute("FLUSH LOCAL ENGINE LOGS")
            time.sleep(0.005)
        t2 = time.monotonic()
        cur.execute("SELECT @@GLOBAL.log_bin_basename, @@GLOBAL.datadir")
        basename, server_datadir = cur.fetchone()
    synced = fsync_server_logs(Path(datadir or server_datadir), basename)
    t3 = time.monotonic()
    return {"settings_ms": round((t1 - t0) * 1000, 1), "redo_wait_ms": round((t2 - t1) * 1000, 1),
            "fsync_ms": round((t3 - t2) * 1000, 1), "redo_lsn": lsn, "redo_flushed_lsn": flushed,
            "files": synced}


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
