"""The one seam between the phase machine and its roles (handover, flip, delta rounds, telemetry,
online verification): what a role may read, what it may ask the machine to do, and what it decides.

A role is handed a `Seam`, never the `Migration`. Through it the role
- reads: the migration's identity, options and collaborators (both sides, the journal, the lease)
  and its live figures, read-only (the seam refuses every assignment);
- asks: a target step, a phase begun, a fault-injection hold, an abort check or an abortable wait,
  the start of the compare-and-set (atomic with an abort), more delta rounds;
- decides: a typed result below, handed to `record`; the machine alone writes its record
  (`Migration.decided`, `MigrationRecord.apply`), so which role may change what is this file's list of results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable

from ..controller.report import StepReport
from .options import HandoverAttempt, RoundReport
from .protocol import Phase


# ---- what the roles decide ----------------------------------------------------------------------
@dataclass(frozen=True)
class RoundDone:
    """A delta round ended (DeltaRounds): its report, and the applier's figures at its end."""
    report: RoundReport
    applier: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LeftCatchUp:
    """The target left catch-up mode before the freeze (Handover): what that cost."""
    durable_ms: dict


@dataclass(frozen=True)
class AttemptEnded:
    """A handover attempt ended: flipped, over budget or failed (Handover)."""
    attempt: HandoverAttempt


@dataclass(frozen=True)
class StepReached:
    """The last step the current handover attempt reached ("" once it is given up)."""
    step: str


@dataclass(frozen=True)
class WaitingFor:
    """What the handover waits for before it may freeze ("" when nothing)."""
    what: str


@dataclass(frozen=True)
class Flipped:
    """The directory names the target at `epoch` (Handover: with the freeze's figures; Flip.settle:
    a flip whose answer was lost, found later)."""
    epoch: int
    freeze_ms: float | None = None
    steps_ms: dict | None = None


@dataclass(frozen=True)
class FlipNotSent:
    """The compare-and-set was not applied (someone else moved the epoch): an abort is possible again."""


@dataclass(frozen=True)
class Outage:
    """The directory was unreachable this long at the flip; `at_least`: never shrink what was measured."""
    seconds: float
    at_least: bool = False


@dataclass(frozen=True)
class Finishing:
    """Why a step past the flip cannot go on ("" once it did)."""
    reason: str


@dataclass(frozen=True)
class ControllerStepped:
    """The rate controller's last step (Telemetry)."""
    report: StepReport


@dataclass(frozen=True)
class Warned:
    """Something the operator should know that did not stop the migration (`warnings`)."""
    text: str


@dataclass(frozen=True)
class ReadyState:
    """The ready phase's second (ReadyWait): the end-to-end lag, what the wait waits for, what it costs."""
    ready_for_s: float
    lag_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    keeps_up: bool
    behind: bool                 # the latest position read has not arrived yet: lag_ms is a lower bound
    waiting_for: str
    past_timeout: bool
    binlog_bytes: int            # binlog the source keeps for the target (since the delta's start)
    binlog_bytes_per_s: float    # the rate the source streams to it
    cutover: str
    cutover_timeout: str


Result = (RoundDone | LeftCatchUp | AttemptEnded | StepReached | WaitingFor | Flipped | FlipNotSent | Outage
          | Finishing | ControllerStepped | Warned | ReadyState)


# ---- the seam -----------------------------------------------------------------------------------
def _live(name: str) -> property:
    # Reflective by need: one read-only property per attribute the seam shows, made from its name.
    return property(lambda self: getattr(self._m, name), doc=f"the migration's {name} (read-only)")


def _recorded(name: str) -> property:
    return property(attrgetter(f"_m.record.{name}"), doc=f"the migration's recorded {name} (read-only)")


class Seam:
    """A role's view of its migration: read-only figures and collaborators, the machine's services,
    and `record` for what the role decides."""

    __slots__ = ("_m",)

    def __init__(self, machine) -> None:  # the Migration (slacker.migration.machine), which imports this file
        object.__setattr__(self, "_m", machine)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a role cannot set the migration's {name}: it returns a result the machine records")

    # identity, options, collaborators
    id = _live("id")
    tenant_id = _live("tenant_id")
    source_name = _live("source_name")  # this node
    opts = _live("opts")
    node = _live("node")
    source = _live("source")  # the tenant's side of the move (slacker.migration.source.SourceSide)
    peer = _live("peer")
    journal = _live("journal")
    entry = _live("entry")
    lease = _live("lease")
    flip = _live("flip")
    rate_policy = _live("rate_policy")
    pipe = _live("pipe")
    verification = _live("verification")
    target_port = _live("target_port")  # the tenant's port on the target, when it is not the source's
    # live figures, from the migration's record (slacker.migration.record)
    created = _recorded("created")
    phase = _recorded("phase")
    result = _recorded("result")
    epoch_before = _recorded("epoch_before")
    epoch_after = _recorded("epoch_after")
    outage_s = _recorded("outage_s")
    finishing_reason = _recorded("finishing_reason")
    finished_at = _recorded("finished_at")
    handover_step = _recorded("handover_step")
    bytes_total = _recorded("bytes_total")
    controller_state = _recorded("controller_state")
    ready = _recorded("ready")  # the ready phase's last second (ReadyState), None before it

    @property
    def rounds_done(self) -> int:
        return len(self._m.record.rounds)

    @property
    def attempts_made(self) -> int:
        return len(self._m.record.attempts)

    @property
    def delta_stats(self) -> dict:
        return dict(self._m.record.delta_stats)

    def bytes_done(self) -> int:
        return self._m.bytes_done()

    def current_rate(self) -> float | None:
        return self._m.current_rate()

    # what a role asks the machine to do
    def target(self, name: str, body: dict | None = None, timeout_s: float = 60.0):
        """A step on the target's agent, unless the migration was aborted."""
        return self._m.target_step(name, body, timeout_s)

    def enter(self, phase: Phase) -> None:
        self._m.enter(phase)

    def hold(self, point: str) -> None:
        """A fault-injection point (--hold): pause here if asked to."""
        self._m.hold_point(point)

    def check_abort(self) -> None:
        self._m.check_abort()

    def wait(self, seconds: float) -> None:
        """Sleep, ended early by an abort (then check_abort raises)."""
        self._m.wait_abortable(seconds)

    def begin_flip(self, guard: Callable[[], None] | None = None) -> None:
        """Atomically with an abort: refuse if aborted, run `guard` (it may raise), mark the compare-and-set
        as sent; from here on an abort is refused."""
        self._m.begin_flip(guard)

    def more_rounds(self) -> None:
        self._m.more_rounds()

    def wait_on(self, what: str, node: str, writable: bool, text: str) -> None:
        self._m.record.wait_on(what, node, writable, text)

    def end_wait(self) -> None:
        self._m.record.end_wait()

    def record(self, result: Result) -> None:
        self._m.decided(result)
