"""The throttled-pipe interface every sender implementation provides.

A pipe runs a producer (the backup tool), limits its stream to a rate that can
change every second, and delivers it to one Receiver. The migration phase
machine and the PID controller talk only to this interface.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .stages import StageClock

from .. import pagecache
from ..errors import InvalidInput, MigrationFailed
from ..units import format_rate
from . import protocol
from ._proc import StreamTail, check_argv, exit_text, last_error_line
from .bucket import Aborted

log = logging.getLogger("slacker.transfer")

STAGE_HINTS = {
    "producer": "the agent log has the backup tool's whole output; the source tenant keeps serving",
    "throttle": "pv failed; check that pv is installed and that /tmp is usable by this user",
    "transport": "check that the target agent is up and reachable from this node",
    "receiver": "see the target agent's log for why it refused or failed the stream",
    "timeout": "the copy did not finish in time; check for a stalled producer or a pause never lifted",
    "aborted": "the transfer was aborted on request",
}


@dataclass(frozen=True)
class TransferResult:
    """What a finished sender reports; the receiver's acknowledged count is checked equal."""

    implementation: str
    migration_id: str
    bytes_sent: int
    duration_s: float
    producer_returncode: int
    acknowledged_bytes: int


def normalize_rate(bytes_per_s: float | None) -> float | None:
    """None or +inf means unlimited; 0 means paused (never unlimited); negatives are refused."""
    if bytes_per_s is None:
        return None
    try:
        rate = float(bytes_per_s)
    except (TypeError, ValueError):
        raise InvalidInput(f"invalid rate {bytes_per_s!r}", "a rate is a number of bytes per second",
                           "use None for unlimited and 0 to pause") from None
    if math.isnan(rate) or rate < 0:
        raise InvalidInput(f"invalid rate {bytes_per_s!r}", "a rate must be zero or positive",
                           "use None for unlimited and 0 to pause")
    return None if math.isinf(rate) else rate


def stage_error(stage: str, what: str, why: str, producer_tail: str = "") -> MigrationFailed:
    """A MigrationFailed naming the failed stage. The producer's stderr goes into `detail` (the agent
    log, --json, --debug); the message quotes only its last error line, and only when the producer
    itself failed: when the link or the receiver broke, the tool's start-up log says nothing of why."""
    if producer_tail and stage == "producer":
        last, is_error = last_error_line(producer_tail)
        if last:
            why = f"{why}; {'its error' if is_error else 'its last line'}: {last}"
    err = MigrationFailed(what, why, STAGE_HINTS.get(stage, ""), phase="snapshot", detail=producer_tail)
    err.stage = stage  # type: ignore[attr-defined]  # lets callers and tests branch on it
    return err


