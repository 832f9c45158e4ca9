"""The target side: accept one authenticated stream and feed it to the extractor.

Runs inside the target agent. It listens on an ephemeral port, refuses (and
counts) connections whose header does not carry this migration's id and token,
accepts exactly one that does, then stops listening. The stream is relayed
into the extractor's stdin (e.g. `mbstream -x -C DIR`), holding back the last
16 bytes so the trailer never reaches the extractor; the stream only counts as
complete if the trailer is there, announces the right length, and the
extractor exits 0. The sender is told the outcome in a one-line verdict.

Without TLS the bytes go socket -> a pipe of our own -> the extractor's stdin by
`splice`, never entering this process: the last 16 bytes stay in our pipe until
the stream ends, so the trailer is held back without reading the payload. With
TLS (or `data_path="copy"`) they are read and written through Python. Where the
relay waited, and its CPU, are in `stages` (slacker.transfer.stages).
"""

from __future__ import annotations

import logging
import fcntl
import os
import select
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import InvalidInput, MigrationFailed, SlackerError
from . import protocol
from .. import protocol_version
from ._proc import StreamTail, check_argv, env_or_none, kill_group, spawn
from .overlap import PipeWriter
from .stages import StageClock, exited_child_cpu_s

log = logging.getLogger("slacker.transfer")

RECV_CHUNK_BYTES = 1 << 20
F_SETPIPE_SZ = 1031
ACCEPT_POLL_S = 0.25
VERDICT_DRAIN_S = 1.0

RECEIVER_HINTS = {
    "accept": "the source never connected with the right credentials; check the source agent's log",
    "transport": "the connection from the source broke; the source's own error names the cause",
    "extractor": "the extractor failed; check its message and the staging directory's disk space",
    "timeout": "the stream did not finish in time; check the source side",
    "aborted": "the receiver was aborted on request",
}


@dataclass(frozen=True)
class ReceiveResult:
    """A complete, verified stream: payload length excludes header and trailer."""

    migration_id: str
    bytes_received: int
    duration_s: float
    extractor_returncode: int
    rejected_connections: int
    peer: str


