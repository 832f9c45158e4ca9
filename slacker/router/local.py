"""The router of a local cluster: `cluster up` starts it as a daemon, `cluster down` stops it.

It runs `slacker router` in a session of its own, with its log and pid file under
RUN_DIR/router/, presenting the router credential (RUN_DIR/credentials/router) and no other,
and is ready when its admin endpoint answers.
"""

from __future__ import annotations

import http.client
import ipaddress
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import netns
from ..errors import SlackerError
from ..procs import alive, kill_group, read_pid, wait_gone
from .binary import RouterUnavailable, router_binary
from .control import fetch_status, parse_address

START_TIMEOUT_S = 30.0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name
        return host == "localhost"


def admin_for(listen: str, run_dir: Path | None = None) -> str:
    """The admin address beside a listen address: the next port (any free port for port 0). On a
    cluster of network namespaces (RUN_DIR/netns.json) a loopback host is replaced by the root
    namespace's address on the bridge: the agents, each in its own namespace, must reach the admin
    address to hold the router in a handover, and this machine's loopback is not theirs."""
    host, port = parse_address(listen)
    plan = netns.load(run_dir) if run_dir is not None else None
    if plan is not None and _loopback(host):
        host = plan.root_address
    return f"{host}:{port + 1 if port else 0}"


def _free(address: str) -> str:
    """HOST:0 made concrete now (the router announces what it binds; the local start must know it)."""
    import socket

    host, port = parse_address(address)
    if port:
        return address
    with socket.socket() as s:
        s.bind((host, 0))
        return f"{host}:{s.getsockname()[1]}"


def start(run_dir: Path, cluster_file: Path, listen: str, admin: str | None = None) -> str:
    """Start the router if it is not running; returns its admin address (`admin`: default the
    listen port + 1, any free port when listening on port 0)."""
    router_binary()  # fail here, with the hint, if the data path is not built
    rdir = run_dir / "router"
    rdir.mkdir(exist_ok=True)
    pid = read_pid(rdir / "router.pid")
    if pid is not None and alive(pid) and (rdir / "admin").exists():
        return (rdir / "admin").read_text().strip()
    wanted_admin, wanted_listen = admin or admin_for(listen, run_dir), listen
    # A free port is probed, then bound by the router a moment later: another process on this host may take
    # it in between (seen between test workers: the admin probe met another router's MySQL greeting). The
    # router then cannot bind and exits; it is started again on newly probed ports.
    for _attempt in range(3):
        admin = _free(wanted_admin)
        listen = _free(wanted_listen)
        tls = []
        if (run_dir / "tls").is_dir():  # a TLS cluster: the router gets a certificate from the cluster CA too
            from ..tls import ensure_cluster_pki
            host = parse_address(listen)[0]
            files = ensure_cluster_pki(run_dir / "tls", {"router": [host, "localhost"]})["router"]
            tls = ["--tls-cert", str(files.cert), "--tls-key", str(files.key)]
        # As on an application host: the router credential only (a cluster made before scoped
        # credentials has none, and its router keeps the cluster file's).
        cred = run_dir / "credentials" / "router"
        credential = ["--credential", str(cred)] if cred.exists() else []
        with open(rdir / "router.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "slacker", "--cluster", str(cluster_file), *credential,
                                     "router", "--listen", listen, "--admin", admin, *tls],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        (rdir / "router.pid").write_text(f"{proc.pid}\n")
        (rdir / "admin").write_text(f"{admin}\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                fetch_status(admin, timeout_s=1)
                return admin
            except (SlackerError, http.client.HTTPException):  # not up yet, or another process's port
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
        if proc.poll() is None:
            break
    tail = " | ".join((rdir / "router.log").read_text(errors="replace").strip().splitlines()[-4:])
    raise RouterUnavailable(f"the router on {listen} did not come up", tail, f"see {rdir / 'router.log'}")


def listening(run_dir: Path) -> str | None:
    """The address the local router serves clients on (None if it does not answer)."""
    try:
        return fetch_status((run_dir / "router" / "admin").read_text().strip(), timeout_s=2)["listen"]
    except (OSError, SlackerError):
        return None


def stop(run_dir: Path, timeout_s: float = 10.0) -> bool:
    """Stop the local router (its whole process group); False if none was running."""
    pid_file = run_dir / "router" / "router.pid"
    pid = read_pid(pid_file)
    pid_file.unlink(missing_ok=True)
    (run_dir / "router" / "admin").unlink(missing_ok=True)
    if pid is None or not alive(pid):
        return False
    kill_group(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout_s):
        kill_group(pid)
    return True
