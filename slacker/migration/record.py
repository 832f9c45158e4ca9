"""What happened in one migration: its phases, delta rounds, handover attempts, waits, timings, warnings
and ending, kept apart from the machine that decides what happens next (slacker.migration.machine).

The machine writes into its record and hands it what the roles decide (`apply`); `to_dict` lays out the
migration's document (status, `slacker migrate --json`, the agent's API). See docs/migration.md.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..controller.report import StepReport
from ..errors import SlackerError
from .journal import Entry
from .options import HandoverAttempt, MigrationOptions, PhaseTiming, RoundReport
from .protocol import Phase
from .seams import (AttemptEnded, ControllerStepped, Finishing, Flipped, LeftCatchUp, Outage, Result, RoundDone,
                    ReadyState, StepReached, WaitingFor, Warned)
from .steps import StepTimes
from .telemetry import utc

log = logging.getLogger("slacker.migration")


def new_id(tenant_id: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{tenant_id}-{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class LiveFigures:
    """What the machine measures at the moment its document is made: the copy's (or the verification's)
    progress and rate, the pipe's read-in, the verification's and the controller's own documents."""
    bytes_done: int
    rate_bytes_per_s: float | None
    throughput_bytes_per_s: float
    eta_s: float | None
    preread_bytes: int
    prereading: bool
    copy_stages: dict | None
    verify: dict | None
    latency_source: Any


