"""Who else takes part in a handover, as the migration sees them: two calls, nothing more.

The routers hold a tenant's statements while its source is frozen and let them go after the
flip, to the new owner, or back to the source when the attempt is given up
(slacker/router/freeze.py). The migration package does not import them: the agent wires an
implementation into the migration service (slacker.agent.server -> service.attach), which hands
it to every migration, outgoing and incoming. `NOBODY` takes no part (a node without routers;
the protocol's unit tests).
"""

from __future__ import annotations

from typing import Protocol


class Held(Protocol):
    """A tenant held by the participants for one handover attempt."""

    missing: list[str]  # participants that did not answer the hold (they take no part in this attempt)

    def release(self, after_flip: bool = False, own=None) -> None:
        """Let the held statements go: after the flip to `own` (the ownership the flip wrote; None: ask
        the directory), else back to the source."""


class Participants(Protocol):
    def hold(self, tenant: str, drain_s: float, freeze_s: float) -> Held:
        """Hold the tenant's new statements; returns once open transactions drained (or drain_s is up).
        The hold ends by itself after drain_s + freeze_s and a margin if no release comes."""

    def held_anywhere(self, tenant: str) -> Held:
        """What an agent that restarted mid-handover, or a target that activates, releases: every
        participant, as if each held the tenant (a release without a hold changes nothing)."""


class _NotHeld:
    missing: list[str] = []

    def release(self, after_flip: bool = False, own=None) -> None:
        pass


class _Nobody:
    def hold(self, tenant: str, drain_s: float, freeze_s: float) -> Held:
        return _NotHeld()

    def held_anywhere(self, tenant: str) -> Held:
        return _NotHeld()


NOBODY: Participants = _Nobody()
