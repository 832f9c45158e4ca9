"""The directory on etcd, spoken through etcd's v3 JSON gateway with the standard library only.

Why the gateway and no client library: etcd serves the same gRPC API as JSON
over HTTP/1.1 (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`, `/v3/watch`),
so an agent needs neither grpcio nor generated protobuf code, whose versions
must match the server and break on upgrades. Keys and values travel base64;
64-bit numbers travel as strings; fields equal to their zero value are left out
(a txn that failed has no `succeeded`).

Layout under the prefix (default /slacker): tenants/<id> holds the ownership
as JSON, ports/<port> the tenant that uses the port, locks/<name> a lock bound
to a lease, state/<key> a JSON object. An epoch change is a txn that compares
the tenant key's mod_revision with the one read; a watch starts at the read's
revision + 1, reconnects when the stream breaks and re-reads when etcd says
the revision was compacted. members/<name> holds a node's registration (read
all at once with one range request). A lock is a key created only if absent, attached to
a lease: a holder that stops refreshing the lease loses the key with it.

With etcd's own authentication enabled (`slacker credential etcd-auth`) the
gateway logs in as the user the host's credential maps to (`etcd_user`) and
sends etcd's token with every request, per member (a simple token is known only
to the member that issued it); it logs in again when a member says the token is
missing or expired, so turning auth on needs no restart.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import math
import socket
import ssl
import time
from typing import Iterator
from urllib.parse import urlparse

from ..errors import Conflict, DirectoryUnavailable, Forbidden, InvalidInput, NotFound, PortTaken, SlackerError
from .base import (SERVER_KIND, SHARED_KIND, DirectoryStore, LockInfo, check_kind, Member, OwnerChanges, Ownership, check_member, check_state_value,
                   validate_holder, validate_name, validate_ttl)

log = logging.getLogger("slacker.directory.etcd")

# gRPC status codes that etcd's gateway reports in {"code": N}.
_UNAVAILABLE = 14
_DEADLINE_EXCEEDED = 4
_NOT_FOUND = 5
_PERMISSION_DENIED = 7
# What a member answers when it wants a login: no token sent, or one it does not know (expired, or
# issued by another member).
_LOGIN_WANTED = ("user name is empty", "invalid auth token", "auth token is expired")
# Reads in one txn of owners(): etcd refuses a txn of more than --max-txn-ops (128 by default).
OWNERS_PER_TXN = 100


def _b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s)


def _prefix_end(prefix: str) -> str:
    """The range_end that selects every key starting with `prefix`."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1  # our keys are ASCII: the last byte is never 0xff
    return _b64(bytes(raw))


class _Endpoint:
    def __init__(self, url: str, ca_file: str | None = None) -> None:
        p = urlparse(url)
        if p.scheme not in ("http", "https") or not p.hostname or not p.port:
            raise InvalidInput(f"bad etcd endpoint {url!r}", "expected http://HOST:PORT or https://HOST:PORT",
                               "fix etcd_endpoints in the cluster file")
        self.url = url.rstrip("/")
        self.tls = p.scheme == "https"
        self.host = p.hostname
        self.port = p.port
        self.api_prefix: str | None = None  # learnt from /version
        self.token: str | None = None  # etcd's auth token from this member (simple tokens are per member)
        self.auth_off = False  # this member said authentication is not enabled (checked again when it asks)
        self._ctx = ssl.create_default_context(cafile=ca_file) if self.tls else None

    def connect(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.tls:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s, context=self._ctx)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        conn.connect()
        return conn


class _Retry(Exception):
    """This endpoint cannot answer now; another may."""


