"""A consistent snapshot of one database of a shared server, streamed into another running server.

Two methods, the same result (the database on the target, and the source's position it is
consistent at): a logical dump (`mariadb-dump --single-transaction`: no global lock) piped into the
target's `mariadb` client, and a partial hot backup (`mariabackup --databases`, `--prepare --export`)
whose tablespaces the target's running server takes in by `IMPORT TABLESPACE`. Both stream through
an optional throttle (any filter program, `pv -L` say); nothing is staged on the source. The SQL they
need is `slacker/mariadb/onedb.py`; docs/shared-engine.md has the measured facts.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import mariadb
from .backup import MariaBackup, parse_binlog_info
from .errors import MigrationFailed
from .mariadb import onedb
from .mariadb.server import error_lines
from .procs import kill_group

SNAPSHOT_TIMEOUT_S = 3600.0
PREPARE_TIMEOUT_S = 1800.0
CHUNK = 256 * 1024
# How much of the dump's text is kept to find its position: its head (the binlog file and offset) and
# its tail (the GTID position, written after the last row).
HEAD_BYTES = TAIL_BYTES = 64 * 1024

log = logging.getLogger("slacker.onedb_snapshot")


@dataclass(frozen=True)
class Login:
    """How a client program logs in to a server; the password only ever goes into a 0600 file."""
    user: str
    password: str
    socket: Path | None = None
    host: str | None = None
    port: int | None = None

    def defaults(self) -> str:
        return mariadb.client_defaults(self.user, self.password, socket=self.socket, host=self.host, port=self.port)

    def connect(self):
        return mariadb.connect(user=self.user, password=self.password, socket=self.socket, host=self.host,
                               port=self.port)


@dataclass(frozen=True)
class Position:
    """Where a snapshot is consistent in its source's binlog."""
    gtid: str
    binlog_file: str
    binlog_pos: int


@dataclass
class Snapshot:
    method: str  # "logical" or "physical"
    db: str
    position: Position
    stream_bytes: int
    seconds: float
    files_bytes: dict[str, int] = field(default_factory=dict)  # physical: what the stream held, by kind
    prepare_s: float = 0.0
    tables: tuple[str, ...] = ()


# --- logical --------------------------------------------------------------------------------------
_FILE_POS = re.compile(rb"^-- CHANGE MASTER TO MASTER_LOG_FILE='([^']+)', MASTER_LOG_POS=(\d+);", re.M)
_GTID = re.compile(rb"^-- SET GLOBAL gtid_slave_pos='([^']*)';", re.M)


def parse_dump_position(head: bytes, tail: bytes) -> Position:
    """The position `mariadb-dump --master-data=2 --gtid` writes: the binlog file and offset in its
    head, the GTID position (as `SET GLOBAL gtid_slave_pos`, commented) at its end. Both come from
    the dump's consistent snapshot (binlog_snapshot_file/position, then BINLOG_GTID_POS)."""
    fp, g = _FILE_POS.search(head), _GTID.search(tail)
    if fp is None or g is None:
        raise MigrationFailed("the dump has no position", "no CHANGE MASTER / gtid_slave_pos comment in its output",
                              "is the source's binary log enabled?", phase="snapshot")
    return Position(g.group(1).decode(), fp.group(1).decode(), int(fp.group(2)))


def dump_argv(defaults_file: Path, db: str) -> list[str]:
    # --defaults-extra-file must come first. --single-transaction with --master-data takes the position
    # from START TRANSACTION WITH CONSISTENT SNAPSHOT: no FLUSH TABLES WITH READ LOCK on MariaDB.
    return [mariadb.find_program("mariadb-dump"), f"--defaults-extra-file={defaults_file}", "--single-transaction",
            "--master-data=2", "--gtid", "--routines", "--events", "--triggers", "--hex-blob", "--quick",
            "--databases", db]


def client_argv(defaults_file: Path) -> list[str]:
    return [mariadb.find_program("mariadb"), f"--defaults-extra-file={defaults_file}", "--batch",
            "--skip-reconnect", "--init-command=SET SESSION sql_log_bin = 0"]


