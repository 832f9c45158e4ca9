"""PvNcPipe: the paper's pipeline, `producer | pv -L RATE | nc -N host port`.

pv 1.6.x keeps an unbounded rate credit: every 100 ms it adds RATE/10 to a
budget and subtracts what it wrote, and nothing caps the budget. While the
producer is slower than the limit the credit grows, and a later cut is ignored
until the credit is spent (measured: a cut from 200MB/s to 1MB/s with a 10MB/s
producer was not honoured for >5 s). pv offers no way to reset it, and `pv -R
PID -L 0` is ignored, so "unlimited" can only be a limit.

The CreditGovernor below works around that without restarting pv: it models
pv's credit from pv's own byte counter and never hands pv a limit much above
what the producer achieves, so the credit stays within ~0.5 s of the actual
flow (100 ms of it as a target, one pv tick of noise, ~0.2 s of decision
delay); when pv is visibly the bottleneck (its input pipe full, its output
pipe not) the credit is known to be zero and the limit may climb. A pause is
`-L 1` plus SIGSTOP of nc: pv keeps ticking (so no catch-up burst on resume,
which SIGSTOP of pv itself would cause) and nothing reaches the receiver.

The header is written into the pv->nc pipe before nc starts; the trailer is
written into the same pipe by us after pv exits 0 (we keep the write end), so
nc sees EOF only after it, then half-closes (-N) and relays the receiver's
verdict to its stdout, where we read it.
"""

from __future__ import annotations

import collections
import fcntl
import functools
import shutil
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from ..errors import InvalidInput
from . import protocol
from ._proc import (StreamTail, env_or_none, kill_group, pipe_backlog, pipe_capacity,
                    require_program, spawn)
from .base import ThrottledPipe, log, stage_error
from .bucket import Aborted, TokenBucket

POLL_S = 0.02
GOVERNOR_TICK_S = 0.1
PV_INTERVAL_S = "0.1"
PV_REMOTE_TIMEOUT_S = 3.0
PV_REMOTE_TRIES = 3
PRODUCER_EXIT_GRACE_S = 30.0
START_LIMIT = 8_000_000        # bytes/s handed to pv at spawn: pv grants a tenth of it at once
MAX_PV_LIMIT = 1 << 40         # "unlimited" once pv has been limited (-L 0 is ignored by -R)