class MigrationRecord:
    """One migration's account of itself. Written by its machine only; read by status, metrics and the roles
    (through their seam)."""

    def __init__(self, id: str, tenant_id: str, source_name: str, series_path: Path, *,
                 protocol: int, recovered: Entry | None = None) -> None:
        """`recovered`: the journal's entry of a migration an agent restart cut short (its epochs)."""
        self.id = id
        self.tenant_id = tenant_id
        self.source_name = source_name
        self.series_path = series_path  # the time series, one JSON object per step (slacker.migration.telemetry)
        self.recovered = recovered is not None
        self.created = time.monotonic()
        self.finished_at: float | None = None
        self.phase = Phase.PENDING
        self.phases: list[PhaseTiming] = []
        # Set with the result (GET ...?wait= returns at once, service.py); while the machine runs, only once it has
        # written its last sample too (`hold_end`), so a caller that reads the series after the answer finds it whole.
        self.ended = threading.Event()
        self._end_held = False
        self._result: str | None = None
        self.error: SlackerError | None = None
        self.protocols: tuple[int, int] = (protocol, 0)  # (source, target) agent protocol
        self.epoch_before: int | None = recovered.epoch_before if recovered else None
        self.epoch_after: int | None = recovered.epoch_after if recovered else None
        self.bytes_total = 0
        self.steps = StepTimes()  # the fixed steps' durations (steps_ms) and the copy's stages (copy_stages)
        self.rounds: list[RoundReport] = []
        self.delta_stats: dict = {}  # the applier's last report (MPL, apply rates, samples)
        self.durable_ms: dict | None = None  # what leaving catch-up mode cost, before the freeze
        self.verified: bool | None = None
        self.attempts: list[HandoverAttempt] = []
        self.freeze_ms: float | None = None
        self.handover_steps_ms: dict[str, float] = {}
        self.handover_step = ""  # the last step the current handover attempt reached (locked, fenced, ...)
        self.waiting_for = ""  # what the handover waits for before it may freeze (a long transaction, DDL)
        self.ready: ReadyState | None = None  # the ready phase's last second (--cutover other than auto)
        self.kept: dict | None = None  # --keep-source: where and until when the old copy is kept (slacker.migration.kept)
        self.holding = ""  # the fault-injection point (hold_s) it pauses at now
        self.outage_s: float | None = None  # directory unreachable at the flip, source fenced meanwhile
        self.finishing_reason = ""
        self.waiting: dict | None = None  # past the flip: what a forward step waits for (see wait_on)
        self.waited: list[dict] = []  # the waits past the flip that are over, with their seconds
        self.controller_state: StepReport | None = None  # the controller's last step (slacker.controller.report)
        self.warnings: list[str] = []

    # ---- the ending ---------------------------------------------------------------------------
    @property
    def result(self) -> str | None:
        return self._result

    @result.setter
    def result(self, value: str | None) -> None:
        self._result = value
        if value is not None and not self._end_held:
            self.ended.set()

    def hold_end(self) -> None:
        """A result set from now on is announced at `release_end` (the machine's last step), not at once."""
        self._end_held = True

    def release_end(self) -> None:
        self._end_held = False
        if self._result is not None:
            self.ended.set()

    @property
    def active(self) -> bool:
        return self.result is None

    @property
    def past_point_of_no_return(self) -> bool:
        return self.epoch_after is not None

    def finish(self) -> None:
        """The machine stopped (with a result, or handing on to recovery): the last phase's duration."""
        self.end_phase()
        self.finished_at = time.monotonic()

    # ---- phases -------------------------------------------------------------------------------
    def begin_phase(self, name: str) -> None:
        self.end_phase()
        self.phase = name
        self.phases.append(PhaseTiming(name, utc(), round(time.monotonic() - self.created, 3)))

    def end_phase(self) -> None:
        if self.phases and self.phases[-1].duration_s is None:
            p = self.phases[-1]
            p.duration_s = round(time.monotonic() - self.created - p.start_s, 3)

    # ---- what the roles decide (slacker.migration.seams) ---------------------------------------
    def apply(self, result: Result) -> None:
        """A role's decision, kept. FlipNotSent is the machine's own (whether an abort is possible again)."""
        match result:
            case RoundDone(report, applier):
                self.delta_stats = applier
                self.rounds.append(report)
            case LeftCatchUp(durable):
                self.durable_ms = durable
                self.delta_stats["catchup"] = durable.get("catchup", False)
            case AttemptEnded(attempt):
                self.attempts.append(attempt)
            case StepReached(step):
                self.handover_step = step
            case WaitingFor(what):
                self.waiting_for = what
            case Flipped(epoch, freeze_ms, steps_ms):
                self.epoch_after = epoch
                if freeze_ms is not None:
                    self.freeze_ms = freeze_ms
                if steps_ms is not None:
                    self.handover_steps_ms = steps_ms
            case Outage(seconds, at_least):
                self.outage_s = max(self.outage_s or 0.0, seconds) if at_least else seconds
            case Finishing(reason):
                self.finishing_reason = reason
            case ControllerStepped(report):
                self.controller_state = report
            case ReadyState():
                self.ready = result
            case Warned(text):
                if text not in self.warnings:
                    self.warnings.append(text)
                    log.warning("migration %s: %s", self.id, text)
            case _:
                raise TypeError(f"not a result of a role: {result!r}")

    # ---- waits past the flip ------------------------------------------------------------------
    def wait_on(self, what: str, node: str, writable: bool, text: str) -> None:
        """Say what the migration waits for (`waiting`); a new kind of wait ends the one before."""
        if self.waiting is None or self.waiting["for"] != what:
            self.end_wait()
            self.waiting = {"for": what, "node": node, "writable": writable, "message": text,
                            "since": time.monotonic()}
            log.warning("migration %s: %s", self.id, text)
        else:
            self.waiting["message"] = text

    def end_wait(self) -> None:
        """The wait past the flip is over: kept in the record (`waited` in the migration's document)."""
        if self.waiting is not None:
            w, self.waiting = self.waiting, None
            self.waited.append({"for": w["for"], "node": w["node"], "writable": w["writable"],
                                "message": w["message"], "seconds": round(time.monotonic() - w["since"], 1)})

    def _waiting_doc(self) -> dict | None:
        w = self.waiting
        if w is None:
            return None
        return {k: v for k, v in w.items() if k != "since"} | {"seconds": round(time.monotonic() - w["since"], 1)}

    # ---- the document -------------------------------------------------------------------------
    def to_dict(self, opts: MigrationOptions, live: LiveFigures) -> dict:
        """The migration's document: this record, the options it runs with and the machine's live figures."""
        err = self.error.to_dict() if self.error else None
        rate = live.rate_bytes_per_s
        return {
            "id": self.id, "tenant": self.tenant_id, "source": self.source_name, "target": opts.target,
            "mode": opts.mode, "phase": self.phase, "active": self.active, "result": self.result,
            "protocol": {"source": self.protocols[0], "target": self.protocols[1] or None},
            "error": err, "phases": [asdict(p) for p in self.phases],
            "bytes_done": live.bytes_done, "bytes_total": self.bytes_total,
            # the backup tool's program read into memory before it started (slacker.pagecache)
            "preread_bytes": live.preread_bytes, "prereading": live.prereading,
            "rate_bytes_per_s": rate, "unthrottled": rate is None,
            "throughput_bytes_per_s": round(live.throughput_bytes_per_s, 1), "eta_s": live.eta_s,
            "rounds": [asdict(r) for r in self.rounds], "freeze_ms": self.freeze_ms,
            "handover_steps_ms": self.handover_steps_ms, "steps_ms": self.steps.ms,
            "copy_stages": live.copy_stages, "handover_attempts": [asdict(a) for a in self.attempts],
            "verified": self.verified, "verify": live.verify,
            "epoch_before": self.epoch_before, "epoch_after": self.epoch_after,
            "past_point_of_no_return": self.past_point_of_no_return, "finishing_reason": self.finishing_reason,
            "waiting": self._waiting_doc(), "waited": self.waited,
            "waiting_for": self.waiting_for, "handover_step": self.handover_step, "holding": self.holding,
            "directory_outage_s": self.outage_s, "warnings": self.warnings, "recovered": self.recovered,
            "series_path": str(self.series_path), "pipe": opts.pipe,
            "max_freeze_ms": opts.max_freeze_s * 1000,
            "duration_s": round((self.finished_at or time.monotonic()) - self.created, 3),
            # the ready phase (--cutover): lag, what it waits for, what it costs the source (slacker.migration.ready)
            "ready": asdict(self.ready) if self.ready is not None else None,
            # a move back onto a kept copy (--revert: nothing copied); the old copy this move keeps (--keep-source)
            "revert": opts.revert, "kept": self.kept,
            "controller": self.controller_state.to_dict() if self.controller_state is not None else None,
            # which latency the controller steered by, per tenant, and why (slacker.sources.router.LatencyChoice)
            "latency_source": live.latency_source,
            # which applier, its MPL, best apply rate; what leaving catch-up mode cost
            "delta": dict({k: v for k, v in self.delta_stats.items() if k != "samples"},
                          applier=self.delta_stats.get("applier") or opts.delta_applier, durable=self.durable_ms),
        }
