"""The CLI's conventions, as a script meets them: global options after the command, errors as JSON
under --json, one exit-code table in `slacker --help` that matches the exception hierarchy."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from slacker import errors
from slacker.cli import EXIT_CODES


def run(*args: str, cwd="/") -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    return subprocess.run([sys.executable, "-m", "slacker", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=60)


def test_global_options_after_the_command():
    for args in (["status", "--cluster", "/nonexistent/c.toml"], ["status", "--cluster=/nonexistent/c.toml"],
                 ["--cluster", "/nonexistent/c.toml", "status"], ["node", "list", "--cluster", "/nonexistent/c.toml"]):
        p = run(*args)
        assert p.returncode == 3, (args, p.stderr)
        assert p.stderr.strip() == ("slacker: error: cluster file /nonexistent/c.toml not found: no such file "
                                    "(run `slacker cluster up` or pass --cluster FILE)"), args
    p = run("status", "--cluster", "/nonexistent/c.toml", "--debug")
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_errors_are_json_under_json():
    p = run("status", "--json", "--cluster", "/nonexistent/c.toml")
    assert p.returncode == 3 and p.stderr == ""
    doc = json.loads(p.stdout)["error"]
    assert doc == {"kind": "NotFound", "what": "cluster file /nonexistent/c.toml not found", "why": "no such file",
                   "hint": "run `slacker cluster up` or pass --cluster FILE", "exit_code": 3}
    p = run("status", "--json", "--bogus")
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["kind"] == "UsageError"


def test_exit_code_table_matches_the_errors_and_is_in_help():
    codes = dict(EXIT_CODES)
    for cls in errors.ERROR_CLASSES.values():
        assert cls.exit_code in codes, cls
    out = run("--help").stdout
    assert "Exit codes:" in out
    for code, meaning in EXIT_CODES:
        assert f"{code:>5}  {meaning.split()[0]}" in out


def test_the_readme_table_is_the_cli_table():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for code, meaning in EXIT_CODES:
        assert f"| {code} | {meaning} |" in readme


# ---- every command's options, walked: typed metavars, units, defaults shown one way -------------------------

import re

import click
import pytest

from slacker.cli import main as slacker_main
from slacker.cli.common import CPU, HOST_PORT, UNIT_TYPES

# Options whose value really is free text (a note, a title), so TEXT is the right metavar.
FREE_TEXT = {("node cordon", "--reason"), ("plot", "--title")}


def _commands():
    from slacker.cli import _register

    _register()

    def walk(cmd, path):
        yield path, cmd
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                yield from walk(sub, f"{path} {name}".strip())

    return list(walk(slacker_main, ""))


def _options():
    for path, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag and p.name not in ("help", "version"):
                yield path, cmd, p


def _metavar(cmd, p):
    return p.make_metavar(click.Context(cmd))


def test_no_text_metavar_and_typed_units():
    offenders = [(path, p.opts[0], _metavar(cmd, p)) for path, cmd, p in _options()
                 if _metavar(cmd, p) == "TEXT" and (path, p.opts[0]) not in FREE_TEXT]
    assert offenders == []
    # Counts are N, amounts have their unit's name: never click's INTEGER RANGE or FLOAT.
    assert [(path, p.opts[0]) for path, cmd, p in _options() if _metavar(cmd, p) in ("INTEGER", "INTEGER RANGE",
                                                                                        "FLOAT")] == []
    for path, cmd, p in _options():
        words = " ".join(p.opts) + " " + (p.help or "")
        mv = _metavar(cmd, p)
        if re.search(r"--(listen|admin|advertise|router)\b", " ".join(p.opts)):
            assert p.type is HOST_PORT or mv == "HOST:PORT", (path, p.opts)
        if re.search(r"host|addr", " ".join(p.opts)):
            assert mv in ("HOST", "HOST:PORT", "IP"), (path, p.opts, mv)
        if re.search(r"CPU s/s|in cores", words) or "--cpu-per-node" in p.opts:
            assert mv == "CPU", (path, p.opts, mv)
        if isinstance(p.default, str) and re.fullmatch(r"[0-9.]+(ms|s|m|h)", p.default):
            assert mv == "DURATION", (path, p.opts)
        if re.search(r"timeout|interval|cooldown|ttl|freeze|wait|setpoint|period|--sla|--window|--step", p.opts[0]) \
                and not p.opts[0].endswith("-margin"):
            # a duration, alone, at a point, or with what happens when it passes (--cutover-timeout)
            assert mv in ("DURATION", "POINT=DURATION", "DURATION[,abort|wait]"), (path, p.opts, mv)
        if re.fullmatch(r"--(max-)?rate|--disk-read-per-node", p.opts[0]) and path != "ycsb run":
            assert mv == "RATE", (path, p.opts, mv)


def test_bare_numbers_are_refused_where_a_unit_is_needed():
    seen = 0
    for path, cmd, p in _options():
        if p.type in UNIT_TYPES:
            seen += 1
            ctx = click.Context(cmd)
            with pytest.raises(click.UsageError) as exc:
                p.type.convert("20", p, ctx)
            assert exc.value.format_message() == (f"{p.opts[0]} 20: {p.type.noun} needs a unit, e.g. "
                                                  f"{p.type.example}")
            assert p.type.convert("0", p, ctx) == 0  # zero is zero in any unit (--rate 0 starts paused)
    assert seen >= 30
    p = run("migrate", "t1", "--to", "node-2", "--rate", "20")
    assert p.returncode == 2 and p.stderr.startswith("slacker: error: --rate 20: a rate needs a unit, e.g. 20MB/s")
    p = run("migrate", "t1", "--set", "setpoint=900", "--json")
    assert p.returncode == 2 and "setpoint=900: a duration needs a unit" in json.loads(p.stdout)["error"]["what"]
    with pytest.raises(click.BadParameter):
        CPU.convert("half", None, None)


def test_defaults_are_shown_one_way():
    root = click.Context(slacker_main, **slacker_main.context_settings)
    for path, cmd, p in _options():
        ctx = click.Context(cmd, parent=root)
        extra = p.get_help_extra(ctx)
        if p.default not in (None, click.core.UNSET) and not p.multiple:
            assert "default" in extra, (path, p.opts)
        # A default told in prose would be a second way: it goes in show_default="...", shown as [default: ...].
        assert not re.search(r"\(default|[Dd]efault:|\bDefault\b", p.help or ""), (path, p.opts, p.help)
        if "default" in extra:
            assert not extra["default"].startswith("("), (path, p.opts)
    out = " ".join(run("migrate", "--help").stdout.split())
    assert "--window DURATION Latency averaging window. [default: 3s]" in out
    assert "--max-freeze DURATION" in out and "[default: 500ms]" in out


# ---- --json on every command a script reads, errors included -------------------------------------------------

# Commands without --json, and why.
NO_JSON = {
    "agent": "runs the agent daemon in the foreground; scripts read its HTTP API, which is JSON",
    "router": "runs a router in the foreground; `slacker router status --json` reads it",
    "credential show": "its output is the credential itself (a secret), which never goes into --json output",
}


def _leaves():
    return [(path, cmd) for path, cmd in _commands()
            if path and (not isinstance(cmd, click.Group) or cmd.invoke_without_command)]


def _has_json(cmd) -> bool:
    return any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option))


def test_every_command_has_json_or_a_reason():
    missing = [path for path, cmd in _leaves() if not _has_json(cmd) and path not in NO_JSON]
    assert missing == []
    assert all(not _has_json(cmd) for path, cmd in _leaves() if path in NO_JSON)  # no stale exception
    for path in ("node cordon", "node uncordon", "node add", "node remove", "tenant delete", "cluster down",
                 "config check", "credential etcd-auth"):
        assert path in dict(_leaves()) and _has_json(dict(_leaves())[path]), path


def test_every_json_command_prints_its_errors_as_json():
    from click.testing import CliRunner

    runner = CliRunner()
    for path, cmd in _leaves():
        if not _has_json(cmd):
            continue
        # A bad option: refused before anything runs, whatever the command does.
        r = runner.invoke(slacker_main, [*path.split(), "--json", "--no-such-option"])
        assert r.exit_code == 2, (path, r.output)
        doc = json.loads(r.stdout)["error"]
        assert doc["kind"] == "UsageError" and doc["exit_code"] == 2 and "--no-such-option" in doc["what"], path
    for args in (["node", "cordon", "n1"], ["node", "uncordon", "n1"], ["tenant", "delete", "t1", "--yes"],
                 ["node", "remove", "n1"]):
        r = runner.invoke(slacker_main, [*args, "--json", "--cluster", "/nonexistent/c.toml"])
        assert r.exit_code == 3 and json.loads(r.stdout)["error"]["kind"] == "NotFound", (args, r.output)


@pytest.mark.parametrize("module", ["slacker.cli.migrate_cmd", "slacker.cli.tenant_cmd", "slacker.cli.node_cmd"])
def test_a_command_that_only_talks_to_agents_loads_no_database_client_or_metrics(module):
    """Each CLI start-up pays for its imports (a move's fixed cost includes the CLI's); a command that
    only asks agents over HTTP must not load the MySQL client library or Prometheus."""
    code = f"import sys, {module}; print(sorted(m for m in ('pymysql', 'prometheus_client') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# What a start may load beyond the interpreter and click (the floor: `python -c "import click"`), and
# what it must never load: the agent client and the directory backends (http.client, ssl, sqlite3) are
# the directory's, loaded when a command first reads the members; logging, Prometheus and the MySQL
# clients are a running command's. A cheap module a start really needs is added here, with its reason.
START_FORBIDDEN = ("http.client", "ssl", "logging", "slacker.agent.client", "slacker.directory.etcd",
                   "slacker.directory.sqlite", "slacker.config", "prometheus_client", "MySQLdb", "pymysql")
START_STDLIB = {"json", "json.decoder", "json.encoder", "json.scanner", "dataclasses", "copy", "signal", "locale"}
# click's help formatter asks shutil for the terminal's width (shutil brings its compressors); pwd is
# `slacker config check`'s, whose module --help loads with every family.
HELP_STDLIB = {"shutil", "bz2", "lzma", "zlib", "textwrap", "pwd"}
START_SLACKER = {"slacker", "slacker.cli", "slacker.cli.common", "slacker.errors", "slacker.units"}
START_ALLOWANCE = {  # args -> (stdlib beyond the floor, slacker modules; None: any but the forbidden)
    ("--version",): (START_STDLIB, START_SLACKER),
    ("locate", "X", "--help"): (START_STDLIB | HELP_STDLIB, START_SLACKER | {"slacker.cli.tenant_cmd"}),
    # Every family's options (their defaults come from the controller, delta and transfer packages).
    ("--help",): (START_STDLIB | HELP_STDLIB, None),
}
# Run in a subprocess: the console entry (slacker.cli:run) with argv, its modules written out where it
# leaves (run() ends in os._exit once its output is flushed).
_LIST_MODULES = """
import os, sys
out, sys.argv = sys.argv[1], ["slacker", *sys.argv[2:]]
def _exit(code, _real=os._exit):
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
    _real(code)
