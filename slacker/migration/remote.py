"""Starting and following a migration from outside the agents (the `slacker migrate` CLI, the rebalancer).

The request body is built (and checked) in one place, so `slacker migrate` and
`slacker rebalance --execute` start migrations the same way.
"""

from __future__ import annotations

import time
from typing import Callable

from ..controller.settings import ControllerSettings
from ..delta import parse_mpl
from ..errors import AgentUnavailable, InvalidInput

POLL_S = 0.5


def migration_body(tenant_id: str, target: str, *, mode: str = "live", rate: float | None = None,
                   unthrottled: bool = False, setpoint: float | None = None, max_rate: float | None = None,
                   latency_sources: tuple[str, ...] = (), controller_kind: str | None = None,
                   gains: str | None = None, window: float | None = None, step: float | None = None,
                   force: bool = False, max_freeze: float = 0.5, verify: bool = False, verify_only: bool = False,
                   pipe: str | None = None, data_path: str | None = None,
                   max_rounds: int = 20, max_stalled_rounds: int = 3, delta_applier: str | None = None,
                   delta_mpl: str | int | None = None, handover_attempts: int = 3,
                   handover_wait: float = 60.0, catchup_mode: bool = True, target_setpoint: float | None = None,
                   target_guard: bool = True, hold: tuple[str, ...] = (), budget: str | None = None) -> dict:
    """The body of POST /v1/migrations on the source agent."""
    chosen = [name for name, on in (("--rate", rate is not None), ("--unthrottled", unthrottled),
                                    ("--setpoint", setpoint is not None)) if on]
    if len(chosen) > 1:
        raise InvalidInput(f"{' and '.join(chosen)} exclude each other", "pick one way to set the copy rate", "")
    body: dict = {"tenant": tenant_id, "target": target, "mode": mode, "max_freeze_s": max_freeze,
                  "handover_attempts": handover_attempts, "handover_wait_s": handover_wait,
                  "verify": verify or verify_only, **({"verify_only": True} if verify_only else {}),
                  "max_rounds": max_rounds, "max_stalled_rounds": max_stalled_rounds,
                  **({"delta_applier": delta_applier} if delta_applier else {}),
                  **({"delta_mpl": parse_mpl(delta_mpl)} if delta_mpl else {}),
                  **({} if catchup_mode else {"delta_catchup": False}),
                  "rate_bytes_per_s": rate}
    if pipe:
        body["pipe"] = pipe
    if data_path:
        if pipe == "pv":
            raise InvalidInput("--data-path applies to the native pipe", "pv | nc has a data path of its own",
                               "drop --data-path or --pipe pv")
        body["data_path"] = data_path
    if hold:
        body["hold_s"] = parse_holds(hold)
    if setpoint is not None:
        # Checked here too, so the CLI refuses a bad setting (an unknown --controller) before any agent is asked.
        body["controller"] = ControllerSettings.from_dict({
            "setpoint_s": setpoint, "max_rate_bytes_per_s": max_rate, "latency_sources": list(latency_sources),
            "gains": gains, "window_s": window, "step_s": step, "force": force, "target_guard": target_guard,
            "target_setpoint_s": target_setpoint, "kind": controller_kind, "budget": budget}).to_dict()
    elif (any(x is not None for x in (max_rate, gains, window, step, controller_kind, target_setpoint))
          or latency_sources or force or not target_guard):
        raise InvalidInput("controller options need --setpoint", "--controller, --max-rate, --gains, --window, --step, "
                           "--latency-source, --target-setpoint, --no-target-guard and --force only apply to a "
                           "latency-targeting migration", "")
    return body


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


def start_migration(source_agent, body: dict) -> dict:
    """Start it on the source agent; returns the migration's first document (with its id)."""
    return source_agent.request("POST", "/v1/migrations", body, timeout_s=120)


def follow(source_agent, doc: dict, on_poll: Callable[[dict], None] | None = None,
           poll_s: float = POLL_S, on_unreachable: Callable[[dict, AgentUnavailable], None] | None = None) -> dict:
    """Follow the migration until it is no longer active (a long poll every `poll_s`: its end is seen
    as soon as it happens); returns its last document.

    With `on_unreachable`, a source agent that does not answer is waited for (it may be restarting:
    it recovers the migration from its journal under the same id), and `on_unreachable(last document,
    the error)` is called at each poll it misses; without it the error is raised."""
    while doc["active"]:
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
