"""The agent's HTTP JSON API. Every request needs one of the cluster's credentials.

Routes are a small table of (method, regex, handler); handlers get the parsed
JSON body and query, return a JSON-able value, and raise SlackerError for a
JSON error document with a matching HTTP status. Which credential scope may call
which route is slacker/credentials.py's ACCESS table: an unknown token gets 401,
a known one outside its scope 403 with one line.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import re
import signal
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .. import credentials, protocol_version
from ..channels import host_is_machine_local
from ..errors import (AgentUnavailable, Conflict, Forbidden, InsecureChannel, InvalidInput, MigrationFailed,
                      NotFound, SlackerError, Unauthorized, VersionSkew)
from ..kinds.local import CreateOptions
from .node import Node

log = logging.getLogger("slacker.agent.http")

_STATUS = {InvalidInput: 400, Unauthorized: 401, Forbidden: 403, InsecureChannel: 403, NotFound: 404, Conflict: 409,
           VersionSkew: 426, AgentUnavailable: 502, MigrationFailed: 500}
# The connection the current handler thread serves: (peer address, TLS?), for routes that send secrets.
_request = threading.local()


def require_private_channel(node) -> None:
    """Refuse to answer with a secret unless this request came over TLS or from inside this machine."""
    peer, tls = getattr(_request, "peer", ""), getattr(_request, "tls", False)
    if not tls and not host_is_machine_local(peer, node.cluster.local_subnet):
        raise InsecureChannel("credentials are not sent over plain HTTP to another host",
                              f"the request came from {peer} without TLS",
                              "use the agent's https:// API (TLS), or ask from the node itself")


_MAX_BODY = 1 << 20
_METRICS_RULES = credentials.rules_for("GET", "/metrics")
TLS_HANDSHAKE_TIMEOUT_S = 10.0


# A connection that sends nothing (or stalls mid-request, or idles between keep-alive requests)
# for this long is dropped; long polls (watch) are not reads and are not cut by it.
REQUEST_TIMEOUT_S = 10.0
# At most this many requests are handled at once (watches included); beyond it a connection gets
# an immediate 503 instead of a thread, so a flood cannot exhaust the agent's memory or threads.
MAX_WORKERS = 128


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, node: Node, host: str, port: int, ssl_context=None,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_workers: int = MAX_WORKERS) -> None:
        self.node = node
        self.ssl_context = ssl_context  # HTTPS when set (the agent config has TLS)
        # (method, pattern, handler, who may call it: slacker.credentials.ACCESS's rules for the route)
        self.routes: list[tuple[str, re.Pattern, callable, list]] = []
        self.shutdown_requested = threading.Event()
        self.stop_tenants_on_shutdown = False
        self.request_timeout_s = request_timeout_s
        self.max_workers = max_workers
        self._slots = threading.BoundedSemaphore(max_workers)
        self._busy = 0                        # requests being answered (not idle kept-open connections)
        self._idle = threading.Condition()
        super().__init__((host, port), _Handler)
        _add_core_routes(self)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self._refuse_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse_busy(self, request) -> None:
        body = json.dumps(AgentUnavailable("agent busy", f"{self.max_workers} requests in progress",
                                           "retry shortly").to_dict()).encode()
        try:
            request.settimeout(1.0)
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            # Read what the client sent before closing: closing with its request unread makes the kernel
            # answer with a reset, which can reach the client before the 503 and discard it.
            request.shutdown(socket.SHUT_WR)
            request.settimeout(0.2)
            while request.recv(65536):
                pass
        except OSError:
            pass
        self.shutdown_request(request)

    def finish_request(self, request, client_address):
        if self.ssl_context is not None:
            # The handshake runs in the connection's own thread, never in the accept loop.
            request.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
            try:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (OSError, ValueError) as exc:  # a plain-text client, or a broken handshake
                log.info("TLS handshake with %s failed: %s", client_address[0], exc)
                return
            request.settimeout(None)
            try:
                super().finish_request(request, client_address)
            finally:
                self.shutdown_request(request)  # the caller would close the (detached) plain socket
            return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        """A client that goes away mid-request is routine (a timeout, a killed CLI): one log line,
        not a traceback on stderr. Anything else is logged with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.info("connection from %s ended early: %s", client_address[0], exc)
            return
        log.exception("error answering a request from %s", client_address[0])

    @contextlib.contextmanager
    def answering(self):
        """Around one request being answered; wait_answered() waits for all of them."""
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_answered(self, timeout_s: float) -> None:
        """On shutdown: let requests in progress (the shutdown request's own answer too) go out."""
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout=timeout_s)

    def route(self, method: str, pattern: str):
        rules = credentials.rules_for(method, pattern)

        def deco(fn):
            self.routes.append((method, re.compile(f"^{pattern}$"), fn, rules))
            return fn
        return deco


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; on a kept-open connection Nagle would hold the body
    # back until the client's delayed ACK (~40 ms a call, measured with HTTPS).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # applied to the socket by StreamRequestHandler
        super().setup()

    def log_message(self, fmt, *args):  # route access logs through logging, at debug level
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header(protocol_version.HEADER, str(self.server.node.protocol))  # on every answer
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc) -> None:
        self._send(status, json.dumps(doc, default=str).encode())

    def _credential(self) -> credentials.Credential | None:
        """The credential the request presents, None if it is none of this cluster's."""
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return None
        return self.server.node.keyring.verify(header[len("Bearer "):])

    def _refuse(self, status: int, exc: SlackerError) -> None:
        # Drain the body so the connection stays well-formed.
        self.rfile.read(min(int(self.headers.get("Content-Length") or 0), _MAX_BODY))
        self._json(status, exc.to_dict())

    def _dispatch(self, method: str) -> None:
        with self.server.answering():
            self._answer(method)

    def _answer(self, method: str) -> None:
        _request.peer = self.client_address[0] if self.client_address else ""
        _request.tls = isinstance(self.connection, ssl.SSLSocket)
        cred = self._credential()
        if cred is None:
            self._refuse(401, Unauthorized("unauthorized", "missing or wrong bearer token",
                                           "send Authorization: Bearer <the credential file's contents>"))
            return
        theirs = protocol_version.parse(self.headers.get(protocol_version.HEADER))
        # /metrics is exempt: a scraper speaks no Slacker protocol.
        if not protocol_version.compatible(self.server.node.protocol, theirs) and not self.path.startswith("/metrics"):
            caller = (self.headers.get(protocol_version.NODE_HEADER) or "").strip()[:80] or f"the caller at {_request.peer}"
            self.rfile.read(min(int(self.headers.get("Content-Length") or 0), _MAX_BODY))
            try:
                protocol_version.check(self.server.node.protocol, theirs, f"agent {self.server.node.name}", caller)
            except VersionSkew as exc:
                log.warning("refused a request: %s", exc.one_line())
                self._json(426, exc.to_dict())
            return
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path == "/metrics" and method == "GET":
            try:
                credentials.check(_METRICS_RULES, cred)
            except Forbidden as exc:
                self._refuse(403, exc)
                return
            self._send(200, generate_latest(self.server.node.registry), CONTENT_TYPE_LATEST)
            return
        allowed = []
        for m, pattern, fn, rules in self.server.routes:
            match = pattern.match(url.path)
            if match and m == method:
                break
            if match:
                allowed.append(m)
        else:
            self.rfile.read(min(int(self.headers.get("Content-Length") or 0), _MAX_BODY))
            if allowed:
                self._json(405, InvalidInput(f"method {method} not allowed on {url.path}",
                                             f"it takes {', '.join(sorted(set(allowed)))}", "").to_dict())
            else:
                self._json(404, NotFound(f"no such endpoint {method} {url.path}", "", "").to_dict())
            return
        try:
            credentials.check(rules, cred, match.groups())
        except Forbidden as exc:
            log.info("%s %s refused: %s", method, url.path, exc.one_line())
            self._refuse(403, exc)
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self.close_connection = True  # its body stays unread: the connection cannot be reused
                raise InvalidInput("request body too large", f"{length} bytes", "")
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
            if not isinstance(body, dict):
                raise InvalidInput("request body must be a JSON object", "", "")
            result = fn(self.server, body, query, *match.groups())
            self._json(200, result if result is not None else {"ok": True})
        except SlackerError as exc:
            status = next((s for cls, s in _STATUS.items() if isinstance(exc, cls)), 500)
            if status >= 500:
                log.warning("%s %s failed: %s", method, url.path, exc.one_line())
            self._json(status, exc.to_dict())
        except ValueError as exc:
            self._json(400, InvalidInput("malformed request", str(exc), "").to_dict())
        except (BrokenPipeError, ConnectionResetError):
            raise  # the client hung up before its answer (a killed CLI, say): no bug, the caller logs it briefly
        except Exception as exc:  # never let a bug kill the server thread silently
            log.exception("%s %s crashed", method, url.path)
            self._json(500, SlackerError(f"agent error in {method} {url.path}", repr(exc), "see the agent log").to_dict())

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")


