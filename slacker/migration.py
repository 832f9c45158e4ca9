"""The migration phase machine, run by the source node's agent.

preflight -> snapshot -> prepare -> delta -> handover -> cleanup (live), or
preflight -> freeze+copy -> start -> flip (stop-and-copy, the baseline).
Until the directory flip the source stays the only owner; any failure before
it unfreezes the source, kills every process of the migration on both nodes
and removes the partial target. See docs/migration.md.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pymysql

from . import mariadb
from .backup import BackupPosition, commit_lock_event, directory_bytes, select_tool
from .delta import gtid as gtids
from .delta import APPLIERS, DEFAULT_APPLIER, DEFAULT_MPL, parse_mpl  # issue 13
from .delta.convergence import ConvergenceJudge  # issue 13
from .errors import AgentUnavailable, Conflict, InvalidInput, MigrationFailed, NotFound, SlackerError
from .transfer import DEFAULT_PIPE, make_pipe
from .transfer.protocol import new_token

log = logging.getLogger("slacker.migration")

MODES = ("live", "stop-and-copy")
MIN_ETA_THROUGHPUT_BYTES_PER_S = 1000.0


@dataclass
class MigrationOptions:
    target: str
    mode: str = "live"
    rate_bytes_per_s: float | None = None  # None = unthrottled; 0 = paused
    max_freeze_s: float = 0.5
    verify: bool = False
    max_rounds: int = 20
    max_stalled_rounds: int = 3  # rounds in a row that did not shrink before giving up
    pipe: str = DEFAULT_PIPE
    step_s: float = 1.0
    handover_timeout_s: float = 10.0
    round_timeout_s: float = 600.0
    snapshot_timeout_s: float = 24 * 3600.0
    controller: dict | None = None  # latency-targeting settings, see slacker.throttle
    # Fault-injection aid for tests and rehearsals: {"delta": 5} holds 5 s when that phase begins;
    # {"frozen": 2} holds 2 s with the source frozen.
    hold_s: dict | None = None
    delta_applier: str = DEFAULT_APPLIER  # issue 13: serial | concurrent (see docs/delta.md)
    delta_mpl: int | str = DEFAULT_MPL    # issue 13: auto | parallel appliers

    def validate(self) -> "MigrationOptions":
        if self.mode not in MODES:
            raise InvalidInput(f"unknown mode {self.mode!r}", f"modes are {', '.join(MODES)}", "")
        if not 0 < self.max_freeze_s <= 60:
            raise InvalidInput(f"--max-freeze {self.max_freeze_s}s is out of range", "it must be in (0, 60s]",
                               "for example 500ms")
        if self.rate_bytes_per_s is not None and self.rate_bytes_per_s < 0:
            raise InvalidInput("negative rate", "a rate is zero (paused) or positive", "")
        if self.max_rounds < 1 or self.max_stalled_rounds < 1:
            raise InvalidInput("round limits must be at least 1", "", "")
        if self.delta_applier not in APPLIERS:  # issue 13
            raise InvalidInput(f"unknown delta applier {self.delta_applier!r}", f"appliers are {', '.join(APPLIERS)}", "")
        self.delta_mpl = parse_mpl(self.delta_mpl)  # issue 13
        if not 0.1 <= self.step_s <= 60:
            raise InvalidInput(f"step {self.step_s}s is out of range", "use 0.1s to 60s", "")
        return self


@dataclass
class RoundReport:
    n: int
    transactions: int
    bytes: int
    duration_s: float
    remaining_bytes: int
    est_freeze_ms: float
    write_tps: float | None = None   # issue 13: the source's commit rate since the previous round
    apply_tps: float | None = None   # issue 13: the target's latest saturated apply rate
    mpl: int | None = None           # issue 13: parallel appliers at the round's end (0: serial)


@dataclass
class PhaseTiming:
    name: str
    started_at: str
    start_s: float
    duration_s: float | None = None


class MigrationAborted(MigrationFailed):
    pass


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Migration:
    """One migration of one tenant from this node. `run()` blocks; `abort()` may come from any thread."""

    def __init__(self, node, tenant_id: str, options: MigrationOptions, rate_policy=None) -> None:
        self.node = node
        self.tenant_id = tenant_id
        self.opts = options.validate()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.id = f"{tenant_id}-{stamp}-{secrets.token_hex(2)}"
        self.source = node.name
        self.work_dir = Path(node.config.data_root) / "migrations" / self.id
        self.series_path = Path(node.config.data_root) / "migrations" / f"{self.id}.jsonl"
        self.phase = "pending"
        self.phases: list[PhaseTiming] = []
        self.rounds: list[RoundReport] = []
        self.bytes_total = 0
        self.freeze_ms: float | None = None
        self.handover_steps_ms: dict[str, float] = {}
        self.verified: bool | None = None
        self.result: str | None = None
        self.error: SlackerError | None = None
        self.epoch_before: int | None = None
        self.epoch_after: int | None = None
        self.delta_stats: dict = {}  # issue 13: the applier's last report (MPL, apply rates, samples)
        self.durable_ms: dict | None = None  # issue 13: what leaving catch-up mode cost, before the freeze
        self.created = time.monotonic()
        self.finished_at: float | None = None
        self.pipe = None
        self.rate_policy = rate_policy  # None: fixed rate from options
        self.controller_state: dict | None = None
        self._abort = threading.Event()
        self._abort_reason = ""
        self._target_ready = False
        self._incoming_created = False
        self._freeze_conn = None
        self._source_stopped = False
        self._last_bytes = (time.monotonic(), 0)
        self._throughput = 0.0
        self._series_lock = threading.Lock()
        self._tick_stop = threading.Event()

    # ---- public -----------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.result is None

    def abort(self, reason: str = "aborted by the operator") -> None:
        self._abort_reason = reason
        self._abort.set()
        pipe = self.pipe
        if pipe is not None:
            pipe.abort()

    def set_rate(self, rate: float | None) -> None:
        self.opts.rate_bytes_per_s = rate
        if self.pipe is not None and self.rate_policy is None:
            self.pipe.set_rate(rate)

    def bytes_done(self) -> int:
        return self.pipe.bytes_sent if self.pipe is not None else 0

    def current_rate(self) -> float | None:
        if self.pipe is not None:
            return self.pipe.rate
        return self.opts.rate_bytes_per_s

    def eta_s(self) -> float | None:
        # No estimate while paused or crawling: the decaying throughput average would give absurd figures.
        if (self.phase not in ("snapshot", "copy") or self._throughput < MIN_ETA_THROUGHPUT_BYTES_PER_S
                or not self.bytes_total or self.current_rate() == 0):
            return None
        return max(0.0, (self.bytes_total - self.bytes_done()) / self._throughput)

    def to_dict(self) -> dict:
        err = self.error.to_dict() if self.error else None
        rate = self.current_rate()
        return {
            "id": self.id, "tenant": self.tenant_id, "source": self.source, "target": self.opts.target,
            "mode": self.opts.mode, "phase": self.phase, "active": self.active, "result": self.result,
            "error": err, "phases": [asdict(p) for p in self.phases],
            "bytes_done": self.bytes_done(), "bytes_total": self.bytes_total,
            "rate_bytes_per_s": rate, "unthrottled": rate is None,
            "throughput_bytes_per_s": round(self._throughput, 1), "eta_s": self.eta_s(),
            "rounds": [asdict(r) for r in self.rounds], "freeze_ms": self.freeze_ms,
            "handover_steps_ms": self.handover_steps_ms, "verified": self.verified,
            "epoch_before": self.epoch_before, "epoch_after": self.epoch_after,
            "series_path": str(self.series_path), "pipe": self.opts.pipe,
            "max_freeze_ms": self.opts.max_freeze_s * 1000,
            "duration_s": round((self.finished_at or time.monotonic()) - self.created, 3),
            "controller": self.controller_state,
            # issue 13: which applier, its MPL, best apply rate; what leaving catch-up mode cost
            "delta": dict({k: v for k, v in self.delta_stats.items() if k != "samples"},
                          applier=self.opts.delta_applier, durable=self.durable_ms),
        }

    def run(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        ticker = threading.Thread(target=self._tick_loop, name=f"tick-{self.id}", daemon=True)
        ticker.start()
        try:
            self._phase("preflight")
            self._preflight()
            if self.opts.mode == "live":
                self._snapshot()
                self._prepare()
                self._delta()
                self._handover()
            else:
                self._stop_and_copy()
            self._phase("cleanup")
            self._cleanup_success()
            self.result = "succeeded"
        except BaseException as exc:  # every failure path ends in a rollback
            if self._abort.is_set() and not isinstance(exc, MigrationAborted):
                # An abort tears the pipeline down; what broke as a consequence is not the story.
                exc = MigrationAborted(f"migration {self.id} aborted", self._abort_reason,
                                       "the source keeps serving", phase=self.phase)
            err = exc if isinstance(exc, SlackerError) else MigrationFailed(
                "migration failed", f"{type(exc).__name__}: {exc}", "see the source agent's log", phase=self.phase)
            if not isinstance(err, MigrationFailed):
                err = MigrationFailed(err.what, err.why, err.hint, phase=self.phase)
            if not err.phase:
                err.phase = self.phase
            log.warning("migration %s failed in %s: %s", self.id, self.phase, err.one_line())
            self.error = err
            self._rollback()
            self.result = "aborted" if isinstance(exc, MigrationAborted) else "failed"
        finally:
            self._end_phase()
            self.finished_at = time.monotonic()
            self._tick_stop.set()
            ticker.join(timeout=5)
            self._record()  # the final sample
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ---- phases -----------------------------------------------------------------
    def _phase(self, name: str) -> None:
        self._end_phase()
        self.phase = name
        self.phases.append(PhaseTiming(name, _utc(), round(time.monotonic() - self.created, 3)))
        log.info("migration %s: %s", self.id, name)
        self._hold(name)

    def _hold(self, point: str) -> None:
        hold = (self.opts.hold_s or {}).get(point)
        if hold:
            self._abort.wait(float(hold))
            self._check_abort()

    def _end_phase(self) -> None:
        if self.phases and self.phases[-1].duration_s is None:
            p = self.phases[-1]
            p.duration_s = round(time.monotonic() - self.created - p.start_s, 3)

    def _check_abort(self) -> None:
        if self._abort.is_set():
            raise MigrationAborted(f"migration {self.id} aborted", self._abort_reason,
                                   "the source keeps serving", phase=self.phase)

    def _target(self, method: str, path: str, body: dict | None = None, timeout_s: float = 60.0):
        self._check_abort()
        try:
            return self.node.peer(self.opts.target).request(method, path, body, timeout_s=timeout_s)
        except AgentUnavailable as exc:
            raise MigrationFailed(f"target agent {self.opts.target} failed", exc.why or exc.what,
                                  "the source keeps serving; check the target agent", phase=self.phase) from None
        except MigrationFailed as exc:
            exc.phase = self.phase
            raise
        except SlackerError as exc:
            raise MigrationFailed(f"target {self.opts.target}: {exc.what}", exc.why, exc.hint,
                                  phase=self.phase) from None

    def _src(self):
        return self.node.tenants.get(self.tenant_id)

    def _preflight(self) -> None:
        if self.opts.target == self.source:
            raise InvalidInput(f"tenant {self.tenant_id} is already on {self.source}",
                               "source and target are the same node", "pick another --to node")
        self.node.cluster.node(self.opts.target)
        own = self.node.directory.lookup(self.tenant_id)
        if own.node != self.source:
            raise Conflict(f"tenant {self.tenant_id} is owned by {own.node}", f"not by {self.source}",
                           "ask the owner's agent")
        self.epoch_before = own.epoch
        tenant = self._src()
        if not tenant.is_running():
            raise MigrationFailed(f"tenant {self.tenant_id} is not running", "", "start it first", phase="preflight")
        conn = tenant.admin_connect(timeout_s=5)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@log_bin, @@binlog_format, @@version")
                log_bin, fmt, version = cur.fetchone()
        finally:
            conn.close()
        if self.opts.mode == "live" and (not log_bin or fmt != "ROW"):
            raise MigrationFailed(f"tenant {self.tenant_id} cannot migrate live",
                                  f"binary log is {'on' if log_bin else 'off'}, format {fmt}",
                                  "it needs log_bin and binlog_format=ROW", phase="preflight")
        self.tool = select_tool(version)
        binlog_bytes = sum(p.stat().st_size for p in tenant.datadir.glob("binlog.*"))
        data_bytes = directory_bytes(tenant.datadir)
        self.bytes_total = data_bytes if self.opts.mode == "stop-and-copy" else max(0, data_bytes - binlog_bytes)
        self.transfer_token = new_token()
        self._target("GET", "/v1/status", timeout_s=10)
        self._incoming_created = True
        doc = self._target("POST", "/v1/incoming", {
            "migration_id": self.id, "tenant": self.tenant_id, "port": tenant.port,
            "buffer_pool_bytes": tenant.info.buffer_pool_bytes, "admin_password": tenant.admin_password(),
            "app_password": tenant.app_password(), "token": self.transfer_token, "mode": self.opts.mode,
            "expected_bytes": self.bytes_total}, timeout_s=60)
        self.receiver = (doc["receiver_host"], int(doc["receiver_port"]))
        self._target_host = doc["receiver_host"]

    def _stream(self, producer_argv: list[str], timeout_s: float) -> None:
        """Run the throttled pipe to the target's receiver until it is acknowledged."""
        initial = self.opts.rate_bytes_per_s
        if self.rate_policy is not None:
            initial = self.rate_policy.initial_rate()
        self.pipe = make_pipe(self.opts.pipe, producer_argv, self.receiver[0], self.receiver[1], self.id,
                              self.transfer_token, rate_bytes_per_s=initial, finish_timeout_s=timeout_s,
                              commit_lock_events=commit_lock_event)
        self.pipe.start()
        deadline = time.monotonic() + timeout_s
        while not self.pipe.done:
            self._check_abort()
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        result = self.pipe.wait(timeout=max(1.0, deadline - time.monotonic()))
        self._target("POST", f"/v1/incoming/{self.id}/stream", {"timeout_s": 120}, timeout_s=180)
        self.bytes_total = result.bytes_sent

    def _snapshot(self) -> None:
        self._phase("snapshot")
        tenant = self._src()
        defaults = self.work_dir / "backup.cnf"
        mariadb.write_secret(defaults, self.tool.backup_defaults(
            tenant.config_file.read_text(), mariadb.ADMIN_USER, tenant.admin_password(), tenant.socket))
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        self._stream(self.tool.stream_argv(defaults, self.work_dir / "tmp"), self.opts.snapshot_timeout_s)

    def _prepare(self) -> None:
        self._phase("prepare")
        pos = self._target("POST", f"/v1/incoming/{self.id}/prepare", {}, timeout_s=3600)
        self.backup_position = BackupPosition(pos["binlog_file"], int(pos["binlog_pos"]), pos["gtid"])
        self._target("POST", f"/v1/incoming/{self.id}/start", {"read_only": True}, timeout_s=180)
        tenant = self._src()
        self._target("POST", f"/v1/incoming/{self.id}/replicate",
                     {"source_host": tenant.host, "source_port": tenant.port,
                      "start_gtid": self.backup_position.gtid,
                      "applier": self.opts.delta_applier, "mpl": self.opts.delta_mpl}, timeout_s=60)  # issue 13

    def _source_position(self, conn) -> tuple[str, str, int, list[tuple[str, int]]]:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            gtid = cur.fetchone()[0] or ""
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            cur.execute("SHOW BINARY LOGS")
            logs = [(r[0], int(r[1])) for r in cur.fetchall()]
        return gtid, row[0], int(row[1]), logs

    def _delta(self) -> None:
        self._phase("delta")
        conn = self._src().admin_connect(timeout_s=10)
        try:
            prev = (self.backup_position.binlog_file, self.backup_position.binlog_pos)
            prev_gtid = self.backup_position.gtid
            apply_rate = None  # bytes/s the target applies, measured per round
            stalled = 0
            last_remaining = None
            judge, prev_t = ConvergenceJudge(), None  # issue 13
            for n in range(1, self.opts.max_rounds + 1):
                self._check_abort()
                gtid, f, pos, logs = self._source_position(conn)
                now = time.monotonic()  # issue 13
                write_tps = txns_since = None
                if prev_t is not None:
                    txns_since = gtids.transactions_between(prev_gtid, gtid)
                    write_tps = round(txns_since / max(1e-3, now - prev_t), 1)
                prev_t = now
                size = gtids.binlog_bytes_between(logs, prev, (f, pos))
                txns = gtids.transactions_between(prev_gtid, gtid)
                doc = self._target("POST", f"/v1/incoming/{self.id}/wait",
                                   {"gtid": gtid, "timeout_s": self.opts.round_timeout_s},
                                   timeout_s=self.opts.round_timeout_s + 30)
                dur = float(doc["waited_s"])
                if size > 0 and dur > 0.01:
                    measured = size / dur
                    apply_rate = measured if apply_rate is None else 0.5 * apply_rate + 0.5 * measured
                _, f2, pos2, logs2 = self._source_position(conn)
                remaining = gtids.binlog_bytes_between(logs2, (f, pos), (f2, pos2))
                # Until a round has been big enough to time, assume a conservative 1 MB/s.
                est_freeze_s = remaining / (apply_rate or 1e6)
                stats = doc.get("applier") or {}  # issue 13
                self.rounds.append(RoundReport(n, txns, size, round(dur, 4), remaining,
                                               round(est_freeze_s * 1000, 1), write_tps, stats.get("apply_tps"),
                                               stats.get("mpl")))
                self.delta_stats = stats
                prev, prev_gtid = (f, pos), gtid
                # Leave half the budget for the freeze's own fixed costs (lock, flip, stop).
                if est_freeze_s <= self.opts.max_freeze_s / 2:
                    return
                verdict = judge.observe(n, write_tps, stats)  # issue 13: writes vs best apply rate
                if verdict:
                    raise MigrationFailed(verdict, "", "", phase="delta")
                if last_remaining is not None and remaining >= last_remaining:
                    stalled += 1
                    if stalled >= self.opts.max_stalled_rounds:
                        raise MigrationFailed(
                            "delta rounds stopped shrinking",
                            f"{stalled} rounds in a row left >= {last_remaining} bytes "
                            f"(estimated freeze {est_freeze_s * 1000:.0f}ms > {self.opts.max_freeze_s * 1000:.0f}ms)",
                            "the write load outpaces the applier: raise --max-freeze, migrate at a quieter time",
                            phase="delta")
                else:
                    stalled = 0
                last_remaining = remaining
            raise MigrationFailed("delta did not converge", f"{self.opts.max_rounds} rounds were not enough",
                                  "raise --max-freeze or reduce the write load", phase="delta")
        finally:
            conn.close()

    def _freeze(self) -> Any:
        """Block writes from every account (FTWRL holds SUPER too); returns the holding connection."""
        conn = self._src().admin_connect(timeout_s=5)
        with conn.cursor() as cur:
            cur.execute("SET SESSION lock_wait_timeout = %s", (max(1, int(self.opts.handover_timeout_s)),))
            cur.execute("FLUSH TABLES WITH READ LOCK")
        self._freeze_conn = conn
        return conn

    def _unfreeze(self) -> None:
        conn, self._freeze_conn = self._freeze_conn, None
        if conn is not None:
            try:
                with conn.cursor() as cur:
                    cur.execute("UNLOCK TABLES")
            except Exception:
                pass
            try:
                conn.close()  # closing the session releases the lock in any case
            except Exception:
                pass

    def _verify(self, frozen) -> None:
        from .agent.checksums import table_checksums

        # Both sides at once: the freeze lasts as long as the slower of the two, not their sum.
        box: dict = {}

        def target_side():
            try:
                box["dst"] = self._target("POST", f"/v1/incoming/{self.id}/checksums", {}, timeout_s=600)["checksums"]
            except BaseException as exc:  # re-raised in the migration's thread
                box["err"] = exc

        t = threading.Thread(target=target_side, daemon=True)
        t.start()
        src = table_checksums(frozen)
        t.join()
        if "err" in box:
            raise box["err"]
        dst = box["dst"]
        if src != dst:
            diff = sorted(k for k in set(src) | set(dst) if src.get(k) != dst.get(k))
            raise MigrationFailed("verification failed", f"checksums differ for {', '.join(diff[:5])}",
                                  "the source keeps serving; report this", phase=self.phase)
        self.verified = True

    def _flip(self, frozen, final_gtid: str | None, t0: float) -> None:
        """The point of no return: compare-and-set the directory, then retire the source for good."""
        if frozen is not None:
            # The lock must still be held and nothing committed since we read the final position.
            with frozen.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
                if (cur.fetchone()[0] or "") != final_gtid:
                    raise MigrationFailed("source changed during the freeze", "its GTID position moved",
                                          "handover aborted; the source keeps serving", phase="handover")
        tenant = self._src()
        own = self._cas(tenant)
        self.epoch_after = own.epoch
        self.freeze_ms = round((time.monotonic() - t0) * 1000, 1)
        # From here on the target owns the tenant. Kill the source outright: a clean shutdown would
        # release the lock and let a blocked writer commit on the old owner.
        self.node.tenants.kill_tenant(tenant)
        self._source_stopped = True
        self._unfreeze()

    def _cas(self, tenant):
        target = self.node.cluster.node(self.opts.target)
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.node.directory.compare_and_set(self.tenant_id, self.epoch_before, target.name,
                                                           target.tenant_host, tenant.port)
            except AgentUnavailable:
                # Did our write land before the connection broke? The directory decides.
                if time.monotonic() > deadline:
                    raise MigrationFailed("directory unreachable at the flip", "ownership unchanged",
                                          "the source keeps serving", phase="handover") from None
                time.sleep(0.2)
                try:
                    own = self.node.directory.lookup(self.tenant_id)
                except AgentUnavailable:
                    continue
                if own.node == target.name and own.epoch == self.epoch_before + 1:
                    return own
                if own.epoch != self.epoch_before:
                    raise MigrationFailed("ownership changed underneath", f"epoch is {own.epoch}", "",
                                          phase="handover") from None

    def _mark(self, step: str, t0: float) -> None:
        """Cumulative ms since the freeze began, per handover step: where a long freeze went."""
        self.handover_steps_ms[step] = round((time.monotonic() - t0) * 1000, 1)

    def _handover(self) -> None:
        # issue 13: leave catch-up mode before the freeze, so its cost never lands in the freeze.
        self.durable_ms = self._target("POST", f"/v1/incoming/{self.id}/durable", {}, timeout_s=120)
        self.delta_stats["catchup"] = self.durable_ms.get("catchup", False)
        self._phase("handover")
        t0 = time.monotonic()
        frozen = self._freeze()
        self._mark("locked", t0)
        with frozen.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            final = cur.fetchone()[0] or ""
        self._hold("frozen")
        self._target("POST", f"/v1/incoming/{self.id}/wait",
                     {"gtid": final, "timeout_s": self.opts.handover_timeout_s},
                     timeout_s=self.opts.handover_timeout_s + 30)
        self._mark("caught_up", t0)
        if self.opts.verify:
            self._verify(frozen)
            self._mark("verified", t0)
        self._target("POST", f"/v1/incoming/{self.id}/promote", {"final_gtid": final}, timeout_s=60)
        self._mark("promoted", t0)
        self._flip(frozen, final, t0)
        self._mark("flipped", t0)

    def _stop_and_copy(self) -> None:
        self._phase("copy")
        tenant = self._src()
        t0 = time.monotonic()
        frozen = self._freeze()
        with frozen.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            final = cur.fetchone()[0] or ""
        if self.opts.verify:
            from .agent.checksums import table_checksums
            self._source_checksums = table_checksums(frozen)
        # InnoDB files are only consistent on disk after a clean shutdown; writers stay blocked until then.
        self.node.tenants.stop_tenant(tenant)
        self._source_stopped = True
        self._freeze_conn = None
        self._stream(["tar", "-C", str(tenant.datadir), "-c", "-f", "-", "."], self.opts.snapshot_timeout_s)
        self._phase("handover")
        self._target("POST", f"/v1/incoming/{self.id}/start", {"read_only": False, "gtid_state": final},
                     timeout_s=300)
        if self.opts.verify:
            dst = self._target("POST", f"/v1/incoming/{self.id}/checksums", {}, timeout_s=600)["checksums"]
            if dst != self._source_checksums:
                raise MigrationFailed("verification failed", "checksums differ after the copy", "", phase="handover")
            self.verified = True
        self._flip(None, None, t0)

    # ---- endings ------------------------------------------------------------------
    def _cleanup_success(self) -> None:
        self._target("POST", f"/v1/incoming/{self.id}/commit", {}, timeout_s=60)
        tenant = self._src()
        self.node.tenants.kill_tenant(tenant)
        shutil.rmtree(tenant.root, ignore_errors=True)
        tenant.socket.unlink(missing_ok=True)
        self.node.supervisor.forget(self.tenant_id)

    def _rollback(self) -> None:
        """Leave the source serving and untouched, and nothing of the migration anywhere."""
        if self.epoch_after is not None:
            return  # past the flip: the target owns the tenant; nothing to roll back
        if self.pipe is not None:
            try:
                self.pipe.abort()
            except Exception:
                log.exception("pipe abort failed")
        self._unfreeze()
        if self._incoming_created:
            try:
                self.node.peer(self.opts.target).request("DELETE", f"/v1/incoming/{self.id}", timeout_s=60)
            except SlackerError as exc:
                if not isinstance(exc, NotFound):
                    log.warning("could not remove the partial target of %s: %s", self.id, exc.one_line())
        if self._source_stopped:
            try:
                self.node.tenants.start_tenant(self._src())
            except SlackerError as exc:
                log.error("could not restart source tenant %s: %s", self.tenant_id, exc.one_line())

    # ---- time series ------------------------------------------------------------
    def _tick_loop(self) -> None:
        while not self._tick_stop.wait(self.opts.step_s):
            try:
                self._tick()
            except Exception:
                log.exception("migration tick failed")

    def _tick(self) -> None:
        now = time.monotonic()
        done = self.bytes_done()
        t_prev, b_prev = self._last_bytes
        if now > t_prev:
            inst = max(0.0, (done - b_prev) / (now - t_prev))
            self._throughput = inst if self._throughput == 0 else 0.6 * self._throughput + 0.4 * inst
        self._last_bytes = (now, done)
        if self.rate_policy is not None:
            if self.phase == "snapshot" and self.pipe is not None and not self.pipe.done:
                rate, state = self.rate_policy.step(now, done)
                self.pipe.set_rate(rate)
                if self.pipe.commit_locked:
                    state["note"] = "backup holds the commit lock: copying unthrottled" + (
                        f" ({state['note']})" if state.get("note") else "")
                self.controller_state = state
            elif self.result is None and self.phase not in ("pending", "preflight"):
                # Outside the copy the controller has nothing to steer, but the latency still tells
                # what prepare, delta and the freeze cost the clients: keep recording it.
                sample = self.rate_policy.source.read()
                state = dict(self.controller_state or {})
                state.update(latency_s=sample.latency_s, note="observing (no copy in this phase)")
                self.controller_state = state
        self._record()

    def _record(self) -> None:
        sample = {"t": round(time.monotonic() - self.created, 3), "ts": _utc(), "phase": self.phase,
                  "bytes_done": self.bytes_done(), "bytes_total": self.bytes_total,
                  "rate_bytes_per_s": self.current_rate(), "throughput_bytes_per_s": round(self._throughput, 1)}
        if self.pipe is not None and self.pipe.commit_locked and not self.pipe.done:
            sample["commit_locked"] = True  # the rate above is not applied: the copy runs unthrottled
        if self.controller_state:
            for k in ("latency_s", "setpoint_s", "p", "i", "d", "fraction", "note"):
                if k in self.controller_state:
                    sample[k] = self.controller_state[k]
        if self.phase == "delta" and self.delta_stats:  # issue 13: the MPL and apply rate over time
            sample["delta_mpl"] = self.delta_stats.get("mpl")
            sample["apply_tps"] = self.delta_stats.get("apply_tps")
        with self._series_lock:
            self.series_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.series_path, "a") as f:
                f.write(json.dumps(sample) + "\n")