class EtcdGateway:
    """A small client of etcd's v3 JSON gateway that fails over between endpoints.

    Reads (and other idempotent calls) move on to the next endpoint on any
    failure and retry until `timeout_s`; writes move on only when the request
    was never sent (connection refused), since a write that was sent may have
    been applied: then DirectoryUnavailable says the outcome is unknown.
    """

    def __init__(self, endpoints: list[str] | tuple[str, ...], timeout_s: float = 5.0,
                 ca_file: str | None = None, auth: tuple[str, str] | None = None) -> None:
        """`auth`: (user, password) to log in with once etcd asks for it (etcd auth enabled)."""
        if not endpoints:
            raise InvalidInput("no etcd endpoints", "the etcd directory needs at least one", "")
        self.endpoints = [_Endpoint(u, ca_file) for u in endpoints]
        self.timeout_s = timeout_s
        self.auth = auth
        self._first = 0  # index of the endpoint that answered last

    def _headers(self, ep: _Endpoint) -> dict:
        h = {"Content-Type": "application/json"}
        if ep.token:
            h["Authorization"] = ep.token
        return h

    def _login(self, ep: _Endpoint, prefix: str, timeout_s: float) -> bool:
        """Log in to one member; False if Slacker has no etcd user to log in as."""
        if self.auth is None:
            return False
        try:
            conn = ep.connect(timeout_s)
            try:
                conn.request("POST", prefix + "/auth/authenticate",
                             body=json.dumps({"name": self.auth[0], "password": self.auth[1]}).encode(),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                doc = json.loads(resp.read() or b"{}")
            finally:
                conn.close()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _Retry(f"{ep.url}: login: {exc or type(exc).__name__}") from None
        if resp.status != 200 or not doc.get("token"):
            _, msg = self._error(ep, resp.status, doc)
            if "authentication is not enabled" in msg:
                ep.token, ep.auth_off = None, True
                return False
            raise Forbidden(f"etcd at {ep.url} refused the login of {self.auth[0]}", msg,
                            "run `slacker credential etcd-auth` on an admin host (docs/deployment.md, \"Credentials\")")
        ep.token, ep.auth_off = doc["token"], False
        return True
    def _order(self, only: str | None) -> list[_Endpoint]:
        if only is not None:
            return [e for e in self.endpoints if e.url == only.rstrip("/")] or [_Endpoint(only)]
        n = len(self.endpoints)
        return [self.endpoints[(self._first + i) % n] for i in range(n)]

    def _api_prefix(self, ep: _Endpoint, timeout_s: float) -> str:
        """Which gateway path this server speaks: /v3 from etcd 3.4 on, /v3beta on 3.3."""
        if ep.api_prefix is None:
            conn = ep.connect(timeout_s)
            try:
                conn.request("GET", "/version")
                resp = conn.getresponse()
                doc = json.loads(resp.read() or b"{}")
            finally:
                conn.close()
            cluster = doc.get("etcdcluster") or doc.get("etcdserver") or "0"
            try:
                version = tuple(int(x) for x in cluster.split(".")[:2])
            except ValueError:
                raise _Retry(f"{ep.url}: unexpected /version answer {doc}") from None
            if version == (0,) or version < (3, 3):
                raise SlackerError(f"etcd at {ep.url} is too old", f"cluster version {cluster}",
                                   "Slacker needs etcd 3.3 or newer (3.4 is Debian 12's)")
            ep.api_prefix = "/v3" if version >= (3, 4) else "/v3beta"
        return ep.api_prefix

    @staticmethod
    def _error(ep: _Endpoint, status: int, doc) -> tuple[int | None, str]:
        if isinstance(doc, dict) and ("error" in doc or "code" in doc):
            return doc.get("code"), str(doc.get("message") or doc.get("error"))
        return None, f"HTTP {status} from {ep.url}"

    def call(self, method: str, body: dict, *, idempotent: bool, timeout_s: float | None = None,
             only: str | None = None) -> dict:
        """POST `body` to the gateway's `method` (e.g. "/kv/range") and return the JSON answer."""
        timeout_s = timeout_s or self.timeout_s
        deadline = time.monotonic() + timeout_s
        errors: list[str] = []
        data = json.dumps(body).encode()
        while True:
            for ep in self._order(only):
                try:
                    return self._call_one(ep, method, data, idempotent, deadline)
                except _Retry as exc:
                    errors.append(str(exc))
            if not idempotent or only is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.2)  # an election may be under way
        raise DirectoryUnavailable("etcd is unavailable", "; ".join(dict.fromkeys(errors[-3:])) or "no endpoint answered",
                                   "check `slacker status`: a majority of etcd members must be up")

    def _call_one(self, ep: _Endpoint, method: str, data: bytes, idempotent: bool, deadline: float,
                  logged_in: bool = False) -> dict:
        """One member's answer; _Retry when another member may answer instead."""
        left = max(0.2, deadline - time.monotonic())
        try:
            prefix = self._api_prefix(ep, left)
            conn = ep.connect(left)
        except (OSError, http.client.HTTPException, ValueError, _Retry) as exc:
            raise _Retry(f"{ep.url}: {exc or type(exc).__name__}") from None  # nothing was sent
        try:
            conn.request("POST", prefix + method, body=data, headers=self._headers(ep))
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            if idempotent:
                raise _Retry(f"{ep.url}: {exc or type(exc).__name__}") from None
            raise DirectoryUnavailable(f"etcd {ep.url} did not answer {method}", str(exc) or type(exc).__name__,
                                       "the write may or may not have happened: read before retrying"
                                       ) from None
        finally:
            conn.close()
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = None
        if resp.status == 200 and isinstance(doc, dict) and "error" not in doc:
            self._first = self.endpoints.index(ep) if ep in self.endpoints else self._first
            return doc
        code, msg = self._error(ep, resp.status, doc)
        # etcd refused the request before applying it for want of a login: log in and ask again.
        if not logged_in and any(w in msg for w in _LOGIN_WANTED) and self._login(ep, prefix, left):
            return self._call_one(ep, method, data, idempotent, deadline, logged_in=True)
        if code in (_UNAVAILABLE, _DEADLINE_EXCEEDED) or resp.status in (502, 503, 504):
            if idempotent:
                raise _Retry(f"{ep.url}: {msg}")
            raise DirectoryUnavailable(f"etcd {ep.url} could not complete {method}", msg,
                                       "the write may or may not have happened: read before retrying")
        if code == _NOT_FOUND:
            raise NotFound(f"etcd {method}: {msg}", "", "")
        if code == _PERMISSION_DENIED:
            user = self.auth[0] if self.auth else "no user"
            raise Forbidden(f"etcd refused {method} to {user}", msg,
                            "its role does not cover the key (docs/deployment.md, \"Credentials\")")
        raise SlackerError(f"etcd refused {method}", msg, "see the etcd log")

    def stream(self, method: str, body: dict, deadline: float) -> Iterator[dict]:
        """POST to a streaming method (watch) and yield each JSON message's `result` until the deadline.
        Raises TimeoutError at the deadline and DirectoryUnavailable when the stream breaks."""
        last = "no endpoint answered"
        for ep in self._order(None):
            try:
                prefix = self._api_prefix(ep, max(0.2, min(self.timeout_s, deadline - time.monotonic())))
                if self.auth is not None and ep.token is None and not ep.auth_off:
                    # A watch reports a missing login only inside its stream: log in before it starts.
                    self._login(ep, prefix, max(0.2, min(self.timeout_s, deadline - time.monotonic())))
                conn = ep.connect(max(0.2, min(self.timeout_s, deadline - time.monotonic())))
                conn.request("POST", prefix + method, body=json.dumps(body).encode(), headers=self._headers(ep))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException, ValueError, _Retry) as exc:
                last = f"{ep.url}: {exc or type(exc).__name__}"
                continue
            break
        else:
            raise DirectoryUnavailable("etcd is unavailable for a watch", last,
                                       "check `slacker status`: a majority of etcd members must be up")
        try:
            if resp.status != 200:
                raise DirectoryUnavailable(f"etcd {ep.url} refused a watch", f"HTTP {resp.status}", "")
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("watch deadline")
                conn.sock.settimeout(left)
                try:
                    line = resp.readline()
                except (socket.timeout, TimeoutError):
                    raise TimeoutError("watch deadline") from None
                except (OSError, http.client.HTTPException) as exc:
                    raise DirectoryUnavailable(f"etcd {ep.url} broke the watch", str(exc), "") from None
                if not line:
                    raise DirectoryUnavailable(f"etcd {ep.url} closed the watch", "end of stream", "")
                if not line.strip():
                    continue
                doc = json.loads(line)
                if "error" in doc:
                    if any(w in json.dumps(doc["error"]) for w in _LOGIN_WANTED):
                        ep.token, ep.auth_off = None, False  # the next watch logs in first
                    raise DirectoryUnavailable(f"etcd {ep.url} ended the watch", str(doc["error"]), "")
                cancel = (doc.get("result") or {}).get("cancel_reason", "")
                if any(w in cancel for w in _LOGIN_WANTED):  # a compaction's cancel is the caller's
                    ep.token, ep.auth_off = None, False
                    raise DirectoryUnavailable(f"etcd {ep.url} cancelled the watch", cancel, "")
                if "permission denied" in cancel:
                    raise Forbidden(f"etcd refused a watch to {self.auth[0] if self.auth else 'no user'}", cancel,
                                    "its role does not cover the key (docs/deployment.md, \"Credentials\")")
                yield doc.get("result", {})
        finally:
            conn.close()