def _add_core_routes(server: ApiServer) -> None:
    node = server.node
    TID = r"([a-z0-9-]{1,64})"

    @server.route("GET", "/v1/status")
    def status(srv, body, q):
        return node.status()

    @server.route("GET", "/v1/tenants")
    def list_tenants(srv, body, q):
        return {"node": node.name, "tenants": node.list_tenants()}

    @server.route("POST", "/v1/tenants")
    def create_tenant(srv, body, q):
        if "id" not in body:
            raise InvalidInput("missing tenant id", "the body needs an id", "")
        pool = body.get("buffer_pool_bytes")
        options = CreateOptions(buffer_pool_bytes=int(pool) if pool else None, existing=bool(body.get("existing")))
        return node.create_tenant(str(body["id"]), body.get("kind"), options)

    @server.route("GET", f"/v1/tenants/{TID}")
    def get_tenant(srv, body, q, tid):
        return node.tenant_detail(tid)

    @server.route("GET", f"/v1/tenants/{TID}/credentials")
    def tenant_credentials(srv, body, q, tid):
        require_private_channel(node)
        return node.tenant_credentials(tid)

    @server.route("GET", f"/v1/tenants/{TID}/login")
    def tenant_login(srv, body, q, tid):
        require_private_channel(node)  # the hash checks a login; with a captured login it makes one
        return node.tenant_login(tid)

    @server.route("GET", "/v1/logins")
    def tenant_logins(srv, body, q):
        require_private_channel(node)
        return {"node": node.name, "logins": node.tenant_logins()}

    @server.route("DELETE", f"/v1/tenants/{TID}")
    def delete_tenant(srv, body, q, tid):
        node.delete_tenant(tid)
        return {"deleted": tid}

    @server.route("POST", "/v1/shutdown")
    def shutdown(srv, body, q):
        srv.stop_tenants_on_shutdown = bool(body.get("stop_tenants"))
        srv.shutdown_requested.set()
        return {"shutting_down": True, "stop_tenants": srv.stop_tenants_on_shutdown}

    # ---- directory (only on the node that serves it) ----------------------------
    def store():
        if node.local_directory is None:
            raise NotFound(f"node {node.name} does not serve the directory",
                           f"the cluster file names {node.cluster.directory_node}", "ask that node")
        return node.local_directory

    @server.route("GET", "/v1/directory/tenants")
    def dir_list(srv, body, q):
        return {"tenants": [o.to_dict() for o in store().list()]}

    @server.route("POST", "/v1/directory/tenants")
    def dir_register(srv, body, q):
        return store().register(body["tenant"], body["node"], body["host"], int(body["port"]),
                                str(body.get("kind") or "server")).to_dict()

    @server.route("POST", "/v1/directory/shared-ports")
    def dir_claim_shared_port(srv, body, q):
        store().claim_shared_port(str(body["node"]), int(body["port"]))
        return {"claimed": int(body["port"]), "node": str(body["node"])}

    @server.route("GET", f"/v1/directory/tenants/{TID}")
    def dir_lookup(srv, body, q, tid):
        return store().lookup(tid).to_dict()

    @server.route("POST", f"/v1/directory/tenants/{TID}/cas")
    def dir_cas(srv, body, q, tid):
        return store().compare_and_set(tid, int(body["expected_epoch"]), body["node"], body["host"],
                                       int(body["port"]), kind=body.get("kind") or None).to_dict()

    @server.route("DELETE", f"/v1/directory/tenants/{TID}")
    def dir_remove(srv, body, q, tid):
        store().remove(tid, int(q["epoch"]) if "epoch" in q else None)
        return {"removed": tid}

    @server.route("GET", f"/v1/directory/tenants/{TID}/watch")
    def dir_watch(srv, body, q, tid):
        timeout_s = min(max(float(q.get("timeout", 30)), 0.0), 300.0)
        own = store().watch(tid, int(q.get("after", 0)), timeout_s)
        return {"ownership": own.to_dict() if own else None}

    @server.route("GET", "/v1/directory/changes")
    def dir_changes(srv, body, q):
        timeout_s = min(max(float(q.get("timeout", 30)), 0.0), 300.0)
        return store().changes(int(q["since"]) if "since" in q else None, timeout_s).to_dict()

    @server.route("GET", "/v1/directory/health")
    def dir_health(srv, body, q):
        return store().health()

    # Members: the fleet's nodes (GET all, POST one {"name", "url", "tenant_host", "protocol"}, DELETE one).
    @server.route("GET", "/v1/directory/members")
    def dir_members(srv, body, q):
        return {"members": [m.to_dict() for m in store().members()]}

    @server.route("POST", "/v1/directory/members")
    def dir_put_member(srv, body, q):
        from ..directory import Member
        try:
            m = Member.from_dict(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput("malformed member", f"{type(exc).__name__}: {exc}",
                               "send name, url, tenant_host, protocol") from None
        return store().put_member(m).to_dict()

    @server.route("DELETE", r"/v1/directory/members/([a-z0-9][a-z0-9._-]{0,63})")
    def dir_remove_member(srv, body, q, name):
        return {"removed": store().remove_member(name)}

    # The exclusive lock: POST takes it ({"holder", "ttl_s"}) or, with "refresh": true, extends it.
    NAME = r"([a-z0-9][a-z0-9._/-]{0,600})"

    @server.route("GET", f"/v1/directory/locks/{NAME}")
    def lock_get(srv, body, q, name):
        info = store().lock_info(name)
        return {"lock": info.to_dict() if info else None}

    @server.route("POST", f"/v1/directory/locks/{NAME}")
    def lock_take(srv, body, q, name):
        if not isinstance(body.get("holder"), str):
            raise InvalidInput("missing lock holder", "the body needs a holder", "")
        if body.get("refresh"):
            return store().refresh_lock(name, body["holder"]).to_dict()
        if "ttl_s" not in body:
            raise InvalidInput("missing lock TTL", "the body needs ttl_s", "")
        return store().acquire_lock(name, body["holder"], body["ttl_s"]).to_dict()

    @server.route("DELETE", f"/v1/directory/locks/{NAME}")
    def lock_release(srv, body, q, name):
        if "holder" not in q:
            raise InvalidInput("missing lock holder", "pass ?holder=", "")
        return {"released": store().release_lock(name, q["holder"])}

    # Small JSON state (cool-downs): GET one key or ?prefix= a listing, POST {"value": {...}}, DELETE.
    @server.route("GET", "/v1/directory/state")
    def state_list(srv, body, q):
        return {"state": store().state_list(q.get("prefix", ""))}

    @server.route("GET", f"/v1/directory/state/{NAME}")
    def state_get(srv, body, q, key):
        return {"value": store().state_get(key)}

    @server.route("POST", f"/v1/directory/state/{NAME}")
    def state_put(srv, body, q, key):
        store().state_put(key, body.get("value"))
        return {"stored": key}

    @server.route("DELETE", f"/v1/directory/state/{NAME}")
    def state_delete(srv, body, q, key):
        return {"deleted": store().state_delete(key)}


def serve(node: Node) -> ApiServer:
    """Start the node's services and its HTTP server on a background thread."""
    ssl_context = None
    if node.config.tls is not None:
        from ..tls import server_context
        ssl_context = server_context(node.config.tls)
    server = ApiServer(node, node.config.listen_host, node.config.listen_port, ssl_context=ssl_context)
    try:
        from ..migration.service import attach  # migrations add their own routes
        from ..router.freeze import Routers  # the handover's participants: the routers the directory announces
        attach(node, server, Routers(node.directory, node.keyring))
    except ModuleNotFoundError as exc:
        if exc.name != "slacker.migration.service":
            raise
    from .tenant_stats import attach as attach_tenant_stats  # per-tenant latency, transactions/s
    attach_tenant_stats(node, server)
    node.start()
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


def run_forever(node: Node) -> None:
    """The daemon's main loop: serve until SIGTERM/SIGINT or an API shutdown request."""
    server = serve(node)
    stop = server.shutdown_requested

    def on_signal(signum, frame):
        log.info("signal %d: shutting down (tenants keep running)", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # `kill -USR1 <agent>` writes every thread's stack to stderr (the agent's log): what a stuck step waits on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    log.info("agent %s listening on %s:%d (%s)", node.name, node.config.listen_host, server.server_address[1],
             "https" if server.ssl_context is not None else "http, plain text")
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.wait_answered(5.0)
    node.stop(stop_tenants=server.stop_tenants_on_shutdown)
    server.server_close()
    log.info("agent %s stopped", node.name)
