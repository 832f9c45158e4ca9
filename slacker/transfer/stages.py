"""Where a copy's time went, stage by stage: what each side of the pipe waited on, and CPU.

Each side keeps one `StageClock`. The sender's pump thread adds the seconds it waited for the
producer's output (`producer_wait_s`), for the throttle's grant (`throttle_wait_s`) and for the
transport to take the bytes (`send_s`); the receiver's adds the seconds it waited for the network
(`recv_wait_s`) and for the extractor to take the bytes (`extract_write_s`). A side that mostly
waits on the next stage shows which stage is the bottleneck; `cpu_s` (the pump thread's own CPU and
its pipe helper's, kernel time included) is what the agent's data path costs, and `child_cpu_s` what the backup tool
or the extractor used. `as_dict()` is what goes into the migration's document (`copy_stages`).
"""

from __future__ import annotations

import os
import threading
import time

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class StageClock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}
        self.marks: dict[str, float] = {}  # seconds since start() when something happened (first byte, ...)
        self._t0: float | None = None
        self._cpu0: float | None = None
        self.cpu_s: float | None = None
        self.child_cpu_s: float | None = None
        self.helper_cpu_s = 0.0  # a helper thread's CPU (overlap.py), part of the data path's
        self.path = ""  # which data path ran: "splice", "copy" (read/write through Python) or "tls"

    def start(self) -> None:
        """Called from the pump thread: its CPU from here on is the data path's."""
        self._t0 = time.monotonic()
        self._cpu0 = time.thread_time()

    def stop(self) -> None:
        """Called from the pump thread when it is done."""
        if self._cpu0 is not None and self.cpu_s is None:
            self.cpu_s = time.thread_time() - self._cpu0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def mark(self, name: str) -> None:
        if self._t0 is not None and name not in self.marks:
            self.marks[name] = time.monotonic() - self._t0

    def as_dict(self) -> dict:
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        out.update({f"{k}_at_s": round(v, 3) for k, v in self.marks.items()})
        if self.cpu_s is not None:
            out["cpu_s"] = round(self.cpu_s + self.helper_cpu_s, 3)
        if self.child_cpu_s is not None:
            out["child_cpu_s"] = round(self.child_cpu_s, 3)
        if self.path:
            out["path"] = self.path
        return out


def exited_child_cpu_s(pid: int, timeout_s: float = 0.0) -> float | None:
    """CPU seconds (user + system, its reaped children included) of child `pid` once it has exited,
    read before it is reaped (waitid WNOWAIT leaves the zombie for Popen.wait). None if it is still
    running after `timeout_s`, already reaped, or the system cannot tell."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except (ChildProcessError, OSError, AttributeError):
            return None
        if info is not None:
            break
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / _HZ  # utime stime cutime cstime
    except (OSError, IndexError, ValueError):
        return None
