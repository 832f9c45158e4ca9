"""Delta appliers: what catches a migration target up from its source's binlog.

`DeltaApplier` is the interface the target agent drives; `ReplicationApplier`
(the default) uses MariaDB's own GTID replication, which applies in source
commit order. A concurrent (syncset) applier plugs in behind the same methods.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..errors import CatchUpTimeout, MigrationFailed
from ..mariadb import replication
from . import gtid as gtids


@dataclass(frozen=True)
class SourceLink:
    """How the target reaches the source's binlog (credentials stay in memory and SQL, never argv)."""

    host: str
    port: int
    user: str
    password: str
    # TLS (MASTER_SSL): the cluster CA the source's certificate is verified against (address
    # included), and the target node's own certificate and key. None: plain text.
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None


def at_position(applied: str, want: str) -> bool:
    """Whether the GTID position `applied` is exactly `want` in every domain `want` names."""
    got = gtids.parse_gtid_pos(applied)
    return all(got.get(d, (0, -1))[1] == q for d, (_, q) in gtids.parse_gtid_pos(want).items())


class DeltaApplier(ABC):
    name = "abstract"
    relaxed = False  # in catch-up mode (fsyncs relaxed) now; an applier without that mode never is

    def stats(self) -> dict:
        """Apply rates and parallelism for the source's round reports; none by default."""
        return {}

    def restore_durability(self) -> dict:
        """Leave catch-up mode before the freeze (every commit durable again); what it cost. Nothing to do
        for an applier without that mode."""
        return {}

    @abstractmethod
    def start(self, source: SourceLink, start_gtid: str) -> None:
        """Begin applying the source's changes after `start_gtid`."""

    @abstractmethod
    def wait_for(self, gtid: str, timeout_s: float) -> float:
        """Block until `gtid` is applied; returns seconds waited. MigrationFailed on error/timeout."""

    @abstractmethod
    def applied(self) -> str:
        """The GTID position applied so far."""

    @abstractmethod
    def stop_at(self, final_gtid: str) -> None:
        """Stop applying, and check the target is at exactly `final_gtid` (the frozen source's last
        transaction). MigrationFailed if it is not."""

    @abstractmethod
    def resume(self) -> None:
        """Apply again after `stop_at` (a handover attempt that ran over its budget)."""

    @abstractmethod
    def detach(self) -> None:
        """Forget the source for good (the target now owns the tenant)."""

    def finish(self, final_gtid: str) -> None:
        self.stop_at(final_gtid)
        self.detach()

    @abstractmethod
    def abort(self) -> None:
        """Stop applying, best effort, never raises."""


