"""Reconciliation of a node's idle tenants with the directory, the authority on ownership.

Run when the agent starts and on every supervisor tick (as Patroni checks the
leader key before acting as primary): a tenant the directory assigns to
another node is fenced; a fenced tenant the directory assigns here, with no
migration holding it, is unfenced; a retired one is stopped and removed. A
shared tenant is fenced by itself: its accounts locked and sessions ended,
its record marked (a shared server's `read_only` would fence its neighbours).
Tenants held by a migration (running or being recovered from its journal) are
left to it. While the directory cannot be reached, nothing changes. Files in
the tenants directory that are no tenant (no tenant.json) are moved aside into
`tenants/.quarantine/`, never deleted, unless the directory names this node as
that tenant's owner: then they stay, and `slacker status` says so. A node's
shared tenants (hundreds to thousands) are checked against a view of every
owner that a thread keeps from the directory's change stream; the directory is
read for a discrepancy the view shows (confirmed before anything is fenced),
and for all of them while the stream is not fresh.
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import AgentUnavailable, SlackerError
from .kept import may_take_writes

log = logging.getLogger("slacker.reconcile")

FOLLOW_WAIT_S = 30.0  # the long poll on the directory's change stream


class OwnerFollower:
    """Every tenant's owner, followed on the directory's change stream (as a router follows it), so a tick over
    a thousand shared tenants need not read a thousand owners. `owners()` answers only while the stream is
    fresh (an answer, a change or the poll's timeout, within FOLLOW_WAIT_S and a margin); else None, and the
    caller reads the directory itself. What it answers is for finding a discrepancy, never for acting on one:
    the caller confirms each with a read of its own (the stream may be a moment behind a flip)."""

    def __init__(self, directory, wait_s: float = FOLLOW_WAIT_S) -> None:
        self.directory, self.wait_s = directory, wait_s
        self._owners: dict = {}
        self._revision: int | None = None
        self._fresh_at = float("-inf")
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="owner-follower", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                ch = self.directory.changes(self._revision, self.wait_s)
            except Exception as exc:  # noqa: BLE001 - the stream again from a snapshot; meanwhile no answers
                log.debug("following the directory's owners: %s", exc)
                with self._lock:
                    self._revision, self._fresh_at = None, float("-inf")
                time.sleep(1.0)
                continue
            with self._lock:
                if ch.reset:
                    self._owners = {o.tenant: o for o in ch.owners}
                else:
                    self._owners.update({o.tenant: o for o in ch.owners})
                    for t in ch.removed:
                        self._owners.pop(t, None)
                self._revision, self._fresh_at = ch.revision, time.monotonic()

    def owners(self, tenants) -> dict | None:
        with self._lock:
            if time.monotonic() - self._fresh_at > self.wait_s + 10:
                return None
            return {t: self._owners[t] for t in tenants if t in self._owners}


class Reconciler:
    def __init__(self, node) -> None:
        self.node = node
        self.follower = OwnerFollower(node.directory)
        # Unaccounted tenant directories of a tenant the directory places here: left for a person.
        self.blocked: dict[str, str] = {}

    def warnings(self) -> list[str]:
        """One line per leftover a person should look at (shown by `slacker status`)."""
        out = [f"files of no known tenant moved aside to {q['path']} ({q['bytes'] / 1e6:.0f} MB): nothing uses "
               "them; inspect them, then delete them" for q in self.node.tenants.quarantined()]
        return out + list(self.blocked.values())

    def unaccounted(self) -> None:
        """Move aside what a crash of an older agent left in the tenants directory (no tenant.json),
        so it blocks no later move of that tenant here; its data is kept."""
        found = self.node.tenants.unaccounted()
        self.blocked = {k: v for k, v in self.blocked.items() if k in {p.name for p in found}}
        if not found:
            return
        try:
            owners = {t: o.node for t, o in self.node.directory.owners(p.name for p in found).items()}
        except AgentUnavailable:
            return
        busy = set(self.node.supervisor.busy)
        for path in found:
            if path.name in busy:
                continue
            if owners.get(path.name) == self.node.name:
                if path.name not in self.blocked:
                    log.error("%s holds no tenant.json, but the directory names this node as the owner of %s: "
                              "left as it is", path, path.name)
                self.blocked[path.name] = (f"{path} holds no tenant.json but the directory names this node as "
                                           f"{path.name}'s owner: restore its tenant.json from a backup, or "
                                           "delete the tenant")
                continue
            try:
                dest = self.node.tenants.quarantine(path)
            except OSError as exc:
                log.warning("could not move %s aside: %s", path, exc)
                continue
            log.warning("%s held files of no known tenant: moved aside to %s (kept; delete it when not needed)",
                        path, dest)

    def tick(self) -> None:
        self.unaccounted()
        self.shared()
        busy = set(self.node.supervisor.busy)
        local = [t for t in self.node.tenants.list()
                 if t.id not in busy and t.info.desired_state != "incoming"]
        retired = [t for t in local if t.info.desired_state == "retired"]
        for t in retired:
            log.warning("tenant %s is retired: stopping it and removing its files", t.id)
            try:
                pending = self.node.tenants.retire(t)
                if pending is not None:
                    pending.finish()
            except (OSError, SlackerError) as exc:  # retried next tick; the fencing below must still run
                log.warning("could not remove retired tenant %s: %s", t.id,
                            exc.one_line() if isinstance(exc, SlackerError) else exc)
                continue
            self.node.supervisor.forget(t.id)
        local = [t for t in local if t.info.desired_state != "retired"]
        if not local:
            return
        # A fence persisted but maybe not applied (the agent died in between): fencing a running server as
        # its tenant.json says is always safe, so it is done at once; unfencing waits for the directory below.
        unsure = {t.id for t in local if t.id in self.node.tenants.fence_unsure}
        for t in local:
            if t.id in unsure and t.info.fenced:
                self._apply_fence(t)
        try:  # this node's tenants only: a tick costs the same in a fleet of ten or of ten thousand
            owners = self.node.directory.owners(t.id for t in local)
        except AgentUnavailable:
            return
        for t in local:
            own = owners.get(t.id)
            if own is None:
                continue  # not (or no longer) in the directory: created or deleted right now
            try:
                kept = t.info.extra.get("kept")
                if t.info.fenced and may_take_writes(kept, own.node, own.epoch, self.node.name):
                    log.warning("tenant %s is fenced but the directory names this node: unfencing", t.id)
                    if kept:  # an old copy a later flip gave back: its replication from the old owner goes first
                        self.node.migrations.kept.adopted(t)
                    self.node.tenants.set_fenced(t, False)
                elif own.node != self.node.name and not t.info.fenced:
                    log.error("tenant %s runs writable here but the directory names %s: fencing it", t.id,
                              own.node)
                    self.node.tenants.set_fenced(t, True)
                elif t.id in unsure and not t.info.fenced:
                    self._apply_fence(t)
            except SlackerError as exc:
                log.warning("reconciling tenant %s: %s", t.id, exc.one_line())

    def shared(self) -> None:
        """The node's shared tenants, each by itself (a shared server's `read_only` would fence every
        neighbour): one the directory names elsewhere is fenced by its own accounts (locked, sessions ended,
        the record marked); a fenced one the directory names here, with no move holding it, is unfenced."""
        manager = self.node.kinds.get("shared")
        if manager is None:
            return
        busy = set(self.node.supervisor.busy)
        local = [t.id for t in manager.list() if t.id not in busy]
        if not local:
            return
        fenced = set(manager.fenced_ids())
        self.follower.start()
        seen = self.follower.owners(local)
        here = self.node.name
        try:
            if seen is None:  # not following the stream right now: the directory itself
                owners = self.node.directory.owners(local)
            else:  # the stream's view finds the discrepancies; each is confirmed with a read of the directory
                odd = [t for t in local if t in seen and (seen[t].node != here) != (t in fenced)]
                owners = self.node.directory.owners(odd) if odd else {}
        except AgentUnavailable:
            return
        busy_now = self.node.supervisor.busy  # read live: a move that takes a tenant meanwhile is left alone
        for tid in local:
            own = owners.get(tid)
            if own is None or tid in busy_now:  # unknown, or a move took it meanwhile
                continue
            try:
                if own.node != self.node.name and tid not in fenced:
                    log.error("shared tenant %s is writable here but the directory names %s: fencing it", tid,
                              own.node)
                    manager.fence_here(tid)
                elif own.node == self.node.name and tid in fenced:
                    log.warning("shared tenant %s is fenced but the directory names this node: unfencing", tid)
                    manager.unfence_here(tid)
            except SlackerError as exc:
                log.warning("reconciling shared tenant %s: %s", tid, exc.one_line())

    def _apply_fence(self, t) -> None:
        try:
            if self.node.tenants.apply_fence(t):
                log.warning("tenant %s: its server was %s although its tenant.json says %s (an agent stopped "
                            "between the two): now %s", t.id, "writable" if t.info.fenced else "read-only",
                            "fenced" if t.info.fenced else "unfenced", "read-only" if t.info.fenced else "writable")
        except SlackerError as exc:
            log.warning("reconciling tenant %s: %s", t.id, exc.one_line())
