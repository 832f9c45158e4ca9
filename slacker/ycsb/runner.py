"""The open-loop run: arrivals on a schedule, a queue, MPL worker connections, per-interval reports.

Per tenant, a dispatcher thread puts each transaction's *scheduled* arrival
time on a queue when that time comes, whatever the workers are doing; MPL
worker threads, each with its own connection, take transactions off the queue.
Latency is commit time minus scheduled arrival, so time spent queued behind a
slow server counts (no coordinated omission). mysqlclient releases the GIL
while it waits on the server, so threads overlap their round trips.
"""

from __future__ import annotations

import json
import math
import queue
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from .. import loads
from ..client import Endpoint
from ..errors import InvalidInput, NotFound, SlackerError, TenantError
from .arrivals import ARRIVALS, RateProfile, RateStep, arrival_offsets
from .driver import Driver, Failure, classify, db_errors, get_driver
from .metrics import OPERATION_NAMES, HarnessCollector, LogHistogram, MetricsServer, TenantStats, percentile_sorted
from .properties import DEFAULT_DATABASE, Workload
from .results import SUSTAINED_RATIO, IntervalRecord, RunResult, TenantResult
from .targets import EndpointTracker, TenantTarget
from .workload import SharedKeys, TransactionPlanner

# The GIL hand-off interval while a run is on. CPython's default 5 ms would add
# up to 5 ms to a transaction whose reply arrives while another thread holds
# the GIL; 1 ms keeps that below the latencies we report, at little CPU cost.
SWITCH_INTERVAL_S = 0.001
_STOP = None  # queue sentinel


@dataclass
class RunConfig:
    """Everything a run needs; the CLI builds one, tests and benchmarks build their own."""

    targets: Sequence[TenantTarget]
    workload: Workload
    mpl: int = 10
    duration_s: float = 120.0
    arrival: str = "poisson"
    rate_steps: Sequence[RateStep] = ()
    interval_s: float = 1.0
    metrics_port: int | None = None       # None: no endpoint; 0: any free port
    metrics_addr: str = "127.0.0.1"
    out_path: str | None = None           # per-interval JSON lines
    seed: int | None = None
    driver: str = "mysqlclient"
    database: str | None = None           # default: the workload's `database`, else the session's, else ycsb
    retry_timeout_s: float = 30.0         # a transaction is retried until this long after its first failure
    connect_timeout_s: float = 5.0
    query_timeout_s: float = 60.0
    drain_timeout_s: float = 30.0         # after the window, how long queued transactions may still run
    on_interval: Callable[[IntervalRecord], None] | None = None
    driver_factory: Callable[[], Driver] | None = field(default=None, repr=False)  # tests inject fakes

    def validate(self) -> None:
        if not self.targets:
            raise InvalidInput("no tenants to benchmark", "give at least one tenant", "for example t1 or t1,t2")
        names = [t.tenant for t in self.targets]
        if len(set(names)) != len(names):
            raise InvalidInput(f"tenant listed twice in {','.join(names)}", "each tenant runs one benchmark", "")
        if not (1 <= self.mpl <= 1000):
            raise InvalidInput(f"invalid MPL {self.mpl}", "it must be between 1 and 1000", "for example --mpl 10")
        for label, v in (("duration", self.duration_s), ("interval", self.interval_s)):
            if not math.isfinite(v) or v <= 0:
                raise InvalidInput(f"invalid {label} {v!r}", f"the {label} must be positive", "")
        if self.interval_s < 0.01:
            raise InvalidInput(f"invalid interval {self.interval_s:g}s", "the reporting interval must be >= 10ms",
                               "for example --interval 1s")
        for t in self.targets:
            if t.rate_tps is None:
                if self.rate_steps:
                    raise InvalidInput("--rate-step needs --rate", "a closed-loop run has no offered rate to step",
                                       "give --rate, or drop --rate-step")
                continue  # closed loop: MPL clients back to back
            if not math.isfinite(t.rate_tps) or t.rate_tps <= 0:
                raise InvalidInput(f"invalid rate {t.rate_tps!r} for tenant {t.tenant}", "rates must be positive",
                                   "for example --rate 100")
        if self.arrival not in ARRIVALS:
            raise InvalidInput(f"invalid arrival process {self.arrival!r}", "expected poisson or constant", "")
        db = self.database or self.workload.database
        if db is not None:
            loads.check_database(db)


