"""Scoped credentials on a real local cluster (issue 52, least privilege).

A table of request x credential -> answer, asserted against the agents: the router credential
follows the directory, announces itself, reads login hashes and holds, and is refused migrate,
delete, drain/cordon and passwords with one line; the monitor credential reads and nothing else;
an unknown token is 401. And the local router, holding only the router credential, still logs a
client in and takes part in a live migration's handover."""

import http.client
import json
import time
from urllib.parse import urlparse

import pytest

from slacker.agent.client import cluster_clients
from slacker.credentials import Keyring, hold_token
from slacker.router.freeze import RouterHold

from .test_cli import one_line_error, slacker
from .test_router import _connect, _datadir_node, _status, _tenant


def _raw(url: str, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=15)
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Authorization": f"Bearer {token}",
                                               **({"Content-Type": "application/json"} if data else {})})
    r = c.getresponse()
    raw = r.read()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, {"text": raw[:80]}


def _creds(cluster) -> dict[str, str]:
    run = cluster.path.parent
    return {"admin": cluster.token(), "router": (run / "credentials" / "router").read_text().strip(),
            "monitor": (run / "credentials" / "monitor").read_text().strip(), "wrong": "wrong-token-" + "x" * 20}


# request -> answer per credential (admin, router, monitor). Admin's requests that would change the
# cluster are made so they fail after the scope check (a 400 or a 404 shows the scope let them through).
TABLE = [
    (("GET", "/v1/status", None), (200, 403, 200)),
    (("GET", "/metrics", None), (200, 403, 200)),
    (("GET", "/v1/tenants", None), (200, 403, 200)),
    (("GET", "/v1/tenant-stats", None), (200, 403, 200)),
    (("GET", "/v1/migrations", None), (200, 403, 200)),
    (("GET", "/v1/directory/tenants", None), (200, 200, 200)),
    (("GET", "/v1/directory/tenants/c1", None), (200, 200, 200)),
    (("GET", "/v1/directory/tenants/c1/watch?after=0&timeout=0", None), (200, 200, 200)),
    (("GET", "/v1/directory/changes?timeout=0", None), (200, 200, 200)),
    (("GET", "/v1/directory/state?prefix=routers/", None), (200, 200, 200)),
    (("GET", "/v1/tenants/c1/login", None), (200, 200, 403)),
    (("GET", "/v1/tenants/c1/credentials", None), (200, 403, 403)),
    (("POST", "/v1/directory/state/routers/test-x", {"value": {"admin": ""}}), (200, 200, 403)),
    (("DELETE", "/v1/directory/state/routers/test-x", None), (200, 200, 403)),
    (("POST", "/v1/directory/state/nodes/cordon/node-9", {"value": {}}), (None, 403, 403)),
    (("POST", "/v1/directory/locks/drain/node-1", {"holder": "h"}), (400, 403, 403)),
    (("POST", "/v1/tenants", {}), (400, 403, 403)),
    (("DELETE", "/v1/tenants/nosuch", None), (404, 403, 403)),
    (("POST", "/v1/migrations", {}), (400, 403, 403)),
    (("POST", "/v1/directory/tenants/c1/cas", {"expected_epoch": "x"}), (400, 403, 403)),
    (("POST", "/v1/incoming", {}), (None, 403, 403)),
    (("POST", "/v1/shutdown", None), (None, 403, 403)),
]


