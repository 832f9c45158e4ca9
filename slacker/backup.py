"""Hot-backup tool adapters: stream a consistent backup, extract, prepare, read its binlog position.

MariaDB ships mariabackup/mbstream; Percona XtraBackup ships xtrabackup/xbstream.
Both are driven through `BackupTool`; `select_tool` picks the one that fits the
installed programs and the server flavour. Credentials go in a 0600 defaults
file handed over with --defaults-file, never in argv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import mariadb
from .errors import MigrationFailed, MissingDependency
from .procs import kill_group, pids_with_arg
from .trash import tree_bytes
from .mariadb.server import error_lines

PREPARE_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class BackupPosition:
    """Where the backup is consistent in the source's binlog."""

    binlog_file: str
    binlog_pos: int
    gtid: str  # MariaDB GTID position, e.g. "0-12-345" (several domains comma-separated)


# How often the tool's redo-log copier looks for new log (both tools default to
# 1000 ms). Under its final commit lock the tool waits for the copier to reach
# the current LSN, so on a tenant taking writes every commit stalled for up to
# a whole interval: measured 1.01 s at 550 txn/s with the default, see
# docs/results.md. Each poll is a `SHOW STATUS LIKE 'Innodb_lsn_flushed'` on the
# tenant and one pread of the tool's log buffer (mariabackup 10.11 reads
# innodb_log_buffer_size bytes from its last position, new log or not), and it
# polls for the whole copy, paused or not: see LOG_READ_BUFFER.
LOG_COPY_INTERVAL_MS = 10

# mariabackup's log read buffer, set in the [mariabackup] group of the backup's
# own defaults file (the tenant's server keeps its own size). With the tenant's
# 16M, a copy paused by its controller burned 0.19-0.23 of a core re-reading the
# same 16 MiB every poll; with 2M (the least the tool accepts) 0.06 (a tenant at
# 100 txn/s, 10 s of a stream whose reader took nothing). On a latency-bound
# source that cost is what the controller cannot pause: two paused copies held a
# 0.5-core node's latency at twice its setpoint with every copy stopped
# (bench/run fleet --cpu-per-node 0.5). The buffer bounds one read, not the log
# copier's throughput: it reads again at once while there is more.
LOG_READ_BUFFER = "2M"

# Data files copied at once. mariabackup (10.11) reads a data file in 10 MiB
# chunks, each one O_DIRECT pread at the disk's full speed, and the pipe paces
# only what comes after: at the copy's start every copying thread reads its
# first chunk at once, whatever the rate. With two threads (ibdata1 and the
# largest table side by side) that was 20 MiB, 0.7 s of a 30 MB/s disk, and the
# tenant's queue took seconds to drain on a disk-bound host. A throttled copy gains nothing from a second thread: the pipe is
# the limit, not the reads.
PARALLEL_FILES = 1


class BackupTool:
    """A hot-backup tool that streams xbstream and prepares with --prepare.

    mariabackup and xtrabackup share their command-line shape; a subclass names
    its programs and the option group its credentials go in.
    """

    name: str
    stream_program: str
    extract_program: str
    group: str

    def stream_argv(self, defaults_file: Path, work_dir: Path) -> list[str]:
        """Command that writes an xbstream of a hot backup to stdout."""
        return [mariadb.find_program(self.stream_program), f"--defaults-file={defaults_file}", "--backup",
                "--stream=xbstream", f"--target-dir={work_dir}", f"--parallel={PARALLEL_FILES}",
                f"--log-copy-interval={LOG_COPY_INTERVAL_MS}"]

    def extract_argv(self, dest: Path) -> list[str]:
        return [mariadb.find_program(self.extract_program), "-x", "-C", str(dest)]

    def prepare_argv(self, backup_dir: Path) -> list[str]:
        """Command that applies crash recovery to an extracted backup."""
        return [mariadb.find_program(self.stream_program), "--prepare", f"--target-dir={backup_dir}"]

    def stray_prepares(self, backup_dir: Path) -> list[int]:
        """Prepares of `backup_dir` still running: one an agent killed midway left (its own session)."""
        return pids_with_arg(f"--target-dir={backup_dir}")

    def prepare(self, backup_dir: Path, timeout_s: float = PREPARE_TIMEOUT_S, on_start=None) -> None:
        """Apply crash recovery in place. `on_start(proc)` learns the process (its own group) so an
        abort can kill it; a killed prepare fails like any other."""
        log = backup_dir.parent / f"{backup_dir.name}-prepare.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(self.prepare_argv(backup_dir), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            if on_start is not None:
                on_start(proc)
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                proc.wait(timeout=10)
                rc = None
        text = log.read_text(errors="replace")
        log.unlink(missing_ok=True)
        if rc != 0:
            raise MigrationFailed(f"{self.name} --prepare failed" + (f" (exit {rc})" if rc is not None else
                                                                     f" (timeout {timeout_s:.0f}s)"),
                                  error_lines(text), "the source is untouched; retry the migration", phase="prepare")

    def read_position(self, backup_dir: Path) -> BackupPosition:
        """The binlog file, offset and GTID position the backup is consistent at."""
        return parse_binlog_info((backup_dir / "xtrabackup_binlog_info").read_text())

    # Options for the tool alone, appended to its group of the backup's defaults file.
    tool_options: tuple[str, ...] = ()

    def backup_defaults(self, server_config: str, user: str, password: str, socket: Path) -> str:
        """Defaults file body: the server's own config (datadir, InnoDB layout) plus credentials, and the
        tool's own options in its group (read after the server's, so they win for the tool only)."""
        body = server_config + "\n" + mariadb.client_defaults(user, password, socket=socket, group=self.group)
        return body + "".join(f"{o}\n" for o in self.tool_options)


