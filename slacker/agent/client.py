"""HTTP client for an agent's JSON API, and the directory seen through it.

Errors come back as JSON documents and are turned into the same SlackerError
classes the agent raised, so a message reads the same locally and remotely.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlencode, urlparse

from .. import protocol_version
from ..config import Cluster
from ..directory import DirectoryStore, EtcdStore, LockInfo, Member, OwnerChanges, Ownership, SQLiteStore
from ..errors import AgentUnavailable, NotFound, SlackerError, Unauthorized, error_from_dict


class AgentClient:
    """One agent's API. With an https:// URL the agent's certificate is checked against the
    cluster CA (`ca_file`) and connections are kept open and reused, so a call in a migration's
    freeze does not pay a TLS handshake (`warm()` opens them beforehand)."""

    MAX_IDLE = 4
    IDLE_MAX_AGE_S = 20.0  # never reuse a connection idle longer (an agent may time idle ones out)
    WARM_KEEP_S = 1.0  # warm() replaces connections idle for longer than this

    def __init__(self, url: str, token: str, name: str | None = None, timeout_s: float = 30.0,
                 ca_file: str | Path | None = None, caller: str = "this slacker CLI") -> None:
        self.url = url.rstrip("/")
        # Who calls (named in a version refusal) and the protocol it speaks, sent on every request.
        self.caller = caller
        self.protocol = protocol_version.current()
        self.peer_protocol: int | None = None  # the version the agent answered with last
        self.token = token
        self.name = name or self.url
        self.timeout_s = timeout_s
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise AgentUnavailable(f"bad agent URL {url!r}", "expected http(s)://HOST:PORT", "fix the cluster file")
        self._host = parsed.hostname
        self.tls = parsed.scheme == "https"
        self._port = parsed.port or (443 if self.tls else 80)
        self._ssl = None
        self.ca_file = ca_file  # the cluster CA (agents and tenants are checked against it)
        if self.tls:
            if ca_file is None:
                raise AgentUnavailable(f"agent {self.name} is https but no cluster CA is known",
                                       "its certificate cannot be checked", "set tls_ca in the cluster file")
            from ..tls import client_context
            self._ssl = client_context(ca_file)
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []
        self._idle_lock = threading.Lock()

    def _new_conn(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.tls:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout_s, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)

    def _take(self, timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        """An open connection to reuse (TLS only), else a new one; and whether it was reused."""
        now = time.monotonic()
        while self.tls:
            with self._idle_lock:
                if not self._idle:
                    break
                since, conn = self._idle.pop()
            if now - since > self.IDLE_MAX_AGE_S or _dropped(conn.sock):
                conn.close()
                continue
            conn.timeout = timeout_s
            conn.sock.settimeout(timeout_s)
            return conn, True
        return self._new_conn(timeout_s), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._idle_lock:
            if self.tls and conn.sock is not None and len(self._idle) < self.MAX_IDLE:
                self._idle.append((time.monotonic(), conn))
                return
        conn.close()

    def warm(self, connections: int = 2, timeout_s: float = 5.0) -> None:
        """Have `connections` fresh kept-open connections ready (stale or closed ones are replaced),
        so the next calls need no handshake. A no-op in plain text, where a connect is cheap."""
        if not self.tls:
            return
        now = time.monotonic()
        with self._idle_lock:
            idle, self._idle = self._idle, []
        keep = []
        for since, conn in idle:
            # Only one used a moment ago is kept: it must outlast the calls that follow whatever idle
            # timeout the agent's server applies (a freeze lasts well under a second).
            if now - since < self.WARM_KEEP_S and not _dropped(conn.sock):
                keep.append((since, conn))
            else:
                conn.close()
        fresh = []
        try:
            for _ in range(max(0, connections - len(keep))):
                conn = self._new_conn(timeout_s)
                fresh.append(conn)
                conn.request("GET", "/v1/status", headers=self._headers())
                conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn = fresh.pop()  # the real call will report the problem
            conn.close()
        with self._idle_lock:
            self._idle.extend(keep)
        for conn in fresh:
            self._give_back(conn)

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for _, conn in idle:
            conn.close()

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                protocol_version.HEADER: str(self.protocol), protocol_version.NODE_HEADER: self.caller}

    def request(self, method: str, path: str, body: dict | None = None, query: dict | None = None,
                timeout_s: float | None = None):
        if query:
            path = f"{path}?{urlencode(query)}"
        data = json.dumps(body).encode() if body is not None else None
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = "application/json"
        timeout = timeout_s or self.timeout_s
        while True:
            conn, reused = self._take(timeout)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (ConnectionError, socket.timeout, TimeoutError, OSError, http.client.HTTPException) as exc:
                conn.close()
                # A kept-open connection the agent closed just now: only a GET is safe to send again.
                if reused and method == "GET" and not isinstance(exc, (socket.timeout, TimeoutError)):
                    continue
                raise AgentUnavailable(f"cannot reach agent {self.name} at {self.url}", str(exc) or type(exc).__name__,
                                       "is the agent running? (`slacker cluster up`, or `slacker agent --config FILE`)"
                                       ) from None
            break
        if resp.will_close:
            conn.close()
        else:
            self._give_back(conn)
        # An agent too far from this side's version is refused here too: one at version 1 sends no
        # version and refuses nothing itself.
        self.peer_protocol = protocol_version.parse(resp.getheader(protocol_version.HEADER))
        if resp.status != 426:
            protocol_version.check(self.protocol, self.peer_protocol, self.caller, f"agent {self.name}")
        if resp.status == 401:
            raise Unauthorized(f"agent {self.name} refused the request", "the bearer token is wrong or missing",
                               "check the cluster file's token_file")
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            raise AgentUnavailable(f"agent {self.name} sent a malformed answer", f"HTTP {resp.status}", "") from None
        if resp.status >= 400:
            if isinstance(doc, dict) and "error" in doc:
                raise error_from_dict(doc)
            raise SlackerError(f"agent {self.name} answered HTTP {resp.status}", str(doc)[:200], "")
        return doc


def _dropped(sock) -> bool:
    """True if the peer closed (or broke) an idle connection. Readable is not enough: in TLS 1.3 the
    server's session tickets arrive after the handshake and make an idle socket readable."""
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        sock.setblocking(False)
        try:
            return sock.recv(1) is not None  # b"" (closed) or stray bytes: either way unusable
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
    except (OSError, ValueError):
        return True