def test_request_by_credential_table(routed):
    cluster, listen, admin = routed
    _tenant(cluster, admin, "c1", "node-1")
    creds = _creds(cluster)
    url = cluster.node("node-1").url
    seen = []
    for (method, path, body), answers in TABLE:
        for scope, want in zip(("admin", "router", "monitor", "wrong"), (*answers, 401)):
            if want is None:  # admin would really do it (shut the agent down): not asked
                continue
            status, doc = _raw(url, method, path, creds[scope], body)
            seen.append(f"{scope:8s} {method:6s} {path:55s} {status}")
            assert status == want, (scope, method, path, status, doc)
            if status == 403:
                line = f"{doc['what']}: {doc['why']}"
                assert doc["error"] == "Forbidden" and line.startswith(f"the {scope} credential may not ")
                assert line.endswith("it needs admin") or line.endswith("it needs admin or router") \
                    or line.endswith("it needs admin or monitor"), line
                assert "\n" not in line
            if status == 401:
                assert doc["error"] == "Unauthorized"
    print("\n".join(seen))
    # The exact lines a router host meets.
    assert _raw(url, "DELETE", "/v1/tenants/c1", creds["router"])[1]["what"] == \
        "the router credential may not delete tenants"
    assert _raw(url, "GET", "/v1/tenants/c1/credentials", creds["router"])[1]["what"] == \
        "the router credential may not read a tenant's password"
    # The login hash is the hash, never the password.
    login = _raw(url, "GET", "/v1/tenants/c1/login", creds["router"])[1]
    password = _raw(url, "GET", "/v1/tenants/c1/credentials", creds["admin"])[1]["password"]
    assert set(login) == {"tenant", "node", "user", "hash"} and password not in json.dumps(login)
    # Nothing the refused requests asked for happened.
    assert _raw(url, "GET", "/v1/directory/tenants/c1", creds["admin"])[1]["node"] == "node-1"
    assert _raw(url, "GET", "/v1/directory/state/nodes/cordon/node-9", creds["admin"])[1]["value"] is None


def test_cli_with_each_credential(routed):
    cluster, listen, admin = routed
    _tenant(cluster, admin, "c2", "node-1")
    run = cluster.path.parent
    router, monitor = str(run / "credentials" / "router"), str(run / "credentials" / "monitor")
    for argv, needle in ((["migrate", "c2", "--to", "node-2"], "may not"),
                         (["tenant", "delete", "c2", "--yes"], "may not delete tenants: it needs admin"),
                         (["node", "cordon", "node-1"], "may not cordon nodes: it needs admin"),
                         (["node", "drain", "node-1"], "may not"),
                         (["credential", "show", "--scope", "monitor"], "needs the admin credential")):
        for cred, scope in ((router, "router"), (monitor, "monitor")):
            rc, out, err = slacker("--credential", cred, *argv)
            one_line_error(rc, err, needle)
            assert "router" in err or "monitor" in err
    rc, out, err = slacker("--credential", monitor, "status")
    assert rc == 0, err
    rc, out, err = slacker("--credential", router, "credential", "info")
    assert rc == 0 and out.strip().endswith("the router credential (generation 1)") and "slacker-" not in out
    # Nothing moved, nothing was deleted, nothing is cordoned.
    _, directory = cluster_clients(cluster)
    assert directory.lookup("c2").node == "node-1" and directory.cordons() == {}
    # Admin mints the files cluster up wrote.
    rc, out, err = slacker("credential", "show", "--scope", "router")
    assert rc == 0 and out.strip() == (run / "credentials" / "router").read_text().strip()


def test_router_with_router_credential_logs_in_and_holds(routed):
    cluster, listen, admin = routed
    run = cluster.path.parent
    ep = _tenant(cluster, admin, "c3", "node-1")
    # The router runs with the router credential only, and says so in the directory.
    cmdline = open(f"/proc/{int((run / 'router' / 'router.pid').read_text())}/cmdline").read().split("\0")
    assert cmdline[cmdline.index("--credential") + 1] == str(run / "credentials" / "router")
    _, directory = cluster_clients(cluster)
    announced = [r for r in directory.state_list("routers/").values() if r.get("admin") == admin]
    assert announced and announced[0]["credential"] == {"scope": "router", "generation": 1}
    # A bearer from the admin secret (what agents sent before scoped credentials) does not hold it.
    status, _ = _raw(f"http://{admin}", "POST", "/hold?tenant=c3&drain_ms=10&hold_ms=100", hold_token(cluster.token()))
    assert status == 401
    # An agent's hold (derived from the admin secret and the announced generation) does.
    hold = RouterHold(directory, Keyring(cluster.token()), "c3").hold(drain_s=0.2, freeze_s=0.2)
    assert hold.held == [admin] and not hold.missing
    hold.release()

    conn = _connect(listen, "app@c3", ep.password)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE k")
        cur.execute("CREATE TABLE k.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO k.t VALUES (1)")
    assert _datadir_node(conn) == "node-1"
    rc, out, err = slacker("migrate", "c3", "--to", "node-2", "--json")
    assert rc == 0 and json.loads(out)["result"] == "succeeded", err
    # The same session carries on, now on node-2: the router moved it in the handover's hold.
    with conn.cursor() as cur:
        cur.execute("INSERT INTO k.t VALUES (2)")
        cur.execute("SELECT COUNT(*) FROM k.t")
        assert cur.fetchone() == (2,)
    assert _datadir_node(conn) == "node-2"
    conn.close()
    st = next(t for t in _status(admin)["tenants"] if t["tenant"] == "c3")
    assert st["node"] == "node-2" and st.get("holds_total", 0) >= 2  # our hold and the migration's
    log = (run / "router" / "router.log").read_text()
    assert "may not" not in log  # the router never asked for anything outside its scope


