"""The delta-round policy: binlog rounds until what is left fits the freeze, or a verdict that it never will.

A round reads the source's position P(k) and waits until the target applied
it; what accumulated meanwhile is the next round. Rounds stop when the rest is
estimated (bytes left / measured apply speed) to fit half of --max-freeze, and
fail when they stop shrinking or the writes outrun the best apply rate.
"""

from __future__ import annotations

import time

from ..delta import gtid as gtids
from ..delta.convergence import ConvergenceJudge
from ..errors import MigrationFailed
from ..mariadb import ops
from .options import RoundReport
from .protocol import Phase
from .seams import RoundDone, Seam

# Until a round has been big enough to time, the apply speed is assumed to be this (bytes/s).
ASSUMED_APPLY_BYTES_PER_S = 1e6


class DeltaRounds:
    def __init__(self, m: Seam, start: tuple[tuple[str, int], str]) -> None:
        self.m = m  # the migration as its roles see it: options, source side, target steps; each round back
        self.position = start  # ((binlog file, offset), gtid) the next round counts from
        self.origin = start[0]  # the snapshot's (binlog file, offset): the source keeps its binlog from here
        self.apply_rate: float | None = None

    def run(self) -> None:
        m = self.m
        m.enter(Phase.DELTA)
        conn = m.source.connect(timeout_s=10)
        try:
            self._rounds(conn)
        finally:
            ops.close_quietly(conn)

    def _rounds(self, conn) -> None:
        m, opts = self.m, self.m.opts
        stalled = 0
        last_remaining = None
        judge, prev_t = ConvergenceJudge(), None
        for _ in range(opts.max_rounds):
            m.check_abort()
            prev, prev_gtid = self.position
            p = ops.binlog_position(conn)
            now = time.monotonic()  # the source's commit rate since the previous round
            write_tps = None
            if prev_t is not None:
                write_tps = round(gtids.transactions_between(prev_gtid, p.gtid) / max(1e-3, now - prev_t), 1)
            prev_t = now
            size = gtids.binlog_bytes_between(p.logs, prev, (p.file, p.pos))
            txns = gtids.transactions_between(prev_gtid, p.gtid)
            doc = m.target("wait", {"gtid": p.gtid, "timeout_s": opts.round_timeout_s},
                            timeout_s=opts.round_timeout_s + 30)
            dur = float(doc["waited_s"])
            if size > 0 and dur > 0.01:
                measured = size / dur
                self.apply_rate = measured if self.apply_rate is None else 0.5 * self.apply_rate + 0.5 * measured
            p2 = ops.binlog_position(conn)
            remaining = gtids.binlog_bytes_between(p2.logs, (p.file, p.pos), (p2.file, p2.pos))
            est_freeze_s = remaining / (self.apply_rate or ASSUMED_APPLY_BYTES_PER_S)
            stats = doc.get("applier") or {}
            n = m.rounds_done + 1
            m.record(RoundDone(RoundReport(n, txns, size, round(dur, 4), remaining, round(est_freeze_s * 1000, 1),
                                           write_tps, stats.get("apply_tps"), stats.get("mpl")), stats))
            self.position = ((p.file, p.pos), p.gtid)
            # Leave half the budget for the freeze's own fixed costs (lock, fence, flip).
            if est_freeze_s <= opts.max_freeze_s / 2:
                return
            verdict = judge.observe(n, write_tps, stats)  # writes vs best apply
            if verdict:
                raise MigrationFailed(verdict, "", "", phase=Phase.DELTA)
            if last_remaining is not None and remaining >= last_remaining:
                stalled += 1
                if stalled >= opts.max_stalled_rounds:
                    rates = (f"; writes {write_tps:,.0f}/s, apply {stats.get('apply_tps') or 0:,.0f}/s"
                             if write_tps is not None else "")
                    raise MigrationFailed(
                        "delta rounds stopped shrinking",
                        f"{stalled} rounds in a row left >= {last_remaining} bytes "
                        f"(estimated freeze {est_freeze_s * 1000:.0f}ms > {opts.max_freeze_s * 1000:.0f}ms)"
                        + rates,
                        "the write load outpaces the applier: raise --max-freeze, migrate at a quieter time",
                        phase=Phase.DELTA)
            else:
                stalled = 0
            last_remaining = remaining
        raise MigrationFailed("delta did not converge", f"{opts.max_rounds} rounds were not enough",
                              "raise --max-freeze or reduce the write load", phase=Phase.DELTA)