class ReplicationApplier(DeltaApplier):
    """Native MariaDB replication driven by GTID position, in source commit order.

    Chosen as the default because the server applies row events itself (no
    parsing or SQL regeneration on our side), restarts safely from
    gtid_slave_pos, and MASTER_GTID_WAIT gives an exact "applied up to" check.
    """

    name = "replication"
    CONNECTION = "slacker_migration"

    def __init__(self, connect) -> None:
        self._connect = connect  # returns an admin connection to the target tenant
        self._conn = None
        # One connection, used from the HTTP threads of the target agent: one statement at a time.
        self._conn_lock = threading.Lock()

    def _call(self, fn, *args, **kwargs):
        """`fn(connection, *args, **kwargs)`: a slacker.mariadb.replication statement on the applier's connection."""
        with self._conn_lock:
            if self._conn is None:
                self._conn = self._connect()
            try:
                return fn(self._conn, *args, **kwargs)
            except replication.StatementFailed as exc:
                self._close_locked()
                raise MigrationFailed("applying the delta failed", f"{exc.verb}: {exc.detail}",
                                      "the source is untouched; retry", phase="delta") from None

    def _close_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def start(self, source: SourceLink, start_gtid: str) -> None:
        # The copy is consistent at start_gtid: replication continues from exactly there.
        self._call(replication.stop_all_slaves)
        self._call(replication.reset_master)
        # The binlog state before the slave position: setting the state waits for InnoDB to confirm a
        # checkpoint of everything written so far, and the slave position is an InnoDB write that, with
        # catch-up mode's relaxed log flushing, reaches the disk only at InnoDB's next once-a-second flush
        # (measured: 0.75-0.85 s of every move waited here in the other order).
        if start_gtid:
            self._call(replication.set_gtid_binlog_state, start_gtid)
        self._call(replication.set_gtid_slave_pos, start_gtid)
        self._call(replication.change_master, self.CONNECTION, source.host, source.port, source.user,
                   source.password, ssl_ca=source.ssl_ca, ssl_cert=source.ssl_cert, ssl_key=source.ssl_key)
        self._call(replication.start_slave, self.CONNECTION)

    def _status(self) -> dict:
        return self._call(replication.slave_status, self.CONNECTION)

    def _check_running(self) -> None:
        st = self._status()
        if not st:
            raise MigrationFailed("replication is not configured on the target", "", "", phase="delta")
        if st.get("Slave_SQL_Running") != "Yes" or st.get("Last_SQL_Errno"):
            raise MigrationFailed("the target stopped applying the delta",
                                  f"SQL thread: {st.get('Last_SQL_Error') or st.get('Slave_SQL_Running')}",
                                  "the source is untouched; inspect the target's error log", phase="delta")
        if st.get("Last_IO_Errno") and st.get("Slave_IO_Running") != "Yes":
            raise MigrationFailed("the target cannot read the source's binlog",
                                  f"IO thread: {st.get('Last_IO_Error')}", "", phase="delta")

    def wait_for(self, gtid: str, timeout_s: float) -> float:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while True:
            left = deadline - time.monotonic()
            # Short waits so a broken SQL thread is noticed promptly instead of at the deadline.
            step = max(0.0, min(1.0, left))
            if self._call(replication.master_gtid_wait, gtid, step) == 0:
                return time.monotonic() - t0
            self._check_running()
            if time.monotonic() >= deadline:
                raise CatchUpTimeout("the target did not catch up in time",
                                      f"waited {timeout_s:.0f}s for {gtid}, applied {self.applied()}",
                                      "the write load may be too heavy for the applier", phase="delta")

    def applied(self) -> str:
        return self._call(replication.gtid_slave_pos)

    def stop_at(self, final_gtid: str) -> None:
        self._call(replication.stop_slave, self.CONNECTION)
        applied = self.applied()
        if not at_position(applied, final_gtid):
            raise MigrationFailed("the target is not at the source's final position",
                                  f"source {final_gtid}, target {applied}", "handover aborted", phase="handover")

    # ---- held at one position (online verification, slacker.verify) ----------------------------
    def hold(self) -> str:
        """Stop applying and fetching (UNTIL needs both stopped); returns the position applied."""
        self._call(replication.stop_slave, self.CONNECTION)
        return self.applied()

    def advance_to(self, gtid: str, timeout_s: float) -> None:
        """While held: apply up to exactly `gtid` (a source position at or after the held one), stop there."""
        deadline = time.monotonic() + timeout_s
        if not at_position(self.applied(), gtid):
            self._call(replication.start_slave_until, self.CONNECTION, gtid)
            while self._call(replication.master_gtid_wait, gtid,
                             max(0.0, min(1.0, deadline - time.monotonic()))) != 0:
                st = self._status()
                if st.get("Last_SQL_Errno"):
                    raise MigrationFailed("the target stopped applying the delta",
                                          f"SQL thread: {st.get('Last_SQL_Error')}",
                                          "the source is untouched; inspect the target's error log", phase="verify")
                if time.monotonic() >= deadline:
                    raise CatchUpTimeout("the target did not reach the verification position in time",
                                         f"waited {timeout_s:.0f}s for {gtid}, applied {self.applied()}",
                                         "the write load may be too heavy for the applier", phase="verify")
            # MASTER_GTID_WAIT answers once the position is applied; the UNTIL stop follows at once.
            while self._status().get("Slave_SQL_Running") == "Yes":
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
        applied = self.applied()
        if not at_position(applied, gtid):
            raise MigrationFailed("the target did not stop at the verification position",
                                  f"source {gtid}, target {applied}", "the source is untouched; retry",
                                  phase="verify")

    def release(self) -> None:
        """Fetch and apply again after `hold`."""
        self._call(replication.start_slave, self.CONNECTION)

    def resume(self) -> None:
        self._call(replication.start_slave, self.CONNECTION)

    def detach(self) -> None:
        self._call(replication.reset_slave_all, self.CONNECTION)
        self.close()

    def close(self) -> None:
        with self._conn_lock:
            self._close_locked()

    def abort(self) -> None:
        try:
            self._call(replication.stop_all_slaves)
        except Exception:
            pass
        self.close()
