"""Directory entries by the thousand for the scale bench: aliases of a few real tenants, and the stand-in
agent that owns them.

Each alias is a real directory entry (`tenants/<id>` in etcd, the same JSON a creation writes) whose
address is the mariadbd of one of a few real tenants; the node it names is `aliases`, a member whose
agent is the small HTTP server below. That server answers what the router, `slacker status` and
`slacker tenant list` ask a node: the login hash of each alias (the hash of its real tenant's `app`
password, so a client logs in as app@ALIAS with that password and the router logs in to the real
mariadbd), and the node's tenants. Entries are written in etcd transactions of up to 128 puts (etcd's
default --max-txn-ops), so 10,000 take a few seconds; they have no `ports/` index key (they share
their real tenant's port).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slacker import protocol_version
from slacker.directory import EtcdStore, Member, Ownership
from slacker.directory.etcd import _b64
from slacker.router.control import password_hash

NODE = "aliases"
TXN_OPS = 128  # etcd's default --max-txn-ops


@dataclass(frozen=True)
class Target:
    """A real tenant that aliases point at: its address and its application password."""

    tenant: str
    host: str
    port: int
    password: str


@dataclass
class StandIn:
    """The `aliases` node's agent: one thread serving HTTP on 127.0.0.1, aliases added as registered."""

    targets: dict[str, Target] = field(default_factory=dict)  # alias -> the real tenant behind it
    server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _status_cache: tuple[int, bytes] = (-1, b"")

    def _tenants(self) -> list[dict]:
        return [{"id": a, "node": NODE, "host": t.host, "port": t.port, "running": True, "healthy": True,
                 "desired_state": "running", "fenced": False, "queries_per_s": 0.0, "connections": 0}
                for a, t in list(self.targets.items())]  # a copy: the bench adds aliases meanwhile

    def answer(self, path: str) -> tuple[int, dict | bytes]:
        if path.startswith("/v1/tenants/") and path.endswith("/login"):
            alias = path[len("/v1/tenants/"):-len("/login")]
            t = self.targets.get(alias)
            if t is None:
                return 404, {"error": "NotFound", "what": f"tenant {alias} not found", "why": "", "hint": ""}
            return 200, {"tenant": alias, "node": NODE, "user": "app", "hash": password_hash(t.password)}
        if path == "/v1/logins":
            every = list(self.targets.items())  # a copy: the bench adds aliases meanwhile
            hashes = {t.tenant: password_hash(t.password) for _, t in every}
            return 200, {"node": NODE, "logins": [{"tenant": a, "node": NODE, "user": "app", "hash": hashes[t.tenant]}
                                                  for a, t in every]}
        if path in ("/v1/status", "/v1/tenants"):
            n = len(self.targets)
            if self._status_cache[0] != n:  # the same answer until an alias is added
                tenants = self._tenants()
                doc = {"node": NODE, "url": self.url, "tenant_host": "127.0.0.1",
                       "protocol": protocol_version.current(), "registered": True, "serves_directory": False,
                       "tenants": tenants, "migrations": [], "warnings": []}
                self._status_cache = (n, json.dumps(doc).encode())
            return 200, self._status_cache[1]
        return 404, {"error": "NotFound", "what": f"{path} is not served by the stand-in agent", "why": "", "hint": ""}

    def start(self) -> "StandIn":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                status, doc = owner.answer(self.path.split("?", 1)[0])
                body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header(protocol_version.HEADER, str(protocol_version.current()))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="stand-in-agent", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def join_fleet(self, store: EtcdStore) -> None:
        store.put_member(Member(NODE, self.url, "127.0.0.1", protocol_version.current()))


def register(store: EtcdStore, stand_in: StandIn, aliases: list[tuple[str, Target]],
             progress=None) -> float:
    """Write the aliases' entries, TXN_OPS per etcd transaction; the stand-in learns each batch before
    etcd does (the router asks it for the logins as soon as the entries appear). Returns seconds taken."""
    t0 = time.monotonic()
    for i in range(0, len(aliases), TXN_OPS):
        batch = aliases[i:i + TXN_OPS]
        for alias, target in batch:
            stand_in.targets[alias] = target
        now = time.time()
        puts = [{"request_put": {"key": _b64(store._key("tenants", alias)),
                                 "value": _b64(json.dumps(Ownership(alias, NODE, t.host, t.port, 1, now).to_dict(),
                                                          sort_keys=True))}} for alias, t in batch]
        store.gw.call("/kv/txn", {"compare": [], "success": puts}, idempotent=True, timeout_s=30)
        if progress is not None:
            progress(i + len(batch), len(aliases), time.monotonic() - t0)
    return time.monotonic() - t0
