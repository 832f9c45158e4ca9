"""Scoped credentials (slacker/credentials.py): derivation, verification, the route -> scope table."""

import json
from types import SimpleNamespace

import pytest

from slacker import credentials as cr
from slacker.errors import Forbidden, InvalidInput

SECRET = "a" * 64


def _check(scope: str, method: str, route: str, *args: str) -> str:
    """'ok' or the one-line refusal of `scope` calling `route` (a registered pattern or a template)."""
    cred = cr.Credential(scope, "x")
    try:
        cr.check(cr.rules_for(method, route), cred, args)
        return "ok"
    except Forbidden as exc:
        return exc.one_line()


def test_each_scope_verifies_and_names_itself():
    ring = cr.Keyring(SECRET)
    router, monitor = cr.derive(SECRET, "router"), cr.derive(SECRET, "monitor")
    assert ring.verify(SECRET).scope == "admin"
    assert ring.verify(router) == cr.Credential("router", router, 1)
    assert ring.verify(monitor).scope == "monitor"
    assert cr.parse(router).scope == "router" and cr.parse(SECRET).scope == "admin"
    assert router != monitor and SECRET not in router
    assert SECRET not in repr(cr.parse(SECRET)) and router not in str(cr.parse(router))


def test_a_forged_or_foreign_credential_is_unknown():
    ring = cr.Keyring(SECRET)
    other = cr.derive("b" * 64, "router")  # another cluster's router credential
    forged = cr.derive(SECRET, "monitor").replace("monitor", "router")  # a monitor relabelled
    for token in (other, forged, "wrong-token-wrong-token", "", SECRET[:-1]):
        assert ring.verify(token) is None


def test_raising_the_generation_revokes_the_older_ones_only():
    ring = cr.Keyring(SECRET, {"router": 2})
    assert ring.verify(cr.derive(SECRET, "router", 1)) is None
    assert ring.verify(cr.derive(SECRET, "router", 2)).generation == 2
    assert ring.verify(cr.derive(SECRET, "router", 3)).generation == 3  # handed out ahead of the floor
    assert ring.verify(cr.derive(SECRET, "monitor", 1)).scope == "monitor"  # other scopes untouched
    assert ring.hold_token_for("router", 1) is None
    assert ring.hold_token_for("router", 2) == cr.hold_token(cr.derive(SECRET, "router", 2))
    with pytest.raises(InvalidInput):
        cr.derive(SECRET, "admin")


def test_the_hold_needs_no_admin_secret_on_the_router():
    """A router checks /hold against a hash of its own credential; the agent reaches the same value
    from the admin secret and the generation the router announced."""
    router = cr.derive(SECRET, "router", 4)
    assert cr.Keyring(SECRET).hold_token_for("router", 4) == cr.hold_token(router)
    assert cr.Keyring(SECRET).hold_token_for("admin", 1) == cr.hold_token(SECRET)  # a router run as admin


@pytest.mark.parametrize("scope,method,route,args,answer", [
    ("router", "DELETE", "/v1/tenants/{tenant}", ("t1",), "the router credential may not delete tenants: it needs admin"),
    ("router", "POST", "/v1/migrations", (), "the router credential may not migrate tenants: it needs admin"),
    ("router", "GET", "/v1/tenants/{tenant}/credentials", ("t1",),
     "the router credential may not read a tenant's password: it needs admin"),
    ("router", "GET", "/v1/tenants/{tenant}/login", ("t1",), "ok"),
    ("monitor", "GET", "/v1/tenants/{tenant}/login", ("t1",),
     "the monitor credential may not read a tenant's login hash: it needs admin or router"),
    ("router", "POST", "/v1/directory/state/{key}", ("routers/10.0.0.5-6033",), "ok"),
    ("router", "DELETE", "/v1/directory/state/{key}", ("routers/10.0.0.5-6033",), "ok"),
    ("router", "POST", "/v1/directory/state/{key}", ("nodes/cordon/node-1",),
     "the router credential may not cordon nodes: it needs admin"),
    ("router", "POST", "/v1/directory/state/{key}", ("drain/node-1",),
     "the router credential may not drain nodes: it needs admin"),
    ("router", "POST", "/v1/directory/state/{key}", ("rebalance/last",),
     "the router credential may not write the directory's state: it needs admin"),
    ("monitor", "POST", "/v1/directory/state/{key}", ("routers/x",),
     "the monitor credential may not announce a router: it needs admin or router"),
    ("router", "GET", "/v1/directory/tenants/{tenant}/watch", ("t1",), "ok"),
    ("router", "POST", "/v1/directory/tenants/{tenant}/cas", ("t1",),
     "the router credential may not change a tenant's owner: it needs admin"),
    ("router", "GET", "/v1/status", (), "the router credential may not read the node's status: it needs admin or monitor"),
    ("monitor", "GET", "/v1/status", (), "ok"),
    ("monitor", "GET", "/metrics", (), "ok"),
    ("monitor", "GET", "/v1/migrations/{migration}", ("m1",), "ok"),
    ("monitor", "POST", "/v1/migrations/{migration}/abort", ("m1",),
     "the monitor credential may not abort migrations: it needs admin"),
    ("monitor", "POST", "/v1/incoming/{migration}/activate", ("m1",),
     "the monitor credential may not receive migrations: it needs admin"),
    ("monitor", "POST", "/v1/shutdown", (), "the monitor credential may not shut agents down: it needs admin"),
    ("admin", "POST", "/v1/shutdown", (), "ok"),
    ("monitor", "POST", "/v1/not-in-the-table", (),
     "the monitor credential may not use POST /v1/not-in-the-table: it needs admin"),
])
def test_the_table_answers(scope, method, route, args, answer):
    assert _check(scope, method, route, *args) == answer


