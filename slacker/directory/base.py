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

from ..errors import InvalidInput

# Lock names and state keys: path-like, safe in a URL path and as an etcd key suffix.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}(/[a-z0-9][a-z0-9._-]{0,63}){0,7}$")
MAX_HOLDER_LEN = 200
MAX_VALUE_BYTES = 64 * 1024
MIN_LOCK_TTL_S = 1.0
MAX_LOCK_TTL_S = 24 * 3600.0
CORDON_PREFIX = "nodes/cordon/"  # state key of a cordoned node: nodes/cordon/<node>


@dataclass(frozen=True)
class Ownership:
    """Who serves a tenant: the owner node, the address clients connect to, and the epoch."""

    tenant: str
    node: str
    host: str
    port: int
    epoch: int
    updated_at: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Ownership":
        return cls(tenant=d["tenant"], node=d["node"], host=d["host"], port=int(d["port"]),
                   epoch=int(d["epoch"]), updated_at=float(d.get("updated_at", 0.0)))


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

    # ---- ownership -----------------------------------------------------------------
    @abstractmethod
    def register(self, tenant: str, node: str, host: str, port: int) -> Ownership:
        """Add a tenant at epoch 1; Conflict if the id or its port is taken."""

    @abstractmethod
    def lookup(self, tenant: str) -> Ownership:
        """Current owner; NotFound if unknown."""

    @abstractmethod
    def list(self) -> list[Ownership]:
        """All tenants."""

    @abstractmethod
    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int) -> Ownership:
        """Move ownership and bump the epoch by one, only if the epoch is still `expected_epoch`."""

    @abstractmethod
    def remove(self, tenant: str, expected_epoch: int | None = None) -> None:
        """Forget a tenant (optionally only at a given epoch)."""

    @abstractmethod
    def watch(self, tenant: str, after_epoch: int, timeout_s: float) -> Ownership | None:
        """Block until the tenant's epoch exceeds `after_epoch` (returns it), or the timeout (None).
        NotFound if the tenant is removed."""

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
