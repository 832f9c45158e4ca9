"""The directory: the authority on which node owns which tenant, with an epoch per tenant.

`DirectoryStore` is the small interface a store must implement (register,
lookup, list, compare-and-set, remove, watch). `SQLiteStore` is the embedded
default, served over HTTP by the agent the cluster file names as directory; a
distributed store can replace it by implementing the same five methods.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import Conflict, NotFound


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


class DirectoryStore(ABC):
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


class SQLiteStore(DirectoryStore):
    """Directory on a SQLite file; one process serves it, so a condition variable drives watch."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS ownership (
                   tenant TEXT PRIMARY KEY,
                   node TEXT NOT NULL,
                   host TEXT NOT NULL,
                   port INTEGER NOT NULL,
                   epoch INTEGER NOT NULL,
                   updated_at REAL NOT NULL)"""
        )

    def _row(self, tenant: str) -> Ownership | None:
        r = self._db.execute("SELECT tenant,node,host,port,epoch,updated_at FROM ownership WHERE tenant=?",
                             (tenant,)).fetchone()
        return Ownership(*r) if r else None

    def register(self, tenant: str, node: str, host: str, port: int) -> Ownership:
        with self._lock:
            if self._row(tenant) is not None:
                raise Conflict(f"tenant {tenant} already exists", "the directory has it",
                               "pick another id, or delete the tenant first")
            clash = self._db.execute("SELECT tenant FROM ownership WHERE port=?", (port,)).fetchone()
            if clash:
                raise Conflict(f"port {port} is taken", f"tenant {clash[0]} uses it",
                               "choose another port range or id")
            now = time.time()
            self._db.execute("INSERT INTO ownership VALUES (?,?,?,?,1,?)", (tenant, node, host, port, now))
            self._changed.notify_all()
            return Ownership(tenant, node, host, port, 1, now)

    def lookup(self, tenant: str) -> Ownership:
        with self._lock:
            row = self._row(tenant)
        if row is None:
            raise NotFound(f"tenant {tenant} not found", "the directory does not know it",
                           "see `slacker tenant list`")
        return row

    def list(self) -> list[Ownership]:
        with self._lock:
            rows = self._db.execute(
                "SELECT tenant,node,host,port,epoch,updated_at FROM ownership ORDER BY tenant").fetchall()
        return [Ownership(*r) for r in rows]

    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int) -> Ownership:
        with self._lock:
            now = time.time()
            cur = self._db.execute(
                "UPDATE ownership SET node=?, host=?, port=?, epoch=epoch+1, updated_at=? "
                "WHERE tenant=? AND epoch=?", (node, host, port, now, tenant, expected_epoch))
            if cur.rowcount != 1:
                row = self._row(tenant)
                if row is None:
                    raise NotFound(f"tenant {tenant} not found", "the directory does not know it", "")
                raise Conflict(f"ownership of {tenant} changed underneath",
                               f"expected epoch {expected_epoch}, directory has {row.epoch}",
                               "re-read the tenant and retry")
            self._changed.notify_all()
            return Ownership(tenant, node, host, port, expected_epoch + 1, now)

    def remove(self, tenant: str, expected_epoch: int | None = None) -> None:
        with self._lock:
            if expected_epoch is None:
                cur = self._db.execute("DELETE FROM ownership WHERE tenant=?", (tenant,))
            else:
                cur = self._db.execute("DELETE FROM ownership WHERE tenant=? AND epoch=?", (tenant, expected_epoch))
            if cur.rowcount != 1:
                if self._row(tenant) is None:
                    raise NotFound(f"tenant {tenant} not found", "the directory does not know it", "")
                raise Conflict(f"tenant {tenant} changed underneath", "its epoch moved", "retry")
            self._changed.notify_all()

    def watch(self, tenant: str, after_epoch: int, timeout_s: float) -> Ownership | None:
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            while True:
                row = self._row(tenant)
                if row is None:
                    raise NotFound(f"tenant {tenant} not found", "the directory does not know it", "")
                if row.epoch > after_epoch:
                    return row
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)

    def close(self) -> None:
        with self._lock:
            self._db.close()
