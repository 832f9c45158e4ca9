"""`slacker ycsb` bad input: one line, a non-zero exit, and no connection attempted."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slacker.cli import main


@pytest.fixture
def run(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    direct = ["--host", "127.0.0.1", "--port", "1", "--password-file", str(pw)]

    def invoke(*args):
        result = CliRunner().invoke(main, ["ycsb", *args, *direct])
        return result.exit_code, result.output

    return invoke


@pytest.mark.parametrize("args,code,needle", [
    (["run", "t1", "-P", "workloads/slacker", "-p", "readproportin=0.85", "--rate", "10"], 2,
     "did you mean 'readproportion'?"),
    (["run", "t1", "-P", "workloads/slacker", "-p", "readproportion=0.5", "--rate", "10"], 2,
     "workload proportions sum to 0.65, not 1"),
    (["run", "t1", "-P", "workloads/nope", "--rate", "10"], 3, "workload file 'workloads/nope' not found"),
    (["run", "t1,t2", "-P", "workloads/slacker", "--rate", "10"], 2, "--host takes one tenant"),
    (["run", "t1", "-P", "workloads/slacker", "--rate", "0"], 2, "rates must be positive"),
    (["run", "t1", "-P", "workloads/slacker", "--rate", "10", "--rate-step", "60s:fast"], 2, "invalid rate step"),
    (["run", "t1", "-P", "workloads/slacker", "--rate", "10", "--duration", "soon"], 2, "invalid duration"),
    (["run", "T_1", "-P", "workloads/slacker", "--rate", "10"], 2, "invalid tenant id"),
    (["run", "t1", "-P", "workloads/slacker", "--rate", "10", "--mpl", "0"], 2, "invalid MPL"),
    (["load", "t1,t2", "-P", "workloads/slacker"], 2, "load takes one tenant"),
])
def test_bad_input_is_one_line(run, args, code, needle):
    rc, out = run(*args)
    assert rc == code, out
    lines = [line for line in out.strip().splitlines() if line]
    assert len(lines) == 1, out
    assert needle in lines[0]
    assert "secret" not in out


def test_unreachable_server_is_one_line(run):
    rc, out = run("run", "t1", "-P", "workloads/slacker", "--rate", "10")
    assert rc == 1
    assert out.strip().startswith("slacker: error: cannot reach tenant t1 at 127.0.0.1:1")
    assert len(out.strip().splitlines()) == 1


def test_help_lists_every_run_option():
    result = CliRunner().invoke(main, ["ycsb", "run", "--help"])
    for opt in ("--rate", "--mpl", "--duration", "--rate-step", "--arrival", "--metrics-port", "--out", "--json",
                "--host", "--password-file", "--seed", "--retry-timeout", "--drain-timeout"):
        assert opt in result.output
