"""A migration's telemetry: the one-second step that drives the rate controller during the copy, and the
time series (one JSON object per step) that `slacker plot` draws and `status` summarises."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timezone

from dataclasses import replace

from ..controller.marks import CopyMarks
from ..controller.report import StepReport
from .protocol import Phase
from .seams import ControllerStepped, Seam

log = logging.getLogger("slacker.migration.telemetry")


def utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Telemetry:
    def __init__(self, m: Seam, series_path) -> None:
        self.m = m  # the migration as its roles see it: its pipe, phase, controller; each step's report back
        self.marks = CopyMarks()  # the seconds of the copy the controller leaves out (slacker.controller.marks)
        self.series_path = series_path
        self.throughput = 0.0  # bytes/s, a decaying average of the copy's progress
        self._last_bytes = (time.monotonic(), 0)
        self.progress_at = time.time()  # Unix time of the last progress (slacker_migration_last_progress_...)
        self._progress_mark: tuple = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, name=f"tick-{self.m.id}", daemon=True).start()

    def stop(self) -> None:
        """Stop stepping and write the last sample."""
        self._stop.set()
        self.record()

    def _loop(self) -> None:
        while not self._stop.wait(self.m.opts.step_s):
            try:
                self.tick()
            except Exception:
                log.exception("migration tick failed")

    def tick(self) -> None:
        m = self.m
        now = time.monotonic()
        done = m.bytes_done()
        t_prev, b_prev = self._last_bytes
        if now > t_prev:
            inst = max(0.0, (done - b_prev) / (now - t_prev))
            self.throughput = inst if self.throughput == 0 else 0.6 * self.throughput + 0.4 * inst
        self._last_bytes = (now, done)
        self._note_progress(done)
        if m.rate_policy is not None:
            if m.phase == Phase.SNAPSHOT and m.pipe is not None and not m.pipe.done:
                rate, report = m.rate_policy.step(now, done, mark=self.marks.mark(m.pipe, m.rate_policy, now),
                                                  bytes_total=m.bytes_total)
                m.pipe.set_rate(rate)
                if m.pipe.commit_locked:
                    report = report.with_note("backup holds the commit lock: copying unthrottled")
                elif m.pipe.prereading:
                    report = report.with_note(f"reading the backup tool into memory at this rate "
                                              f"({m.pipe.preread_bytes / 1e6:.1f} MB)")
                m.record(ControllerStepped(report))
            elif m.phase == Phase.VERIFY and m.verification is not None and m.verification.result is None:
                # Verification reads every row on both servers: paced like the copy, same setpoint and guard.
                v = m.verification
                rate, report = m.rate_policy.step(now, v.bytes_done, bytes_total=v.bytes_total)
                v.set_rate(rate)
                m.record(ControllerStepped(report.with_note("verifying")))
            elif m.result is None and m.phase not in (Phase.PENDING, Phase.PREFLIGHT):
                # Outside the copy the controller has nothing to steer, but the latency still tells
                # what prepare, delta and the freeze cost the clients: keep recording it.
                sample = m.rate_policy.source.read()
                prev = m.controller_state or StepReport(t=now, setpoint_s=m.rate_policy.controller.setpoint_s,
                                                        rate_bytes_per_s=None)
                m.record(ControllerStepped(replace(prev, t=now, latency_s=sample.latency_s,
                                                  note="observing (no copy in this phase)").with_sides(
                    m.rate_policy.source.sides)))
        self.record()

    def _note_progress(self, done: int) -> None:
        """Progress is anything that moves the migration on: a phase begun, bytes copied, a delta round,
        a handover step or attempt, a verified table; while ready, every second the target keeps up (waiting
        for the cutover is the phase's work: a lagging target is its own alert)."""
        m = self.m
        if m.phase == Phase.READY and m.ready is not None and m.ready.keeps_up:
            self.progress_at = time.time()
            return
        mark = (m.phase, done, m.rounds_done, m.attempts_made, m.handover_step,
                m.verification.tables_done if m.verification is not None else 0)
        if mark != self._progress_mark:
            self._progress_mark = mark
            self.progress_at = time.time()

    def record(self) -> None:
        m = self.m
        sample = {"t": round(time.monotonic() - m.created, 3), "ts": utc(), "phase": m.phase,
                  "bytes_done": m.bytes_done(), "bytes_total": m.bytes_total,
                  "rate_bytes_per_s": m.current_rate(), "throughput_bytes_per_s": round(self.throughput, 1)}
        if m.pipe is not None and m.pipe.commit_locked and not m.pipe.done:
            sample["commit_locked"] = True  # the rate above is not applied: the copy runs unthrottled
        if m.pipe is not None:
            locked_bytes, locked_s = m.pipe.unthrottled
            if locked_bytes or locked_s:  # so far, under the commit lock: a lock shorter than a sample too
                sample["unthrottled_bytes"], sample["unthrottled_s"] = locked_bytes, round(locked_s, 3)
        if m.pipe is not None and m.pipe.preread_bytes:
            sample["preread_bytes"] = m.pipe.preread_bytes  # the backup tool's program, read before it ran
        if m.finishing_reason:
            sample["note"] = m.finishing_reason
        if m.finished_at is not None:  # the last sample: the duration the summary shows (slacker plot's title)
            sample["duration_s"] = round(m.finished_at - m.created, 3)
        if m.controller_state is not None:
            sample.update(m.controller_state.series())
        if m.phase == Phase.VERIFY and m.verification is not None:  # bytes_done above is the verification's
            sample["bytes_total"] = m.verification.bytes_total
            sample["verify_tables_done"] = m.verification.tables_done
        if m.phase == Phase.READY and m.ready is not None:  # the lag and what the wait keeps on the source
            sample["ready_lag_ms"] = m.ready.lag_ms
            sample["ready_binlog_bytes"] = m.ready.binlog_bytes
        if m.phase == Phase.DELTA and m.delta_stats:  # the MPL and apply rate over time
            sample["delta_mpl"] = m.delta_stats.get("mpl")
            sample["apply_tps"] = m.delta_stats.get("apply_tps")
        with self._lock:
            self.series_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.series_path, "a") as f:
                f.write(json.dumps(sample) + "\n")
