"""The embedded directory: one SQLite file inside the agent the cluster file names.

One process serves it (over the agent's HTTP API), so a condition variable
drives watch, and the lock is a row with an expiry time that is checked on
every access: a crashed holder's lock simply runs out.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import Conflict, NotFound, PortTaken
from .base import (SERVER_KIND, SHARED_KIND, DirectoryStore, LockInfo, Member, OwnerChanges, Ownership, check_kind,
                   check_member, check_state_value, validate_holder, validate_name, validate_ttl)


class SQLiteStore(DirectoryStore):
    """Directory on a SQLite file; one process serves it, so a condition variable drives watch."""

    CHANGES_KEPT = 10_000  # a follower further behind than this gets a snapshot

    def __init__(self, path: Path | str, clock: Callable[[], float] = time.time) -> None:
        # Wall-clock time: lock expiries are persisted and must survive an agent restart.
        self._clock = clock
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
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS locks (
                   name TEXT PRIMARY KEY,
                   holder TEXT NOT NULL,
                   ttl_s REAL NOT NULL,
                   acquired_at REAL NOT NULL,
                   expires_at REAL NOT NULL)"""
        )
        # Directories made before tenant kinds: every tenant in them is a whole server.
        if "kind" not in {r[1] for r in self._db.execute("PRAGMA table_info(ownership)")}:
            self._db.execute(f"ALTER TABLE ownership ADD COLUMN kind TEXT NOT NULL DEFAULT '{SERVER_KIND}'")
        # A node's shared server's port, claimed by its first shared tenant and kept by the node.
        self._db.execute("CREATE TABLE IF NOT EXISTS shared_ports (port INTEGER PRIMARY KEY, node TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS members (
                   name TEXT PRIMARY KEY,
                   url TEXT NOT NULL,
                   tenant_host TEXT NOT NULL,
                   protocol INTEGER NOT NULL,
                   registered_at REAL NOT NULL,
                   updated_at REAL NOT NULL)"""
        )
        # One row per change of ownership (register, compare-and-set, remove), so a follower of every
        # tenant asks "what changed since revision R"; only the newest CHANGES_KEPT rows are kept.
        self._db.execute("CREATE TABLE IF NOT EXISTS changes (rev INTEGER PRIMARY KEY AUTOINCREMENT, "
                         "tenant TEXT NOT NULL)")

    def _row(self, tenant: str) -> Ownership | None:
        r = self._db.execute("SELECT tenant,node,host,port,epoch,updated_at,kind FROM ownership WHERE tenant=?",
                             (tenant,)).fetchone()
        return Ownership(*r) if r else None

    def register(self, tenant: str, node: str, host: str, port: int, kind: str = SERVER_KIND) -> Ownership:
        check_kind(kind)
        with self._lock:
            if self._row(tenant) is not None:
                raise Conflict(f"tenant {tenant} already exists", "the directory has it",
                               "pick another id, or delete the tenant first")
            claim = self._db.execute("SELECT node FROM shared_ports WHERE port=?", (port,)).fetchone()
            # A shared tenant takes its node's shared server's port: no whole server's, no other node's.
            if kind == SHARED_KIND:
                row = self._db.execute("SELECT tenant FROM ownership WHERE port=? AND kind!=?",
                                       (port, SHARED_KIND)).fetchone()
            else:
                row = self._db.execute("SELECT tenant FROM ownership WHERE port=?", (port,)).fetchone()
            who = f"tenant {row[0]}" if row else None
            if who is None and claim is not None and (kind != SHARED_KIND or claim[0] != node):
                who = f"node {claim[0]}'s shared server"
            if who is not None:
                raise PortTaken(f"port {port} is taken", f"{who} uses it", "choose another port range or id")
            now = time.time()
            if kind == SHARED_KIND and claim is None:
                self._db.execute("INSERT INTO shared_ports VALUES (?,?)", (port, node))
            self._db.execute("INSERT INTO ownership (tenant,node,host,port,epoch,updated_at,kind) "
                             "VALUES (?,?,?,?,1,?,?)", (tenant, node, host, port, now, kind))
            self._log_change(tenant)
            return Ownership(tenant, node, host, port, 1, now, kind)

    def claim_shared_port(self, node: str, port: int) -> None:
        with self._lock:
            self._claim_shared_port(node, port)

    def _port_free(self, tenant: str, port: int) -> None:
        """Under the lock: PortTaken unless `port` is no other tenant's and no shared server's."""
        row = self._db.execute("SELECT tenant FROM ownership WHERE port=? AND tenant!=?", (port, tenant)).fetchone()
        claim = self._db.execute("SELECT node FROM shared_ports WHERE port=?", (port,)).fetchone()
        who = f"tenant {row[0]}" if row else f"node {claim[0]}'s shared server" if claim else None
        if who is not None:
            raise PortTaken(f"port {port} is taken", f"{who} uses it", "choose another port")

    def _claim_shared_port(self, node: str, port: int) -> None:
        """Under the lock."""
        claim = self._db.execute("SELECT node FROM shared_ports WHERE port=?", (port,)).fetchone()
        row = self._db.execute("SELECT tenant FROM ownership WHERE port=? AND kind!=?",
                               (port, SHARED_KIND)).fetchone()
        who = (f"tenant {row[0]}" if row else
               f"node {claim[0]}'s shared server" if claim is not None and claim[0] != node else None)
        if who is not None:
            raise PortTaken(f"port {port} is taken", f"{who} uses it", "choose another port range")
        if claim is None:
            self._db.execute("INSERT INTO shared_ports VALUES (?,?)", (port, node))

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
                "SELECT tenant,node,host,port,epoch,updated_at,kind FROM ownership ORDER BY tenant").fetchall()
        return [Ownership(*r) for r in rows]

    def compare_and_set(self, tenant: str, expected_epoch: int, node: str, host: str, port: int,
                        kind: str | None = None) -> Ownership:
        with self._lock:
            now = time.time()
            row = self._row(tenant)
            if row is not None and row.epoch == expected_epoch:
                kind = check_kind(kind) if kind else row.kind
                if kind == SHARED_KIND and (port != row.port or row.kind != SHARED_KIND):
                    self._claim_shared_port(node, port)  # the new node's shared server's port, never a whole server's
                elif kind != SHARED_KIND and row.kind == SHARED_KIND:  # given a server of its own: its own port
                    self._port_free(tenant, port)
            else:
                kind = kind or (row.kind if row is not None else SERVER_KIND)
            cur = self._db.execute(
                "UPDATE ownership SET node=?, host=?, port=?, epoch=epoch+1, updated_at=?, kind=? "
                "WHERE tenant=? AND epoch=?", (node, host, port, now, kind, tenant, expected_epoch))
            if cur.rowcount != 1:
                row = self._row(tenant)
                if row is None:
                    raise NotFound(f"tenant {tenant} not found", "the directory does not know it", "")
                raise Conflict(f"ownership of {tenant} changed underneath",
                               f"expected epoch {expected_epoch}, directory has {row.epoch}",
                               "re-read the tenant and retry")
            self._log_change(tenant)
            return Ownership(tenant, node, host, port, expected_epoch + 1, now, self._row(tenant).kind)

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
            self._log_change(tenant)

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

    # ---- members ------------------------------------------------------------------------
    def put_member(self, member: Member) -> Member:
        check_member(member)
        with self._lock:
            now = time.time()
            r = self._db.execute("SELECT registered_at FROM members WHERE name=?", (member.name,)).fetchone()
            m = Member(member.name, member.url.rstrip("/"), member.tenant_host, member.protocol,
                       r[0] if r else now, now)
            self._db.execute("INSERT OR REPLACE INTO members VALUES (?,?,?,?,?,?)",
                             (m.name, m.url, m.tenant_host, m.protocol, m.registered_at, m.updated_at))
            return m

    def members(self) -> list[Member]:
        with self._lock:
            rows = self._db.execute("SELECT name,url,tenant_host,protocol,registered_at,updated_at FROM members "
                                    "ORDER BY name").fetchall()
        return [Member(*r) for r in rows]

    def remove_member(self, name: str) -> bool:
        validate_name(name, "node name")
        with self._lock:
            return self._db.execute("DELETE FROM members WHERE name=?", (name,)).rowcount == 1

    # ---- every tenant as one stream of changes ------------------------------------------------
    def _log_change(self, tenant: str) -> None:
        """Called with the lock held, after the ownership row changed."""
        rev = self._db.execute("INSERT INTO changes (tenant) VALUES (?)", (tenant,)).lastrowid
        if rev % 1000 == 0:
            self._db.execute("DELETE FROM changes WHERE rev <= ?", (rev - self.CHANGES_KEPT,))
        self._changed.notify_all()

    def _revision(self) -> tuple[int, int]:
        """The newest change's revision, and the oldest one still kept (0, 0 with none)."""
        lo, hi = self._db.execute("SELECT MIN(rev), MAX(rev) FROM changes").fetchone()
        if hi is None:  # nothing kept: AUTOINCREMENT still knows the last revision handed out
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='changes'").fetchone()
            hi = row[0] if row else 0
            lo = hi + 1
        return int(hi), int(lo)

    def changes(self, since: int | None, timeout_s: float) -> OwnerChanges:
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            while True:
                newest, oldest = self._revision()
                if since is None or since > newest or since < oldest - 1:
                    rows = self._db.execute(
                        "SELECT tenant,node,host,port,epoch,updated_at,kind FROM ownership ORDER BY tenant").fetchall()
                    return OwnerChanges(newest, True, tuple(Ownership(*r) for r in rows))
                if newest > since:
                    tenants = [t for (t,) in self._db.execute(
                        "SELECT DISTINCT tenant FROM changes WHERE rev > ? ORDER BY tenant", (since,))]
                    owners, removed = [], []
                    for t in tenants:
                        row = self._row(t)
                        (owners.append(row) if row is not None else removed.append(t))
                    return OwnerChanges(newest, False, tuple(owners), tuple(removed))
                left = deadline - time.monotonic()
                if left <= 0:
                    return OwnerChanges(since, False)
                self._changed.wait(left)

    # ---- the lock: a row whose expiry is checked on every access --------------------------
    def _live_lock(self, name: str, now: float) -> tuple | None:
        r = self._db.execute("SELECT holder, ttl_s, acquired_at, expires_at FROM locks WHERE name=?",
                             (name,)).fetchone()
        if r is None:
            return None
        if r[3] <= now:  # the holder stopped refreshing: its lock is gone
            self._db.execute("DELETE FROM locks WHERE name=? AND expires_at<=?", (name, now))
            return None
        return r

    @staticmethod
    def _info(name: str, r: tuple, now: float) -> LockInfo:
        return LockInfo(name=name, holder=r[0], ttl_s=r[1], expires_in_s=min(r[1], max(0.0, r[3] - now)),
                        acquired_at=r[2])

    def acquire_lock(self, name: str, holder: str, ttl_s: float) -> LockInfo:
        validate_name(name)
        validate_holder(holder)
        ttl_s = validate_ttl(ttl_s)
        with self._lock:
            now = self._clock()
            cur = self._live_lock(name, now)
            if cur is not None and cur[0] != holder:
                raise Conflict(f"lock {name} is held by {cur[0]}", f"for {cur[3] - now:.1f}s more unless refreshed",
                               "wait for it to be released or to expire")
            acquired_at = cur[2] if cur is not None else now
            self._db.execute("INSERT OR REPLACE INTO locks VALUES (?,?,?,?,?)",
                             (name, holder, ttl_s, acquired_at, now + ttl_s))
            return LockInfo(name, holder, ttl_s, ttl_s, acquired_at)

    def refresh_lock(self, name: str, holder: str) -> LockInfo:
        validate_name(name)
        with self._lock:
            now = self._clock()
            cur = self._live_lock(name, now)
            if cur is None or cur[0] != holder:
                raise Conflict(f"lock {name} is not held by {holder}",
                               "it expired" if cur is None else f"{cur[0]} holds it now",
                               "stop what needed the lock; acquire it again")
            self._db.execute("UPDATE locks SET expires_at=? WHERE name=?", (now + cur[1], name))
            return LockInfo(name, holder, cur[1], cur[1], cur[2])

    def release_lock(self, name: str, holder: str) -> bool:
        validate_name(name)
        with self._lock:
            cur = self._live_lock(name, self._clock())
            if cur is None or cur[0] != holder:
                return False
            self._db.execute("DELETE FROM locks WHERE name=? AND holder=?", (name, holder))
            return True

    def lock_info(self, name: str) -> LockInfo | None:
        validate_name(name)
        with self._lock:
            now = self._clock()
            cur = self._live_lock(name, now)
            return self._info(name, cur, now) if cur is not None else None

    # ---- small JSON state -------------------------------------------------------------
    def state_get(self, key: str) -> dict | None:
        validate_name(key, "state key")
        with self._lock:
            r = self._db.execute("SELECT value FROM state WHERE key=?", (key,)).fetchone()
        return json.loads(r[0]) if r else None

    def state_put(self, key: str, value: dict) -> None:
        raw = check_state_value(key, value)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO state VALUES (?,?)", (key, raw.decode()))

    def state_delete(self, key: str) -> bool:
        validate_name(key, "state key")
        with self._lock:
            return self._db.execute("DELETE FROM state WHERE key=?", (key,)).rowcount == 1

    def state_list(self, prefix: str = "") -> dict[str, dict]:
        with self._lock:
            rows = self._db.execute("SELECT key, value FROM state WHERE substr(key, 1, ?) = ? ORDER BY key",
                                    (len(prefix), prefix)).fetchall()
        return {k: json.loads(v) for k, v in rows}

    def health(self) -> dict:
        try:
            with self._lock:
                n = self._db.execute("SELECT count(*) FROM ownership").fetchone()[0]
            return {"backend": "sqlite", "healthy": True, "path": self.path, "tenants": n}
        except Exception as exc:  # health never raises
            return {"backend": "sqlite", "healthy": False, "path": self.path, "error": str(exc)}

    def close(self) -> None:
        with self._lock:
            self._db.close()
