"""Online verification: source and target compared at one GTID position while the source serves.

Run by the source's phase machine between the delta rounds and the handover (phase `verify`).
The target's applier is held; the source opens a consistent snapshot (its GTID position is
what MariaDB reports for it); the target applies up to exactly that position, opens a snapshot
there and applies on. Both sides then sum the same primary-key-ordered chunks inside their
snapshots, in parallel, paced by a token bucket whose rate the migration's controller sets
every step (the copy's setpoint and target guard), or the fixed --rate. A table without a
primary key is summed whole. The first differing chunk fails the migration, naming the table
and its key range; the source never stopped serving, and the rollback removes the target.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import MigrationFailed
from ..mariadb import ops, rowsums
from ..transfer.bucket import Aborted, TokenBucket

log = logging.getLogger("slacker.verify")

# Rows per chunk: the migration's verify_chunk_bytes (default 2 MiB: small enough that pacing,
# progress and an abort react within a controller step, large enough that the per-chunk round
# trip is noise) at the average row size measured so far in the table; the first chunk of a
# table is small, since nothing is measured yet (InnoDB's statistics lag on fresh tables).
FIRST_CHUNK_ROWS = 200
CHUNK_ROWS_BOUNDS = (10, 100_000)


def chunk_rows(chunk_bytes: int, rows_seen: int, bytes_seen: int) -> int:
    if rows_seen <= 0 or bytes_seen <= 0:
        return FIRST_CHUNK_ROWS
    lo, hi = CHUNK_ROWS_BOUNDS
    return int(min(hi, max(lo, chunk_bytes * rows_seen / bytes_seen)))


def key_text(plan: rowsums.TablePlan, lo: list | None, hi: list | None) -> str:
    """The chunk's primary-key range as a user reads it: `id > 800 and <= 1600`, `id <= 800`, `all rows`."""
    cols = ",".join(plan.pk)
    if len(plan.pk) > 1:
        cols = f"({cols})"

    def show(v):
        return "(" + ",".join(str(x) for x in v) + ")" if len(v) > 1 else str(v[0])

    if lo is None and hi is None:
        return "all rows"
    parts = ([f"> {show(lo)}"] if lo is not None else []) + ([f"<= {show(hi)}"] if hi is not None else [])
    return f"{cols} " + " and ".join(parts)


