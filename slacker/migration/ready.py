"""The ready phase: a converged migration that waits for the operator's cutover (`--cutover` other than auto).

Nothing is frozen and the source serves as before; the target keeps applying the source's changes. Once a
second this role reads the source's GTID position and asks the target whether it has applied it (a short
probe, never a long wait), so the lag it reports is end to end: from the moment a position was the source's
latest to the moment the target had applied it. A position the target has not reached yet keeps its clock:
the lag of a target that fell behind grows second by second until it catches up. An idle source has nothing
pending, so its lag is the probe's own round trip.

What the plan says (slacker.migration.cutover) decides each second: go (the handover follows, with its last
delta rounds), keep waiting (the reason is in `status`), or end the wait (`--cutover-timeout ...,abort`: the
move rolls back and the source never stopped serving). What the wait costs the source, the binlog it keeps
for the target and the rate it streams, is shown beside the lag.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime, timezone

from ..delta import gtid as gtids
from ..errors import CatchUpTimeout
from ..mariadb import ops
from ..ycsb.metrics import percentile_sorted
from .cutover import CutoverPlan, KEEPS_UP_LAG_S
from .options import MigrationAborted
from .protocol import Phase
from .seams import ReadyState, Seam

PROBE_S = 0.8           # the target's wait for the position read this second: within the one-second step
LAG_WINDOW = 3600       # seconds of lag kept for the p99 and the maximum (the last hour)
COST_WINDOW_S = 10.0    # the binlog rate is over this many seconds


class CutoverAsked:
    """`slacker migrate --cutover-now [--verify]`, from the API's thread to the migration's."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.verify = False  # compare both sides online first (--verify with --cutover-now)

    def ask(self, verify: bool = False) -> None:
        self.verify = self.verify or verify
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class ReadyWait:
    """Waits, ready, until the plan says go (returns the reason) or the wait ends (MigrationAborted)."""

    def __init__(self, m: Seam, plan: CutoverPlan, start: tuple[str, int], now_asked: CutoverAsked,
                 wall=lambda: datetime.now(timezone.utc), clock=time.monotonic, already_s: float = 0.0) -> None:
        self.m, self.plan = m, plan
        self.start = start          # (binlog file, offset) the delta counts from: what the source keeps for us
        self.now_asked = now_asked  # `slacker migrate --cutover-now`
        self.wall, self.clock = wall, clock
        self.already_s = already_s  # ready before an agent restart: the timeout counts from the first moment
        self.lags: deque[float] = deque(maxlen=LAG_WINDOW)
        self._pending: deque[tuple[str, float]] = deque(maxlen=LAG_WINDOW)  # (position, read at) not applied yet
        self._binlog: deque[tuple[float, int]] = deque()  # (time, binlog bytes kept) for the rate

    def run(self) -> str:
        m = self.m
        m.enter(Phase.READY)
        t0 = self.clock() - self.already_s
        conn = m.source.connect(timeout_s=10)
        try:
            while True:
                m.check_abort()
                step_t = self.clock()
                lag_s, kept = self._measure(conn)
                ready_for = self.clock() - t0
                behind = bool(self._pending)
                decision = self.plan.decide(self.wall(), ready_for, lag_s, now_asked=self.now_asked.is_set(),
                                            behind=behind)
                m.record(self._state(ready_for, lag_s, kept, decision.why, behind,
                                     timed_out=ready_for >= self.plan.timeout_s))
                if decision.go:
                    return decision.why
                if decision.end:
                    raise MigrationAborted(f"migration {m.id}: no cutover within --cutover-timeout",
                                           decision.why, "the source keeps serving; migrate again with another "
                                           "--cutover, or --cutover-timeout DURATION,wait", phase=Phase.READY)
                self._sleep_until(step_t + m.opts.step_s)
        finally:
            ops.close_quietly(conn)

    def _sleep_until(self, t: float) -> None:
        while not self.now_asked.is_set():
            left = t - self.clock()
            if left <= 0:
                return
            self.m.wait(min(0.2, left))  # ended early by an abort: the loop's check raises
            self.m.check_abort()

    def _measure(self, conn) -> tuple[float | None, int]:
        """This second's end-to-end lag and the binlog bytes the source keeps for the target.

        Each second adds the source's position to the positions not applied yet (one a second at most, the
        oldest read first); the target is asked about the oldest, then the next, until one is not there yet.
        The lag is the age of the oldest position still missing, or, with none missing, how long the newest
        took to arrive: a target half a minute behind shows half a minute, not the age of the last read."""
        now = self.clock()
        pos = ops.binlog_position(conn)
        if not self._pending or self._pending[-1][0] != pos.gtid:
            self._pending.append((pos.gtid, now))
        lag = None
        timeout = PROBE_S
        while self._pending:
            gtid, read_at = self._pending[0]
            if not self._probe(gtid, timeout):
                break
            self._pending.popleft()
            lag = self.clock() - read_at
            timeout = 0.0  # the rest only if they are there already: this second's probe has had its wait
        if self._pending:
            lag = self.clock() - self._pending[0][1]
        self.lags.append(lag)
        kept = gtids.binlog_bytes_between(list(pos.logs), self.start, (pos.file, pos.pos))
        self._binlog.append((now, kept))
        while len(self._binlog) > 2 and now - self._binlog[0][0] > COST_WINDOW_S:
            self._binlog.popleft()
        return lag, kept

    def _probe(self, gtid: str, timeout_s: float) -> bool:
        try:
            doc = self.m.target("wait", {"gtid": gtid, "timeout_s": timeout_s, "probe": True},
                                timeout_s=timeout_s + 30)
        except CatchUpTimeout:  # a target one protocol version older answers a probe that did not arrive so
            return False
        return bool(doc.get("caught_up", True))

    def _binlog_rate(self) -> float:
        (t0, b0), (t1, b1) = self._binlog[0], self._binlog[-1]
        return max(0.0, (b1 - b0) / (t1 - t0)) if t1 > t0 else 0.0

    def _state(self, ready_for: float, lag_s: float | None, kept: int, why: str, behind: bool,
               timed_out: bool) -> ReadyState:
        lags = [x for x in self.lags if x is not None]
        recent = lags[-10:]
        return ReadyState(
            ready_for_s=round(ready_for, 1), lag_ms=None if lag_s is None else round(lag_s * 1000, 1),
            lag_p99_ms=_ms(percentile_sorted(sorted(lags), 99) if lags else None), lag_max_ms=_ms(max(lags) if lags else None),
            keeps_up=bool(recent) and max(recent) <= KEEPS_UP_LAG_S and not behind, behind=behind, waiting_for=why,
            past_timeout=timed_out, binlog_bytes=kept, binlog_bytes_per_s=round(self._binlog_rate(), 1),
            cutover=self.plan.spec(), cutover_timeout=self.plan.timeout_spec())


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000, 1)
