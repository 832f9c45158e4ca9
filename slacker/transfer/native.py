"""NativePipe: the agent itself moves the producer's output to the socket.

One thread asks the token bucket before every slice, so a rate cut or a pause
applies to the very next slice (no credit carried over, see bucket.py), and
bytes_sent is exact. The data path (wants_splice): `splice` moves each slice from
the producer's pipe to the socket in the kernel, never through this process
(plain streams only); `copy` is `read(1 MiB) -> sendall` (TLS needs it). Where
the pump waited, and its CPU, are in `stages` (slacker.transfer.stages).
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import subprocess
import threading
import time

from . import DATA_PATHS, protocol
from ._proc import StreamTail, env_or_none, kill_group, spawn
from ..errors import InvalidInput
from .base import ThrottledPipe, stage_error
from .overlap import PipeReader
from .bucket import DEFAULT_BURST_S, DEFAULT_MIN_BURST_BYTES, Aborted, TokenBucket
from .stages import StageClock, exited_child_cpu_s

F_SETPIPE_SZ = 1031
CHUNK_BYTES = 1 << 20
PRODUCER_EXIT_GRACE_S = 30.0
# What "auto" means for a plain stream (TLS always copies: splice would bypass the encryption).
AUTO_DATA_PATH = "copy"


def wants_splice(data_path: str | None, tls: bool, side: str) -> bool:
    """Whether `side` ("send" or "receive") of the copy splices. "auto" (or None) is AUTO_DATA_PATH for
    a plain stream when the kernel offers splice, copy under TLS; a path that splices is refused with TLS."""
    path = data_path or "auto"
    if path != "auto" and path not in DATA_PATHS:
        raise InvalidInput(f"unknown data path {path!r}", f"known: auto, {', '.join(DATA_PATHS)}",
                           "omit it for auto")
    if path == "auto":
        path = "copy" if tls or not hasattr(os, "splice") else AUTO_DATA_PATH
    if tls and any(DATA_PATHS[path]):
        raise InvalidInput("splice cannot be used with TLS", "splice moves bytes around the TLS layer",
                           "use --data-path auto or copy")
    return DATA_PATHS[path][0 if side == "send" else 1]


class NativePipe(ThrottledPipe):
    """In-process throttle: token bucket with a burst bounded to `burst_s` of the current rate."""

    kind = "native"
    stage_labels = {"transport": "the transport (TCP, or TLS over TCP, from this process)"}

    def __init__(self, *args, chunk_bytes: int = CHUNK_BYTES, burst_s: float = DEFAULT_BURST_S,
                 min_burst_bytes: int = DEFAULT_MIN_BURST_BYTES, use_splice: bool | None = None,
                 ssl_context=None, **kwargs) -> None:
        """use_splice: None is the "auto" data path's choice for the sender (wants_splice)."""
        super().__init__(*args, **kwargs)
        # TLS (slacker.tls.client_context): the receiver's certificate is checked against the
        # cluster CA and its address. splice() would bypass the encryption, so it is refused.
        self.ssl_context = ssl_context
        if ssl_context is not None and use_splice:
            raise InvalidInput("splice cannot be used with TLS", "splice moves bytes around the TLS layer",
                               "drop use_splice")
        self.chunk_bytes = int(chunk_bytes)
        self.use_splice = wants_splice("auto", ssl_context is not None, "send") if use_splice is None else use_splice
        self.stages = StageClock()
        self._bucket = TokenBucket(self._rate, burst_s=burst_s, min_burst_bytes=min_burst_bytes)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._sent = 0

    @property
    def bytes_sent(self) -> int:
        return self._sent

    @property
    def pids(self) -> list[int]:
        """Processes this pipe started (for tests and diagnostics)."""
        return [self._proc.pid] if self._proc is not None else []

    def _rate_changed(self) -> None:
        self._bucket.set_rate(self.effective_rate)

    def start(self) -> None:
        with self._lock:
            if self._started:
                raise RuntimeError("pipe already started")
            self._started = True
        try:
            self._preread(self._bucket.take)
        except Aborted:
            self._finished.set()
            raise self._error or stage_error("aborted", self._what("aborted"), "aborted before the copy started") from None
        self._t_start = time.monotonic()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        except OSError as exc:
            self._finished.set()
            self._error = stage_error("transport", self._what("transport"), f"cannot connect: {exc}")
            raise self._error from None
        if self.ssl_context is not None:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
            except (OSError, ValueError) as exc:
                sock.close()
                self._finished.set()
                self._error = stage_error("transport", self._what("transport"), f"TLS handshake failed: {exc}")
                raise self._error from None
        try:
            sock.settimeout(None)
            sock.sendall(self._header)
            self._sock = sock
            self._proc = spawn(self.producer_argv, "producer", stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=env_or_none(self.env), cwd=self.cwd, start_new_session=True)
        except BaseException:
            sock.close()
            self._finished.set()
            raise
        try:  # fewer, larger reads; harmless if the system caps pipe size lower
            fcntl.fcntl(self._proc.stdout.fileno(), F_SETPIPE_SZ, self.chunk_bytes)
        except OSError:
            pass
        self._producer_tail = StreamTail(self._proc.stderr, "producer", on_line=self._producer_line)
        self._producer_tail.start()
        self._thread = threading.Thread(target=self._run, name=f"native-pipe-{self.migration_id}", daemon=True)
        self._thread.start()

    # -- the pump -----------------------------------------------------------

    def _run(self) -> None:
        assert self._proc is not None and self._sock is not None
        try:
            self._pump()
            if self._aborted.is_set():
                return
            rc = self._producer_exit()
            if rc != 0:
                self._producer_failed(rc, self._sent)
                return
            self._finish(rc)
        except Aborted:
            pass
        except OSError as exc:
            if not self._aborted.is_set():
                self._transport_failed(exc)
        finally:
            failed = self._error is not None
            if failed and self._sock is not None:
                _hard_close(self._sock)  # RST: the receiver must see a cut, not an end
            elif self._sock is not None:
                self._sock.close()
            if failed:
                kill_group(self._proc.pid, [self._proc])
            self._finished.set()

    def _pump(self) -> None:
        clock = self.stages
        clock.start()
        try:
            self._pump_splice() if self.use_splice else self._pump_copy()
        finally:
            clock.stop()

    def _pump_splice(self) -> None:
        """producer's pipe -> socket in the kernel; the bucket grants each slice before it moves."""
        fd, sfd = self._proc.stdout.fileno(), self._sock.fileno()
        clock, now = self.stages, time.monotonic
        clock.path = "splice"
        ready = select.poll()
        ready.register(fd, select.POLLIN)
        waited = {"producer_wait_s": 0.0, "throttle_wait_s": 0.0, "send_s": 0.0}
        try:
            while not self._aborted.is_set():
                t0 = now()
                ready.poll()  # data or EOF: the time until then is the producer's
                t1 = now()
                grant = self._bucket.take(self.chunk_bytes)
                t2 = now()
                n = os.splice(fd, sfd, grant)
                waited["producer_wait_s"] += t1 - t0
                waited["throttle_wait_s"] += t2 - t1
                waited["send_s"] += now() - t2
                if n < grant:
                    self._bucket.refund(grant - n)
                if n == 0:
                    return
                if not self._sent:
                    clock.mark("first_byte")
                self._sent += n
        finally:
            for k, v in waited.items():
                clock.add(k, v)

    def _pump_copy(self) -> None:
        """producer's pipe -> (a reader thread, a few buffers ahead) -> bucket -> sendall, through this
        process (TLS, or data_path="copy"); the read overlaps the encryption and the send (overlap.py)."""
        sock = self._sock
        clock, now = self.stages, time.monotonic
        clock.path = "tls" if self.ssl_context is not None else "copy"
        reader = PipeReader(self._proc.stdout.fileno(), self.chunk_bytes, name=f"pipe-reader-{self.migration_id}")
        reader.start()
        waited = {"producer_wait_s": 0.0, "throttle_wait_s": 0.0, "send_s": 0.0}
        try:
            while not self._aborted.is_set():
                t0 = now()
                item = reader.take()
                waited["producer_wait_s"] += now() - t0
                if item is None:
                    return
                buf, n = item
                view = memoryview(buf)
                if not self._sent:
                    clock.mark("first_byte")
                off = 0
                while off < n:
                    t1 = now()
                    k = self._bucket.take(n - off)
                    t2 = now()
                    sock.sendall(view[off:off + k])
                    waited["throttle_wait_s"] += t2 - t1
                    waited["send_s"] += now() - t2
                    off += k
                    self._sent += k
                view.release()
                reader.give_back(buf)
        finally:
            reader.close()
            clock.helper_cpu_s += reader.cpu_s
            for k, v in waited.items():
                clock.add(k, v)

    def _producer_exit(self) -> int:
        self.stages.mark("producer_eof")
        self.stages.child_cpu_s = exited_child_cpu_s(self._proc.pid, PRODUCER_EXIT_GRACE_S)
        self.stages.mark("producer_exit")
        try:
            return self._proc.wait(timeout=PRODUCER_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self._fail("producer", f"{self.producer_argv[0]} closed its output but did not exit")
            return -1

    def _finish(self, rc: int) -> None:
        sock = self._sock
        sock.sendall(protocol.encode_trailer(self._sent))
        protocol.half_close(sock)
        verdict = _read_verdict(sock, self.finish_timeout_s)
        self.stages.mark("verdict")
        if verdict is None:
            self._fail("transport", "the receiver closed the connection without a verdict")
        elif not verdict.ok:
            self._fail("receiver", f"the receiver refused the stream: {verdict.reason}")
        elif verdict.payload_bytes != self._sent:
            self._fail("receiver", f"the receiver acknowledged {verdict.payload_bytes} bytes, "
                                   f"{self._sent} were sent")
        else:
            self._succeed(rc, verdict.payload_bytes)

    def _transport_failed(self, exc: OSError) -> None:
        verdict = _read_verdict(self._sock, 0.5) if self._sock is not None else None
        if verdict is not None and not verdict.ok:
            self._fail("receiver", f"the receiver refused the stream: {verdict.reason}")
        else:
            self._fail("transport", f"connection to the receiver broke after {self._sent} bytes: {exc}")

    def abort(self) -> None:
        self._aborted.set()
        if not self._started:
            return
        self._fail("aborted", f"aborted after {self._sent} bytes")
        self._bucket.close()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._proc is not None:
            kill_group(self._proc.pid, [self._proc])
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._finished.set()


def _read_verdict(sock: socket.socket, timeout_s: float) -> protocol.Verdict | None:
    deadline = time.monotonic() + timeout_s
    data = b""
    try:
        while b"\n" not in data and len(data) < protocol.MAX_VERDICT_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            chunk = sock.recv(protocol.MAX_VERDICT_BYTES)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return protocol.parse_verdict(data)


def _hard_close(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
