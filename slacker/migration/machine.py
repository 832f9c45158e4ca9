"""The migration phase machine, run by the source node's agent.

preflight -> snapshot -> prepare -> delta -> handover -> cleanup (live), or
preflight -> copy -> handover -> cleanup (stop-and-copy, the baseline).

The point of no return is the directory's compare-and-set. Before it, any
failure rolls back: the source is unfenced and serving, the partial target
removed. From it on the migration only goes forward: failures are retried
(phase "finishing") until the target is writable and the source retired.
Every step of the handover is journaled on disk first, so a restarted agent
finishes what it was doing. See docs/migration.md.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import threading
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from ..channels import url_may_carry_secrets
from ..backup import BackupPosition, commit_lock_event, directory_bytes, select_tool
from ..controller.marks import MODEL_KEYS, copy_mark
from ..delta import gtid as gtids
from ..delta.convergence import ConvergenceJudge
from ..errors import AgentUnavailable, Conflict, InvalidInput, MigrationFailed, NotFound, SlackerError
from ..mariadb import ops
from ..mariadb.checksums import table_checksums
from ..transfer import TLS_PIPES, make_pipe
from ..transfer.protocol import new_token
from .journal import Entry
from .options import (HandoverAttempt, MigrationAborted, MigrationOptions, OverBudget, PhaseTiming,
                      RoundReport)
from .peer import TargetPeer
from .source import SourceSide

log = logging.getLogger("slacker.migration")

MIN_ETA_THROUGHPUT_BYTES_PER_S = 1000.0
# A handover begins only with this much lease left, so the target cannot give up on us mid-flip.
LEASE_MARGIN_S = 3.0
FINISH_BACKOFF_MAX_S = 10.0


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Migration:
    """One migration of one tenant from this node. `run()` blocks; `abort()` may come from any thread."""

    def __init__(self, node, tenant_id: str, options: MigrationOptions, rate_policy=None,
                 recovered: Entry | None = None) -> None:
        self.node = node
        self.tenant_id = tenant_id
        self.opts = options.validate()
        if recovered is not None:
            self.id = recovered.id
        else:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
            self.id = f"{tenant_id}-{stamp}-{secrets.token_hex(2)}"
        self.source = node.name
        self.work_dir = Path(node.config.data_root) / "migrations" / self.id
        self.series_path = Path(node.config.data_root) / "migrations" / f"{self.id}.jsonl"
        self.src = SourceSide(node, tenant_id)
        self.peer = TargetPeer(node, self.opts.target, self.id)
        self.journal = node.journal
        self.entry = recovered or Entry(id=self.id, tenant=tenant_id, role="source", peer=self.opts.target,
                                        state="started", source_node=node.name)
        self.recovered = recovered is not None
        self.phase = "pending"
        self.phases: list[PhaseTiming] = []
        self.rounds: list[RoundReport] = []
        self.attempts: list[HandoverAttempt] = []
        self.delta_stats: dict = {}  # the applier's last report (MPL, apply rates, samples)
        self.durable_ms: dict | None = None  # what leaving catch-up mode cost, before the freeze
        self.warnings: list[str] = []
        self.bytes_total = 0
        self.freeze_ms: float | None = None
        self.handover_steps_ms: dict[str, float] = {}
        self.verified: bool | None = None
        self.result: str | None = None
        self.error: SlackerError | None = None
        self.epoch_before: int | None = recovered.epoch_before if recovered else None
        self.epoch_after: int | None = recovered.epoch_after if recovered else None
        self.finishing_reason = ""
        self.outage_s: float | None = None  # directory unreachable at the flip, source fenced meanwhile
        self.created = time.monotonic()
        self.finished_at: float | None = None
        self.pipe = None
        self.rate_policy = rate_policy  # None: fixed rate from options
        self.controller_state: dict | None = None
        self._abort = threading.Event()
        self._abort_reason = ""
        # Held while deciding to send the compare-and-set, so an abort is either before it or refused.
        self._pnr_lock = threading.Lock()
        self._cas_started = recovered is not None and recovered.state in ("flipping", "flipped")
        self._incoming_created = recovered is not None
        self._source_stopped = False
        self._finish_now = threading.Event()
        self._lease_ok_at: float | None = None
        self._lease_ttl_s = self.opts.lease_ttl_s
        self._lease_ok_ttl = self.opts.lease_ttl_s
        self._lease_stop = threading.Event()
        self._last_bytes = (time.monotonic(), 0)
        self._throughput = 0.0
        self._series_lock = threading.Lock()
        self._tick_stop = threading.Event()

    # ---- public -----------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.result is None

    @property
    def past_point_of_no_return(self) -> bool:
        return self.epoch_after is not None

    def abort(self, reason: str = "aborted by the operator") -> None:
        """Abort before the compare-and-set; Conflict once it has been sent (only forward from there)."""
        with self._pnr_lock:
            if self._cas_started:
                why = ("the directory already names the target" if self.epoch_after is not None
                       else "the ownership flip was sent and the directory has not answered yet")
                raise Conflict(f"migration {self.id} cannot be aborted", f"{why}: past the point of no return",
                               f"it finishes forward; `slacker migrate --finish {self.tenant_id}` retries now")
            self._abort_reason = reason
            self._abort.set()
        pipe = self.pipe
        if pipe is not None:
            pipe.abort()

    def finish_now(self) -> None:
        """`slacker migrate --finish`: retry the forward steps at once instead of at the next backoff."""
        self._finish_now.set()

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
        # No estimate while paused or crawling: the decaying throughput average would give absurd figures;
        # none for a copy its controller's verdict says cannot finish (slacker.controller.verdict).
        if (self.phase not in ("snapshot", "copy") or self._throughput < MIN_ETA_THROUGHPUT_BYTES_PER_S
                or (self.controller_state or {}).get("verdict")
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
            # the backup tool's program read into memory before it started (slacker.pagecache)
            "preread_bytes": self.pipe.preread_bytes if self.pipe is not None else 0,
            "prereading": bool(self.pipe is not None and self.pipe.prereading),
            "rate_bytes_per_s": rate, "unthrottled": rate is None,
            "throughput_bytes_per_s": round(self._throughput, 1), "eta_s": self.eta_s(),
            "rounds": [asdict(r) for r in self.rounds], "freeze_ms": self.freeze_ms,
            "handover_steps_ms": self.handover_steps_ms, "handover_attempts": [asdict(a) for a in self.attempts],
            "verified": self.verified, "epoch_before": self.epoch_before, "epoch_after": self.epoch_after,
            "past_point_of_no_return": self.past_point_of_no_return, "finishing_reason": self.finishing_reason,
            "directory_outage_s": self.outage_s, "warnings": self.warnings, "recovered": self.recovered,
            "series_path": str(self.series_path), "pipe": self.opts.pipe,
            "max_freeze_ms": self.opts.max_freeze_s * 1000,
            "duration_s": round((self.finished_at or time.monotonic()) - self.created, 3),
            "controller": self.controller_state,
            # which applier, its MPL, best apply rate; what leaving catch-up mode cost
            "delta": dict({k: v for k, v in self.delta_stats.items() if k != "samples"},
                          applier=self.opts.delta_applier, durable=self.durable_ms),
        }

    def run(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        ticker = threading.Thread(target=self._tick_loop, name=f"tick-{self.id}", daemon=True)
        ticker.start()
        try:
            try:
                self._phase("preflight")
                self._preflight()
                if self.opts.mode == "live":
                    self._snapshot()
                    self._prepare()
                    self._delta()
                    self._handover_live()
                else:
                    self._stop_and_copy()
            except BaseException as exc:
                if self._cas_started and not self.past_point_of_no_return:
                    # The flip was sent and something broke: only the directory knows how it ended.
                    self._settle_flip()
                if self.past_point_of_no_return:
                    self._go_forward(f"after the flip: {_one_line(exc)}")
                else:
                    self._fail(exc)
                    return
            self._phase("cleanup")
            self._go_forward("")
        finally:
            self._lease_stop.set()
            self._end()
            self._tick_stop.set()
            self._record()

    def recover(self) -> None:
        """After an agent restart: ask the directory whether the flip happened, then forward or back."""
        self._phase("recovering")
        ticker = threading.Thread(target=self._tick_loop, name=f"tick-{self.id}", daemon=True)
        ticker.start()
        try:
            if self.entry.state == "started":
                self._fail(MigrationFailed(f"migration {self.id} was interrupted",
                                           "the source agent restarted before the handover", "retry the migration",
                                           phase="recovering"))
                return
            own = self._directory_answer(f"recovering {self.id}")
            if own.node == self.opts.target and own.epoch > (self.epoch_before or 0):
                self.epoch_after = own.epoch
                self._cas_started = True
                self._go_forward("the source agent restarted after the flip")
            else:
                self._fail(MigrationFailed(f"migration {self.id} was interrupted",
                                           "the source agent restarted before the flip; the directory names "
                                           f"{own.node} at epoch {own.epoch}", "retry the migration",
                                           phase="recovering"))
        finally:
            self._end()
            self._tick_stop.set()
            self._record()

    # ---- endings ------------------------------------------------------------------
    def _end(self) -> None:
        self._end_phase()
        self.finished_at = time.monotonic()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def _fail(self, exc: BaseException) -> None:
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

    def _rollback(self) -> None:
        """Before the flip: the source unfenced and serving, nothing of the migration anywhere."""
        self._lease_stop.set()
        if self.pipe is not None:
            try:
                self.pipe.abort()
            except Exception:
                log.exception("pipe abort failed")
        self.src.unfreeze()
        if self._incoming_created:
            try:
                self.peer.remove()
            except NotFound:
                pass
            except SlackerError as exc:
                # Its lease runs out and the target removes it itself, once the directory confirms.
                log.warning("could not remove the partial target of %s now: %s", self.id, exc.one_line())
        try:
            if self.node.tenants.exists(self.tenant_id):
                tenant = self.src.tenant()
                if tenant.info.fenced or self.src.fenced:
                    self.src.unfence()
                if self._source_stopped:
                    self.node.tenants.start_tenant(tenant)
        except SlackerError as exc:
            log.error("could not bring source tenant %s back: %s (the supervisor retries)", self.tenant_id,
                      exc.one_line())
        self.journal.remove(self.entry)

    def _go_forward(self, reason: str) -> None:
        """Past the flip: make the target writable and retire the source, retrying until both are done."""
        self._lease_stop.set()
        self.src.unfreeze()
        backoff = 0.5
        while True:
            try:
                self.peer.step("activate", {"epoch": self.epoch_after, "tenant": self.tenant_id}, timeout_s=120,
                               phase="cleanup")
                self.src.retire()
                self.journal.remove(self.entry)
                self.finishing_reason = ""
                self.result = "succeeded"
                return
            except BaseException as exc:  # noqa: BLE001 - every failure here is retried, never rolled back
                self.finishing_reason = _one_line(exc)
                if self.phase != "finishing":
                    self._phase("finishing")
                log.warning("migration %s finishing (%s): %s; retrying in %.1fs", self.id, reason,
                            self.finishing_reason, backoff)
                self._finish_now.wait(backoff)
                self._finish_now.clear()
                backoff = min(FINISH_BACKOFF_MAX_S, backoff * 2)

    # ---- phases -----------------------------------------------------------------
    def _phase(self, name: str) -> None:
        self._end_phase()
        self.phase = name
        self.phases.append(PhaseTiming(name, _utc(), round(time.monotonic() - self.created, 3)))
        log.info("migration %s: %s", self.id, name)
        self._hold(name)

    def _hold(self, point: str) -> None:
        hold = (self.opts.hold_s or {}).get(point)
        if hold and getattr(self.node.config, "fault_injection", False):
            if self.past_point_of_no_return:
                time.sleep(float(hold))
            else:
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

    def _target(self, name: str, body: dict | None = None, timeout_s: float = 60.0):
        self._check_abort()
        return self.peer.step(name, body, timeout_s=timeout_s, phase=self.phase)

    def _preflight(self) -> None:
        if self.opts.target == self.source:
            raise InvalidInput(f"tenant {self.tenant_id} is already on {self.source}",
                               "source and target are the same node", "pick another --to node")
        self.node.cluster.node(self.opts.target)
        if self.node.config.tls is not None and not TLS_PIPES.get(self.opts.pipe):
            raise InvalidInput(f"the {self.opts.pipe} pipe cannot be used: this cluster requires TLS",
                               "pv | nc sends the backup in plain text", "use --pipe native (the default)")
        own = self.node.directory.lookup(self.tenant_id)
        if own.node != self.source:
            raise Conflict(f"tenant {self.tenant_id} is owned by {own.node}", f"not by {self.source}",
                           "ask the owner's agent")
        self.epoch_before = own.epoch
        version, self.warnings = self.src.inspect(live=self.opts.mode == "live")
        for w in self.warnings:
            log.warning("migration %s: %s", self.id, w)
        self.tool = select_tool(version)
        tenant = self.src.tenant()
        tenant.ensure_service_accounts()
        binlog_bytes = sum(p.stat().st_size for p in tenant.datadir.glob("binlog.*"))
        data_bytes = directory_bytes(tenant.datadir)
        self.bytes_total = data_bytes if self.opts.mode == "stop-and-copy" else max(0, data_bytes - binlog_bytes)
        self.transfer_token = new_token()
        target_url = self.node.cluster.node(self.opts.target).url
        if not url_may_carry_secrets(target_url, self.node.cluster.local_subnet):
            raise MigrationFailed(f"refusing to send {self.tenant_id}'s account passwords to {self.opts.target}",
                                  f"{target_url} is plain HTTP to another host",
                                  "give the agents TLS (https:// URLs in the cluster file)", phase="preflight")
        self.peer.call("GET", "/v1/status", timeout_s=10, phase="preflight")
        # Journaled before the target exists, so a restarted source agent knows to remove it.
        self.journal.update(self.entry, epoch_before=own.epoch)
        self._incoming_created = True
        doc = self.peer.create({
            "migration_id": self.id, "tenant": self.tenant_id, "port": tenant.port, "source_node": self.source,
            "source_host": tenant.host, "epoch_before": own.epoch, "lease_ttl_s": self.opts.lease_ttl_s,
            "buffer_pool_bytes": tenant.info.buffer_pool_bytes, "admin_password": tenant.admin_password(),
            "app_password": tenant.app_password(), "backup_password": tenant.backup_password(),
            "repl_password": tenant.repl_password(), "token": self.transfer_token, "mode": self.opts.mode,
            "expected_bytes": self.bytes_total}, phase="preflight")
        self._lease_ok_at = time.monotonic()
        threading.Thread(target=self._lease_loop, name=f"lease-{self.id}", daemon=True).start()
        self.receiver = (doc["receiver_host"], int(doc["receiver_port"]))

    def _lease_loop(self) -> None:
        """Renew our lease on the target; a target whose lease ran out asks the directory and cleans up."""
        interval = self.opts.lease_ttl_s / 4
        while not self._lease_stop.wait(interval):
            try:
                self._renew_lease(timeout_s=interval)
            except SlackerError as exc:
                log.warning("migration %s: lease renewal failed: %s", self.id, exc.one_line())

    def _renew_lease(self, timeout_s: float) -> None:
        sent = time.monotonic()
        ttl = self._lease_ttl_s
        self.peer.step("lease", {"ttl_s": ttl}, timeout_s=timeout_s)
        # Counted from when we sent it: the target counts from when it got it, which is later.
        self._lease_ok_at, self._lease_ok_ttl = sent, ttl

    def _lease_left_s(self) -> float:
        if self._lease_ok_at is None:
            return 0.0
        return self._lease_ok_ttl - (time.monotonic() - self._lease_ok_at)

    def _stream(self, producer_argv: list[str], timeout_s: float) -> None:
        """Run the throttled pipe to the target's receiver until it is acknowledged."""
        initial = self.opts.rate_bytes_per_s
        if self.rate_policy is not None:
            initial = self.rate_policy.initial_rate()
        self.pipe = make_pipe(self.opts.pipe, producer_argv, self.receiver[0], self.receiver[1], self.id,
                              self.transfer_token, rate_bytes_per_s=initial, finish_timeout_s=timeout_s,
                              commit_lock_events=commit_lock_event, ssl_context=self.node.tls_client_context(),
                              preread_program=True)
        try:
            self.pipe.start()  # reads the backup tool in first (slacker.pagecache): an abort can land there
        except MigrationFailed:
            self._check_abort()
            raise
        deadline = time.monotonic() + timeout_s
        while not self.pipe.done:
            self._check_abort()
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        result = self.pipe.wait(timeout=max(1.0, deadline - time.monotonic()))
        self._target("stream", {"timeout_s": 120}, timeout_s=180)
        self.bytes_total = result.bytes_sent

    def _snapshot(self) -> None:
        from .. import mariadb

        self._phase("snapshot")
        tenant = self.src.tenant()
        defaults = self.work_dir / "backup.cnf"
        mariadb.write_secret(defaults, self.tool.backup_defaults(
            tenant.config_file.read_text(), mariadb.BACKUP_USER, tenant.backup_password(), tenant.socket))
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        self._stream(self.tool.stream_argv(defaults, self.work_dir / "tmp"), self.opts.snapshot_timeout_s)

    def _prepare(self) -> None:
        self._phase("prepare")
        pos = self._target("prepare", {}, timeout_s=3600)
        self.backup_position = BackupPosition(pos["binlog_file"], int(pos["binlog_pos"]), pos["gtid"])
        self._target("start", {}, timeout_s=180)
        tenant = self.src.tenant()
        self._target("replicate", {"source_host": tenant.host, "source_port": tenant.port,
                                   "start_gtid": self.backup_position.gtid,
                                   "applier": self.opts.delta_applier, "mpl": self.opts.delta_mpl,
                                   "catchup": self.opts.delta_catchup},
                     timeout_s=60)
        self._delta_from = ((self.backup_position.binlog_file, self.backup_position.binlog_pos),
                            self.backup_position.gtid)
        self._apply_rate: float | None = None

    def _delta(self) -> None:
        self._phase("delta")
        conn = self.src.connect(timeout_s=10)
        try:
            prev, prev_gtid = self._delta_from
            stalled = 0
            last_remaining = None
            judge, prev_t = ConvergenceJudge(), None
            for _ in range(self.opts.max_rounds):
                self._check_abort()
                p = ops.binlog_position(conn)
                now = time.monotonic()  # the source's commit rate since the previous round
                write_tps = None
                if prev_t is not None:
                    write_tps = round(gtids.transactions_between(prev_gtid, p.gtid) / max(1e-3, now - prev_t), 1)
                prev_t = now
                size = gtids.binlog_bytes_between(p.logs, prev, (p.file, p.pos))
                txns = gtids.transactions_between(prev_gtid, p.gtid)
                doc = self._target("wait", {"gtid": p.gtid, "timeout_s": self.opts.round_timeout_s},
                                   timeout_s=self.opts.round_timeout_s + 30)
                dur = float(doc["waited_s"])
                if size > 0 and dur > 0.01:
                    measured = size / dur
                    self._apply_rate = measured if self._apply_rate is None else 0.5 * self._apply_rate + 0.5 * measured
                p2 = ops.binlog_position(conn)
                remaining = gtids.binlog_bytes_between(p2.logs, (p.file, p.pos), (p2.file, p2.pos))
                # Until a round has been big enough to time, assume a conservative 1 MB/s.
                est_freeze_s = remaining / (self._apply_rate or 1e6)
                stats = doc.get("applier") or {}
                self.delta_stats = stats
                self.rounds.append(RoundReport(len(self.rounds) + 1, txns, size, round(dur, 4), remaining,
                                               round(est_freeze_s * 1000, 1), write_tps, stats.get("apply_tps"),
                                               stats.get("mpl")))
                prev, prev_gtid = (p.file, p.pos), p.gtid
                self._delta_from = (prev, prev_gtid)
                # Leave half the budget for the freeze's own fixed costs (lock, fence, flip).
                if est_freeze_s <= self.opts.max_freeze_s / 2:
                    return
                verdict = judge.observe(len(self.rounds), write_tps, stats)  # writes vs best apply
                if verdict:
                    raise MigrationFailed(verdict, "", "", phase="delta")
                if last_remaining is not None and remaining >= last_remaining:
                    stalled += 1
                    if stalled >= self.opts.max_stalled_rounds:
                        rates = (f"; writes {write_tps:,.0f}/s, apply {stats.get('apply_tps') or 0:,.0f}/s"
                                 if write_tps is not None else "")
                        raise MigrationFailed(
                            "delta rounds stopped shrinking",
                            f"{stalled} rounds in a row left >= {last_remaining} bytes "
                            f"(estimated freeze {est_freeze_s * 1000:.0f}ms > {self.opts.max_freeze_s * 1000:.0f}ms)"
                            + rates,
                            "the write load outpaces the applier: raise --max-freeze, migrate at a quieter time",
                            phase="delta")
                else:
                    stalled = 0
                last_remaining = remaining
            raise MigrationFailed("delta did not converge", f"{self.opts.max_rounds} rounds were not enough",
                                  "raise --max-freeze or reduce the write load", phase="delta")
        finally:
            ops.close_quietly(conn)

    # ---- handover ------------------------------------------------------------------
    def _estimate_verify_s(self) -> float:
        """What --verify costs inside the freeze: time the source's checksums now (not frozen)."""
        conn = self.src.connect(timeout_s=10)
        try:
            t0 = time.monotonic()
            table_checksums(conn)
            return time.monotonic() - t0
        finally:
            ops.close_quietly(conn)

    def _handover_live(self) -> None:
        # leave catch-up mode before any freeze, so its cost never lands in the freeze.
        self.durable_ms = self._target("durable", {}, timeout_s=120)
        self.delta_stats["catchup"] = self.durable_ms.get("catchup", False)
        self._phase("handover")
        if self.opts.verify:
            # Both sides run in parallel inside the freeze; allow for the slower one and the lock.
            need = self._estimate_verify_s() * 1.5
            if need > self.opts.max_freeze_s * 0.8:
                raise MigrationFailed("--verify does not fit in the freeze",
                                      f"checksums take about {need * 1000:.0f}ms, --max-freeze is "
                                      f"{self.opts.max_freeze_s * 1000:.0f}ms",
                                      "raise --max-freeze or migrate without --verify; nothing was frozen",
                                      phase="handover")
        for n in range(1, self.opts.handover_attempts + 1):
            try:
                self._handover_attempt(n)
                return
            except OverBudget as exc:
                if n == self.opts.handover_attempts:
                    raise MigrationFailed(
                        f"handover did not fit in --max-freeze {self.opts.max_freeze_s * 1000:.0f}ms",
                        f"{n} attempts, last: {exc.why}",
                        "the source keeps serving; raise --max-freeze or migrate at a quieter time",
                        phase="handover") from None
                log.info("migration %s: handover attempt %d over budget (%s); more delta rounds", self.id, n,
                         exc.why)
                self._target("resume", {}, timeout_s=60)
                self._delta()
                self._phase("handover")

    def _warm_connections(self) -> None:
        """Open the connections the freeze will use (target agent; the directory when another agent
        serves it) now, so no TLS handshake happens inside the freeze. Plain text: nothing to do."""
        self.node.peer(self.opts.target).warm()
        agent = getattr(self.node.directory, "agent", None)
        if agent is not None:
            agent.warm()

    def _handover_attempt(self, n: int) -> None:
        budget = self.opts.max_freeze_s
        steps: dict[str, float] = {}
        self._warm_connections()  # before the clock starts: opening them is not part of the freeze
        t0 = time.monotonic()
        deadline = t0 + budget

        def mark(step: str) -> None:
            steps[step] = round((time.monotonic() - t0) * 1000, 1)

        def left(step: str) -> float:
            rest = deadline - time.monotonic()
            if rest <= 0:
                raise OverBudget("handover over budget", f"{step} reached {(time.monotonic() - t0) * 1000:.0f}ms",
                                 "", phase="handover")
            return rest

        # A fresh lease that outlasts the whole attempt, so the target cannot give up on us mid-flip.
        self._lease_ttl_s = max(self.opts.lease_ttl_s, budget + 2 * LEASE_MARGIN_S)
        self._renew_lease(timeout_s=5)
        mark("lease")
        try:
            try:
                frozen = self.src.freeze(lock_timeout_s=max(0.05, min(budget / 2, left("lock"))))
            except MigrationFailed as exc:
                # Not granted in time (statements in flight hold the tables: under a heavy write load
                # with multi-statement transactions this happens now and then). Nothing was frozen:
                # like an attempt over budget, more delta rounds and another attempt.
                if exc.what != "could not freeze the source" or "not granted" not in exc.why:
                    raise
                raise OverBudget("handover over budget", f"lock: {exc.why}", "", phase="handover") from None
            mark("locked")
            final = ops.gtid_position(frozen)
            self._hold("frozen")
            try:
                self._target("wait", {"gtid": final, "timeout_s": left("catch-up")}, timeout_s=left("catch-up") + 30)
            except MigrationFailed as exc:
                # a target still applying when the budget runs out is over budget (unfreeze, more
                # delta rounds, retry), not a failed migration; a stopped applier still fails.
                if exc.what != "the target did not catch up in time":
                    raise
                raise OverBudget("handover over budget", f"catch-up: {exc.why}", "", phase="handover") from None
            mark("caught_up")
            if self.opts.verify:
                self._verify(frozen, left("verify"))
                mark("verified")
            # Nothing may have committed since the final position was read: the lock still holds.
            if ops.gtid_position(frozen) != final:
                raise MigrationFailed("source changed during the freeze", "its GTID position moved",
                                      "handover aborted; the source keeps serving", phase="handover")
            self._target("ready", {"final_gtid": final}, timeout_s=left("target ready") + 30)
            mark("target_ready")
            left("fence")
            self.journal.update(self.entry, state="fenced", final_gtid=final)
            self.src.fence()
            mark("fenced")
            self._hold("fenced")
            left("flip")
            with self._pnr_lock:
                self._check_abort()
                if self._lease_left_s() < LEASE_MARGIN_S:
                    raise MigrationFailed("the lease on the target ran out", "the target may have given up",
                                          "the source keeps serving", phase="handover")
                self._cas_started = True
            self.journal.update(self.entry, state="flipping")
        except BaseException as exc:
            if isinstance(exc, OverBudget):
                self.attempts.append(HandoverAttempt(n, "over budget", steps.get("fenced", 0.0) or
                                                     round((time.monotonic() - t0) * 1000, 1), steps, exc.why))
            else:
                self.attempts.append(HandoverAttempt(n, "failed", round((time.monotonic() - t0) * 1000, 1), steps,
                                                     _one_line(exc)))
            self._undo_handover()
            raise
        own = self._cas(deadline)
        if own is None:  # the directory answered: the flip did not happen
            self._cas_started = False
            self.attempts.append(HandoverAttempt(n, "failed", round((time.monotonic() - t0) * 1000, 1), steps,
                                                 "ownership changed underneath"))
            self._undo_handover()
            raise MigrationFailed("ownership changed underneath", "the directory's epoch moved before the flip",
                                  "the source keeps serving", phase="handover")
        self.epoch_after = own.epoch
        self.freeze_ms = round((time.monotonic() - t0) * 1000, 1)
        mark("flipped")
        self.handover_steps_ms = steps
        self.attempts.append(HandoverAttempt(n, "flipped", self.freeze_ms, steps))
        self.journal.update(self.entry, state="flipped", epoch_after=own.epoch)
        self.src.unfreeze()  # the fence holds: writers blocked by the freeze now fail as read-only
        self._hold("flipped")

    def _undo_handover(self) -> None:
        """Before the flip: unfence, unfreeze. The target keeps its copy for the next attempt."""
        try:
            if self.src.fenced:
                self.src.unfence()
        finally:
            self.src.unfreeze()
            if self.entry.state != "started":
                self.journal.update(self.entry, state="started")

    def _verify(self, frozen, budget_s: float) -> None:
        # Both sides at once: the freeze lasts as long as the slower of the two, not their sum.
        box: dict = {}

        def target_side():
            try:
                box["dst"] = self.peer.step("checksums", {}, timeout_s=budget_s + 30)["checksums"]
            except BaseException as exc:  # re-raised in the migration's thread
                box["err"] = exc

        t = threading.Thread(target=target_side, daemon=True)
        t.start()
        src = table_checksums(frozen)
        t.join(budget_s + 30)
        if "err" in box:
            raise box["err"]
        if "dst" not in box:
            raise OverBudget("handover over budget", "target checksums did not finish in time", "", phase="handover")
        dst = box["dst"]
        if src != dst:
            diff = sorted(k for k in set(src) | set(dst) if src.get(k) != dst.get(k))
            raise MigrationFailed("verification failed", f"checksums differ for {', '.join(diff[:5])}",
                                  "the source keeps serving; report this", phase=self.phase)
        self.verified = True

    def _directory_answer(self, why: str, since: float | None = None):
        """Look the tenant up until the directory answers; an outage is reported, never guessed through."""
        t0 = since if since is not None else time.monotonic()
        while True:
            try:
                own = self.node.directory.lookup(self.tenant_id)
                if since is not None or time.monotonic() - t0 > 1:
                    self.outage_s = round(time.monotonic() - t0, 1)
                self.finishing_reason = ""
                return own
            except AgentUnavailable as exc:
                self._report_outage(why, t0, exc)
                time.sleep(0.5)

    def _report_outage(self, why: str, t0: float, exc: SlackerError) -> None:
        self.outage_s = round(time.monotonic() - t0, 1)
        self.finishing_reason = (f"directory unreachable for {self.outage_s:.0f}s ({why}); the source stays "
                                 f"fenced until it answers: {exc.why or exc.what}")
        if self.outage_s > self.opts.max_freeze_s:
            self.src.unfreeze()  # the fence alone holds writes off; writers get an error, not a hang

    def _settle_flip(self) -> None:
        own = self._directory_answer("flip outcome unknown")
        if own.node == self.opts.target and own.epoch == (self.epoch_before or 0) + 1:
            self.epoch_after = own.epoch
            self.journal.update(self.entry, state="flipped", epoch_after=own.epoch)
        else:
            self._cas_started = False

    def _cas(self, deadline: float | None = None):
        """Compare-and-set the directory. Returns the new ownership, or None if the flip lost.

        An unknown outcome fails closed: the source stays fenced while we ask again, for as long
        as the directory takes to answer.
        """
        target = self.node.cluster.node(self.opts.target)
        tenant = self.src.tenant()
        while True:
            sent = time.monotonic()
            try:
                own = self.node.directory.compare_and_set(self.tenant_id, self.epoch_before, target.name,
                                                          target.tenant_host, tenant.port)
                self.finishing_reason = ""
                if deadline is not None and time.monotonic() > deadline:
                    # Sent in time, answered late: the freeze outlasted its bound waiting on the directory.
                    # A resend after an outage must not shrink the outage already measured.
                    self.outage_s = max(self.outage_s or 0.0, round(time.monotonic() - sent, 3))
                return own
            except (AgentUnavailable, Conflict) as exc:
                since = None
                if isinstance(exc, AgentUnavailable):
                    log.warning("migration %s: flip outcome unknown (%s); asking the directory", self.id,
                                exc.one_line())
                    self._report_outage("flip outcome unknown", sent, exc)
                    since = sent
                own = self._directory_answer("flip outcome unknown", since=since)
                if own.node == target.name and own.epoch == self.epoch_before + 1:
                    self.finishing_reason = ""
                    return own  # our write landed before the connection broke
                if own.epoch != self.epoch_before:
                    return None  # someone else won (the target, giving up on an expired lease)
                # Still at epoch_before: the write never landed; send it again.

    def _stop_and_copy(self) -> None:
        self._phase("copy")
        tenant = self.src.tenant()
        t0 = time.monotonic()
        frozen = self.src.freeze(lock_timeout_s=max(0.05, self.opts.max_freeze_s / 2))
        final = ops.gtid_position(frozen)
        if self.opts.verify:
            self._source_checksums = table_checksums(frozen)
        self.journal.update(self.entry, state="fenced", final_gtid=final)
        self.src.fence()
        # InnoDB files are only consistent on disk after a clean shutdown; writers stay blocked until then.
        self.node.tenants.stop_tenant(tenant)
        self._source_stopped = True
        self.src.frozen = None
        self._stream(["tar", "-C", str(tenant.datadir), "-c", "-f", "-", "."], self.opts.snapshot_timeout_s)
        self._phase("handover")
        self._target("start", {"gtid_state": final}, timeout_s=300)
        if self.opts.verify:
            dst = self._target("checksums", {}, timeout_s=600)["checksums"]
            if dst != self._source_checksums:
                raise MigrationFailed("verification failed", "checksums differ after the copy", "", phase="handover")
            self.verified = True
        self._target("ready", {"final_gtid": None}, timeout_s=120)
        with self._pnr_lock:
            self._check_abort()
            self._cas_started = True
        self.journal.update(self.entry, state="flipping")
        own = self._cas()
        if own is None:
            self._cas_started = False
            raise MigrationFailed("ownership changed underneath", "the directory's epoch moved before the flip",
                                  "the source keeps serving", phase="handover")
        self.epoch_after = own.epoch
        self.freeze_ms = round((time.monotonic() - t0) * 1000, 1)
        self.journal.update(self.entry, state="flipped", epoch_after=own.epoch)

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
                rate, state = self.rate_policy.step(now, done, mark=copy_mark(self, now), bytes_total=self.bytes_total)
                self.pipe.set_rate(rate)
                if self.pipe.commit_locked:
                    state["note"] = "backup holds the commit lock: copying unthrottled" + (
                        f" ({state['note']})" if state.get("note") else "")
                elif self.pipe.prereading:
                    state["note"] = (f"reading the backup tool into memory at this rate "
                                     f"({self.pipe.preread_bytes / 1e6:.1f} MB)") + (
                        f" ({state['note']})" if state.get("note") else "")
                self.controller_state = state
            elif self.result is None and self.phase not in ("pending", "preflight"):
                # Outside the copy the controller has nothing to steer, but the latency still tells
                # what prepare, delta and the freeze cost the clients: keep recording it.
                sample = self.rate_policy.source.read()
                state = dict(self.controller_state or {})
                state.update(latency_s=sample.latency_s, note="observing (no copy in this phase)")
                state.update(getattr(self.rate_policy.source, "sides", None) or {})
                self.controller_state = state
        self._record()

    def _record(self) -> None:
        sample = {"t": round(time.monotonic() - self.created, 3), "ts": _utc(), "phase": self.phase,
                  "bytes_done": self.bytes_done(), "bytes_total": self.bytes_total,
                  "rate_bytes_per_s": self.current_rate(), "throughput_bytes_per_s": round(self._throughput, 1)}
        if self.pipe is not None and self.pipe.commit_locked and not self.pipe.done:
            sample["commit_locked"] = True  # the rate above is not applied: the copy runs unthrottled
        if self.pipe is not None and self.pipe.preread_bytes:
            sample["preread_bytes"] = self.pipe.preread_bytes  # the backup tool's program, read before it ran
        if self.finishing_reason:
            sample["note"] = self.finishing_reason
        if self.controller_state:
            for k in ("latency_s", "last_latency_s", "setpoint_s", "p", "i", "d", "fraction", "aim", "knee_bytes_per_s",
                      "note", "source_state", "binding", "source_latency_s", "target_latency_s", "target_setpoint_s",
                      *MODEL_KEYS, "mark", "verdict"):
                if k in self.controller_state:
                    sample[k] = self.controller_state[k]
        if self.phase == "delta" and self.delta_stats:  # the MPL and apply rate over time
            sample["delta_mpl"] = self.delta_stats.get("mpl")
            sample["apply_tps"] = self.delta_stats.get("apply_tps")
        with self._series_lock:
            self.series_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.series_path, "a") as f:
                f.write(json.dumps(sample) + "\n")


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, SlackerError):
        return exc.one_line()
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
