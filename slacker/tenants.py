"""Tenant lifecycle on one node: one mariadbd process per tenant (process-level multitenancy).

A tenant lives in `<data_root>/tenants/<id>/`: the generated `my.cnf`, `data/`,
`log/`, `secrets/` (0600 password files) and `tenant.json` (its metadata). Its
socket sits in `<data_root>/sock/` to stay within the unix socket path limit.
A tenant directory appears whole and goes whole (slacker/trash.py): laid out
under `tenants/.building/`, removed through `tenants/.trash/`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket as socketlib
import subprocess
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from . import mariadb
from .mariadb import ops
from .mariadb.server import error_lines
from .procs import kill_group as _kill_group, wait_gone as _wait_gone
from .config import DEFAULT_PORT_RANGE, parse_port_range, validate_tenant_id
from .errors import Conflict, InvalidInput, NotFound, TenantError
from . import trash
from .seed import Seed
from .trash import TrashName, fsync_dir

# A small tenant's working set; `tenant create --buffer-pool` for more (docs/configuration.md, sizing).
DEFAULT_BUFFER_POOL_BYTES = 32 * 1024 * 1024
START_TIMEOUT_S = 60.0
START_POLL_S = 0.02  # a refused connect costs next to nothing; a migration's target waits on it
STOP_TIMEOUT_S = 30.0
_MAX_SOCKET_PATH = 107


def preferred_port(tenant_id: str, port_range: tuple[int, int]) -> int:
    """The port is a fixed function of the id: a hash into the range."""
    lo, hi = port_range
    return lo + zlib.crc32(tenant_id.encode()) % (hi - lo + 1)


AUTO_PORT_PROBES = 64


def choose_port(tenant_id: str, port_range: tuple[int, int], taken: Iterable[int]) -> int:
    """The id's preferred port, or on collision the next free one (wrapping) in the range.

    The chosen port is recorded in the directory and kept across migrations, so
    clients never need to recompute it.
    """
    lo, hi = port_range
    taken_set = set(taken)
    start = preferred_port(tenant_id, port_range)
    size = hi - lo + 1
    for i in range(size):
        port = lo + (start - lo + i) % size
        if port not in taken_set:
            return port
    raise Conflict(f"no free port for tenant {tenant_id}",
                   f"all {size} ports in {lo}-{hi} are taken",
                   "widen the node's port_range or delete unused tenants")


def port_holders(port: int) -> list[str]:
    """Who listens on TCP `port` (any address), as "NAME[PID]" (or "inode N" when no process of this
    host's /proc shows the socket): for the error that says a tenant's port is taken."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f[9])
    if not inodes:
        return []
    found: list[str] = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    inodes.discard(target[8:-1])
                    found.append(f"{(pid_dir / 'comm').read_text().strip()}[{pid_dir.name}]")
        except OSError:
            continue
    return found + [f"inode {i}" for i in sorted(inodes)]


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    """Until `port` can be bound on `host` (a server just stopped may still hold it for a moment)."""
    deadline = time.monotonic() + timeout_s
    while not port_is_free(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def port_is_free(host: str, port: int) -> bool:
    s = socketlib.socket(socketlib.AF_INET, socketlib.SOCK_STREAM)
    try:
        s.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


@dataclass
class TenantInfo:
    """What a node knows about one of its tenants (persisted as tenant.json)."""

    id: str
    host: str
    port: int
    server_id: int
    buffer_pool_bytes: int
    created_at: float
    # "running" tenants are kept running by the supervisor; "stopped" ones were stopped
    # on purpose; "incoming" ones are migration targets not yet owned; "retired" ones are
    # migration sources past the ownership flip, never to start again.
    desired_state: str = "running"
    extra: dict = field(default_factory=dict)
    # Fenced: the server runs read_only (persisted in its generated config), because another
    # node owns the tenant or is about to. Only the directory's answer lifts it.
    fenced: bool = False


class Tenant:
    """Paths and credentials of one tenant on this node."""

    def __init__(self, root: Path, info: TenantInfo, sock_dir: Path, tls=None, require_tls: bool = False) -> None:
        self.root = root
        self.info = info
        self.sock_dir = sock_dir
        self.tls = tls  # the node's TlsFiles: rendered into my.cnf at every start
        self.require_tls = require_tls

    id = property(lambda self: self.info.id)
    host = property(lambda self: self.info.host)
    port = property(lambda self: self.info.port)
    datadir = property(lambda self: self.root / "data")
    config_file = property(lambda self: self.root / "my.cnf")
    error_log = property(lambda self: self.root / "log" / "error.log")
    pid_file = property(lambda self: self.root / "run" / "mariadbd.pid")
    socket = property(lambda self: self.sock_dir / f"{self.info.id}.sock")
    admin_password_file = property(lambda self: self.root / "secrets" / "admin.password")
    app_password_file = property(lambda self: self.root / "secrets" / "app.password")
    backup_password_file = property(lambda self: self.root / "secrets" / "backup.password")
    repl_password_file = property(lambda self: self.root / "secrets" / "repl.password")
    admin_defaults_file = property(lambda self: self.root / "secrets" / "admin.cnf")
    meta_file = property(lambda self: self.root / "tenant.json")

    def server_config(self) -> mariadb.ServerConfig:
        return mariadb.ServerConfig(
            tenant_id=self.id, datadir=self.datadir, socket=self.socket, pid_file=self.pid_file,
            error_log=self.error_log, host=self.host, port=self.port, server_id=self.info.server_id,
            buffer_pool_bytes=self.info.buffer_pool_bytes, tmpdir=self.root / "tmp",
            read_only=self.info.fenced,
            ssl_ca=self.tls.ca if self.tls else None, ssl_cert=self.tls.cert if self.tls else None,
            ssl_key=self.tls.key if self.tls else None, require_secure_transport=bool(self.tls and self.require_tls),
        )

    def admin_password(self) -> str:
        return self.admin_password_file.read_text().strip()

    def app_password(self) -> str:
        return self.app_password_file.read_text().strip()

    def backup_password(self) -> str:
        return self.backup_password_file.read_text().strip()

    def repl_password(self) -> str:
        return self.repl_password_file.read_text().strip()

    def ensure_service_accounts(self) -> None:
        """Give a tenant created before the backup and replication accounts existed its own pair."""
        if self.backup_password_file.exists() and self.repl_password_file.exists():
            return
        for f in (self.backup_password_file, self.repl_password_file):
            if not f.exists():
                mariadb.write_secret(f, secrets.token_urlsafe(24) + "\n")
        conn = self.admin_connect()
        try:
            mariadb.create_service_accounts(conn, self.backup_password(), self.repl_password())
        finally:
            conn.close()

    def admin_connect(self, timeout_s: float = 5.0, **kwargs):
        return mariadb.connect(user=mariadb.ADMIN_USER, password=self.admin_password(),
                               socket=self.socket, timeout_s=timeout_s, **kwargs)

    def pid(self) -> int | None:
        """The running mariadbd's pid, checked against /proc so a stale file is ignored."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if any(str(self.config_file).encode() in part for part in cmdline):
            return pid
        return None

    def is_running(self) -> bool:
        return self.pid() is not None

    def error_log_tail(self, lines: int = 8) -> str:
        try:
            return error_lines(self.error_log.read_text(errors="replace"), lines)
        except OSError:
            return "(no error log)"

    def save(self) -> None:
        """Persist the metadata atomically and durably: a fence must survive a crash right after."""
        tmp = self.meta_file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(asdict(self.info), indent=2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.meta_file)
        fsync_dir(self.root)

    def write_config(self) -> None:
        self.config_file.write_text(self.server_config().render())
        mariadb.write_secret(
            self.admin_defaults_file,
            mariadb.client_defaults(mariadb.ADMIN_USER, self.admin_password(), socket=self.socket),
        )


class TenantManager:
    """Creates, starts, stops and deletes the tenants under one node's data root."""

    def __init__(self, data_root: Path | str, host: str = "127.0.0.1", node: str = "local",
                 port_range: tuple[int, int] = DEFAULT_PORT_RANGE, tls=None, require_tls: bool = False) -> None:
        self.data_root = Path(data_root).resolve()
        self.tls = tls  # the node's TlsFiles (tenants accept TLS), or None
        self.require_tls = require_tls
        self.host = host
        self.node = node
        self.port_range = parse_port_range(port_range)
        self.tenants_dir = self.data_root / "tenants"
        # What `mariadb-install-db` makes, made once and copied into each tenant created here.
        self.seed = Seed(self.data_root / "seed", DEFAULT_BUFFER_POOL_BYTES)
        self.sock_dir = self.data_root / "sock"
        for d in (self.tenants_dir, self.sock_dir):
            d.mkdir(parents=True, exist_ok=True)
            # Data, sockets and secrets are the agent's user's alone (its tenants run as that user).
            with contextlib.suppress(PermissionError):
                os.chmod(d, 0o700)
        # Tenants whose running server may not be fenced as their tenant.json says: a fence is persisted
        # before the server is told, so an agent killed in between (or a server that could not be told)
        # leaves the two apart. At start that may be any tenant; the reconciler checks each once
        # (slacker.migration.reconcile) and `apply_fence` brings the server in line.
        self.fence_unsure: set[str] = {d.name for d in self.tenants_dir.iterdir()
                                       if not d.name.startswith(".") and (d / "tenant.json").exists()}

    # ---- lookup -----------------------------------------------------------------
    def tenant_dir(self, tenant_id: str) -> Path:
        return self.tenants_dir / validate_tenant_id(tenant_id)

    def get(self, tenant_id: str) -> Tenant:
        root = self.tenant_dir(tenant_id)
        meta = root / "tenant.json"
        if not meta.exists():
            raise NotFound(f"tenant {tenant_id} not found on node {self.node}",
                           f"{root} holds no tenant",
                           "see `slacker tenant list` for the tenants that exist")
        info = TenantInfo(**json.loads(meta.read_text()))
        return Tenant(root, info, self.sock_dir, self.tls, self.require_tls)

    def exists(self, tenant_id: str) -> bool:
        return (self.tenant_dir(tenant_id) / "tenant.json").exists()

    def list(self) -> list[Tenant]:
        out = []
        for d in sorted(self.tenants_dir.iterdir()):
            if not d.name.startswith(".") and (d / "tenant.json").exists():
                try:
                    out.append(self.get(d.name))
                except (InvalidInput, ValueError, TypeError):
                    continue
        return out

    def local_ports(self) -> set[int]:
        return {t.port for t in self.list()}

    # ---- create -----------------------------------------------------------------
    def new_tenant(self, tenant_id: str, port: int, buffer_pool_bytes: int,
                   desired_state: str = "running") -> Tenant:
        """Lay out an empty tenant (config, secrets dir) without a datadir, under `tenants/.building/`:
        the caller writes what it needs, then `put_in_place` renames it to its name, whole."""
        validate_tenant_id(tenant_id)
        root = self.tenant_dir(tenant_id)
        if self.exists(tenant_id):
            raise Conflict(f"tenant {tenant_id} already exists on node {self.node}",
                           f"{root} is in use", "pick another id or delete the tenant first")
        if root.exists() and any(root.iterdir()):
            raise Conflict(f"data directory {root} is not empty",
                           "it holds files of no known tenant",
                           "its agent moves them aside into tenants/.quarantine/ within seconds "
                           "(`slacker status` names them): retry")
        sock = self.sock_dir / f"{tenant_id}.sock"
        if len(str(sock)) > _MAX_SOCKET_PATH:
            raise InvalidInput(f"data root {self.data_root} is too deep",
                               f"the socket path {sock} exceeds {_MAX_SOCKET_PATH} characters",
                               "use a shorter data_root")
        if buffer_pool_bytes < 8 * 1024 * 1024:
            raise InvalidInput(f"buffer pool {buffer_pool_bytes} bytes is too small",
                               "MariaDB needs at least 8MiB", "for example --buffer-pool 128M")
        info = TenantInfo(id=tenant_id, host=self.host, port=port,
                          server_id=mariadb.server_id_for(self.node, tenant_id),
                          buffer_pool_bytes=buffer_pool_bytes, created_at=time.time(),
                          desired_state=desired_state)
        built = trash.building_dir(self.tenants_dir, tenant_id)
        for sub in ("log", "run", "secrets", "tmp"):
            (built / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(built / "secrets", 0o700)
        return Tenant(built, info, self.sock_dir, self.tls, self.require_tls)

    def put_in_place(self, tenant: Tenant) -> None:
        """A tenant laid out by `new_tenant` (its tenant.json written) takes its name in one rename;
        its config is rendered again for its final paths."""
        final = self.tenant_dir(tenant.id)
        if tenant.root == final:
            return
        try:
            trash.put_in_place(tenant.root, final)
        except OSError as exc:
            raise Conflict(f"data directory {final} is not empty", f"it appeared while tenant {tenant.id} was "
                           f"being created ({exc.strerror})", "retry; see `slacker status`") from None
        tenant.root = final
        tenant.write_config()

    def automatic_port(self, tenant_id: str, taken: set[int]) -> int:
        """The id's port in the range, stepping over ports another process holds (say, a
        transfer receiver's ephemeral port that fell inside the range) instead of failing."""
        for _ in range(AUTO_PORT_PROBES):
            port = choose_port(tenant_id, self.port_range, taken)
            if port_is_free(self.host, port):
                return port
            taken.add(port)
        raise Conflict(f"no free port for tenant {tenant_id} on {self.host}",
                       f"the first {AUTO_PORT_PROBES} candidates in {self.port_range[0]}-{self.port_range[1]} "
                       "are held by other processes", "change the node's port_range")

    def create(self, tenant_id: str, port: int | None = None,
               buffer_pool_bytes: int = DEFAULT_BUFFER_POOL_BYTES,
               taken_ports: Iterable[int] = ()) -> Tenant:
        """Create, initialise and start a tenant; on any failure nothing is left behind."""
        mariadbd = mariadb.find_program("mariadbd")
        validate_tenant_id(tenant_id)
        if port is None:
            port = self.automatic_port(tenant_id, set(taken_ports) | self.local_ports())
        elif not port_is_free(self.host, port):
            raise Conflict(f"port {port} on {self.host} is in use",
                           "another process listens there",
                           "stop that process or change the node's port_range")
        tenant = self.new_tenant(tenant_id, port, buffer_pool_bytes)
        try:
            mariadb.write_secret(tenant.admin_password_file, secrets.token_urlsafe(24) + "\n")
            mariadb.write_secret(tenant.app_password_file, secrets.token_urlsafe(24) + "\n")
            mariadb.write_secret(tenant.backup_password_file, secrets.token_urlsafe(24) + "\n")
            mariadb.write_secret(tenant.repl_password_file, secrets.token_urlsafe(24) + "\n")
            tenant.write_config()
            tenant.save()
            self.seed.copy_into(tenant.datadir)
            self.put_in_place(tenant)
            init_file = tenant.root / "secrets" / "init.sql"
            mariadb.write_secret(init_file, mariadb.bootstrap_sql(tenant.admin_password(), tenant.app_password(),
                                                                 tenant.backup_password(), tenant.repl_password()))
            try:
                self._start(tenant, mariadbd, extra_args=[f"--init-file={init_file}"])
            finally:
                init_file.unlink(missing_ok=True)
            return tenant
        except BaseException:
            self._destroy(tenant, reason="failed-create")
            raise

    # ---- start / stop -----------------------------------------------------------
    def start(self, tenant_id: str, timeout_s: float = START_TIMEOUT_S) -> Tenant:
        tenant = self.get(tenant_id)
        if tenant.info.desired_state in ("retired", "incoming"):
            raise Conflict(f"tenant {tenant_id} on node {self.node} is {tenant.info.desired_state}",
                           "a migration moved it away or is moving it here; the directory names its owner",
                           "see `slacker locate` and `slacker status`")
        if not tenant.is_running():
            tenant.write_config()
            self._start(tenant, mariadb.find_program("mariadbd"), timeout_s=timeout_s)
        if tenant.info.desired_state == "stopped":
            tenant.info.desired_state = "running"
            tenant.save()
        return tenant

    def start_tenant(self, tenant: Tenant, timeout_s: float = START_TIMEOUT_S,
                     extra_args: list[str] | None = None) -> None:
        """Start an already laid-out tenant (e.g. a migration target) and wait until it answers."""
        tenant.write_config()
        self._start(tenant, mariadb.find_program("mariadbd"), extra_args=extra_args, timeout_s=timeout_s)

    def _start(self, tenant: Tenant, mariadbd: str, extra_args: list[str] | None = None,
               timeout_s: float = START_TIMEOUT_S) -> None:
        if not port_is_free(tenant.host, tenant.port):
            raise Conflict(f"port {tenant.port} on {tenant.host} is in use",
                           "another process listens there", "stop it before starting the tenant")
        tenant.socket.unlink(missing_ok=True)
        log = open(tenant.root / "log" / "mariadbd.out", "ab")
        # Own session: the tenant outlives agent restarts and is never hit by a signal meant for the agent.
        proc = subprocess.Popen([mariadbd, f"--defaults-file={tenant.config_file}", *(extra_args or [])],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise TenantError(f"mariadbd for tenant {tenant.id} exited during start (code {proc.returncode})",
                                  tenant.error_log_tail(), f"full log: {tenant.error_log}")
            try:
                conn = tenant.admin_connect(timeout_s=2)
                conn.close()
                return
            except TenantError:
                pass
            if time.monotonic() > deadline:
                _kill_group(proc.pid)
                raise TenantError(f"tenant {tenant.id} did not accept connections within {timeout_s:.0f}s",
                                  tenant.error_log_tail(), f"full log: {tenant.error_log}")
            time.sleep(START_POLL_S)

    def stop(self, tenant_id: str, timeout_s: float = STOP_TIMEOUT_S, desired_state: str = "stopped") -> None:
        tenant = self.get(tenant_id)
        tenant.info.desired_state = desired_state
        tenant.save()
        self.stop_tenant(tenant, timeout_s)

    @staticmethod
    def stop_tenant(tenant: Tenant, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Clean shutdown (SIGTERM) with a timeout, then SIGKILL of the whole process group."""
        pid = tenant.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if not _wait_gone(pid, timeout_s):
            _kill_group(pid)
            _wait_gone(pid, 5)

    @staticmethod
    def kill_tenant(tenant: Tenant) -> None:
        """Immediate stop: nothing can commit after this returns."""
        pid = tenant.pid()
        if pid is not None:
            _kill_group(pid)
            _wait_gone(pid, 10)

    # ---- fence / retire ---------------------------------------------------------------
    def set_fenced(self, tenant: Tenant, fenced: bool, desired_state: str | None = None, conn=None,
                   live: bool = True) -> None:
        """Fence (read_only) or unfence a tenant: persisted first, so a restart keeps it, then live
        (on `conn` when given: the connection holding a freeze).

        Raises TenantError if the running server cannot be told; the persisted state stands. With
        live=False only the persisted state changes: the caller brings the server in line (`apply_fence`).
        """
        tenant.info.fenced = fenced
        if desired_state is not None:
            tenant.info.desired_state = desired_state
        self.fence_unsure.add(tenant.id)
        tenant.save()
        tenant.write_config()
        if not live:
            return
        if conn is not None:
            ops.set_read_only(conn, fenced)
        elif tenant.is_running():
            own = tenant.admin_connect(timeout_s=5)
            try:
                ops.set_read_only(own, fenced)
            finally:
                own.close()
        self.fence_unsure.discard(tenant.id)

    def apply_fence(self, tenant: Tenant) -> bool | None:
        """Bring a running server's `read_only` in line with the fence its tenant.json holds. Returns
        whether it had to change (None: the server is not running; it starts with its persisted fence).
        Raises TenantError (and the tenant stays unsure) if the server cannot be asked."""
        if not tenant.is_running():
            self.fence_unsure.discard(tenant.id)
            return None
        own = tenant.admin_connect(timeout_s=5)
        try:
            changed = ops.ensure_read_only(own, tenant.info.fenced)
        finally:
            own.close()
        self.fence_unsure.discard(tenant.id)
        return changed

    def retire(self, tenant: Tenant, migration: str = "", pause: trash.Pause | None = None) -> trash.SetAside | None:
        """A migration source past the flip: marked retired (and fenced) on disk before it is
        stopped, so nothing starts it again; then stopped and its directory set aside in
        `tenants/.trash/` (crash-atomic: the tenant is gone from this node when this returns).
        Deleting the files is the caller's `finish()`: a migration does it after its result, so
        the move does not wait on the size of what it leaves; a crash leaves it to the sweep."""
        if tenant.meta_file.exists():
            tenant.info.fenced = True
            tenant.info.desired_state = "retired"
            tenant.save()
            tenant.write_config()
        self.kill_tenant(tenant)
        return self.set_aside(tenant, "retired", migration, pause)

    def set_aside(self, tenant: Tenant, reason: str, migration: str = "",
                  pause: trash.Pause | None = None) -> trash.SetAside | None:
        """A stopped tenant's directory renamed into `tenants/.trash/`: a crash leaves an entry the
        agent's sweep finishes, never a directory without its tenant.json."""
        pending = trash.set_aside(tenant.root, TrashName("tenant", tenant.id, reason, migration), pause)
        tenant.socket.unlink(missing_ok=True)
        return pending

    def remove_files(self, tenant: Tenant, reason: str, migration: str = "",
                     pause: trash.Pause | None = None) -> None:
        """Remove a stopped tenant's directory: set aside (`set_aside`), then deleted."""
        pending = self.set_aside(tenant, reason, migration, pause)
        if pending is not None:
            pending.finish()

    def sweep(self) -> list[str]:
        """Finish removals a crash cut short (at start and on every supervisor tick)."""
        return trash.sweep(self.tenants_dir)

    def unaccounted(self) -> list[Path]:
        """Entries of the tenants directory that are no tenant: no tenant.json (what a removal cut
        short by an older agent left), or not a directory. Nothing this agent lays out looks so."""
        return [d for d in sorted(self.tenants_dir.iterdir())
                if not d.name.startswith(".") and not (d / "tenant.json").exists()]

    def quarantine(self, path: Path) -> Path:
        """Move files of no known tenant aside (never deleted), so they block no later step."""
        return trash.quarantine(path, TrashName("tenant", trash.as_field(path.name), "unknown"))

    def quarantined(self) -> list[dict]:
        return trash.quarantined(self.tenants_dir)

    # ---- delete -----------------------------------------------------------------
    def delete(self, tenant_id: str) -> None:
        tenant = self.get(tenant_id)
        self._destroy(tenant)

    def _destroy(self, tenant: Tenant, reason: str = "deleted") -> None:
        self.stop_tenant(tenant, timeout_s=10)
        self.remove_files(tenant, reason)
        if tenant.root.exists():
            raise TenantError(f"could not remove {tenant.root}", "files remain", "remove it by hand")

    # ---- health -----------------------------------------------------------------
    def health(self, tenant: Tenant) -> dict:
        """Process and SQL health plus the counters the metrics need."""
        out = {"id": tenant.id, "port": tenant.port, "host": tenant.host,
               "desired_state": tenant.info.desired_state, "running": False, "healthy": False}
        pid = tenant.pid()
        if pid is None:
            return out
        out["running"] = True
        out["pid"] = pid
        try:
            conn = tenant.admin_connect(timeout_s=2)
            try:
                status = mariadb.global_status(conn, ("Questions", "Threads_connected", "Uptime"))
            finally:
                conn.close()
            out.update(healthy=True, questions=status.get("Questions", 0),
                       connections=status.get("Threads_connected", 0), uptime_s=status.get("Uptime", 0))
        except (TenantError, Exception) as exc:  # health must never raise
            out["error"] = str(exc)
        return out
