"""Starting and following a migration from outside the agents (the `slacker migrate` CLI, the rebalancer).

The request is a MigrationRequest (slacker.migration.options), checked where it is made and put on the wire
by `start_migration`, so `slacker migrate` and `slacker rebalance --execute` start migrations the same way.
"""

from __future__ import annotations

import time
from typing import Callable

from ..controller.budget import DEFAULT_BUDGET
from ..controller.settings import ControllerSettings
from ..errors import AgentUnavailable, InvalidInput
from .options import MigrationOptions, MigrationRequest

POLL_S = 0.5


def one_rate(rate: float | None, unthrottled: bool, setpoint: float | None) -> None:
    """--rate, --unthrottled and --setpoint: at most one way to set the copy rate."""
    chosen = [name for name, on in (("--rate", rate is not None), ("--unthrottled", unthrottled),
                                    ("--setpoint", setpoint is not None)) if on]
    if len(chosen) > 1:
        raise InvalidInput(f"{' and '.join(chosen)} exclude each other", "pick one way to set the copy rate", "")


def latency_move(tenant_id: str, target: str, setpoint_s: float, *, max_rate_bytes_per_s: float | None,
                 max_freeze_s: float, budget: str = DEFAULT_BUDGET,
                 setpoint_headroom: float | None = None) -> MigrationRequest:
    """A move the rebalancer, a drain or a bench starts: latency-targeting at `setpoint_s`, started even if the
    load is over it now (it chose the move knowing the load), sharing the node's budget split `budget`. With
    `setpoint_headroom`, the source agent raises a setpoint under the load's own latency, as the move's latency
    source reads it, to that latency x (1 + headroom) (ControllerSettings.setpoint_over)."""
    max_rate = None if max_rate_bytes_per_s is None else float(max_rate_bytes_per_s)
    controller = ControllerSettings(setpoint_s=float(setpoint_s), max_rate_bytes_per_s=max_rate,
                                    force=True, budget=budget, setpoint_headroom=setpoint_headroom)
    return MigrationRequest.checked(tenant_id, MigrationOptions(target=target, max_freeze_s=max_freeze_s,
                                                                controller=controller))


def parse_holds(holds: tuple[str, ...]) -> dict:
    """--hold POINT=DURATION (repeatable): the fault-injection pauses a rehearsal asks for."""
    from ..units import parse_duration

    out = {}
    for h in holds:
        point, sep, value = h.partition("=")
        if not sep or not point.strip() or not value.strip():
            raise InvalidInput(f"invalid --hold {h!r}", "expected POINT=DURATION", "for example --hold flipped=5s")
        out[point.strip()] = parse_duration(value)
    return out


def start_migration(source_agent, request: MigrationRequest) -> dict:
    """Start it on the source agent; returns the migration's first document (with its id)."""
    return source_agent.request("POST", "/v1/migrations", request.to_wire(), timeout_s=120)


def follow(source_agent, doc: dict, on_poll: Callable[[dict], None] | None = None,
           poll_s: float = POLL_S, on_unreachable: Callable[[dict, AgentUnavailable], None] | None = None,
           until: Callable[[dict], bool] | None = None) -> dict:
    """Follow the migration until it is no longer active, or `until(document)` holds (a long poll every
    `poll_s`: its end is seen as soon as it happens); returns its last document.

    With `on_unreachable`, a source agent that does not answer is waited for (it may be restarting:
    it recovers the migration from its journal under the same id), and `on_unreachable(last document,
    the error)` is called at each poll it misses; without it the error is raised."""
    while doc["active"] and not (until is not None and until(doc)):
        t0 = time.monotonic()
        try:
            # The agent holds the request until the migration ends or poll_s passed: the end is seen at once.
            doc = source_agent.request("GET", f"/v1/migrations/{doc['id']}", query={"wait": poll_s},
                                       timeout_s=poll_s + 30)
        except AgentUnavailable as exc:
            if on_unreachable is None:
                raise
            on_unreachable(doc, exc)
            time.sleep(max(0.0, poll_s - (time.monotonic() - t0)))
            continue
        if doc["active"]:
            time.sleep(max(0.0, poll_s - (time.monotonic() - t0)))  # an agent that does not hold the request
        if on_poll is not None:
            on_poll(doc)
    return doc
