"""What a directory store must do: ownership with epochs, an expiring exclusive lock, small JSON state.

Every backend (SQLite inside one agent, etcd for many hosts, the HTTP client of
an agent that serves one) implements `DirectoryStore`, so callers never know
which one they talk to.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Iterable

from ..errors import InvalidInput

# Lock names and state keys: path-like, safe in a URL path and as an etcd key suffix.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}(/[a-z0-9][a-z0-9._-]{0,63}){0,7}$")
MAX_HOLDER_LEN = 200
MAX_VALUE_BYTES = 64 * 1024
MIN_LOCK_TTL_S = 1.0
MAX_LOCK_TTL_S = 24 * 3600.0
CORDON_PREFIX = "nodes/cordon/"  # state key of a cordoned node: nodes/cordon/<node>
REMOVED_PREFIX = "nodes/removed/"  # state key of a node `slacker node remove` took out: nodes/removed/<node>


SERVER_KIND = "server"  # slacker.kinds.DEFAULT_KIND: a record without a kind, from before kinds, is a whole server
SHARED_KIND = "shared"  # slacker.kinds.Shared: tenants of one node's shared server share its port


@dataclass(frozen=True)
class Ownership:
    """Who serves a tenant: the owner node, the address clients connect to, the epoch, and the tenant's
    kind (slacker/kinds/: "server", a whole mariadbd; "shared", a database in the node's shared server)."""

    tenant: str
    node: str
    host: str
    port: int
    epoch: int
    updated_at: float
    kind: str = SERVER_KIND

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Ownership":
        return cls(tenant=d["tenant"], node=d["node"], host=d["host"], port=int(d["port"]),
                   epoch=int(d["epoch"]), updated_at=float(d.get("updated_at", 0.0)),
                   kind=str(d.get("kind") or SERVER_KIND))


def check_kind(kind: str) -> str:
    if kind not in (SERVER_KIND, SHARED_KIND):
        raise InvalidInput(f"unknown tenant kind {kind!r}", f"the kinds are {SERVER_KIND}, {SHARED_KIND}", "")
    return kind


@dataclass(frozen=True)
class Member:
    """A node of the fleet as registered in the directory: its agent's URL, where its tenants listen,
    the agent protocol it speaks, and when it first registered (UTC seconds; kept across re-registrations)."""

    name: str
    url: str
    tenant_host: str
    protocol: int = 0
    registered_at: float = 0.0
    updated_at: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Member":
        return cls(name=str(d["name"]), url=str(d["url"]).rstrip("/"), tenant_host=str(d["tenant_host"]),
                   protocol=int(d.get("protocol") or 0), registered_at=float(d.get("registered_at") or 0.0),
                   updated_at=float(d.get("updated_at") or 0.0))


def check_member(m: Member) -> Member:
    """Validate a member record at the edge (names like node names, an http(s) URL, a host)."""
    from urllib.parse import urlparse

    validate_name(m.name, "node name")
    if "/" in m.name:
        raise InvalidInput(f"invalid node name {m.name!r}", "a node name has no '/'", "for example node-4")
    u = urlparse(m.url)
    if u.scheme not in ("http", "https") or not u.hostname or not u.port:
        raise InvalidInput(f"node {m.name}: bad agent url {m.url!r}", "expected http(s)://HOST:PORT",
                           "for example https://db4.example.net:7000")
    if not m.tenant_host or len(m.tenant_host) > 253 or any(c.isspace() or c in "/@[]" for c in m.tenant_host):
        raise InvalidInput(f"node {m.name}: bad tenant host {m.tenant_host!r}", "expected a host name or address",
                           "the address clients reach its tenants at, e.g. 10.0.0.4")
    if isinstance(m.protocol, bool) or not isinstance(m.protocol, int) or m.protocol < 0:
        raise InvalidInput(f"node {m.name}: bad protocol version {m.protocol!r}", "expected a whole number", "")
    return m


@dataclass(frozen=True)
class OwnerChanges:
    """What changed among all tenants since a revision (`DirectoryStore.changes`).

    `reset`: the store could not say what changed since the revision asked for (first call,
    history compacted or trimmed, a different store), so `owners` is every tenant and a follower
    forgets any tenant not in it. Otherwise `owners` holds the tenants created or moved (their
    state now) and `removed` the tenants gone. `revision` is what to pass as `since` next."""

    revision: int
    reset: bool
    owners: tuple[Ownership, ...] = ()
    removed: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"revision": self.revision, "reset": self.reset, "owners": [o.to_dict() for o in self.owners],
                "removed": list(self.removed)}

    @classmethod
    def from_dict(cls, d: dict) -> "OwnerChanges":
        return cls(revision=int(d["revision"]), reset=bool(d["reset"]),
                   owners=tuple(Ownership.from_dict(o) for o in d.get("owners", [])),
                   removed=tuple(str(t) for t in d.get("removed", [])))


