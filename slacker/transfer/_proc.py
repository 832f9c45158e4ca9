"""Process plumbing shared by the pipes and the receiver.

Kept private to the transfer package: stderr tails, process-group teardown and
pipe fill levels, each written so that a dead or stuck child cannot block us.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Mapping, Sequence

from ..errors import InvalidInput, MissingDependency

TAIL_BYTES = 8192


class StreamTail(threading.Thread):
    """Drains a child's stderr (so it never blocks on a full pipe) and keeps the last bytes."""

    def __init__(self, stream, name: str, on_line=None, keep_bytes: int = TAIL_BYTES) -> None:
        super().__init__(name=f"tail-{name}", daemon=True)
        self._stream = stream
        self._keep = keep_bytes
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._on_line = on_line

    def run(self) -> None:
        try:
            for line in iter(self._stream.readline, b""):
                if self._on_line is not None and self._on_line(line):
                    continue
                with self._lock:
                    self._buf += line
                    if len(self._buf) > 2 * self._keep:
                        del self._buf[: len(self._buf) - self._keep]
        except (OSError, ValueError):
            pass
        finally:
            try:
                self._stream.close()
            except OSError:
                pass

    def text(self, max_chars: int = 1500) -> str:
        with self._lock:
            raw = bytes(self._buf[-self._keep:])
        text = raw.decode("utf-8", "replace").strip()
        if len(text) > max_chars:
            text = "..." + text[-max_chars:]
        return text


# A tool's log line starts with a thread tag and a timestamp ("[00] 2026-11-25 21:07:48 ");
# what follows is what it says.
_LOG_PREFIX = re.compile(r"^\s*(\[\d+\]\s*)?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S*\s*(\d+\s+(?=\[))?)?")
_ERROR_WORDS = re.compile(r"\b(error|errno|fatal|failed|failure|cannot|can't|could not|unable|denied|refused|"
                          r"abort\w*|assert\w*|got signal|no space|not found|out of memory)\b", re.IGNORECASE)


def last_error_line(text: str, max_chars: int = 300) -> tuple[str, bool]:
    """The line of a tool's log that says why it stopped, without the tool's thread tag and
    timestamp: (its last line that reads like an error, True), else (its last line, False)."""
    lines = [_LOG_PREFIX.sub("", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line and line != "..."]
    if not lines:
        return "", False
    line = next((x for x in reversed(lines) if _ERROR_WORDS.search(x)), None)
    found = line is not None
    line = line if found else lines[-1]
    return (line if len(line) <= max_chars else line[:max_chars] + "..."), found


def exit_text(returncode: int) -> str:
    """"exited with code 1" or "was killed by SIGKILL" (Popen reports a signal as -N)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def check_argv(argv: Sequence[str], what: str) -> list[str]:
    """An argv must be a list of strings: a shell string would be one opaque word."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidInput(f"invalid {what} command", "expected a non-empty list of argument strings",
                           "pass e.g. ['mariabackup', '--backup', '--stream=xbstream']")
    return list(argv)


def require_program(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingDependency(f"{name} not found", f"{name} is not on PATH",
                                f"install the {package} package")
    return path


def spawn(argv: list[str], what: str, **kwargs) -> subprocess.Popen:
    """Popen that turns 'program missing' into MissingDependency."""
    try:
        return subprocess.Popen(argv, **kwargs)
    except FileNotFoundError:
        raise MissingDependency(f"{what} not found", f"cannot execute {argv[0]!r}",
                                "install it or fix the command") from None
    except PermissionError as exc:
        raise MissingDependency(f"{what} cannot be started", str(exc), "check the program's permissions") from None


def env_or_none(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if env is None else dict(env)


def kill_group(pgid: int | None, procs: Sequence[subprocess.Popen] = ()) -> None:
    """SIGKILL a whole process group (stopped members die too), then reap our children."""
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not honoured
            pass


def pipe_backlog(fd: int) -> int:
    """Bytes queued in the pipe `fd` belongs to (FIONREAD works on either end on Linux)."""
    try:
        buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        return struct.unpack("i", buf)[0]
    except OSError:
        return 0


def pipe_capacity(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, 1032)  # F_GETPIPE_SZ
    except OSError:
        return 65536


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie; never reaps (safe next to Popen)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return False


def wait_until(predicate, timeout_s: float, interval_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
