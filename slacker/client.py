"""Connect to a tenant by id and follow it across migrations (the paper's frontend, §2.2).

`resolve()` asks the directory where a tenant lives and the owner's agent for
the application's credentials (a caller holding the cluster token; the agent
sends them only over TLS or inside this machine, see channels.py), so a client
on any host needs no node's disk. `TenantClient` keeps a connection to the current
owner; after a connection error it re-resolves and, while the owner is frozen
for a handover, waits on the directory's watch call for the next epoch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import pymysql

from .directory import DirectoryStore, Ownership
from .errors import SlackerError, TenantError


@dataclass(frozen=True)
class Endpoint:
    tenant: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)  # never in a log line or an assertion message
    node: str = ""
    epoch: int = 0
    # The cluster CA when the cluster uses TLS: the tenant's certificate is checked against it and
    # the connection is encrypted. None: plain text (never PyMySQL's default of the system CA store).
    ssl_ca: str | None = None
    # A shared tenant's database: its account may use no other, so a connection starts there.
    database: str | None = None

    def connect(self, database: str | None = None, timeout_s: float = 5.0, autocommit: bool = True, **kwargs):
        if self.ssl_ca:
            from .tls import client_context
            tls = {"ssl": client_context(self.ssl_ca)}
        else:
            tls = {"ssl_disabled": True}
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               database=database or self.database, connect_timeout=timeout_s, autocommit=autocommit,
                               charset="utf8mb4", **{**tls, **kwargs})


def resolve(tenant_id: str, cluster=None, directory: DirectoryStore | None = None, agents: dict | None = None
            ) -> Endpoint:
    """The tenant's current owner and application credentials."""
    if directory is None or agents is None:
        from .agent.client import cluster_clients
        from .config import load_cluster

        agents, directory = cluster_clients(cluster if cluster is not None else load_cluster(None))
    own = directory.lookup(tenant_id)
    if own.node not in agents:
        raise TenantError(f"tenant {tenant_id} is owned by {own.node}", "that node is not a member of the cluster",
                          "see `slacker node list`; its agent registers it when it starts")
    cred = agents[own.node].request("GET", f"/v1/tenants/{tenant_id}/credentials")
    ca = getattr(agents[own.node], "ca_file", None)
    return Endpoint(tenant=tenant_id, host=own.host, port=own.port, user=cred["user"], password=cred["password"],
                    node=own.node, epoch=own.epoch, ssl_ca=str(ca) if ca else None, database=cred.get("database"))


class TenantClient:
    """A connection to a tenant that follows it to its new owner after a handover.

    `run(fn)` calls fn(connection); on a connection-level error it reconnects to
    whoever owns the tenant now and, if `retry` is true, calls fn again. Callers
    that need exactly-once semantics pass retry=False and decide themselves.
    """

    # Errors that mean "this server is gone or going", not "your SQL is wrong".
    CONNECTION_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError, OSError)

    def __init__(self, tenant_id: str, resolver: Callable[[], Endpoint],
                 watch: Callable[[int, float], Ownership | None] | None = None,
                 database: str | None = None, reconnect_timeout_s: float = 60.0) -> None:
        self.tenant_id = tenant_id
        self._resolver = resolver
        self._watch = watch
        self.database = database
        self.reconnect_timeout_s = reconnect_timeout_s
        self.endpoint: Endpoint | None = None
        self.conn = None
        self.reconnects = 0
        self.moves: list[tuple[float, int, int]] = []  # (gap_s, old_epoch, new_epoch)

    @classmethod
    def for_cluster(cls, tenant_id: str, cluster, database: str | None = None, **kwargs) -> "TenantClient":
        from .agent.client import cluster_clients

        agents, directory = cluster_clients(cluster)
        return cls(tenant_id, lambda: resolve(tenant_id, directory=directory, agents=agents),
                   watch=lambda after, t: directory.watch(tenant_id, after, t), database=database, **kwargs)

    def connection(self):
        if self.conn is None:
            self._connect(time.monotonic() + self.reconnect_timeout_s)
        return self.conn

    def _connect(self, deadline: float) -> None:
        old_epoch = self.endpoint.epoch if self.endpoint else None
        started = time.monotonic()
        delay = 0.02
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                ep = self._resolver()
                conn = ep.connect(database=self.database, timeout_s=3)
                self.endpoint, self.conn = ep, conn
                if old_epoch is not None:
                    self.reconnects += 1
                    if ep.epoch != old_epoch:
                        self.moves.append((time.monotonic() - started, old_epoch, ep.epoch))
                return
            except (SlackerError, *self.CONNECTION_ERRORS) as exc:
                last_error = exc
            # While a handover is in flight the old owner refuses us: wait for the next epoch
            # instead of hammering it.
            if self._watch is not None and old_epoch is not None:
                try:
                    self._watch(old_epoch, min(delay * 10, max(0.0, deadline - time.monotonic())))
                except SlackerError:
                    pass
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        raise TenantError(f"cannot reach tenant {self.tenant_id}", str(last_error),
                          "check `slacker status` and `slacker locate`")

    def run(self, fn: Callable, retry: bool = True):
        deadline = time.monotonic() + self.reconnect_timeout_s
        while True:
            conn = self.connection()
            try:
                return fn(conn)
            except self.CONNECTION_ERRORS:
                self.close()
                if not retry:
                    raise
                self._connect(deadline)

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
