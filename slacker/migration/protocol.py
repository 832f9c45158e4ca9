"""The migration protocol as data: the states of each side and the moves allowed between them.

The phase machine on the source, the incoming migration on the target, the
journal on both agents and recovery after a restart all move through these
tables; a move that is not in them is a bug and raises IllegalTransition,
which names both states. docs/migration.md's protocol tables are generated
from here (`python -m slacker.migration.protocol`), and a test keeps them equal.
"""

from __future__ import annotations

from enum import StrEnum

from ..errors import SlackerError


class IllegalTransition(SlackerError):
    """A side of a migration was asked to move between two states the protocol does not connect."""


class Phase(StrEnum):
    """What the source's phase machine is doing (the `phase` of status and the time series)."""
    PENDING = "pending"
    PREFLIGHT = "preflight"
    SNAPSHOT = "snapshot"
    PREPARE = "prepare"
    DELTA = "delta"
    VERIFY = "verify"
    READY = "ready"
    HANDOVER = "handover"
    COPY = "copy"
    CLEANUP = "cleanup"
    FINISHING = "finishing"
    RECOVERING = "recovering"


class SourceState(StrEnum):
    """The source's journal: how far the handover got, which decides recovery after a restart."""
    STARTED = "started"
    READY = "ready"
    FENCED = "fenced"
    FLIPPING = "flipping"
    FLIPPED = "flipped"


class TargetState(StrEnum):
    """The target's incoming migration (its journal keeps `receiving` or `promoted`)."""
    RECEIVING = "receiving"
    RECEIVED = "received"
    PREPARED = "prepared"
    STARTED = "started"
    CATCHING_UP = "catching-up"
    PROMOTED = "promoted"
    OWNED = "owned"
    ABORTED = "aborted"


P, S, T = Phase, SourceState, TargetState

# Every move, with what makes it. A failure before the flip is not a move between phases: the migration
# ends (result failed or aborted) wherever it is, after the rollback.
PHASE_MOVES: dict[Phase, dict[Phase, str]] = {
    P.PENDING: {P.PREFLIGHT: "started by `slacker migrate` or the rebalancer",
                P.RECOVERING: "the source agent restarted with the migration in its journal"},
    P.PREFLIGHT: {P.SNAPSHOT: "live: both agents, the tenant and the target checked; the target created",
                  P.COPY: "stop-and-copy: the same checks",
                  P.DELTA: "--revert: the node keeping the old copy adopted it as the target (it replicates from "
                           "here since the flip): nothing to copy"},
    P.SNAPSHOT: {P.PREPARE: "the hot backup streamed and acknowledged by the target"},
    P.PREPARE: {P.DELTA: "the target prepared the copy, started it fenced and replicates"},
    P.DELTA: {P.HANDOVER: "the remaining delta fits half of --max-freeze",
              P.VERIFY: "--verify: the rounds caught up; both sides are compared at one position",
              P.READY: "--cutover other than auto: converged; the target applies continuously, nothing frozen"},
    P.VERIFY: {P.DELTA: "equal: rounds catch up what was written meanwhile (--verify-only ends here)",
               P.READY: "equal, and --cutover other than auto: waiting for the operator's time"},
    P.READY: {P.DELTA: "the plan's time came with the target keeping up, or --cutover-now: the last rounds, "
                       "then the handover",
              P.VERIFY: "--cutover-now --verify: both sides compared online first, the source serving"},
    P.HANDOVER: {P.DELTA: "an attempt over budget, or a wait for a long transaction: more rounds first",
                 P.CLEANUP: "the directory names the target (the point of no return passed)",
                 P.FINISHING: "past the flip, a forward step failed: retried until done"},
    P.COPY: {P.HANDOVER: "the data directory streamed"},
    P.CLEANUP: {P.FINISHING: "a forward step failed: retried until done"},
    P.FINISHING: {},
    P.RECOVERING: {P.FINISHING: "the directory names the target: forward; otherwise the migration fails",
                   P.READY: "the journal says ready: the wait resumes where it was, the target still applying"},
}