class DirectoryClient(DirectoryStore):
    """The directory served by one agent, used through its HTTP API."""

    def __init__(self, agent: AgentClient) -> None:
        self.agent = agent

    def warm(self) -> None:
        self.agent.warm()

    def register(self, tenant: str, node: str, host: str, port: int, kind: str = "server") -> Ownership:
        body = {"tenant": tenant, "node": node, "host": host, "port": port}
        if kind != "server":  # an agent of a build before kinds is never asked for a whole server with a kind
            body["kind"] = kind
        return Ownership.from_dict(self.agent.request("POST", "/v1/directory/tenants", body))

    def claim_shared_port(self, node: str, port: int) -> None:
        self.agent.request("POST", "/v1/directory/shared-ports", {"node": node, "port": port})

    def lookup(self, tenant: str) -> Ownership:
        return Ownership.from_dict(self.agent.request("GET", f"/v1/directory/tenants/{quote(tenant)}"))

    def list(self) -> list[Ownership]:
        return [Ownership.from_dict(d) for d in self.agent.request("GET", "/v1/directory/tenants")["tenants"]]

    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int,
                        kind: str | None = None) -> Ownership:
        return Ownership.from_dict(self.agent.request(
            "POST", f"/v1/directory/tenants/{quote(tenant)}/cas",
            {"expected_epoch": expected_epoch, "node": node, "host": host, "port": port,
             **({"kind": kind} if kind else {})}))

    def remove(self, tenant: str, expected_epoch: int | None = None) -> None:
        q = {"epoch": expected_epoch} if expected_epoch is not None else None
        self.agent.request("DELETE", f"/v1/directory/tenants/{quote(tenant)}", query=q)

    def watch(self, tenant: str, after_epoch: int, timeout_s: float) -> Ownership | None:
        doc = self.agent.request("GET", f"/v1/directory/tenants/{quote(tenant)}/watch",
                                 query={"after": after_epoch, "timeout": timeout_s}, timeout_s=timeout_s + 10)
        return Ownership.from_dict(doc["ownership"]) if doc.get("ownership") else None

    def put_member(self, member: Member) -> Member:
        return Member.from_dict(self.agent.request("POST", "/v1/directory/members", member.to_dict()))

    def members(self) -> list[Member]:
        return [Member.from_dict(d) for d in self.agent.request("GET", "/v1/directory/members")["members"]]

    def remove_member(self, name: str) -> bool:
        return bool(self.agent.request("DELETE", f"/v1/directory/members/{quote(name)}")["removed"])

    def changes(self, since: int | None, timeout_s: float) -> OwnerChanges:
        q = {"timeout": timeout_s} | ({"since": since} if since is not None else {})
        return OwnerChanges.from_dict(self.agent.request("GET", "/v1/directory/changes", query=q,
                                                         timeout_s=timeout_s + 10))

    def acquire_lock(self, name: str, holder: str, ttl_s: float) -> LockInfo:
        return LockInfo.from_dict(self.agent.request("POST", f"/v1/directory/locks/{quote(name)}",
                                                     {"holder": holder, "ttl_s": ttl_s}))

    def refresh_lock(self, name: str, holder: str) -> LockInfo:
        return LockInfo.from_dict(self.agent.request("POST", f"/v1/directory/locks/{quote(name)}",
                                                     {"holder": holder, "refresh": True}))

    def release_lock(self, name: str, holder: str) -> bool:
        return bool(self.agent.request("DELETE", f"/v1/directory/locks/{quote(name)}",
                                       query={"holder": holder})["released"])

    def lock_info(self, name: str) -> LockInfo | None:
        doc = self.agent.request("GET", f"/v1/directory/locks/{quote(name)}")
        return LockInfo.from_dict(doc["lock"]) if doc.get("lock") else None

    def state_get(self, key: str) -> dict | None:
        return self.agent.request("GET", f"/v1/directory/state/{quote(key)}")["value"]

    def state_put(self, key: str, value: dict) -> None:
        self.agent.request("POST", f"/v1/directory/state/{quote(key)}", {"value": value})

    def state_delete(self, key: str) -> bool:
        return bool(self.agent.request("DELETE", f"/v1/directory/state/{quote(key)}")["deleted"])

    def state_list(self, prefix: str = "") -> dict[str, dict]:
        return self.agent.request("GET", "/v1/directory/state", query={"prefix": prefix})["state"]

    def health(self) -> dict:
        try:
            return self.agent.request("GET", "/v1/directory/health", timeout_s=10)
        except SlackerError as exc:
            return {"backend": "agent", "healthy": False, "error": exc.one_line(), "agent": self.agent.url}


