"""`slacker router` with stock clients: the mariadb CLI, PyMySQL, the mariadb connector's binary
prepared statements and sysbench log in as USER@TENANT on one address; after a migration new
connections reach the new owner; with the directory down it keeps the last owner and says so."""

import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import pymysql
import pytest

from slacker.client import resolve
from slacker.procs import read_pid, wait_gone
from slacker.router import local as local_router

from .test_cli import slacker


def _status(admin: str) -> dict:
    with urllib.request.urlopen(f"http://{admin}/status", timeout=5) as r:
        return json.loads(r.read())


def _metrics(admin: str) -> str:
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
        return r.read().decode()


def _wait_route(admin: str, tenant: str, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for t in _status(admin)["tenants"]:
            if t["tenant"] == tenant and t["host"]:
                return t
        time.sleep(0.05)
    raise AssertionError(f"router never learned {tenant}")


def _tenant(cluster, admin: str, tenant: str, node: str = "node-1"):
    """Create a tenant (as a user would), wait until the router routes it; its endpoint."""
    rc, _, err = slacker("tenant", "create", tenant, "--on", node)
    assert rc == 0, err
    _wait_route(admin, tenant)
    return resolve(tenant, cluster)


def _sysbench(tmp_path, listen: str, user: str, password: str, db: str, *options: str) -> list[str]:
    """A sysbench oltp_read_write command line on the router (password in a 0600 file), tables prepared."""
    host, port = listen.rsplit(":", 1)
    conf = tmp_path / "sb.conf"
    conf.touch(mode=0o600)
    conf.write_text(f"mysql-password={password}\n")
    sb = ["sysbench", "oltp_read_write", f"--config-file={conf}", f"--mysql-host={host}", f"--mysql-port={port}",
          f"--mysql-user={user}", f"--mysql-db={db}", *options]
    p = subprocess.run(sb + ["prepare"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return sb


def _connect(listen: str, user: str, password: str, **kw):
    host, port = listen.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user=user, password=password, ssl_disabled=True,
                           autocommit=True, connect_timeout=5, **kw)


def _datadir_node(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@datadir")
        return re.search(r"/(node-\d+)/", cur.fetchone()[0]).group(1)


def _connection_on(listen: str, user: str, password: str, node: str, within_s: float = 2.0, **kw):
    """A new connection through the router that lands on `node`, retried for at most `within_s`
    (a connection to the retired owner fails or lands there: either way not yet moved)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            conn = _connect(listen, user, password, **kw)
            if _datadir_node(conn) == node:
                return conn
            conn.close()
        except pymysql.err.OperationalError:
            pass
        assert time.monotonic() < deadline, f"the router still sends new connections away from {node}"
        time.sleep(0.01)


def test_stock_clients_and_a_move(routed, tmp_path):
    cluster, listen, admin = routed
    ep = _tenant(cluster, admin, "r1", "node-1")

    # `slacker locate` names the router first, and its defaults file logs in through it.
    rc, out, err = slacker("locate", "r1")
    assert rc == 0, err
    assert out.splitlines()[0].startswith(f"{listen} (router")
    assert out.splitlines()[1].startswith(f"{ep.host}:{ep.port}")
    cnf = tmp_path / "r1.cnf"
    assert slacker("locate", "r1", "--defaults-file", str(cnf))[0] == 0
    cli = subprocess.run(["mariadb", f"--defaults-extra-file={cnf}", "-N", "-e",
                          "CREATE DATABASE shop; CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20)); "
                          "INSERT INTO shop.items VALUES (1, 'héllo'); SELECT CURRENT_USER(), name FROM shop.items"],
                         capture_output=True, text=True, timeout=30)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.split() == ["app@%", "héllo"]

    # PyMySQL (text protocol): session state and a transaction.
    conn = _connect(listen, "app@r1", ep.password, database="shop", charset="utf8mb4")

    def states():
        t = next(t for t in _status(admin)["tenants"] if t["tenant"] == "r1")
        return t["connections_in_transaction"], t["connections_between_statements"]

    with conn.cursor() as cur:
        cur.execute("SET @marker = 42")
        assert states() == (0, 1)
        cur.execute("BEGIN")
        cur.execute("INSERT INTO items VALUES (2, 'two')")
        cur.execute("SELECT * FROM items")  # a result set between: the router reads its end, not its rows
        assert len(cur.fetchall()) == 2
        assert states() == (1, 0)  # the router saw SERVER_STATUS_IN_TRANS
        cur.execute("COMMIT")
        assert states() == (0, 1)
        cur.execute("SELECT @marker, DATABASE(), COUNT(*) FROM items")
        assert cur.fetchone() == (42, "shop", 2)
    assert _datadir_node(conn) == "node-1"
    conn.close()

    # The mariadb connector: binary-protocol prepared statements.
    import mariadb
    host, port = listen.rsplit(":", 1)
    m = mariadb.connect(host=host, port=int(port), user="app@r1", password=ep.password, database="shop")
    c1 = m.cursor(prepared=True)
    c1.execute("SELECT name FROM items WHERE id = ?", (1,))
    assert c1.fetchall() == [("héllo",)]
    c2 = m.cursor(prepared=True)
    c2.executemany("INSERT INTO items VALUES (?, ?)", [(3, "a"), (4, "b")])
    m.commit()
    c1.execute("SELECT name FROM items WHERE id = ?", (4,))
    assert c1.fetchall() == [("b",)]
    m.close()

    # Wrong password, no tenant in the name, an unknown tenant: refused by the router, counted.
    for user, password, needle in (("app@r1", "wrong", "using password: YES"), ("app", ep.password, "USER@TENANT"),
                                   ("app@nope", ep.password, 'no tenant "nope"')):
        with pytest.raises(pymysql.err.OperationalError) as e:
            _connect(listen, user, password)
        assert e.value.args[0] == 1045 and needle in e.value.args[1]
    assert 'slacker_router_auth_failures_total{tenant="r1"} 1' in _metrics(admin)

    # sysbench through the router: no error at all.
    sb = _sysbench(tmp_path, listen, "app@r1", ep.password, "shop", "--tables=1", "--table-size=500",
                   "--mysql-ignore-errors=none")
    p = subprocess.run(sb + ["--threads=1", "--time=3", "run"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr + p.stdout
    assert int(re.search(r"transactions:\s+(\d+)", p.stdout).group(1)) > 0

    # A live migration: the router follows the flip; new connections reach node-2 at once.
    rc, out, err = slacker("migrate", "r1", "--to", "node-2", "--json")
    assert rc == 0 and json.loads(out)["result"] == "succeeded", err
    conn = _connection_on(listen, "app@r1", ep.password, "node-2", database="shop")
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM items")
        assert cur.fetchone() == (4,)
        cur.execute("INSERT INTO items VALUES (5, 'after')")  # writes are accepted: the new owner serves
    conn.close()
    st = next(t for t in _status(admin)["tenants"] if t["tenant"] == "r1")
    assert st["node"] == "node-2" and st["epoch"] == 2
    lag_s = st["learned_at"] - st["changed_at"]
    print(f"router learned of the flip {lag_s * 1000:.1f} ms after the directory's change")
    assert 0 <= lag_s < 0.5  # a watch, not a poll: milliseconds
    assert "slacker_router_route_changes_total 1" in _metrics(admin)


def test_directory_down_keeps_last_owner(routed):
    cluster, listen, admin = routed
    ep = _tenant(cluster, admin, "r2", "node-2")
    assert _status(admin)["directory"]["reachable"] is True
    # node-1's agent serves the SQLite directory: kill it (tenants of node-2 keep running).
    pid = read_pid(cluster.path.parent / "node-1" / "agent.pid")
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10)
    deadline = time.monotonic() + 10
    while _status(admin)["directory"]["reachable"] and time.monotonic() < deadline:
        time.sleep(0.1)
    doc = _status(admin)
    assert doc["directory"]["reachable"] is False and doc["directory"]["error"]
    assert "slacker_router_directory_reachable 0" in _metrics(admin)
    # It still serves the last owner it knew.
    conn = _connect(listen, "app@r2", ep.password)
    assert _datadir_node(conn) == "node-2"
    conn.close()
    rc, out, _ = slacker("router", "status", "--admin", admin)
    assert rc == 0 and "UNREACHABLE" in out and "last owners known" in out


def test_tls_cluster_both_legs(make_cluster, tmp_path):
    """On a TLS cluster the router offers clients TLS with a certificate from the cluster CA and
    refuses plain text, and logs in to owners over TLS, verified against the same CA."""
    cluster = make_cluster(nodes=1, tls=True)
    admin = local_router.start(cluster.path.parent, cluster.path, "127.0.0.1:0")
    listen = local_router.listening(cluster.path.parent)
    try:
        ep = _tenant(cluster, admin, "r3")
        with pytest.raises(pymysql.err.OperationalError) as e:
            _connect(listen, "app@r3", ep.password)
        assert e.value.args[0] == 3159 and "requires TLS" in e.value.args[1]
        from slacker.tls import client_context
        host, port = listen.rsplit(":", 1)
        conn = pymysql.connect(host=host, port=int(port), user="app@r3", password=ep.password,
                               ssl=client_context(cluster.tls_ca), connect_timeout=5)
        assert conn._sock.version().startswith("TLS")  # the client's leg, checked against the cluster CA
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            assert cur.fetchone()[1], "the router's login to the owner is not encrypted"
        conn.close()
        # `slacker locate --defaults-file` names the TLS router, with the CA to check it.
        cnf = tmp_path / "r3.cnf"
        assert slacker("locate", "r3", "--defaults-file", str(cnf))[0] == 0
        assert f"port = {port}" in cnf.read_text() and "ssl-verify-server-cert" in cnf.read_text()
        cli = subprocess.run(["mariadb", f"--defaults-extra-file={cnf}", "-N", "-e", "SELECT CURRENT_USER()"],
                             capture_output=True, text=True, timeout=30)
        assert cli.returncode == 0 and cli.stdout.strip() == "app@%", cli.stderr
    finally:
        local_router.stop(cluster.path.parent)

def _etcd_member_streamed_from(pid: int, members) -> str:
    """The etcd member process `pid` holds a connection to (the router's stream), read from /proc."""
    import collections
    import socket as socketlib
    import struct

    by_addr = {(m.host, m.client_port): m.name for m in members}
    seen: collections.Counter = collections.Counter()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        for line in open(f"/proc/{pid}/net/tcp").read().splitlines()[1:]:
            f = line.split()
            if f[3] != "01" or f[9] not in inodes:  # ESTABLISHED, one of its sockets
                continue
            ip_hex, port_hex = f[2].split(":")
            addr = (socketlib.inet_ntoa(struct.pack("<I", int(ip_hex, 16))), int(port_hex, 16))
            if addr in by_addr:
                seen[by_addr[addr]] += 1
        time.sleep(0.1)
    assert seen, "the router holds no connection to etcd"
    return seen.most_common(1)[0][0]


class _Gated:
    """A directory whose `changes` waits while the gate is closed (between two requests: no stream open),
    so a follower's revision falls behind what etcd keeps."""

    def __init__(self, store) -> None:
        import threading
        self.store, self.open, self.parked, self.answers = store, threading.Event(), threading.Event(), []
        self.open.set()

    def changes(self, since, timeout_s):
        if not self.open.is_set():
            self.parked.set()
            self.open.wait()
        ch = self.store.changes(since, timeout_s)
        self.answers.append((since, ch.reset))
        return ch

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_follows_an_etcd_directory(make_cluster):
    """With the directory on etcd the router follows every tenant on one watch of etcd's tenant prefix:
    a tenant created is routable (login + SELECT 1 through the router) within half a second of `tenant
    create` returning. Then, during one move: the etcd member the router streams from (made the leader
    first) is SIGKILLed, and a second router's revision falls behind a compaction of etcd's history.
    Both reconnect by themselves and route the tenant to its new owner."""
    from slacker import local_etcd
    from slacker.agent.client import cluster_clients
    from slacker.config import load_cluster
    from slacker.directory import EtcdStore
    from slacker.directory.etcd import _b64
    from slacker.errors import SlackerError
    from slacker.router.control import Router, RouterOptions, password_hash

    cluster = make_cluster(nodes=2, directory="etcd")
    run_dir = cluster.path.parent
    admin = local_router.start(run_dir, cluster.path, "127.0.0.1:0")
    listen = local_router.listening(run_dir)
    behind = None
    try:
        rc, out, err = slacker("tenant", "create", "r4", "--on", "node-1", "--json")
        created = time.monotonic()
        assert rc == 0, err
        password = open(json.loads(out)["app_password_file"]).read().strip()
        while True:
            try:
                conn = _connect(listen, "app@r4", password)
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                    assert cur.fetchone() == (1,)
                conn.close()
                break
            except pymysql.err.OperationalError:
                assert time.monotonic() - created < 0.5, "not routable within 0.5 s of `tenant create`"
                time.sleep(0.005)
        routable_s = time.monotonic() - created
        print(f"routed login + SELECT 1 {routable_s * 1000:.0f} ms after `tenant create` returned")
        assert routable_s < 0.5

        # A second router whose follower waits between two requests while the tenant moves and etcd
        # compacts its history: its next watch starts at a revision etcd no longer has.
        spec = load_cluster(str(cluster.path))
        agents, directory = cluster_clients(spec)
        gated = _Gated(directory)
        # Its snapshot's login hashes from one request per node (`GET /v1/logins`), as with many tenants.
        logins = agents["node-1"].request("GET", "/v1/logins")["logins"]
        assert [(x["tenant"], x["user"], x["hash"]) for x in logins] == [("r4", "app", password_hash(password))]
        behind = Router(spec, RouterOptions(listen="127.0.0.1:0", admin=None, register=False, watch_timeout_s=0.3),
                        agents, gated)
        behind.BULK_LOGINS_FROM = 1
        behind.start()
        _connection_on(behind.listen, "app@r4", password, "node-1").close()
        gated.open.clear()
        assert gated.parked.wait(5)

        # The member the first router streams from, made the leader, then killed.
        etcd_dir = run_dir / "etcd"
        members = local_etcd.members_of(etcd_dir)
        store = EtcdStore(list(cluster.etcd_endpoints), prefix=cluster.etcd_prefix)
        victim = _etcd_member_streamed_from(read_pid(run_dir / "router" / "router.pid"), members)
        health = store.health()
        if health["leader"] != victim:
            leader_url = next(m["client_url"] for m in health["members"] if m["leader"])
            target = next(m["id"] for m in health["members"] if m["name"] == victim)
            store.gw.call("/maintenance/transfer-leadership", {"targetID": target}, idempotent=True, only=leader_url)
            deadline = time.monotonic() + 10
            while store.health()["leader"] != victim:
                assert time.monotonic() < deadline, "leadership did not move"
                time.sleep(0.1)
        os.kill(local_etcd.member_pid(etcd_dir, victim), signal.SIGKILL)

        rc, out, err = slacker("migrate", "r4", "--to", "node-2", "--json")
        assert rc == 0 and json.loads(out)["result"] == "succeeded", err
        _connection_on(listen, "app@r4", password, "node-2", within_s=5).close()
        st = next(t for t in _status(admin)["tenants"] if t["tenant"] == "r4")
        assert st["epoch"] == 2 and st["node"] == "node-2"

        # A write after the flip, then the history compacted up to it: the flip's revision is gone.
        store.state_put("test/after-the-move", {"at": time.time()})
        head = int(store.gw.call("/kv/range", {"key": _b64("/")}, idempotent=True)["header"]["revision"])
        store.gw.call("/kv/compaction", {"revision": str(head), "physical": True}, idempotent=True)
        waited_from = behind.followed["revision"]
        assert waited_from is not None and waited_from + 1 < head
        # Each member applies the compaction on its own: wait until every live one has.
        for m in members:
            if m.name == victim:
                continue
            deadline = time.monotonic() + 10
            while True:
                try:
                    got = store.gw.call("/kv/range", {"key": _b64("/"), "revision": str(waited_from + 1)},
                                        idempotent=True, only=m.client_url)
                except SlackerError as exc:
                    got = exc.one_line()
                    if "compacted" in got:
                        break
                assert time.monotonic() < deadline, f"{m.name} never compacted: {got} (victim {victim}, " \
                                                    f"from {waited_from}, head {head})"
                time.sleep(0.05)
        gated.open.set()
        _connection_on(behind.listen, "app@r4", password, "node-2", within_s=5).close()
        # Its watch from the revision it had was refused as compacted and a snapshot taken instead.
        assert (waited_from, True) in gated.answers, gated.answers

        local_etcd.start(etcd_dir, [])  # the member back: nothing to redo on the routers' side
        conn = _connection_on(listen, "app@r4", password, "node-2", within_s=5)
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        conn.close()
    finally:
        if behind is not None:
            behind.stop()
        local_router.stop(run_dir)


def test_router_killed_and_restarted(routed):
    """The data path killed: its control side starts it again at once. The whole router killed and
    started again on its address: clients reconnect to it and go on."""
    cluster, listen, admin = routed
    ep = _tenant(cluster, admin, "r6", "node-2")
    conn = _connect(listen, "app@r6", ep.password)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE k")
        cur.execute("CREATE TABLE k.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO k.t VALUES (1)")
    run_dir = cluster.path.parent
    router_pid = read_pid(run_dir / "router" / "router.pid")
    children = [int(p) for p in open(f"/proc/{router_pid}/task/{router_pid}/children").read().split()]
    assert len(children) == 1
    os.kill(children[0], signal.SIGKILL)  # the data path only
    with pytest.raises(pymysql.err.OperationalError):
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
    conn = _connection_on(listen, "app@r6", ep.password, "node-2", within_s=5)  # the control side restarted it
    with conn.cursor() as cur:
        cur.execute("INSERT INTO k.t VALUES (2)")
    conn.close()

    os.killpg(os.getpgid(router_pid), signal.SIGKILL)  # the whole router, control side and data path
    assert wait_gone(router_pid, 10)
    local_router.start(run_dir, cluster.path, listen, admin)
    conn = _connection_on(listen, "app@r6", ep.password, "node-2", within_s=5)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM k.t")
        assert cur.fetchone() == (2,)
    conn.close()


def test_connections_move_between_statements(routed):
    """After a move, a connection between statements whose session the router knows (database,
    session variables) continues on the new owner with them; one holding state the router cannot
    carry (a user variable) ends with error 1927 saying why, never runs on the new owner without it."""
    cluster, listen, admin = routed
    ep = _tenant(cluster, admin, "r7", "node-1")
    setup = _connect(listen, "app@r7", ep.password)
    with setup.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20))")
    setup.close()
    mover = _connect(listen, "app@r7", ep.password, database="shop")
    with mover.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ANSI_QUOTES', time_zone = '+02:00'")
        cur.execute("INSERT INTO items VALUES (1, 'before')")
        cur.execute("SELECT CONNECTION_ID()")
        first_id = cur.fetchone()[0]
    pinned = _connect(listen, "app@r7", ep.password)
    with pinned.cursor() as cur:
        cur.execute("SET @mine = 7")

    rc, out, err = slacker("migrate", "r7", "--to", "node-2", "--json")
    assert rc == 0 and json.loads(out)["result"] == "succeeded", err
    _connection_on(listen, "app@r7", ep.password, "node-2").close()  # the route has moved

    with mover.cursor() as cur:
        try:
            cur.execute("SELECT @@sql_mode, @@time_zone, DATABASE(), CONNECTION_ID()")
        except Exception:
            print((cluster.path.parent / "router" / "router.log").read_text()[-3000:])
            raise
        sql_mode, tz, db, conn_id = cur.fetchone()
        assert (sql_mode, tz, db) == ("ANSI_QUOTES", "+02:00", "shop") and conn_id != first_id
        assert _datadir_node(mover) == "node-2"
        cur.execute('INSERT INTO "items" VALUES (2, \'after\')')  # ANSI_QUOTES still in force
        cur.execute("SELECT COUNT(*) FROM items")
        assert cur.fetchone() == (2,)
    mover.close()
    # The pinned session is told why it cannot go on: never run on the new owner without its variable.
    with pytest.raises(pymysql.err.OperationalError) as e:
        with pinned.cursor() as cur:
            cur.execute("SELECT @mine")
    assert e.value.args[0] == 1927 and "a user variable" in e.value.args[1], e.value.args
    st = next(t for t in _status(admin)["tenants"] if t["tenant"] == "r7")
    assert st["moves_total"] >= 1 and st["ended_at_move_total"] == 1