class _Worker:
    """One worker connection and the thread that drives it."""

    def __init__(self, bench: "_TenantBench", index: int, rng: random.Random) -> None:
        self.bench = bench
        self.index = index
        self.rng = rng
        self.planner = TransactionPlanner(bench.workload, bench.shared, rng)
        self.conn: Any = None
        self.endpoint: Endpoint | None = None
        self.run_txn: Callable[[Sequence[tuple[bool, str]]], None] | None = None
        self.busy = False
        self.connected_t = 0.0
        self.attempt_t = 0.0  # when the current transaction's latest attempt began
        self.thread: threading.Thread | None = None

    def connect(self, ep: Endpoint) -> None:
        b = self.bench
        conn = b.driver.connect(ep, b.database, b.cfg.connect_timeout_s, b.cfg.query_timeout_s)
        self.conn, self.endpoint, self.run_txn = conn, ep, b.driver.transaction_runner(conn)
        self.connected_t = time.monotonic()

    def close(self) -> None:
        if self.conn is not None:
            self.bench.driver.close(self.conn)
            self.conn = None

    def main(self) -> None:
        b = self.bench
        get = b.queue.get
        record = b.stats.record_commit
        plan_next = self.planner.plan
        errors = b.errors
        ack = b.shared.insert_keys.acknowledge
        clock = time.monotonic
        closed = b.closed_loop
        harness = b.harness
        try:
            while True:
                if closed:
                    # Closed loop (YCSB without a target): the next transaction starts when the last one ends.
                    scheduled = clock()
                    if scheduled >= harness.window_end or harness.stopping:
                        break
                    b.count_arrival()
                else:
                    try:
                        scheduled = get(timeout=0.5)
                    except queue.Empty:
                        if b.stopping_hard:
                            break
                        continue
                    if scheduled is _STOP:
                        break
                if b.stopping_hard:
                    with b.lock:
                        b.unfinished += 1
                    continue
                self.busy = True
                plan = plan_next()
                try:
                    self.attempt_t = clock()
                    self.run_txn(plan.statements)
                    ok = True
                except errors as exc:
                    ok = self._retry(plan, exc)
                if ok:
                    record(scheduled, clock(), plan.op_counts, self.attempt_t)
                for k in plan.inserted:
                    # YCSB acknowledges an insert key even when the insert failed, so readers never wait on it.
                    ack(k)
                self.busy = False
        except BaseException as exc:  # noqa: BLE001 - a bug, not a database error: end the run and say so
            b.harness.fail(exc)
        finally:
            self.busy = False
            self.close()

    def _retry(self, plan, exc: BaseException) -> bool:
        """The retry policy: retryable failures are retried until retry_timeout_s after the first one."""
        b = self.bench
        deadline = time.monotonic() + b.cfg.retry_timeout_s
        delay = 0.01
        while True:
            failure = classify(exc)
            if failure is None:
                raise exc
            b.stats.record_failure(failure.reason)
            # A connection opened before the last recovery is a leftover of that outage (an idle
            # worker finding its socket dead later), not a new one.
            if (failure.connection_lost and self.connected_t >= b.stats.recovered_t) or failure.reason == "read_only":
                ep = self.endpoint
                b.stats.note_disruption(time.monotonic(), failure.reason, ep.epoch if ep else b.stats.epoch,
                                        ep.node if ep else b.stats.node, failure.connection_lost)
            if not failure.retryable or time.monotonic() >= deadline or b.stopping_hard:
                if not failure.connection_lost and self.conn is not None:
                    b.driver.rollback_quietly(self.conn)
                b.stats.record_abandoned(failure.reason)
                return False
            if failure.connection_lost:
                if not self._reconnect(deadline, failure):
                    b.stats.record_abandoned(failure.reason)
                    return False
            else:
                b.driver.rollback_quietly(self.conn)
                time.sleep(delay * (0.5 + self.rng.random()))
                # Lock conflicts back off further; a frozen owner is polled briskly so the
                # handover gap measures the handover, not our backoff.
                delay = min(delay * 2, 0.1 if failure.reason == "read_only" else 0.5)
                if failure.reason == "read_only":
                    # A frozen owner during a handover: the directory may already name the new one.
                    ep = b.tracker.refresh(self.endpoint)
                    if ep != self.endpoint and not self._reconnect(deadline, failure, ep):
                        b.stats.record_abandoned(failure.reason)
                        return False
            try:
                self.attempt_t = time.monotonic()
                self.run_txn(plan.statements)
                return True
            except b.errors as e:
                exc = e

    def _reconnect(self, deadline: float, failure: Failure, ep: Endpoint | None = None) -> bool:
        """Reconnect to whoever owns the tenant now; False when the deadline passes first."""
        b = self.bench
        self.close()
        delay = 0.01
        stale = self.endpoint
        while True:
            if ep is None:
                ep = b.tracker.refresh(stale)
            try:
                self.connect(ep)
                b.stats.note_endpoint(ep.epoch, ep.node)
                with b.lock:
                    b.reconnects += 1
                return True
            except b.errors as exc:
                if classify(exc) is None:
                    raise
            except SlackerError:
                pass
            stale, ep = ep, None
            if time.monotonic() + delay >= deadline or b.stopping_hard:
                return False
            time.sleep(delay * (0.5 + self.rng.random()))
            delay = min(delay * 2, 0.1)  # connect attempts are cheap; lookups are rate-limited by the tracker