class AgentPool(dict):
    """name -> AgentClient of every member the cluster knows, kept in step with `cluster.nodes`.

    Looking up (or testing `in`) a name it lacks asks the directory again (at most once a second,
    Cluster.node), so a node that joined after this process started is reached without a restart;
    refresh() re-reads the members and drops clients of removed nodes.
    """

    def __init__(self, cluster, token: str, ca_file=None, caller: str = "this slacker CLI",
                 timeout_s: float = 30.0) -> None:
        super().__init__()
        self.cluster, self.token, self.ca_file, self.caller, self.timeout_s = cluster, token, ca_file, caller, timeout_s
        self._lock = threading.Lock()
        self.sync()

    def sync(self) -> None:
        """Match the clients to cluster.nodes as it is now (a client per member, replaced if its URL moved)."""
        nodes = dict(self.cluster.nodes)
        with self._lock:
            for name in [n for n in self.keys() if n not in nodes]:
                dict.pop(self, name).close()
            for name, spec in nodes.items():
                old = dict.get(self, name)
                if old is None or old.url != spec.url.rstrip("/"):
                    dict.__setitem__(self, name, AgentClient(spec.url, self.token, name, timeout_s=self.timeout_s,
                                                             ca_file=self.ca_file, caller=self.caller))
                    if old is not None:
                        old.close()

    def refresh(self, max_age_s: float = 0.0) -> None:
        """Re-read the members (only if the last read is older than `max_age_s`) and match the clients."""
        if time.monotonic() - self.cluster.members_read_at < max_age_s:
            return
        self.cluster.refresh_members()
        self.sync()

    def __missing__(self, name: str) -> AgentClient:
        self.cluster.node(name)  # NotFound unless a re-read finds it
        self.sync()
        return dict.__getitem__(self, name)

    def __contains__(self, name) -> bool:
        if dict.__contains__(self, name):
            return True
        try:
            self[name]
            return True
        except NotFound:
            return False


def _etcd(cluster) -> EtcdStore:
    """The etcd directory, logging in (once etcd's authentication is on) as the user this host's
    credential maps to (slacker.directory.etcd.etcd_users)."""
    from ..directory.etcd import etcd_login
    cred = cluster.credential()
    return EtcdStore(cluster.etcd_endpoints, cluster.etcd_prefix, ca_file=cluster.tls_ca,
                     auth=etcd_login(cred.scope, cred.token, cluster.etcd_prefix))


def directory_for(cluster, token: str, caller: str = "this slacker CLI") -> DirectoryStore:
    """The directory as the cluster file says to reach it: etcd itself, or the agent serving SQLite."""
    if cluster.directory_backend == "etcd":
        return _etcd(cluster)
    d = cluster.directory
    return DirectoryClient(AgentClient(d.url, token, d.name, ca_file=cluster.tls_ca, caller=caller))


Cluster.directory_factory = staticmethod(directory_for)  # how a Cluster file without [[nodes]] learns its members


def cluster_clients(cluster) -> tuple[AgentPool, DirectoryStore]:
    """The directory, and a client per member read from it (the cluster follows the members from now on)."""
    token = cluster.token()
    directory = directory_for(cluster, token)
    cluster.follow_members(directory)
    return AgentPool(cluster, token, ca_file=cluster.tls_ca), directory


def node_directory(cluster, node: str, data_root, token: str) -> tuple[DirectoryStore | None, DirectoryStore]:
    """An agent's directory: (the store it serves itself or None, the store it uses).

    With etcd every agent talks to etcd and can serve the directory API; with
    SQLite the node the cluster file names holds the file and the others ask it.
    """
    if cluster.directory_backend == "etcd":
        store = _etcd(cluster)
        return store, store
    if cluster.directory_node == node:
        store = SQLiteStore(data_root / "directory.sqlite")
        return store, store
    d = cluster.directory
    # Short timeouts: an unreachable directory must be noticed (and reported) in seconds.
    return None, DirectoryClient(AgentClient(d.url, token, d.name, timeout_s=5, ca_file=cluster.tls_ca,
                                             caller=f"agent {node}"))