def test_etcd_auth_limits_router_and_monitor(make_cluster):
    """With the etcd directory a router talks to etcd itself: `slacker credential etcd-auth` turns on
    etcd's authentication, after which the router credential reads the directory and writes only its
    own `routers/` keys, the monitor credential only reads, and the running agents and router carry
    on (they log in when etcd first asks) through a live migration."""
    from slacker.directory import EtcdStore
    from slacker.directory.etcd import etcd_login
    from slacker.errors import Forbidden, SlackerError
    from slacker.router import local as local_router

    cluster = make_cluster(nodes=2, directory="etcd")
    run = cluster.path.parent
    admin = local_router.start(run, cluster.path, "127.0.0.1:0")
    listen = local_router.listening(run)
    creds = _creds(cluster)

    def store(scope: str | None) -> EtcdStore:
        auth = etcd_login(scope, creds[scope], cluster.etcd_prefix) if scope else None
        return EtcdStore(cluster.etcd_endpoints, cluster.etcd_prefix, timeout_s=3, auth=auth)

    ep = _tenant(cluster, admin, "e1", "node-1")
    # Before: etcd lets anyone with its address write the directory.
    store(None).state_put("routers/before", {"admin": ""})
    rc, out, err = slacker("credential", "etcd-auth")
    assert rc == 0 and "authentication enabled" in out, err
    rc, out, err = slacker("credential", "etcd-auth")  # again: nothing breaks
    assert rc == 0, err

    refused = {}
    for scope in (None, "router", "monitor"):
        s = store(scope)
        for name, op in (("lookup", lambda: s.lookup("e1")),
                         ("register", lambda: s.register("zz", "node-1", "127.0.0.9", 1)),
                         ("cordon", lambda: s.cordon("node-1", by="test")),
                         ("announce", lambda: s.state_put(f"routers/test-{scope or 'anon'}", {"admin": ""}))):
            try:
                op()
                refused[(scope, name)] = "ok"
            except Forbidden as exc:
                refused[(scope, name)] = "forbidden"
                assert "\n" not in exc.one_line()
            except SlackerError as exc:
                refused[(scope, name)] = type(exc).__name__
    print(refused)
    assert refused[("router", "lookup")] == refused[("monitor", "lookup")] == "ok"
    assert refused[("router", "announce")] == "ok"
    for who in ("router", "monitor"):
        assert refused[(who, "register")] == refused[(who, "cordon")] == "forbidden", who
    assert refused[("monitor", "announce")] == "forbidden"
    assert all(refused[(None, n)] != "ok" for n in ("lookup", "register", "cordon", "announce"))
    rc, _, err = slacker("--credential", str(run / "credentials" / "router"), "node", "cordon", "node-1")
    one_line_error(rc, err, "etcd refused")

    # The agents and the router carry on: a new tenant is created and routed, a move is handed over.
    ep2 = _tenant(cluster, admin, "e2", "node-2")
    conn = _connect(listen, "app@e1", ep.password)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE k")
        cur.execute("CREATE TABLE k.t (id INT PRIMARY KEY)")
    rc, out, err = slacker("migrate", "e1", "--to", "node-2", "--json")
    assert rc == 0 and json.loads(out)["result"] == "succeeded", err
    with conn.cursor() as cur:
        cur.execute("INSERT INTO k.t VALUES (1)")
    assert _datadir_node(conn) == "node-2"
    conn.close()
    _connect(listen, "app@e2", ep2.password).close()
    st = next(t for t in _status(admin)["tenants"] if t["tenant"] == "e1")
    assert st["node"] == "node-2" and st.get("holds_total", 0) >= 1
    local_router.stop(run)