class _TenantBench:
    """One tenant's independent benchmark: its schedule, queue, workers and stats."""

    def __init__(self, harness: "Harness", target: TenantTarget, index: int) -> None:
        cfg = harness.cfg
        self.harness = harness
        self.cfg = cfg
        self.target = target
        self.index = index
        self.workload = cfg.workload
        self.given_database = cfg.database or cfg.workload.database
        self.database = self.given_database  # decided by prepare(): this, else the probe's session's, else ycsb
        self.driver: Driver = cfg.driver_factory() if cfg.driver_factory else get_driver(cfg.driver)
        self.errors = db_errors() + getattr(self.driver, "extra_errors", ())
        self.tracker = EndpointTracker(target.tenant, target.resolver)
        self.stats = TenantStats(target.tenant)
        self.closed_loop = target.rate_tps is None
        self.profile = RateProfile(target.rate_tps or 0.0, list(cfg.rate_steps))
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.workers: list[_Worker] = []
        self.shared: SharedKeys | None = None
        self.dispatcher: threading.Thread | None = None
        self.lock = threading.Lock()
        self.reconnects = 0
        self.unfinished = 0
        self.queue_max = 0
        self.queue_at_end = 0
        self.completed_in_window: int | None = None
        self.epoch_start = 0
        self.dispatch_done = threading.Event()

    @property
    def stopping_hard(self) -> bool:
        return self.harness.stopping_hard

    # --- before the clock starts --------------------------------------------------------
    def prepare(self) -> None:
        """Resolve, check the table, open MPL connections: fail fast, before any arrival."""
        t = self.target.tenant
        ep = self.tracker.refresh(None, force=True)
        self.epoch_start = ep.epoch
        self.stats.note_endpoint(ep.epoch, ep.node)
        probe = self._connect_or_fail(ep)
        try:
            first_insert = None
            wl = self.workload
            try:
                chosen = loads.choose(self.given_database, self.driver.session_database(probe), DEFAULT_DATABASE)
                self.database = chosen.name
                if chosen.create:  # not the session's own: it must be there (`ycsb load` makes it)
                    self.driver.execute(probe, f"USE {chosen.quoted}")
                self.driver.execute(probe, f"SELECT 1 FROM {wl.table} LIMIT 1")
                if wl.insertproportion > 0 or wl.requestdistribution == "latest":
                    # Continue after rows earlier runs inserted, so new keys do not collide with them.
                    rows = self.driver.execute(probe, f"SELECT COUNT(*) FROM {wl.table}")
                    first_insert = int(rows[0][0]) if rows else None
            except self.errors as exc:
                f = classify(exc)
                if f is not None and f.reason in ("no_such_table", "no_such_database"):
                    raise NotFound(f"table {self.database}.{wl.table} not found on tenant {t}",
                                   "the tenant has not been loaded",
                                   f"run `slacker ycsb load {t} -P <workload>` first") from None
                raise TenantError(f"cannot query tenant {t}", _describe(exc), "") from None
        finally:
            self.driver.close(probe)
        self.shared = SharedKeys.for_run(self.workload, first_insert)
        seed = self.harness.seed
        for j in range(self.cfg.mpl):
            w = _Worker(self, j, random.Random(f"{seed}/{t}/{j}"))
            self.workers.append(w)
        for w in self.workers:
            w.conn, w.endpoint = self._connect_or_fail(ep), ep
            w.run_txn = self.driver.transaction_runner(w.conn)
            w.connected_t = time.monotonic()

    def _connect_or_fail(self, ep: Endpoint):
        try:
            return self.driver.connect(ep, self.database, self.cfg.connect_timeout_s, self.cfg.query_timeout_s)
        except self.errors as exc:
            f = classify(exc)
            where = f"{ep.host}:{ep.port}"
            if f is not None and f.reason == "no_such_database":
                raise NotFound(f"database {self.database} not found on tenant {self.target.tenant} at {where}",
                               "the tenant has not been loaded",
                               f"run `slacker ycsb load {self.target.tenant} -P <workload>` first") from None
            if f is not None and f.reason == "access_denied":
                raise TenantError(f"tenant {self.target.tenant} at {where} refused the login",
                                  _describe(exc), "check --user and --password-file") from None
            raise TenantError(f"cannot reach tenant {self.target.tenant} at {where}", _describe(exc),
                              "check that it runs: `slacker status`, `slacker locate`") from None

    def close(self) -> None:
        for w in self.workers:
            if w.thread is None:
                w.close()

    # --- the run --------------------------------------------------------------------------
    def start(self, t0: float) -> None:
        self.stats.t0 = t0
        self.stats.target_tps = self.profile.rate_at(0.0)
        for w in self.workers:
            w.thread = threading.Thread(target=w.main, name=f"ycsb-{self.target.tenant}-w{w.index}", daemon=True)
            w.thread.start()
        self.dispatcher = threading.Thread(target=self._dispatch, args=(t0,), name=f"ycsb-{self.target.tenant}-arr",
                                           daemon=True)
        self.dispatcher.start()

    def count_arrival(self) -> None:
        with self.lock:
            self.stats.arrivals += 1

    def _dispatch(self, t0: float) -> None:
        if self.closed_loop:
            # Workers start their own transactions; the window still ends here, for wait().
            try:
                while time.monotonic() < self.harness.window_end and not self.harness.stopping:
                    time.sleep(0.05)
            finally:
                self.dispatch_done.set()
            return
        rng = random.Random(f"{self.harness.seed}/{self.target.tenant}/arrivals")
        offsets = arrival_offsets(self.cfg.arrival, self.profile, rng)
        put = self.queue.put
        qsize = self.queue.qsize
        stats = self.stats
        clock = time.monotonic
        sleep = time.sleep
        harness = self.harness
        try:
            nxt = next(offsets, math.inf)
            while True:
                window_s = harness.window_s
                now_s = clock() - t0
                n = 0
                while nxt <= now_s and nxt < window_s:
                    put(t0 + nxt)
                    n += 1
                    nxt = next(offsets, math.inf)
                if n:
                    stats.arrivals += n
                    q = qsize()
                    if q > self.queue_max:
                        self.queue_max = q
                if nxt >= window_s or harness.stopping:
                    break
                # Sleep until the next arrival, but wake at least every 50 ms to notice a stop.
                sleep(min(max(nxt - (clock() - t0), 0.0), 0.05))
        finally:
            self.dispatch_done.set()

    def idle(self) -> bool:
        return self.queue.qsize() == 0 and not any(w.busy for w in self.workers)

    def stop_workers(self) -> None:
        for _ in self.workers:
            self.queue.put(_STOP)

    def join(self, deadline: float) -> None:
        for w in self.workers:
            if w.thread is not None:
                w.thread.join(max(0.0, deadline - time.monotonic()))

    # --- reporting ---------------------------------------------------------------------------
    def interval_record(self, t_s: float, dt: float, phase: str, state: dict) -> IntervalRecord:
        snap = self.stats.take_interval()
        lat = snap.latencies
        arrivals = self.stats.arrivals
        new_arrivals = arrivals - state.get("arrivals", 0)
        state["arrivals"] = arrivals
        completed = len(lat)
        qlen = self.queue.qsize()
        if qlen > self.queue_max:
            self.queue_max = qlen
        in_flight = sum(1 for w in self.workers if w.busy)
        s = sorted(lat)
        rec = IntervalRecord(
            t_s=round(t_s, 3), interval_s=round(dt, 4), time=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            tenant=self.target.tenant, phase=phase, target_tps=self.profile.rate_at(t_s),
            arrivals=new_arrivals, completed=completed,
            offered_tps=new_arrivals / dt if dt > 0 else 0.0, achieved_tps=completed / dt if dt > 0 else 0.0,
            queue_length=qlen, in_flight=in_flight,
            latency_mean_s=math.fsum(s) / completed if completed else None,
            latency_p50_s=percentile_sorted(s, 50) if s else None,
            latency_p95_s=percentile_sorted(s, 95) if s else None,
            latency_p99_s=percentile_sorted(s, 99) if s else None,
            latency_max_s=s[-1] if s else None,
            failures=snap.failures, abandoned=snap.abandoned,
            ops={name: c for name, c in zip(OPERATION_NAMES, snap.ops) if c},
            epoch=self.stats.epoch, node=self.stats.node,
        )
        st = self.stats
        st.offered_tps, st.achieved_tps = rec.offered_tps, rec.achieved_tps
        st.queue_length, st.in_flight = qlen, in_flight
        st.target_tps = self.profile.rate_at(t_s) if phase == "run" else 0.0
        state.setdefault("hist", LogHistogram()).add_many(lat)
        state["completed"] = state.get("completed", 0) + completed
        return rec


