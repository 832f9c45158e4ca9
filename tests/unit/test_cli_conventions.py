"""The CLI's conventions, as a script meets them: global options after the command, errors as JSON
under --json, one exit-code table in `slacker --help` that matches the exception hierarchy."""

from __future__ import annotations

import json
import subprocess
import sys

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
