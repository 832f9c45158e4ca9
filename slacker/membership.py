"""The fleet's membership in the directory: joining (an agent at its start, `slacker node add`) and leaving.

A join is an upsert that refuses to clobber: a name whose tenants are recorded
at another host keeps them, and a second live agent cannot take a name. A leave
refuses a node that still owns tenants or takes part in a running migration.
"""

from __future__ import annotations

import time

from .directory import DirectoryStore, Member
from .directory.base import CORDON_PREFIX, REMOVED_PREFIX
from .errors import Conflict, SlackerError


def owned_by(directory: DirectoryStore, name: str) -> list[str]:
    return sorted(o.tenant for o in directory.list() if o.node == name)


def join(directory: DirectoryStore, member: Member) -> Member:
    """Register `member` (or update its record). Refused when the node's tenants are registered at
    another tenant host than the one given: they would become unreachable by their recorded address."""
    old = directory.member(member.name)
    if old is not None and old.tenant_host != member.tenant_host:
        owned = owned_by(directory, member.name)
        if owned:
            raise Conflict(f"node {member.name} cannot re-register with tenant host {member.tenant_host}",
                           f"its {len(owned)} tenant(s) ({_few(owned)}) are registered at {old.tenant_host}",
                           f"set tenant_host = \"{old.tenant_host}\" in its agent config, or drain it first")
    stored = directory.put_member(member)
    directory.state_delete(REMOVED_PREFIX + member.name)  # joining again undoes an earlier `node remove`
    return stored


def running_migrations(agents, name: str) -> list[str]:
    """Active migrations from or to `name`, as the reachable agents report them (ids)."""
    found: set[str] = set()
    for agent_name in list(agents):
        try:
            migs = agents[agent_name].request("GET", "/v1/migrations", timeout_s=10).get("migrations", [])
        except SlackerError:
            continue
        for m in migs:
            if m.get("direction") == "incoming":  # a target's side: it involves the agent that reports it
                if agent_name == name and m.get("state") not in ("owned", "aborted"):
                    found.add(str(m.get("id")))
            elif m.get("active") and name in (m.get("source"), m.get("target")):
                found.add(str(m.get("id")))
    return sorted(found)


def leave(directory: DirectoryStore, agents, name: str, seeded: bool = False) -> bool:
    """Take node `name` out of the fleet: refused (Conflict) while it owns tenants or a migration from or to
    it runs. Its cordon is lifted, and a cluster file's [[nodes]] seed of that name is ignored from then on.
    True if it was a member (or a seed), False if there was nothing to remove."""
    owned = owned_by(directory, name)
    if owned:
        raise Conflict(f"node {name} still owns {len(owned)} tenant(s) ({_few(owned)})",
                       "removing it would leave them without a reachable owner",
                       f"`slacker node drain {name}` first, then remove it")
    running = running_migrations(agents, name)
    if running:
        raise Conflict(f"node {name} takes part in {len(running)} running migration(s) ({_few(running)})",
                       "removing it would cut them off", "wait for them to end (`slacker status`), then remove it")
    was = directory.remove_member(name)
    if was or seeded:
        directory.state_put(REMOVED_PREFIX + name, {"node": name, "removed_at": time.time()})
    directory.state_delete(CORDON_PREFIX + name)
    return was or seeded


def _few(names: list[str], n: int = 3) -> str:
    return ", ".join(names[:n]) + (f", +{len(names) - n} more" if len(names) > n else "")
