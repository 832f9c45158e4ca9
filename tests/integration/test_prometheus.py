"""A real Prometheus (Debian's package) scrapes a local cluster's agents and router during a migration, with
the shipped rules loaded: the migration's series read back through its HTTP API show what a user watches
(bytes copied rising, the phase changing, the router's hold, the flip), every rule evaluates, a router's
hold left to expire fires its alert, and every metric and label the rules and the dashboard query is one
the cluster really exported."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pymysql
import pytest
import yaml

from slacker.agent.client import cluster_clients
from slacker.client import resolve
from slacker.router import local as local_router
from slacker.router.freeze import RouterHold
from tests.promql_names import PROMETHEUS_OWN, RULES, concrete, dashboard_queries, rule_queries, uses

from benchkit.migration import create_loaded_tenant, start_migration, wait_migration


class Prometheus:
    """Prometheus on loopback with its own config and storage under `root`; killed by stop()."""

    def __init__(self, root: Path, agents: list[str], routers: list[str], token: str) -> None:
        self.binary = shutil.which("prometheus")
        assert self.binary, "prometheus is missing: scripts/install installs Debian's prometheus package"
        root.mkdir(parents=True, exist_ok=True)
        token_file = root / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "slacker-agent", "static_configs": [{"targets": agents}],
                 "authorization": {"type": "Bearer", "credentials_file": str(token_file)}},
                {"job_name": "slacker-router", "static_configs": [{"targets": routers}]},
            ],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(root / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as exc:  # a query Prometheus refuses: its reason
            doc = json.loads(exc.read())
        return doc

    def query(self, expr: str) -> list[dict]:
        doc = self.api("query", query=expr)
        assert doc["status"] == "success", f"{expr}: {doc.get('error')}"
        return doc["data"]["result"]

    def value(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, f"{expr}: {result}"
        return float(result[0]["value"][1])

    def wait_targets_up(self, n: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                up = self.query("up == 1")
                if len(up) >= n:
                    return
            except (OSError, AssertionError):
                up = []
            assert self.proc.poll() is None, f"prometheus exited: {self.log.name}"
            assert time.monotonic() < deadline, f"only {len(up)} of {n} targets up: {up}"
            time.sleep(0.5)


def exported(prom: Prometheus, since: float) -> dict[str, set[str]]:
    """Every series name Prometheus has stored since `since`, with the label names seen on it."""
    doc = prom.api("series", **{"match[]": ['{__name__=~"slacker.*|up"}'], "start": since})
    assert doc["status"] == "success", doc
    names: dict[str, set[str]] = {}
    for s in doc["data"]:
        names.setdefault(s["__name__"], set()).update(k for k in s if k != "__name__")
    return names


def unknown_names(expr: str, names: dict[str, set[str]]) -> list[str]:
    """What `expr` asks for that the exported series do not have: metrics, or labels on them."""
    u = uses(expr)
    known = names | PROMETHEUS_OWN
    wrong = [f"metric {m}" for m in u.metrics if m not in known]
    seen: set[str] = set()
    for metric, labels in u.selectors:
        if metric not in known:
            continue  # named above
        have = known[metric]
        seen |= have
        wrong += [f"label {label} on {metric}" for label in sorted(labels - have)]
    wrong += [f"label {label} in by/on/without" for label in sorted(u.grouping - seen)]
    return wrong


@pytest.mark.slow
def test_prometheus_scrapes_a_migration(make_cluster, short_tmp):
    cluster = make_cluster(nodes=2, stats_interval_s=1.0)
    admin = local_router.start(cluster.path.parent, cluster.path, "127.0.0.1:0")
    agents = [urllib.parse.urlparse(n.url).netloc for n in cluster.nodes.values()]
    # Prometheus scrapes with the monitor credential, as docs/deployment.md configures it.
    monitor = (cluster.path.parent / "credentials" / "monitor").read_text().strip()
    prom = Prometheus(short_tmp / "prom", agents, [admin], monitor)
    try:
        create_loaded_tenant(cluster, "pm", rows=6000)
        prom.wait_targets_up(len(agents) + 1)
        t0 = time.time()
        # A fixed rate through the controller's loop: its series are exported, and an idle tenant's copy
        # (about 120 MB with its redo log) takes some 12 s, a dozen scrapes.
        # It pauses 4 s after the flip (fault injection), so its time past the flip is seen; it keeps its old copy
        # (--keep-source), so the kept copy's series are seen.
        mig = start_migration(cluster, "pm", target="node-2", hold_s={"cleanup": 4}, keep_source_s=600.0,
                              controller={"kind": "fixed", "setpoint_s": 0.5, "rate_bytes_per_s": 10_000_000})
        doc = wait_migration(cluster, "node-1", mig["id"], timeout_s=300)
        assert doc["result"] == "succeeded", doc.get("error")
        time.sleep(4)  # a few scrapes and evaluations after the end
        window = f"[{int(time.time() - t0) + 5}s]"
        sel = f'{{migration="{mig["id"]}", tenant="pm", node="node-1"}}'

        # The copy as the user follows it: bytes rose over the migration, to what the agent reported.
        copied = prom.value(f"max_over_time(slacker_migration_copied_bytes{sel}{window})")
        first = prom.value(f"min_over_time(slacker_migration_copied_bytes{sel}{window})")
        assert first < copied and copied >= 0.9 * doc["bytes_done"] > 1_000_000, (first, copied, doc["bytes_done"])
        # Its phase changed: the copy was seen, and phases after it.
        phases = {r["metric"]["phase"] for r in prom.query(
            f"count by (phase) (count_over_time(slacker_migration_phase{sel}{window}))")}
        assert "snapshot" in phases and phases & {"prepare", "delta", "handover", "cleanup"}, phases
        # The controller's setpoint, and the migration's end counted on the source.
        assert prom.value(f"max_over_time(slacker_controller_setpoint_seconds{{migration=\"{mig['id']}\"}}{window})") == 0.5
        assert prom.value('slacker_migrations_finished_total{node="node-1", result="succeeded"}') == 1
        assert prom.query(f"slacker_migration_phase{sel}") == []  # a finished migration's series end
        # The handover: the freeze Prometheus saw is the one the migration reports, within its budget;
        # the source was seen finishing after the flip, for about the 4 s it was held there.
        freeze = prom.value(f"max_over_time(slacker_migration_freeze_seconds{sel}{window})")
        assert freeze == pytest.approx(doc["freeze_ms"] / 1000, abs=0.001)
        assert freeze <= prom.value(f"max_over_time(slacker_migration_freeze_budget_seconds{sel}{window})")
        assert 2 <= prom.value(f"max_over_time(slacker_migration_past_flip_seconds{sel}{window})") < 30
        # The router held the tenant once and followed the flip to a new epoch.
        assert prom.value(f'max_over_time(slacker_router_holds_total{{tenant="pm"}}{window})') >= 1
        assert prom.value(f'slacker_router_epoch{{tenant="pm"}}') > prom.value(
            f'min_over_time(slacker_router_epoch{{tenant="pm"}}{window})')
        assert prom.value('max(slacker_directory_healthy)') == 1
        assert prom.value('max_over_time(slacker_kept_copy_seconds_left{tenant="pm", node="node-1", owner="node-2"}'
                          f'{window})') > 500

        # Every shipped rule evaluates without error, and none fires on this healthy cluster.
        groups = prom.api("rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == len(rule_queries())
        assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
        assert prom.query('ALERTS{alertstate="firing"}') == []

        # A handover that dies after asking the router to hold the tenant: the router lets the held
        # command go at the hold's deadline, and the alert for it fires through Prometheus.
        host, port = local_router.listening(cluster.path.parent).rsplit(":", 1)
        conn = pymysql.connect(host=host, port=int(port), user="app@pm", password=resolve("pm", cluster).password,
                               ssl_disabled=True, autocommit=True, connect_timeout=5, read_timeout=60)
        with conn.cursor() as cur:  # a client between statements, as the hold finds them
            cur.execute("SELECT 1")
        RouterHold(cluster_clients(cluster)[1], cluster.token(), "pm").hold(drain_s=0.2, freeze_s=0.5)
        t_held = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM shop.items")
            assert cur.fetchone()[0] == 6000
        conn.close()
        assert time.monotonic() - t_held > 3  # it waited for the deadline (5.7 s from the hold)
        deadline = time.monotonic() + 30
        while not prom.query('ALERTS{alertname="SlackerRouterHoldExpired", alertstate="firing", tenant="pm"}'):
            assert time.monotonic() < deadline, "SlackerRouterHoldExpired never fired"
            time.sleep(0.5)
        assert prom.value('slacker_router_held_commands_total{tenant="pm"}') >= 1

        # Every metric and label the rules and the dashboard ask for is one the cluster exported.
        names = exported(prom, t0 - 120)
        assert "slacker_migration_phase" in names and "slacker_router_connections" in names
        # A recorded series exists once its inputs do (an idle cluster has no latency to average): its
        # labels are its expression's by clause, whose own names are checked below.
        for _, expr, rule in rule_queries():
            if "record" in rule:
                names.setdefault(rule["record"], uses(expr).grouping)
        wrong = {}
        for where, expr, rule in rule_queries():
            bad = unknown_names(expr, names)
            labels = set().union(*(names.get(m, PROMETHEUS_OWN.get(m, set())) for m in uses(expr).metrics))
            for text in rule.get("annotations", {}).values():
                bad += [f"label {x} in an annotation" for x in _template_labels(text) if x not in labels]
            if bad:
                wrong[where] = bad
        for where, expr in dashboard_queries():
            bad = unknown_names(concrete(expr), names)
            ans = prom.api("query", query=concrete(expr))
            if ans["status"] != "success":
                bad.append(f"refused: {ans.get('error')}")
            if bad:
                wrong[where] = bad
        assert wrong == {}
    finally:
        prom.stop()
        local_router.stop(cluster.path.parent)


def _template_labels(text: str) -> list[str]:
    return re.findall(r"\$labels\.(\w+)", text)


@pytest.mark.parametrize("expr, problem", [
    ('slacker_migration_copied_byte{tenant="a"}', "metric slacker_migration_copied_byte"),
    ('slacker_migration_copied_bytes{tennant="a"}', "label tennant on slacker_migration_copied_bytes"),
    ("sum by (host) (slacker_router_connections)", "label host in by/on/without"),
])
def test_name_check_catches_a_renamed_metric_or_label(expr, problem):
    """The check above can fail: a misspelt metric or label is named (against a fixed exported set)."""
    names = {"slacker_migration_copied_bytes": {"node", "migration", "tenant", "job", "instance"},
             "slacker_router_connections": {"tenant", "job", "instance"}}
    assert unknown_names(expr, names) == [problem]
