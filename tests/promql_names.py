"""What a PromQL expression asks of the series it reads: the metric names it selects, the label names its
selectors match on, and the label names its by/without/on/ignoring/group_* clauses use; and every query
of the shipped rules and dashboard. The observability tests check these against what the project really
exports (tests/integration/test_prometheus.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "slacker-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "slacker-dashboard.json"

# Series Prometheus makes itself, not the project: a target's health and the alerts' own series.
PROMETHEUS_OWN = {"up": {"job", "instance"}, "ALERTS": {"alertname", "alertstate", "severity"}}

_TOKEN = re.compile(r"""
    (?P<space>\s+) | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*') | (?P<range>\[[^\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_])) | (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![A-Za-z_])) | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},])
""", re.VERBOSE)
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                 "quantile"}  # may be followed by a by/without clause instead of their "("
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"} | _GROUPING | _AGGREGATIONS


@dataclass
class Uses:
    """What one expression reads."""
    selectors: list[tuple[str, set[str]]] = field(default_factory=list)  # (metric, labels matched)
    grouping: set[str] = field(default_factory=set)  # labels of by/without/on/ignoring/group_*

    @property
    def metrics(self) -> set[str]:
        return {m for m, _ in self.selectors}


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read PromQL at {expr[pos:pos + 20]!r} in {expr!r}")
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def _matchers(toks: list[tuple[str, str]], i: int) -> tuple[set[str], int]:
    """Label names of the matchers in `{...}` starting at toks[i] == '{'; the index after '}'."""
    labels, i = set(), i + 1
    while toks[i][1] != "}":
        kind, text = toks[i]
        if kind == "ident" and toks[i + 1][1] in ("=", "!=", "=~", "!~"):
            labels.add(text)
        i += 1
    return labels, i + 1


def uses(expr: str) -> Uses:
    toks = tokens(expr) + [("end", "")]
    u, i = Uses(), 0
    while i < len(toks) - 1:
        kind, text = toks[i]
        nxt = toks[i + 1][1]
        if kind == "ident" and text in _GROUPING and nxt == "(":
            i += 2
            while toks[i][1] != ")":
                if toks[i][0] == "ident":
                    u.grouping.add(toks[i][1])
                i += 1
        elif kind == "ident" and text not in _KEYWORDS and nxt != "(":
            labels: set[str] = set()
            i += 1
            if toks[i][1] == "{":
                labels, i = _matchers(toks, i)
            u.selectors.append((text, labels))
            continue
        elif text == "{":  # a selector by matchers only: {__name__=...}
            labels, i = _matchers(toks, i)
            u.selectors.append(("", labels))
            continue
        i += 1
    return u


def rule_queries() -> list[tuple[str, str, dict]]:
    """(where, expression, the rule) for every rule of the shipped rules file."""
    out = []
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            out.append((f"rule {name}", rule["expr"], rule))
    return out


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, expression) for every query of the shipped dashboard: panels, variables, annotations."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dash["panels"]):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            assert m, f"variable {v['name']}: unexpected query {q!r}"
            out.append((f"variable {v['name']}", f"max by ({m.group(2)}) ({m.group(1)})"))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append((f"annotation {a['name']!r}", a["expr"]))
    return out


def concrete(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, as Grafana would send it."""
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "1h")
            .replace("$node", ".*").replace("$tenant", ".*"))
