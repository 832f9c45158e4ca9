"""Every command the README's "Using it" block and `slacker migrate --help` show, run as shown on live clusters.

A shown command rotted before (`slacker migrate --set t42 setpoint=900ms` failed with `invalid tenant id`);
this runs each of them, in the README's order, as a user would type it. The only words added are the ones
that keep this run off other clusters on the machine (addresses, ports, a subnet) and `--fault-injection`
on the cluster the story runs on (to hold a migration past its flip for `--finish`).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from click.testing import CliRunner

from slacker.cli import main

from .conftest import TEST_PORT_RANGE, _free_port, next_loopback_block, next_subnet
from benchkit.migration import processes_mentioning, start_migration, wait_flipped, wait_migration, wait_phase

README = Path(__file__).resolve().parents[2] / "README.md"


def _command(line: str) -> list[str] | None:
    """The words of one shown line, without its comment and a leading sudo; None: not a slacker command."""
    words = shlex.split(line, comments=True)
    if words[:1] == ["sudo"]:
        words = words[1:]
    return words if words[:1] == ["slacker"] else None


def readme_commands() -> list[list[str]]:
    block = README.read_text().split("## Using it", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [w for w in map(_command, block.splitlines()) if w]


def help_examples(*command: str) -> list[list[str]]:
    text = CliRunner().invoke(main, [*command, "--help"], terminal_width=200).output
    block = text.split("Examples:", 1)[1].split("\n\n", 1)[0]
    return [w for w in map(_command, block.splitlines()) if w]


def test_the_shown_commands_are_found() -> None:
    # The parsers above must see the blocks (an edit that breaks them would make the test below vacuous).
    shown = readme_commands()
    assert ["slacker", "cluster", "up", "--nodes", "2"] in shown
    assert shown[-2:] == [["slacker", "tenant", "delete", "t42", "--yes"], ["slacker", "cluster", "down", "--purge"]]
    down = shown.index(["slacker", "cluster", "down"])
    assert shown[down + 1] == ["slacker", "cluster", "up", "--dir", "run"]  # the round trip, with no options
    assert ["slacker", "migrate", "t42", "--set", "setpoint=900ms"] in shown
    assert ["slacker", "migrate", "--abort", "t42"] in help_examples("migrate")


class Shell:
    """Runs `slacker ...` in a directory of its own, as typed there (the cluster file found as run/cluster.toml)."""

    def __init__(self, cwd: Path) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if k != "SLACKER_CLUSTER"}
        self.ran: list[list[str]] = []

    def run(self, words: list[str], *extra: str, ok: bool = True, timeout_s: float = 240) -> tuple[int, str, str]:
        p = subprocess.run([sys.executable, "-m", "slacker", *words[1:], *extra], cwd=self.cwd, env=self.env,
                           capture_output=True, text=True, timeout=timeout_s)
        self.ran.append(words)
        if ok:
            assert p.returncode == 0, (shlex.join(words), p.returncode, p.stdout, p.stderr)
            assert "Traceback" not in p.stderr, p.stderr
        return p.returncode, p.stdout, p.stderr

    def cluster(self):
        from slacker.config import load_cluster
        return load_cluster(str(self.cwd / "run" / "cluster.toml"))

    def down(self) -> None:
        """Whatever happened, nothing of this directory's cluster survives the test."""
        subprocess.run([sys.executable, "-m", "slacker", "cluster", "down", "--purge", "--dir", str(self.cwd / "run")],
                       cwd=self.cwd, env=self.env, capture_output=True, timeout=180)
        for pid, _ in processes_mentioning(str(self.cwd)):
            from slacker.procs import kill_group
            kill_group(pid)
        from slacker import netns
        try:
            netns.teardown(self.cwd / "run")
        except Exception:
            pass


