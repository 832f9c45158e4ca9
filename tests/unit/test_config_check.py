"""`slacker config check`: one line per check, exit 1 on any failure, on files a test writes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slacker.cli import main

needs_mariadb = pytest.mark.skipif(shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists(),
                                   reason="the program checks look for an installed MariaDB")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """An /etc/slacker-like directory with a good cluster file, token and agent config."""
    monkeypatch.delenv("SLACKER_CLUSTER", raising=False)
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    state.mkdir(mode=0o750)
    state.chmod(0o750)
    (etc / "token").write_text("a" * 64 + "\n")
    (etc / "token").chmod(0o600)
    (etc / "cluster.toml").write_text(f'token_file = "{etc}/token"\ndirectory = "db-a"\n\n'
                                      '[[nodes]]\nname = "db-a"\nurl = "http://10.0.0.11:7701"\n')
    (etc / "agent.toml").write_text(f'node = "db-a"\ncluster = "{etc}/cluster.toml"\ndata_root = "{state}"\n'
                                    'listen = "10.0.0.11:7701"\n')
    return etc, state


def _check(*args: str):
    r = CliRunner().invoke(main, ["config", "check", *args])
    return r.exit_code, r.output


@needs_mariadb
def test_a_good_host_passes(host):
    etc, _ = host
    code, out = _check("--agent", str(etc / "agent.toml"))
    assert code == 0, out
    lines = out.strip().splitlines()
    assert all(line.startswith("ok  ") for line in lines[:-1]) and lines[-1].startswith("all ")
    names = [line.split(":")[0].split(None, 1)[1] for line in lines[:-1]]
    assert names[:6] == ["user", "agent config", "cluster file", "token", "node", "data_root"]
    assert {"mariadbd", "mariabackup"} <= set(names)


@needs_mariadb
def test_json(host):
    etc, _ = host
    code, out = _check("--agent", str(etc / "agent.toml"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True
    assert {"check", "ok", "detail"} == set(doc["checks"][0])
    assert "a" * 64 not in out  # the token itself never shows


@pytest.mark.parametrize("spoil, check, says", [
    (lambda etc, state: (etc / "token").chmod(0o644), "token", "chmod 600"),
    (lambda etc, state: state.chmod(0o777), "data_root", "others can write"),
    (lambda etc, state: (etc / "cluster.toml").unlink(), "cluster file", "not found"),
    (lambda etc, state: (etc / "agent.toml").write_text("node = 1\n"), "agent config", "lacks"),
    (lambda etc, state: _secret(state, 0o644), "tenant secrets", "not 0600"),
])
def test_a_spoiled_file_fails_with_one_line(host, spoil, check, says):
    etc, state = host
    spoil(etc, state)
    code, out = _check("--agent", str(etc / "agent.toml"))
    assert code == 1
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(failed) >= 1 and failed[0].startswith(f"FAIL  {check}: ") and says in failed[0], out
    assert out.strip().splitlines()[-1].endswith("checks passed") and "of" in out.strip().splitlines()[-1]


def _secret(state: Path, mode: int) -> None:
    d = state / "tenants" / "t1" / "secrets"
    d.mkdir(parents=True)
    (d / "app.password").write_text("x\n")
    os.chmod(d / "app.password", mode)


def test_router_host_checks_the_cluster_file_only(host, monkeypatch):
    from slacker.cli import config_cmd

    monkeypatch.setattr(config_cmd, "SYSTEM_AGENT_CONFIG", Path("/nonexistent/agent.toml"))
    etc, _ = host
    code, out = _check("--cluster", str(etc / "cluster.toml"))
    assert code == 0, out
    assert "agent config" not in out and "token" in out