os._exit = _exit
if sys.argv[1:] == ["--floor"]:
    import click
    os._exit(0)
from slacker.cli import run
run()
"""


def _modules_loaded(tmp_path, *args: str) -> tuple[set[str], float]:
    out = tmp_path / "modules.txt"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _LIST_MODULES, str(out), *args], capture_output=True, text=True,
                       cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}, timeout=60)
    elapsed_s = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    return set(out.read_text().split()), elapsed_s


@pytest.mark.parametrize("args", sorted(START_ALLOWANCE), ids=" ".join)
def test_the_cli_start_loads_only_what_it_uses(args, tmp_path):
    """`slacker --version`, `--help` and `locate X --help` start at the floor: every command pays for its
    start (issue 68: the agent client imported for every command cost 0.2 s). The modules are the gate;
    the wall time is printed, never asserted (a busy machine is not a regression)."""
    floor, _ = _modules_loaded(tmp_path, "--floor")
    loaded, elapsed_s = _modules_loaded(tmp_path, *args)
    print(f"slacker {' '.join(args)}: {elapsed_s * 1000:.0f} ms in a subprocess")
    forbidden = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in START_FORBIDDEN))
    assert not forbidden, f"slacker {' '.join(args)} loads {forbidden}"
    stdlib, ours = START_ALLOWANCE[args]
    extra = {m for m in loaded - floor if not m.startswith(("_", "click."))}  # C parts and click's own
    unexpected = sorted(m for m in extra if m.split(".")[0] != "slacker" and m not in stdlib)
    if ours is not None:
        unexpected += sorted(m for m in extra if m.split(".")[0] == "slacker" and m not in ours)
    assert not unexpected, f"slacker {' '.join(args)} loads {unexpected}, outside its allowance"


def test_the_version_is_the_packages():
    """`--version` says slacker.__version__ (no importlib.metadata at start): the one pyproject.toml states."""
    import tomllib
    from pathlib import Path

    import slacker
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert slacker.__version__ == pyproject["project"]["version"]
    assert run("--version").stdout.endswith(f", version {slacker.__version__}\n")


def test_the_console_script_exits_with_the_commands_code_and_all_its_output():
    """`run` leaves without the interpreter's teardown: the exit code and every byte written still arrive."""
    from click.testing import CliRunner
    from slacker.cli import main
    full = CliRunner().invoke(main, ["migrate", "--help"]).output
    p = subprocess.run([sys.executable, "-m", "slacker", "migrate", "--help"], capture_output=True, text=True)
    words = lambda text: "".join(text.split("\n", 1)[1].split())  # noqa: E731 -- but the program name, any wrapping
    assert p.returncode == 0 and words(p.stdout) == words(full)
    p = subprocess.run([sys.executable, "-m", "slacker", "no-such-command"], capture_output=True, text=True)
    assert p.returncode == 2 and "No such command 'no-such-command'" in p.stderr
