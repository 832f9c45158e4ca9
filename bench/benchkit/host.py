"""The machine a bench runs on: its one-line description, and the CPU time of the processes it watches."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """Host, architecture, cores and OS, for the bench's output and its JSON."""
    return f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, {platform.platform()}"


def cpu_s(pid: int | None, children: bool = False) -> float:
    """utime + stime of a process in seconds from /proc (with `children`, also of its reaped children);
    0.0 when there is no such process (None, or it is gone), so a difference stays a number."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15 if children else 13]) / CLK_TCK
    except (OSError, IndexError, ValueError, TypeError):
        return 0.0


def interrupt(procs, timeout_s: float = 30.0) -> None:
    """Stop processes a bench started in their own process groups (`start_new_session`): SIGINT to
    every group first, so each cleans up as on Ctrl-C, then SIGKILL to any still running after
    `timeout_s` in all."""
    procs = list(procs)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
