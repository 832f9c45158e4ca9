"""The live handover: wait until the source can be frozen, then freeze -> catch up -> fence -> flip.

Each attempt is bounded by --max-freeze from asking for the lock to the
directory's answer. An attempt that would run past it, or whose lock is not
granted, is given up before the flip (unfenced, unfrozen) and retried after
more delta rounds, up to --handover-attempts. Steps, in order, with the
journal state each one leaves (slacker.migration.protocol):

    (lease renewed, then the clock starts) locked (final position read) -> caught_up
    -> target_ready -> fenced (journal: fenced) -> compare-and-set (journal:
    flipping; the point of no return) -> flipped (journal: flipped)
"""

from __future__ import annotations

import logging
import time

from ..errors import CatchUpTimeout, LockNotGranted, MigrationFailed, SlackerError
from .lease import LEASE_MARGIN_S
from .options import HandoverAttempt, OverBudget
from .participants import Held, Participants
from .seams import AttemptEnded, Flipped, FlipNotSent, LeftCatchUp, Seam, StepReached, WaitingFor, Warned
from .protocol import Phase, SourceState

log = logging.getLogger("slacker.migration.handover")


def one_line(exc: BaseException) -> str:
    if isinstance(exc, SlackerError):
        return exc.one_line()
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


class Handover:
    def __init__(self, m: Seam, participants: Participants) -> None:
        self.m = m  # the migration as its roles see it: options, both sides, journal, lease, flip; results back
        self.participants = participants  # the routers, wired in by the agent (slacker.migration.participants)
        self.routers: Held | None = None  # the routers' hold of this attempt
        self.flipped_to = None  # the ownership the flip wrote: the routers' held commands go there once active

    def run(self) -> None:
        m = self.m
        # leave catch-up mode before any freeze, so its cost never lands in the freeze.
        m.record(LeftCatchUp(m.target("durable", {}, timeout_s=120)))
        # What arrived while the target left catch-up mode is applied outside the freeze, by rounds that
        # run at the durable speed the freeze's own catch-up will have.
        m.more_rounds()
        m.enter(Phase.HANDOVER)
        for n in range(1, m.opts.handover_attempts + 1):
            if self.wait_until_quiet():
                # The target kept applying while we waited; catch up what came meanwhile.
                self._more_rounds()
            try:
                self.attempt(n)
                return
            except OverBudget as exc:
                if n == m.opts.handover_attempts:
                    raise MigrationFailed(
                        f"handover did not fit in --max-freeze {m.opts.max_freeze_s * 1000:.0f}ms",
                        f"{n} attempts, last: {exc.why}",
                        "the source keeps serving; raise --max-freeze or migrate at a quieter time",
                        phase=Phase.HANDOVER) from None
                log.info("migration %s: handover attempt %d over budget (%s); more delta rounds", m.id, n, exc.why)
                self._more_rounds()

    def _more_rounds(self) -> None:
        m = self.m
        m.target("resume", {}, timeout_s=60)
        m.more_rounds()
        m.enter(Phase.HANDOVER)

    def wait_until_quiet(self) -> bool:
        """Wait, outside the freeze, until no statement runs and no write transaction is open on the source
        for longer than the freeze budget (a long transaction, a batch statement, DDL): a freeze would
        stall every writer behind it or break it. True if it had to wait; fails after --handover-wait."""
        m = self.m
        t0 = time.monotonic()
        while True:
            found = m.source.blockers(older_than_s=m.opts.max_freeze_s)
            if not found:
                m.record(WaitingFor(""))
                return time.monotonic() - t0 > m.opts.step_s
            waited = time.monotonic() - t0
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            m.record(WaitingFor(f"{found[0]}{more}"))
            if waited >= m.opts.handover_wait_s:
                m.record(WaitingFor(""))
                raise MigrationFailed(
                    f"the handover waited {waited:.0f}s (--handover-wait) for the source to be quiet",
                    f"{found[0]}{more}",
                    "the source keeps serving; let it finish or end it (KILL <connection>), "
                    "or raise --handover-wait", phase=Phase.HANDOVER)
            log.info("migration %s: handover waits for %s%s", m.id, found[0], more)
            m.wait(min(0.2, max(0.01, m.opts.handover_wait_s - waited)))
            m.check_abort()

    def _warm_connections(self) -> float:
        """Open the connections the freeze will use (target agent; the directory when another agent
        serves it; the source's own for its lock) now, so no TLS handshake happens inside the freeze. Returns the seconds one read of
        the directory takes right now: the compare-and-set's round trip without its write."""
        m = self.m
        m.node.peer(m.opts.target).warm()
        m.node.directory.warm()
        m.source.warm()
        t = time.monotonic()
        m.node.directory.lookup(m.tenant_id)
        return time.monotonic() - t

    def attempt(self, n: int) -> None:
        m = self.m
        budget = m.opts.max_freeze_s
        steps: dict[str, float] = {}
        # before the clock starts: opening them is not part of the freeze
        directory_read_s = self._warm_connections()
        # A fresh lease that outlasts the whole attempt, so the target cannot give up on us mid-flip;
        # renewed before the clock starts, since nothing is frozen yet.
        m.lease.renew(timeout_s=5, ttl_s=max(m.opts.lease_ttl_s, budget + 2 * LEASE_MARGIN_S))
        # Routers hold the tenant's new statements and let open transactions finish (bounded by the
        # freeze budget) before the lock is asked for: no routed statement meets the freeze.
        self.routers = self.participants.hold(m.tenant_id, drain_s=budget, freeze_s=budget)
        if self.routers.missing:
            m.record(Warned(f"router {', '.join(self.routers.missing)} did not answer the hold: its clients met "
                            "the handover unheld (a statement may have failed against the fence); check that "
                            "every agent reaches the router's admin address (`slacker router status`)"))
        t0 = time.monotonic()
        deadline = t0 + budget

        def mark(step: str) -> None:
            steps[step] = round((time.monotonic() - t0) * 1000, 1)
            m.record(StepReached(step))

        def left(step: str, need_s: float = 0.0) -> float:
            rest = deadline - time.monotonic()
            if rest <= need_s:
                why = f"{step} reached {(time.monotonic() - t0) * 1000:.0f}ms"
                if need_s:
                    why += f" with {max(rest, 0) * 1000:.0f}ms left and {need_s * 1000:.0f}ms needed"
                raise OverBudget("handover over budget", why, "", phase=Phase.HANDOVER)
            return rest

        def record(outcome: str, freeze_ms: float, reason: str = "") -> None:
            m.record(AttemptEnded(HandoverAttempt(n, outcome, freeze_ms, dict(steps), reason,
                                                  len(m.source.interrupted))))

        try:
            try:
                m.source.freeze(lock_timeout_s=max(0.05, min(budget / 2, left("lock"))))
            except LockNotGranted as exc:
                # Nothing was frozen: like an attempt over budget, more delta rounds and another attempt.
                raise OverBudget("handover over budget", f"lock: {exc.why}", "", phase=Phase.HANDOVER) from None
            mark("locked")
            final = m.source.frozen_position()
            m.hold("frozen")
            try:
                m.target("wait", {"gtid": final, "timeout_s": left("catch-up")}, timeout_s=left("catch-up") + 30)
            except CatchUpTimeout as exc:
                # a target still applying when the budget runs out is over budget (unfreeze, more
                # delta rounds, retry), not a failed migration; a stopped applier still fails.
                raise OverBudget("handover over budget", f"catch-up: {exc.why}", "", phase=Phase.HANDOVER) from None
            mark("caught_up")
            # Nothing may have committed since the final position was read: the lock still holds.
            if m.source.frozen_position() != final:
                raise MigrationFailed("source changed during the freeze", "its GTID position moved",
                                      "handover aborted; the source keeps serving", phase=Phase.HANDOVER)
            m.target("ready", {"final_gtid": final}, timeout_s=left("target ready") + 30)
            mark("target_ready")
            left("fence")
            t_write = time.monotonic()
            m.journal.update(m.entry, state=SourceState.FENCED, final_gtid=final)
            durable_write_s = time.monotonic() - t_write
            m.source.fence()
            mark("fenced")
            m.hold("fenced")
            # The bound holds to the directory's answer, and past the flip nothing can be undone: what
            # is left must cover what the flip costs, as measured in this attempt: the journal's write
            # (flipping), the directory's round trip, and its durable write of the new owner.
            left("flip", need_s=directory_read_s + 2 * durable_write_s)

            def lease_holds() -> None:
                if m.lease.left_s() < LEASE_MARGIN_S:
                    raise MigrationFailed("the lease on the target ran out", "the target may have given up",
                                          "the source keeps serving", phase=Phase.HANDOVER)

            m.begin_flip(lease_holds)  # an abort from here on is refused
            m.journal.update(m.entry, state=SourceState.FLIPPING)
        except BaseException as exc:
            elapsed_ms = round((time.monotonic() - t0) * 1000, 1)
            if isinstance(exc, OverBudget):
                record("over budget", steps.get("fenced", 0.0) or elapsed_ms, exc.why)
            else:
                record("failed", elapsed_ms, one_line(exc))
            self.undo()
            raise
        own = m.flip.compare_and_set(deadline)
        if own is None:  # the directory answered: the flip did not happen
            m.record(FlipNotSent())
            record("failed", round((time.monotonic() - t0) * 1000, 1), "ownership changed underneath")
            self.undo()
            raise MigrationFailed("ownership changed underneath", "the directory's epoch moved before the flip",
                                  "the source keeps serving", phase=Phase.HANDOVER)
        self.flipped_to = own
        freeze_ms = round((time.monotonic() - t0) * 1000, 1)
        mark("flipped")
        m.record(Flipped(own.epoch, freeze_ms, steps))
        record("flipped", freeze_ms)
        m.journal.update(m.entry, state=SourceState.FLIPPED, epoch_after=own.epoch)
        m.source.unfreeze()  # the fence holds: writers blocked by the freeze now fail as read-only
        m.hold("flipped")

    def release_everywhere_when_done(self) -> None:
        """After an agent restart: every router may hold the tenant for the handover that was cut short;
        the release, once the migration is decided, goes to all of them."""
        self.routers = self.participants.held_anywhere(self.m.tenant_id)

    def release_routers(self, after_flip: bool = False) -> None:
        """Let the routers' held statements go: after the flip (the target takes writes) to the new owner,
        else back to the source."""
        if self.routers is not None:
            self.routers.release(after_flip=after_flip, own=self.flipped_to)
            self.routers = None

    def undo(self) -> None:
        """Before the flip: unfence, unfreeze. The target keeps its copy for the next attempt."""
        m = self.m
        m.record(StepReached(""))
        try:
            if m.source.fenced:
                m.source.unfence()
        finally:
            m.source.unfreeze()
            self.release_routers()  # held statements go on to the source
            if m.entry.state != SourceState.STARTED:
                m.journal.update(m.entry, state=SourceState.STARTED)
