"""The operator's path without `cluster up`, as docs/deployment.md tells it: the page's shell blocks marked
`<!-- operator-path: NAME -->` are run here, in order, on network-namespace hosts (db-a..db-d, app1): build
the artefact, install a database host and a router host, write /etc/slacker's files and credentials (the
router credential only on the application host), start agents and the router from the units' ExecStart,
create a tenant, add db-d to the running fleet and drain db-c onto it, remove db-c, then upgrade db-b in
place (install-host again, agent restart) while a routed client writes.

What the test changes in a command is only what makes it run here (tests/operator_doc.py lists the rest):
each host's /etc/slacker, /var/lib/slacker, /opt/slacker, /usr/local/bin and /tmp are directories of the
test's own (the hosts share this machine's filesystem; the database hosts share one install), the doc's
addresses are the namespaces', the service user is `slacker-test`, install-host gets --no-apt and those
directories, and `systemctl` lines start or stop the ExecStart of the unit in deploy/systemd as its
User/Group with its UMask, LimitNOFILE and EnvironmentFile (systemd is not PID 1 here).

Asserted besides: the install holds no test tooling and its Debian packages pull none of the build/bench
tools; the installed units pass `systemd-analyze verify`; 0 failed routed requests and 0 acknowledged
writes lost; no mariadbd, agent or router runs as root. The install's size and the path's time are
printed (run with -s to see them)."""

from __future__ import annotations

import configparser
import json
import os
import pwd
import re
import resource
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymysql
import pytest

from slacker import local_etcd, netns
from slacker.agent.client import AgentClient
from slacker.errors import AgentUnavailable, Conflict, SlackerError
from slacker.procs import kill_group
from slacker.router.control import fetch_status

from benchkit.migration import processes_mentioning
from tests import operator_doc as od
from .conftest import netns_available

REPO = Path(__file__).resolve().parents[2]
SERVICE_USER = "slacker-test"  # a user of the tests' own: never collides with a real `slacker`
# What a production host must not get: test, bench and build tooling (gcc-12-base, the runtime
# libraries' copyright package that libc6 pulls in, is no compiler).
FORBIDDEN_PACKAGES = re.compile(r"^(sysbench|golang(-[\w.-]+)?|gcc(-\d+)?|cpp(-\d+)?|g\+\+(-\d+)?|prometheus(-[\w.-]+)?"
                                r"|etcd(-server|-client)?|python3(\.\d+)?-dev|libmariadb-dev|make|pkg-config)$")
# The page's hosts and their addresses; each becomes a namespace with an address of its own.
DOC_ADDRESSES = {"db-a": "10.0.0.11", "db-b": "10.0.0.12", "db-c": "10.0.0.13", "db-d": "10.0.0.14",
                 "app1": "10.0.1.21"}
DB = ("db-a", "db-b", "db-c")
JOINER = "db-d"  # a database host racked while the fleet runs: it joins by `node add` and its agent's first start
APP = "app1"  # the application host: the router only, with the router credential
DOC_ARTEFACT = "slacker-0.1.0-py3.11-x86_64"  # the artefact's name as the page shows it
PER_HOST_BLOCKS = {"agent-file", "config-check", "certs"}  # written for db-a: on db-X, db-a's values are db-X's

pytestmark = [netns_available, pytest.mark.xdist_group("operator_path"),  # one worker sets up `path`
              pytest.mark.slow,  # building and installing the artefact: started first
              pytest.mark.skipif(shutil.which("systemd-analyze") is None or shutil.which("setpriv") is None
                                 or shutil.which("runuser") is None, reason="needs systemd-analyze, setpriv, runuser")]


