"""The operator's path without `cluster up` (issue 52): build the artefact (scripts/package), install it
into a fresh prefix (install-host), write /etc-style config files, start agents as the service user on
network-namespace hosts and a router on an "application host" (TLS on every link, as on real hosts),
create tenants, migrate one, then upgrade in place (install-host again) and restart one agent while a
routed client writes.

Asserted: the install holds no test tooling and its Debian packages pull none of the build/bench
tools; the installed units pass `systemd-analyze verify`; 0 failed routed requests and 0 acknowledged
writes lost; no mariadbd, agent or router runs as root. The install's size and the path's time are
printed (run with -s to see them)."""

from __future__ import annotations

import configparser
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pymysql
import pytest

from slacker import local_etcd, netns
from slacker.credentials import derive
from slacker.agent.client import AgentClient
from slacker.errors import AgentUnavailable, Conflict, SlackerError
from slacker.procs import kill_group
from slacker.router.control import fetch_status

from benchkit.migration import processes_mentioning
from .conftest import TEST_PORT_RANGE, netns_available

REPO = Path(__file__).resolve().parents[2]
SERVICE_USER = "slacker-test"  # a user of the tests' own: never collides with a real `slacker`
# What a production host must not get: test, bench and build tooling (gcc-12-base, the runtime
# libraries' copyright package that libc6 pulls in, is no compiler).
FORBIDDEN_PACKAGES = re.compile(r"^(sysbench|golang(-[\w.-]+)?|gcc(-\d+)?|cpp(-\d+)?|g\+\+(-\d+)?|prometheus(-[\w.-]+)?"
                                r"|etcd(-server|-client)?|python3(\.\d+)?-dev|libmariadb-dev|make|pkg-config)$")
HOSTS = ("node-1", "node-2", "node-3")
JOINER = "node-4"  # a database host racked while the fleet runs: it joins by its agent's first start
APP = "app"  # the application host: the router only
OPS = "ops"  # the operator's admin machine: the CLI with the admin credential (no process of its own)
# A service's environment, as systemd gives it: no PATH entries of the build machine (pyenv, .venv).
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

pytestmark = [netns_available,
              pytest.mark.skipif(shutil.which("systemd-analyze") is None or shutil.which("setpriv") is None,
                                 reason="needs systemd-analyze and setpriv")]


