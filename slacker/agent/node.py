"""One node's services: its tenants, the directory (local or remote), supervisor, metrics.

The HTTP layer (server.py) only parses requests and calls these methods.
"""

from __future__ import annotations

import logging
import threading
import time

from .. import protocol_version
from ..config import AgentConfig, Cluster, load_cluster
from ..errors import Conflict, NotFound, PortTaken, SlackerError
from ..kinds import kind_of
from ..kinds.local import CreateOptions, LocalTenant, LocalTenants, managers
from ..tenants import TenantManager, choose_port, validate_tenant_id
from .client import AgentClient, AgentPool, node_directory
from .metrics import DirectoryHealth, make_registry
from .supervisor import Supervisor

log = logging.getLogger("slacker.agent")


class Node:
    def __init__(self, config: AgentConfig, cluster: Cluster | None = None) -> None:
        self.config = config
        self.cluster = cluster or load_cluster(str(config.cluster_file))
        # An agent verifies every scope (and presents admin to its peers): it needs the admin credential.
        self.keyring = self.cluster.keyring(f"agent {config.node}")
        self.token = self.keyring.admin_secret
        self.name = config.node
        self.protocol = protocol_version.current()
        # What this agent registers in the directory (a node need not be in the cluster file).
        seed = self.cluster.seeds.get(config.node)
        self.url = config.advertised_url(seed.url if seed else "").rstrip("/")
        self.registered = False
        self.started_at = time.time()
        self.tenants = TenantManager(config.data_root, host=config.tenant_host, node=config.node,
                                     port_range=config.port_range, tls=config.tls,
                                     require_tls=config.tls is not None and config.tenant_require_tls)
        # local_directory: a store this agent can serve over its API (SQLite here, or etcd on every node).
        self.local_directory, self.directory = node_directory(self.cluster, self.name, config.data_root, self.token)
        from ..migration.journal import Journal
        self.journal = Journal(config.data_root / "journal")
        # The supervisor's tick also closes the stats history intervals: never coarser than them.
        self.supervisor = Supervisor(self.tenants, interval_s=min(2.0, config.stats_interval_s))
        # One manager per tenant kind (slacker/kinds/): the tenant routes ask them in turn; each adds to the tick.
        self.kinds: dict[str, LocalTenants] = managers(self)
        for manager in self.kinds.values():
            self.supervisor.on_tick.append(manager.tick)
        self.registry = make_registry(self.name, self.supervisor)
        self.directory_health = DirectoryHealth(self.name, self.directory)
        self.registry.register(self.directory_health)
        self._lock = threading.Lock()
        # Members from the directory (read again every members_refresh_s and on an unknown name), and one
        # client per peer, so its kept-open TLS connections are shared by every caller.
        self.cluster.follow_members(self.directory)
        self._peers = AgentPool(self.cluster, self.token, ca_file=self.tls_ca, caller=f"agent {self.name}")
        self._members_stop = threading.Event()
        self._members_thread: threading.Thread | None = None
        self.migrations = None  # set by the migration service when it is loaded
        self.tenant_stats = None  # the per-tenant latency windows, set by slacker.agent.tenant_stats.attach

    def peer(self, name: str) -> AgentClient:
        return self._peers[name]

    # ---- membership ---------------------------------------------------------------
    def member_record(self):
        from ..directory import Member
        return Member(self.name, self.url, self.config.tenant_host, self.protocol)

    def register(self) -> bool:
        """Register this node in the directory (again). Conflict (the agent must not start) when that would
        clobber: its tenants recorded at another host, or another live agent serving this name."""
        from ..membership import join

        old = self.directory.member(self.name)
        if old is not None and old.url != self.url:
            try:
                doc = AgentClient(old.url, self.token, self.name, timeout_s=2, ca_file=self.tls_ca,
                                  caller=f"agent {self.name}").request("GET", "/v1/status", timeout_s=2)
            except SlackerError:
                doc = {}
            if doc.get("node") == self.name:
                raise Conflict(f"node {self.name} is already served by the agent at {old.url}",
                               f"this agent would register it at {self.url}",
                               "give this agent another node name, or stop the other agent first")
        join(self.directory, self.member_record())
        self.registered = True
        log.info("node %s registered in the directory at %s (protocol %d)", self.name, self.url, self.protocol)
        return True

    def _members_loop(self) -> None:
        # Until registered, try every 2 s (the SQLite directory's agent may start after this one).
        while not self._members_stop.wait(self.config.members_refresh_s if self.registered
                                          else min(2.0, self.config.members_refresh_s)):
            try:
                if not self.registered:
                    self.register()
                self.cluster.refresh_members()
                if self.cluster.members_error:
                    log.warning("membership: cannot read the members, using the last known: %s",
                                self.cluster.members_error)
                self._peers.sync()
            except SlackerError as exc:
                log.warning("membership: %s", exc.one_line())
            except Exception:  # the loop must survive anything; the next round tries again
                log.exception("membership refresh failed")

    @property
    def tls_ca(self):
        """The CA this node checks its peers against (its own config's, else the cluster file's)."""
        return self.config.tls.ca if self.config.tls is not None else self.cluster.tls_ca

    def tls_server_context(self):
        """For this node's listeners (snapshot receiver); None without TLS."""
        if self.config.tls is None:
            return None
        from ..tls import server_context
        return server_context(self.config.tls, stream=True)

    def tls_client_context(self):
        """For connecting to another node (snapshot stream), showing this node's certificate; None without TLS."""
        if self.config.tls is None:
            return None
        from ..tls import client_context
        return client_context(self.config.tls.ca, self.config.tls.cert, self.config.tls.key, stream=True)

    def start(self) -> None:
        # Bring back tenants that should run (e.g. after a host reboot), then watch them.
        self.supervisor.tick()
        self.supervisor.start()
        self.directory_health.start()
        # Join (or re-join) the fleet. A directory that does not answer yet (the SQLite one's agent starts
        # later) is retried by the members loop; a registration that would clobber stops the start.
        try:
            self.register()
        except Conflict:
            self.stop()
            raise
        except SlackerError as exc:
            log.warning("cannot register node %s yet (retrying every %gs): %s", self.name,
                        min(2.0, self.config.members_refresh_s), exc.one_line())
        self.cluster.refresh_members()
        self._peers.sync()
        self._members_thread = threading.Thread(target=self._members_loop, name="members", daemon=True)
        self._members_thread.start()

    def stop(self, stop_tenants: bool = False) -> None:
        self._members_stop.set()
        self.supervisor.stop()
        self.directory_health.stop()
        if self.migrations is not None:
            self.migrations.shutdown()
        if stop_tenants:
            for manager in self.kinds.values():
                manager.stop_all()

    # ---- tenants ----------------------------------------------------------------
    def claim(self, tenant_id: str) -> None:
        """Mark the tenant busy for one operation (create, delete, a migration either way); Conflict when
        another holds it. Every claim is paired with a `release` when the operation ends."""
        with self._lock:
            if tenant_id in self.supervisor.busy:
                raise Conflict(f"tenant {tenant_id} is busy", "another operation (create, delete or migrate) holds it",
                               "wait for it to finish")
            self.supervisor.busy.add(tenant_id)

    def release(self, tenant_id: str) -> None:
        """End the operation `claim` started on the tenant (a tenant not claimed is left as it is)."""
        with self._lock:
            self.supervisor.busy.discard(tenant_id)

    def create_tenant(self, tenant_id: str, kind: str | None = None, options: CreateOptions = CreateOptions()) -> dict:
        """Register the tenant in the directory, then make it here (with `options.existing`, a shared tenant of
        a database already in the node's shared server); on a failure the registration is taken back."""
        manager = self.kinds[kind_of(kind).name]
        manager.kind.check_id(tenant_id)
        manager.check_options(options)
        self.claim(tenant_id)
        try:
            try:
                own = self.directory.lookup(tenant_id)
                raise Conflict(f"tenant {tenant_id} already exists", f"node {own.node} owns it",
                               "pick another id, or delete that tenant first")
            except NotFound:
                pass
            own, port = self._register(tenant_id, manager)
            try:
                tenant = manager.create(tenant_id, port, options)
            except BaseException:
                try:
                    self.directory.remove(tenant_id, expected_epoch=own.epoch)
                except Exception:
                    log.exception("could not unregister %s after a failed create", tenant_id)
                raise
            return self.describe(tenant) | {"epoch": own.epoch}
        finally:
            self.release(tenant_id)

    REGISTER_TRIES = 32  # ports tried one by one before reading every tenant's port at once

    def _register(self, tenant_id: str, manager: LocalTenants):
        """Register the tenant at its kind's fixed port (a shared server's), or at its preferred port or the
        next free one. The registration itself says whether a port is taken (one point write each), so a
        creation does not read the whole directory unless the range is crowded around the id's port."""
        kind = manager.kind.name
        fixed = manager.port_for_new(tenant_id)
        if fixed is not None:
            return self.directory.register(tenant_id, self.name, self.config.tenant_host, fixed, kind), fixed
        return self._first_free_port(tenant_id, lambda port: (
            self.directory.register(tenant_id, self.name, self.config.tenant_host, port, kind), port))

    def claim_shared_port(self, tenant_id: str) -> int:
        """A port for this node's shared server, claimed in the directory before it holds a tenant: the first
        shared tenant arrives by a move (slacker.migration.onedb_target), chosen as that tenant's would be."""
        return self._first_free_port(tenant_id, lambda port: (self.directory.claim_shared_port(self.name, port),
                                                               port)[1])

    def _first_free_port(self, tenant_id: str, take):
        """`take(port)` of the id's preferred port or the next free one; the directory's PortTaken says a port is
        taken (one point write each), so the whole directory is read only when the range is crowded."""
        taken = set().union(*(m.ports() for m in self.kinds.values()))
        for attempt in range(self.REGISTER_TRIES + 1):
            if attempt == self.REGISTER_TRIES:  # crowded: learn every port in one read
                taken |= {o.port for o in self.directory.list()}
            port = choose_port(tenant_id, self.tenants.port_range, taken)
            try:
                return take(port)
            except PortTaken:
                taken.add(port)
        raise Conflict(f"no free port for tenant {tenant_id}", "every port tried is taken",
                       "widen the node's port_range or delete unused tenants")

    def _holder(self, tenant_id: str) -> LocalTenants | None:
        """The manager of the kind that holds anything of the tenant here, None if none does."""
        return next((m for m in self.kinds.values() if m.holds(tenant_id)), None)

    def _get(self, tenant_id: str) -> LocalTenant:
        validate_tenant_id(tenant_id)
        manager = self._holder(tenant_id)
        if manager is None:
            raise NotFound(f"tenant {tenant_id} not found on node {self.name}", "no kind of tenant here holds it",
                           "see `slacker tenant list` for the tenants that exist")
        return manager.get(tenant_id)

    def refuse_unmovable(self, tenant_id: str, mode: str = "live", verify: bool = False,
                         snapshot: str = "auto", into: str | None = None) -> None:
        """InvalidInput in one line when the tenant here is of a kind whose move (so) is not built."""
        manager = self._holder(validate_tenant_id(tenant_id))
        refusal = (manager.kind.move_refusal(tenant_id, self.name, mode, verify, snapshot, into)
                   if manager is not None else None)
        if refusal is not None:
            raise refusal

    def holds_tenant(self, tenant_id: str) -> bool:
        """Anything of the tenant here, of any kind (a whole server, a shared record)."""
        return self._holder(tenant_id) is not None or self.tenants.exists(tenant_id)

    def kind_here(self, tenant_id: str) -> str:
        """The kind of the tenant this node holds ("server" when none holds it: the caller's NotFound follows)."""
        manager = self._holder(tenant_id)
        return manager.kind.name if manager is not None else "server"

    def delete_tenant(self, tenant_id: str) -> None:
        validate_tenant_id(tenant_id)
        self.claim(tenant_id)
        try:
            manager = self._holder(tenant_id)
            if manager is None:
                # No files here at all, as a create killed midway leaves them (its half-built files are
                # swept at start): only the directory's entry naming this node is left to delete.
                own = self.directory.lookup(tenant_id)
                if own.node == self.name:
                    self.directory.remove(tenant_id, expected_epoch=own.epoch)
                    return
                raise NotFound(f"tenant {tenant_id} not found on node {self.name}",
                               f"the directory names {own.node}", "delete it there")
            manager.delete(tenant_id)
            try:
                own = self.directory.lookup(tenant_id)
                if own.node == self.name:
                    self.directory.remove(tenant_id, expected_epoch=own.epoch)
            except NotFound:
                pass
        finally:
            self.release(tenant_id)

    def describe(self, tenant: LocalTenant) -> dict:
        accounts = tenant.accounts
        return {
            "id": tenant.id, "kind": tenant.kind.name, "node": self.name, "host": tenant.host, "port": tenant.port,
            "desired_state": tenant.desired_state, "fenced": tenant.fenced,
            "buffer_pool_bytes": tenant.buffer_pool_bytes,
            "app_user": accounts.client_user, "owner_user": accounts.owner_user, "database": accounts.database,
            "app_password_file": str(tenant.password_file), "datadir": str(tenant.datadir), **tenant.extra,
        }

    def list_tenants(self) -> list[dict]:
        snap = self.supervisor.snapshot()
        out = []
        for manager in self.kinds.values():
            for t in manager.list():
                d = self.describe(t)
                h = snap.get(t.id)
                d["running"] = t.running
                if t.id in self.supervisor.busy:
                    d["healthy"] = None
                elif h is None:  # not sampled yet (just created): ask now
                    d["healthy"] = manager.healthy(t)
                else:
                    d["healthy"] = h.healthy
                d["queries_per_s"] = round(h.queries_per_s, 1) if h else 0.0
                d["connections"] = h.connections if h else 0
                out.append(d)
        return sorted(out, key=lambda d: d["id"])

    def tenant_detail(self, tenant_id: str) -> dict:
        return self.describe(self._get(tenant_id))

    def tenant_credentials(self, tenant_id: str) -> dict:
        """The application account of a tenant this node holds (the API checks the channel first): the account
        on the owner, and the database a shared tenant's session is in."""
        tenant = self._get(tenant_id)
        accounts = tenant.accounts
        return {"tenant": tenant.id, "kind": tenant.kind.name, "node": self.name, "host": tenant.host,
                "port": tenant.port, "user": accounts.owner_user, "database": accounts.database,
                "password": tenant.password()}

    @staticmethod
    def _login(tenant: LocalTenant, node: str) -> dict:
        from ..router.control import password_hash
        accounts = tenant.accounts
        doc = {"tenant": tenant.id, "node": node, "user": accounts.client_user, "hash": password_hash(tenant.password())}
        if accounts.owner_user != accounts.client_user or accounts.database:  # a routers' older build ignores them
            doc.update(owner_user=accounts.owner_user, database=accounts.database)
        return doc

    def tenant_login(self, tenant_id: str) -> dict:
        """What a router needs to check a client's login: the user the client names (USER@TENANT), the account
        and database it maps to on this owner, and SHA1(SHA1(password)), never the password (the router
        credential may read this, not tenant_credentials)."""
        return self._login(self._get(tenant_id), self.name)

    def tenant_logins(self) -> list[dict]:
        """`tenant_login` of every tenant this node holds, in one answer: a router that learns of many
        tenants at once (its start, a snapshot after a lost watch) asks each agent once."""
        out = []
        for manager in self.kinds.values():
            for tenant in manager.list():
                try:
                    out.append(self._login(tenant, self.name))
                except (OSError, SlackerError):  # a tenant being laid out or removed: asked for alone later
                    continue
        return out

    def status(self) -> dict:
        doc = {"node": self.name, "url": self.url, "tenant_host": self.config.tenant_host,
               "protocol": self.protocol, "registered": self.registered,
               "serves_directory": self.local_directory is not None, "uptime_s": round(time.time() - self.started_at, 1),
               "tenants": self.list_tenants()}
        for manager in self.kinds.values():
            doc.update(manager.status())
        if self.migrations is not None:
            doc["migrations"] = self.migrations.list()
            doc["kept"] = self.migrations.kept.list()  # old copies kept after a move (--keep-source)
            doc["warnings"] = self.migrations.reconciler.warnings()  # leftovers a person should look at
        return doc