class Receiver:
    """Accepts exactly one authenticated connection and relays it into `extract_argv`."""

    def __init__(
        self,
        migration_id: str,
        token: str | bytes,
        extract_argv: Sequence[str],
        bind_host: str = "127.0.0.1",
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        extract_stdout: str | os.PathLike | None = None,
        accept_timeout_s: float = 300.0,
        header_timeout_s: float = 5.0,
        extract_exit_timeout_s: float = 300.0,
        ssl_context=None,
        data_path: str | None = None,
    ) -> None:
        """data_path: the copy's data path (slacker.transfer.native.wants_splice); None is "auto"."""
        from .native import wants_splice

        self.migration_id = migration_id
        self.use_splice = wants_splice(data_path, ssl_context is not None, "receive")
        self.stages = StageClock()
        try:
            self._mid = protocol.migration_id_bytes(migration_id)
            self._token = protocol.token_bytes(token)
        except ValueError as exc:
            raise InvalidInput("invalid transfer credentials", str(exc),
                               "use protocol.new_token() for the token") from None
        self.extract_argv = check_argv(extract_argv, "extractor")
        self.bind_host = bind_host
        self.env = env
        self.cwd = cwd
        self.extract_stdout = extract_stdout
        self.accept_timeout_s = accept_timeout_s
        self.header_timeout_s = header_timeout_s
        self.extract_exit_timeout_s = extract_exit_timeout_s
        # TLS (slacker.tls.server_context): a connection that does not complete a TLS handshake
        # within the header timeout is refused like one with a wrong token.
        self.ssl_context = ssl_context
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._tail: StreamTail | None = None
        self._thread: threading.Thread | None = None
        self._aborted = threading.Event()
        self._finished = threading.Event()
        self._error: MigrationFailed | None = None
        self._result: ReceiveResult | None = None
        self._received = 0
        self._rejected = 0
        self._peer = ""
        self._port: int | None = None

    # -- public -------------------------------------------------------------

    def start(self) -> int:
        """Bind an ephemeral port on bind_host and start waiting; returns the port."""
        if self._listener is not None:
            raise RuntimeError("receiver already started")
        family = socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET
        ls = socket.socket(family, socket.SOCK_STREAM)
        try:
            ls.bind((self.bind_host, 0))
            ls.listen(8)
        except OSError as exc:
            ls.close()
            raise MigrationFailed(f"cannot listen on {self.bind_host}", str(exc),
                                  "check bind_host is an address of this node", phase="snapshot") from None
        ls.settimeout(ACCEPT_POLL_S)
        self._listener = ls
        self._port = ls.getsockname()[1]
        self._t_start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"receiver-{self.migration_id}", daemon=True)
        self._thread.start()
        return self._port

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("receiver not started")
        return self._port

    @property
    def bytes_received(self) -> int:
        """Payload bytes read from the connection so far (the last 16 turn out to be the trailer)."""
        return self._received

    @property
    def rejected_connections(self) -> int:
        return self._rejected

    @property
    def pids(self) -> list[int]:
        return [self._proc.pid] if self._proc is not None else []

    @property
    def listening(self) -> bool:
        return self._listener is not None

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def wait(self, timeout: float) -> ReceiveResult:
        """Block until the stream ended and the extractor exited 0; abort and raise otherwise."""
        if self._thread is None:
            raise RuntimeError("wait() before start()")
        if not self._finished.wait(timeout):
            self._fail("timeout", f"not finished after {timeout:.0f}s ({self._received} bytes received)")
            self.abort()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def abort(self) -> None:
        """Stop listening, drop the connection, kill the extractor's process group."""
        self._aborted.set()
        self._fail("aborted", f"aborted after {self._received} bytes")
        self._close_listener()
        conn = self._conn
        if conn is not None:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._proc is not None:
            kill_group(self._proc.pid, [self._proc])
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._finished.set()

    def __enter__(self) -> "Receiver":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.done or self._error is not None:
            self.abort()

    # -- internals ----------------------------------------------------------

    def _what(self) -> str:
        return f"receiving snapshot {self.migration_id} on {self.bind_host}:{self._port} failed"

    def _fail(self, stage: str, why: str) -> None:
        tail = self._tail
        if stage == "extractor" and tail is not None and tail is not threading.current_thread():
            # The extractor has exited (or failed to take data): let its last words reach the tail, or
            # the error names the exit code without the reason (seen: "disk full" missing, 1 run in ~7).
            tail.join(timeout=1.0)
        with self._lock:
            if self._error is not None or self._result is not None:
                return
            if stage == "extractor" and self._tail is not None and self._tail.text():
                why = f"{why}; extractor stderr: {self._tail.text()}"
            err = MigrationFailed(self._what(), why, RECEIVER_HINTS.get(stage, ""), phase="snapshot")
            err.stage = stage  # type: ignore[attr-defined]
            self._error = err
        if stage != "aborted":
            log.warning("%s", err)

    def _close_listener(self) -> None:
        ls, self._listener = self._listener, None
        if ls is not None:
            try:
                ls.close()
            except OSError:
                pass

    def _run(self) -> None:
        try:
            conn = self._accept_one()
            if conn is None:
                return
            self._conn = conn
            if self._aborted.is_set():  # abort() may have looked for a connection just before
                return
            try:
                self._relay(conn)
            except SlackerError as exc:  # extractor missing or not executable
                self._fail("extractor", exc.one_line())
                _send_verdict(conn, protocol.encode_verdict(False, reason=exc.one_line()))
        except Exception as exc:  # a bug here must still surface as a failed transfer
            self._fail("transport", f"receiver error: {exc!r}")
        finally:
            self._close_listener()
            if self._error is not None and self._proc is not None:
                kill_group(self._proc.pid, [self._proc])
            if self._conn is not None:
                try:
                    self._conn.close()
                except OSError:
                    pass
            self._finished.set()

    def _accept_one(self) -> socket.socket | None:
        deadline = self._t_start + self.accept_timeout_s
        while not self._aborted.is_set():
            ls = self._listener
            if ls is None:
                return None
            if time.monotonic() >= deadline:
                self._fail("accept", f"no valid connection within {self.accept_timeout_s:.0f}s "
                                     f"({self._rejected} refused)")
                return None
            try:
                conn, addr = ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return None  # listener closed by abort()
            peer = f"{addr[0]}:{addr[1]}"
            try:
                if self.ssl_context is not None:
                    conn.settimeout(min(self.header_timeout_s, max(0.1, deadline - time.monotonic())))
                    try:
                        conn = self.ssl_context.wrap_socket(conn, server_side=True)
                    except (OSError, ValueError) as exc:
                        self._rejected += 1
                        log.warning("receiver %s: refused connection from %s: no TLS (%s)",
                                    self.migration_id, peer, exc)
                        conn.close()
                        continue
                header = protocol.read_header(conn, min(self.header_timeout_s,
                                                        max(0.1, deadline - time.monotonic())))
                ok = header.matches(self._mid, self._token)
                why = "" if ok else "wrong migration id or token"
                mine = protocol_version.current()
                if ok and not protocol_version.compatible(mine, header.version):
                    ok, why = False, (f"protocol version skew: the sender speaks {header.version}, this receiver "
                                      f"{mine} (upgrade the side with {min(mine, header.version)})")
            except (protocol.ProtocolError, OSError) as exc:
                ok, why = False, str(exc)
            if ok:
                conn.settimeout(None)
                self._peer = peer
                self._close_listener()  # exactly one stream per migration
                log.info("receiver %s: accepted stream from %s", self.migration_id, peer)
                return conn
            self._rejected += 1
            log.warning("receiver %s: refused connection from %s: %s", self.migration_id, peer, why)
            _send_verdict(conn, protocol.encode_verdict(False, reason=f"refused: {why}"))
            conn.close()
        return None

    def _relay(self, conn: socket.socket) -> None:
        out = open(self.extract_stdout, "wb") if self.extract_stdout is not None else None  # noqa: SIM115
        try:
            self._proc = spawn(self.extract_argv, "extractor", stdin=subprocess.PIPE,
                               stdout=out if out is not None else subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=env_or_none(self.env), cwd=self.cwd, start_new_session=True)
        finally:
            if out is not None:
                out.close()
        self._tail = StreamTail(self._proc.stderr, "extractor")
        self._tail.start()
        if self._aborted.is_set():
            return  # _run's cleanup kills the extractor
        out_fd = self._proc.stdin.fileno()
        clock = self.stages
        clock.start()
        try:
            tail = self._copy_spliced(conn, out_fd) if self.use_splice else self._copy_buffered(conn, out_fd)
        except BrokenPipeError:  # only the extractor's stdin can raise EPIPE here
            rc = _wait_rc(self._proc, 5.0)
            self._fail("extractor", f"{self.extract_argv[0]} exited with code {rc} after "
                                    f"{self._received} bytes")
            _send_verdict(conn, protocol.encode_verdict(False, reason=f"extractor exited with code {rc}"))
            return
        except OSError as exc:
            if not self._aborted.is_set():
                self._fail("transport", f"connection dropped after {self._received} bytes: {exc}")
            return
        finally:
            clock.stop()
            if self._error is not None or self._aborted.is_set():
                self._close_stdin()
        if self._aborted.is_set():
            return
        clock.mark("stream_end")
        announced = protocol.parse_trailer(tail)
        payload = self._received - protocol.TRAILER_LEN
        if announced is None or announced != payload:
            self._fail("transport", f"stream ended without a valid end-of-stream trailer after "
                                    f"{self._received} bytes (the sender was cut off)")
            _send_verdict(conn, protocol.encode_verdict(False, reason="stream cut before its end"))
            return
        self._close_stdin()
        clock.child_cpu_s = exited_child_cpu_s(self._proc.pid, self.extract_exit_timeout_s)
        clock.mark("extractor_exit")
        rc = _wait_rc(self._proc, self.extract_exit_timeout_s)
        if rc != 0:
            self._fail("extractor", f"{self.extract_argv[0]} exited with code {rc}")
            _send_verdict(conn, protocol.encode_verdict(False, reason=f"extractor exited with code {rc}"))
            return
        if self._tail is not None:
            self._tail.join(timeout=2)
        with self._lock:
            if self._error is not None:
                return
            self._result = ReceiveResult(
                migration_id=self.migration_id,
                bytes_received=payload,
                duration_s=time.monotonic() - self._t_start,
                extractor_returncode=rc,
                rejected_connections=self._rejected,
                peer=self._peer,
            )
        _send_verdict(conn, protocol.encode_verdict(True, payload))
        log.info("receiver %s: %d bytes extracted", self.migration_id, payload)

    def _copy_spliced(self, conn: socket.socket, out_fd: int) -> bytes:
        """socket -> our pipe -> the extractor's stdin by splice, keeping the last TRAILER_LEN bytes in
        our pipe; returns them at EOF. Our pipe is drained to those few bytes after every splice into
        it, so it always has room for the next one."""
        hold = protocol.TRAILER_LEN
        clock, now = self.stages, time.monotonic
        clock.path = "splice"
        sfd = conn.fileno()
        r, w = os.pipe()
        try:
            try:
                fcntl.fcntl(w, F_SETPIPE_SZ, RECV_CHUNK_BYTES)
            except OSError:
                pass
            ready = select.poll()
            ready.register(sfd, select.POLLIN)
            held = 0  # bytes in our pipe
            recv_wait = write = 0.0
            try:
                while True:
                    t0 = now()
                    ready.poll()
                    t1 = now()
                    n = os.splice(sfd, w, RECV_CHUNK_BYTES)
                    recv_wait += t1 - t0
                    if n == 0:
                        break
                    if not self._received:
                        clock.mark("first_byte")
                    self._received += n
                    held += n
                    t2 = now()
                    while held > hold:
                        held -= os.splice(r, out_fd, held - hold)
                    write += now() - t2
            finally:
                clock.add("recv_wait_s", recv_wait)
                clock.add("extract_write_s", write)
            tail = b""
            while len(tail) < held:
                tail += os.read(r, held - len(tail))
            return tail
        finally:
            os.close(r)
            os.close(w)

    def _copy_buffered(self, conn: socket.socket, out_fd: int) -> bytes:
        """recv -> (a writer thread, a few buffers behind) -> the extractor, always keeping the last
        TRAILER_LEN bytes back; returns them at EOF. The write overlaps the next receive and its
        decryption (overlap.py); only this thread touches the socket."""
        hold = protocol.TRAILER_LEN
        # A TLS socket hands out one record (16 KiB) per read; gather what is already there into one
        # chunk, or the relay spends its time in per-record Python and 16 KiB pipe writes.
        tls = isinstance(conn, ssl.SSLSocket)
        clock, now = self.stages, time.monotonic
        clock.path = "tls" if tls else "copy"
        writer = PipeWriter(out_fd, hold + RECV_CHUNK_BYTES, name=f"pipe-writer-{self.migration_id}")
        writer.start()
        held = b""  # the last bytes so far, kept back: they may be the trailer
        eof = False
        recv_wait = write = 0.0
        try:
            while True:
                t0 = now()
                buf = writer.buffer()
                view = memoryview(buf)
                t1 = now()
                n = 0 if eof else conn.recv_into(view[hold:], RECV_CHUNK_BYTES)
                if n and tls:
                    more, eof = _drain_ready(conn, view[hold + n:hold + RECV_CHUNK_BYTES])
                    n += more
                t2 = now()
                write += t1 - t0
                recv_wait += t2 - t1
                if n == 0:
                    view.release()
                    writer.submit(buf, 0, 0)
                    writer.flush()
                    write += now() - t2
                    return held
                if not self._received:
                    clock.mark("first_byte")
                self._received += n
                first = hold - len(held)
                view[first:hold] = held
                end = hold + n
                held = bytes(view[max(first, end - hold):end])
                view.release()
                writer.submit(buf, first, end - len(held))
        finally:
            writer.close()
            clock.helper_cpu_s += writer.cpu_s
            clock.add("recv_wait_s", recv_wait)
            clock.add("extract_write_s", write)

    def _close_stdin(self) -> None:
        try:
            if self._proc is not None and self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass


def _drain_ready(conn: ssl.SSLSocket, view: memoryview) -> tuple[int, bool]:
    """Read what can be read without waiting into `view`; returns (bytes, reached the end)."""
    got = 0
    conn.setblocking(False)
    try:
        while got < len(view):
            try:
                n = conn.recv_into(view[got:])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return got, False
            if n == 0:
                return got, True
            got += n
        return got, False
    finally:
        conn.settimeout(None)


def _wait_rc(proc: subprocess.Popen, timeout_s: float) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid, [proc])
        return proc.returncode if proc.returncode is not None else -9


def _send_verdict(conn: socket.socket, verdict: bytes, drain_s: float = VERDICT_DRAIN_S) -> None:
    """Best effort: send the verdict, then read and discard for a moment before closing.

    Closing with unread data makes the kernel answer with a reset, and a sender
    still writing (nc in particular) may then die before it reads the verdict.
    """
    try:
        conn.settimeout(2.0)
        conn.sendall(verdict)
        protocol.half_close(conn)
        deadline = time.monotonic() + drain_s
        sink = bytearray(1 << 16)
        while (remaining := deadline - time.monotonic()) > 0:
            conn.settimeout(remaining)
            if conn.recv_into(sink) == 0:
                break
    except OSError:
        pass