def logical(source: Login, target: Login, db: str, work_dir: Path, throttle_argv: list[str] | None = None,
            timeout_s: float = SNAPSHOT_TIMEOUT_S, on_start: Callable | None = None) -> Snapshot:
    """Dump `db` from the source in one consistent snapshot and load it into the target as it streams
    (dump | throttle | client); returns the source position the copy is consistent at. The target
    must not have the database yet (the dump creates it, and would replace its tables); on failure
    the partial copy is removed."""
    _refuse_if_present(target.connect, db, "a copy would replace its tables")
    work_dir.mkdir(parents=True, exist_ok=True)
    src_cnf, dst_cnf = work_dir / "dump-source.cnf", work_dir / "dump-target.cnf"
    mariadb.write_secret(src_cnf, source.defaults())
    mariadb.write_secret(dst_cnf, target.defaults())
    t0 = time.monotonic()
    try:
        pipe = _Pipeline(dump_argv(src_cnf, db), throttle_argv, client_argv(dst_cnf), work_dir, "dump")
        if on_start is not None:
            on_start(pipe)
        pipe.run(timeout_s)
    except BaseException:
        _remove_partial(target.connect, db)
        raise
    finally:
        src_cnf.unlink(missing_ok=True)
        dst_cnf.unlink(missing_ok=True)
    return Snapshot("logical", db, parse_dump_position(pipe.head, pipe.tail), pipe.bytes, time.monotonic() - t0)


# --- physical -------------------------------------------------------------------------------------
def physical(source_server_config: str, backup: Login, source_connect: Callable, target_connect: Callable,
             db: str, work_dir: Path, throttle_argv: list[str] | None = None,
             timeout_s: float = SNAPSHOT_TIMEOUT_S) -> Snapshot:
    """A partial hot backup of `db` (mariabackup --databases) streamed into `work_dir` on the target's
    host, prepared with --export, and imported into the target's running server table by table.

    Refused before anything starts when the database holds what the tablespace path cannot carry
    (onedb.physical_refusals). `work_dir` should be on the target's data directory's file system."""
    _refuse_if_present(target_connect, db, "the import would need its name")
    src = source_connect()
    try:
        refusals = onedb.physical_refusals(onedb.contents(src, db))
        if refusals:
            raise onedb.refuse(f"cannot move {db} by a partial backup", "; ".join(refusals))
        definitions = onedb.table_definitions(src, db)
        database_ddl = onedb.database_definition(src, db)
    finally:
        src.close()
    work_dir.mkdir(parents=True, exist_ok=True)
    backup_dir, scratch = work_dir / "backup", work_dir / "backup-tmp"
    shutil.rmtree(backup_dir, ignore_errors=True)
    backup_dir.mkdir()
    cnf = work_dir / "backup.cnf"
    tool = MariaBackup()
    mariadb.write_secret(cnf, tool.backup_defaults(source_server_config, backup.user, backup.password, backup.socket))
    t0 = time.monotonic()
    try:
        # --databases matches the data directory's names: `t-42` is skipped, `t@002d42` is copied.
        argv = tool.stream_argv(cnf, scratch) + [f"--databases={onedb.dir_name(db)}"]
        pipe = _Pipeline(argv, throttle_argv, tool.extract_argv(backup_dir), work_dir, "backup")
        pipe.run(timeout_s)
    finally:
        cnf.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    if not (backup_dir / onedb.dir_name(db)).is_dir():
        raise MigrationFailed(f"the backup holds nothing of {db}", "mariabackup skipped the database",
                              "the source keeps serving; check the database's name", phase="snapshot")
    files = stream_files(backup_dir, db)
    position = backup_position(backup_dir)
    t1 = time.monotonic()
    prepare_export(backup_dir)
    prepare_s = time.monotonic() - t1
    tables = import_prepared(backup_dir, db, definitions, database_ddl, target_connect)
    shutil.rmtree(backup_dir, ignore_errors=True)
    return Snapshot("physical", db, position, pipe.bytes, time.monotonic() - t0, files, prepare_s, tables)


