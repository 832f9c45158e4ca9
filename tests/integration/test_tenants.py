"""Tenant lifecycle against real mariadbd processes."""

import os
import socket
from pathlib import Path

import pymysql
import pytest

from slacker import mariadb
from slacker.errors import Conflict, MissingDependency, TenantError
from slacker.procs import alive
from slacker.tenants import DEFAULT_BUFFER_POOL_BYTES, preferred_port


def app_conn(t, db=None):
    return mariadb.connect(user="app", password=t.app_password(), host=t.host, port=t.port, database=db)


def test_create_write_restart_delete(tenants):
    t = tenants.create("life")
    assert t.is_running()
    for f in (t.admin_password_file, t.app_password_file, t.admin_defaults_file):
        assert os.stat(f).st_mode & 0o777 == 0o600
    pid = t.pid()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert t.admin_password() not in cmdline and t.app_password() not in cmdline
    c = app_conn(t)
    with c.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20))")
        cur.execute("INSERT INTO shop.items VALUES (1, 'one'), (2, 'two')")
    c.close()
    tenants.stop("life")
    assert not t.is_running() and not alive(pid)
    tenants.start("life")
    c = app_conn(t, "shop")
    with c.cursor() as cur:
        cur.execute("SELECT id, name FROM items ORDER BY id")
        assert cur.fetchall() == ((1, "one"), (2, "two"))
        cur.execute("SELECT @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@log_bin, "
                    "@@performance_schema, @@innodb_buffer_pool_size")
        assert cur.fetchone() == ("ROW", "FULL", "FULL", 1, 1, DEFAULT_BUFFER_POOL_BYTES)
        cur.execute("SELECT @@innodb_log_buffer_size, @@key_buffer_size, @@aria_pagecache_buffer_size")
        assert cur.fetchone() == (2 << 20, 1 << 20, 8 << 20)
        cur.execute("SELECT @@query_cache_size, @@performance_schema_max_file_handles")
        assert cur.fetchone() == (0, 0)
    c.close()
    # Lean: the server's own memory (not the binary's pages, shared by every tenant on the host) is small.
    # MariaDB's defaults made it ~80 MiB, the lean config ~36 MiB (docs/results.md, "A lean tenant").
    anon_kib = next(int(line.split()[1]) for line in Path(f"/proc/{t.pid()}/status").read_text().splitlines()
                    if line.startswith("RssAnon:"))
    assert anon_kib < 42 * 1024, f"an idle tenant holds {anon_kib // 1024} MiB of its own"
    new_pid = t.pid()
    tenants.delete("life")
    assert not alive(new_pid)
    assert not t.root.exists() and not t.socket.exists()
    tdir = tenants.data_root / "tenants"
    # Created under .building/, removed through .trash/: both empty, nothing else left.
    assert sorted(p.name for p in tdir.iterdir()) == [".building", ".trash"]
    assert list((tdir / ".building").iterdir()) == [] and list((tdir / ".trash").iterdir()) == []


def test_two_tenants_side_by_side(tenants):
    a = tenants.create("alpha", buffer_pool_bytes=64 * 1024 * 1024)
    b = tenants.create("beta")
    assert a.port != b.port and a.info.server_id != b.info.server_id
    for t, v in ((a, "A"), (b, "B")):
        with app_conn(t).cursor() as cur:
            cur.execute("CREATE DATABASE d")
            cur.execute("CREATE TABLE d.x (v CHAR(1))")
            cur.execute("INSERT INTO d.x VALUES (%s)", (v,))
    for t, v in ((a, "A"), (b, "B")):
        with app_conn(t).cursor() as cur:
            cur.execute("SELECT v FROM d.x")
            assert cur.fetchall() == ((v,),)
    assert {t.id for t in tenants.list()} == {"alpha", "beta"}


def test_automatic_port_steps_over_a_port_another_process_holds(tenants):
    # e.g. a transfer receiver's ephemeral port that happens to fall in the node's range
    held = preferred_port("gamma", tenants.port_range)
    squatter = socket.socket()
    squatter.bind((tenants.host, held))
    squatter.listen()
    try:
        t = tenants.create("gamma")
        assert t.port != held
        with app_conn(t).cursor() as cur:
            cur.execute("SELECT @@port")
            assert cur.fetchone() == (t.port,)
        with pytest.raises(Conflict, match="in use"):
            tenants.create("delta", port=held)  # an explicit port is never silently changed
    finally:
        squatter.close()