class EtcdStore(DirectoryStore):
    """The directory on an etcd cluster (see the module docstring for the key layout)."""

    def __init__(self, endpoints: list[str] | tuple[str, ...], prefix: str = "/slacker",
                 timeout_s: float = 5.0, ca_file: str | None = None, auth: tuple[str, str] | None = None) -> None:
        """`ca_file` verifies https:// endpoints (the cluster CA); without it the system's CAs do. `auth`:
        the etcd user and password to log in with when etcd's authentication is on (`etcd_login`)."""
        if not prefix.startswith("/") or prefix.endswith("/") or len(prefix) < 2:
            raise InvalidInput(f"bad etcd prefix {prefix!r}", "expected /NAME without a trailing slash",
                               "for example /slacker")
        self.gw = EtcdGateway(endpoints, timeout_s, ca_file, auth)
        self.prefix = prefix

    # ---- keys and small helpers ---------------------------------------------------------
    def _key(self, kind: str, name: str | int) -> str:
        return f"{self.prefix}/{kind}/{name}"

    def _read(self, key: str) -> tuple[dict | None, int]:
        """The key's kv (or None) and the store's revision at the time of the read."""
        doc = self.gw.call("/kv/range", {"key": _b64(key)}, idempotent=True)
        kvs = doc.get("kvs") or []
        return (kvs[0] if kvs else None), int(doc["header"]["revision"])

    def _txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None) -> dict:
        return self.gw.call("/kv/txn", {"compare": compare, "success": success, "failure": failure or []},
                            idempotent=False)

    @staticmethod
    def _value(kv: dict) -> dict:
        return json.loads(_unb64(kv.get("value", "")) or b"{}")

    @staticmethod
    def _put(key: str, value: dict | str, lease: str | None = None) -> dict:
        raw = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        req = {"key": _b64(key), "value": _b64(raw)}
        if lease:
            req["lease"] = lease
        return {"request_put": req}

    @staticmethod
    def _delete(key: str) -> dict:
        return {"request_delete_range": {"key": _b64(key)}}

    @staticmethod
    def _absent(key: str) -> dict:
        return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}

    @staticmethod
    def _equal(key: str, value: str) -> dict:
        return {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(value)}

    @staticmethod
    def _unchanged(key: str, mod_revision) -> dict:
        return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod_revision)}

    @staticmethod
    def _not_found(tenant: str) -> NotFound:
        return NotFound(f"tenant {tenant} not found", "the directory does not know it", "see `slacker tenant list`")

    def _ownership(self, kv: dict) -> Ownership:
        return Ownership.from_dict(self._value(kv))

    # ---- ownership -----------------------------------------------------------------
    def register(self, tenant: str, node: str, host: str, port: int, kind: str = SERVER_KIND) -> Ownership:
        check_kind(kind)
        tkey, pkey = self._key("tenants", tenant), self._key("ports", port)
        own = Ownership(tenant, node, host, int(port), 1, time.time(), kind)
        # ports/<port> names the whole-server tenant that uses the port, or `shared:<node>`: the node's shared
        # server, claimed by its first shared tenant, kept by the node (a removal leaves it).
        holder = f"shared:{node}" if kind == SHARED_KIND else tenant
        r = self._txn([self._absent(tkey), self._absent(pkey)],
                      [self._put(tkey, own.to_dict()), self._put(pkey, holder)],
                      [{"request_range": {"key": _b64(tkey)}}, {"request_range": {"key": _b64(pkey)}}])
        if r.get("succeeded"):
            return own
        responses = r.get("responses") or []
        if responses and (responses[0].get("response_range") or {}).get("kvs"):
            raise Conflict(f"tenant {tenant} already exists", "the directory has it",
                           "pick another id, or delete the tenant first")
        clash = "another tenant"
        if len(responses) > 1 and (responses[1].get("response_range") or {}).get("kvs"):
            held = _unb64(responses[1]['response_range']['kvs'][0].get('value', '')).decode()
            if held == holder:  # this node's shared server's port, claimed already: the tenant alone
                if self._txn([self._absent(tkey), self._equal(pkey, holder)], [self._put(tkey, own.to_dict())]
                             ).get("succeeded"):
                    return own
                return self.register(tenant, node, host, port, kind)  # changed meanwhile: read again
            clash = (f"node {held[len('shared:'):]}'s shared server" if held.startswith("shared:")
                     else f"tenant {held}")
        raise PortTaken(f"port {port} is taken", f"{clash} uses it", "choose another port range or id")

    def claim_shared_port(self, node: str, port: int) -> None:
        pkey, holder = self._key("ports", port), f"shared:{node}"
        r = self._txn([self._absent(pkey)], [self._put(pkey, holder)], [{"request_range": {"key": _b64(pkey)}}])
        if r.get("succeeded"):
            return
        kvs = ((r.get("responses") or [{}])[0].get("response_range") or {}).get("kvs") or []
        held = _unb64(kvs[0].get("value", "")).decode() if kvs else ""
        if held == holder:
            return
        if not held:  # released meanwhile: ask again
            return self.claim_shared_port(node, port)
        clash = f"node {held[len('shared:'):]}'s shared server" if held.startswith("shared:") else f"tenant {held}"
        raise PortTaken(f"port {port} is taken", f"{clash} uses it", "choose another port range")

    def lookup(self, tenant: str) -> Ownership:
        kv, _ = self._read(self._key("tenants", tenant))
        if kv is None:
            raise self._not_found(tenant)
        return self._ownership(kv)

    def owners(self, tenants) -> dict[str, Ownership]:
        # Point reads of those keys in read-only txns (under etcd's default limit of 128 operations each): what
        # an agent reads every tick costs its own tenants, not the fleet's.
        ids = sorted(set(tenants))
        found: dict[str, Ownership] = {}
        for i in range(0, len(ids), OWNERS_PER_TXN):
            chunk = ids[i:i + OWNERS_PER_TXN]
            r = self.gw.call("/kv/txn", {"compare": [], "failure": [], "success": [
                {"request_range": {"key": _b64(self._key("tenants", t))}} for t in chunk]}, idempotent=True)
            for resp in r.get("responses") or []:
                for kv in (resp.get("response_range") or {}).get("kvs") or []:
                    own = self._ownership(kv)
                    found[own.tenant] = own
        return found

    def list(self) -> list[Ownership]:
        # In pages at one revision: one answer for 10,000 tenants would be megabytes in one piece.
        return list(self._snapshot().owners)

    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int,
                        kind: str | None = None) -> Ownership:
        tkey = self._key("tenants", tenant)
        kv, _ = self._read(tkey)
        if kv is None:
            raise self._not_found(tenant)
        cur = self._ownership(kv)
        if cur.epoch != expected_epoch:
            raise Conflict(f"ownership of {tenant} changed underneath",
                           f"expected epoch {expected_epoch}, directory has {cur.epoch}", "re-read the tenant and retry")
        kind = check_kind(kind) if kind else cur.kind
        new = Ownership(tenant, node, host, int(port), expected_epoch + 1, time.time(), kind)
        compare = [self._unchanged(tkey, kv["mod_revision"])]
        ops = [self._put(tkey, new.to_dict())]
        shared_move = kind == SHARED_KIND and (int(port) != cur.port or cur.kind != SHARED_KIND)
        pkey, holder = self._key("ports", port), f"shared:{node}"
        if shared_move:
            # A shared tenant moves to the new node's shared server's port, which that node claimed before the
            # move (one txn, no read inside the freeze); the old port stays the old node's shared server's.
            compare.append(self._equal(pkey, holder))
            if cur.kind != SHARED_KIND:  # a whole server packed into a shared server: its own port goes
                ops.append(self._delete(self._key("ports", cur.port)))
        elif cur.kind == SHARED_KIND != kind:  # a shared tenant given a server of its own: the old port stays its node's
            compare.append(self._absent(pkey))
            ops.append(self._put(pkey, tenant))
        elif int(port) != cur.port:  # ports normally travel with the tenant; keep the index right if not
            compare.append(self._absent(pkey))
            ops += [self._delete(self._key("ports", cur.port)), self._put(pkey, tenant)]
        if self._txn(compare, ops).get("succeeded"):
            return new
        if shared_move:
            held, _ = self._read(pkey)
            if held is None:  # not claimed (a target of a build before claims): claimed with the flip
                if self._txn([self._unchanged(tkey, kv["mod_revision"]), self._absent(pkey)],
                             [*ops, self._put(pkey, holder)]).get("succeeded"):
                    return new
            elif _unb64(held.get("value", "")).decode() != holder:
                raise PortTaken(f"port {port} is taken", f"it is not node {node}'s shared server's",
                                "the move's target must use its own shared server")
        kv, _ = self._read(tkey)
        if kv is None:
            raise self._not_found(tenant)
        has = self._ownership(kv).epoch
        if has == expected_epoch:
            raise PortTaken(f"port {port} is taken", "another tenant uses it", "choose another port")
        raise Conflict(f"ownership of {tenant} changed underneath",
                       f"expected epoch {expected_epoch}, directory has {has}", "re-read the tenant and retry")

    def remove(self, tenant: str, expected_epoch: int | None = None) -> None:
        tkey = self._key("tenants", tenant)
        kv, _ = self._read(tkey)
        if kv is None:
            raise self._not_found(tenant)
        cur = self._ownership(kv)
        if expected_epoch is not None and cur.epoch != expected_epoch:
            raise Conflict(f"tenant {tenant} changed underneath", f"its epoch is {cur.epoch}", "retry")
        # A shared tenant's port stays its node's shared server's (its neighbours use it).
        ports = [] if cur.kind == SHARED_KIND else [self._delete(self._key("ports", cur.port))]
        if not self._txn([self._unchanged(tkey, kv["mod_revision"])], [self._delete(tkey), *ports]).get("succeeded"):
            raise Conflict(f"tenant {tenant} changed underneath", "its epoch moved", "retry")

    def watch(self, tenant: str, after_epoch: int, timeout_s: float) -> Ownership | None:
        tkey = self._key("tenants", tenant)
        deadline = time.monotonic() + max(0.0, timeout_s)
        failure: DirectoryUnavailable | None = None
        while True:
            try:
                kv, revision = self._read(tkey)
            except DirectoryUnavailable as exc:
                failure = exc
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                continue
            failure = None
            if kv is None:
                raise self._not_found(tenant)
            own = self._ownership(kv)
            if own.epoch > after_epoch:
                return own
            if time.monotonic() >= deadline:
                return None
            try:
                found = self._watch_from(tkey, tenant, revision + 1, after_epoch, deadline)
            except TimeoutError:
                return None
            except DirectoryUnavailable as exc:  # the stream broke: read again, then watch again
                log.info("watch on %s interrupted (%s); resuming", tenant, exc.one_line())
                failure = exc
                time.sleep(0.2)
                continue
            if found is not None:
                return found
            # None: etcd compacted past our revision; the loop re-reads the key and starts over.
        raise failure  # pragma: no cover (the loop only leaves by return or raise)

    def _watch_from(self, tkey: str, tenant: str, start_revision: int, after_epoch: int,
                    deadline: float) -> Ownership | None:
        req = {"create_request": {"key": _b64(tkey), "start_revision": str(start_revision)}}
        for result in self.gw.stream("/watch", req, deadline):
            if int(result.get("compact_revision") or 0) > 0 or result.get("canceled"):
                log.info("watch on %s from revision %d: compacted at %s; re-reading", tenant, start_revision,
                         result.get("compact_revision"))
                return None
            for ev in result.get("events") or []:
                if ev.get("type") == "DELETE":
                    raise self._not_found(tenant)
                own = self._ownership(ev["kv"])
                if own.epoch > after_epoch:
                    return own
        return None  # pragma: no cover (stream raises at its end)

    # ---- members: members/<name>, read with one range request ------------------------------
    def put_member(self, member: Member) -> Member:
        check_member(member)
        mkey = self._key("members", member.name)
        for _ in range(5):
            kv, _rev = self._read(mkey)
            now = time.time()
            first = float(self._value(kv).get("registered_at") or now) if kv is not None else now
            m = Member(member.name, member.url.rstrip("/"), member.tenant_host, member.protocol, first, now)
            # Compare-and-put, so two registrations at once cannot lose the first registered_at.
            cmp = [self._unchanged(mkey, kv["mod_revision"])] if kv is not None else [self._absent(mkey)]
            if self._txn(cmp, [self._put(mkey, m.to_dict())]).get("succeeded"):
                return m
        raise Conflict(f"node {member.name} is being registered by someone else", "its record kept changing", "retry")

    def members(self) -> list[Member]:
        prefix = self._key("members", "")
        doc = self.gw.call("/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)}, idempotent=True)
        return sorted((Member.from_dict(self._value(kv)) for kv in doc.get("kvs") or []), key=lambda m: m.name)

    def remove_member(self, name: str) -> bool:
        validate_name(name, "node name")
        doc = self.gw.call("/kv/deleterange", {"key": _b64(self._key("members", name))}, idempotent=True)
        return int(doc.get("deleted") or 0) > 0

    # ---- every tenant as one stream of changes: one watch on the tenants' prefix --------------
    SNAPSHOT_PAGE = 1000  # keys per range request of a snapshot, all read at one revision

    def _snapshot(self) -> OwnerChanges:
        prefix = self._key("tenants", "")
        owners: list[Ownership] = []
        start, revision = _b64(prefix), None
        while True:
            req = {"key": start, "range_end": _prefix_end(prefix), "limit": self.SNAPSHOT_PAGE}
            if revision is not None:
                req["revision"] = str(revision)
            doc = self.gw.call("/kv/range", req, idempotent=True)
            if revision is None:
                revision = int(doc["header"]["revision"])
            kvs = doc.get("kvs") or []
            owners += [self._ownership(kv) for kv in kvs]
            if not doc.get("more") or not kvs:
                return OwnerChanges(revision, True, tuple(sorted(owners, key=lambda o: o.tenant)))
            start = _b64(_unb64(kvs[-1]["key"]) + b"\0")

    def changes(self, since: int | None, timeout_s: float) -> OwnerChanges:
        if since is None:
            return self._snapshot()
        prefix = self._key("tenants", "")
        deadline = time.monotonic() + max(0.0, timeout_s)
        req = {"create_request": {"key": _b64(prefix), "range_end": _prefix_end(prefix),
                                  "start_revision": str(since + 1)}}
        try:
            for result in self.gw.stream("/watch", req, deadline):
                if int(result.get("compact_revision") or 0) > 0 or result.get("canceled"):
                    log.info("watch on every tenant from revision %d: compacted at %s; reading a snapshot",
                             since + 1, result.get("compact_revision"))
                    return self._snapshot()
                if result.get("created") and int(result.get("header", {}).get("revision") or 0) < since:
                    return self._snapshot()  # a revision this store never reached: another cluster's
                events = result.get("events") or []
                if not events:
                    continue
                changed: dict[str, Ownership | None] = {}
                for ev in events:
                    tenant = _unb64(ev["kv"]["key"]).decode()[len(prefix):]
                    changed[tenant] = None if ev.get("type") == "DELETE" else self._ownership(ev["kv"])
                # The events' own revisions, not the header's: a later message may still carry events
                # between the last one here and the store's revision when this one was sent.
                revision = max(int(ev["kv"].get("mod_revision") or 0) for ev in events)
                return OwnerChanges(revision, False,
                                    tuple(o for o in changed.values() if o is not None),
                                    tuple(t for t, o in changed.items() if o is None))
        except TimeoutError:
            return OwnerChanges(since, False)
        raise DirectoryUnavailable("etcd ended a watch", "end of stream", "")  # pragma: no cover

    # ---- the lock: a key created only if absent, bound to a lease ------------------------
    def _lease_ttl_left(self, lease: str | None) -> int:
        """Whole seconds left (etcd truncates: 0 means under a second), or -1 once the lease is gone."""
        if not lease:
            return -1
        doc = self.gw.call("/lease/timetolive", {"ID": lease}, idempotent=True)
        return int(doc.get("TTL") or 0)

    def _keepalive(self, lease: str | None) -> int:
        if not lease:
            return 0
        doc = self.gw.call("/lease/keepalive", {"ID": lease}, idempotent=True)
        return int((doc.get("result") or {}).get("TTL") or 0)

    def _revoke(self, lease: str | None) -> None:
        if lease:
            try:
                self.gw.call("/lease/revoke", {"ID": lease}, idempotent=True)
            except SlackerError as exc:  # it expires on its own anyway
                log.debug("revoking lease %s: %s", lease, exc.one_line())

    def acquire_lock(self, name: str, holder: str, ttl_s: float) -> LockInfo:
        validate_name(name)
        validate_holder(holder)
        ttl = max(1, math.ceil(validate_ttl(ttl_s)))
        lkey = self._key("locks", name)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            kv, _rev = self._read(lkey)
            if kv is not None:
                v = self._value(kv)
                if v.get("holder") == holder:
                    left = self._keepalive(kv.get("lease"))
                    if left > 0:
                        return LockInfo(name, holder, float(v.get("ttl_s", left)), float(left),
                                        float(v.get("acquired_at", 0.0)))
                    time.sleep(0.05)  # our lease just ran out; the key goes with it
                    continue
                left = self._lease_ttl_left(kv.get("lease"))
                if left < 0:  # expired; etcd deletes the key in a moment
                    time.sleep(0.1)
                    continue
                raise Conflict(f"lock {name} is held by {v.get('holder', '?')}",
                               f"for {max(left, 1)}s more unless refreshed", "wait for it to be released or to expire")
            granted = self.gw.call("/lease/grant", {"TTL": str(ttl)}, idempotent=False)
            lease, got = granted["ID"], int(granted.get("TTL") or ttl)
            now = time.time()
            r = self._txn([self._absent(lkey)],
                          [self._put(lkey, {"holder": holder, "ttl_s": got, "acquired_at": now}, lease=lease)])
            if r.get("succeeded"):
                return LockInfo(name, holder, float(got), float(got), now)
            self._revoke(lease)  # someone was faster; the next round reports who
        raise Conflict(f"lock {name} is contended", "it changed hands while we tried", "retry")

    def refresh_lock(self, name: str, holder: str) -> LockInfo:
        validate_name(name)
        kv, _ = self._read(self._key("locks", name))
        v = self._value(kv) if kv is not None else {}
        if kv is None or v.get("holder") != holder:
            raise Conflict(f"lock {name} is not held by {holder}",
                           "it expired" if kv is None else f"{v.get('holder')} holds it now",
                           "stop what needed the lock; acquire it again")
        left = self._keepalive(kv.get("lease"))
        if left <= 0:
            raise Conflict(f"lock {name} is not held by {holder}", "it expired",
                           "stop what needed the lock; acquire it again")
        return LockInfo(name, holder, float(v.get("ttl_s", left)), float(left), float(v.get("acquired_at", 0.0)))

    def release_lock(self, name: str, holder: str) -> bool:
        validate_name(name)
        lkey = self._key("locks", name)
        kv, _ = self._read(lkey)
        if kv is None or self._value(kv).get("holder") != holder:
            return False
        done = bool(self._txn([self._unchanged(lkey, kv["mod_revision"])], [self._delete(lkey)]).get("succeeded"))
        if done:
            self._revoke(kv.get("lease"))
        return done

    def lock_info(self, name: str) -> LockInfo | None:
        validate_name(name)
        kv, _ = self._read(self._key("locks", name))
        if kv is None:
            return None
        left = self._lease_ttl_left(kv.get("lease"))
        if left < 0:
            return None
        v = self._value(kv)
        return LockInfo(name, str(v.get("holder")), float(v.get("ttl_s", left)), float(max(left, 0.5)),
                        float(v.get("acquired_at", 0.0)))

    # ---- small JSON state -------------------------------------------------------------
    def state_get(self, key: str) -> dict | None:
        validate_name(key, "state key")
        kv, _ = self._read(self._key("state", key))
        return self._value(kv) if kv is not None else None

    def state_put(self, key: str, value: dict) -> None:
        raw = check_state_value(key, value)
        self.gw.call("/kv/put", {"key": _b64(self._key("state", key)), "value": _b64(raw)}, idempotent=True)

    def state_delete(self, key: str) -> bool:
        validate_name(key, "state key")
        doc = self.gw.call("/kv/deleterange", {"key": _b64(self._key("state", key))}, idempotent=True)
        return int(doc.get("deleted") or 0) > 0

    def state_list(self, prefix: str = "") -> dict[str, dict]:
        base = self._key("state", "")
        start = base + prefix
        doc = self.gw.call("/kv/range", {"key": _b64(start), "range_end": _prefix_end(start)}, idempotent=True)
        return {_unb64(kv["key"]).decode()[len(base):]: self._value(kv) for kv in doc.get("kvs") or []}

    # ---- health ------------------------------------------------------------------------
    def health(self) -> dict:
        """Members, who leads, and whether a majority answers; asks each member itself."""
        out: dict = {"backend": "etcd", "endpoints": [e.url for e in self.gw.endpoints], "prefix": self.prefix}
        try:
            members = self.gw.call("/cluster/member/list", {}, idempotent=True, timeout_s=3).get("members") or []
        except SlackerError as exc:
            return out | {"healthy": False, "members": [], "leader": None, "error": exc.one_line()}
        leader_id = None
        rows = []
        for m in sorted(members, key=lambda m: str(m.get("name") or m.get("ID"))):
            url = (m.get("clientURLs") or [None])[0]
            row = {"name": m.get("name") or m.get("ID"), "id": m.get("ID"), "client_url": url, "reachable": False}
            if url:
                try:
                    st = self.gw.call("/maintenance/status", {}, idempotent=True, timeout_s=1.5, only=url)
                    row.update(reachable=True, version=st.get("version"), db_size_bytes=int(st.get("dbSize") or 0),
                               raft_term=int(st.get("raftTerm") or 0))
                    if st.get("leader") and st.get("leader") != "0":
                        leader_id = st["leader"]
                except SlackerError as exc:
                    row["error"] = exc.why or exc.what
            rows.append(row)
        for row in rows:
            # A member that is down cannot lead, whatever the others last heard (an election is under way).
            row["leader"] = row["id"] == leader_id and row["reachable"]
        up = sum(1 for r in rows if r["reachable"])
        leader = next((r["name"] for r in rows if r["leader"]), None)
        return out | {"healthy": bool(leader) and up > len(rows) // 2, "members": rows, "leader": leader,
                      "members_up": up}


# ---- etcd's own authentication (`slacker credential etcd-auth`) ----------------------------------

def etcd_users(prefix: str) -> dict[str, str]:
    """The etcd user each credential scope logs in as: admin is etcd's root (database hosts are
    trusted); router and monitor get users named after the prefix, so clusters sharing an etcd
    (other prefixes) keep apart."""
    base = prefix.strip("/").replace("/", "-")
    return {"admin": "root", "router": f"{base}-router", "monitor": f"{base}-monitor"}


def etcd_login(scope: str, token: str, prefix: str) -> tuple[str, str]:
    """(user, password) for the credential a host holds: the credential itself is the password."""
    return etcd_users(prefix)[scope], token


def setup_auth(store: "EtcdStore", passwords: dict[str, str]) -> list[str]:
    """Make (or bring up to date) etcd's users and roles for the prefix and turn authentication on.
    `passwords`: scope -> the credential to set as that user's password (the admin secret for root).
    Roles: the router reads the prefix and writes only its own `state/routers/` keys; the monitor
    reads the prefix. Idempotent; returns what it did, one line each."""
    gw, p = store.gw, store.prefix
    users = etcd_users(p)
    done = []

    def call(method: str, body: dict, ok_if: str = "") -> None:
        try:
            gw.call(method, body, idempotent=True)
        except SlackerError as exc:
            if not ok_if or ok_if not in exc.one_line():
                raise

    def user(name: str, password: str) -> None:
        try:
            gw.call("/auth/user/add", {"name": name, "password": password}, idempotent=True)
            done.append(f"added etcd user {name}")
        except SlackerError as exc:
            if "already exists" not in exc.one_line():
                raise
            gw.call("/auth/user/changepw", {"name": name, "password": password}, idempotent=True)
            done.append(f"set the password of etcd user {name}")

    whole = {"key": _b64(p + "/"), "range_end": _prefix_end(p + "/")}
    routers = p + "/state/routers/"
    user(users["admin"], passwords["admin"])
    call("/auth/user/grant", {"user": users["admin"], "role": "root"})
    for scope, perms in (("router", [{"permType": "READ", **whole},
                                     {"permType": "READWRITE", "key": _b64(routers), "range_end": _prefix_end(routers)}]),
                         ("monitor", [{"permType": "READ", **whole}])):
        role = users[scope]
        call("/auth/role/add", {"name": role}, ok_if="already exists")
        for perm in perms:
            call("/auth/role/grant", {"name": role, "perm": perm})
        user(users[scope], passwords[scope])
        call("/auth/user/grant", {"user": users[scope], "role": role})
        done.append(f"role {role}: " + ("read " + p + "/, write " + routers if scope == "router" else "read " + p + "/"))
    call("/auth/enable", {}, ok_if="already enabled")
    done.append("authentication enabled")
    return done