class OnlineVerification:
    def __init__(self, m) -> None:
        self.m = m  # the migration as its roles see it (slacker.migration.seams): its source side, target
        # steps, rate policy and options; its verdict is `result`, which the machine records
        self.bytes_total = 0
        self.bytes_done = 0
        self.rows_done = 0
        self.chunks_done = 0
        self.tables_total = 0
        self.tables_done = 0
        self.table = ""
        self.position = ""
        self.whole_tables: list[str] = []  # without a primary key: summed whole
        self.duration_s: float | None = None
        self.held_s: float | None = None  # how long the target's applier was held to open its snapshot
        self.result: str | None = None    # "equal" or "differ"
        self.bucket = TokenBucket(self._initial_rate())
        self._table_end = 0

    def _initial_rate(self) -> float | None:
        m = self.m
        if m.rate_policy is not None:
            return m.rate_policy.initial_rate()
        return m.opts.rate_bytes_per_s

    @property
    def rate(self) -> float | None:
        return self.bucket.rate

    def set_rate(self, rate: float | None) -> None:
        self.bucket.set_rate(rate)

    def to_dict(self) -> dict:
        return {"bytes_done": self.bytes_done, "bytes_total": self.bytes_total, "rows": self.rows_done,
                "chunks": self.chunks_done, "tables_done": self.tables_done, "tables_total": self.tables_total,
                "table": self.table, "position": self.position, "whole_tables": self.whole_tables,
                "rate_bytes_per_s": self.rate, "duration_s": self.duration_s, "target_held_s": self.held_s,
                "result": self.result}

    # ---- the run -------------------------------------------------------------------------------
    def run(self) -> None:
        m = self.m
        t0 = time.monotonic()
        conn = m.source.connect(timeout_s=10)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"verify-{m.id}")
        held = False
        try:
            th = time.monotonic()
            m.target("verify", {"op": "hold"}, timeout_s=60)
            held = True  # from here on the target must be told to close (it releases a held applier)
            self.position = rowsums.open_snapshot(conn)
            doc = m.target("verify", {"op": "open", "gtid": self.position, "timeout_s": m.opts.round_timeout_s},
                            timeout_s=m.opts.round_timeout_s + 30)
            self.held_s = round(time.monotonic() - th, 3)
            plans = rowsums.table_plans(conn, m.source.verify_schema)
            self._same_tables(plans, doc["tables"])
            self.tables_total = len(plans)
            self.bytes_total = sum(p.data_bytes for p in plans)
            self.whole_tables = [p.label for p in plans if not p.pk]
            log.info("migration %s: verifying %d tables (%d bytes) at %s", m.id, len(plans), self.bytes_total,
                     self.position)
            done_bytes = 0
            for plan in plans:
                self.table = plan.label
                self._table(conn, pool, plan)
                self.tables_done += 1
                done_bytes += plan.data_bytes
                self.bytes_done = done_bytes  # the estimate per chunk, set right at each table's end
            self.result = "equal"
        except Aborted:
            m.check_abort()
            raise
        finally:
            self.table = ""
            self.duration_s = round(time.monotonic() - t0, 3)
            pool.shutdown(wait=False, cancel_futures=True)
            ops.close_quietly(conn)
            if held:
                try:
                    m.peer.step("verify", {"op": "close"}, timeout_s=30, phase=m.phase)
                except Exception as exc:  # noqa: BLE001 - a failure already on its way matters more
                    log.warning("migration %s: closing the target's verification snapshot failed: %s", m.id, exc)

    def abort(self) -> None:
        self.bucket.close()

    def _same_tables(self, plans: list[rowsums.TablePlan], target_tables: dict) -> None:
        src = {p.label: p.shape for p in plans}
        only_src = sorted(set(src) - set(target_tables))
        only_dst = sorted(set(target_tables) - set(src))
        shape = sorted(n for n in set(src) & set(target_tables) if src[n] != target_tables[n])
        why = []
        if only_src:
            why.append(f"missing on the target: {', '.join(only_src[:5])}")
        if only_dst:
            why.append(f"only on the target: {', '.join(only_dst[:5])}")
        if shape:
            why.append(f"columns differ: {', '.join(shape[:5])}")
        if why:
            self._differ("; ".join(why))

    def _table(self, conn, pool, plan: rowsums.TablePlan) -> None:
        """The table's chunks, pipelined: the target sums chunk k (its key range known once the source
        summed it) while the source sums chunk k+1; each is compared, then paid for, in order."""
        m = self.m
        self._table_end = self.bytes_done + plan.data_bytes  # progress never runs past the table's file
        if not plan.pk:
            fut = self._ask_target(pool, plan, None, None)
            self._settle(plan, None, None, rowsums.chunk_sum(conn, plan, None, None), fut)
            return
        lo, rows_seen, bytes_seen, pending = None, 0, 0, None
        while True:
            m.check_abort()
            rows = chunk_rows(m.opts.verify_chunk_bytes, rows_seen, bytes_seen)
            if len(plan.pk) == 1:  # one statement reads each row once and names the chunk's last key
                src, hi = rowsums.next_chunk_sum(conn, plan, lo, rows)
                fut = self._ask_target(pool, plan, lo, hi)
            else:  # a composite key: its upper bound first, then both sides at once
                hi = rowsums.next_boundary(conn, plan, lo, rows)
                fut = self._ask_target(pool, plan, lo, hi)
                src = rowsums.chunk_sum(conn, plan, lo, hi)
            if pending is not None:
                self._settle(*pending)
            pending = (plan, lo, hi, src, fut)
            rows_seen, bytes_seen = rows_seen + src[0], bytes_seen + src[3]
            if hi is None:
                break
            lo = hi
        self._settle(*pending)

    def _ask_target(self, pool, plan, lo, hi):
        m = self.m
        body = {"op": "chunk", "table": plan.label, "lo": rowsums.encode_key(lo), "hi": rowsums.encode_key(hi)}
        return pool.submit(m.peer.step, "verify", body, 600, m.phase)

    def _settle(self, plan, lo, hi, src: tuple, fut) -> None:
        """Compare a chunk with the target's answer, then pay for its row text at the current rate (the
        bucket grants a burst at a time; 0 = paused)."""
        m = self.m
        dst = tuple(fut.result(timeout=630)["sum"])
        if src[:3] != dst[:3]:
            where = key_text(plan, lo, hi) if plan.pk else "all rows (no primary key)"
            self._differ(f"{plan.label} rows {where}: source {src[0]} rows, target {dst[0]} rows, "
                         f"checksums {'equal' if src[1:3] == dst[1:3] else 'differ'}")
        left = src[3]
        while left > 0:
            m.check_abort()
            left -= self.bucket.take(left)
        self.rows_done += src[0]
        self.chunks_done += 1
        # Progress within a table is its row text compared and paid for so far.
        self.bytes_done = min(self._table_end, self.bytes_done + src[3])

    def _differ(self, why: str) -> None:
        self.result = "differ"
        raise MigrationFailed(f"verification failed at {self.position}", why,
                              "the source keeps serving and the target copy was removed; something changed the "
                              "target outside replication, or it is a bug (keep both agents' logs); migrate again")
