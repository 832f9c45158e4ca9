"""Small process helpers shared by tenants, agents and migration pipelines."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (zombies of our children are reaped)."""
    try:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        if state == "Z":  # it exited after the waitpid above: reap it now, or it lingers as a zombie
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        return state != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.01)  # a /proc read: cheap, and a migration's retire waits on it
    return not alive(pid)


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group `pid` leads (or just `pid` if the group is gone)."""
    try:
        os.killpg(os.getpgid(pid), sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def pids_with_arg(prefix: str) -> list[int]:
    """Processes with a command-line argument starting with `prefix` (say, the --defaults-file of a
    tool a killed agent left running)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.decode(errors="replace").startswith(prefix) for a in args):
            found.append(int(d.name))
    return found


def kill_orphan(pid: int) -> None:
    """SIGKILL a process left running by an earlier agent, and its group when that is not ours."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return
    if group != os.getpgrp():
        kill_group(pid)
    else:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(pid, 10)
