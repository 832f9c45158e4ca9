"""The PromQL reader the observability tests rely on, and that every shipped query is readable by it."""

from __future__ import annotations

from tests.promql_names import PROMETHEUS_OWN, dashboard_queries, rule_queries, uses


def test_reads_selectors_matchers_and_grouping():
    u = uses('sum by (node) (rate(a_total{x="1", y=~"b|c"}[5m])) > on () group_left (z) 1.25 * scalar(avg(b))'
             ' or time() - c{w!="}"} offset 5m > 0.05')
    assert u.selectors == [("a_total", {"x", "y"}), ("b", set()), ("c", {"w"})]
    assert u.grouping == {"node", "z"}


def test_functions_keywords_and_numbers_are_not_metrics():
    u = uses('increase(a_total[15m]) > 0 and histogram_quantile(0.99, sum without (le2) (rate(h_bucket[1m]))) '
             'unless on(instance) absent(d) or vector(1e3) > bool 2')
    assert u.metrics == {"a_total", "h_bucket", "d"}
    assert u.grouping == {"le2", "instance"}


def test_every_shipped_query_names_project_metrics():
    queries = [(w, e) for w, e, _ in rule_queries()] + dashboard_queries()
    assert len(queries) > 30
    for where, expr in queries:
        names = uses(expr).metrics
        assert names, f"{where}: no metric in {expr!r}"
        for n in names:
            assert n.startswith(("slacker_", "slacker:")) or n in PROMETHEUS_OWN, f"{where}: {n}"
