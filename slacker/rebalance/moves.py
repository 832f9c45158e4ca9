"""Moves in flight: the one place that starts live migrations for the fleet commands and follows them.

A drain asks it whether a move may start now (`may_start`), starts it, adopts
migrations an earlier run left running on the agents, and polls them all in one
loop. Today the limit is a count (`--max-parallel`); a per-node latency budget
shared by a node's concurrent moves belongs here too, behind `may_start`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..errors import AgentUnavailable, NotFound, SlackerError
from ..migration.remote import start_migration

log = logging.getLogger("slacker.rebalance")

LOST_AFTER_S = 120.0  # a source agent that has not answered for this long: the move's outcome is read elsewhere


@dataclass
class Running:
    tenant: str
    source: str
    target: str
    mid: str
    doc: dict
    started_at: float = field(default_factory=time.monotonic)
    adopted: bool = False                # started by an earlier run, followed by this one
    unreachable_since: float | None = None
    lost: str = ""                       # the source agent forgot it (restarted) or stopped answering

    @property
    def active(self) -> bool:
        return bool(self.doc.get("active")) and not self.lost


class MoveRunner:
    def __init__(self, agents: dict, max_parallel: int = 2) -> None:
        self.agents = agents
        self.max_parallel = max_parallel
        self.running: dict[str, Running] = {}

    def may_start(self, source: str, target: str, pending: int = 0) -> bool:
        """Whether one more move from `source` to `target` may start now, `pending` more being about to."""
        return len(self.running) + pending < self.max_parallel

    def start(self, tenant: str, source: str, target: str, body: dict) -> Running:
        doc = start_migration(self.agents[source], body)
        r = Running(tenant, source, target, doc["id"], doc)
        self.running[tenant] = r
        return r

    def start_all(self, moves: list[tuple[str, str, str, dict]]) -> dict[str, Running | SlackerError]:
        """Start several moves at once (tenant, source, target, body): a start measures the source's
        latency for a few seconds before it answers, and moves started one after another would lose that
        time each. Returns tenant -> its Running, or the error that refused it."""
        out: dict[str, Running | SlackerError] = {}

        def one(tenant: str, source: str, target: str, body: dict) -> None:
            try:
                out[tenant] = self.start(tenant, source, target, body)
            except SlackerError as exc:
                out[tenant] = exc

        threads = [threading.Thread(target=one, args=m, daemon=True, name=f"start-{m[0]}") for m in moves]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def adopt(self, source: str, doc: dict) -> Running:
        r = Running(str(doc["tenant"]), source, str(doc.get("target")), str(doc["id"]), doc, adopted=True)
        self.running[r.tenant] = r
        return r

    def poll(self) -> list[Running]:
        """Read every running move's document; the ones that ended leave the runner and are returned."""
        ended = []
        for r in list(self.running.values()):
            try:
                r.doc = self.agents[r.source].request("GET", f"/v1/migrations/{r.mid}", timeout_s=10)
                r.unreachable_since = None
            except NotFound:
                r.lost = f"{r.source}'s agent no longer knows migration {r.mid} (it restarted)"
            except AgentUnavailable as exc:
                # An agent restarting: keep following; only a long silence ends the watch.
                now = time.monotonic()
                r.unreachable_since = r.unreachable_since or now
                if now - r.unreachable_since > LOST_AFTER_S:
                    r.lost = f"{r.source}'s agent has not answered for {LOST_AFTER_S:.0f}s: {exc.one_line()}"
            except SlackerError as exc:
                log.warning("following migration %s: %s", r.mid, exc.one_line())
            if not r.active:
                ended.append(self.running.pop(r.tenant))
        return ended