def _run(*argv, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert p.returncode == 0, f"{argv[:3]} exit {p.returncode}: {p.stderr[-2000:]}{p.stdout[-1000:]}"
    return p


def _env_file(path: Path) -> dict[str, str]:
    """KEY=value lines as systemd's EnvironmentFile= reads them: a comment is a line of its own (a `#`
    after a value is part of the value), surrounding quotes are removed."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def _unit(path: Path) -> dict[str, list[str]]:
    """A unit file's [Service] settings (a setting given twice keeps both values)."""
    settings: dict[str, list[str]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def _exec_argv(exec_start: str, env: dict[str, str]) -> list[str]:
    """ExecStart's words with systemd's expansion: `$VAR` alone is split on whitespace, `${VAR}` is one word."""
    argv = []
    for word in shlex.split(exec_start):
        whole = re.fullmatch(r"\$(\w+)", word)
        if whole:
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv


class Host:
    """One host of the page: a namespace, and the directories that stand for its system paths."""

    def __init__(self, root: Path, name: str, install: str) -> None:
        self.name = name
        self.etc = root / "hosts" / name / "etc"        # /etc/slacker
        self.state = root / "hosts" / name / "state"    # /var/lib/slacker
        self.prefix = root / install / "opt"            # /opt/slacker (the database hosts share one install)
        self.bindir = root / install / "bin"            # /usr/local/bin
        self.units = root / install / "systemd"         # /etc/systemd/system
        self.namespace = ""
        self.address = ""

    @property
    def is_db(self) -> bool:
        return self.name != APP

    def release(self) -> Path:
        return (self.prefix / "current").resolve()


class OperatorPath:
    """Runs deployment.md's marked blocks on the hosts, and what a `systemctl` line stands for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.xfer = root / "xfer"  # /tmp, and where a file copied between hosts lands
        self.xfer.mkdir()
        self.dist = root / "dist"
        self.hosts = {h: Host(root, h, "db" if h != APP else APP) for h in DOC_ADDRESSES}
        self.doc = od.marked()
        self.ran: list[str] = []
        self.skipped: list[str] = []
        self.times: list[tuple[str, str, float]] = []  # (mark, host, seconds): where the path's time goes
        self.services: dict[tuple[str, str], subprocess.Popen] = {}
        self.run_dir = root / "net"
        self.run_dir.mkdir()
        self.plan: netns.Plan | None = None
        self.endpoints: list[str] = []
        self.artefact_name = DOC_ARTEFACT
        self.uid = self.gid = -1

    # -- the hosts' network -------------------------------------------------------------------
    def network(self) -> None:
        last = None
        for k in range(20):
            subnet = f"10.{86 + k % 4}.{(os.getpid() + k * 41) % 250}.0/24"
            try:
                self.plan = netns.setup(self.run_dir, list(DOC_ADDRESSES), subnet)
                break
            except Conflict as exc:
                last = exc
                netns.teardown(self.run_dir)
        else:
            raise last
        for h in self.hosts.values():
            h.namespace, h.address = self.plan.node(h.name).namespace, self.plan.node(h.name).address

    def down(self) -> None:
        try:
            netns.teardown(self.run_dir)  # kills what runs in the namespaces: agents, tenants, the router
        finally:
            # Its data goes with the test: no clean shutdown to wait for (a member that lost its quorum
            # took 20 s to stop on SIGTERM).
            local_etcd.stop(self.run_dir / "etcd", timeout_s=0.2)
            for pid, _ in processes_mentioning(str(self.root)):
                kill_group(pid)

    # -- the page's text, made to run here ----------------------------------------------------
    def substitute(self, mark: str, host: Host | None, text: str) -> str:
        U = SERVICE_USER
        text = re.sub(r"(?<=runuser -u )slacker\b", U, text)
        text = re.sub(r"\bslacker:slacker\b", f"{U}:{U}", text)
        text = re.sub(r"\broot:slacker\b", f"root:{U}", text)
        text = re.sub(r"(?<=-o )slacker\b(?=\s)", U, text)
        text = re.sub(r"(?<=-g )slacker\b(?=\s)", U, text)
        text = text.replace(DOC_ARTEFACT, self.artefact_name)
        text = re.sub(r"(?m)^scripts/package\b", f"scripts/package --out {self.dist}", text)
        if host is None:
            return text
        if mark in PER_HOST_BLOCKS and host.name != "db-a":
            text = re.sub(r"\bdb-a\b", host.name, text)
            text = re.sub(r"(?<![\d.])10\.0\.0\.11(?!\d)", host.address, text)
        for name, doc_address in DOC_ADDRESSES.items():
            text = re.sub(r"(?<![\d.])" + re.escape(doc_address) + r"(?!\d)", self.hosts[name].address, text)
        text = re.sub(r"(?m)^etcd_endpoints = \[.*\]",
                      "etcd_endpoints = [" + ", ".join(f'"{e}"' for e in self.endpoints) + "]", text)
        if mark == "cluster-file" and not host.is_db:
            text = text.replace('"/etc/slacker/admin.cred"', '"/etc/slacker/router.cred"')
        paths = {"/etc/slacker": host.etc, "/var/lib/slacker": host.state, "/opt/slacker": host.prefix,
                 "/usr/local/bin": host.bindir, "/tmp/": f"{self.xfer}/"}
        text = re.sub("|".join(map(re.escape, paths)), lambda m: str(paths[m.group(0)]), text)  # in one pass
        text = re.sub(r"(?m)(^|\s)\./install-host\b",
                      rf"\1./install-host --no-apt --prefix {host.prefix} --bindir {host.bindir} --systemd-dir "
                      rf"{host.units} --config-dir {host.etc} --state-dir {host.state} --user {U}", text)
        if host.is_db:
            text = re.sub(r"\bslacker config check\b(?!.*--agent)", f"slacker config check --agent {host.etc}/agent.toml",
                          text)
        return text

    def env(self, host: Host) -> dict[str, str]:
        """An operator's root shell on the host: its PATH (with the install's bindir for /usr/local/bin)
        and the cluster file the CLI would find at /etc/slacker/cluster.toml."""
        return {"PATH": f"/usr/local/sbin:{host.bindir}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                "HOME": "/root", "SLACKER_CLUSTER": str(host.etc / "cluster.toml")}

    def shell(self, host: Host | None, script: str, cwd: Path, check: bool = True) -> tuple[str, Path]:
        """Runs shell lines on the host (None: the build machine, in the checkout); their output and the
        directory they ended in (a `cd` carries over to the block's next lines)."""
        script = f"set -euo pipefail\ncd {shlex.quote(str(cwd))}\n{script}\nprintf '\\n@cwd=%s\\n' \"$PWD\"\n"
        if host is None:
            argv, env = ["bash", "-c", script], dict(os.environ)
        else:
            argv, env = ["ip", "netns", "exec", host.namespace, "bash", "-c", script], self.env(host)
        p = _run(*argv, env=env, check=False)
        assert p.returncode == 0 or not check, \
            f"on {host.name if host else 'the build machine'}: {script}\nexit {p.returncode}: {p.stderr[-2000:]}{p.stdout[-1500:]}"
        out, _, where = p.stdout.rpartition("\n@cwd=")
        return out, Path(where.strip() or cwd)

    def block(self, mark: str, host: str | None, cwd: Path | None = None) -> str:
        """Runs a marked block on `host` (a line whose comment says `on HOST` runs there); its output."""
        assert mark in od.MARKS
        t0 = time.monotonic()
        here = self.hosts[host] if host else None
        cwd = cwd or (REPO if host is None else self.xfer)
        outputs, pending, pending_host = [], [], here

        def flush() -> None:
            nonlocal cwd, pending
            if pending:
                out, cwd = self.shell(pending_host, "\n".join(pending), cwd)
                outputs.append(out)
                pending = []

        for raw in self.doc[mark].text.splitlines():
            line = od._strip_comment(raw).strip()
            if not line:
                continue
            if od.skipped(line):
                self.skipped.append(line)
                continue
            on = re.match(r"on (\S+)$", od.comment(raw))
            target = self.hosts[on.group(1)] if on and on.group(1) in self.hosts else here
            if target is not pending_host:
                flush()
                pending_host = target
            unit = od.SYSTEMCTL.match(line)
            if unit:
                flush()
                self.systemctl(target, unit.group(1), unit.group(2))
                continue
            pending.append(self.substitute(mark, target, line))
        flush()
        self.ran.append(mark)
        self.times.append((mark, host or "build", time.monotonic() - t0))
        return "".join(outputs)

    def on_each(self, mark: str, hosts, cwd: Path | None = None) -> dict[str, str]:
        """The block on several hosts at once, as an operator with a shell on each would; their outputs."""
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            futures = {h: pool.submit(self.block, mark, h, cwd) for h in hosts}
            return {h: f.result() for h, f in futures.items()}

    def write_file(self, mark: str, host: str, dest: str) -> Path:
        """A file the page shows (the cluster file, agent.toml, router.env), written as an editor would."""
        h = self.hosts[host]
        path = Path(self.substitute(mark, h, dest))
        path.write_text(self.substitute(mark, h, self.doc[mark].text))
        path.chmod(0o644)
        self.ran.append(mark)
        return path

    # -- systemctl, without systemd -----------------------------------------------------------
    def systemctl(self, host: Host, verb: str, unit: str) -> None:
        if verb in ("restart", "disable --now"):
            self.stop(host, unit)
        if verb in ("restart", "enable --now"):
            self.start(host, unit)

    def start(self, host: Host, unit: str) -> subprocess.Popen:
        """The unit's ExecStart as its User and Group, with its UMask, LimitNOFILE, Environment and
        EnvironmentFile, in the host's namespace; waits until it answers."""
        text = self.substitute("", host, (REPO / "deploy" / "systemd" / f"{unit}.service").read_text())
        text = text.replace("User=slacker\n", f"User={SERVICE_USER}\n").replace("Group=slacker\n", f"Group={SERVICE_USER}\n")
        path = self.root / f"{unit}-{host.name}.service"
        path.write_text(text)
        s = _unit(path)
        env = {"PATH": f"/usr/local/sbin:{host.bindir}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        for e in s.get("EnvironmentFile", []):
            optional, f = e.startswith("-"), Path(e.lstrip("-"))
            if f.exists() or not optional:
                env |= _env_file(f)
        for e in s.get("Environment", []):
            key, _, value = e.partition("=")
            env[key] = value
        argv = _exec_argv(s["ExecStart"][0], env)
        assert argv[0] == str(host.bindir / "slacker"), argv  # what install-host put there
        log = self.root / f"{unit}-{host.name}.log"
        # LimitNOFILE, as far as this machine lets root raise it (a container caps the hard limit).
        nofile = min(int(s.get("LimitNOFILE", ["1024"])[0]), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, "prlimit", f"--nofile={nofile}:{nofile}",
                                     "setpriv", "--reuid", s["User"][0], "--regid", s["Group"][0], "--init-groups",
                                     "--", *argv], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, umask=int(s["UMask"][0], 8))
        self.services[(host.name, unit)] = proc
        deadline = time.monotonic() + 90
        while True:
            try:
                if unit == "slacker-agent":
                    tls = host.etc / "tls"
                    AgentClient(f"https://{host.address}:7701", (host.etc / "admin.cred").read_text().strip(),
                                host.name, timeout_s=5, ca_file=tls / "ca.crt").request("GET", "/v1/status")
                else:
                    fetch_status(env["SLACKER_ROUTER_ADMIN"], timeout_s=2)
                return proc
            except (AgentUnavailable, SlackerError):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    f"{unit} on {host.name}: {log.read_text(errors='replace')[-1500:]}"
                time.sleep(0.3)

    def stop(self, host: Host, unit: str) -> None:
        """KillMode=process: SIGTERM to the main process alone (the agent's tenants keep running);
        control-group: to its whole group."""
        proc = self.services.pop((host.name, unit))
        kill_mode = _unit(self.root / f"{unit}-{host.name}.service").get("KillMode", ["control-group"])[0]
        if kill_mode == "process":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    def pid(self, host: str, unit: str) -> int:
        return self.services[(host, unit)].pid

    def cli(self, *argv, host: str = "db-a", check: bool = True) -> subprocess.CompletedProcess:
        """A check of the test's own (not a page command): the installed CLI on `host` with its cluster file."""
        h = self.hosts[host]
        return _run("ip", "netns", "exec", h.namespace, h.bindir / "slacker", *argv, check=check, env=self.env(h))


@pytest.fixture(scope="module")
def path():
    root = Path(tempfile.mkdtemp(prefix="slop-", dir="/tmp"))
    root.chmod(0o755)  # the service user walks through it to its data and the installed programs
    op = OperatorPath(root)
    try:
        op.network()
        t0 = time.monotonic()
        built = op.block("build", None).strip().splitlines()
        artefact = Path(built[-1])
        assert artefact.parent == op.dist and artefact.name.endswith(".tar.gz")
        op.artefact_name = artefact.name.removesuffix(".tar.gz")
        t_build = time.monotonic() - t0
        (op.dist / "app1").mkdir()  # the artefact as copied to the application host
        shutil.copy(artefact, op.dist / "app1")
        # The two hosts install at the same time; the router host's once the database host's made the
        # service user (here both hosts share /etc/passwd: two useradd at once would race).
        with ThreadPoolExecutor(max_workers=1) as pool:
            db = pool.submit(op.block, "install-db", "db-a", op.dist)
            while not db.done() and _run("getent", "passwd", SERVICE_USER, check=False).returncode != 0:
                time.sleep(0.1)
            op.block("install-router", APP, cwd=op.dist / "app1")
            out = db.result()
        print(f"\noperator path: package {t_build:.0f} s, two installs {time.monotonic() - t0 - t_build:.0f} s; "
              f"{out.strip().splitlines()[0]}")
        op.uid, op.gid = pwd.getpwnam(SERVICE_USER).pw_uid, pwd.getpwnam(SERVICE_USER).pw_gid
        yield op
    finally:
        op.down()
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




def test_production_install_and_its_units(path):
    db, app = path.hosts["db-a"], path.hosts[APP]
    release = db.release()
    py = release / "bin" / "python"
    # No test, bench or plotting code in the installed virtualenv (nor pip: pip ran from its wheel).
    for module in ("pytest", "hypothesis", "mariadb", "yaml", "matplotlib", "pip"):
        assert _run(py, "-c", f"import {module}", check=False).returncode != 0, f"{module} is installed"
    assert _run(py, "-c", "import MySQLdb, slacker.cli, cryptography.x509").returncode == 0
    assert _run(db.bindir / "slacker", "--version", env=path.env(db)).stdout.startswith("slacker, version")
    assert os.access(release / "bin" / "slacker-router", os.X_OK)
    assert app.release() != release and (app.release() / "bin" / "slacker-router").exists()  # the router host's own
    # `command -v sysbench go gcc promtool` on the installed host, with what the install put on it (its
    # bindir and the release it links to): none of them. (This build machine has them in /usr/bin, so
    # the same command there finds them: the check can fail.)
    for h in (db, app):
        where = f"{h.bindir}:{h.release() / 'bin'}"
        p = _run("ip", "netns", "exec", h.namespace, "env", "-i", f"PATH={where}", "bash", "-c",
                 "command -v sysbench go gcc promtool", check=False)
        assert p.returncode != 0 and p.stdout.strip() == "", p.stdout
        assert _run("/bin/bash", "-c", "command -v slacker", env={"PATH": where}).stdout.strip() == str(h.bindir / "slacker")
        for tool in ("sysbench", "go", "gcc", "cc", "promtool", "etcd", "pytest"):
            assert not any(d.joinpath(tool).exists() for d in (h.bindir, h.release() / "bin", h.prefix)), tool
    if shutil.which("gcc", path="/usr/bin"):
        assert "/usr/bin/gcc" in _run("/bin/bash", "-c", "command -v sysbench go gcc promtool",
                                      env={"PATH": "/usr/bin"}, check=False).stdout
    size = _mb(release)
    print(f"operator path: installed release {release.name}: {size:.1f} MB; router host's {_mb(app.release()):.1f} MB")
    assert size < 80

    # The Debian packages each role installs, and everything they depend on: none of the tooling.
    unpacked = path.dist / path.artefact_name
    for role in ("db", "router"):
        pkgs = _run(unpacked / "install-host", "--role", role, "--print-packages").stdout.split()
        assert "python3" in pkgs and ("mariadb-server" in pkgs) == (role == "db")
        assert not [p for p in pkgs if FORBIDDEN_PACKAGES.match(p)], pkgs
        bad = _closure_forbidden(pkgs)
        assert not bad, f"role {role} pulls {bad}"
    assert {"golang-go", "sysbench"} <= set(_closure_forbidden(["sysbench", "golang-go"]))  # the check can fail

    # The service user, the directories, and the units as installed (paths and user filled in).
    assert pwd.getpwnam(SERVICE_USER).pw_shell.endswith("nologin")
    for d, owner, mode in ((db.etc, "root", 0o750), (db.state, SERVICE_USER, 0o750), (app.etc, "root", 0o750)):
        st = d.stat()
        assert (pwd.getpwuid(st.st_uid).pw_name, st.st_mode & 0o777) == (owner, mode)
    units = sorted(db.units.iterdir())
    assert [u.name for u in units] == ["slacker-agent.service", "slacker-rebalance.service",
                                       "slacker-rebalance.timer", "slacker-router.service"]
    agent, rebalance, router = (db.units / f"slacker-{n}.service" for n in ("agent", "rebalance", "router"))
    for unit in (agent, rebalance, router):
        text = unit.read_text()
        assert f"User={SERVICE_USER}\n" in text and f"ExecStart={db.bindir}/" in text
    assert "KillMode=process" in agent.read_text()
    settings = [line for line in router.read_text().splitlines() if not line.startswith("#")]
    assert not [line for line in settings if "127.0.0.1" in line]  # the agents must reach its admin address
    assert f"EnvironmentFile={db.etc}/router.env" in settings
    verify = _run("systemd-analyze", "verify", *units, check=False)
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify.stderr
    # It can fail: a unit naming a program that is not installed, or a setting systemd does not know.
    broken = path.root / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "slacker-agent.service").write_text(agent.read_text().replace(f"{db.bindir}/slacker",
                                                                            f"{db.bindir}/nothing"))
    (broken / "slacker-router.service").write_text(router.read_text().replace("KillMode=control-group",
                                                                              "KillMode=everything"))
    verify = _run("systemd-analyze", "verify", *sorted(broken.iterdir()), check=False)
    assert "not executable" in verify.stderr and "kill mode" in verify.stderr

    # Clear one-line errors.
    p = _run(unpacked / "install-host", "--role", "web", check=False)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "--role" in p.stderr


def test_env_file_and_exec_start_expand_as_systemd_does(tmp_path):
    f = tmp_path / "env"
    f.write_text("# c\nA=1.2.3.4:6033   # not a comment\nB=\"x y\"\n; also a comment\nOPTS=--a 1 --b 2\n")
    env = _env_file(f)
    assert env == {"A": "1.2.3.4:6033   # not a comment", "B": "x y", "OPTS": "--a 1 --b 2"}
    assert _exec_argv("/bin/r --listen ${B} $OPTS --x", env) == ["/bin/r", "--listen", "x y", "--a", "1", "--b", "2", "--x"]


def _prepare_hosts(path: OperatorPath) -> None:
    """The other database hosts' install (they share db-a's here: only their /etc/slacker and
    /var/lib/slacker, as install-host makes them), the certificates made with Slacker's own code (section
    6's Python), copied to each host and installed by the page's block, and etcd (section 3's members,
    started by slacker.local_etcd with TLS from the same CA)."""
    for name in (*DB[1:], JOINER):
        h = path.hosts[name]
        h.etc.mkdir(parents=True)
        os.chown(h.etc, 0, path.gid)
        h.etc.chmod(0o750)
        h.state.mkdir(parents=True)
        os.chown(h.state, path.uid, path.gid)
        h.state.chmod(0o750)
    from slacker.tls import ensure_cluster_pki
    pki = ensure_cluster_pki(path.root / "pki", {h.name: [h.address, h.name] for h in path.hosts.values()})
    for h in path.hosts.values():  # copied to each host (scp), then installed there as the page says
        here = path.xfer / h.name
        here.mkdir()
        for src, dest in ((pki[h.name].ca, "ca.crt"), (pki[h.name].cert, f"{h.name}.crt"), (pki[h.name].key, f"{h.name}.key")):
            shutil.copy(src, here / dest)
        path.block("certs", h.name, cwd=here)
    members = local_etcd.plan(list(path.plan.etcd_addresses), tls_dir=path.root / "pki",
                              source_addresses=(path.plan.root_address,))
    path.endpoints = local_etcd.start(path.run_dir / "etcd", members)
    assert all(e.startswith("https://") for e in path.endpoints)


def _processes(root: Path) -> list[tuple[str, str]]:
    """(user, command line) of every process whose command line mentions the test's directory."""
    out = _run("ps", "-ww", "-eo", "user:32=,args=").stdout  # -ww: whole command lines, not 80 columns
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in out.splitlines()
            if str(root) in line and len(line.split(None, 1)) == 2]