# What the backup tools print (stderr) when they take and release a lock that blocks
# the source's commits: mariabackup's BACKUP STAGE BLOCK_COMMIT, FLUSH TABLES WITH READ
# LOCK (older mariabackup/xtrabackup, or non-InnoDB tables) and Percona's LOCK BINLOG.
# While one is held the copy must run unthrottled (see ThrottledPipe.effective_rate).
COMMIT_LOCK_TAKEN = (
    "Starting BACKUP STAGE BLOCK_COMMIT",
    "Executing FLUSH TABLES WITH READ LOCK",
    "Executing LOCK BINLOG FOR BACKUP",
)
COMMIT_LOCK_RELEASED = (
    "All tables unlocked",
    "Executing UNLOCK TABLES",
    "Executing UNLOCK BINLOG",
)


def commit_lock_event(line: str) -> bool | None:
    """True if this log line says the tool took a commit-blocking lock, False if it released one."""
    if any(marker in line for marker in COMMIT_LOCK_TAKEN):
        return True
    if any(marker in line for marker in COMMIT_LOCK_RELEASED):
        return False
    return None


class MariaBackup(BackupTool):
    name = "mariabackup"
    stream_program = "mariabackup"
    extract_program = "mbstream"
    group = "mariabackup"
    # skip-ssl: the tool reaches its own host's server by the unix socket, where TLS protects nothing; but
    # against a server that offers TLS (a tenant of a TLS cluster) its client library negotiates it anyway,
    # loading the system CA bundle and handshaking first: 0.24-0.26 s to the stream's first byte against
    # 0.06 with skip-ssl, 0.51 CPU-s against 0.23-0.25 for a 36 MB tenant (by hand, same tenant).
    tool_options = (f"innodb_log_buffer_size = {LOG_READ_BUFFER}", "skip-ssl")


class XtraBackup(BackupTool):
    """Percona XtraBackup, for MySQL/Percona Server sources."""

    name = "xtrabackup"
    stream_program = "xtrabackup"
    extract_program = "xbstream"
    group = "xtrabackup"


def parse_binlog_info(text: str) -> BackupPosition:
    """Parse xtrabackup_binlog_info: `FILE<TAB>POS[<TAB>GTID]` (MariaDB 10.11 writes all three)."""
    parts = [p for p in text.strip().split("\t") if p != ""] if "\t" in text else text.split()
    if len(parts) < 2:
        raise MigrationFailed("backup has no binlog position", f"xtrabackup_binlog_info says {text.strip()!r}",
                              "is the source's binary log enabled?", phase="prepare")
    try:
        pos = int(parts[1])
    except ValueError:
        raise MigrationFailed("backup binlog position is malformed", repr(text.strip()), "", phase="prepare") from None
    gtid = parts[2].strip() if len(parts) > 2 else ""
    return BackupPosition(binlog_file=parts[0].strip(), binlog_pos=pos, gtid=gtid.replace(" ", ""))


def select_tool(server_version: str = "MariaDB") -> BackupTool:
    """mariabackup for MariaDB servers, xtrabackup for MySQL/Percona, whichever is installed."""
    mariadb_flavour = "mariadb" in server_version.lower()
    order = (MariaBackup(), XtraBackup()) if mariadb_flavour else (XtraBackup(), MariaBackup())
    for tool in order:
        if shutil.which(tool.stream_program) or any(
                os.access(os.path.join(d, tool.stream_program), os.X_OK) for d in ("/usr/bin", "/usr/sbin")):
            if tool.name == "mariabackup" and not mariadb_flavour:
                continue  # mariabackup cannot back up MySQL 8 data files
            return tool
    pkg = "mariadb-backup" if mariadb_flavour else "percona-xtrabackup"
    raise MissingDependency(f"no hot-backup tool for {server_version}", f"the package {pkg} is not installed",
                            f"run scripts/install, or apt-get install {pkg}")


def directory_bytes(path: Path) -> int:
    """Sum of file sizes under path: the estimate of a backup's stream size for ETA."""
    return tree_bytes(path)