def _describe(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):
        return f"{args[1]} (error {args[0]})"
    return str(exc) or type(exc).__name__


class Harness:
    """A run in this process: start(), then wait() for the RunResult; stop() ends it early.

    Use as a context manager so connections and the metrics endpoint are
    released even on errors. The metrics endpoint stays up until close(), so
    it can be scraped after wait() returned.
    """

    def __init__(self, cfg: RunConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(1 << 31)
        self.benches = [_TenantBench(self, t, i) for i, t in enumerate(cfg.targets)]
        self.metrics: MetricsServer | None = None
        self.t0 = 0.0
        self.window_s = math.inf      # the arrival window, from t0; stop() shortens it
        self.stopping = False        # no new arrivals
        self.stopping_hard = False   # queued transactions are dropped, retries given up
        self.interrupted = False
        self._finished = threading.Event()
        self._reporter: threading.Thread | None = None
        self._out = None
        self._intervals: list[IntervalRecord] = []
        self._states: list[dict] = [{} for _ in self.benches]
        self._cpu0 = 0.0
        self._started_at = ""
        self._result: RunResult | None = None
        self._old_switch: float | None = None
        self._fatal: BaseException | None = None

    @property
    def window_end(self) -> float:
        return self.t0 + self.window_s

    @property
    def metrics_url(self) -> str:
        return self.metrics.url if self.metrics else ""

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        try:
            for b in self.benches:
                b.prepare()
            if self.cfg.metrics_port is not None:
                self.metrics = MetricsServer(HarnessCollector([b.stats for b in self.benches]),
                                             self.cfg.metrics_addr, self.cfg.metrics_port).start()
            if self.cfg.out_path:
                try:
                    self._out = open(self.cfg.out_path, "w", encoding="utf-8")
                except OSError as exc:
                    raise InvalidInput(f"cannot write {self.cfg.out_path}", exc.strerror or str(exc), "") from None
        except BaseException:
            self.close()
            raise
        self._old_switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._old_switch, SWITCH_INTERVAL_S))
        self._started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._cpu0 = time.process_time()
        self.t0 = time.monotonic()
        self.window_s = self.cfg.duration_s
        for b in self.benches:
            b.start(self.t0)
        self._reporter = threading.Thread(target=self._report_loop, name="ycsb-report", daemon=True)
        self._reporter.start()

    def fail(self, exc: BaseException) -> None:
        """A worker hit an error that is not a database error: stop the run; wait() raises it."""
        if self._fatal is None:
            self._fatal = exc
        self.stop()

    def stop(self, drain: bool = False) -> None:
        """End the arrival window now; with drain=False queued transactions are dropped too."""
        now_s = time.monotonic() - self.t0
        if now_s < self.window_s:
            self.window_s = now_s
        self.stopping = True
        self.interrupted = True
        if not drain:
            self.stopping_hard = True

    def wait(self, timeout_s: float | None = None) -> RunResult:
        """Block until the run and its drain are over; returns the result (also kept in .result)."""
        if self._result is not None:
            return self._result
        limit = time.monotonic() + timeout_s if timeout_s is not None else math.inf
        try:
            for b in self.benches:
                while not b.dispatch_done.wait(0.2):
                    if time.monotonic() > limit:
                        raise TimeoutError("the run did not finish in time")
            drain_deadline = time.monotonic() + self.cfg.drain_timeout_s
            while not all(b.idle() for b in self.benches):
                if time.monotonic() > min(drain_deadline, limit) or self.stopping_hard:
                    break
                time.sleep(0.01)
        except KeyboardInterrupt:
            self.stop()
            raise
        finally:
            if self._result is None and (self.stopping_hard or all(b.dispatch_done.is_set() for b in self.benches)):
                self._finish()
        if self._fatal is not None:
            exc = self._fatal
            raise SlackerError("the benchmark stopped on an unexpected error",
                               f"{type(exc).__name__}: {exc}", "rerun with --debug for the traceback") from exc
        return self._result  # type: ignore[return-value]

    def _finish(self) -> None:
        # Anything still queued past the drain deadline (or after stop()) will not run.
        if not all(b.idle() for b in self.benches):
            self.stopping_hard = True
        for b in self.benches:
            b.stop_workers()
        deadline = time.monotonic() + 5.0
        for b in self.benches:
            b.join(deadline)
        end = time.monotonic()
        self._finished.set()
        if self._reporter is not None:
            self._reporter.join(5.0)
        cpu_s = time.process_time() - self._cpu0
        if self._old_switch is not None:
            sys.setswitchinterval(self._old_switch)
        if self._out is not None:
            self._out.close()
            self._out = None
        self._result = self._build_result(end, cpu_s)

    def close(self) -> None:
        if self.t0 and self._result is None:
            self.stop()
            self._finish()
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        for b in self.benches:
            b.close()
        if self._out is not None:
            self._out.close()
            self._out = None

    @property
    def result(self) -> RunResult | None:
        return self._result

    # --- reporter ------------------------------------------------------------------------------
    def _report_loop(self) -> None:
        interval = self.cfg.interval_s
        last = self.t0
        window_open = True
        while True:
            nxt = last + interval
            if window_open:
                nxt = min(nxt, self.window_end)
            while True:
                now = time.monotonic()
                if now >= nxt or self._finished.is_set() or (window_open and now >= self.window_end):
                    break
                self._finished.wait(min(nxt - now, 0.1))
            now = time.monotonic()
            if window_open and now >= self.window_end:
                # Close the window at its end exactly: commits up to here are the achieved rate.
                self._emit(last, now, "run")
                last = now
                window_open = False
                for b in self.benches:
                    b.completed_in_window = self._states[b.index].get("completed", 0)
                    b.queue_at_end = b.queue.qsize()
                    b.stats.target_tps = 0.0  # no more arrivals are scheduled
                continue
            if self._finished.is_set():
                if not window_open:
                    self._emit(last, now, "drain")
                else:  # pragma: no cover - finish always closes the window first
                    self._emit(last, now, "run")
                return
            self._emit(last, now, "run" if window_open else "drain")
            last = now

    def _emit(self, last: float, now: float, phase: str) -> None:
        dt = now - last
        if phase == "drain" and dt < 0.05 and not any(b.stats.has_pending() for b in self.benches):
            return  # a sliver of an interval with nothing in it is noise in the series
        for b in self.benches:
            rec = b.interval_record(now - self.t0, dt, phase, self._states[b.index])
            self._intervals.append(rec)
            if self._out is not None:
                self._out.write(json.dumps(rec.to_dict(), separators=(",", ":")) + "\n")
                self._out.flush()
            if self.cfg.on_interval is not None:
                try:
                    self.cfg.on_interval(rec)
                except Exception:  # noqa: BLE001 - a printing problem must not stop the run
                    pass

    def _build_result(self, end: float, cpu_s: float) -> RunResult:
        window_s = max(1e-9, min(self.window_end, end) - self.t0)
        tenants = []
        for b in self.benches:
            st = b.stats
            state = self._states[b.index]
            hist: LogHistogram = state.get("hist", LogHistogram())
            completed_in_window = b.completed_in_window if b.completed_in_window is not None else st.completed
            offered = st.arrivals / window_s
            achieved = completed_in_window / window_s
            ep = b.tracker._endpoint
            tenants.append(TenantResult(
                tenant=b.target.tenant, target_tps=b.target.rate_tps or 0.0, arrivals=st.arrivals, completed=st.completed,
                completed_in_window=completed_in_window, offered_tps=offered, achieved_tps=achieved,
                sustained=offered > 0 and achieved >= SUSTAINED_RATIO * offered,
                queue_max=b.queue_max, queue_at_end=b.queue_at_end, unfinished=b.unfinished + _drop_queue(b.queue),
                latency=hist.summary(), failures=dict(st.failures), abandoned=dict(st.abandoned),
                operations={n: c for n, c in zip(OPERATION_NAMES, st.ops)}, gaps=list(st.gaps),
                reconnects=b.reconnects, endpoint=f"{ep.host}:{ep.port}" if ep else "",
                epoch_start=b.epoch_start, epoch_end=st.epoch, node_end=st.node,
            ))
        ops_total = sum(t.operations_total for t in tenants)
        return RunResult(
            started_at=self._started_at, duration_s=round(window_s, 3), elapsed_s=round(end - self.t0, 3),
            arrival="closed" if all(b.closed_loop for b in self.benches) else self.cfg.arrival, mpl=self.cfg.mpl, driver=self.benches[0].driver.name,
            interval_s=self.cfg.interval_s, seed=self.seed, workload=self.cfg.workload.to_dict(),
            workload_sources=list(self.cfg.workload.sources), tenants=tenants, harness_cpu_s=round(cpu_s, 4),
            operations_total=ops_total, ops_per_cpu_s=ops_total / cpu_s if cpu_s > 0 else None,
            rate_steps=[s.text or f"{s.at_s:g}s:{s.op}{s.value:g}" for s in self.cfg.rate_steps],
            metrics_url=self.metrics_url, out_path=self.cfg.out_path or "", interrupted=self.interrupted,
            ignored_properties=list(self.cfg.workload.ignored), intervals=list(self._intervals),
        )


def _drop_queue(q: queue.SimpleQueue) -> int:
    n = 0
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return n
        if item is not _STOP:
            n += 1


def run_benchmark(cfg: RunConfig) -> RunResult:
    """Run a benchmark in this process and return its result."""
    with Harness(cfg) as h:
        h.start()
        return h.wait()