@functools.lru_cache(maxsize=1)
def private_ipc() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """How to give pv a System V IPC namespace of its own: (spawn prefix, `pv -R` prefix).

    pv 1.6 keys its remote-control queue on `/tmp` alone, so every pv on the host shares one
    queue, and any of them deletes it when it exits; a pv whose queue went no longer hears
    `pv -R` at all (seen: another host's backup script's pv, a parallel test's). In a namespace
    of its own the queue is pv's alone. Root needs only `unshare --ipc`; another user gets one
    inside a user namespace of its own (`--map-current-user`, so files and signals are the
    same). None where neither works (no util-linux, or namespaces forbidden).
    """
    unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
    if unshare is None or nsenter is None:
        return None
    if os.geteuid() == 0:
        spawn_with, enter_with = (unshare, "--ipc"), (nsenter, "--ipc")
    else:
        spawn_with = (unshare, "--user", "--map-current-user", "--ipc")
        enter_with = (nsenter, "--user", "--ipc", "--preserve-credentials")
    try:
        ok = subprocess.run([*spawn_with, "true"], stdin=subprocess.DEVNULL, capture_output=True,
                            timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        return None
    return spawn_with, enter_with


@dataclass
class CreditGovernor:
    """Model of pv 1.6's rate credit and the limit that keeps it bounded.

    Pure bookkeeping (no processes), so it can be tested against a simulated pv.
    Time advances only with pv's own byte-count samples (every 0.1 s), so a
    rate is never computed over a sliver of time. `applied` is the limit pv
    has now; `set_applied` records when a new one took effect.
    """

    burst_s: float = 0.1          # credit aimed at, in seconds of the flow actually achieved
    min_credit_bytes: int = 64 * 1024
    horizon_s: float = 0.2        # how long a decision stays in force (tick + pv -R latency)
    history_samples: int = 20    # ~2 s of unpaused samples for the typical flow
    hysteresis: float = 0.1
    min_sample_s: float = 0.05
    climb: float = 1.5            # limit x this per step while pv holds data back
    unheeded_samples: int = 3     # samples in a row above pv's budget before a limit counts as lost

    def __post_init__(self) -> None:
        self.applied = 0
        self.credit = 0.0
        self.last_rate = 0.0
        self._t: float | None = None   # time of the last sample
        self._prev_t: float | None = None
        self._applied_at = 0.0
        self._bytes = 0
        self._mark = 0.0               # budget integrated up to here
        self._budget = 0.0             # limit x time since the last sample
        self._history: collections.deque[float] = collections.deque(maxlen=self.history_samples)
        self._recent: collections.deque[float] = collections.deque(maxlen=3)
        self._over = 0                 # samples in a row in which pv passed more than its budget
        self.unheeded = False          # pv is not on the limit it acknowledged: send it again
        self.last_share = 0.0          # what pv passed over the last interval / what its limits allowed

    def start(self, now: float, limit: int) -> None:
        """pv started with -L limit: its first tick grants limit/10 at once."""
        self.applied = limit
        self.credit = limit / 10.0
        self._t = self._mark = self._applied_at = now
        self._bytes = 0
        self._budget = 0.0

    def set_applied(self, limit: int, now: float) -> None:
        if self._t is not None:
            self._budget += self.applied * max(0.0, now - self._mark)
            self._mark = max(self._mark, now)
        self.applied = limit
        self._applied_at = now
        self._over = 0
        self.unheeded = False

    def observe(self, t: float, pv_bytes: int, pv_limited: bool = False, paused: bool = False) -> bool:
        """Advance to pv's sample (t, bytes); False if too soon after the previous one."""
        if self._t is None:
            self.start(t, self.applied)
        if t - self._t < self.min_sample_s:
            if pv_limited:
                self.credit = 0.0
            return False
        budget = self._budget + self.applied * max(0.0, t - self._mark)
        delta = max(0, pv_bytes - self._bytes)
        # pv cannot pass more than its credit and what the limit added since: more, sample
        # after sample, means pv is not on the limit we think (a `pv -R` message lost when
        # another pv on the host deleted the queue they all share, yet acknowledged).
        slack = self.applied / 10.0 + self.min_credit_bytes  # one pv tick, and our own noise
        self._over = self._over + 1 if delta > self.credit + budget + slack else 0
        if self._over >= self.unheeded_samples:
            self.unheeded = True
        self.credit = max(0.0, self.credit + budget - delta)
        self.last_share = delta / budget if budget > 0 else 0.0
        if pv_limited:
            self.credit = 0.0  # pv is withholding data, so its budget is empty
        self.last_rate = delta / (t - self._t)
        self._recent.append(self.last_rate)
        if not paused:
            self._history.append(self.last_rate)
        self._prev_t = self._t
        self._t, self._bytes, self._mark, self._budget = t, pv_bytes, t, 0.0
        return True

    def typical_rate(self) -> float:
        """Mean flow over the last unpaused samples (~2 s): robust to one bursty sample."""
        return sum(self._history) / len(self._history) if self._history else 0.0

    def recent_rate(self) -> float:
        """Flow over the last three samples (pv's 100 ms ticks make single samples jumpy)."""
        return sum(self._recent) / len(self._recent) if self._recent else 0.0

    def target_credit(self, cap: float) -> float:
        """The credit aimed at while the producer is the bottleneck: `burst_s` of the flow."""
        return max(float(self.min_credit_bytes), self.burst_s * min(cap, self.typical_rate()))

    def decide(self, requested: float | None, pv_limited: bool) -> int:
        """The limit pv should have now."""
        if requested == 0:
            return 1
        cap = float("inf") if requested is None else float(requested)
        if pv_limited:
            floor = self.min_credit_bytes / self.horizon_s
            if self.last_share >= 0.8 and self.applied > 1:
                # pv passes all it may and data still waits: climb, at most x1.5 per
                # step, so an overshoot adds at most half a step's worth of the flow
                # as credit (x2 left 7-8 MB of it at a 10 MB/s producer's start on a
                # loaded host: 0.8 s at full speed after any cut). The share is of the
                # budget of every limit in force over the interval, so an interval that
                # began under the previous limit counts too: a climb needs no wait for
                # a sample wholly under the new one (a resume took 0.6-1.2 s that way).
                limit = self.climb * max(float(self.applied), floor)
            elif self.fresh():
                # Data waits, yet pv passed well under its limit over an interval wholly under
                # it: pv itself is starved (a loaded CPU), not limited, and every tick the
                # limit stays above the flow adds to a credit a later cut cannot take back
                # (a limit held at 35 MB/s for 0.4 s over a 10 MB/s producer passed 11 MB
                # at full speed after a cut to 1 MB/s). Back to the flow seen lately.
                limit = max(self.typical_rate(), floor)
            else:
                # A backlog alone (e.g. right after a pause) proves nothing about the
                # producer's speed: go back to the flow seen lately, not beyond.
                limit = max(float(self.applied), self.typical_rate(), floor)
        else:
            flow = self.recent_rate()
            target = self.target_credit(cap)
            limit = flow + (target - self.credit) / self.horizon_s
            if self.credit <= target + self.applied / 10.0:
                # Within one pv tick (pv grants its budget in 100 ms steps, which a
                # 100 ms sample cannot tell from credit): keep the limit in force,
                # as long as it is not far above what actually flows.
                limit = max(limit, min(float(self.applied), 2.0 * flow + self.min_credit_bytes / self.horizon_s))
        return int(max(1.0, min(cap, limit, MAX_PV_LIMIT)))

    def fresh(self) -> bool:
        """Was the last measured interval entirely under the current limit?"""
        return self._prev_t is not None and self._prev_t >= self._applied_at

    def should_send(self, limit: int, requested: float | None) -> bool:
        if self.unheeded:
            return True
        if limit == self.applied:
            return False
        if requested is not None and limit == int(requested):
            return True  # reaching the exact requested rate is always worth a message
        return abs(limit - self.applied) > self.hysteresis * self.applied or limit <= 1


def initial_limit(requested: float | None) -> int:
    """pv grants a tenth of its first limit at once, so it starts modest and climbs."""
    if requested == 0:
        return 1
    cap = float("inf") if requested is None else requested
    return int(max(1.0, min(cap, START_LIMIT)))


class PvNcPipe(ThrottledPipe):
    """`producer | pv | nc -N`, all in one process group; rate changes via `pv -R`."""

    kind = "pv"
    stage_labels = {"throttle": "the throttle (pv)", "transport": "the transport (nc)"}

    def __init__(self, *args, governor: CreditGovernor | None = None, rate_control: bool = True,
                 **kwargs) -> None:
        """rate_control=False runs plain `pv -q [-L RATE]` with no governor and a fixed rate
        (the paper's pipe without a controller; the bench uses it as a reference)."""
        super().__init__(*args, **kwargs)
        self._gov = governor or CreditGovernor()
        self.rate_control = rate_control
        self._nc: subprocess.Popen | None = None
        self._pv: subprocess.Popen | None = None
        self._producer: subprocess.Popen | None = None
        self._pgid: int | None = None
        self._in_r: int | None = None   # our copy of pv's stdin (producer -> pv), for FIONREAD
        self._out_w: int | None = None  # our copy of pv's stdout (pv -> nc): header, trailer, FIONREAD
        self._pipe_cap = 65536
        self._pv_bytes = 0
        self._pv_sample: tuple[float, int] | None = None
        self._pv_tail: StreamTail | None = None
        self._nc_tail: StreamTail | None = None
        self._verdict = b""
        self._verdict_done = threading.Event()
        self._wake = threading.Condition()
        self._preread_bucket: TokenBucket | None = None  # paces the program's pre-read (start)
        self._nc_stopped = False
        self._supervisor: threading.Thread | None = None
        self._governor: threading.Thread | None = None
        self.rate_messages = 0  # pv -R calls made (diagnostics)
        self.resent = 0         # limits sent again because pv did not keep to them
        self._pv_path = "pv"
        self._remote_prefix: tuple[str, ...] = ()  # how `pv -R` enters pv's own IPC namespace (private_ipc)

    @property
    def bytes_sent(self) -> int:
        return self._pv_bytes

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self._producer, self._pv, self._nc) if p is not None]

    @property
    def stage_pids(self) -> dict[str, int]:
        """{'producer': pid, 'throttle': pid, 'transport': pid} (tests kill one stage)."""
        out = {}
        for name, p in (("producer", self._producer), ("throttle", self._pv), ("transport", self._nc)):
            if p is not None:
                out[name] = p.pid
        return out

    def set_rate(self, bytes_per_s: float | None) -> None:
        if not self.rate_control:
            raise InvalidInput("this pv pipe has a fixed rate", "it was built with rate_control=False",
                               "build it with rate_control=True to change its rate")
        super().set_rate(bytes_per_s)

    def _rate_changed(self) -> None:
        bucket = self._preread_bucket
        if bucket is not None:
            bucket.set_rate(self.effective_rate)
        with self._wake:
            self._wake.notify_all()

    # -- start --------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._started:
                raise RuntimeError("pipe already started")
            self._started = True
        try:
            pv_path = self._pv_path = require_program("pv", "pv")
            nc_path = require_program("nc", "netcat-openbsd")
        except BaseException:
            self._finished.set()
            raise
        self._preread_bucket = TokenBucket(self.effective_rate)
        try:
            self._preread(self._preread_bucket.take)
        except Aborted:
            self._finished.set()
            raise self._error or stage_error("aborted", self._what("aborted"), "aborted before the copy started") from None
        finally:
            self._preread_bucket = None
        self._t_start = time.monotonic()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        self._in_r, self._out_w = in_r, out_w
        self._pipe_cap = pipe_capacity(in_r)
        os.write(out_w, self._header)  # nc sends it first, before any payload
        # Always start limited: a pv started unlimited and limited later "catches
        # up" on every 100 ms tick since its start, i.e. bursts (docs/transfer.md).
        limit = initial_limit(self._rate)
        pv_argv = [pv_path, "-n", "-b", "-f", "-i", PV_INTERVAL_S, "-L", str(limit)]
        if not self.rate_control:
            pv_argv = pv_argv[:-2] if self._rate is None else pv_argv[:-1] + [str(max(1, int(self._rate)))]
        else:
            ipc = private_ipc()
            if ipc is None:
                log.warning("pv shares its rate-control queue with every pv on this host (no private IPC "
                            "namespace: unshare missing or refused); a rate change may be lost and is sent "
                            "again when pv is seen not to keep to it")
                self._remote_prefix = ()
            else:
                pv_argv = [*ipc[0], *pv_argv]
                self._remote_prefix = ipc[1]
        child_ends = [out_r, in_w]  # ours to close once the child holding it runs
        try:
            # nc leads the process group; pv and the producer join it, so one killpg ends all.
            self._nc = spawn([nc_path, "-N", "-v", self.host, str(self.port)], "nc", stdin=out_r,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
            self._pgid = self._nc.pid
            os.close(child_ends.pop(0))
            self._pv = spawn(pv_argv, "pv", stdin=in_r, stdout=out_w, stderr=subprocess.PIPE,
                             process_group=self._pgid)
            self._producer = spawn(self.producer_argv, "producer", stdin=subprocess.DEVNULL, stdout=in_w,
                                   stderr=subprocess.PIPE, env=env_or_none(self.env), cwd=self.cwd,
                                   process_group=self._pgid)
            os.close(child_ends.pop(0))
            self._gov.start(time.monotonic(), limit)
        except BaseException:
            for fd in child_ends:
                _close_quiet(fd)
            kill_group(self._pgid, [p for p in (self._nc, self._pv, self._producer) if p is not None])
            self._close_fds()
            self._finished.set()
            raise
        self._producer_tail = StreamTail(self._producer.stderr, "producer", on_line=self._producer_line)
        self._pv_tail = StreamTail(self._pv.stderr, "pv", on_line=self._pv_line)
        self._nc_tail = StreamTail(self._nc.stderr, "nc")
        for t in (self._producer_tail, self._pv_tail, self._nc_tail):
            t.start()
        threading.Thread(target=self._read_verdict, name="nc-verdict", daemon=True).start()
        self._supervisor = threading.Thread(target=self._supervise, name=f"pv-pipe-{self.migration_id}",
                                            daemon=True)
        self._governor = threading.Thread(target=self._govern, name=f"pv-governor-{self.migration_id}",
                                          daemon=True)
        self._supervisor.start()
        if self.rate_control:
            self._governor.start()

    def _pv_line(self, line: bytes) -> bool:
        text = line.strip()
        if text.isdigit():
            self._pv_sample = (time.monotonic(), int(text))
            self._pv_bytes = int(text)
            return True
        return False

    def _read_verdict(self) -> None:
        try:
            stream = self._nc.stdout
            while len(self._verdict) < protocol.MAX_VERDICT_BYTES:
                chunk = stream.read1(protocol.MAX_VERDICT_BYTES)
                if not chunk:
                    break
                self._verdict += chunk
        except (OSError, ValueError):
            pass
        finally:
            self._verdict_done.set()

    # -- supervision --------------------------------------------------------

    def _supervise(self) -> None:
        try:
            if self._stream():
                self._finish()
        except Exception as exc:  # a bug here must still end the transfer
            self._fail("transport", f"pipe supervisor error: {exc!r}")
        finally:
            if self._error is not None:
                kill_group(self._pgid, [p for p in (self._nc, self._pv, self._producer) if p is not None])
            self._close_fds()
            with self._wake:
                self._wake.notify_all()
            self._finished.set()

    def _stream(self) -> bool:
        """Watch the three stages until pv has passed the producer's EOF; False on failure."""
        while not self._aborted.is_set():
            nc_rc, pv_rc, prod_rc = self._nc.poll(), self._pv.poll(), self._producer.poll()
            if nc_rc is not None:
                self._transport_ended(nc_rc)
                return False
            if pv_rc not in (None, 0):
                self._fail("throttle", f"pv exited with code {pv_rc}: {self._pv_tail.text()}")
                return False
            if prod_rc not in (None, 0):
                self._producer_failed(prod_rc, self._pv_bytes)
                return False
            if pv_rc == 0:
                try:
                    prod_rc = self._producer.wait(timeout=PRODUCER_EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    self._fail("producer", f"{self.producer_argv[0]} closed its output but did not exit")
                    return False
                if prod_rc != 0:
                    self._producer_failed(prod_rc, self._pv_bytes)
                    return False
                self._pv_tail.join(timeout=5)  # pv's last line is its final byte count
                return True
            time.sleep(POLL_S)
        return False

    def _transport_ended(self, nc_rc: int) -> None:
        self._verdict_done.wait(1.0)
        verdict = protocol.parse_verdict(self._verdict)
        if verdict is not None and not verdict.ok:
            self._fail("receiver", f"the receiver refused the stream: {verdict.reason}")
        else:
            self._nc_tail.join(timeout=0.5)
            detail = self._nc_tail.text() or "no message"
            self._fail("transport", f"nc exited with code {nc_rc} before the stream ended "
                                    f"({self._pv_bytes} bytes sent): {detail}")

    def _finish(self) -> None:
        """Append the trailer behind pv's output, close our end, await the receiver's verdict."""
        trailer = protocol.encode_trailer(self._pv_bytes)
        fd = self._out_w
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)  # pv is gone
        deadline = time.monotonic() + self.finish_timeout_s
        while True:
            if self._aborted.is_set():
                return
            if self._nc.poll() is not None:
                self._transport_ended(self._nc.returncode)
                return
            try:
                os.write(fd, trailer)  # < PIPE_BUF: all or nothing
                break
            except BlockingIOError:
                pass
            except BrokenPipeError:
                continue  # nc is gone; poll() reports it next round
            if time.monotonic() > deadline:
                self._fail("timeout", "could not hand the trailer to nc")
                return
            time.sleep(POLL_S)
        with self._lock:
            self._out_w = None
        os.close(fd)
        while self._nc.poll() is None:
            if self._aborted.is_set():
                return
            if time.monotonic() > deadline:
                self._fail("timeout", "no verdict from the receiver")
                return
            time.sleep(POLL_S)
        self._verdict_done.wait(2.0)
        verdict = protocol.parse_verdict(self._verdict)
        if verdict is None:
            self._transport_ended(self._nc.returncode)
        elif not verdict.ok:
            self._fail("receiver", f"the receiver refused the stream: {verdict.reason}")
        elif verdict.payload_bytes != self._pv_bytes:
            self._fail("receiver", f"the receiver acknowledged {verdict.payload_bytes} bytes, "
                                   f"pv passed {self._pv_bytes}")
        else:
            self._succeed(self._producer.returncode, verdict.payload_bytes)

    # -- the rate actuator --------------------------------------------------

    def _pv_limited(self) -> bool:
        """pv holds data back: its input pipe stays full while its output pipe is not.

        Sampled twice 20 ms apart, because a producer's single large write
        fills the pipe for an instant even when pv keeps up.
        """
        for i in range(2):
            in_fd, out_fd = self._in_r, self._out_w
            if in_fd is None or out_fd is None:
                return False
            if pipe_backlog(in_fd) < self._pipe_cap * 3 // 4 or pipe_backlog(out_fd) >= self._pipe_cap // 2:
                return False
            if i == 0:
                time.sleep(0.02)
        return True

    def _header_delivered(self) -> bool:
        fd = self._out_w
        if fd is None:
            return True
        consumed = len(self._header) + self._pv_bytes - pipe_backlog(fd)
        return consumed >= len(self._header)

    def _govern(self) -> None:
        gov = self._gov
        seen: tuple[float, int] | None = None
        climbing = False
        while not self._finished.is_set() and not self._aborted.is_set():
            if not climbing:  # while pv is the bottleneck, climb without waiting a tick
                with self._wake:
                    self._wake.wait(GOVERNOR_TICK_S)
            climbing = False
            if self._finished.is_set() or self._aborted.is_set():
                break
            requested = self.effective_rate
            paused = requested == 0
            limited = False if paused else self._pv_limited()
            sample = self._pv_sample
            if sample is not None and sample != seen:
                if gov.observe(sample[0], sample[1], limited, paused=paused):
                    seen = sample
            elif limited:
                gov.credit = 0.0
            if not paused and self._nc_stopped:
                self._signal_nc(signal.SIGCONT)  # resume first: pv is still at -L 1, no burst
            limit = gov.decide(requested, limited)
            if gov.unheeded:
                self.resent += 1
                log.info("pv %d passes more than -L %d allows: sending the limit again", self._pv.pid,
                         gov.applied)
            if gov.should_send(limit, requested) and self._pv.poll() is None:
                if self._pv_remote(limit):
                    climbing = limited and limit > gov.applied
                    gov.set_applied(limit, time.monotonic())
            if paused and not self._nc_stopped and self._header_delivered():
                self._signal_nc(signal.SIGSTOP)

    def _signal_nc(self, sig: int) -> None:
        try:
            os.kill(self._nc.pid, sig)
            self._nc_stopped = sig == signal.SIGSTOP
        except ProcessLookupError:
            pass

    def _pv_remote(self, limit: int) -> bool:
        """`pv -R PID -L limit`; retried because any other pv exiting deletes the shared queue."""
        pid = str(self._pv.pid)  # unshare execs pv: the same process
        enter = [*self._remote_prefix[:1], "-t", pid, *self._remote_prefix[1:]] if self._remote_prefix else []
        argv = [*enter, self._pv_path, "-R", pid, "-b", "-i", PV_INTERVAL_S, "-L", str(limit)]
        for _ in range(PV_REMOTE_TRIES):
            if self._pv.poll() is not None:
                return False
            try:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                      timeout=PV_REMOTE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                continue
            self.rate_messages += 1
            if done.returncode == 0:
                return True
        log.warning("pv -R %d -L %d was not received", self._pv.pid, limit)
        return False

    # -- teardown -----------------------------------------------------------

    def abort(self) -> None:
        self._aborted.set()
        bucket = self._preread_bucket
        if bucket is not None:
            bucket.close()  # a pre-read waiting on the rate ends now
        if not self._started:
            return
        self._fail("aborted", f"aborted after {self._pv_bytes} bytes")
        kill_group(self._pgid, [p for p in (self._nc, self._pv, self._producer) if p is not None])
        with self._wake:
            self._wake.notify_all()
        for t in (self._supervisor, self._governor):
            if t is not None and t.is_alive() and t is not threading.current_thread():
                t.join(timeout=10)
        self._close_fds()
        self._finished.set()

    def _close_fds(self) -> None:
        with self._lock:
            fds, self._in_r, self._out_w = (self._in_r, self._out_w), None, None
        for fd in fds:
            if fd is not None:
                _close_quiet(fd)


def _close_quiet(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
