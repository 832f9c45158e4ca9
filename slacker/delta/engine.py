"""The delta applier on the engine's own replication, serial or parallel, with catch-up mode and an adaptive MPL.

MariaDB applies the source's row events itself; with slave_parallel_threads > 0
it runs transactions that did not conflict on the source on several worker
threads and commits them in source order (optimistic mode rolls back and retries
a transaction that hits a conflict), which is Madeus's concurrent syncset replay
done inside the server. A sampler thread measures the apply rate while there is a
backlog and, with --delta-mpl auto, lets an MplController choose the thread count.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import pymysql

from ..errors import MigrationFailed
from ..mariadb import durability, replication
from . import gtid as gtids
from .applier import ReplicationApplier, SourceLink
from .mpl import MplController

log = logging.getLogger("slacker.delta.engine")

MPL_BOUNDS = (1, 16)
PARALLEL_MODE = "optimistic"


@dataclass
class ApplySample:
    t_s: float            # since the applier started
    mpl: int              # worker threads (0: serial, in the SQL thread)
    apply_tps: float      # transactions applied per second over the period
    backlog: int          # transactions fetched but not applied at the period's end
    saturated: bool       # a backlog all period long: the rate is the applier's capacity
    reason: str = ""      # what the MPL controller decided after it


class EngineApplier(ReplicationApplier):
    """kind "serial" (one SQL thread) or "concurrent" (parallel workers, MPL fixed or "auto")."""

    def __init__(self, connect: Callable, kind: str = "serial", mpl: int | str = "auto",
                 catchup_mode: bool = True, datadir: Path | str | None = None, period_s: float = 1.0,
                 mpl_bounds: tuple[int, int] = MPL_BOUNDS) -> None:
        super().__init__(connect)
        self.kind = kind
        self.name = kind
        self.auto = kind == "concurrent" and mpl == "auto"
        lo, hi = mpl_bounds
        if kind == "serial":
            self.mpl = 0
        elif self.auto:
            self.mpl = min(hi, max(lo, 4))
        else:
            self.mpl = int(mpl)
        self.controller = MplController(lo, hi, start=self.mpl) if self.auto else None
        self.catchup_mode = catchup_mode
        self.relaxed = False
        self.datadir = datadir
        self.period_s = period_s
        self.samples: list[ApplySample] = []
        self._lock = threading.RLock()   # held while the slave is reconfigured, so checks do not see it stopped
        self._stop = threading.Event()
        self._paused = False             # between stop_at and resume: the MPL must not restart the slave
        self._sampler: threading.Thread | None = None
        self._t0 = time.monotonic()

    # --- catch-up mode ------------------------------------------------------------------------
    def relax_durability(self) -> None:
        with self._lock:
            self._sql_do(lambda conn: durability.relax_durability(conn))
            self.relaxed = True

    def restore_durability(self) -> dict:
        """Back to durable commits, everything applied so far on disk. Safe to call twice."""
        with self._lock:
            out = self._sql_do(lambda conn: durability.restore_durability(conn, self.datadir))
            self.relaxed = False
            return out

    def _sql_do(self, fn):
        with self._conn_lock:
            if self._conn is None:
                self._conn = self._connect()
            try:
                return fn(self._conn)
            except pymysql.err.MySQLError as exc:
                self._close_locked()
                raise MigrationFailed("configuring the target's applier failed", str(exc.args[-1]),
                                  "the source is untouched; retry", phase="delta") from None
            except durability.DurabilityError as exc:
                raise MigrationFailed("the target could not leave catch-up mode durably", str(exc),
                                      "the source is untouched; retry (check the target's disk)",
                                      phase="delta") from None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, source: SourceLink, start_gtid: str) -> None:
        with self._lock:
            self._call(replication.stop_all_slaves)
            self._call(replication.set_parallel_mode, PARALLEL_MODE)
            self._call(replication.set_parallel_threads, self.mpl)
            if self.catchup_mode:
                self.relax_durability()
            super().start(source, start_gtid)
        self._t0 = time.monotonic()
        self._sampler = threading.Thread(target=self._sample_loop, name="delta-sampler", daemon=True)
        self._sampler.start()

    def set_mpl(self, n: int) -> None:
        """Change the number of parallel workers: the SQL thread stops and starts again, the fetch goes on.

        Only the SQL thread: a full STOP SLAVE / START SLAVE with GTID positions throws the
        relay log away and fetches the whole backlog from the source again (measured: the
        apply rate fell to a third for the next 2-4 s after every change, so an adaptive
        loop that searched by restarting the applier paid that on every probe).
        """
        with self._lock:
            if n == self.mpl or self._paused:
                return
            self._call(replication.stop_slave, self.CONNECTION, sql_thread_only=True)
            self._call(replication.set_parallel_threads, n)
            self._call(replication.start_slave, self.CONNECTION, sql_thread_only=True)
            self.mpl = n

    def _check_running(self) -> None:
        with self._lock:
            super()._check_running()

    def stop_at(self, final_gtid: str) -> None:
        with self._lock:
            self._paused = True
            super().stop_at(final_gtid)
            if self.relaxed:
                # Safety net: the migration restores durability before the freeze; if it did not,
                # the target must not be promoted with relaxed commits.
                self.restore_durability()

    def resume(self) -> None:
        with self._lock:
            super().resume()
            self._paused = False

    def hold(self) -> str:
        """Held for verification: stopped, and serial until released, so the stop lands exactly."""
        with self._lock:
            self._paused = True
            applied = super().hold()
            self._call(replication.set_parallel_threads, 0)
            return applied

    def release(self) -> None:
        with self._lock:
            self._call(replication.set_parallel_threads, self.mpl)
            super().release()
            self._paused = False

    def detach(self) -> None:
        self._stop.set()
        with self._lock:
            try:
                self._call(replication.set_parallel_threads, 0)
            except MigrationFailed:
                pass
            super().detach()

    def abort(self) -> None:
        self._stop.set()
        super().abort()

    # --- measuring and adapting ----------------------------------------------------------------
    def _sample_loop(self) -> None:
        conn = None
        prev = None
        try:
            while not self._stop.wait(self.period_s):
                try:
                    if conn is None:
                        conn = self._connect()
                    with self._lock:
                        if self._paused:
                            prev = None
                            continue
                        applied, fetched = replication.positions(conn, self.CONNECTION)
                        mpl = self.mpl
                    now = time.monotonic()
                except Exception:  # noqa: BLE001 - a failed sample is skipped; wait_for reports real trouble
                    conn, prev = None, None
                    continue
                backlog = gtids.transactions_between(applied, fetched)
                if prev is not None and prev[3] == mpl:
                    t_prev, applied_prev, backlog_prev, _ = prev
                    done = gtids.transactions_between(applied_prev, applied)
                    rate = done / max(1e-6, now - t_prev)
                    # Saturated: the workers never ran dry during the period.
                    saturated = backlog_prev > 0 and backlog > max(8, mpl)
                    s = ApplySample(round(now - self._t0, 3), mpl, round(rate, 1), backlog, saturated)
                    if saturated and self.controller is not None:
                        d = self.controller.observe(mpl, rate)
                        s.reason = d.reason
                        if d.mpl != mpl:
                            try:
                                self.set_mpl(d.mpl)
                            except MigrationFailed as exc:
                                log.warning("could not change the MPL: %s", exc.one_line())
                    self.samples.append(s)
                    del self.samples[:-600]
                prev = (now, applied, backlog, self.mpl)
        finally:
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    def stats(self) -> dict:
        """What the round loop reports and judges convergence on."""
        sat = [s for s in self.samples if s.saturated]
        if self.controller is not None and self.controller.best():
            best_mpl, best_tps = self.controller.best()
            explored = self.controller.explored
        elif sat:
            best = max(sat, key=lambda s: s.apply_tps)
            best_mpl, best_tps, explored = best.mpl, best.apply_tps, True
        else:
            best_mpl, best_tps, explored = self.mpl, None, False
        return {"applier": self.kind, "mpl": self.mpl, "mpl_mode": "auto" if self.auto else "fixed",
                "catchup": self.relaxed, "apply_tps": sat[-1].apply_tps if sat else None,
                "best_apply_tps": round(best_tps, 1) if best_tps is not None else None, "best_mpl": best_mpl,
                "explored": explored, "samples": [asdict(s) for s in self.samples[-30:]]}