def import_prepared(backup_dir: Path, db: str, definitions: dict[str, str], database_ddl: str,
                    target_connect: Callable) -> tuple[str, ...]:
    """A prepared (--export) partial backup of `db` taken into the target's running server: the database and
    its tables created from the source's definitions, each tablespace discarded, the backup's file moved in
    its place (no second copy on one file system) and imported. On any failure nothing of it stays."""
    tables = tuple(definitions)
    missing = [t for t in tables if not (backup_dir / onedb.dir_name(db) / (onedb.dir_name(t) + ".ibd")).exists()]
    if missing:
        # mariabackup's DDL tracking reads a tablespace whose DISCARD (of an IMPORT) is still in the redo log
        # after the checkpoint as dropped during the backup, and leaves it out.
        raise MigrationFailed(f"the partial backup holds no tablespace for {db}.{missing[0]}"
                              + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""),
                              "mariabackup left it out: a table imported by IMPORT TABLESPACE (an earlier partial "
                              "move, say) looks dropped to it until InnoDB's checkpoint has passed the import",
                              "the source keeps serving; move it with --snapshot logical, or again later",
                              phase="prepare")
    tgt = target_connect()
    created = False
    try:
        if onedb.exists(tgt, db):  # made meanwhile: never ours to remove
            raise onedb.refuse(f"the target already has a database {db}", "one appeared during the copy",
                               "the source keeps serving")
        created = True
        onedb.create_for_import(tgt, db, database_ddl, definitions)
        dest = Path(onedb.datadir(tgt)) / onedb.dir_name(db)
        owner = dest.stat()
        for t in tables:
            for ext in (".ibd", ".cfg"):
                f = backup_dir / onedb.dir_name(db) / (onedb.dir_name(t) + ext)
                to = dest / f.name
                try:
                    os.replace(f, to)  # the work directory on the data directory's file system: no second copy
                except OSError:
                    shutil.copyfile(f, to)
                os.chown(to, owner.st_uid, owner.st_gid)
        onedb.import_tablespaces(tgt, db, tables)
        for t in tables:
            (dest / (onedb.dir_name(t) + ".cfg")).unlink(missing_ok=True)
        # Nothing may be written into the imported tables before a checkpoint has passed the import: until
        # then a crash of the target's server loses every such change (onedb.checkpoint_past_import).
        waited = onedb.checkpoint_past_import(tgt)
        log.info("%s imported; InnoDB's checkpoint passed the import after %.2fs", db, waited)
    except Exception as exc:
        # The target's copy is disposable until the flip: nothing half-imported stays behind.
        if created:
            try:
                onedb.drop_database(tgt, db)
            except Exception:
                pass
        if isinstance(exc, MigrationFailed):
            raise
        why = (f"{exc.strerror}: {Path(exc.filename).name}" if isinstance(exc, OSError) and exc.filename
               else str(getattr(exc, "args", [exc])[-1]))
        raise MigrationFailed(f"could not import {db} into the target", why,
                              "the source keeps serving; the partial copy was removed", phase="prepare") from exc
    finally:
        tgt.close()
    return tables


def _remove_partial(connect: Callable, db: str) -> None:
    try:
        conn = connect()
    except Exception:  # noqa: BLE001 - the target is down: its copy is removed when the move is retried
        return
    try:
        onedb.drop_database(conn, db)
    except Exception:  # noqa: BLE001
        pass
    finally:
        conn.close()


def stream_files(backup_dir: Path, db: str) -> dict[str, int]:
    """What a partial backup held, in bytes by kind: the database's own files and what it copies
    whatever the databases asked for (system tablespace, undo, redo, Aria's log)."""
    own = onedb.dir_name(db)
    out = {"database": 0, "system tablespace": 0, "undo": 0, "redo": 0, "aria log": 0, "other": 0}
    for f in backup_dir.rglob("*"):
        if not f.is_file():
            continue
        rel, size = f.relative_to(backup_dir), f.stat().st_size
        name = rel.name
        if rel.parts[0] == own:
            out["database"] += size
        elif name.startswith("ibdata"):
            out["system tablespace"] += size
        elif name.startswith("undo"):
            out["undo"] += size
        elif name.startswith("ib_logfile"):
            out["redo"] += size
        elif name.startswith("aria_log"):
            out["aria log"] += size
        else:
            out["other"] += size
    return out


def backup_position(backup_dir: Path) -> Position:
    for name in ("mariadb_backup_binlog_info", "xtrabackup_binlog_info"):
        f = backup_dir / name
        if f.exists():
            p = parse_binlog_info(f.read_text())
            return Position(p.gtid, p.binlog_file, p.binlog_pos)
    raise MigrationFailed("the backup has no binlog position", "no xtrabackup_binlog_info in the stream",
                          "is the source's binary log enabled?", phase="prepare")


