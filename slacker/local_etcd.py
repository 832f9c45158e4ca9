"""A local three-member etcd cluster on loopback, beside a local Slacker cluster.

`slacker cluster up --directory etcd` and the tests start it: each member on
its own 127.0.0.x address with its own data directory, log and pid file under
RUN_DIR/etcd/. Timeouts are set for a loaded 2-core machine (see
HEARTBEAT_MS), so elections do not flap when tenants and benchmarks compete
for the CPU.

With a TLS cluster (`cluster up --tls`, implied by `--netns`) each member gets
a certificate from the cluster CA (RUN_DIR/tls/etcd-K.crt) and serves clients
and peers over TLS only (https:// URLs); clients verify it against the cluster
CA (`tls_ca` in the cluster file).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import DirectoryUnavailable, MissingDependency
from .procs import alive as _alive, read_pid as _read_pid

# etcd's defaults (100 ms / 1 s) assume an idle machine; on 2 busy cores a member that
# misses ~10 heartbeats starts an election. 250 ms / 2.5 s keep leadership stable
# while a kill still fails over within a few seconds.
HEARTBEAT_MS = 250
ELECTION_MS = 2500
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Member:
    name: str
    host: str
    client_port: int
    peer_port: int
    tls_dir: str | None = None  # holds ca.crt and NAME.crt/.key: TLS for clients and peers

    @property
    def scheme(self) -> str:
        return "https" if self.tls_dir else "http"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.peer_port}"


def plan(hosts: list[str], client_port: int = 2379, peer_port: int = 2380,
         tls_dir: Path | None = None, source_addresses: tuple[str, ...] = ("127.0.0.1",)) -> list[Member]:
    """Members etcd-1..etcd-K, one per host address, all on the same two ports. With `tls_dir` (the
    cluster's PKI directory) each member gets a certificate for its address there, also naming the
    other members' addresses and `source_addresses`: the addresses this machine may connect from
    (127.0.0.1 on loopback, the bridge's first address with --netns)."""
    members = [Member(f"etcd-{i + 1}", h, client_port, peer_port, str(tls_dir) if tls_dir else None)
               for i, h in enumerate(hosts)]
    if tls_dir is not None:
        from .tls import ensure_cluster_pki
        # etcd checks a peer's client certificate against the connection's source address; on one
        # machine that is 127.0.0.1 or another member's address, so each local member's certificate
        # names them all (they are one host). On real hosts each certificate names its own host.
        ensure_cluster_pki(Path(tls_dir), {m.name: [m.host, *(h for h in hosts if h != m.host), *source_addresses]
                                           for m in members})
    return members


def _tls_args(m: Member) -> list[str]:
    if not m.tls_dir:
        return []
    from .tls import CA_CERT
    d = Path(m.tls_dir)
    cert, key, ca = str(d / f"{m.name}.crt"), str(d / f"{m.name}.key"), str(d / CA_CERT)
    # Clients: TLS, no client certificates (etcd 3.4 demands them once --trusted-ca-file is given,
    # and the CLI holds only the CA); peers: TLS both ways with the cluster CA.
    return ["--cert-file", cert, "--key-file", key,
            "--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca,
            "--peer-client-cert-auth"]


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise MissingDependency("etcd is not installed", "the etcd directory runs a local etcd cluster",
                                "run scripts/install (it installs Debian's etcd-server)")
    return path


def _args(m: Member, members: list[Member], data_dir: Path, token: str) -> list[str]:
    return [etcd_binary(), "--name", m.name, "--data-dir", str(data_dir),
            "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", ",".join(f"{x.name}={x.peer_url}" for x in members),
            "--initial-cluster-state", "new", "--initial-cluster-token", token,
            "--heartbeat-interval", str(HEARTBEAT_MS), "--election-timeout", str(ELECTION_MS),
            # Tenants change owners rarely; keep a bounded history so the database stays small.
            "--auto-compaction-mode", "revision", "--auto-compaction-retention", "10000",
            "--snapshot-count", "10000", "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
            *_tls_args(m)]


def start(etcd_dir: Path, members: list[Member], timeout_s: float = START_TIMEOUT_S) -> list[str]:
    """Start the members that are not running (idempotent) and wait for a healthy cluster.
    Returns the client URLs. A member with a data directory rejoins with what it has."""
    etcd_dir.mkdir(parents=True, exist_ok=True)
    spec = etcd_dir / "members.json"
    if spec.exists():
        saved = json.loads(spec.read_text())
        token = saved["token"]
        members = [Member(**m) for m in saved["members"]]
    else:
        token = "slacker-" + secrets.token_hex(6)
        spec.write_text(json.dumps({"token": token, "members": [asdict(m) for m in members]}, indent=1))
    for m in members:
        mdir = etcd_dir / m.name
        mdir.mkdir(exist_ok=True)
        if member_pid(etcd_dir, m.name) is not None:
            continue
        log = open(mdir / "etcd.log", "ab")
        proc = subprocess.Popen(_args(m, members, mdir / "data", token), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        log.close()
        (mdir / "etcd.pid").write_text(f"{proc.pid}\n")
    endpoints = [m.client_url for m in members]
    wait_healthy(etcd_dir, endpoints, timeout_s, ca_file=ca_file_of(members))
    return endpoints


def ca_file_of(members: list[Member]) -> str | None:
    from .tls import CA_CERT
    return str(Path(members[0].tls_dir) / CA_CERT) if members and members[0].tls_dir else None


def members_of(etcd_dir: Path) -> list[Member]:
    spec = etcd_dir / "members.json"
    if not spec.exists():
        return []
    return [Member(**m) for m in json.loads(spec.read_text())["members"]]


def wait_healthy(etcd_dir: Path, endpoints: list[str], timeout_s: float, ca_file: str | None = None) -> dict:
    from .directory.etcd import EtcdStore

    store = EtcdStore(endpoints, timeout_s=2.0, ca_file=ca_file)
    deadline = time.monotonic() + timeout_s
    health: dict = {}
    while time.monotonic() < deadline:
        health = store.health()
        if health.get("healthy") and health.get("members_up") == len(endpoints):
            return health
        time.sleep(0.3)
    tails = []
    for m in members_of(etcd_dir):
        log = etcd_dir / m.name / "etcd.log"
        if log.exists():
            lines = log.read_text(errors="replace").strip().splitlines()
            tails.append(f"{m.name}: {lines[-1][:300] if lines else 'empty log'}")
    raise DirectoryUnavailable("the local etcd cluster did not become healthy",
                               health.get("error") or " | ".join(tails) or "no answer",
                               f"see the logs under {etcd_dir}")


def member_pid(etcd_dir: Path, name: str) -> int | None:
    """The member's pid, if that process is alive and really our etcd (pid files can outlive a reboot)."""
    pid = _read_pid(etcd_dir / name / "etcd.pid")
    if pid is None or not _alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if str(etcd_dir / name / "data").encode() in cmdline else None


def stop(etcd_dir: Path, timeout_s: float = 20.0) -> list[str]:
    """Stop every member (SIGTERM, then SIGKILL); data is kept."""
    stopped = []
    for m in members_of(etcd_dir):
        pidfile = etcd_dir / m.name / "etcd.pid"
        pid = member_pid(etcd_dir, m.name)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            stopped.append(m.name)
        pidfile.unlink(missing_ok=True)
    return stopped
