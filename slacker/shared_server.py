"""A node's shared server: one `mariadbd` that holds the node's shared tenants, one database each.

It is a tenant's server in every way Slacker runs one (slacker/tenants.py renders its config, the node's seed
lays out its data, `TenantManager` starts, supervises and stops it, and it outlives an agent restart the same
way), with three differences: it lives in `<data_root>/shared/` (`server.json`, `my.cnf`, `data/`, `log/`,
`secrets/`; its tenants' records under `tenants/`), its socket is `sock/_shared.sock` (no tenant id starts
with '_'), and it has a `gtid_domain_id` of its own in the fleet, allocated through the directory
(`allocate_domain_id`), with `server_id` 2^31 + that id. It is made when the node gets its first shared
tenant, laid out under `<data_root>/.building/` and renamed into place whole.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Iterable

from . import mariadb, trash
from .errors import Conflict, TenantError
from .tenants import Tenant, TenantInfo, TenantManager

log = logging.getLogger("slacker.shared")

SHARED_DIR = "shared"
SOCKET_NAME = "_shared.sock"
DEFAULT_BUFFER_POOL_BYTES = 64 * 1024 * 1024  # one pool for all of the node's shared tenants
# Connection attributes kept per session (a client library sends ~100-300 bytes; the router adds its mark):
# about 150 KB for the server's max_connections.
CONNECT_ATTRS_BYTES = 512
# Whole-server tenants' server_ids are 31-bit hashes (mariadb.server_id_for): a shared server's are above them.
SERVER_ID_BASE = 1 << 31
MAX_DOMAIN_ID = (1 << 31) - 1  # so that SERVER_ID_BASE + id fits server_id's 32 bits
DOMAIN_LOCK = "shared-domains"
DOMAIN_PREFIX = "shared/domains/"  # state key per allocated id: shared/domains/<id> -> {"node", "at"}
DOMAIN_LOCK_TTL_S = 30.0
DOMAIN_LOCK_WAIT_S = 20.0


def next_domain_id(taken: Iterable[int]) -> int:
    """The smallest gtid_domain_id of 1 or more that no shared server was given (0 is every whole-server
    tenant's). Ids are never handed out twice, even after the server that had one is gone: another server's
    replication state may still hold positions in it."""
    used = set(taken)
    n = 1
    while n in used:
        n += 1
    if n > MAX_DOMAIN_ID:
        raise Conflict("no gtid_domain_id left for a shared server", f"all {MAX_DOMAIN_ID} are allocated", "")
    return n


def allocate_domain_id(directory, node: str, holder: str | None = None) -> int:
    """A gtid_domain_id no other shared server in the fleet has: read, choose and record it under the
    directory's exclusive lock `shared-domains`, one key per id (so two records of one id are one key, and a
    writer that lost its lock would be seen overwriting: it reads its key back before the lock goes)."""
    holder = holder or f"{node}:{os.getpid()}"
    deadline = time.monotonic() + DOMAIN_LOCK_WAIT_S
    while True:
        try:
            directory.acquire_lock(DOMAIN_LOCK, holder, DOMAIN_LOCK_TTL_S)
            break
        except Conflict:
            if time.monotonic() > deadline:
                raise Conflict("cannot allocate a gtid_domain_id for the shared server",
                               f"the directory's lock {DOMAIN_LOCK} stayed held for {DOMAIN_LOCK_WAIT_S:.0f}s",
                               "retry; `slacker status` shows whether an agent is stuck") from None
            time.sleep(0.1)
    try:
        taken = {int(k[len(DOMAIN_PREFIX):]) for k in directory.state_list(DOMAIN_PREFIX)
                 if k[len(DOMAIN_PREFIX):].isdigit()}
        domain = next_domain_id(taken)
        key = f"{DOMAIN_PREFIX}{domain}"
        directory.state_put(key, {"node": node, "holder": holder, "at": time.time()})
        directory.refresh_lock(DOMAIN_LOCK, holder)  # still ours: nobody else wrote meanwhile
        if (directory.state_get(key) or {}).get("holder") != holder:
            raise Conflict(f"gtid_domain_id {domain} was taken underneath", "another allocation wrote it", "retry")
        return domain
    finally:
        try:
            directory.release_lock(DOMAIN_LOCK, holder)
        except Exception:  # it runs out on its own
            log.warning("could not release the directory lock %s", DOMAIN_LOCK)


class SharedServer(Tenant):
    """The shared server's paths and config: a tenant's, with its own socket name, metadata file and domain."""

    socket = property(lambda self: self.sock_dir / SOCKET_NAME)
    meta_file = property(lambda self: self.root / "server.json")
    tenants_dir = property(lambda self: self.root / "tenants")
    gtid_domain_id = property(lambda self: int(self.info.extra["gtid_domain_id"]))

    def server_config(self) -> mariadb.ServerConfig:
        return replace(super().server_config(), tenant_id="the node's shared server", gtid_domain_id=self.gtid_domain_id,
                       log_slave_updates=False, user_statistics=True, skip_slave_start=True,
                       connect_attrs_bytes=CONNECT_ATTRS_BYTES)


class SharedServerManager:
    """Makes, starts and finds the one shared server under a node's data root (through its TenantManager)."""

    def __init__(self, tenants: TenantManager, directory) -> None:
        self.tenants = tenants  # the node's manager: its seed, its start and stop, its TLS settings
        self.directory = directory
        self.root = tenants.data_root / SHARED_DIR
        self.restarts = 0
        # Called with the server each time it has started: the owner of its moves' replication connections
        # (kinds/shared.py) sets their filters again and starts them (the server starts none by itself).
        self.after_start = lambda server: None
        # What a crash left half laid out (at agent start only, nothing is being built then).
        trash.sweep_building(tenants.data_root)

    def get(self) -> SharedServer | None:
        """The node's shared server, None if it was never made."""
        meta = self.root / "server.json"
        if not meta.exists():
            return None
        info = TenantInfo(**json.loads(meta.read_text()))
        return SharedServer(self.root, info, self.tenants.sock_dir, self.tenants.tls, self.tenants.require_tls)

    def port(self) -> int | None:
        server = self.get()
        return server.port if server is not None else None

    def ensure(self, port: int, timeout_s: float = 60.0) -> SharedServer:
        """The shared server running (made first, on `port`, if the node has none)."""
        server = self.get()
        if server is None:
            server = self._make(port)
        if not server.is_running():
            self.start(server, timeout_s)
        return server

    def start(self, server: SharedServer, timeout_s: float = 60.0) -> None:
        """Start it; the first start after it was made also creates its accounts (an init file, as a tenant's)."""
        if server.info.extra.get("accounts_made"):
            self.tenants.start_tenant(server, timeout_s=timeout_s)
            self.after_start(server)
            return
        init_file = server.root / "secrets" / "init.sql"
        mariadb.write_secret(init_file, mariadb.bootstrap_sql(server.admin_password(), None, server.backup_password(),
                                                              server.repl_password()))
        try:
            self.tenants.start_tenant(server, timeout_s=timeout_s, extra_args=[f"--init-file={init_file}"])
        finally:
            init_file.unlink(missing_ok=True)
        server.info.extra["accounts_made"] = True
        server.save()

    def _make(self, port: int) -> SharedServer:
        if os.path.lexists(self.root):
            raise Conflict(f"{self.root} holds no shared server.json", "it is no shared server Slacker made",
                           "move it aside; the node's shared server is made there")
        domain = allocate_domain_id(self.directory, self.tenants.node)
        built = trash.building_dir(self.tenants.data_root, SHARED_DIR)
        for sub in ("log", "run", "secrets", "tmp", "tenants"):
            (built / sub).mkdir(parents=True, exist_ok=True)
        for d in (built, built / "secrets", built / "tenants"):  # the agent's user's alone, as a tenant's
            os.chmod(d, 0o700)
        info = TenantInfo(id=SHARED_DIR, host=self.tenants.host, port=port, server_id=SERVER_ID_BASE + domain,
                          buffer_pool_bytes=DEFAULT_BUFFER_POOL_BYTES, created_at=time.time(),
                          extra={"gtid_domain_id": domain})
        server = SharedServer(built, info, self.tenants.sock_dir, self.tenants.tls, self.tenants.require_tls)
        for f in (server.admin_password_file, server.backup_password_file, server.repl_password_file):
            mariadb.write_secret(f, secrets.token_urlsafe(24) + "\n")
        server.write_config()
        server.save()
        self.tenants.seed.copy_into(server.datadir)
        trash.put_in_place(built, self.root)
        server.root = self.root
        server.write_config()
        log.info("made the node's shared server on port %d (gtid_domain_id %d, server_id %d)", port, domain,
                 info.server_id)
        return server

    def keep_running(self) -> None:
        """The supervisor's part: a shared server that exists runs (started again if it died)."""
        server = self.get()
        if server is None or server.is_running():
            return
        log.warning("the node's shared server is not running; starting it")
        try:
            self.start(server)
            self.restarts += 1
        except TenantError as exc:
            log.error("could not start the node's shared server: %s", exc.one_line())

    def stop(self) -> None:
        server = self.get()
        if server is not None:
            self.tenants.stop_tenant(server)

    def describe(self) -> dict | None:
        server = self.get()
        if server is None:
            return None
        return {"host": server.host, "port": server.port, "gtid_domain_id": server.gtid_domain_id,
                "server_id": server.info.server_id, "running": server.is_running(), "datadir": str(server.datadir),
                **{k: v for k, v in asdict(server.info).items() if k in ("buffer_pool_bytes", "created_at")}}