SOURCE_MOVES: dict[SourceState, dict[SourceState, str]] = {
    S.STARTED: {S.FENCED: "frozen, the target ready at the final position: the fence is persisted, then set",
                S.READY: "ready for the operator's cutover: the options and the delta's position are kept, so a "
                         "restarted agent resumes the wait"},
    S.READY: {S.STARTED: "the cutover begins (the plan's time, or --cutover-now): the handover journals as always"},
    S.FENCED: {S.STARTED: "the attempt is given up before the flip: unfenced, unfrozen",
               S.FLIPPING: "the compare-and-set is about to be sent (an abort is refused from here on)"},
    S.FLIPPING: {S.FLIPPED: "the directory answered: it names the target",
                 S.STARTED: "the directory answered: someone else moved the epoch; unfenced"},
    S.FLIPPED: {},
}

TARGET_MOVES: dict[TargetState, dict[TargetState, str]] = {
    T.RECEIVING: {T.RECEIVED: "the stream ended and was extracted", T.ABORTED: "removed"},
    T.RECEIVED: {T.PREPARED: "live: crash recovery applied to the copy",
                 T.STARTED: "stop-and-copy: started fenced, seeded with the source's GTID state",
                 T.ABORTED: "removed"},
    T.PREPARED: {T.STARTED: "started fenced, not visible to clients", T.ABORTED: "removed"},
    T.STARTED: {T.CATCHING_UP: "replicating from the source", T.PROMOTED: "stop-and-copy: ready",
                T.ABORTED: "removed"},
    T.CATCHING_UP: {T.PROMOTED: "stopped at exactly the frozen source's final position, durable",
                    T.ABORTED: "removed"},
    T.PROMOTED: {T.CATCHING_UP: "the source gave the attempt up: replication resumes",
                 T.OWNED: "the directory names this node: unfenced, a supervised tenant",
                 T.ABORTED: "removed: the directory names another node (its lease ran out without a flip)"},
    T.OWNED: {},
    T.ABORTED: {},
}

# What each side's journal keeps; the rest of the target's states are not written down (a restart before
# `promoted` removes the copy).
JOURNAL_STATES = {"source": tuple(S), "target": (T.RECEIVING.value, T.PROMOTED.value)}


def check(table: dict, current: str, new: str, side: str) -> None:
    """Raise IllegalTransition unless `table` allows current -> new (staying put is always allowed)."""
    if current == new:
        return
    try:
        allowed = table[type(next(iter(table)))(current)]
        ok = type(next(iter(table)))(new) in allowed
    except ValueError:
        ok = False
    if not ok:
        raise IllegalTransition(f"{side} cannot move from {current} to {new}",
                                "the migration protocol has no such transition", "this is a bug: report it")


def check_journal(role: str, current: str, new: str) -> None:
    """A journal entry's state change: the source's table; the target's two journaled states."""
    if role == "source":
        check(SOURCE_MOVES, current, new, "the source's journal")
    elif new not in JOURNAL_STATES["target"]:
        raise IllegalTransition(f"the target's journal cannot record {new}",
                                f"it records only {' and '.join(JOURNAL_STATES['target'])}", "this is a bug: report it")


def markdown() -> str:
    """The tables of docs/migration.md's "Protocol" section."""
    out = []
    for title, table in (("Phases of the source's phase machine", PHASE_MOVES),
                         ("The source's journal", SOURCE_MOVES),
                         ("The target's incoming migration", TARGET_MOVES)):
        out += [f"#### {title}", "", "| from | to | when |", "|---|---|---|"]
        for frm, moves in table.items():
            if not moves:
                out.append(f"| `{frm}` | — | final |")
            for to, why in moves.items():
                out.append(f"| `{frm}` | `{to}` | {why} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
