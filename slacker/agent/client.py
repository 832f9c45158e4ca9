"""HTTP client for an agent's JSON API, and the directory seen through it.

Errors come back as JSON documents and are turned into the same SlackerError
classes the agent raised, so a message reads the same locally and remotely.
"""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import quote, urlencode, urlparse

from ..directory import DirectoryStore, EtcdStore, LockInfo, Ownership, SQLiteStore
from ..errors import AgentUnavailable, SlackerError, Unauthorized, error_from_dict


class AgentClient:
    def __init__(self, url: str, token: str, name: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.name = name or self.url
        self.timeout_s = timeout_s
        parsed = urlparse(self.url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise AgentUnavailable(f"bad agent URL {url!r}", "expected http://HOST:PORT", "fix the cluster file")
        self._host = parsed.hostname
        self._port = parsed.port or 80

    def request(self, method: str, path: str, body: dict | None = None, query: dict | None = None,
                timeout_s: float | None = None):
        if query:
            path = f"{path}?{urlencode(query)}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s or self.timeout_s)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (ConnectionError, socket.timeout, TimeoutError, OSError) as exc:
            raise AgentUnavailable(f"cannot reach agent {self.name} at {self.url}", str(exc) or type(exc).__name__,
                                   "is the agent running? (`slacker cluster up`, or `slacker agent --config FILE`)"
                                   ) from None
        finally:
            conn.close()
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


class DirectoryClient(DirectoryStore):
    """The directory served by one agent, used through its HTTP API."""

    def __init__(self, agent: AgentClient) -> None:
        self.agent = agent

    def register(self, tenant: str, node: str, host: str, port: int) -> Ownership:
        return Ownership.from_dict(self.agent.request(
            "POST", "/v1/directory/tenants", {"tenant": tenant, "node": node, "host": host, "port": port}))

    def lookup(self, tenant: str) -> Ownership:
        return Ownership.from_dict(self.agent.request("GET", f"/v1/directory/tenants/{quote(tenant)}"))

    def list(self) -> list[Ownership]:
        return [Ownership.from_dict(d) for d in self.agent.request("GET", "/v1/directory/tenants")["tenants"]]

    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int) -> Ownership:
        return Ownership.from_dict(self.agent.request(
            "POST", f"/v1/directory/tenants/{quote(tenant)}/cas",
            {"expected_epoch": expected_epoch, "node": node, "host": host, "port": port}))

    def remove(self, tenant: str, expected_epoch: int | None = None) -> None:
        q = {"epoch": expected_epoch} if expected_epoch is not None else None
        self.agent.request("DELETE", f"/v1/directory/tenants/{quote(tenant)}", query=q)

    def watch(self, tenant: str, after_epoch: int, timeout_s: float) -> Ownership | None:
        doc = self.agent.request("GET", f"/v1/directory/tenants/{quote(tenant)}/watch",
                                 query={"after": after_epoch, "timeout": timeout_s}, timeout_s=timeout_s + 10)
        return Ownership.from_dict(doc["ownership"]) if doc.get("ownership") else None

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


def cluster_clients(cluster) -> tuple[dict[str, AgentClient], DirectoryStore]:
    """One client per node of a cluster file, and the directory: etcd itself, or the agent serving SQLite."""
    token = cluster.token()
    agents = {n.name: AgentClient(n.url, token, n.name) for n in cluster.nodes.values()}
    if cluster.directory_backend == "etcd":
        return agents, EtcdStore(cluster.etcd_endpoints, cluster.etcd_prefix)
    return agents, DirectoryClient(agents[cluster.directory_node])


def node_directory(cluster, node: str, data_root, token: str) -> tuple[DirectoryStore | None, DirectoryStore]:
    """An agent's directory: (the store it serves itself or None, the store it uses).

    With etcd every agent talks to etcd and can serve the directory API; with
    SQLite the node the cluster file names holds the file and the others ask it.
    """
    if cluster.directory_backend == "etcd":
        store = EtcdStore(cluster.etcd_endpoints, cluster.etcd_prefix)
        return store, store
    if cluster.directory_node == node:
        store = SQLiteStore(data_root / "directory.sqlite")
        return store, store
    d = cluster.directory
    # Short timeouts: an unreachable directory must be noticed (and reported) in seconds.
    return None, DirectoryClient(AgentClient(d.url, token, d.name, timeout_s=5))
