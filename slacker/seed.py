"""A node's seed data directory: `mariadb-install-db` run once, then copied into every tenant it creates.

The install tool starts a bootstrap server that creates the system tables: ~0.9 s of a `tenant create`
that otherwise takes ~0.4 s. Its result holds nothing of a tenant's own (no accounts with passwords, no
binlog, no server id: those come with the tenant's config and its first start's init file), so one run
serves every tenant of the node. A copy writes only the seed's blocks that are not all zeros into files
allocated to their full size, and is flushed to disk before the tenant is put in place, as the install
tool's own files were.

The seed lives in `<data_root>/seed/<key>/data`, where the key is a digest of the server programs
(path, size, modification time) and of the rendered config it was made with (every option a tenant's
config has, paths aside): an upgraded `mariadbd` or a release with different server options builds a
new seed on the next create, and the old one is removed. Built under `seed/.building/` and renamed into
place whole (slacker/trash.py), under a lock, so concurrent creates build it once and an agent killed
midway leaves only what `trash.sweep_building` clears at its next start.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from . import mariadb, trash
from .errors import TenantError

log = logging.getLogger(__name__)

LOCK = ".lock"
# Files of the install tool's run that a tenant must not inherit: the buffer pool dump names pages of the
# bootstrap server's pool (harmless, but a tenant's first start would read it).
SKIP = frozenset({"ib_buffer_pool"})
INSTALL_TIMEOUT_S = 120.0
PLACEHOLDER = Path("/seed")
COPY_BLOCK = 64 * 1024
ZEROS = bytes(COPY_BLOCK)


def program_identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def seed_config(root: Path, buffer_pool_bytes: int) -> mariadb.ServerConfig:
    """The config the seed is made with: a tenant's, with paths under `root` and no TLS (the install
    tool opens no connection)."""
    return mariadb.ServerConfig(
        tenant_id="seed", datadir=root / "data", socket=root / "s.sock", pid_file=root / "seed.pid",
        error_log=root / "error.log", host="127.0.0.1", port=3306, server_id=1,
        buffer_pool_bytes=buffer_pool_bytes, tmpdir=root / "tmp")


class Seed:
    """The seed of one node's data root."""

    def __init__(self, root: Path, buffer_pool_bytes: int) -> None:
        self.root = Path(root)
        self.buffer_pool_bytes = buffer_pool_bytes

    def key(self) -> str:
        """Changes with the server programs and with any option of the config it is made with."""
        digest = hashlib.sha256()
        for name in ("mariadbd", "mariadb-install-db"):
            digest.update(program_identity(mariadb.find_program(name)).encode() + b"\n")
        digest.update(seed_config(PLACEHOLDER, self.buffer_pool_bytes).render().encode())
        return digest.hexdigest()[:16]

    def ensure(self) -> Path:
        """The seed's data directory, built first if the current key has none."""
        key = self.key()
        final = self.root / key
        if (final / "data").is_dir():
            return final / "data"
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.root / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another create (thread or process) builds: wait for it
            if not (final / "data").is_dir():
                self._build(key, final)
            return final / "data"

    def _build(self, key: str, final: Path) -> None:
        built = trash.building_dir(self.root, key)
        try:
            (built / "tmp").mkdir()
            config = seed_config(built, self.buffer_pool_bytes)
            config_file = built / "my.cnf"
            config_file.write_text(config.render())
            run_install_tool(config_file, config.error_log, built / "install-db.log",
                             what="the node's seed data directory")
            fsync_tree(built / "data")
            trash.put_in_place(built, final)
        except BaseException:
            shutil.rmtree(built, ignore_errors=True)
            raise
        for old in self.root.iterdir():
            if old.name != key and not old.name.startswith("."):
                # Renamed aside first: a removal cut short leaves it in .building/ (swept at start), never a
                # half-deleted seed under a key that could come back (a downgrade).
                log.info("removing the seed data directory %s (made for other server programs or options)", old)
                aside = trash.building_dir(self.root, f"{old.name}-old")
                os.rename(old, aside / "seed")
                shutil.rmtree(aside, ignore_errors=True)

    def copy_into(self, datadir: Path) -> None:
        """Lay out a new tenant's data directory (which must not exist) from the seed, flushed to disk."""
        source = self.ensure()
        try:
            shutil.copytree(source, datadir, ignore=lambda d, names: [n for n in names if n in SKIP],
                            copy_function=copy_allocated)
            fsync_tree(datadir)
        except (OSError, shutil.Error) as exc:
            raise TenantError(f"could not copy the seed data directory into {datadir}", str(exc),
                              "check the data root's free space and permissions, then retry") from None


def copy_allocated(src: str, dst: str) -> None:
    """Copy a file into a new one allocated to its full size first (`posix_fallocate`: space reserved,
    reading as zeros), writing only the blocks that are not all zeros. The seed is ~85 MB of which ~7 MB
    are not zeros (a 64 MiB redo log holds a few blocks), so a tenant's copy writes and flushes that much
    while its files take the same space on disk as the install tool's would."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(src, "rb", buffering=0) as source:
            size = os.fstat(source.fileno()).st_size
            if size:
                os.posix_fallocate(fd, 0, size)
            offset = 0
            while chunk := source.read(COPY_BLOCK):
                if chunk != ZEROS[:len(chunk)]:
                    os.pwrite(fd, chunk, offset)
                offset += len(chunk)
    finally:
        os.close(fd)
    shutil.copystat(src, dst)


def run_install_tool(config_file: Path, error_log: Path, log_file: Path, what: str) -> None:
    """mariadb-install-db on `config_file`'s datadir; TenantError with the error lines of the server's
    log (`error_log`), else of the tool's own output, when it fails."""
    cmd = [mariadb.find_program("mariadb-install-db"), f"--defaults-file={config_file}", "--skip-test-db",
           "--auth-root-authentication-method=socket"]
    if os.geteuid() == 0:
        cmd.append("--user=root")
    with open(log_file, "wb") as out:
        try:
            # Own session: `trash.sweep_building` finds a killed agent's install tool by its --defaults-file.
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S,
                                start_new_session=True).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    if rc != 0:
        raise TenantError(f"mariadb-install-db failed for {what} (exit {rc})",
                          mariadb.error_lines((error_log if error_log.exists() else log_file)
                                              .read_text(errors="replace")),
                          "check the node's options (buffer pool, port range, data_root) and retry")


def fsync_tree(root: Path) -> None:
    """Every file and directory under `root` on disk, then `root`'s entry in its parent."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        trash.fsync_dir(Path(dirpath))
    trash.fsync_dir(Path(root).parent)
