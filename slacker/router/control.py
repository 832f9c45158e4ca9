"""The router's control side: run the data path, follow the directory, feed it routes.

For every tenant in the directory it fetches the application user's double-SHA1 password
hash from the owner's agent once (`/login`, what the router credential may read; never the
password; `/logins`, every tenant of a node in one answer, when it learns of many at once), and hands the data path a route (owner address, epoch, user, hash). It follows every tenant on one stream of the directory's
changes (`DirectoryStore.changes`: one etcd watch on the tenants' prefix, or one long poll of
the agent serving SQLite), so a compare-and-set, a creation or a removal reaches it at once and
its cost does not grow with the number of tenants: a snapshot at start and after a lost stream
or a compaction, then one request per change or per `watch_timeout_s`. A tenant whose
login hash could not be fetched yet (its agent down) is tried again every `list_interval_s`.
The agents it asks are the directory's members, re-read every MEMBERS_REFRESH_S and on an
owner it does not know.
When the directory cannot be reached the routes stay as they were (the fence keeps a stale
owner from taking writes) and the data path is told, so its status and metrics say so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass

from ..credentials import hold_token
from ..directory import Ownership
from ..errors import InvalidInput, NotFound, SlackerError
from .binary import RouterUnavailable, router_binary

log = logging.getLogger(__name__)

REGISTRY_PREFIX = "routers/"  # directory state keys under which routers announce themselves
REGISTRY_REFRESH_S = 10.0
REGISTRY_STALE_S = 3 * REGISTRY_REFRESH_S
MEMBERS_REFRESH_S = 10.0  # how often the router re-reads the fleet's members from the directory


def parse_address(text: str, what: str = "address") -> tuple[str, int]:
    """HOST:PORT (port 0: any free port)."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"invalid {what} {text!r}", "expected HOST:PORT", "for example 127.0.0.1:6033")
    return host.strip("[]"), int(port)


__all__ = ["hold_token", "password_hash", "parse_address", "Router", "RouterOptions", "registered_routers",
           "fetch_status"]


def login_of_kind(own: Ownership) -> dict:
    """The owner account and start database a tenant of `own.kind` is logged in to (slacker.kinds): for a
    tenant whose kind a move changed, so the same client login reaches it in its new form."""
    from ..kinds import kind_of

    a = kind_of(own.kind).accounts(own.tenant)
    return {"owner_user": a.owner_user if a.owner_user != a.client_user else "", "database": a.database or ""}


def password_hash(password: str) -> str:
    """SHA1(SHA1(password)) in hex: what MariaDB stores for mysql_native_password, enough to check a login."""
    return hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest()


@dataclass
class RouterOptions:
    listen: str = "127.0.0.1:6033"
    admin: str | None = "127.0.0.1:6034"
    advertise: str | None = None  # address clients are told (slacker locate); default: the listen address
    tls_cert: str | None = None  # offer clients TLS with this certificate (and refuse plain text)
    tls_key: str | None = None
    watch_timeout_s: float = 5.0
    list_interval_s: float = 1.0
    register: bool = True

    def __post_init__(self) -> None:
        parse_address(self.listen, "listen address")
        if self.admin:
            parse_address(self.admin, "admin address")
        if self.advertise:
            parse_address(self.advertise, "advertised address")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidInput("TLS needs both a certificate and its key", "only one was given",
                               "pass --tls-cert and --tls-key")