@dataclass(frozen=True)
class Cordon:
    """A node that receives no tenant (from `tenant create`, the rebalancer or a drain) until uncordoned."""

    node: str
    since: float          # UTC seconds
    by: str = ""          # who cordoned it (HOST:PID, or a user's note)
    reason: str = ""      # why: "drain", "maintenance", ...

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Cordon":
        return cls(node=str(d["node"]), since=float(d.get("since", 0.0)), by=str(d.get("by", "")),
                   reason=str(d.get("reason", "")))


@dataclass(frozen=True)
class LockInfo:
    """An exclusive lock as held right now. `expires_in_s` is relative, so clocks of hosts need not agree."""

    name: str
    holder: str
    ttl_s: float
    expires_in_s: float
    acquired_at: float  # UTC seconds, for display only

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LockInfo":
        return cls(name=str(d["name"]), holder=str(d["holder"]), ttl_s=float(d["ttl_s"]),
                   expires_in_s=float(d["expires_in_s"]), acquired_at=float(d.get("acquired_at", 0.0)))


def validate_name(name: str, what: str = "lock name") -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidInput(f"invalid {what} {name!r}",
                           "use lowercase letters, digits, '.', '_', '-', and '/' between parts",
                           "for example rebalance or cooldown/tenant/t1")
    return name


def validate_holder(holder: str) -> str:
    if not isinstance(holder, str) or not holder.strip() or len(holder) > MAX_HOLDER_LEN \
            or any(ord(c) < 32 for c in holder):
        raise InvalidInput(f"invalid lock holder {holder!r}", f"a holder is 1 to {MAX_HOLDER_LEN} printable characters",
                           "for example HOST:PID")
    return holder


def validate_ttl(ttl_s: float) -> float:
    try:
        ttl = float(ttl_s)
    except (TypeError, ValueError):
        raise InvalidInput(f"invalid lock TTL {ttl_s!r}", "expected seconds", "") from None
    if not MIN_LOCK_TTL_S <= ttl <= MAX_LOCK_TTL_S:
        raise InvalidInput(f"lock TTL {ttl:g}s is out of range",
                           f"it must be {MIN_LOCK_TTL_S:g}s to {MAX_LOCK_TTL_S:g}s", "")
    return ttl


