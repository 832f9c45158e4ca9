"""The target's half of online verification: a consistent snapshot at exactly the source's position.

The source asks `hold` (the applier stops; the source then opens its own snapshot, which can only
be at or after what the target applied), then `open` with the snapshot's GTID position: the
applier applies up to exactly there and stops, a snapshot is opened on that state, and the
applier resumes at once. Chunks are then summed inside the snapshot while the delta keeps
applying; `close` ends it.
"""

from __future__ import annotations

import threading

from ..errors import Conflict
from ..mariadb import ops, rowsums


class TargetVerifier:
    def __init__(self, connect, applier, schema: str | None = None) -> None:
        self._connect = connect  # an admin connection to the incoming tenant
        self.applier = applier
        self.schema = schema  # a shared tenant's database: only its tables are compared
        self.conn = None
        self.position = ""
        self.plans: dict[str, rowsums.TablePlan] = {}
        self._held = False
        self._lock = threading.Lock()

    def hold(self) -> dict:
        with self._lock:
            self._held = True
            return {"applied": self.applier.hold()}

    def open(self, gtid: str, timeout_s: float) -> dict:
        with self._lock:
            if not self._held:
                raise Conflict("verification was not held on the target", "hold comes before open", "")
            try:
                self.applier.advance_to(gtid, timeout_s)
                self.conn = self._connect()
                rowsums.open_plain_snapshot(self.conn)
                self.position = gtid
            finally:
                self._held = False
                self.applier.release()  # the snapshot holds the view; the delta goes on meanwhile
            self.plans = {p.label: p for p in rowsums.table_plans(self.conn, self.schema)}
            return {"position": gtid, "tables": {n: p.shape for n, p in self.plans.items()}}

    def chunk(self, table: str, lo: list | None, hi: list | None) -> list[int]:
        with self._lock:
            if self.conn is None:
                raise Conflict("no verification snapshot is open on the target", "open comes first", "")
            plan = self.plans.get(table)
            if plan is None:
                raise Conflict(f"table {table} is not on the target", "", "")
            return list(rowsums.chunk_sum(self.conn, plan, rowsums.decode_key(lo), rowsums.decode_key(hi)))

    def close(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                try:
                    self.applier.release()
                except Exception:  # noqa: BLE001 - closing is best effort; a stopped applier shows in the rounds
                    pass
            conn, self.conn = self.conn, None
            ops.close_quietly(conn)