class Router:
    """One router: the data path process plus the threads that follow the directory."""

    def __init__(self, cluster, options: RouterOptions, agents: dict, directory) -> None:
        """`agents`: name -> client of each node's agent (the tenants' login hashes); `directory`: where
        ownership is read and watched. Both as slacker.agent.client.cluster_clients(cluster) gives them."""
        self.cluster, self.options = cluster, options
        self.agents, self.directory = agents, directory
        self.proc: subprocess.Popen | None = None
        self.listen = self.admin = ""
        self._send_lock = threading.Lock()
        self._route_lock = threading.Lock()  # the listing and a watch must not send epochs out of order
        self._stop = threading.Event()
        self._routes: dict[str, dict] = {}  # tenant -> last route sent
        self._pending: dict[str, Ownership] = {}  # tenants known but not routable yet (no login hash)
        self._logins: dict[tuple[str, str], dict] = {}  # (node, tenant) -> its login (user, hash, ...) read in bulk
        self._since: int | None = None  # the directory revision followed up to; None: take a snapshot
        self._dir_ok: bool | None = None
        self._threads: list[threading.Thread] = []
        self.restarts = 0  # times the data path died and was started again

    # ---- the data path -----------------------------------------------------------------
    def _spawn(self, listen: str, admin: str | None) -> tuple[subprocess.Popen, dict]:
        cmd = [router_binary(), "-listen", listen]
        if admin:
            cmd += ["-admin", admin]
        ca = getattr(self.cluster, "tls_ca", None) if self.cluster is not None else None
        if ca:  # a TLS cluster's tenants refuse plain text: the owner leg is TLS, verified against the CA
            cmd += ["-owner-ca", str(ca)]
        if self.options.tls_cert:
            cmd += ["-tls-cert", self.options.tls_cert, "-tls-key", self.options.tls_key]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        line = proc.stdout.readline()
        try:
            return proc, json.loads(line)
        except ValueError:
            proc.wait(timeout=5)
            raise RouterUnavailable("the router did not start", f"exit code {proc.returncode}",
                                    "is the listen address free? see the log above") from None

    def _credential(self):
        """The credential this router presents (its scope and generation are announced with it)."""
        if self.cluster is None or not hasattr(self.cluster, "credential"):
            return None
        return self.cluster.credential()

    def _send_token(self) -> None:
        """What a handover's hold and release (admin /hold, /release) must present: a hash of the credential
        this router holds (the router credential on an application host), which agents derive too."""
        cred = self._credential()
        if cred is not None:
            self._send({"op": "token", "token": hold_token(cred.token)})

    def start(self) -> "Router":
        self.proc, ready = self._spawn(self.options.listen, self.options.admin)
        self.listen, self.admin = ready["listen"], ready.get("admin", "")
        self._send_token()
        self._follow_once(0.0)  # routes before anything else, so the first client finds its tenant
        for fn in (self._follow_loop, self._retry_loop, self._register_loop):
            t = threading.Thread(target=fn, daemon=True, name=f"router-{fn.__name__}")
            t.start()
            self._threads.append(t)
        return self

    def _respawn(self) -> None:
        """The data path died: start it again on the same addresses and hand it every route."""
        proc, _ = self._spawn(self.listen, self.admin or None)
        with self._send_lock:
            self.proc = proc
        self.restarts += 1
        self._send_token()
        with self._route_lock:
            for msg in list(self._routes.values()):
                self._send(msg)
        if self._dir_ok is not None:
            self._send({"op": "directory", "ok": self._dir_ok, "error": "" if self._dir_ok else "not reachable"})

    @property
    def advertised(self) -> str:
        if self.options.advertise:
            return self.options.advertise
        host, port = parse_address(self.listen)
        if host in ("0.0.0.0", "::"):
            host = socket.getfqdn()
        return f"{host}:{port}"

    def _send(self, msg: dict) -> None:
        with self._send_lock:
            if self.proc is None or self.proc.poll() is not None:
                return
            try:
                self.proc.stdin.write(json.dumps(msg) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def wait(self) -> int:
        """Block until stop() is called, starting the data path again whenever it dies (its clients'
        connections end with it; they reconnect)."""
        while not self._stop.wait(0.1):
            code = self.proc.poll()
            if code is None:
                continue
            log.warning("the data path exited (%s): starting it again", code)
            try:
                self._respawn()
            except SlackerError as exc:
                log.error("%s", exc.one_line())
                self._stop.wait(1.0)
        return 0

    def stop(self) -> None:
        self._stop.set()
        if self.options.register and self.listen:
            try:
                self.directory.state_delete(self.registry_key)
            except SlackerError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # ---- following the directory ---------------------------------------------------------
    def _directory_state(self, ok: bool, error: str = "") -> None:
        if ok != self._dir_ok:
            if ok:
                log.info("directory reachable")
            else:
                log.warning("directory unreachable, routing on the last owners known: %s", error)
        self._dir_ok = ok
        self._send({"op": "directory", "ok": ok, "error": error})

    def _route(self, own: Ownership, only_if_new: bool = False) -> None:
        with self._route_lock:
            if only_if_new and own.tenant in self._routes:
                return
            self._route_locked(own)

    def _route_locked(self, own: Ownership) -> None:
        known = self._routes.get(own.tenant)
        if known and (known["epoch"], known["node"], known["updated_at"]) == (own.epoch, own.node, own.updated_at):
            return
        fetched = self._logins.pop((own.node, own.tenant), None)
        if known and known.get("hash") and own.epoch > 1 and known.get("kind", own.kind) != own.kind:
            login = dict(login_of_kind(own), user=known["user"], hash=known["hash"])  # moved and changed kind
        elif known and known.get("hash") and own.epoch > 1:  # moved: the same accounts on the new owner
            login = {k: known[k] for k in ("user", "hash", "owner_user", "database") if k in known}
        elif fetched is not None:  # read with its node's other tenants (_fetch_logins)
            login = fetched
        else:  # created (again): its own accounts
            if own.node not in self.agents:
                raise NotFound(f"node {own.node} is unknown to this router", "it is not in the cluster file", "")
            login = self.agents[own.node].request("GET", f"/v1/tenants/{own.tenant}/login")
        msg = {"op": "route", "tenant": own.tenant, "node": own.node, "host": own.host, "port": own.port,
               "epoch": own.epoch, "user": login["user"], "hash": login["hash"], "updated_at": own.updated_at,
               "kind": own.kind}
        # A shared tenant: the client's USER@TENANT logs in to the owner as the tenant's own account, in its database.
        for key in ("owner_user", "database"):
            if login.get(key):
                msg[key] = str(login[key])
        self._send(msg)
        self._routes[own.tenant] = msg

    def _unroute(self, tenant: str) -> None:
        with self._route_lock:
            self._pending.pop(tenant, None)
            if self._routes.pop(tenant, None) is not None:
                self._send({"op": "remove", "tenant": tenant})

    def _needs_login(self, own: Ownership) -> bool:
        known = self._routes.get(own.tenant)
        return not (known and known.get("hash") and own.epoch > 1)

    def _fetch_logins(self, owners) -> None:
        """Many tenants to route at once (a snapshot, a batch of creations): their login hashes from one
        request per owner node (`GET /v1/logins`) instead of one per tenant. A node that cannot answer
        it (down, or an agent without the route) leaves its tenants to the request per tenant."""
        by_node: dict[str, int] = {}
        for own in owners:
            if self._needs_login(own):
                by_node[own.node] = by_node.get(own.node, 0) + 1
        for node, count in by_node.items():
            if count < self.BULK_LOGINS_FROM or node not in self.agents:
                continue
            try:
                doc = self.agents[node].request("GET", "/v1/logins", timeout_s=60)
            except SlackerError as exc:
                log.info("logins of node %s in one request: %s; asking per tenant", node, exc.one_line())
                continue
            for entry in doc.get("logins") or []:
                self._logins[(node, str(entry["tenant"]))] = entry

    def _follow_once(self, timeout_s: float) -> None:
        """One request for every tenant's changes since the revision followed (a snapshot the first
        time and after a failure); applies them in the order the directory made them."""
        try:
            ch = self.directory.changes(self._since, timeout_s)
        except SlackerError as exc:
            self._directory_state(False, exc.one_line())
            self._since = None  # the stream is lost: a snapshot next, so no change is missed
            raise
        self._directory_state(True)
        if ch.reset:
            present = {o.tenant for o in ch.owners}
            for tenant in [t for t in list(self._routes) + list(self._pending) if t not in present]:
                self._unroute(tenant)
        for tenant in ch.removed:
            self._unroute(tenant)
        self._fetch_logins(ch.owners)
        try:
            for own in ch.owners:
                try:
                    self._route(own)
                    self._pending.pop(own.tenant, None)
                except SlackerError as exc:  # its agent is down or unknown: tried again by _retry_loop
                    if own.tenant not in self._pending:
                        log.warning("tenant %s: not routable yet: %s", own.tenant, exc.one_line())
                    self._pending[own.tenant] = own
        finally:
            self._logins.clear()
        self._since = ch.revision

    def _follow_loop(self) -> None:
        backoff = 0.1
        last_members = time.monotonic()
        while not self._stop.is_set():
            # Members joined or removed (an owner on a node that joined since is also found at once:
            # the agents' pool asks the directory on an unknown name).
            if time.monotonic() - last_members >= MEMBERS_REFRESH_S and hasattr(self.agents, "refresh"):
                last_members = time.monotonic()
                try:
                    self.agents.refresh()
                except SlackerError as exc:
                    log.warning("cannot re-read the members: %s", exc.one_line())
            try:
                self._follow_once(self.options.watch_timeout_s)
                backoff = 0.1
            except SlackerError:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)

    BULK_LOGINS_FROM = 8  # tenants of one node to route at once from which their hashes come in one request

    RETRY_FIRST_S = 0.05
    RETRY_ANSWERING_S = 0.25  # at most this apart while its agent answers "not yet" (a creation in progress)

    def _retry_loop(self) -> None:
        """Tenants the directory names but whose login hash could not be fetched: ask again, reading each
        one's owner afresh (it may have moved meanwhile). A tenant's entry exists from the start of its
        creation, which takes a second or more: while its agent answers that it has no such tenant yet,
        ask every RETRY_ANSWERING_S at most, so it is routable soon after `tenant create` returns; an agent
        that does not answer is asked every `list_interval_s`."""
        due: dict[str, tuple[float, float]] = {}  # tenant -> (next try, delay before the one after)
        while not self._stop.wait(self.RETRY_FIRST_S):
            for tenant in [t for t in due if t not in self._pending]:
                due.pop(tenant)
            for tenant in list(self._pending):
                now = time.monotonic()
                at, delay = due.setdefault(tenant, (now, self.RETRY_FIRST_S))
                if at > now:
                    continue
                try:
                    own = self.directory.lookup(tenant)
                except NotFound:  # removed meanwhile
                    self._pending.pop(tenant, None)
                    continue
                except SlackerError:
                    own = None
                try:
                    if own is not None:
                        self._route(own, only_if_new=True)
                        self._pending.pop(tenant, None)
                        continue
                    delay = self.options.list_interval_s
                except NotFound:  # its agent answers, without the tenant yet
                    delay = min(delay * 2, self.RETRY_ANSWERING_S)
                except SlackerError:  # its agent does not answer
                    delay = self.options.list_interval_s
                due[tenant] = (time.monotonic() + delay, delay)

    @property
    def followed(self) -> dict:
        """What the router follows, for its status: routes, tenants waiting, the revision."""
        return {"routes": len(self._routes), "pending": sorted(self._pending), "revision": self._since}

    # ---- announcing itself ---------------------------------------------------------------
    @property
    def registry_key(self) -> str:
        host, port = parse_address(self.advertised)
        return REGISTRY_PREFIX + f"{host}-{port}".lower().replace(":", "-")

    def _register_loop(self) -> None:
        if not self.options.register:
            return
        cred = self._credential()
        # Non-secret: which credential this router checks a hold against, so agents present its hash.
        announced = {"scope": cred.scope, "generation": cred.generation} if cred is not None else {}
        while True:
            try:
                self.directory.state_put(self.registry_key, {
                    "address": self.advertised, "admin": self.admin, "host": socket.gethostname(),
                    "tls": bool(self.options.tls_cert), "credential": announced,
                    "pid": os.getpid(), "updated_at": time.time()})
            except SlackerError as exc:
                log.debug("cannot announce the router: %s", exc.one_line())
            if self._stop.wait(REGISTRY_REFRESH_S):
                return


def registered_routers(directory, now: float | None = None) -> list[dict]:
    """Routers that announced themselves recently, newest first."""
    now = time.time() if now is None else now
    try:
        found = directory.state_list(REGISTRY_PREFIX)
    except SlackerError:
        return []
    fresh = [v for v in found.values() if now - float(v.get("updated_at", 0)) <= REGISTRY_STALE_S]
    return sorted(fresh, key=lambda v: -float(v.get("updated_at", 0)))


def fetch_status(admin: str, timeout_s: float = 5.0) -> dict:
    """A running router's status document from its admin address (HOST:PORT)."""
    host, port = parse_address(admin, "admin address")
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=timeout_s) as r:
            return json.loads(r.read())
    except OSError as exc:
        raise RouterUnavailable(f"router at {admin} does not answer", str(exc),
                                "is it running? see `slacker router status`") from None
