"""Reconciliation of a node's idle tenants with the directory, the authority on ownership.

Run when the agent starts and on every supervisor tick (as Patroni checks the
leader key before acting as primary): a tenant the directory assigns to
another node is fenced; a fenced tenant the directory assigns here, with no
migration holding it, is unfenced; a retired one is stopped and removed.
Tenants held by a migration (running or being recovered from its journal) are
left to it. While the directory cannot be reached, nothing changes.
"""

from __future__ import annotations

import logging

from ..errors import AgentUnavailable, SlackerError

log = logging.getLogger("slacker.reconcile")


class Reconciler:
    def __init__(self, node) -> None:
        self.node = node

    def tick(self) -> None:
        busy = set(self.node.supervisor.busy)
        local = [t for t in self.node.tenants.list()
                 if t.id not in busy and t.info.desired_state != "incoming"]
        retired = [t for t in local if t.info.desired_state == "retired"]
        for t in retired:
            log.warning("tenant %s is retired: stopping it and removing its files", t.id)
            self.node.tenants.retire(t)
            self.node.supervisor.forget(t.id)
        local = [t for t in local if t.info.desired_state != "retired"]
        if not local:
            return
        try:
            owners = {o.tenant: o for o in self.node.directory.list()}
        except AgentUnavailable:
            return
        for t in local:
            own = owners.get(t.id)
            if own is None:
                continue  # not (or no longer) in the directory: created or deleted right now
            try:
                if own.node == self.node.name and t.info.fenced:
                    log.warning("tenant %s is fenced but the directory names this node: unfencing", t.id)
                    self.node.tenants.set_fenced(t, False)
                elif own.node != self.node.name and not t.info.fenced:
                    log.error("tenant %s runs writable here but the directory names %s: fencing it", t.id,
                              own.node)
                    self.node.tenants.set_fenced(t, True)
            except SlackerError as exc:
                log.warning("reconciling tenant %s: %s", t.id, exc.one_line())
