"""The `slacker` command as a user runs it: outputs, exit codes, one-line errors."""

import json
import os
import subprocess
import sys
import time

import pymysql
import pytest


def slacker(*args, env_extra=None, input=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-m", "slacker", *args], capture_output=True, text=True, env=env,
                       timeout=180, input=input)
    return p.returncode, p.stdout, p.stderr


def one_line_error(rc, err, *needles):
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("slacker: error: ")
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in err


def test_tenant_lifecycle_through_cli(cluster):
    rc, out, err = slacker("tenant", "create", "c1", "--on", "node-2", "--buffer-pool", "64M")
    assert rc == 0, err
    assert "created tenant c1 on node-2" in out and "64MiB" in out
    rc, out, _ = slacker("locate", "c1")
    host, port = out.strip().split(":")
    assert host == cluster.node("node-2").tenant_host
    rc, out, _ = slacker("locate", "c1", "--json")
    loc = json.loads(out)
    assert loc["node"] == "node-2" and loc["epoch"] == 1 and loc["app_user"] == "app"
    assert oct(os.stat(loc["app_password_file"]).st_mode & 0o777) == "0o600"
    pw = open(loc["app_password_file"]).read().strip()
    conn = pymysql.connect(host=host, port=int(port), user="app", password=pw, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE d")
        cur.execute("CREATE TABLE d.t (k INT PRIMARY KEY)")
        cur.execute("INSERT INTO d.t VALUES (7)")
        cur.execute("SELECT k FROM d.t")
        assert cur.fetchall() == ((7,),)
    conn.close()
    rc, out, _ = slacker("tenant", "list", "--json")
    rows = json.loads(out)["tenants"]
    assert [(r["id"], r["node"], r["epoch"]) for r in rows] == [("c1", "node-2", 1)]
    rc, out, _ = slacker("tenant", "list")
    assert "c1" in out and "node-2" in out and "TENANT" in out
    rc, out, _ = slacker("status", "--json")
    doc = json.loads(out)
    assert {n["node"]: n["reachable"] for n in doc["nodes"]} == {"node-1": True, "node-2": True}
    rc, out, _ = slacker("status")
    assert "node-1" in out and "up (directory)" in out
    assert "transport: PLAIN TEXT" in out and doc["tls"] is False
    # delete asks first; "n" keeps the tenant
    rc, out, err = slacker("tenant", "delete", "c1", input="n\n")
    assert rc != 0
    assert slacker("locate", "c1")[0] == 0
    rc, out, err = slacker("tenant", "delete", "c1", "--yes")
    assert rc == 0, err
    one_line_error(*slacker("locate", "c1")[::2], "tenant c1 not found")
    assert not (cluster.path.parent / "node-2" / "tenants" / "c1").exists()


def test_cli_error_paths(cluster):
    one_line_error(*slacker("tenant", "create", "Bad_Id")[::2], "invalid tenant id")
    one_line_error(*slacker("tenant", "create", "x" * 40)[::2], "invalid tenant id")
    one_line_error(*slacker("tenant", "create", "e1", "--on", "node-7")[::2], "node-7", "not a member of the cluster")
    one_line_error(*slacker("tenant", "create", "e1", "--buffer-pool", "lots")[::2], "invalid size")
    one_line_error(*slacker("tenant", "create", "e1", "--buffer-pool", "1M")[::2], "too small")
    assert slacker("tenant", "create", "e1")[0] == 0
    one_line_error(*slacker("tenant", "create", "e1", "--on", "node-2")[::2], "already exists")
    one_line_error(*slacker("tenant", "delete", "nope", "--yes")[::2], "not found")
    one_line_error(*slacker("locate", "nope")[::2], "not found")
    one_line_error(*slacker("tenant", "create")[::2], "Missing argument")
    # a directory left behind by someone else is never overwritten nor deleted: the agent moves it
    # aside (a create racing it is refused), says so in `slacker status`, and the id is free again
    junk = cluster.path.parent / "node-1" / "tenants" / "junk"
    junk.mkdir(parents=True)
    (junk / "ibdata1").write_text("precious")
    created, _, err = slacker("tenant", "create", "junk", "--on", "node-1")
    if created != 0:
        one_line_error(created, err, "not empty")
        one_line_error(*slacker("locate", "junk")[::2], "not found")  # and it was not registered
    quarantine = junk.parent / ".quarantine"
    deadline = time.monotonic() + 60
    while not (quarantine.is_dir() and any(quarantine.iterdir())):
        assert time.monotonic() < deadline, "the agent never moved the unaccounted directory aside"
        time.sleep(0.2)
    [moved] = quarantine.iterdir()
    assert (moved / "ibdata1").read_text() == "precious" and moved.name.startswith("tenant~junk~unknown~")
    rc, out, _ = slacker("status")
    [line] = [ln for ln in out.splitlines() if "WARNING" in ln]
    assert line.startswith("node-1: WARNING: files of no known tenant moved aside to ") and str(moved) in line
    doc = json.loads(slacker("status", "--json")[1])
    node1 = next(n for n in doc["nodes"] if n["node"] == "node-1")
    assert len(node1["warnings"]) == 1 and str(moved) in node1["warnings"][0]
    if created != 0:
        assert slacker("tenant", "create", "junk", "--on", "node-1")[0] == 0


def test_no_cluster_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SLACKER_CLUSTER"}
    p = subprocess.run([sys.executable, "-m", "slacker", "tenant", "list"], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=60)
    one_line_error(p.returncode, p.stderr, "no cluster file found", "slacker cluster up")
    rc, out, err = slacker("--cluster", str(tmp_path / "missing.toml"), "status")
    one_line_error(rc, err, "not found")


def test_unreachable_agent_is_one_line(cluster):
    from slacker import local_cluster
    local_cluster.down(cluster.path.parent)
    rc, out, err = slacker("tenant", "create", "u1")
    one_line_error(rc, err, "cannot reach agent node-1")
    rc, out, err = slacker("status")
    assert "UNREACHABLE" in out


def test_port_range_exhausted(make_cluster):
    make_cluster(port_range=(32306, 32306), name="tiny")
    assert slacker("tenant", "create", "p1")[0] == 0
    one_line_error(*slacker("tenant", "create", "p2", "--on", "node-2")[::2], "no free port", "port_range")


def test_debug_shows_traceback(cluster):
    rc, out, err = slacker("--debug", "tenant", "create", "e1", "--on", "node-7")
    assert rc != 0 and "Traceback" in err


def test_cluster_down_refuses_a_cluster_file_it_did_not_write(cluster, tmp_path):
    """A copy of a running cluster's file without its [up] table (as a hand-written fleet file would be),
    in a directory of its own: `cluster down --purge` refuses it, stops nothing and deletes nothing."""
    import tomllib

    from slacker.config import write_toml

    doc = tomllib.loads(cluster.path.read_text())
    top = {k: v for k, v in doc.items() if not isinstance(v, (dict, list))}
    top.pop("credential_file", None)  # a hand-written file from before scoped credentials: token_file
    top["token_file"] = str(cluster.token_file)
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    seeds = {"nodes": doc["nodes"]} if "nodes" in doc else {}  # `cluster up` writes none (members register)
    write_toml(fleet / "cluster.toml", top, seeds)
    assert slacker("tenant", "create", "keep1", "--on", "node-2")[0] == 0
    for args in (["--cluster", str(fleet / "cluster.toml"), "cluster", "down", "--purge"],
                 ["cluster", "down", "--purge", "--dir", str(fleet)]):
        rc, out, err = slacker(*args)
        one_line_error(rc, err, "was not written by `slacker cluster up`", "no [up] table")
        assert "stopped" not in out
    # The same file with an [up] table copied in, but no agents of its own there: refused too.
    write_toml(fleet / "cluster.toml", top, {"up": doc["up"]} | seeds)
    rc, out, err = slacker("cluster", "down", "--dir", str(fleet))
    one_line_error(rc, err, "was not written by `slacker cluster up`", "no agent config")
    assert fleet.exists() and (fleet / "cluster.toml").exists()
    rc, out, _ = slacker("status")
    assert rc == 0 and "UNREACHABLE" not in out and "keep1" in out
    assert out.splitlines()[0] == f"cluster file: {cluster.path} (from $SLACKER_CLUSTER)"

