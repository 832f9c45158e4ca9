"""The migration phase machine, run by the source node's agent.

preflight -> snapshot -> prepare -> delta -> handover -> cleanup (live), or
preflight -> copy -> handover -> cleanup (stop-and-copy, the baseline).

The point of no return is the directory's compare-and-set. Before it, any
failure rolls back: the source is unfenced and serving, the partial target
removed. From it on the migration only goes forward: failures are retried
(phase "finishing") until the target is writable and the source retired.
Every step of the handover is journaled on disk first, so a restarted agent
finishes what it was doing. See docs/migration.md.

This class only sequences and keeps what happened in its record (`record.py`: phases, rounds,
attempts, waits, timings, the migration's document); the roles are one file each: `rounds.py` (the
delta-round policy), `handover.py` (freeze -> catch up -> fence -> flip),
`flip.py` (the compare-and-set, fail-closed), `lease.py`, `telemetry.py` (the
one-second step and the time series), and the states and
allowed moves in `protocol.py`.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from ..channels import url_may_carry_secrets
from ..backup import BackupPosition, commit_lock_event, directory_bytes, select_tool
from ..mariadb import ops
from ..errors import AgentUnavailable, Conflict, InvalidInput, MigrationFailed, NotFound, SlackerError
from ..transfer import TLS_PIPES, blame, make_pipe
from ..transfer.native import wants_splice
from ..trash import TrashName, discard
from ..transfer.protocol import new_token
from .flip import Flip
from .handover import Handover, one_line
from .journal import Entry
from .lease import Lease
from .options import MigrationAborted, MigrationOptions, MigrationRequest
from .participants import Participants
from .peer import TargetPeer
from .protocol import PHASE_MOVES, Phase, SourceState, check
from .ready import CutoverAsked, ReadyWait
from .rounds import DeltaRounds
from .noreturn import PointOfNoReturn
from .record import LiveFigures, MigrationRecord, new_id
from .seams import FlipNotSent, Result, Seam
from .telemetry import Telemetry
from .source import SourceSide
from ..verify.online import OnlineVerification

log = logging.getLogger("slacker.migration")

MIN_ETA_THROUGHPUT_BYTES_PER_S = 1000.0
FINISH_BACKOFF_MAX_S = 2.0  # past the flip: the longest pause between two retries of a forward step
TARGET_HOLD_POINTS = ("activating", "started", "unfencing", "unfenced")  # hold_s points honoured by the target's activation


class Migration:
    """One migration of one tenant from this node. `run()` blocks; `abort()` may come from any thread."""

    def __init__(self, node, tenant_id: str, options: MigrationOptions, *, participants: Participants,
                 rate_policy=None, recovered: Entry | None = None) -> None:
        self.node = node
        self.opts = options  # validated where the request was decoded (MigrationRequest)
        mid = recovered.id if recovered is not None else new_id(tenant_id)
        self.record = MigrationRecord(mid, tenant_id, node.name,
                                      Path(node.config.data_root) / "migrations" / f"{mid}.jsonl",
                                      protocol=node.protocol, recovered=recovered)
        # The tenant's side: a whole server, or one database of the node's shared server (its kind's seam).
        self.kind = node.kind_here(tenant_id)
        # A move that changes the kind (`--into`): its copy and delta are of the tenant's one database either way.
        self.into = options.into if options.into and options.into != self.kind else None
        self.one_db = self.kind == "shared" or self.into is not None
        if self.kind == "shared":
            from .onedb_source import OneDbSource
            self.source = OneDbSource(node, tenant_id)
        else:
            self.source = SourceSide(node, tenant_id)
            if self.into == "shared":
                self.source.verify_schema = tenant_id  # --verify compares its one database, as the target has it
        self.target_port: int | None = None  # where the tenant listens on the target (a shared server's port)
        self.peer = TargetPeer(node, self.opts.target, mid)
        self.entry = recovered or Entry(id=mid, tenant=tenant_id, role="source", peer=self.opts.target,
                                        state=SourceState.STARTED, source_node=node.name,
                                        keep_s=options.keep_source_s)
        self.pipe = None
        self.verification: OnlineVerification | None = None  # --verify: phase verify (slacker.verify)
        self.rate_policy = rate_policy  # None: fixed rate from options
        self.paused_rate: float | None = None  # `--set pause` without a controller: the rate `resume` restores
        # What preflight learns for the copy.
        self.tool = None  # the backup tool for the source's server version (slacker.backup)
        self.transfer_token = ""  # the copy's one-time token, given to the target's receiver
        self.receiver: tuple[str, int] | None = None  # the target's receiver (host, port)
        # Whether an abort may still roll back: decided against the compare-and-set under one lock.
        self.no_return = PointOfNoReturn(
            flip_sent=recovered is not None and recovered.state in (SourceState.FLIPPING, SourceState.FLIPPED))
        # What a rollback has to undo.
        self._incoming_created = recovered is not None
        self._source_stopped = False
        self._retired_copy = None  # the old copy, set aside at retire; its files deleted after the result
        self._finish_now = threading.Event()
        self._cutover_now = CutoverAsked()  # `slacker migrate --cutover-now [--verify]`
        self.finish_backoff_s = 0.5  # the first wait before a failed forward step is retried; then doubling
        # The roles the phase machine sequences, one file each; each sees the migration through one seam
        # (slacker.migration.seams) and hands back what it decides.
        self.seam = Seam(self)
        self.lease = Lease(self.peer, self.opts.lease_ttl_s, mid)
        self.flip = Flip(self.seam)
        self.handover = Handover(self.seam, participants)
        self.delta_rounds: DeltaRounds | None = None  # from the backup's binlog position, once prepared
        self.telemetry = Telemetry(self.seam, self.record.series_path)

    # ---- public -----------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.record.id

    @property
    def tenant_id(self) -> str:
        return self.record.tenant_id

    @property
    def source_name(self) -> str:
        """This node, the tenant's owner before the flip (`source` is the tenant's side of the move)."""
        return self.record.source_name

    @property
    def phase(self) -> str:
        return self.record.phase

    @property
    def result(self) -> str | None:
        return self.record.result

    @property
    def active(self) -> bool:
        return self.record.active

    @property
    def past_point_of_no_return(self) -> bool:
        return self.record.past_point_of_no_return

    @property
    def journal(self):
        return self.node.journal

    @property
    def work_dir(self) -> Path:
        return Path(self.node.config.data_root) / "migrations" / self.id

    def abort(self, reason: str = "aborted by the operator") -> None:
        """Abort before the compare-and-set; Conflict once it has been sent (only forward from there)."""
        if not self.no_return.abort(reason):
            why = ("the directory already names the target" if self.past_point_of_no_return
                   else "the ownership flip was sent and the directory has not answered yet")
            raise Conflict(f"migration {self.id} cannot be aborted", f"{why}: past the point of no return",
                           f"it finishes forward; `slacker migrate --finish {self.tenant_id}` retries now")
        pipe = self.pipe
        if pipe is not None:
            pipe.abort()
        if self.verification is not None:
            self.verification.abort()

    def finish_now(self) -> None:
        """`slacker migrate --finish`: retry the forward steps at once instead of at the next backoff."""
        self._finish_now.set()

    def cutover_now(self, verify: bool = False) -> None:
        """`slacker migrate --cutover-now [--verify]`: a migration that waits for its cutover goes at once when
        ready (or as soon as its delta converges, if it is still copying), compared online first with
        `verify`. Conflict for one that never waits."""
        if not self.opts.cutover_plan().waits:
            raise Conflict(f"migration {self.id} does not wait for a cutover",
                           "it was started with --cutover auto: it cuts over as soon as its delta converges", "")
        if self.phase not in (Phase.PENDING, Phase.PREFLIGHT, Phase.SNAPSHOT, Phase.PREPARE, Phase.DELTA,
                              Phase.VERIFY, Phase.READY):
            raise Conflict(f"migration {self.id} is already cutting over", f"it is in {self.phase}", "")
        self._cutover_now.ask(verify)

    def pause(self) -> None:
        """`--set pause` of a migration without a controller: rate 0, the rate before kept for `resume`."""
        self.paused_rate = self.current_rate()
        self.set_rate(0)

    def resume(self) -> None:
        self.set_rate(self.paused_rate)

    def fixed_rate(self, rate: float | None) -> None:
        """`--set rate=`: a new fixed rate; a pause before it is forgotten."""
        self.paused_rate = None
        self.set_rate(rate)

    def set_rate(self, rate: float | None) -> None:
        self.opts.rate_bytes_per_s = rate
        if self.pipe is not None and self.rate_policy is None:
            self.pipe.set_rate(rate)
        if self.verification is not None and self.rate_policy is None:
            self.verification.set_rate(rate)

    def _verifying(self) -> OnlineVerification | None:
        return self.verification if self.phase == Phase.VERIFY else None

    def bytes_done(self) -> int:
        if self._verifying():  # the phase's own progress: table bytes summed on both sides
            return self.verification.bytes_done
        return self.pipe.bytes_sent if self.pipe is not None else 0

    def current_rate(self) -> float | None:
        if self._verifying():
            return self.verification.rate
        if self.pipe is not None:
            return self.pipe.rate
        return self.opts.rate_bytes_per_s

    def eta_s(self) -> float | None:
        # No estimate while paused or crawling: the decaying throughput average would give absurd figures;
        # none for a copy its controller's verdict says cannot finish (slacker.controller.verdict).
        total = self.verification.bytes_total if self._verifying() else self.record.bytes_total
        if (self.phase not in (Phase.SNAPSHOT, Phase.COPY, Phase.VERIFY)
                or self.telemetry.throughput < MIN_ETA_THROUGHPUT_BYTES_PER_S
                or (self.record.controller_state is not None and self.record.controller_state.verdict)
                or not total or self.current_rate() == 0):
            return None
        return max(0.0, (total - self.bytes_done()) / self.telemetry.throughput)

    def to_dict(self) -> dict:
        pipe = self.pipe
        live = LiveFigures(
            bytes_done=self.bytes_done(), rate_bytes_per_s=self.current_rate(),
            throughput_bytes_per_s=self.telemetry.throughput, eta_s=self.eta_s(),
            preread_bytes=pipe.preread_bytes if pipe is not None else 0,
            prereading=bool(pipe is not None and pipe.prereading),
            copy_stages=self.record.steps.copy_stages(pipe),
            verify=self.verification.to_dict() if self.verification else None,
            latency_source=self.rate_policy.latency_source if self.rate_policy is not None else None)
        return self.record.to_dict(self.opts, live)

    def run(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.record.hold_end()  # the answer waits for the last sample (slacker.migration.record)
        self.telemetry.start()
        try:
            self._drive(self._live if self.opts.mode == "live" else self._stop_and_copy)
        finally:
            self._close()

    def _live(self) -> None:
        """The phase table of a live migration (docs/migration.md, slacker.migration.protocol)."""
        self.enter(Phase.PREFLIGHT)
        if self.opts.revert:  # back onto the kept copy: nothing to copy, it replicates from here already
            self._preflight_revert()
            self.delta_rounds.run()
            self.handover.run()
            return
        self._preflight()
        self._snapshot()
        self._prepare()
        self.delta_rounds.run()
        if self.opts.verify:
            self._verify()
            if self.opts.verify_only:
                return  # _drive rolls back: the source was never touched
        if self.opts.cutover_plan().waits:
            self._journal_ready()
            self._ready()
        self.handover.run()

    def _verify(self) -> None:
        """Both sides compared row by row at one position, online (slacker.verify); a difference fails."""
        self.enter(Phase.VERIFY)
        self.verification = OnlineVerification(self.seam)
        try:
            self.verification.run()
        finally:  # its verdict, equal or not (a failure on the way leaves it None)
            if self.verification.result is not None:
                self.record.verified = self.verification.result == "equal"

    # ---- ready: waiting for the operator's cutover ---------------------------------------------
    def _journal_ready(self) -> None:
        """What a restarted agent needs to resume the wait, kept before the wait begins."""
        (file, pos), gtid = self.delta_rounds.position
        self.journal.update(self.entry, state=SourceState.READY, resume={
            "options": MigrationRequest(self.tenant_id, self.opts).to_wire(),
            "origin": list(self.delta_rounds.origin), "position": [file, pos, gtid],
            "target_port": self.target_port, "protocols": list(self.record.protocols), "ready_at": time.time()})

    def _ready(self) -> None:
        """The target applies continuously until the operator's time (slacker.migration.ready); then the
        handover, journaled from `started` as always."""
        resume = self.entry.resume or {}
        already = max(0.0, time.time() - resume["ready_at"]) if resume.get("ready_at") else 0.0
        why = ReadyWait(self.seam, self.opts.cutover_plan(), self.delta_rounds.origin, self._cutover_now,
                        already_s=already).run()
        log.info("migration %s: cutting over (%s)", self.id, why)
        if self._cutover_now.verify:  # `--cutover-now --verify`: compared now, while the source still serves
            self._verify()
        self.journal.update(self.entry, state=SourceState.STARTED)

    def _resume_ready(self) -> None:
        """After an agent restart with the migration ready: the target still holds its copy and applies (it
        kept it while its lease lasted): renew the lease, wait again, then the handover. A target that
        gave its copy up fails the lease's renewal, and the migration rolls back with the source serving."""
        r = self.entry.resume
        self.record.epoch_before = self.entry.epoch_before
        self.record.protocols = tuple(r.get("protocols") or (self.node.protocol, 1))
        self.target_port = r.get("target_port")
        file, pos, gtid = r["position"]
        self.delta_rounds = DeltaRounds(self.seam, ((file, int(pos)), gtid))
        self.delta_rounds.origin = (r["origin"][0], int(r["origin"][1]))
        self.lease.renew(timeout_s=5)
        self.lease.start()
        self._ready()
        self.handover.run()

    def _drive(self, steps) -> None:
        """Run `steps` up to the flip; then forward. A failure before the flip rolls back, never after."""
        try:
            steps()
        except BaseException as exc:
            if self.no_return.flip_sent and not self.past_point_of_no_return:
                # The flip was sent and something broke: only the directory knows how it ended.
                self.flip.settle()
            if self.past_point_of_no_return:
                self._go_forward(f"after the flip: {one_line(exc)}")
            else:
                self._fail(exc)
                return
        if self.opts.verify_only and not self.past_point_of_no_return:
            self._rollback()  # verified, nothing else was asked: the target goes, the source never stopped
            self.record.result = "verified"
            return
        self.enter(Phase.CLEANUP)
        self._go_forward("")

    def recover(self) -> None:
        """After an agent restart: ask the directory whether the flip happened, then forward or back."""
        self.enter(Phase.RECOVERING)
        self.record.hold_end()
        self.telemetry.start()
        # Routers may hold the tenant for the handover that was cut short: let them go when decided.
        self.handover.release_everywhere_when_done()
        try:
            if self.entry.state == SourceState.READY and self.entry.resume:
                log.warning("migration %s: resuming the ready wait after an agent restart", self.id)
                self._incoming_created = True
                self._drive(self._resume_ready)
                return
            if self.entry.state == SourceState.STARTED:
                self._fail(MigrationFailed(f"migration {self.id} was interrupted",
                                           "the source agent restarted before the handover", "retry the migration",
                                           phase=Phase.RECOVERING))
                return
            own = self.flip.directory_answer(f"recovering {self.id}")
            if own.node == self.opts.target and own.epoch > (self.record.epoch_before or 0):
                self.record.epoch_after = own.epoch
                self.no_return.flip_sent = True
                self._go_forward("the source agent restarted after the flip")
            else:
                self._fail(MigrationFailed(f"migration {self.id} was interrupted",
                                           "the source agent restarted before the flip; the directory names "
                                           f"{own.node} at epoch {own.epoch}", "retry the migration",
                                           phase=Phase.RECOVERING))
        finally:
            self._close()

    # ---- endings ------------------------------------------------------------------
    def _close(self) -> None:
        """The machine's last step, whatever happened: the lease let go, the record ended, the last sample
        written, and only then the end announced (the long poll's answer)."""
        try:
            self.lease.stop()
            self._end()
            self.telemetry.stop()
        finally:
            self.record.release_end()

    def _end(self) -> None:
        self.record.finish()
        discard(self.work_dir, TrashName("work", self.id, "finished"))

    def remove_retired_copy(self) -> None:
        """Delete the old copy's files, set aside at retire. The service calls it after the result and
        after releasing the tenant, so neither the move nor a move straight back waits on their size."""
        if self._retired_copy is None:
            return
        copy, self._retired_copy = self._retired_copy, None
        t0 = time.monotonic()
        try:
            copy.finish()
        except Exception:  # noqa: BLE001 - the entry stays in the trash for the agent's sweep
            log.exception("migration %s: removing the retired copy failed; the sweep finishes it", self.id)
            return
        log.info("migration %s: the retired copy's files removed in %.2fs", self.id, time.monotonic() - t0)

    def _fail(self, exc: BaseException) -> None:
        if self.no_return.aborted and not isinstance(exc, MigrationAborted):
            # An abort tears the pipeline down; what broke as a consequence is not the story.
            exc = MigrationAborted(f"migration {self.id} aborted", self.no_return.abort_reason,
                                   "the source keeps serving", phase=self.phase)
        err = exc if isinstance(exc, SlackerError) else MigrationFailed(
            "migration failed", f"{type(exc).__name__}: {exc}", "see the source agent's log", phase=self.phase)
        if not isinstance(err, MigrationFailed):
            err = MigrationFailed(err.what, err.why, err.hint, phase=self.phase)
        if not err.phase:
            err.phase = self.phase
        log.warning("migration %s failed in %s: %s", self.id, self.phase, err.one_line())
        self.record.error = err
        self._rollback()
        self.record.result = "aborted" if isinstance(exc, MigrationAborted) else "failed"

    def _rollback(self) -> None:
        """Before the flip: the source unfenced and serving, nothing of the migration anywhere."""
        self.lease.stop()
        if self.pipe is not None:
            try:
                self.pipe.abort()
            except Exception:
                log.exception("pipe abort failed")
        self.source.unfreeze()
        if self._incoming_created:
            try:
                self.peer.remove()
            except NotFound:
                pass
            except SlackerError as exc:
                # Its lease runs out and the target removes it itself, once the directory confirms.
                log.warning("could not remove the partial target of %s now: %s", self.id, exc.one_line())
        try:
            if self.kind == "shared":
                self.source.bring_back(self._source_stopped)
            elif self.node.tenants.exists(self.tenant_id):
                tenant = self.source.tenant()
                if tenant.info.fenced or self.source.fenced:
                    self.source.unfence()
                if self._source_stopped:
                    self.node.tenants.start_tenant(tenant)
        except SlackerError as exc:
            log.error("could not bring source tenant %s back: %s (the supervisor retries)", self.tenant_id,
                      exc.one_line())
        self.handover.release_routers()  # unfenced: held statements go on to the source
        self.journal.remove(self.entry)

    def _go_forward(self, reason: str) -> None:
        """Past the flip: make the target writable and retire the source, retrying until both are done.
        Retries back off to FINISH_BACKOFF_MAX_S at most: the target agent may come back any moment
        (it also activates itself when it starts, slacker.migration.target), and the routers are
        released as soon as it answers."""
        self.lease.stop()
        self.source.unfreeze()
        backoff = self.finish_backoff_s
        holds = self._target_holds()  # fault injection: the first activation only
        active = False
        while True:
            try:
                if not active:
                    body, holds = {"epoch": self.record.epoch_after, "tenant": self.tenant_id, **holds}, {}
                    with self.record.steps.timed("target_activate"):
                        self.peer.step("activate", body, timeout_s=120, phase=Phase.CLEANUP)
                    active = True
                    self.record.end_wait()
                    self.hold_point("activated")
                    self.handover.release_routers(after_flip=True)  # the target takes writes now
                with self.record.steps.timed("retire"):
                    if self.opts.keep_source_s:  # kept, fenced, replicating from the new owner (slacker.migration.kept)
                        self.hold_point("keep")
                        self.record.kept = self.source.keep(self.id, self.entry.final_gtid or "", self.opts.keep_source_s)
                        pending = None
                    else:
                        pending = self.source.retire(self.id, pause=lambda step: self.hold_point(f"retire-{step}"))
                if pending is not None:
                    self._retired_copy = pending
                self.journal.remove(self.entry)
                self.record.finishing_reason = ""
                self.record.end_wait()
                self.record.result = "succeeded"
                return
            except BaseException as exc:  # noqa: BLE001 - every failure here is retried, never rolled back
                self.record.finishing_reason = one_line(exc)
                self._wait_for(active)
                if self.phase != Phase.FINISHING:
                    self.enter(Phase.FINISHING)
                log.warning("migration %s finishing (%s): %s; retrying in %.1fs", self.id, reason,
                            self.record.finishing_reason, backoff)
                self._finish_now.wait(backoff)
                self._finish_now.clear()
                backoff = min(FINISH_BACKOFF_MAX_S, backoff * 2)

    def _wait_for(self, active: bool) -> None:
        """Past the flip, a step cannot go on: say what the migration waits for, and whether the tenant
        takes writes meanwhile (`waiting` in status, the progress line of `slacker migrate`)."""
        target = self.opts.target
        if active:
            what, node = "source-retire", self.source_name
            text = (f"past the flip: the tenant takes writes on {target}; retiring the old copy on "
                    f"{self.source_name} failed ({self.record.finishing_reason}); retried every "
                    f"{FINISH_BACKOFF_MAX_S:.0f}s at most")
        elif self._target_down() is not None:
            what, node = "target-agent", target
            text = (f"past the flip: waiting for the target agent {target} to come back; the tenant is not "
                    f"writable until it does (`slacker status`)")
        else:
            what, node = "target-activation", target
            text = (f"past the flip: the target agent {target} could not activate the tenant "
                    f"({self.record.finishing_reason}); retried every {FINISH_BACKOFF_MAX_S:.0f}s at most; the "
                    f"tenant is not writable until it does")
        self.record.wait_on(what, node, active, text)

    # ---- what the roles decide (slacker.migration.seams) ----------------------------------------
    def decided(self, result: Result) -> None:
        """The one place the roles' decisions land: in the record, or (FlipNotSent) the machine's own state."""
        if isinstance(result, FlipNotSent):
            self.no_return.flip_not_sent()
        else:
            self.record.apply(result)

    # ---- what the roles ask of the machine ------------------------------------------------
    def wait_abortable(self, seconds: float) -> None:
        self.no_return.wait(seconds)

    def begin_flip(self, guard=None) -> None:
        """Mark the compare-and-set as sent, atomically with an abort: refused if aborted or if `guard` raises."""
        self.no_return.send_flip(self.check_abort, guard)

    def more_rounds(self) -> None:
        self.delta_rounds.run()

    # ---- phases -----------------------------------------------------------------
    def enter(self, name: str) -> None:
        if name == self.phase:
            return  # more of the same phase (delta rounds again after leaving catch-up mode)
        check(PHASE_MOVES, self.phase, name, f"migration {self.id}")
        self.record.begin_phase(name)
        log.info("migration %s: %s", self.id, name)
        self.hold_point(name)

    def hold_point(self, point: str) -> None:
        hold = (self.opts.hold_s or {}).get(point)
        if hold and self.node.config.fault_injection:
            log.warning("migration %s: holding at %s for %ss (fault injection)", self.id, point, hold)
            self.record.holding = point
            try:
                if self.past_point_of_no_return:
                    time.sleep(float(hold))
                else:
                    self.no_return.wait(float(hold))
            finally:
                self.record.holding = ""
            if not self.past_point_of_no_return:
                self.check_abort()

    def _target_holds(self) -> dict:
        """The fault-injection points of the target's activation (slacker.migration.target), passed on."""
        holds = {k: v for k, v in (self.opts.hold_s or {}).items() if k in TARGET_HOLD_POINTS}
        return {"hold_s": holds} if holds else {}

    def check_abort(self) -> None:
        if self.no_return.aborted:
            raise MigrationAborted(f"migration {self.id} aborted", self.no_return.abort_reason,
                                   "the source keeps serving", phase=self.phase)

    def target_step(self, name: str, body: dict | None = None, timeout_s: float = 60.0):
        self.check_abort()
        with self.record.steps.timed(f"target_{name}"):
            return self.peer.step(name, body, timeout_s=timeout_s, phase=self.phase)

    def _preflight(self) -> None:
        if self.opts.target == self.source_name:
            raise InvalidInput(f"tenant {self.tenant_id} is already on {self.source_name}",
                               "source and target are the same node", "pick another --to node")
        self.node.cluster.node(self.opts.target)
        if self._stream_tls() and not TLS_PIPES.get(self.opts.pipe):
            raise InvalidInput(f"the {self.opts.pipe} pipe cannot be used: this cluster requires TLS",
                               "pv | nc sends the backup in plain text", "use --pipe native (the default)")
        with self.record.steps.timed("lookup"):
            own = self.node.directory.lookup(self.tenant_id)
        if own.node != self.source_name:
            raise Conflict(f"tenant {self.tenant_id} is owned by {own.node}", f"not by {self.source_name}",
                           "ask the owner's agent")
        self.record.epoch_before = own.epoch
        with self.record.steps.timed("inspect"):
            version, warnings = self.source.inspect(live=self.opts.mode == "live")
        self.record.warnings = warnings
        for w in self.record.warnings:
            log.warning("migration %s: %s", self.id, w)
        self.tool = select_tool(version)
        tenant = self.source.tenant()
        if self.kind == "shared":
            self._preflight_shared(own)
            return
        if self.into == "shared":
            self._preflight_packed(own)
            return
        with self.record.steps.timed("accounts"):
            tenant.ensure_service_accounts()
        binlog_bytes = sum(p.stat().st_size for p in tenant.datadir.glob("binlog.*"))
        data_bytes = directory_bytes(tenant.datadir)
        self.record.bytes_total = (data_bytes if self.opts.mode == "stop-and-copy"
                                   else max(0, data_bytes - binlog_bytes))
        self._before_target(own)
        with self.record.steps.timed("target_create"):
            doc = self.peer.create({
            "migration_id": self.id, "tenant": self.tenant_id, "port": tenant.port,
            "source_node": self.source_name,
            "source_host": tenant.host, "epoch_before": own.epoch, "lease_ttl_s": self.opts.lease_ttl_s,
            "buffer_pool_bytes": tenant.info.buffer_pool_bytes, "admin_password": tenant.admin_password(),
            "app_password": tenant.app_password(), "backup_password": tenant.backup_password(),
            "repl_password": tenant.repl_password(), "token": self.transfer_token, "mode": self.opts.mode,
            "expected_bytes": self.record.bytes_total, "data_path": self.opts.data_path,
            **({"plain_stream": True} if self.opts.plain_stream else {}),
            **({"hold_s": self.opts.hold_s} if self.opts.hold_s else {})}, phase=Phase.PREFLIGHT)
        self._target_made(doc)

    def _preflight_revert(self) -> None:
        """A move back onto the node that keeps the tenant's old copy: that node adopts it as this move's
        target (fenced, replicating from here since the flip); the delta rounds start from here and now."""
        if self.opts.target == self.source_name:
            raise InvalidInput(f"tenant {self.tenant_id} is already on {self.source_name}",
                               "source and target are the same node", "")
        self.node.cluster.node(self.opts.target)
        own = self.node.directory.lookup(self.tenant_id)
        if own.node != self.source_name:
            raise Conflict(f"tenant {self.tenant_id} is owned by {own.node}", f"not by {self.source_name}",
                           "ask the owner's agent")
        self.record.epoch_before = own.epoch
        self.source.inspect(live=True)
        self.tool = None
        self._before_target(own)
        with self.record.steps.timed("target_create"):
            doc = self.peer.create({"revert": True, "migration_id": self.id, "tenant": self.tenant_id,
                                    "source_node": self.source_name, "epoch_before": own.epoch,
                                    "lease_ttl_s": self.opts.lease_ttl_s,
                                    **({"hold_s": self.opts.hold_s} if self.opts.hold_s else {})},
                                   phase=Phase.PREFLIGHT)
        self.lease.granted_now()
        self.lease.start()
        conn = self.source.connect(timeout_s=10)
        try:
            p = ops.binlog_position(conn)
        finally:
            ops.close_quietly(conn)
        self.record.bytes_total = 0
        self.delta_rounds = DeltaRounds(self.seam, ((p.file, p.pos), str(doc.get("applied_gtid") or p.gtid)))

    def _before_target(self, own) -> None:
        """What every move checks and journals before it asks the target to make anything."""
        self.transfer_token = new_token()
        target_url = self.node.cluster.node(self.opts.target).url
        if not url_may_carry_secrets(target_url, self.node.cluster.local_subnet):
            raise MigrationFailed(f"refusing to send {self.tenant_id}'s account passwords to {self.opts.target}",
                                  f"{target_url} is plain HTTP to another host",
                                  "give the agents TLS (https:// URLs in the cluster file)", phase=Phase.PREFLIGHT)
        with self.record.steps.timed("target_status"):
            self.peer.call("GET", "/v1/status", timeout_s=10, phase=Phase.PREFLIGHT)
        # Both agents' protocol versions (the API refuses a pair too far apart, in one line); the stream
        # speaks the older one's dialect.
        self.record.protocols = (self.node.protocol, self.node.peer(self.opts.target).peer_protocol or 1)
        # Journaled before the target exists, so a restarted source agent knows to remove it.
        self.journal.update(self.entry, epoch_before=own.epoch)
        self._incoming_created = True

    def _target_made(self, doc: dict) -> None:
        self.lease.granted_now()
        self.lease.start()
        self.receiver = (doc["receiver_host"], int(doc["receiver_port"]))

    def _preflight_packed(self, own) -> None:
        """A whole server packed into the target's shared server (`--into shared`): what it holds must be one
        database of the tenant's name and its `app` account, or something would not arrive; then its database
        streams into that shared server as a shared tenant's does."""
        from ..mariadb import onedb

        tenant = self.source.tenant()
        with self.record.steps.timed("accounts"):
            tenant.ensure_service_accounts()  # the target's delta logs in as the replication account
        conn = tenant.admin_connect(timeout_s=10)
        try:
            refusal = onedb.packing_refusal(conn, self.tenant_id)
        finally:
            ops.close_quietly(conn)
        if refusal:
            raise onedb.refuse(f"tenant {self.tenant_id} cannot be packed into a shared server", refusal,
                               "the source keeps serving; see docs/shared.md, Consolidation")
        # Its objects' DEFINER is `app`, which is the tenant's own account there (the load rewrites it).
        self._preflight_shared(own, app_password=tenant.app_password(), domain=0, definer="app")

    def _preflight_shared(self, own, app_password: str | None = None, domain: int | None = None,
                          definer: str | None = None) -> None:
        """A shared tenant's target: its database streams into the target node's shared server (a whole
        server's too, packed into it: `app_password` its app account's, `domain` its GTID domain)."""
        from ..mariadb import onedb, ops

        server = self.source.tenant()
        if app_password is None:
            app_password = self.node.kinds["shared"].get(self.tenant_id).password()
        if domain is None:
            domain = server.gtid_domain_id
        physical = {}
        conn = server.admin_connect(timeout_s=10)
        try:
            self.record.bytes_total = onedb.database_bytes(conn, self.tenant_id)
            if self.opts.snapshot == "physical":  # what the tablespace path cannot carry is refused now
                refusals = onedb.physical_refusals(onedb.contents(conn, self.tenant_id))
                if refusals:
                    raise onedb.refuse(f"tenant {self.tenant_id} cannot be copied by a partial backup",
                                       "; ".join(refusals), "the source keeps serving; leave out --snapshot physical")
                physical = {"snapshot": "physical", "definitions": onedb.table_definitions(conn, self.tenant_id),
                            "database_ddl": onedb.database_definition(conn, self.tenant_id)}
        finally:
            ops.close_quietly(conn)
        if self.into == "server":  # a server of its own on the target; its objects' definer becomes `app` there
            where = {"unpack": True}
        else:
            where = {"kind": "shared", **({"definer_from": definer} if definer else {})}
        self._before_target(own)
        with self.record.steps.timed("target_create"):
            doc = self.peer.create({
                **where, "migration_id": self.id, "tenant": self.tenant_id, "source_node": self.source_name,
                "source_host": server.host, "source_domain": domain, "epoch_before": own.epoch,
                "lease_ttl_s": self.opts.lease_ttl_s, "app_password": app_password,
                "repl_password": server.repl_password(),
                "token": self.transfer_token, "mode": self.opts.mode, "expected_bytes": self.record.bytes_total,
                "data_path": self.opts.data_path, **physical,
                **({"plain_stream": True} if self.opts.plain_stream else {}),
                **({"hold_s": self.opts.hold_s} if self.opts.hold_s else {})}, phase=Phase.PREFLIGHT)
        self._target_made(doc)
        self.target_port = int(doc["target_port"])

    def _stream(self, producer_argv: list[str], timeout_s: float) -> None:
        """Run the throttled pipe to the target's receiver until it is acknowledged."""
        initial = self.opts.rate_bytes_per_s
        if self.rate_policy is not None:
            initial = self.rate_policy.initial_rate()
        self.pipe = make_pipe(self.opts.pipe, producer_argv, self.receiver[0], self.receiver[1], self.id,
                              self.transfer_token, rate_bytes_per_s=initial, finish_timeout_s=timeout_s,
                              commit_lock_events=commit_lock_event,
                              ssl_context=self.node.tls_client_context() if self._stream_tls() else None,
                              preread_program=True, protocol_version=self.record.protocols[0],
                              protocol_dialect=min(self.record.protocols) if self.record.protocols[1] else None,
                              **self._data_path())
        try:
            with self.record.steps.timed("pipe_start"):
                self.pipe.start()  # reads the backup tool in first (slacker.pagecache): an abort can land there
        except MigrationFailed as exc:
            self.check_abort()
            raise self._copy_failure(exc) from None
        deadline = time.monotonic() + timeout_s
        with self.record.steps.timed("copy"):
            while not self.pipe.done:
                self.check_abort()
                if time.monotonic() > deadline:
                    break
                self.pipe.wait_done(0.1)  # wakes as soon as the copy ends; an abort is seen within 0.1 s
        try:
            result = self.pipe.wait(timeout=max(1.0, deadline - time.monotonic()))
        except MigrationFailed as exc:
            raise self._copy_failure(exc) from None
        self.record.steps.receiver = self.target_step("stream", {"timeout_s": 120}, timeout_s=180).get("stages")
        self.record.bytes_total = result.bytes_sent

    def _data_path(self) -> dict:
        """The native pipe's data path (slacker.transfer.native.wants_splice); pv has only its own."""
        if self.opts.pipe != "native" or self.opts.data_path == "auto":
            return {}
        return {"use_splice": wants_splice(self.opts.data_path, self._stream_tls(), "send")}

    def _stream_tls(self) -> bool:
        """Whether the snapshot stream goes over TLS: on a TLS cluster unless --plain-stream."""
        return self.node.config.tls is not None and not self.opts.plain_stream

    def _copy_failure(self, exc: MigrationFailed) -> MigrationFailed:
        """The pipe's error, saying which side broke: the target's agent is asked (transfer/blame.py)."""
        return blame.explain(exc, tenant=self.tenant_id, source=self.source_name, target=self.opts.target,
                             bytes_sent=self.pipe.bytes_sent, target_down=self._target_down)

    def _target_down(self) -> str | None:
        """Why the target's agent does not answer, or None when it does."""
        try:
            self.node.peer(self.opts.target).request("GET", "/v1/status", timeout_s=3)
        except AgentUnavailable as exc:
            return exc.why or exc.what
        except SlackerError:
            pass  # it answered, with an error
        return None

    def _snapshot(self) -> None:
        from .. import mariadb

        self.enter(Phase.SNAPSHOT)
        tenant = self.source.tenant()
        if self.one_db and self.opts.snapshot == "physical":  # a partial hot backup of its database
            from ..mariadb import onedb

            defaults = self.work_dir / "backup.cnf"
            mariadb.write_secret(defaults, self.tool.backup_defaults(
                tenant.config_file.read_text(), mariadb.BACKUP_USER, tenant.backup_password(), tenant.socket))
            (self.work_dir / "tmp").mkdir(exist_ok=True)
            # --databases matches the data directory's names (onedb.dir_name).
            self._stream(self.tool.stream_argv(defaults, self.work_dir / "tmp")
                         + [f"--databases={onedb.dir_name(self.tenant_id)}"], self.opts.snapshot_timeout_s)
            return
        if self.one_db:  # a logical snapshot of its database alone, no global lock
            from ..onedb_snapshot import Login, dump_argv

            defaults = self.work_dir / "dump.cnf"
            mariadb.write_secret(defaults, Login(mariadb.ADMIN_USER, tenant.admin_password(),
                                                 socket=tenant.socket).defaults())
            self._stream(dump_argv(defaults, self.tenant_id), self.opts.snapshot_timeout_s)
            return
        defaults = self.work_dir / "backup.cnf"
        mariadb.write_secret(defaults, self.tool.backup_defaults(
            tenant.config_file.read_text(), mariadb.BACKUP_USER, tenant.backup_password(), tenant.socket))
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        self._stream(self.tool.stream_argv(defaults, self.work_dir / "tmp"), self.opts.snapshot_timeout_s)

    def _prepare(self) -> None:
        self.enter(Phase.PREPARE)
        pos = self.target_step("prepare", {}, timeout_s=3600)
        start = BackupPosition(pos["binlog_file"], int(pos["binlog_pos"]), pos["gtid"])  # the prepared copy's
        self.target_step("start", {}, timeout_s=180)
        tenant = self.source.tenant()  # a shared tenant's: the shared server
        self.target_step("replicate", {"source_host": tenant.host, "source_port": tenant.port,
                                   "start_gtid": start.gtid,
                                   "applier": self.opts.delta_applier, "mpl": self.opts.delta_mpl,
                                   "catchup": self.opts.delta_catchup},
                     timeout_s=60)
        self.delta_rounds = DeltaRounds(self.seam, ((start.binlog_file, start.binlog_pos), start.gtid))

    def _stop_and_copy(self) -> None:
        self.enter(Phase.PREFLIGHT)
        self._preflight()
        self.enter(Phase.COPY)
        tenant = self.source.tenant()
        t0 = time.monotonic()
        self.source.freeze(lock_timeout_s=max(0.05, self.opts.max_freeze_s / 2))
        final = self.source.frozen_position()
        source_checksums = self.source.frozen_checksums() if self.opts.verify else None
        self.journal.update(self.entry, state=SourceState.FENCED, final_gtid=final)
        self.source.fence()
        # InnoDB files are only consistent on disk after a clean shutdown; writers stay blocked until then.
        self.node.tenants.stop_tenant(tenant)
        self._source_stopped = True
        self.source.frozen = None
        self._stream(["tar", "-C", str(tenant.datadir), "-c", "-f", "-", "."], self.opts.snapshot_timeout_s)
        self.enter(Phase.HANDOVER)
        self.target_step("start", {"gtid_state": final}, timeout_s=300)
        if self.opts.verify:
            dst = self.target_step("checksums", {}, timeout_s=600)["checksums"]
            if dst != source_checksums:
                raise MigrationFailed("verification failed", "checksums differ after the copy", "", phase=Phase.HANDOVER)
            self.record.verified = True
        self.target_step("ready", {"final_gtid": None}, timeout_s=120)
        self.begin_flip()
        self.journal.update(self.entry, state=SourceState.FLIPPING)
        own = self.flip.compare_and_set()
        if own is None:
            self.no_return.flip_not_sent()
            raise MigrationFailed("ownership changed underneath", "the directory's epoch moved before the flip",
                                  "the source keeps serving", phase=Phase.HANDOVER)
        self.record.epoch_after = own.epoch
        self.record.freeze_ms = round((time.monotonic() - t0) * 1000, 1)
        self.journal.update(self.entry, state=SourceState.FLIPPED, epoch_after=own.epoch)