class ThrottledPipe(ABC):
    """producer -> rate limiter -> TCP -> Receiver, with a rate settable at any time.

    `set_rate(None)` is unlimited, `set_rate(0)` pauses; `wait(timeout)` returns a
    TransferResult or raises MigrationFailed(phase="snapshot") naming the stage;
    on timeout it aborts first, so nothing is left running.
    """

    kind: ClassVar[str] = "?"
    # The sender's stage clock (slacker.transfer.stages.StageClock) for a pipe that keeps one (native).
    stages: "StageClock | None" = None

    def __init__(
        self,
        producer_argv: Sequence[str],
        host: str,
        port: int,
        migration_id: str,
        token: str | bytes,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        rate_bytes_per_s: float | None = None,
        connect_timeout_s: float = 10.0,
        finish_timeout_s: float = 600.0,
        commit_lock_events: Callable[[str], bool | None] | None = None,
        preread_program: bool = False,
        protocol_version: int | None = None,
        protocol_dialect: int | None = None,
    ) -> None:
        self.producer_argv = check_argv(producer_argv, "producer")
        # Read the producer's program into the page cache at the pipe's rate before starting it
        # (slacker.pagecache): a program loading itself from a busy disk stalls it at any rate.
        self.preread_program = bool(preread_program)
        self.preread_bytes = 0  # bytes of program read so far
        self.prereading = False  # the pipe is reading the program, the producer has not started
        self.host = host
        self.port = int(port)
        self.migration_id = migration_id
        try:
            # The agent protocol goes in the header unless the receiver speaks version 1 (its dialect).
            self._header = protocol.encode_header(migration_id, token, protocol_version, protocol_dialect)
        except ValueError as exc:
            raise InvalidInput("invalid transfer credentials", str(exc),
                               "use protocol.new_token() for the token") from None
        self.env = env
        self.cwd = cwd
        self.connect_timeout_s = connect_timeout_s
        self.finish_timeout_s = finish_timeout_s
        self._rate = normalize_rate(rate_bytes_per_s)
        self._lock = threading.Lock()
        self._started = False
        self._aborted = threading.Event()
        self._finished = threading.Event()
        self._error: MigrationFailed | None = None
        self._result: TransferResult | None = None
        self._t_start = 0.0
        self._producer_tail: StreamTail | None = None
        # Reads the producer's log lines: True when it took a lock that blocks the source's
        # commits, False when it let go, None otherwise (see backup.commit_lock_event).
        self._commit_lock_events = commit_lock_events
        self._commit_locked = False
        self._unthrottled = (0, 0.0)  # bytes and seconds copied under the commit lock, locks already released
        self._locked_at: tuple[int, float] | None = None  # bytes_sent and clock when the current lock was taken

    # -- public interface ---------------------------------------------------

    @abstractmethod
    def start(self) -> None:
        """Spawn the producer and connect; returns at once, the copy runs in the background."""

    def set_rate(self, bytes_per_s: float | None) -> None:
        """Change the limit; takes effect within a fraction of a second (see docs/transfer.md)."""
        rate = normalize_rate(bytes_per_s)
        with self._lock:
            old, self._rate = self._rate, rate
        if old != rate:
            log.debug("%s %s: rate %s -> %s", self.kind, self.migration_id, _fmt(old), _fmt(rate))
        self._rate_changed()

    @property
    def rate(self) -> float | None:
        """The rate last asked for (None = unlimited, 0 = paused)."""
        return self._rate

    @property
    def commit_locked(self) -> bool:
        """The producer says it holds a lock that blocks the source's commits."""
        return self._commit_locked

    @property
    def unthrottled(self) -> tuple[int, float]:
        """Bytes and seconds copied so far while the producer held the commit lock (the limit lifted),
        the current lock's included: what a check of the applied rate leaves out."""
        with self._lock:
            b, s = self._unthrottled
            if self._locked_at is not None:
                b += max(0, self.bytes_sent - self._locked_at[0])
                s += time.monotonic() - self._locked_at[1]
        return b, s

    @property
    def effective_rate(self) -> float | None:
        """The limit actually applied: unlimited while the producer blocks the source's commits.

        Throttling then would stretch a stall of every writer (and a controller that
        sees the stall as latency would cut the rate to 0 and never get it back: the
        commits it waits for cannot finish until the copy does).
        """
        return None if self._commit_locked else self._rate

    @property
    @abstractmethod
    def bytes_sent(self) -> int:
        """Bytes of the producer's stream handed to the transport so far."""

    @property
    def done(self) -> bool:
        """The transfer ended, one way or the other (wait() tells which)."""
        return self._finished.is_set()

    @property
    def pids(self) -> list[int]:
        """Processes this pipe started, producer first (diagnostics and tests)."""
        return []

    def wait_done(self, timeout: float) -> bool:
        """Block until the transfer ended or `timeout` passed; True if it ended (no verdict, no abort)."""
        return self._finished.wait(timeout)

    def wait(self, timeout: float) -> TransferResult:
        """Block until the receiver acknowledged the stream; abort and raise on failure or timeout."""
        if not self._started:
            raise RuntimeError("wait() before start()")
        if not self._finished.wait(timeout):
            self._fail("timeout", f"not finished after {timeout:.0f}s ({self.bytes_sent} bytes sent)")
            self.abort()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    @abstractmethod
    def abort(self) -> None:
        """Kill the whole pipeline (process group, sockets, threads); idempotent."""

    def __enter__(self) -> "ThrottledPipe":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.done or self._error is not None:
            self.abort()

    # -- for implementations ------------------------------------------------

    def _preread(self, take: Callable[[int], int]) -> None:
        """Read the uncached parts of the producer's program and libraries, `take(n)` pacing each read."""
        if not self.preread_program:
            return
        t0 = time.monotonic()
        self.prereading = True

        def counted(n: int) -> int:
            if self._aborted.is_set():
                raise Aborted()
            got = take(n)
            self.preread_bytes += got
            return got
        try:
            pagecache.preread(pagecache.program_files(self.producer_argv[0]), counted)
        finally:
            self.prereading = False
        if self.preread_bytes:
            log.info("%s %s: read %d bytes of %s into memory in %.1fs before starting it", self.kind,
                     self.migration_id, self.preread_bytes, self.producer_argv[0], time.monotonic() - t0)

    def _producer_line(self, line: bytes) -> bool:
        """StreamTail hook for the producer's stderr; keeps every line in the tail."""
        if self._commit_lock_events is None:
            return False
        try:
            event = self._commit_lock_events(line.decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - a bad classifier must not stop draining stderr
            log.exception("commit-lock classifier failed")
            return False
        if event is not None and bool(event) != self._commit_locked:
            with self._lock:
                self._commit_locked = bool(event)
                sent, now = self.bytes_sent, time.monotonic()
                if event:
                    self._locked_at = (sent, now)
                elif self._locked_at is not None:
                    b, s = self._unthrottled
                    self._unthrottled = (b + max(0, sent - self._locked_at[0]), s + now - self._locked_at[1])
                    self._locked_at = None
            log.info("%s %s: producer %s the commit lock; rate %s", self.kind, self.migration_id,
                     "took" if event else "released", "unlimited" if event else _fmt(self._rate))
            self._rate_changed()
        return False

    def _rate_changed(self) -> None:
        """Hook: the requested rate changed."""

    #: how each stage is named in messages; implementations name their transport
    stage_labels: ClassVar[dict[str, str]] = {"throttle": "the throttle", "transport": "the transport"}

    def _what(self, stage: str) -> str:
        labels = {"producer": f"the producer ({os.path.basename(self.producer_argv[0])})",
                  "receiver": "the receiver", "timeout": "a timeout", "aborted": "an abort",
                  **self.stage_labels}
        return (f"snapshot transfer {self.migration_id} to {self.host}:{self.port} "
                f"failed at {labels.get(stage, stage)}")

    def _fail(self, stage: str, why: str) -> None:
        """Record the first failure only: later ones are consequences of it."""
        with self._lock:
            if self._error is not None or self._result is not None:
                return
            tail = self._producer_tail.text() if self._producer_tail is not None else ""
            self._error = stage_error(stage, self._what(stage), why, tail)
        log.log(logging.INFO if stage == "aborted" else logging.WARNING, "%s", self._error)
        if tail and stage != "aborted":
            log.warning("%s %s: the producer's last output:\n%s", self.kind, self.migration_id, tail)

    def _producer_failed(self, returncode: int, bytes_sent: int) -> None:
        self._fail("producer", f"{os.path.basename(self.producer_argv[0])} {exit_text(returncode)} "
                               f"after {bytes_sent} bytes")

    def _succeed(self, producer_rc: int, acked: int) -> None:
        with self._lock:
            if self._error is not None:
                return
            self._result = TransferResult(
                implementation=self.kind,
                migration_id=self.migration_id,
                bytes_sent=self.bytes_sent,
                duration_s=time.monotonic() - self._t_start,
                producer_returncode=producer_rc,
                acknowledged_bytes=acked,
            )


def _fmt(rate: float | None) -> str:
    return "unlimited" if rate is None else ("paused" if rate == 0 else format_rate(rate))