def test_app_user_is_held_by_read_only(tenant):
    admin = tenant.admin_connect()
    with admin.cursor() as cur:
        cur.execute("SET GLOBAL read_only = 1")
    with pytest.raises(pymysql.err.OperationalError):
        with app_conn(tenant).cursor() as cur:
            cur.execute("CREATE DATABASE nope")


def test_existing_id_and_nonempty_dir_refused(tenants, tenant):
    with pytest.raises(Conflict, match="already exists"):
        tenants.create("t1")
    junk = tenants.tenants_dir / "junk"
    junk.mkdir()
    (junk / "leftover.ibd").write_text("x")
    with pytest.raises(Conflict, match="not empty"):
        tenants.create("junk")
    assert (junk / "leftover.ibd").exists()  # never delete what we did not create


def test_mariadbd_failing_to_start_leaves_nothing(tenants, monkeypatch):
    render = mariadb.ServerConfig.render
    monkeypatch.setattr(mariadb.ServerConfig, "render", lambda self: render(self) + "no_such_option = 1\n")
    with pytest.raises(TenantError) as e:
        tenants.create("broken")
    msg = str(e.value)
    assert "no_such_option" in msg or "unknown variable" in msg, msg
    assert not (tenants.tenants_dir / "broken").exists()


def test_mariadbd_failing_after_install_shows_error_log(tenants, monkeypatch):
    place = type(tenants).put_in_place  # installed, renamed to its name, its config rendered: break that

    def place_then_break(self, tenant):
        place(self, tenant)
        with open(tenant.config_file, "a") as f:
            f.write("innodb_no_such_thing = 1\n")

    monkeypatch.setattr(type(tenants), "put_in_place", place_then_break)
    with pytest.raises(TenantError) as e:
        tenants.create("broken2")
    assert "exited during start" in str(e.value) and "innodb_no_such_thing" in str(e.value), str(e.value)
    assert not (tenants.tenants_dir / "broken2").exists()


def test_missing_package_is_named(tenants, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(mariadb.server, "_EXTRA_BIN_DIRS", ())
    with pytest.raises(MissingDependency) as e:
        tenants.create("nopkg")
    assert "mariadb-server" in str(e.value) and "apt-get install" in str(e.value)
    assert not (tenants.tenants_dir / "nopkg").exists()


def test_seed_made_once_for_concurrent_creates_and_again_for_other_options(tenants, monkeypatch):
    """The install tool runs once per node (its result is copied into each tenant) while the server
    programs and options stay; a change of either makes a new seed and removes the old one."""
    from concurrent.futures import ThreadPoolExecutor

    from slacker.seed import Seed

    builds = []
    build = Seed._build
    monkeypatch.setattr(Seed, "_build", lambda self, key, final: (builds.append(key), build(self, key, final)))
    with ThreadPoolExecutor(3) as pool:
        made = list(pool.map(tenants.create, ["s1", "s2", "s3"]))
    assert len(builds) == 1
    seeds = [p.name for p in tenants.seed.root.iterdir() if not p.name.startswith(".")]
    assert seeds == builds
    # Each tenant its own: its accounts' passwords, its data; and no binlog or buffer pool dump of the seed's.
    passwords = {t.app_password() for t in made}
    assert len(passwords) == 3
    for t in made:
        with app_conn(t).cursor() as cur:
            cur.execute("CREATE DATABASE own")
            cur.execute("CREATE TABLE own.who (id VARCHAR(8) PRIMARY KEY)")
            cur.execute("INSERT INTO own.who VALUES (%s)", (t.id,))
        with pytest.raises(TenantError, match="Access denied"):
            mariadb.connect(user="app", password=next(p for p in passwords if p != t.app_password()),
                            host=t.host, port=t.port).close()
    for t in made:
        with app_conn(t, "own").cursor() as cur:
            cur.execute("SELECT id FROM who")
            assert cur.fetchall() == ((t.id,),)
    assert not (tenants.seed.root / builds[0] / "data" / "binlog.000001").exists()

    render = mariadb.ServerConfig.render
    monkeypatch.setattr(mariadb.ServerConfig, "render", lambda self: render(self) + "# another release\n")
    t = tenants.create("s4")
    assert len(builds) == 2 and builds[1] != builds[0]
    assert [p.name for p in tenants.seed.root.iterdir() if not p.name.startswith(".")] == [builds[1]]
    with app_conn(t).cursor() as cur:
        cur.execute("SELECT 1")
