"""Run the harness as a separate process (`slacker ycsb run ... --json`) and read its RunResult back.

A benchmark in its own process keeps its threads and GIL away from the code
that observes it (a migration, a test), and can be stopped with SIGINT, after
which it still prints the result of the part that ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from ..errors import SlackerError
from .results import RunResult


class BenchmarkProcess:
    """`slacker ycsb run ARGS --json` in a child process.

    `args` are the run command's arguments, e.g. ["t1", "-P", "workloads/slacker",
    "--rate", "100", "--duration", "60s", "--metrics-port", "9464"]. Give a
    password only through --password-file.
    """

    def __init__(self, proc: subprocess.Popen, stderr_path: Path, argv: list[str]) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self.argv = argv
        self._result: RunResult | None = None

    @classmethod
    def start(cls, args: Sequence[str], cluster: str | None = None, env: dict[str, str] | None = None,
              python: str = sys.executable, cwd: str | None = None) -> "BenchmarkProcess":
        argv = [python, "-m", "slacker"]
        if cluster:
            argv += ["--cluster", str(cluster)]
        argv += ["ycsb", "run", *[str(a) for a in args]]
        if "--json" not in args:
            argv.append("--json")
        fd, name = tempfile.mkstemp(prefix="slacker-ycsb-", suffix=".stderr")
        os.close(fd)
        stderr_path = Path(name)
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                    cwd=cwd, env={**os.environ, **(env or {})}, start_new_session=True)
        return cls(proc, stderr_path, argv)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout_s: float) -> RunResult:
        """The result once the process ends; raises SlackerError with its stderr if it failed."""
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise SlackerError("benchmark process did not finish in time", f"{timeout_s:.0f}s passed",
                               "raise the timeout or shorten --duration") from None
        return self._parse(out)

    def stop(self, timeout_s: float = 60.0) -> RunResult:
        """SIGINT (the run stops and reports what it did), then wait for the result."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
        return self.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def _parse(self, out: bytes) -> RunResult:
        text = out.decode("utf-8", errors="replace").strip()
        err = self.stderr_text()
        self.stderr_path.unlink(missing_ok=True)
        if text:
            try:
                self._result = RunResult.from_dict(json.loads(text))
                return self._result
            except (ValueError, TypeError, KeyError):
                pass
        last = err.strip().splitlines()[-1] if err.strip() else f"exit code {self.proc.returncode}"
        raise SlackerError("benchmark process failed", last.removeprefix("slacker: error: "), "")


def run_benchmark_subprocess(args: Sequence[str], timeout_s: float, cluster: str | None = None,
                             env: dict[str, str] | None = None, cwd: str | None = None) -> RunResult:
    """Run `slacker ycsb run ARGS` to completion in a child process and return its RunResult."""
    return BenchmarkProcess.start(args, cluster=cluster, env=env, cwd=cwd).wait(timeout_s)
