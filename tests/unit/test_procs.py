"""procs.alive on a real child: a child that exits between the reap and the /proc read is reaped, not
left a zombie until some later spawn (the retired server of every move lingered so)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from slacker import procs


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return None


def test_a_child_that_became_a_zombie_after_the_first_reap_is_reaped(monkeypatch):
    child = subprocess.Popen(["sh", "-c", "exit 0"])
    deadline = time.monotonic() + 5
    while _state(child.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(child.pid) == "Z"
    real, calls = os.waitpid, []

    def waitpid(pid, options):  # the first look comes before the exit: nothing to reap yet
        calls.append(pid)
        return (0, 0) if len(calls) == 1 else real(pid, options)
    monkeypatch.setattr(procs.os, "waitpid", waitpid)
    assert procs.alive(child.pid) is False
    assert _state(child.pid) is None  # reaped, not a zombie
    child.returncode = 0  # already reaped: Popen must not wait for it again