def _own_addresses(words: list[str]) -> list[str]:
    """Options that keep a shown `cluster up` off other clusters: a loopback block, ports, a subnet of its own."""
    if "--netns" in words:
        extra = ["--netns-subnet", next_subnet()]
    else:
        first = next_loopback_block()
        extra = ["--address", first, "--api-port", str(_free_port(first))]
    extra += ["--port-range", "%d-%d" % TEST_PORT_RANGE, "--router", "127.0.0.1:0"]  # a router on free ports
    if "etcd" in words and "--netns" not in words:  # in namespaces each member has an address of its own
        host = "127.0.0.1"
        client = _free_port(host)
        peer = _free_port(host)
        while peer == client:
            peer = _free_port(host)
        extra += ["--etcd-client-port", str(client), "--etcd-peer-port", str(peer)]
    return extra


def _restore_database(story: Shell, words: list[str]) -> None:
    """Before `tenant register ID --shared --on NODE` as shown: database ID restored into NODE's shared
    server by hand (its admin account on the server's own socket), a table and a row in it."""
    import pymysql
    tenant, node = words[3], words[words.index("--on") + 1]
    node_dir = story.cwd / "run" / node
    password = (node_dir / "shared" / "secrets" / "admin.password").read_text().strip()
    conn = pymysql.connect(unix_socket=str(node_dir / "sock" / "_shared.sock"), user="slacker", password=password,
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{tenant}`")
            cur.execute(f"CREATE TABLE `{tenant}`.orders (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO `{tenant}`.orders VALUES (1)")
    finally:
        conn.close()


def _fill_database(story: Shell, tenant: str) -> None:
    """Before a shown `migrate ID --into shared`: the whole server's data in database ID (a table and a row),
    written by its application account."""
    from slacker.client import resolve
    conn = resolve(tenant, story.cluster()).connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{tenant}`")
            cur.execute(f"CREATE TABLE IF NOT EXISTS `{tenant}`.orders (id INT PRIMARY KEY)")
            cur.execute(f"INSERT IGNORE INTO `{tenant}`.orders VALUES (1)")
    finally:
        conn.close()


def _nodes(words: list[str]) -> int:
    return int(words[words.index("--nodes") + 1])


def _held_migration(sh: Shell, **options) -> dict:
    """A migration of t42 to the other node that stays running (a slow copy, or a hold), started as
    `slacker migrate` would start it; for the commands that change or end a running one."""
    cluster = sh.cluster()
    from slacker.agent.client import cluster_clients
    _, directory = cluster_clients(cluster)
    owner = directory.lookup("t42").node
    other = next(n for n in cluster.nodes if n != owner)
    return {"source": owner, "target": other, **start_migration(cluster, "t42", target=other, **options)}


def _run_set(sh: Shell, words: list[str]) -> None:
    doc = _held_migration(sh, controller={"setpoint_s": 1.5, "max_rate_bytes_per_s": 100_000})
    cluster = sh.cluster()
    wait_phase(cluster, doc["source"], doc["id"], "snapshot", timeout_s=90)
    _, out, _ = sh.run(words)
    assert "setpoint" in out, out
    from slacker.agent.client import cluster_clients
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + 30
    while True:  # the controller's state shows the new setpoint from its next step on
        ctl = agents[doc["source"]].request("GET", f"/v1/migrations/{doc['id']}")["controller"] or {}
        if ctl.get("setpoint_s") is not None and abs(ctl["setpoint_s"] - 0.9) < 1e-9:
            break
        assert time.monotonic() < deadline, ctl
        time.sleep(0.2)
    sh.held = doc  # the next shown command (--abort) ends it


def _run_abort(sh: Shell, words: list[str]) -> None:
    doc = getattr(sh, "held", None) or _held_migration(sh, rate_bytes_per_s=100_000)
    _, out, _ = sh.run(words)
    assert "aborting" in out, out
    end = wait_migration(sh.cluster(), doc["source"], doc["id"], timeout_s=120)
    assert end["result"] == "aborted", end
    _, out, _ = sh.run(["slacker", "locate", "t42", "--json"])
    assert json.loads(out)["node"] == doc["source"]  # the source keeps serving
    sh.held = None


def _run_cutover_now(sh: Shell, words: list[str]) -> None:
    """The shown line after `migrate ... --cutover manual` (which returned with the migration ready)."""
    from slacker.agent.client import cluster_clients
    agents, directory = cluster_clients(sh.cluster())
    source = directory.lookup("t42").node
    doc = agents[source].request("GET", "/v1/migrations/t42")
    assert doc["active"] and doc["phase"] == "ready", (doc["phase"], doc.get("error"))
    _, out, _ = sh.run(words)
    assert "cutting over now" in out, out
    end = wait_migration(sh.cluster(), source, doc["id"], timeout_s=120)
    assert end["result"] == "succeeded", end
    _, out, _ = sh.run(["slacker", "locate", "t42", "--json"])
    assert json.loads(out)["node"] == doc["target"]


def _run_finish(sh: Shell, words: list[str]) -> None:
    doc = _held_migration(sh, hold_s={"flipped": 8})
    wait_flipped(sh.cluster(), doc["id"], source=doc["source"], timeout_s=120)
    _, out, _ = sh.run(words)
    assert "retrying its forward steps" in out, out
    end = wait_migration(sh.cluster(), doc["source"], doc["id"], timeout_s=120)
    assert end["result"] == "succeeded", end
    _, out, _ = sh.run(["slacker", "locate", "t42", "--json"])
    assert json.loads(out)["node"] == doc["target"]


def _shape_of(sh: Shell) -> dict:
    """What `cluster up --json` says a cluster is: nodes and addresses, directory, TLS, subnet, router."""
    _, out, _ = sh.run(["slacker", "status", "--json"])
    doc = json.loads(out)
    assert all(n["reachable"] for n in doc["nodes"]), doc["nodes"]
    from slacker.router.local import listening
    c = sh.cluster()
    return {"nodes": {n.name: (n.url, n.tenant_host) for n in c.nodes.values()}, "tls": bool(c.tls_ca),
            "directory": (c.directory_backend, c.directory_node, c.etcd_endpoints), "subnet": c.local_subnet,
            "router": listening(sh.cwd / "run") is not None}


def _run_other_cluster(sh_dir: Path, words: list[str]) -> None:
    """A `cluster up` variant: up in a directory of its own, every node answering; down, and back
    as it was made with `cluster up --dir run` alone (no option repeated); then down."""
    sh = Shell(sh_dir)
    try:
        sh.run(words, *_own_addresses(words))
        made = _shape_of(sh)
        assert len(made["nodes"]) == _nodes(words) and made["router"], made
        sh.run(["slacker", "cluster", "down"])
        sh.run(["slacker", "cluster", "up", "--dir", "run"])
        assert _shape_of(sh) == made
    finally:
        sh.down()


MARK_ROWS = 300


def _mark_rows(sh: Shell) -> tuple[str, int]:
    """Rows written into t42 before the shown `cluster down`; returns its owner and row count."""
    from slacker.client import resolve
    ep = resolve("t42", sh.cluster())
    conn = ep.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS kept")
        cur.execute("CREATE TABLE kept.t (id INT PRIMARY KEY)")
        cur.executemany("INSERT INTO kept.t VALUES (%s)", [(i,) for i in range(MARK_ROWS)])
    conn.close()
    return ep.node, MARK_ROWS


def _marked_rows(sh: Shell, timeout_s: float = 120) -> tuple[str, int]:
    """t42's owner and row count once its server answers again after `cluster up`."""
    from slacker.client import resolve
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ep = resolve("t42", sh.cluster())
            conn = ep.connect()
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM kept.t")
                n = cur.fetchone()[0]
            conn.close()
            return ep.node, n
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.slow
def test_every_shown_command_runs_as_shown(short_tmp) -> None:
    shown = readme_commands()
    # `slacker migrate --help` shows a subset of the README's lines: running those runs the help's too.
    missing = [shlex.join(w) for w in help_examples("migrate") if w not in shown]
    assert not missing, f"shown by `slacker migrate --help` but not in the README's Using it block: {missing}"

    story = Shell(short_tmp / "story")
    ran_elsewhere: list[list[str]] = []
    story_up: list[str] = []  # the words that brought the story's cluster up
    stopped: tuple[str, int] | None = None  # while the story's cluster is down: t42's owner and rows
    try:
        for i, words in enumerate(shown):
            if words[1:3] == ["cluster", "up"] and stopped is not None:  # the round trip: the same cluster back
                assert words == ["slacker", "cluster", "up", "--dir", "run"], words  # no option repeated
                story.run(words)  # made with a loopback block, ports, a router of its own: all from its file
                assert _marked_rows(story) == stopped and _shape_of(story) == story_shape
                stopped = None
            elif words[1:3] == ["cluster", "up"]:
                if not story_up:  # the cluster the rest of the block runs on
                    story_up = words  # and the options that keep it off other clusters
                    story.run(words, *_own_addresses(words), "--fault-injection")
                elif "--netns" in words and os.geteuid() != 0:
                    continue  # shown with sudo: a non-root run cannot
                else:
                    _run_other_cluster(short_tmp / f"variant-{i}", words)
                    ran_elsewhere.append(words)
            elif words[1:2] == ["migrate"] and "--set" in words:
                _run_set(story, words)
            elif words[1:3] == ["migrate", "--abort"]:
                _run_abort(story, words)
            elif words[1:3] == ["migrate", "--finish"]:
                _run_finish(story, words)
            elif words[1:3] == ["migrate", "--cutover-now"]:
                _run_cutover_now(story, words)
            elif words[1:3] == ["migrate", "--release"]:  # after a move that kept its old copy
                _, out, _ = story.run(words)
                assert f"released the kept copy of {words[3]}" in out, out
            elif words[1:3] == ["tenant", "register"]:
                _restore_database(story, words)  # what the shown line presumes: the operator's dump restored
                _, out, _ = story.run(words)
                assert f"app@{words[3]}" in out, out
            elif words[1:3] == ["cluster", "down"]:
                before = None if "--purge" in words else _mark_rows(story)
                story_shape = _shape_of(story)
                _, out, _ = story.run(words)
                assert "cluster down: stopped" in out, out
                assert processes_mentioning(str(story.cwd / "run")) == []
                assert (story.cwd / "run").exists() == ("--purge" not in words)
                stopped = before
            else:
                if words[1:2] == ["migrate"] and words[-2:] == ["--into", "shared"]:
                    _fill_database(story, words[2])  # what the shown line presumes: its data in database c7
                _, out, _ = story.run(words)
                if words[1:2] == ["migrate"] and "--into" in words:
                    _, where, _ = story.run(["slacker", "locate", words[2], "--json"])
                    assert json.loads(where)["kind"] == words[words.index("--into") + 1], where
                if words[1:2] == ["locate"] and "--json" in words:
                    assert json.loads(out)["node"] == "node-1"
                if "--defaults-file" in words:
                    cnf = story.cwd / words[words.index("--defaults-file") + 1]
                    assert stat.S_IMODE(cnf.stat().st_mode) == 0o600 and "password" in cnf.read_text()
                if words[1:2] == ["migrate"]:  # a planned cutover returns ready (the next line cuts it over)
                    assert ("READY" if "--cutover" in words else "SUCCEEDED") in out, out
        assert not set(map(tuple, shown)) - set(map(tuple, story.ran + ran_elsewhere)) - \
            ({tuple(w) for w in shown if "--netns" in w} if os.geteuid() != 0 else set())
    finally:
        story.down()