def prepare_export(backup_dir: Path, timeout_s: float = PREPARE_TIMEOUT_S) -> None:
    """`mariabackup --prepare --export`: crash recovery of the partial copy, then a .cfg per table."""
    argv = [mariadb.find_program("mariabackup"), "--prepare", "--export", f"--target-dir={backup_dir}"]
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
                           start_new_session=True)
    except subprocess.TimeoutExpired:
        raise MigrationFailed("mariabackup --prepare --export timed out", f"after {timeout_s:.0f}s",
                              "the source is untouched; retry", phase="prepare") from None
    if r.returncode != 0:
        raise MigrationFailed(f"mariabackup --prepare --export failed (exit {r.returncode})",
                              error_lines(r.stderr.decode(errors="replace")), "the source is untouched; retry",
                              phase="prepare")


# --- the pipe -------------------------------------------------------------------------------------
class _Pipeline:
    """producer | [throttle] | consumer in one process group of their own, with the bytes passing
    through this process on their way into the consumer (counted, the head and tail kept)."""

    def __init__(self, producer: list[str], throttle: list[str] | None, consumer: list[str], log_dir: Path,
                 label: str) -> None:
        self.argvs = [producer] + ([throttle] if throttle else []) + [consumer]
        self.log_dir, self.label = log_dir, label
        self.procs: list[subprocess.Popen] = []
        self.bytes = 0
        self.head = b""
        self.tail = b""
        self.logs: list[Path] = []

    @property
    def pgid(self) -> int | None:
        return self.procs[0].pid if self.procs else None

    def _start(self, argv, stdin, stdout, i: int) -> subprocess.Popen:
        log = self.log_dir / f"{self.label}-{i}.log"
        self.logs.append(log)
        with open(log, "wb") as err:
            # One process group of their own (not a session: a later member could not join it there).
            kw = {"process_group": 0 if not self.procs else self.pgid}
            p = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=err, close_fds=True, **kw)
        self.procs.append(p)
        return p

    def run(self, timeout_s: float) -> None:
        try:
            upstream = None
            for i, argv in enumerate(self.argvs[:-1]):
                p = self._start(argv, upstream if upstream is not None else subprocess.DEVNULL, subprocess.PIPE, i)
                if upstream is not None:
                    upstream.close()
                upstream = p.stdout
            consumer = self._start(self.argvs[-1], subprocess.PIPE, subprocess.DEVNULL, len(self.argvs) - 1)
            pump = threading.Thread(target=self._pump, args=(upstream, consumer.stdin), daemon=True)
            pump.start()
            deadline = time.monotonic() + timeout_s
            for p in self.procs:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            pump.join(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise MigrationFailed(f"the {self.label} did not finish within {timeout_s:.0f}s", "its pipeline was stopped",
                                  "the source keeps serving; retry", phase="snapshot") from None
        except BaseException:
            self.kill()
            raise
        failed = [(argv, p.returncode, log) for argv, p, log in zip(self.argvs, self.procs, self.logs)
                  if p.returncode != 0]
        text = {log: log.read_text(errors="replace") for log in self.logs}
        for log in self.logs:
            log.unlink(missing_ok=True)
        if failed:
            argv, rc, log = failed[-1] if failed[-1][0] is self.argvs[-1] else failed[0]
            # The client quotes the statement it failed on, and that is the tenant's data: never in a message.
            why = re.sub(r"near '.*?' at line", "near (the statement's text) at line", error_lines(text[log]))
            raise MigrationFailed(f"{os.path.basename(argv[0])} exited {rc} during the {self.label}", why,
                                  "the source keeps serving; retry", phase="snapshot")

    def _pump(self, src, dst) -> None:
        try:
            while True:
                chunk = src.read1(CHUNK)
                if not chunk:
                    break
                if len(self.head) < HEAD_BYTES:
                    self.head += chunk[:HEAD_BYTES - len(self.head)]
                self.tail = (self.tail + chunk)[-TAIL_BYTES:]
                self.bytes += len(chunk)
                dst.write(chunk)
        except (BrokenPipeError, OSError):
            pass
        finally:
            for f in (dst, src):
                try:
                    f.close()
                except OSError:
                    pass

    def kill(self) -> None:
        if self.pgid is not None:
            kill_group(self.pgid)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def _refuse_if_present(connect, db: str, why: str) -> None:
    """Before a copy starts: a target that already has the database is refused, the source untouched."""
    tgt = connect()
    try:
        if onedb.exists(tgt, db):
            raise onedb.refuse(f"the target already has a database {db}", why,
                               "the source keeps serving; remove it, or move the tenant elsewhere")
    finally:
        tgt.close()
