"""`--latency-source prometheus,url=...[,metric=...][,LABEL=VALUE...]`: a Prometheus histogram the application
exports, windowed from its cumulative sum and count; watched against the migrating tenant's own commits (a
source that goes quiet while the server commits is a failure, not an idle load). Keeps no window: measured."""

from __future__ import annotations

import urllib.parse

from ..errors import InvalidInput
from ..latency import (DEFAULT_METRIC, CommitCounter, LatencySource, LatencySourceSpec, PrometheusHistogramSource,
                       WatchedSource)
from . import SPEC_HINT, SourceKind
from .performance_schema import connector


def parse(text: str, pairs: list[tuple[str, str]], node: str) -> LatencySourceSpec:
    url, metric, labels = "", DEFAULT_METRIC, {}
    for key, value in pairs:
        if key == "url":
            url = value
        elif key == "metric":
            metric = value
        else:
            labels[key] = value
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise InvalidInput(f"invalid latency source {text!r}", "prometheus needs url=http://...", SPEC_HINT)
    return LatencySourceSpec("prometheus", url=url, metric_name=metric, labels=labels, node=node)


def build(node, spec: LatencySourceSpec, window_s: float, step_s: float, tenant_id: str = "",
          choice=None) -> LatencySource:
    inner = PrometheusHistogramSource(spec.url, spec.metric_name, dict(spec.labels) or None, window_s=window_s,
                                      step_s=step_s, name=f"prometheus:{spec.url}")
    watched = [t for t in node.tenants.list() if t.id == tenant_id]
    if not watched:
        return inner
    return WatchedSource(inner, [CommitCounter(connector(t)) for t in watched], window_s=window_s, step_s=step_s)


KIND = SourceKind("prometheus", ("prom",), "prometheus", parse, build, None)
