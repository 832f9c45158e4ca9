"""Prometheus metrics of the migrations an agent runs as their source, read at scrape time.

One series per running migration (phase, progress, rate, freeze against its budget, the controller's
verdict, time past the flip) and per-node counters of finished migrations and handover attempts, so
an alert sees a migration end even after it is forgotten (deploy/prometheus/slacker-rules.yml).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from .protocol import Phase

LABELS = ["node", "migration", "tenant"]
PAST_FLIP_PHASES = (Phase.CLEANUP, Phase.FINISHING)


def past_flip_s(rec, now: float) -> float:
    """Seconds since the directory named the target (0 before): from the first phase after the flip.
    `rec` is the migration's record (slacker.migration.record)."""
    if not rec.past_point_of_no_return:
        return 0.0
    starts = [p.start_s for p in rec.phases if p.name in PAST_FLIP_PHASES]
    start = starts[0] if starts else (rec.phases[-1].start_s if rec.phases else 0.0)
    return max(0.0, now - rec.created - start)


def last_freeze_s(rec) -> float:
    """The last handover attempt's freeze in seconds (NaN: no attempt yet)."""
    return rec.attempts[-1].freeze_ms / 1000 if rec.attempts else math.nan


class Tally:
    """Per-node counters of migrations that ended here; they outlive the migrations they count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.results: Counter[str] = Counter({"succeeded": 0, "failed": 0, "aborted": 0})
        self.attempts: Counter[str] = Counter({"flipped": 0, "over budget": 0, "failed": 0})
        self.over_budget = 0

    def finished(self, rec, max_freeze_s: float) -> None:
        """A migration ended: its record, and the freeze budget its attempts are held against."""
        budget_ms = max_freeze_s * 1000
        with self._lock:
            self.results[rec.result or "unknown"] += 1
            for a in rec.attempts:
                self.attempts[a.outcome] += 1
                self.over_budget += a.freeze_ms > budget_ms

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], int]:
        with self._lock:
            return dict(self.results), dict(self.attempts), self.over_budget


class MigrationCollector(Collector):
    def __init__(self, node: str, service) -> None:
        self.node = node
        self.service = service

    def collect(self):
        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=LABELS + list(extra))

        phase = gauge("slacker_migration_phase", "1 for the phase a running migration is in (its target node "
                      "in `target`)", ("target", "phase"))
        phase_s = gauge("slacker_migration_phase_seconds", "Seconds in the current phase")
        done = gauge("slacker_migration_copied_bytes", "Bytes the current phase has moved: the snapshot stream "
                     "(snapshot, copy) or the rows summed on both sides (verify)")
        size = gauge("slacker_migration_copy_size_bytes", "Bytes the current phase expects to move (0: unknown)")
        rate = gauge("slacker_migration_rate_bytes_per_second",
                     "Copy rate limit in force (NaN: unthrottled; 0: paused)")
        throughput = gauge("slacker_migration_throughput_bytes_per_second", "Copy progress, a decaying average")
        progress = gauge("slacker_migration_last_progress_timestamp_seconds",
                         "Unix time of the last progress: a phase begun, bytes copied, a delta round, a "
                         "handover step or attempt")
        unreachable = gauge("slacker_migration_setpoint_unreachable",
                            "1 if the controller's verdict is that the copy cannot finish under its setpoint")
        freeze = gauge("slacker_migration_freeze_seconds", "The last handover attempt's freeze (NaN: none yet)")
        budget = gauge("slacker_migration_freeze_budget_seconds", "The migration's --max-freeze")
        past = gauge("slacker_migration_past_flip_seconds",
                     "Seconds since the directory named the target while the source still finishes (0: before "
                     "the flip)")
        ready_s = gauge("slacker_migration_ready_seconds", "Seconds a migration has waited ready for its cutover "
                        "(--cutover other than auto; 0: not ready)")
        ready_lag = gauge("slacker_migration_ready_lag_seconds", "A ready migration's end-to-end lag, from the "
                          "source's position to the target having applied it (NaN: not ready)")
        ready_binlog = gauge("slacker_migration_ready_binlog_bytes", "Binlog a ready migration keeps on its source "
                             "for the target (0: not ready)")
        now = time.monotonic()
        for m in self.service.active():
            rec = m.record
            key = [self.node, m.id, m.tenant_id]
            phase.add_metric(key + [m.opts.target, rec.phase], 1)
            phase_s.add_metric(key, now - rec.created - rec.phases[-1].start_s if rec.phases else now - rec.created)
            done.add_metric(key, m.bytes_done())
            size.add_metric(key, (m.verification.bytes_total if rec.phase == Phase.VERIFY and m.verification
                                  else rec.bytes_total) or 0)
            r = m.current_rate()
            rate.add_metric(key, math.nan if r is None else r)
            throughput.add_metric(key, m.telemetry.throughput)
            progress.add_metric(key, m.telemetry.progress_at)
            verdict = rec.controller_state is not None and rec.controller_state.verdict
            unreachable.add_metric(key, 1 if verdict else 0)
            freeze.add_metric(key, last_freeze_s(rec))
            budget.add_metric(key, m.opts.max_freeze_s)
            past.add_metric(key, past_flip_s(rec, now))
            ready = rec.ready if rec.phase == Phase.READY else None
            ready_s.add_metric(key, ready.ready_for_s if ready is not None else 0.0)
            ready_lag.add_metric(key, ready.lag_ms / 1000 if ready is not None and ready.lag_ms is not None
                                 else math.nan)
            ready_binlog.add_metric(key, ready.binlog_bytes if ready is not None else 0)
        results, attempts, over = self.service.tally.snapshot()
        ended = CounterMetricFamily("slacker_migrations_finished", "Migrations this node ran as source that "
                                    "ended, by result", labels=["node", "result"])
        for result, n in sorted(results.items()):
            ended.add_metric([self.node, result], n)
        tries = CounterMetricFamily("slacker_migration_handover_attempts", "Handover attempts of migrations "
                                    "that ended, by outcome", labels=["node", "outcome"])
        for outcome, n in sorted(attempts.items()):
            tries.add_metric([self.node, outcome.replace(" ", "_")], n)
        over_budget = CounterMetricFamily("slacker_migration_freezes_over_budget",
                                          "Handover attempts whose freeze ran past --max-freeze", labels=["node"])
        over_budget.add_metric([self.node], over)
        yield from (phase, phase_s, done, size, rate, throughput, progress, unreachable, freeze, budget, past,
                    ready_s, ready_lag, ready_binlog, ended, tries, over_budget)
        yield from self._kept()

    def _kept(self):
        """The old copies this node keeps (--keep-source): one series each, read at scrape time."""
        labels = ["node", "tenant", "owner"]
        left = GaugeMetricFamily("slacker_kept_copy_seconds_left", "Seconds until a kept old copy is released",
                                 labels=labels)
        lag = GaugeMetricFamily("slacker_kept_copy_lag_seconds", "A kept copy's replication lag behind the owner "
                                "(Seconds_Behind_Master; NaN: not replicating)", labels=labels)
        up = GaugeMetricFamily("slacker_kept_copy_replicating", "1 while a kept copy replicates from the owner",
                               labels=labels)
        for k in self.service.kept.list():
            key = [self.node, k["tenant"], str(k.get("owner") or "")]
            left.add_metric(key, k.get("left_s") or 0.0)
            lag.add_metric(key, math.nan if k.get("lag_s") is None else k["lag_s"])
            up.add_metric(key, 1 if k.get("replicating") else 0)
        yield from (left, lag, up)
