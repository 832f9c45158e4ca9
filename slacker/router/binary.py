"""Where the compiled data path lives, and building it from router/ when it is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import SlackerError

BINARY = "slacker-router"
SOURCE = Path(__file__).resolve().parent.parent.parent / "router"


class RouterUnavailable(SlackerError):
    pass


def router_binary() -> str:
    """The data path's executable: $SLACKER_ROUTER_BIN, else beside this Python (the virtualenv's bin,
    where scripts/install builds it), else on PATH."""
    env = os.environ.get("SLACKER_ROUTER_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise RouterUnavailable(f"SLACKER_ROUTER_BIN={env} is not an executable", "", "unset it or fix the path")
        return env
    beside = Path(sys.prefix) / "bin" / BINARY
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(BINARY)
    if found:
        return found
    raise RouterUnavailable("the router's data path is not built", f"no {BINARY} in {beside.parent} or on PATH",
                            "run scripts/install (needs golang-go), or: "
                            f"cd router && go build -o {beside} .")


def build(out: Path | None = None, timeout_s: float = 300.0) -> Path:
    """`go build` the data path (standard library only: no module download)."""
    out = out or Path(sys.prefix) / "bin" / BINARY
    go = shutil.which("go")
    if go is None:
        raise RouterUnavailable("cannot build the router", "no `go` on PATH", "apt-get install golang-go")
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    r = subprocess.run([go, "build", "-trimpath", "-o", str(out), "."], cwd=SOURCE, env=env, capture_output=True,
                       text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise RouterUnavailable("cannot build the router", r.stderr.strip().splitlines()[-1] if r.stderr else "",
                                f"see `cd {SOURCE} && go build .`")
    return out
