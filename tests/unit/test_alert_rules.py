"""The shipped alerting rules load in Prometheus and each alert fires on its synthetic series, and only there
(deploy/prometheus/slacker-rules.test.yml, run by Debian's promtool)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "slacker-rules.yml"
RULE_TESTS = RULES_DIR / "slacker-rules.test.yml"

PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess:
    assert PROMTOOL, "promtool is missing: scripts/install installs Debian's prometheus package"
    return subprocess.run([PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120)


def test_rules_load():
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_fires_and_stays_quiet_on_synthetic_series():
    r = promtool("test", "rules", str(RULE_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_a_firing_and_a_quiet_case():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    fires, quiet = set(), set()
    for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert alerts - fires == set(), "alerts without a firing case"
    assert alerts - quiet == set(), "alerts without a case where they must not fire"


def test_a_broken_expectation_fails(tmp_path):
    """The promtool run can fail: an alert expected where the series say otherwise is reported."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    doc["rule_files"] = [str(RULES)]
    case = doc["tests"][0]["alert_rule_test"][0]  # agent down, not yet for a minute: no alert
    case["exp_alerts"] = [{"exp_labels": {"severity": "page", "job": "slacker-agent", "instance": "n1:9440"}}]
    broken = tmp_path / "broken.test.yml"
    broken.write_text(yaml.safe_dump(doc))
    r = promtool("test", "rules", str(broken))
    assert r.returncode != 0 and "SlackerAgentDown" in r.stdout + r.stderr