class DirectoryStore(ABC):
    """The directory contract. Errors are SlackerErrors: NotFound, Conflict, InvalidInput, and
    AgentUnavailable (or its DirectoryUnavailable) when the store cannot be reached; after that
    last one a write's outcome is unknown and the caller must read to find out."""

    def warm(self) -> None:
        """Open the connections a call will use, before a moment that must not wait on a handshake (the
        freeze); a store reached without one has nothing to do."""

    # ---- ownership -----------------------------------------------------------------
    @abstractmethod
    def register(self, tenant: str, node: str, host: str, port: int, kind: str = SERVER_KIND) -> Ownership:
        """Add a tenant of `kind` at epoch 1; Conflict if the id is taken, PortTaken if its port is. A whole
        server's port is its own in the fleet; a shared tenant's is its node's shared server's: shared with
        that node's other shared tenants, and kept by the node (taken for whole servers) once claimed."""

    @abstractmethod
    def claim_shared_port(self, node: str, port: int) -> None:
        """Claim `port` for `node`'s shared server before it holds a tenant (a shared tenant moving in to a
        node without one): kept by the node as a first shared tenant's registration keeps it. Idempotent for
        that node; PortTaken if a whole server or another node's shared server uses it."""

    @abstractmethod
    def lookup(self, tenant: str) -> Ownership:
        """Current owner; NotFound if unknown."""

    @abstractmethod
    def list(self) -> list[Ownership]:
        """All tenants."""

    def owners(self, tenants: Iterable[str]) -> dict[str, Ownership]:
        """The owners of `tenants` the directory knows (unknown ones left out). An agent asks this for its own
        tenants on every tick: a store whose list() grows with the fleet answers it with reads of those keys."""
        wanted = set(tenants)
        return {o.tenant: o for o in self.list() if o.tenant in wanted} if wanted else {}

    @abstractmethod
    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int,
                        kind: str | None = None) -> Ownership:
        """Move ownership and bump the epoch by one, only if the epoch is still `expected_epoch`. `kind`: the
        tenant's kind after the move when it changes (a whole server packed into a shared server, or a shared
        tenant given a server of its own); the port index follows: a shared server's port is its node's claim,
        a whole server's is the tenant's own."""

    @abstractmethod
    def remove(self, tenant: str, expected_epoch: int | None = None) -> None:
        """Forget a tenant (optionally only at a given epoch)."""

    @abstractmethod
    def watch(self, tenant: str, after_epoch: int, timeout_s: float) -> Ownership | None:
        """Block until the tenant's epoch exceeds `after_epoch` (returns it), or the timeout (None).
        NotFound if the tenant is removed."""

    # ---- members (the fleet's nodes) --------------------------------------------------------
    @abstractmethod
    def put_member(self, member: Member) -> Member:
        """Register `member`, or update the record of that name. A re-registration keeps the first
        `registered_at`; `updated_at` is now. Returns the record as stored."""

    @abstractmethod
    def members(self) -> list[Member]:
        """Every registered node, by name (one read)."""

    @abstractmethod
    def remove_member(self, name: str) -> bool:
        """Forget node `name`; False if it was not registered."""

    def member(self, name: str) -> Member | None:
        """One node's record, or None."""
        return next((m for m in self.members() if m.name == name), None)

    def removed_members(self) -> set[str]:
        """Nodes `slacker node remove` took out (a cluster file's [[nodes]] seed of that name is ignored)."""
        return {k[len(REMOVED_PREFIX):] for k in self.state_list(REMOVED_PREFIX)}

    @abstractmethod
    def changes(self, since: int | None, timeout_s: float) -> OwnerChanges:
        """Every tenant's ownership as one stream: `since=None` gives a snapshot (reset) at once;
        otherwise block until some tenant is created, moved or removed after revision `since` and
        return those changes, or an empty change at `since` after the timeout. A follower of all
        tenants (a router) costs the store one request per change or timeout, whatever their number."""

    # ---- the exclusive, expiring lock ---------------------------------------------------
    @abstractmethod
    def acquire_lock(self, name: str, holder: str, ttl_s: float) -> LockInfo:
        """Take lock `name` for `holder` for `ttl_s` seconds. Conflict if someone else holds it.
        Acquiring a lock one already holds refreshes it. A holder that stops refreshing loses
        the lock when the TTL runs out (a backend may round the TTL up, e.g. etcd to whole seconds)."""

    @abstractmethod
    def refresh_lock(self, name: str, holder: str) -> LockInfo:
        """Extend the lock by its TTL; Conflict if `holder` no longer holds it (it expired or was taken)."""

    @abstractmethod
    def release_lock(self, name: str, holder: str) -> bool:
        """Give the lock up; False (and nothing changes) if `holder` does not hold it."""

    @abstractmethod
    def lock_info(self, name: str) -> LockInfo | None:
        """Who holds the lock and for how long yet; None if nobody does."""

    # ---- small JSON state (cool-downs and the like) --------------------------------------
    @abstractmethod
    def state_get(self, key: str) -> dict | None:
        """The JSON object stored under `key`, or None."""

    @abstractmethod
    def state_put(self, key: str, value: dict) -> None:
        """Store a JSON object under `key` (last writer wins)."""

    @abstractmethod
    def state_delete(self, key: str) -> bool:
        """Remove `key`; False if it was not there."""

    @abstractmethod
    def state_list(self, prefix: str = "") -> dict[str, dict]:
        """All keys that start with `prefix` and their objects."""

    # ---- cordons (built on the state, so every backend and the HTTP client share them) ----------
    def cordon(self, node: str, by: str = "", reason: str = "") -> Cordon:
        """Mark `node` as receiving no tenant. Cordoning a cordoned node keeps its first record."""
        key = CORDON_PREFIX + validate_name(node, "node name")
        old = self.state_get(key)
        if old is not None:
            return Cordon.from_dict(old)
        c = Cordon(node, time.time(), by[:MAX_HOLDER_LEN], reason[:MAX_HOLDER_LEN])
        self.state_put(key, c.to_dict())
        return c

    def uncordon(self, node: str) -> bool:
        """Let `node` receive tenants again; False if it was not cordoned."""
        return self.state_delete(CORDON_PREFIX + validate_name(node, "node name"))

    def cordons(self) -> dict[str, Cordon]:
        """Every cordoned node and its record."""
        out = {}
        for value in self.state_list(CORDON_PREFIX).values():
            try:
                c = Cordon.from_dict(value)
            except (KeyError, TypeError, ValueError):
                continue
            out[c.node] = c
        return out

    # ---- health ------------------------------------------------------------------------
    def health(self) -> dict:
        """What the store looks like from here: backend, members, leader. Never raises."""
        return {"backend": type(self).__name__, "healthy": True}


def check_state_value(key: str, value) -> bytes:
    """Validate a state key and its JSON object; returns the encoded value."""
    import json

    validate_name(key, "state key")
    if not isinstance(value, dict):
        raise InvalidInput(f"state {key} must be a JSON object", f"got {type(value).__name__}", "")
    raw = json.dumps(value, sort_keys=True).encode()
    if len(raw) > MAX_VALUE_BYTES:
        raise InvalidInput(f"state {key} is too large", f"{len(raw)} bytes, at most {MAX_VALUE_BYTES}", "")
    return raw