def test_operator_path(path):
    t0 = time.monotonic()
    writer = None
    try:
        _prepare_hosts(path)
        # Section 4: the cluster file on every host (the application host's names router.cred).
        for h in path.hosts:
            path.write_file("cluster-file", h, "/etc/slacker/cluster.toml")
            path.block("cluster-file-mode", h)
        # Section 2: the admin credential minted on db-a; the router credential derived there.
        out = path.block("mint", "db-a")
        assert "the admin credential" in out, out
        shutil.copy(path.hosts["db-a"].etc / "admin.cred", path.xfer / "admin.cred")  # scp to the other hosts
        for h in (*DB[1:], JOINER):
            path.block("copy-admin", h)
        path.block("copy-router", APP)
        assert not (path.hosts[APP].etc / "admin.cred").exists()
        # Section 5: each database host's agent.toml, its check, its agent (db-d waits for section 9).
        for h in (*DB, JOINER):
            path.write_file("agent-file", h, "/etc/slacker/agent.toml")
        checked = path.on_each("config-check", (*DB, JOINER))
        for h, out in checked.items():
            assert "FAIL" not in out and "checks passed" in out, (h, out)
        # The page's example output names the checks db-a's printed, in the same order.
        check_names = re.compile(r"(?m)^(?:ok|FAIL)\s+([^:]+):")
        shown = check_names.findall(path.doc["config-check-output"].text)
        assert shown == check_names.findall(checked["db-a"]), (shown, checked["db-a"])
        path.ran.append("config-check-output")
        path.on_each("start-agent", DB)
        # The router on the application host, from router.env.
        path.write_file("router-env", APP, "/etc/slacker/router.env")
        out = path.block("start-router", APP)
        assert "FAIL" not in out, out
        listen = f"{path.hosts[APP].address}:6033"
        # A first tenant; its defaults file names the router.
        path.block("first-tenant", "db-a")
        client = configparser.ConfigParser(allow_no_value=True)  # ssl-verify-server-cert has no value
        client.read(path.xfer / "t1.cnf")
        c = client["client"]
        assert f"{c['host']}:{c['port']}" == listen  # locate names the router first

        # The application host's router credential can route, not administer: each refusal is one line,
        # exit 7, and changes nothing.
        assert path.cli("tenant", "create", "t2", "--on", "db-c").returncode == 0
        for argv, needle in ((["tenant", "delete", "t2", "--yes"], "may not delete"),
                             (["migrate", "t2", "--to", "db-a"], "may not"),
                             (["locate", "t2", "--defaults-file", str(path.root / "stolen.cnf")], "may not"),
                             (["node", "drain", "db-c"], "may not")):
            p = path.cli(*argv, check=False, host=APP)
            assert p.returncode == 7 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
                (argv, p.returncode, p.stderr)
        assert not (path.root / "stolen.cnf").exists()
        writer = RoutedWriter(listen, c["user"], c["password"].strip('"'), path.hosts[APP].etc / "tls" / "ca.crt").start()

        # A live migration under the routed writes, run by an agent that is not root.
        p = path.cli("migrate", "t1", "--to", "db-b", check=False)
        assert p.returncode == 0, p.stderr[-2000:]
        # Section 9: db-d joins the running fleet (`node add`, then its agent's first start), and db-c is
        # drained onto it, restarting no other process and editing no file on another host.
        pids = {k: p.pid for k, p in path.services.items()}
        out = path.block("add-host", "db-a")
        members = {n["node"]: n for n in json.loads(path.cli("node", "list", "--json").stdout)["nodes"]}
        assert set(members) == {*DB, JOINER}, members
        path.block("replace-host", "db-a")
        assert json.loads(path.cli("locate", "t2", "--json").stdout)["node"] == JOINER
        deadline = time.monotonic() + 10
        admin = f"{path.hosts[APP].address}:6034"
        while next(t for t in fetch_status(admin)["tenants"] if t["tenant"] == "t2")["node"] != JOINER:
            assert time.monotonic() < deadline, "the router did not follow t2 to db-d"
            time.sleep(0.1)
        assert {k: p.pid for k, p in path.services.items() if k[0] != JOINER} == pids
        assert all(p.poll() is None for p in path.services.values())
        # db-c, empty now, leaves the fleet: drained (nothing left to move), its agent stopped, removed.
        out = path.block("remove-host", "db-a")
        assert "removed" in out, out
        assert "db-c" not in {n["node"] for n in json.loads(path.cli("node", "list", "--json").stdout)["nodes"]}

        # The upgrade step on db-b, t1's owner, while the client writes: install-host again (a new
        # release, swapped in), then the agent's restart. Its tenants keep serving.
        db_b = path.hosts["db-b"]
        before = db_b.release()
        tenants_before = {cmd for user, cmd in _processes(db_b.state) if "mariadbd" in cmd}
        assert tenants_before
        out = path.block("upgrade", "db-b", cwd=path.dist / path.artefact_name)
        after = db_b.release()
        assert after != before and before.exists()  # the running agents' release stays until the next one
        assert {cmd for user, cmd in _processes(db_b.state) if "mariadbd" in cmd} == tenants_before
        cmdline = Path(f"/proc/{path.pid('db-b', 'slacker-agent')}/cmdline").read_bytes().decode()
        assert str(after) in cmdline  # the restarted agent runs the new release (its script's interpreter)
        assert "t1" in out and "db-b" in out, out
        time.sleep(2)  # the client writes on against the restarted agent's tenant
        writer.stop()

        assert writer.failures == [], writer.failures[:5]
        assert len(writer.acked) > 100
        lost = set(writer.acked) - writer.stored()
        assert not lost, f"{len(lost)} acknowledged writes lost"

        # Deleting a tenant needs no root either.
        assert path.cli("tenant", "delete", "t2", "--yes").returncode == 0
        assert not (path.hosts[JOINER].state / "tenants" / "t2").exists()

        # Nothing of Slacker runs as root: agents, every tenant's mariadbd, the router.
        procs = _processes(path.root)
        mine = [(u, cmd) for u, cmd in procs if "mariadbd" in cmd or " agent --config" in cmd or " router " in cmd]
        assert sum("mariadbd" in cmd for _, cmd in mine) >= 1
        assert sum(" agent --config" in cmd for _, cmd in mine) == 3
        assert {u for u, _ in mine} == {SERVICE_USER}, [m for m in mine if m[0] != SERVICE_USER]
        for d in ("tenants", "sock"):
            st = (db_b.state / d).stat()
            assert (st.st_uid, st.st_mode & 0o777) == (path.uid, 0o700), d
        secrets_dir = next((db_b.state / "tenants").glob("t1*/secrets"))
        for f in secrets_dir.iterdir():
            st = f.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (path.uid, 0o600), f
        # Every marked block of the page ran (tests/unit/test_operator_doc.py: no mark is left out).
        assert sorted(set(path.ran)) == sorted(od.MARKS), set(od.MARKS) - set(path.ran)
        assert sorted(set(path.skipped)) == sorted(line for b in path.doc.values() for line in od.command_lines(b.text)
                                                   if od.skipped(line))
        print(f"operator path: {len(writer.acked)} acknowledged writes, 0 lost, 0 failed; "
              f"{time.monotonic() - t0:.0f} s for the fleet; "
              + ", ".join(f"{m}@{h} {s:.1f} s" for m, h, s in path.times))
    finally:
        if writer is not None:
            writer.stop()
        t1 = time.monotonic()
        path.down()
        print(f"operator path: teardown {time.monotonic() - t1:.0f} s")