def test_monitor_may_read_and_nothing_else():
    for rule in cr.ACCESS:
        secret = rule.route.endswith(("/credentials", "/login", "/logins"))  # a password, or what checks one
        assert ("monitor" in rule.scopes) == (rule.method == "GET" and not secret), rule


def test_router_may_only_what_following_needs():
    allowed = {(r.method, r.route, r.under) for r in cr.ACCESS if "router" in r.scopes}
    assert allowed == {
        ("GET", "/v1/tenants/{tenant}/login", ""), ("GET", "/v1/logins", ""), ("GET", "/v1/directory/tenants", ""),
        ("GET", "/v1/directory/changes", ""), ("GET", "/v1/directory/members", ""),  # which agents to ask
        ("GET", "/v1/directory/tenants/{tenant}", ""), ("GET", "/v1/directory/tenants/{tenant}/watch", ""),
        ("GET", "/v1/directory/health", ""), ("GET", "/v1/directory/state", ""),
        ("GET", "/v1/directory/state/{key}", ""), ("POST", "/v1/directory/state/{key}", "routers/"),
        ("DELETE", "/v1/directory/state/{key}", "routers/")}


class _Recorder:
    """Stands in for ApiServer: records what the agent's modules register."""

    def __init__(self, node) -> None:
        self.node, self.routes = node, []

    def route(self, method, pattern):
        def deco(fn):
            self.routes.append((method, cr.template(pattern)))
            return fn
        return deco


def test_every_route_the_agent_serves_is_in_the_table(monkeypatch):
    from slacker.agent import server, tenant_stats
    from slacker.migration import service

    node = SimpleNamespace(name="n", supervisor=SimpleNamespace(on_tick=[], busy=set(), interval_s=1.0),
                           registry=SimpleNamespace(register=lambda c: None), tenants=None, kinds={},
                           config=SimpleNamespace(stats_interval_s=60.0, stats_history=30))
    monkeypatch.setattr(service, "MigrationService", lambda node, participants: SimpleNamespace(incoming=None, tick=None))
    monkeypatch.setattr(service, "MigrationCollector", lambda *a: None)
    monkeypatch.setattr(tenant_stats, "TenantStats", lambda *a, **k: None)
    monkeypatch.setattr(tenant_stats, "TenantStatsCollector", lambda *a: None)
    rec = _Recorder(node)
    server._add_core_routes(rec)
    tenant_stats.attach(node, rec)
    service.attach(node, rec, None)
    served = set(rec.routes) | {("GET", "/metrics")}
    table = {r.key for r in cr.ACCESS}
    assert served - table == set(), "routes the table does not name (admin only by default)"
    assert table - served == set(), "rules for routes the agent does not serve"


def test_routes_command_prints_the_table():
    from click.testing import CliRunner

    from slacker.cli import main

    r = CliRunner().invoke(main, ["credential", "routes", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["routes"]
    assert len(rows) == len(cr.ACCESS)
    assert {"method": "DELETE", "route": "/v1/tenants/{tenant}", "may": ["admin"], "action": "delete tenants"} in rows


def _cluster_file(tmp_path, top: str, token: str) -> str:
    cred = tmp_path / "cred"
    cred.write_text(token + "\n")
    cred.chmod(0o600)
    f = tmp_path / "cluster.toml"
    f.write_text(top.replace("CRED", str(cred)) + '\n[[nodes]]\nname = "node-1"\nurl = "http://127.0.0.2:7701"\n')
    return str(f)


def test_cluster_file_names_the_credential(tmp_path):
    from slacker.config import load_cluster

    old = load_cluster(_cluster_file(tmp_path, 'token_file = "CRED"', SECRET))  # a cluster from before scopes
    assert old.credential().scope == "admin" and old.keyring().verify(cr.derive(SECRET, "monitor")).scope == "monitor"
    router = load_cluster(_cluster_file(tmp_path, 'credential_file = "CRED"\n[min_credential_generation]\nrouter = 3',
                                        cr.derive(SECRET, "router", 3)))
    assert router.credential() == cr.Credential("router", cr.derive(SECRET, "router", 3), 3)
    assert router.min_generation == {"router": 3}
    with pytest.raises(InvalidInput, match="agent node-1 needs the admin credential"):
        router.keyring("agent node-1")
    with pytest.raises(InvalidInput, match="both credential_file and token_file"):
        load_cluster(_cluster_file(tmp_path, 'credential_file = "CRED"\ntoken_file = "CRED"', SECRET))
    with pytest.raises(InvalidInput, match="bad min_credential_generation"):
        load_cluster(_cluster_file(tmp_path, 'credential_file = "CRED"\n[min_credential_generation]\nadmin = 2', SECRET))
    with pytest.raises(InvalidInput, match="lacks 'credential_file'"):
        load_cluster(_cluster_file(tmp_path, 'directory = "node-1"', SECRET))
