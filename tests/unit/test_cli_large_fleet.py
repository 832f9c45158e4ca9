"""`slacker status` and `slacker tenant list` on a large fleet: a summary by default, every row with --all
or --json, filters by node, id glob and state; and what they ask: one directory read, one request per agent."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from slacker.cli import main, tenant_cmd
from slacker.directory import Ownership


class FakeAgent:
    def __init__(self, name: str, tenants: list[dict]) -> None:
        self.name, self.url, self.tenants, self.calls = name, f"http://{name}:7000", tenants, []

    def request(self, method, path, body=None, timeout_s=None, query=None):
        self.calls.append(path)
        if path == "/v1/tenants":
            return {"node": self.name, "tenants": self.tenants}
        if path == "/v1/status":
            return {"node": self.name, "protocol": 2, "tenants": self.tenants, "migrations": []}
        raise AssertionError(path)


class FakeDirectory:
    def __init__(self, owners: list[Ownership]) -> None:
        self.owners, self.reads = owners, 0

    def list(self):
        self.reads += 1
        return list(self.owners)

    def health(self):
        return {"backend": "etcd", "healthy": True, "members": [], "leader": None}

    def cordons(self):
        return {}


def _fleet(n: int, nodes: int = 3):
    per = {f"node-{k + 1}": [] for k in range(nodes)}
    owners = []
    for i in range(n):
        node = f"node-{i % nodes + 1}"
        tid = f"t{i:05d}"
        down = i % 97 == 0
        per[node].append({"id": tid, "node": node, "host": "10.0.0.1", "port": 30000 + i, "running": not down,
                          "healthy": not down, "queries_per_s": float(i % 13), "connections": 1})
        owners.append(Ownership(tid, node, "10.0.0.1", 30000 + i, 1, 0.0))
    agents = {name: FakeAgent(name, ts) for name, ts in per.items()}
    cluster = SimpleNamespace(path="/x/cluster.toml", found_by="--cluster", directory_node=None,
                              directory_backend="etcd", tls_ca=None,
                              node=lambda name: agents[name] if name in agents else pytest.fail(f"unknown {name}"))
    return cluster, agents, FakeDirectory(owners)


@pytest.fixture
def fleet(monkeypatch):
    made = {}

    def make(n: int):
        made["fleet"] = _fleet(n)
        monkeypatch.setattr(tenant_cmd, "_clients", lambda cli: made["fleet"])
        return made["fleet"]
    return make


def run(*args):
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_tenant_list_prints_a_summary_of_a_large_fleet(fleet):
    _, agents, directory = fleet(3000)
    out = run("tenant", "list")
    lines = out.splitlines()
    assert len(lines) < 25, out  # per node and the 10 busiest, not 3,000 rows
    assert any(ln.startswith("node-1") and " 1000 " in ln for ln in lines), out
    assert "busiest 10 of 3000:" in out and "3000 tenants: a summary" in out
    assert directory.reads == 1 and all(a.calls == ["/v1/tenants"] for a in agents.values())
    assert len(run("tenant", "list", "--all").splitlines()) == 3002
    assert len(json.loads(run("tenant", "list", "--json"))["tenants"]) == 3000


def test_tenant_list_filters(fleet):
    _, agents, _ = fleet(3000)
    doc = json.loads(run("tenant", "list", "--json", "--node", "node-2", "--tenant", "t001*"))
    assert {r["node"] for r in doc["tenants"]} == {"node-2"}
    assert all(r["id"].startswith("t001") for r in doc["tenants"]) and 0 < len(doc["tenants"]) < 60
    assert agents["node-1"].calls == []  # only the node asked for is asked
    down = json.loads(run("tenant", "list", "--json", "--state", "down"))["tenants"]
    assert [r["id"] for r in down] == [f"t{i:05d}" for i in range(0, 3000, 97)]
    out = run("tenant", "list", "--state", "down")  # 31 rows: under the summary's threshold, a table
    assert len(out.splitlines()) == 33


def test_a_small_fleet_is_listed_in_full(fleet):
    fleet(12)
    assert len(run("tenant", "list").splitlines()) == 14
    assert "t00004" in run("status")


def test_status_counts_tenants_per_node_and_asks_each_agent_once(fleet):
    _, agents, _ = fleet(3000)
    out = run("status")
    assert len(out.splitlines()) < 30, out
    assert "1000 (989 up)" in out or "1000 (990 up)" in out, out
    assert "busiest 10 of 3000 tenants:" in out
    assert all(a.calls == ["/v1/status"] for a in agents.values())
    doc = json.loads(run("status", "--json"))
    assert sum(len(n["tenants"]) for n in doc["nodes"]) == 3000
    doc = json.loads(run("status", "--json", "--node", "node-3", "--state", "down"))
    assert [n["node"] for n in doc["nodes"]] == ["node-3"]
    assert all(t["healthy"] is False for t in doc["nodes"][0]["tenants"]) and doc["nodes"][0]["tenants"]
    assert "t00001" in run("status", "--all")
