"""The agent as a daemon: authentication, directory API, metrics, restart with running tenants."""

import http.client
import json
import threading
import time
from urllib.parse import urlparse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slacker import local_cluster
from slacker.agent.client import AgentClient, cluster_clients
from slacker.errors import Conflict, NotFound, Unauthorized

from .conftest import TEST_PORT_RANGE
from slacker.procs import alive, read_pid


def raw(url, method, path, headers=None):
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    return r.status, r.read()


@pytest.mark.parametrize("method,path", [("GET", "/v1/status"), ("GET", "/metrics"), ("GET", "/v1/tenants"),
                                         ("POST", "/v1/tenants"), ("DELETE", "/v1/tenants/t1"),
                                         ("GET", "/v1/directory/tenants"), ("POST", "/v1/shutdown")])
def test_unauthenticated_requests_are_refused(cluster, method, path):
    url = cluster.node("node-1").url
    for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": cluster.token()}):
        status, body = raw(url, method, path, headers)
        assert status == 401, (method, path, headers)
        assert json.loads(body)["error"] == "Unauthorized"
    # and the agent is still up after all that
    assert AgentClient(url, cluster.token()).request("GET", "/v1/status")["node"] == "node-1"


def test_wrong_token_client_gets_unauthorized(cluster):
    with pytest.raises(Unauthorized):
        AgentClient(cluster.node("node-2").url, "x" * 32).request("GET", "/v1/status")


def test_directory_cas_and_watch(cluster):
    agents, directory = cluster_clients(cluster)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "dir1"}, timeout_s=120)
    own = directory.lookup("dir1")
    assert (own.node, own.epoch) == ("node-1", 1)
    with pytest.raises(Conflict):
        directory.register("dir1", "node-2", "127.0.0.9", 1)
    # a watcher blocked on epoch 1 wakes up when the epoch moves
    seen = []
    t = threading.Thread(target=lambda: seen.append(directory.watch("dir1", 1, 20)))
    t.start()
    time.sleep(0.3)
    moved = directory.compare_and_set("dir1", 1, "node-2", own.host, own.port)
    t.join(10)
    assert moved.epoch == 2 and seen and seen[0].epoch == 2 and seen[0].node == "node-2"
    with pytest.raises(Conflict):  # stale epoch
        directory.compare_and_set("dir1", 1, "node-1", own.host, own.port)
    assert directory.watch("dir1", 2, 0.2) is None  # times out, nothing moved
    directory.compare_and_set("dir1", 2, "node-1", own.host, own.port)
    with pytest.raises(NotFound):
        directory.lookup("nope")


def test_metrics_report_tenants(cluster):
    agents, _ = cluster_clients(cluster)
    agents["node-2"].request("POST", "/v1/tenants", {"id": "m1"}, timeout_s=120)
    deadline = time.monotonic() + 15
    while True:
        status, body = raw(cluster.node("node-2").url, "GET", "/metrics",
                           {"Authorization": f"Bearer {cluster.token()}"})
        assert status == 200
        fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
        up = [s.value for s in fams["slacker_tenants_up"].samples]
        if up == [1.0] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert up == [1.0]
    tenant_up = {s.labels["tenant"]: s.value for s in fams["slacker_tenant_up"].samples}
    assert tenant_up == {"m1": 1.0}
    assert "slacker_tenant_queries_per_second" in fams and "slacker_tenant_connections" in fams


def test_agent_restart_finds_running_tenants(cluster):
    agents, _ = cluster_clients(cluster)
    created = agents["node-2"].request("POST", "/v1/tenants", {"id": "keep"}, timeout_s=120)
    run_dir = cluster.path.parent
    node_dir = run_dir / "node-2"
    from slacker.tenants import TenantManager
    mgr = TenantManager(node_dir, host=created["host"], node="node-2")
    tenant_pid = mgr.get("keep").pid()
    agent_pid = read_pid(node_dir / "agent.pid")
    import os
    import signal
    os.kill(agent_pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while alive(agent_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(agent_pid)
    assert alive(tenant_pid)  # tenants keep running when the agent stops
    # bring the agent back: it must adopt the running tenant, not start a second one
    first = cluster.node("node-1").tenant_host
    local_cluster.up(run_dir, nodes=2, first_address=first, api_port=urlparse(cluster.node("node-1").url).port,
                     port_range="%d-%d" % TEST_PORT_RANGE)
    tenants = agents["node-2"].request("GET", "/v1/tenants")["tenants"]
    assert [(t["id"], t["running"]) for t in tenants] == [("keep", True)]
    assert mgr.get("keep").pid() == tenant_pid


def test_supervisor_restarts_a_crashed_tenant(cluster):
    agents, _ = cluster_clients(cluster)
    created = agents["node-1"].request("POST", "/v1/tenants", {"id": "phoenix"}, timeout_s=120)
    from slacker.tenants import TenantManager
    mgr = TenantManager(cluster.path.parent / "node-1", host=created["host"], node="node-1")
    t = mgr.get("phoenix")
    old = t.pid()
    mgr.kill_tenant(t)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pid = t.pid()
        if pid and pid != old:
            break
        time.sleep(0.5)
    assert t.pid() and t.pid() != old