def _run(*argv, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert p.returncode == 0, f"{argv[:3]} exit {p.returncode}: {p.stderr[-2000:]}{p.stdout[-1000:]}"
    return p


class Install:
    """The artefact unpacked and installed into a prefix of this test's own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.prefix, self.bindir, self.units = root / "opt", root / "bin", root / "systemd"
        self.confdir, self.statedir = root / "etc", root / "state"
        self.artefact: Path | None = None
        self.unpacked: Path | None = None

    @property
    def slacker(self) -> Path:
        return self.bindir / "slacker"

    def build(self) -> None:
        out = _run(REPO / "scripts" / "package", "--out", self.root / "dist").stdout.strip().splitlines()
        self.artefact = Path(out[-1])
        _run("tar", "-C", self.root, "-xzf", self.artefact)
        self.unpacked = self.root / self.artefact.name.removesuffix(".tar.gz")

    def install(self) -> str:
        """install-host into the prefix (no apt: this machine is the build host); its output."""
        return _run(self.unpacked / "install-host", "--no-apt", "--prefix", self.prefix, "--bindir", self.bindir,
                    "--systemd-dir", self.units, "--config-dir", self.confdir, "--state-dir", self.statedir,
                    "--user", SERVICE_USER).stdout

    def release(self) -> Path:
        return (self.prefix / "current").resolve()


@pytest.fixture(scope="module")
def installed():
    root = Path(tempfile.mkdtemp(prefix="slop-", dir="/tmp"))
    root.chmod(0o755)  # the service user walks through it to its data and the installed programs
    inst = Install(root)
    t0 = time.monotonic()
    inst.build()
    t_build = time.monotonic() - t0
    out = inst.install()
    print(f"\noperator path: package {t_build:.0f} s, install {time.monotonic() - t0 - t_build:.0f} s; {out.strip()}")
    yield inst
    for pid, _ in processes_mentioning(str(root)):
        kill_group(pid)
    shutil.rmtree(root, ignore_errors=True)


def _mb(path: Path) -> float:
    return int(_run("du", "-sb", path).stdout.split()[0]) / 1e6


def _closure_forbidden(packages: list[str]) -> list[str]:
    """The forbidden packages among `packages` and everything they depend on (apt's view, without
    recommends, as install-host installs them)."""
    closure = _run("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                   "--no-breaks", "--no-replaces", "--no-enhances", *packages).stdout
    names = {line.strip().split(":")[-1].strip().strip("<>") for line in closure.splitlines()}
    return sorted(n for n in names if FORBIDDEN_PACKAGES.match(n))


def test_production_install_and_its_units(installed):
    inst = installed
    release = inst.release()
    py = release / "bin" / "python"
    # No test, bench or plotting code in the installed virtualenv (nor pip: pip ran from its wheel).
    for module in ("pytest", "hypothesis", "mariadb", "yaml", "matplotlib", "pip"):
        assert _run(py, "-c", f"import {module}", check=False).returncode != 0, f"{module} is installed"
    assert _run(py, "-c", "import MySQLdb, slacker.cli, cryptography.x509").returncode == 0
    assert _run(inst.slacker, "--version", env=SERVICE_ENV).stdout.startswith("slacker, version")
    assert os.access(release / "bin" / "slacker-router", os.X_OK)
    # Nothing the install put on the host is a compiler, Go, sysbench or promtool.
    for tool in ("sysbench", "go", "gcc", "cc", "promtool", "etcd", "pytest"):
        assert not (inst.bindir / tool).exists() and not (release / "bin" / tool).exists(), tool
    size = _mb(release)
    print(f"operator path: installed release {release.name}: {size:.1f} MB")
    assert size < 80

    # The Debian packages each role installs, and everything they depend on: none of the tooling.
    for role in ("db", "router"):
        pkgs = _run(inst.unpacked / "install-host", "--role", role, "--print-packages").stdout.split()
        assert "python3" in pkgs and ("mariadb-server" in pkgs) == (role == "db")
        bad = _closure_forbidden(pkgs)
        assert not bad, f"role {role} pulls {bad}"
    assert {"golang-go", "sysbench"} <= set(_closure_forbidden(["sysbench", "golang-go"]))  # the check can fail

    # The service user, the directories, and the units as installed (paths and user filled in).
    assert pwd.getpwnam(SERVICE_USER).pw_shell.endswith("nologin")
    for d, owner, mode in ((inst.confdir, "root", 0o750), (inst.statedir, SERVICE_USER, 0o750)):
        st = d.stat()
        assert (pwd.getpwuid(st.st_uid).pw_name, st.st_mode & 0o777) == (owner, mode)
    units = sorted(inst.units.iterdir())
    assert [u.name for u in units] == ["slacker-agent.service", "slacker-rebalance.service",
                                       "slacker-rebalance.timer", "slacker-router.service"]
    agent, rebalance, router = (inst.units / f"slacker-{n}.service" for n in ("agent", "rebalance", "router"))
    for unit in (agent, rebalance, router):
        text = unit.read_text()
        assert f"User={SERVICE_USER}\n" in text and f"ExecStart={inst.bindir}/" in text
    assert "KillMode=process" in agent.read_text()
    settings = [line for line in router.read_text().splitlines() if not line.startswith("#")]
    assert not [line for line in settings if "127.0.0.1" in line]  # the agents must reach its admin address
    assert f"EnvironmentFile={inst.confdir}/router.env" in settings
    verify = _run("systemd-analyze", "verify", *units, check=False)
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify.stderr
    # It can fail: a unit naming a program that is not installed, or a setting systemd does not know.
    broken = inst.root / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "slacker-agent.service").write_text(agent.read_text().replace(f"{inst.bindir}/slacker",
                                                                            f"{inst.bindir}/nothing"))
    (broken / "slacker-router.service").write_text(router.read_text().replace("KillMode=control-group",
                                                                              "KillMode=everything"))
    verify = _run("systemd-analyze", "verify", *sorted(broken.iterdir()), check=False)
    assert "not executable" in verify.stderr and "kill mode" in verify.stderr

    # Clear one-line errors.
    p = _run(inst.unpacked / "install-host", "--role", "web", check=False)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "--role" in p.stderr


# ---- the fleet on namespace hosts ----------------------------------------------------------------

class Fleet:
    """Three database hosts and an application host as network namespaces, an etcd directory on the
    bridge, and per host an /etc/slacker and a /var/lib/slacker of its own."""

    def __init__(self, inst: Install) -> None:
        self.inst = inst
        self.run_dir = inst.root / "net"
        self.run_dir.mkdir(exist_ok=True)
        self.plan: netns.Plan | None = None
        self.agents: dict[str, subprocess.Popen] = {}
        self.router: subprocess.Popen | None = None
        self.uid = pwd.getpwnam(SERVICE_USER).pw_uid
        self.gid = pwd.getpwnam(SERVICE_USER).pw_gid

    def up(self) -> None:
        last = None
        for k in range(20):
            subnet = f"10.{86 + k % 4}.{(os.getpid() + k * 41) % 250}.0/24"
            try:
                self.plan = netns.setup(self.run_dir, [*HOSTS, JOINER, APP], subnet)
                break
            except Conflict as exc:
                last = exc
                netns.teardown(self.run_dir)
        else:
            raise last
        # The cluster CA and a certificate per database host, made on a "secure host" and copied out
        # (docs/deployment.md, section 6): every agent link is TLS, as on real hosts.
        from slacker.tls import ensure_cluster_pki
        self.pki = ensure_cluster_pki(self.inst.root / "pki", {h: [self.address(h), h] for h in (*HOSTS, JOINER, APP)})
        members = local_etcd.plan(list(self.plan.etcd_addresses))
        self.endpoints = local_etcd.start(self.run_dir / "etcd", members)
        # The admin secret for the database hosts and the operator's admin machine; the application host
        # gets the router credential derived from it, and nothing else (docs/deployment.md, section 2).
        self.admin = os.urandom(32).hex()
        for host in (*HOSTS, JOINER, APP, OPS):
            self._write_config(host, derive(self.admin, "router") if host == APP else self.admin)

    def address(self, host: str) -> str:
        return self.plan.node(host).address

    def etc(self, host: str) -> Path:
        return self.inst.root / "hosts" / host / "etc"

    def state(self, host: str) -> Path:
        return self.inst.root / "hosts" / host / "state"

    def _write_config(self, host: str, token: str) -> None:
        """What the operator writes on each host: /etc/slacker root:slacker 0750 with the cluster file
        (0640) and the token (the service user's, 0600); on a database host agent.toml and data_root."""
        etc, state = self.etc(host), self.state(host)
        etc.mkdir(parents=True)
        etc.parent.chmod(0o755)
        os.chown(etc, 0, self.gid)
        etc.chmod(0o750)
        (etc / "token").write_text(token + "\n")
        os.chown(etc / "token", self.uid, self.gid)
        (etc / "token").chmod(0o600)
        tls = etc / "tls"
        tls.mkdir()
        os.chown(tls, 0, self.gid)
        tls.chmod(0o750)
        files = self.pki[host if host != OPS else APP]  # the application host's serves the router's clients
        shutil.copy(files.ca, tls / "ca.crt")
        (tls / "ca.crt").chmod(0o644)
        shutil.copy(files.cert, tls / "node.crt")  # the host's certificate, its key the service user's alone
        (tls / "node.crt").chmod(0o644)
        shutil.copy(files.key, tls / "node.key")
        os.chown(tls / "node.key", self.uid, self.gid)
        (tls / "node.key").chmod(0o600)
        # The cluster file names no node: how to reach the directory, the credential, the CA. Members are
        # what the directory holds; each agent registers itself when it starts.
        endpoints = ", ".join(f'"{e}"' for e in self.endpoints)
        self._private_file(etc / "cluster.toml", f'token_file = "{etc}/token"\n'
                           f'directory_backend = "etcd"\netcd_endpoints = [{endpoints}]\n'
                           f'local_subnet = "{self.plan.subnet}"\ntls_ca = "{tls}/ca.crt"\n')
        if host in (APP, OPS):
            return
        state.mkdir(parents=True)
        os.chown(state, self.uid, self.gid)
        state.chmod(0o750)
        self._private_file(etc / "agent.toml", f'node = "{host}"\ncluster = "{etc}/cluster.toml"\n'
                           f'data_root = "{state}"\nlisten = "{self.address(host)}:7701"\n'
                           f'tenant_host = "{self.address(host)}"\n'
                           f'port_range = "{TEST_PORT_RANGE[0]}-{TEST_PORT_RANGE[1]}"\nfault_injection = false\n'
                           f'tls_ca = "{tls}/ca.crt"\ntls_cert = "{tls}/node.crt"\ntls_key = "{tls}/node.key"\n')

    def _private_file(self, path: Path, text: str) -> None:
        path.write_text(text)
        os.chown(path, 0, self.gid)
        path.chmod(0o640)

    def as_service(self, host: str, *argv, log: Path) -> subprocess.Popen:
        """A process on `host` as the service user, as its unit would start it (exec, no fork: the
        Popen's pid is the program's)."""
        ns = self.plan.node(host).namespace
        with open(log, "ab") as out:
            return subprocess.Popen(["ip", "netns", "exec", ns, "setpriv", "--reuid", SERVICE_USER, "--regid",
                                     SERVICE_USER, "--init-groups", "--", *map(str, argv)], env=SERVICE_ENV,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def start_agent(self, host: str) -> None:
        etc = self.etc(host)
        self.agents[host] = self.as_service(host, self.inst.slacker, "agent", "--config", etc / "agent.toml",
                                            log=self.inst.root / f"agent-{host}.log")
        client = AgentClient(f"https://{self.address(host)}:7701", (etc / "token").read_text().strip(), host,
                             timeout_s=5, ca_file=etc / "tls" / "ca.crt")
        deadline = time.monotonic() + 90
        while True:
            try:
                client.request("GET", "/v1/status")
                return
            except AgentUnavailable:
                log = (self.inst.root / f"agent-{host}.log").read_text(errors="replace")[-1500:]
                assert self.agents[host].poll() is None and time.monotonic() < deadline, f"agent {host}: {log}"
                time.sleep(0.3)

    def stop_agent(self, host: str) -> None:
        """What `systemctl restart` does first with KillMode=process: SIGTERM to the agent alone."""
        proc = self.agents.pop(host)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    def start_router(self) -> str:
        listen, admin = f"{self.address(APP)}:6033", f"{self.address(APP)}:6034"
        self.router = self.as_service(APP, self.inst.slacker, "--cluster", self.etc(APP) / "cluster.toml",
                                      "router", "--listen", listen, "--admin", admin, "--tls-cert",
                                      self.etc(APP) / "tls" / "node.crt", "--tls-key", self.etc(APP) / "tls" / "node.key",
                                      log=self.inst.root / "router.log")
        deadline = time.monotonic() + 60
        while True:
            try:
                fetch_status(admin, timeout_s=2)
                return listen
            except SlackerError:
                assert self.router.poll() is None and time.monotonic() < deadline, \
                    (self.inst.root / "router.log").read_text(errors="replace")[-1500:]
                time.sleep(0.3)

    def cli(self, *argv, check: bool = True, host: str = OPS) -> subprocess.CompletedProcess:
        """The operator's CLI (the installed one) on the admin machine, outside the database hosts; with
        host=APP, what the application host's router credential can do."""
        return _run(self.inst.slacker, "--cluster", self.etc(host) / "cluster.toml", *argv, check=check,
                    env=SERVICE_ENV)

    def down(self) -> None:
        try:
            netns.teardown(self.run_dir)  # kills what runs in the namespaces: agents, tenants, the router
        finally:
            local_etcd.stop(self.run_dir / "etcd")


class RoutedWriter:
    """One client on the router's address writing numbered rows (autocommit); every acknowledged id is
    kept, every failed request counted (and the connection made again)."""

    def __init__(self, listen: str, user: str, password: str, ca: Path, rate_per_s: float = 40.0) -> None:
        self.ca = ca
        self.host, port = listen.rsplit(":", 1)
        self.port, self.user, self.password = int(port), user, password
        self.interval = 1.0 / rate_per_s
        self.acked: list[int] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def connect(self):
        return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               ssl={"ca": str(self.ca)}, autocommit=True, connect_timeout=10, read_timeout=60)

    def start(self) -> "RoutedWriter":
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS w")
            cur.execute("CREATE TABLE IF NOT EXISTS w.log (id BIGINT PRIMARY KEY, at DOUBLE)")
        conn.close()
        self._thread.start()
        return self

    def _run(self) -> None:
        conn, i = None, 0
        while not self._stop.is_set():
            i += 1
            try:
                conn = conn or self.connect()
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO w.log VALUES (%s, %s)", (i, time.time()))
                self.acked.append(i)
            except Exception as exc:  # noqa: BLE001 - every failure is a failed request, asserted
                self.failures.append(f"{type(exc).__name__}: {exc}")
                conn = None
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def stored(self) -> set[int]:
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM w.log")
            ids = {r[0] for r in cur.fetchall()}
        conn.close()
        return ids


def _processes(root: Path) -> list[tuple[str, str]]:
    """(user, command line) of every process whose command line mentions the test's directory."""
    out = _run("ps", "-ww", "-eo", "user:32=,args=").stdout  # -ww: whole command lines, not 80 columns
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in out.splitlines()
            if str(root) in line and len(line.split(None, 1)) == 2]


def test_operator_path(installed):
    inst = installed
    t0 = time.monotonic()
    fleet = Fleet(inst)
    writer = None
    try:
        fleet.up()
        # `slacker config check` as the service user, on every database host, before the first start.
        for host in HOSTS:
            p = _run("setpriv", "--reuid", SERVICE_USER, "--regid", SERVICE_USER, "--init-groups", "--",
                     inst.slacker, "config", "check", "--agent", fleet.etc(host) / "agent.toml", env=SERVICE_ENV,
                     check=False)
            assert p.returncode == 0 and "FAIL" not in p.stdout, p.stdout + p.stderr
        for host in HOSTS:
            fleet.start_agent(host)
        listen = fleet.start_router()

        assert fleet.cli("tenant", "create", "t1", "--on", "node-1").returncode == 0
        assert fleet.cli("tenant", "create", "t2", "--on", "node-3").returncode == 0
        # The application host's router credential can route, not administer: each refusal is one line,
        # exit 7, and changes nothing.
        for argv, needle in ((["tenant", "delete", "t2", "--yes"], "may not delete"),
                             (["migrate", "t2", "--to", "node-1"], "may not"),
                             (["locate", "t2", "--defaults-file", str(inst.root / "stolen.cnf")], "may not"),
                             (["node", "drain", "node-3"], "may not")):
            p = fleet.cli(*argv, check=False, host=APP)
            assert p.returncode == 7 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
                (argv, p.returncode, p.stderr)
        assert not (inst.root / "stolen.cnf").exists()
        creds = inst.root / "t1.cnf"
        fleet.cli("locate", "t1", "--defaults-file", creds)
        client = configparser.ConfigParser(allow_no_value=True)  # ssl-verify-server-cert has no value
        client.read(creds)
        c = client["client"]
        assert f"{c['host']}:{c['port']}" == listen  # locate names the router first
        writer = RoutedWriter(listen, c["user"], c["password"].strip('"'), fleet.etc(APP) / "tls" / "ca.crt").start()

        # A live migration under the routed writes, run by an agent that is not root.
        p = fleet.cli("migrate", "t1", "--to", "node-2", check=False)
        assert p.returncode == 0, p.stderr[-2000:]
        # A fourth host joins the running fleet by its agent's first start, and node-3 is drained onto it,
        # restarting no other process and editing no file on another host.
        pids = {h: p.pid for h, p in fleet.agents.items()} | {"router": fleet.router.pid}
        p = _run("setpriv", "--reuid", SERVICE_USER, "--regid", SERVICE_USER, "--init-groups", "--",
                 inst.slacker, "config", "check", "--agent", fleet.etc(JOINER) / "agent.toml", env=SERVICE_ENV,
                 check=False)
        assert p.returncode == 0 and "FAIL" not in p.stdout, p.stdout + p.stderr
        fleet.start_agent(JOINER)
        members = {n["node"]: n for n in json.loads(fleet.cli("node", "list", "--json").stdout)["nodes"]}
        assert set(members) == {*HOSTS, JOINER}, members
        # Only node-4 may receive: the operator cordons the others for the drain, and uncordons them after.
        for h in ("node-1", "node-2"):
            fleet.cli("node", "cordon", h)
        p = fleet.cli("node", "drain", "node-3", "--sla", "2s", check=False)
        assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
        for h in ("node-1", "node-2"):
            fleet.cli("node", "uncordon", h)
        assert json.loads(fleet.cli("locate", "t2", "--json").stdout)["node"] == JOINER
        deadline = time.monotonic() + 10
        admin = f"{fleet.address(APP)}:6034"
        while next(t for t in fetch_status(admin)["tenants"] if t["tenant"] == "t2")["node"] != JOINER:
            assert time.monotonic() < deadline, "the router did not follow t2 to node-4"
            time.sleep(0.1)
        assert {h: p.pid for h, p in fleet.agents.items() if h != JOINER} | {"router": fleet.router.pid} == pids
        assert all(p.poll() is None for p in fleet.agents.values()) and fleet.router.poll() is None
        # node-3, empty now, leaves the fleet: its agent is stopped (the unit disabled) and it is removed.
        fleet.stop_agent("node-3")
        p = fleet.cli("node", "remove", "node-3")
        assert "removed" in p.stdout
        assert "node-3" not in {n["node"] for n in json.loads(fleet.cli("node", "list", "--json").stdout)["nodes"]}

        # The upgrade step: install the artefact again (a new release, swapped in), then restart
        # node-2's agent, t1's owner, while the client writes. Its tenants keep serving.
        before = inst.release()
        inst.install()
        after = inst.release()
        assert after != before and before.exists()  # the running agents' release stays until the next one
        tenants_before = {cmd for user, cmd in _processes(fleet.state("node-2")) if "mariadbd" in cmd}
        assert tenants_before
        fleet.stop_agent("node-2")
        assert {cmd for user, cmd in _processes(fleet.state("node-2")) if "mariadbd" in cmd} == tenants_before
        fleet.start_agent("node-2")
        cmdline = Path(f"/proc/{fleet.agents['node-2'].pid}/cmdline").read_bytes().decode()
        assert str(after) in cmdline  # the restarted agent runs the new release
        time.sleep(2)  # the client writes on against the restarted agent's tenant
        writer.stop()

        assert writer.failures == [], writer.failures[:5]
        assert len(writer.acked) > 100
        lost = set(writer.acked) - writer.stored()
        assert not lost, f"{len(lost)} acknowledged writes lost"
        status = fleet.cli("status").stdout
        assert "t1" in status and "node-2" in status

        # Deleting a tenant needs no root either.
        assert fleet.cli("tenant", "delete", "t2", "--yes").returncode == 0
        assert not (fleet.state(JOINER) / "tenants" / "t2").exists()

        # Nothing of Slacker runs as root: agents, every tenant's mariadbd, the router.
        procs = _processes(inst.root)
        mine = [(u, cmd) for u, cmd in procs if "mariadbd" in cmd or " agent --config" in cmd or " router " in cmd]
        assert sum("mariadbd" in cmd for _, cmd in mine) >= 1
        assert sum(" agent --config" in cmd for _, cmd in mine) == 3
        assert {u for u, _ in mine} == {SERVICE_USER}, [m for m in mine if m[0] != SERVICE_USER]
        for d in ("tenants", "sock"):
            st = (fleet.state("node-2") / d).stat()
            assert (st.st_uid, st.st_mode & 0o777) == (fleet.uid, 0o700), d
        secrets_dir = next((fleet.state("node-2") / "tenants").glob("t1*/secrets"))
        for f in secrets_dir.iterdir():
            st = f.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (fleet.uid, 0o600), f
        print(f"operator path: {len(writer.acked)} acknowledged writes, 0 lost, 0 failed; "
              f"{time.monotonic() - t0:.0f} s for the fleet")
    finally:
        if writer is not None:
            writer.stop()
        fleet.down()
