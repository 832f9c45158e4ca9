"""Latency sources: window maths on fake counters, a real Prometheus endpoint, combinators."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dataclasses import replace
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import MetricsHandler

from slacker.errors import InvalidInput
from slacker.latency import (
    AggregateOf,
    FollowingTenants,
    CounterSource,
    LatencySample,
    LatencySource,
    MaxOf,
    PerformanceSchemaSource,
    WatchedSource,
    PrometheusHistogramSource,
    parse_histogram_totals,
    parse_latency_source_spec,
    performance_schema_sql,
    redact_url,
    validate_window,
)


class FakeCounters:
    """Counters and a clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sum_s = 0.0
        self.count = 0.0
        self.epoch = 0
        self.error: Exception | None = None

    def restart(self) -> None:
        """The exporter restarts: counters from zero, a new epoch (like Prometheus _created)."""
        self.sum_s = self.count = 0.0
        self.epoch += 1

    def observe(self, latency_s: float, n: int = 1) -> None:
        self.sum_s += latency_s * n
        self.count += n

    def snapshot(self) -> tuple[float, float, int]:
        if self.error:
            raise self.error
        return self.sum_s, self.count, self.epoch

    def source(self, window_s: float = 3.0, step_s: float = 1.0) -> CounterSource:
        return CounterSource(self.snapshot, name="fake", window_s=window_s, step_s=step_s, clock=lambda: self.t)


def test_window_average_comes_from_deltas_over_the_window() -> None:
    fc = FakeCounters()
    fc.observe(5.0, 1000)  # history before the source started: must not count
    src = fc.source()
    first = src.read()
    assert first.ok and first.empty and first.latency_s is None
    per_second = [(0.1, 10), (0.2, 10), (0.4, 20), (1.0, 10), (0.1, 30)]
    seen = []
    for latency_s, n in per_second:
        fc.t += 1
        fc.observe(latency_s, n)
        seen.append(src.read())
    # After 5 steps the window holds the last three seconds only.
    last = seen[-1]
    assert last.count == 60
    assert last.latency_s == pytest.approx((0.4 * 20 + 1.0 * 10 + 0.1 * 30) / 60)
    assert last.window_s == pytest.approx(3.0)
    # While the window fills, it covers what there is.
    assert seen[0].latency_s == pytest.approx(0.1) and seen[0].window_s == pytest.approx(1.0)
    assert seen[1].latency_s == pytest.approx(0.15)


def test_window_tolerates_a_late_loop() -> None:
    fc = FakeCounters()
    src = fc.source()
    src.read()
    for dt, lat in ((1.0, 9.9), (1.2, 0.1), (0.9, 0.1), (1.3, 0.1)):
        fc.t += dt
        fc.observe(lat, 10)
        s = src.read()
    # t = 0, 1, 2.2, 3.1, 4.4: the 3 s window (+ half a step of jitter) starts at t=1.
    assert s.window_s == pytest.approx(3.4)
    assert s.latency_s == pytest.approx(0.1)


def test_counter_reset_restarts_the_window() -> None:
    fc = FakeCounters()
    src = fc.source()
    for _ in range(4):
        fc.t += 1
        fc.observe(0.5, 10)
        src.read()
    # The exporter restarted: counters begin again from zero.
    fc.t += 1
    fc.sum_s, fc.count = 0.2, 2
    after_reset = src.read()
    assert after_reset.ok and after_reset.empty
    assert src.window.resets == 1
    fc.t += 1
    fc.observe(0.1, 8)
    s = src.read()
    assert s.count == 8 and s.latency_s == pytest.approx(0.1)


def test_restart_that_outgrows_the_old_totals_is_caught_by_the_epoch() -> None:
    page = (
        "# TYPE lat_seconds histogram\n"
        "lat_seconds_count {count}\nlat_seconds_sum {sum}\nlat_seconds_created {created}\n"
    )
    current = {"count": 2, "sum": 0.2, "created": 1000.0}
    clock = [0.0]
    src = PrometheusHistogramSource(
        "http://h/metrics", "lat_seconds", fetch=lambda: page.format(**current), clock=lambda: clock[0]
    )
    src.read()
    # Restarted and already busier than before: counts alone look like +8 at 1.225 s each.
    current.update(count=10, sum=9.8, created=1005.0)
    clock[0] = 1.0
    s = src.read()
    assert s.empty and src.window.resets == 1
    current.update(count=20, sum=10.8)
    clock[0] = 2.0
    assert src.read().latency_s == pytest.approx(0.1)


def test_empty_window_is_none_not_zero() -> None:
    fc = FakeCounters()
    src = fc.source()
    fc.observe(0.3, 5)
    src.read()
    for _ in range(5):
        fc.t += 1
        s = src.read()
    assert s.ok and s.count == 0 and s.latency_s is None and s.empty


def test_failing_snapshot_becomes_a_failed_sample_and_recovers() -> None:
    fc = FakeCounters()
    src = fc.source()
    src.read()
    fc.t += 1
    fc.error = ConnectionRefusedError(111, "Connection refused")
    bad = src.read()
    assert not bad.ok and "Connection refused" in bad.error and bad.latency_s is None
    assert bad.t == fc.t
    fc.error = None
    fc.t += 1
    fc.observe(0.25, 4)
    good = src.read()
    assert good.ok and good.latency_s == pytest.approx(0.25)


def test_outage_longer_than_the_window_gives_an_empty_window_not_a_stale_average() -> None:
    fc = FakeCounters()
    src = fc.source()
    src.read()
    fc.error = TimeoutError("timed out")
    for _ in range(10):
        fc.t += 1
        fc.observe(9.0, 10)
        assert not src.read().ok
    fc.error = None
    fc.t += 1
    s = src.read()
    assert s.ok and s.empty


@pytest.mark.parametrize("bad", [(float("nan"), 1.0), (1.0, float("inf")), (1.0, -1.0), ("x", 1), (1.0,), None])
def test_nonsense_counters_fail(bad) -> None:
    src = CounterSource(lambda: bad, clock=lambda: 0.0)
    assert not src.read().ok


@pytest.mark.parametrize("window_s, step_s", [(0, 1), (3, 0), (-1, 1), (0.5, 1), (float("inf"), 1), (float("nan"), 1)])
def test_invalid_window_rejected(window_s, step_s) -> None:
    with pytest.raises(InvalidInput):
        validate_window(window_s, step_s)
    with pytest.raises(InvalidInput):
        CounterSource(lambda: (0, 0), window_s=window_s, step_s=step_s)


# --- Prometheus -----------------------------------------------------------------------

PAGE = """# HELP lat_seconds Transaction latency.
# TYPE lat_seconds histogram
lat_seconds_bucket{tenant="t1",le="+Inf"} 4
lat_seconds_count{tenant="t1"} 4
lat_seconds_sum{tenant="t1"} 2.0
lat_seconds_bucket{tenant="t2",le="+Inf"} 6
lat_seconds_count{tenant="t2"} 6
lat_seconds_sum{tenant="t2"} 9.0
"""


def test_parse_histogram_totals_filters_and_sums() -> None:
    assert parse_histogram_totals(PAGE, "lat_seconds") == (11.0, 10.0)
    assert parse_histogram_totals(PAGE, "lat_seconds", {"tenant": "t2"}) == (9.0, 6.0)
    assert parse_histogram_totals(PAGE, "lat_seconds", {"tenant": "t9"}) == (0.0, 0.0)
    untyped = "lat_seconds_count 3\nlat_seconds_sum 1.5\n"
    assert parse_histogram_totals(untyped, "lat_seconds") == (1.5, 3.0)
    with pytest.raises(LookupError, match="not found"):
        parse_histogram_totals(PAGE, "other_seconds")
    no_series_yet = "# HELP lat_seconds x\n# TYPE lat_seconds histogram\n"
    assert parse_histogram_totals(no_series_yet, "lat_seconds") == (0.0, 0.0)
    created = PAGE + 'lat_seconds_created{tenant="t1"} 5.0\nlat_seconds_created{tenant="t2"} 7.0\n'
    assert parse_histogram_totals(created, "lat_seconds", {"tenant": "t2"}, with_epoch=True) == (
        9.0,
        6.0,
        frozenset({((("tenant", "t2"),), 7.0)}),
    )
    assert parse_histogram_totals(PAGE, "lat_seconds", with_epoch=True) == (11.0, 10.0, frozenset())


def _serve(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # A short poll interval so shutdown() returns at once.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


@pytest.fixture
def registry_server():
    # prometheus_client's own exposition handler, as an agent or the YCSB harness serves it.
    registry = CollectorRegistry()
    hist = Histogram("slacker_ycsb_txn_latency_seconds", "Transaction latency.", ["tenant"], registry=registry)
    server = _serve(MetricsHandler.factory(registry))
    try:
        yield hist, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_prometheus_source_against_a_real_endpoint(registry_server) -> None:
    hist, url = registry_server
    clock = [0.0]
    t1 = PrometheusHistogramSource(url, labels={"tenant": "t1"}, clock=lambda: clock[0])
    every = PrometheusHistogramSource(url, clock=lambda: clock[0])
    assert t1.read().empty and every.read().empty  # no series yet: the workload has not started
    for _ in range(10):
        hist.labels(tenant="t1").observe(0.2)
    for _ in range(30):
        hist.labels(tenant="t2").observe(1.0)
    clock[0] = 1.0
    a, b = t1.read(), every.read()
    assert a.ok and a.count == 10 and a.latency_s == pytest.approx(0.2)
    assert b.count == 40 and b.latency_s == pytest.approx((10 * 0.2 + 30 * 1.0) / 40)
    assert "tenant=t1" in a.source
    # A new series appearing later is not a restart: its whole count is new traffic.
    for _ in range(5):
        hist.labels(tenant="t3").observe(0.5)
    clock[0] = 2.0
    c = every.read()
    assert c.count == 45 and c.latency_s == pytest.approx((10 * 0.2 + 30 * 1.0 + 5 * 0.5) / 45)
    assert every.window.resets == 0


def test_prometheus_metric_missing_is_a_failure(registry_server) -> None:
    _, url = registry_server
    s = PrometheusHistogramSource(url, metric_name="no_such_metric_seconds").read()
    assert not s.ok and "no_such_metric_seconds not found" in s.error


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prometheus_unreachable_endpoint_fails_without_raising() -> None:
    src = PrometheusHistogramSource(f"http://127.0.0.1:{_closed_port()}/metrics", timeout_s=1.0)
    s = src.read()
    assert not s.ok and "cannot reach" in s.error


def test_prometheus_endpoint_that_hangs_times_out() -> None:
    with socket.socket() as listener:  # accepts connections into the backlog, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        src = PrometheusHistogramSource(f"http://127.0.0.1:{port}/metrics", timeout_s=0.2)
        s = src.read()
    assert not s.ok and "timed out" in s.error


class _Handler(BaseHTTPRequestHandler):
    status = 500
    body = b"oops"

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("status, body, expect", [(500, b"oops", "500"), (200, b"{not prometheus", "not a Prometheus text page")])
def test_prometheus_bad_responses_fail(status, body, expect) -> None:
    server = _serve(type("H", (_Handler,), {"status": status, "body": body}))
    try:
        s = PrometheusHistogramSource(f"http://127.0.0.1:{server.server_address[1]}/metrics").read()
    finally:
        server.shutdown()
        server.server_close()
    assert not s.ok and expect in s.error and s.error


def test_credentials_in_url_are_not_shown() -> None:
    url = f"http://scraper:s3cret@127.0.0.1:{_closed_port()}/metrics"
    src = PrometheusHistogramSource(url, timeout_s=0.5)
    s = src.read()
    assert "s3cret" not in src.name and "s3cret" not in s.error and "s3cret" not in s.source
    assert redact_url("https://u:p@h:9/x?y=1") == "https://h:9/x?y=1"
    assert redact_url("http://h/x") == "http://h/x"


def test_prometheus_source_rejects_bad_urls() -> None:
    with pytest.raises(InvalidInput):
        PrometheusHistogramSource("file:///etc/passwd")
    with pytest.raises(InvalidInput):
        PrometheusHistogramSource("http://h/metrics", metric_name="bad name")


# --- performance_schema -------------------------------------------------------------------


class FakeCursor:
    def __init__(self, conn: "FakeConn") -> None:
        self.conn = conn
        self.row = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def execute(self, sql: str, params=None) -> None:
        if self.conn.broken:
            raise OSError("Lost connection to server during query")
        self.conn.queries.append((sql, params))
        if "@@GLOBAL.performance_schema" in sql:
            self.row = (self.conn.pfs_on, self.conn.statement_classes)
        elif "FROM performance_schema.setup_instruments" in sql:
            self.row = self.conn.instrument
        elif sql.startswith("UPDATE performance_schema.setup_instruments"):
            self.conn.instrument = ("YES", "YES")
        else:
            self.row = (self.conn.timer_ps, self.conn.count)

    def fetchone(self):
        return self.row


class FakeConn:
    def __init__(self, pfs_on: int = 1, statement_classes: int = 0, instrument=("YES", "YES")) -> None:
        self.pfs_on = pfs_on
        self.statement_classes = statement_classes
        self.instrument = instrument
        self.timer_ps = 0
        self.count = 0
        self.broken = False
        self.closed = False
        self.queries: list = []

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def close(self) -> None:
        self.closed = True


def test_performance_schema_window_in_seconds_from_picoseconds() -> None:
    conn = FakeConn()
    clock = [0.0]
    src = PerformanceSchemaSource(lambda: conn, exclude_users=["slacker"], clock=lambda: clock[0])
    assert src.read().empty
    conn.timer_ps += 50 * 20_000_000_000  # 50 transactions of 20 ms
    conn.count += 50
    clock[0] = 1.0
    s = src.read()
    assert s.ok and s.count == 50 and s.latency_s == pytest.approx(0.020)
    sql, params = conn.queries[-1]
    assert "events_transactions_summary_by_user_by_event_name" in sql and params == ("slacker",)


def test_performance_schema_switches_the_transaction_instrument_on() -> None:
    conn = FakeConn(instrument=("NO", "NO"))  # a tenant started with an older config
    assert PerformanceSchemaSource(lambda: conn).read().ok
    assert conn.instrument == ("YES", "YES")
    assert any(q.startswith("UPDATE performance_schema.setup_instruments") for q, _ in conn.queries)


def test_performance_schema_statements_on_a_sized_out_server_say_so() -> None:
    conn = FakeConn(statement_classes=0)
    s = PerformanceSchemaSource(lambda: conn, kind="statements").read()
    assert not s.ok and "performance_schema_max_statement_classes=0" in s.error and conn.closed
    conn = FakeConn(statement_classes=222)
    assert PerformanceSchemaSource(lambda: conn, kind="statements").read().ok


def test_performance_schema_off_is_a_clear_failure() -> None:
    conn = FakeConn(pfs_on=0)
    s = PerformanceSchemaSource(lambda: conn).read()
    assert not s.ok and "performance_schema is OFF" in s.error and conn.closed


def test_performance_schema_reconnects_after_an_error() -> None:
    conns: list[FakeConn] = []

    def connect() -> FakeConn:
        conns.append(FakeConn())
        return conns[-1]

    src = PerformanceSchemaSource(connect, clock=lambda: 0.0)
    assert src.read().ok
    conns[0].broken = True
    s = src.read()
    assert not s.ok and "Lost connection" in s.error and conns[0].closed
    assert src.read().ok and len(conns) == 2


def test_performance_schema_connect_failure_is_a_failed_sample() -> None:
    def connect():
        raise OSError("Can't connect to MySQL server on '127.0.0.1'")

    s = PerformanceSchemaSource(connect).read()
    assert not s.ok and "Can't connect" in s.error


def test_performance_schema_sql_choices() -> None:
    sql, params = performance_schema_sql()
    assert "events_transactions_summary_global_by_event_name" in sql and params == []
    sql, params = performance_schema_sql("statements")
    assert "events_statements_summary_global_by_event_name" in sql and params == []
    assert "statement/sql/%%" in sql  # pymysql turns %% into % because we always pass params
    assert "statement/com/Execute" in sql  # binary-protocol executions of prepared statements
    sql, params = performance_schema_sql("transactions", users=["app"], exclude_users=["slacker", "root"])
    assert "events_transactions_summary_by_user_by_event_name" in sql
    assert "USER IN (%s)" in sql and "USER NOT IN (%s, %s)" in sql
    assert params == ["app", "slacker", "root"]
    with pytest.raises(InvalidInput):
        performance_schema_sql("waits")


# --- combinators ---------------------------------------------------------------------------


class Fixed(LatencySource):
    def __init__(self, name: str, sample: LatencySample | Exception) -> None:
        self.name = name
        self._sample = sample

    def read(self) -> LatencySample:
        if isinstance(self._sample, Exception):
            raise self._sample
        return self._sample


def ls(name: str, sum_s: float, count: float, t: float = 10.0, window_s: float = 3.0) -> LatencySample:
    return LatencySample(name, t, sum_s=sum_s, count=count, window_s=window_s)


def test_aggregate_weights_by_transaction_count() -> None:
    busy = Fixed("busy", ls("busy", sum_s=90 * 0.1, count=90))
    quiet = Fixed("quiet", ls("quiet", sum_s=10 * 1.0, count=10, t=9.5, window_s=2.0))
    s = AggregateOf([busy, quiet]).read()
    # Not the mean of the two averages (0.55): the population average.
    assert s.latency_s == pytest.approx((9 + 10) / 100)
    assert s.count == 100 and s.t == 9.5 and s.window_s == 2.0


def test_max_of_takes_the_worst_and_skips_empty_windows() -> None:
    src = Fixed("source", ls("source", 30, 100))
    tgt = Fixed("target", ls("target", 5, 10))
    idle = Fixed("idle", LatencySample("idle", 10.0, window_s=3.0))
    s = MaxOf([src, tgt, idle]).read()
    assert s.latency_s == pytest.approx(0.5) and s.count == 10
    assert MaxOf([idle]).read().empty


def test_combinators_fail_if_any_source_fails_or_raises() -> None:
    good = Fixed("good", ls("good", 1, 10))
    down = Fixed("down", LatencySample.failed("down", 10.0, "connection refused"))
    raising = Fixed("raising", RuntimeError("bug in a plugin"))
    for combo in (MaxOf([good, down]), AggregateOf([good, down])):
        s = combo.read()
        assert not s.ok and "down: connection refused" in s.error
    s = MaxOf([good, raising]).read()
    assert not s.ok and "bug in a plugin" in s.error
    with pytest.raises(InvalidInput):
        MaxOf([])


# --- idle or blind: the source checked against the server's commits ------------------------


def _watched(commits: list[float], counts: list[float], min_commits: float = 10):
    clock = [0.0]
    state = {"count": 0.0, "commits": 0.0}
    inner = CounterSource(lambda: (state["count"] * 0.01, state["count"]), name="pfs", clock=lambda: clock[0])
    src = WatchedSource(inner, lambda: state["commits"], min_commits=min_commits, clock=lambda: clock[0])
    out = []
    for c, n in zip(commits, counts):
        state["commits"] += c
        state["count"] += n
        out.append(src.read())
        clock[0] += 1.0
    return out


def test_a_source_that_sees_nothing_while_the_server_commits_is_blind() -> None:
    samples = _watched(commits=[0, 50, 50, 50], counts=[0, 0, 0, 0])
    assert samples[0].ok  # the first read has no window yet: no evidence either way
    last = samples[-1]
    assert not last.ok and last.blind and last.server_commits == 150
    assert "committed 150" in last.error and "cannot see" in last.error


def test_an_idle_tenant_is_not_blind_and_a_seeing_source_passes_through() -> None:
    idle = _watched(commits=[0, 1, 0, 2], counts=[0, 0, 0, 0])  # a stray commit or two: below the bar
    assert all(s.ok and s.empty and not s.blind for s in idle)
    assert idle[-1].server_commits == 3
    busy = _watched(commits=[0, 50, 50], counts=[0, 50, 50])
    assert busy[-1].ok and busy[-1].count == 100 and busy[-1].latency_s == pytest.approx(0.01)


def test_blindness_survives_combining_and_unknown_traffic_is_no_evidence() -> None:
    blind = Fixed("a", replace(LatencySample.failed("a", 10.0, "no transactions seen"), blind=True))
    down = Fixed("b", LatencySample.failed("b", 10.0, "connection refused"))
    good = Fixed("c", ls("c", 1, 10))
    assert MaxOf([blind, good]).read().blind
    assert not MaxOf([blind, down]).read().blind  # one of them is simply down: not only blindness
    inner = Fixed("d", LatencySample("d", 10.0, window_s=3.0))

    def broken() -> float:
        raise OSError("gone")

    s = WatchedSource(inner, broken).read()
    assert s.ok and s.empty and s.server_commits is None


# --- --latency-source ------------------------------------------------------------------------


def test_parse_latency_source_spec() -> None:
    spec = parse_latency_source_spec("prometheus,url=http://127.0.0.1:9464/metrics,tenant=t1,node=target")
    assert spec.kind == "prometheus" and spec.url == "http://127.0.0.1:9464/metrics"
    assert dict(spec.labels) == {"tenant": "t1"} and spec.node == "target"
    assert spec.metric_name == "slacker_ycsb_txn_latency_seconds"
    spec = parse_latency_source_spec("pfs,exclude-user=slacker,table=transactions")
    assert spec.kind == "performance-schema" and spec.exclude_users == ("slacker",) and spec.pfs_kind == "transactions"


@pytest.mark.parametrize(
    "text",
    ["", "prometheus", "prometheus,url=ftp://x", "pfs,table=waits", "pfs,colour=blue", "statsd,url=http://x", "pfs,node=side", "pfs,=x"],
)
def test_parse_latency_source_spec_rejects(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_latency_source_spec(text)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    steps=st.lists(
        st.tuples(
            st.floats(min_value=0.5, max_value=2.0),  # time since the last read
            st.lists(st.floats(min_value=0.001, max_value=10.0), max_size=5),  # latencies completed
            st.booleans(),  # exporter restarts before this read
        ),
        max_size=40,
    )
)
def test_window_average_is_always_an_average_of_recent_observations(steps) -> None:
    fc = FakeCounters()
    src = fc.source()
    src.read()
    history: list[tuple[float, float]] = []  # (time, latency) of every observation
    for dt, latencies, restart in steps:
        fc.t += dt
        if restart:
            fc.restart()
        for lat in latencies:
            fc.observe(lat)
            history.append((fc.t, lat))
        s = src.read()
        assert s.ok and s.count >= 0 and s.window_s <= 3.0 + 0.5 + 1e-9
        if s.latency_s is not None:
            recent = [lat for t, lat in history if t > fc.t - s.window_s - 1e-9]
            assert min(recent) - 1e-9 <= s.latency_s <= max(recent) + 1e-9


def test_each_sample_carries_its_newest_second_alone() -> None:
    # The window lags a change by its length; the newest step alone does not (the start hold reads it).
    fc = FakeCounters()
    src = fc.source()
    assert src.read().last_latency_s is None  # one reading: no step yet
    for latency_s, n in [(1.0, 10), (1.0, 10), (0.01, 30)]:
        fc.t += 1
        fc.observe(latency_s, n)
        s = src.read()
    assert s.latency_s == pytest.approx((10 + 10 + 0.3) / 50)
    assert s.last_latency_s == pytest.approx(0.01)
    # Combined: one population sums both; the worst source brings its own newest second.
    a = LatencySample("a", 1.0, sum_s=3.0, count=30, window_s=3.0, last_sum_s=0.1, last_count=10)
    b = LatencySample("b", 1.0, sum_s=9.0, count=30, window_s=3.0, last_sum_s=0.9, last_count=10)
    assert AggregateOf([Fixed("a", a), Fixed("b", b)]).read().last_latency_s == pytest.approx(0.05)
    assert MaxOf([Fixed("a", a), Fixed("b", b)]).read().last_latency_s == pytest.approx(0.09)
    unknown = replace(b, last_sum_s=None, last_count=None)
    assert AggregateOf([Fixed("a", a), Fixed("b", unknown)]).read().last_latency_s is None



def test_following_tenants_drops_a_tenant_that_left_and_adds_one_that_arrived() -> None:
    """Two moves off one node at once: the tenant the other move took away is gone (its server with it);
    the node's latency goes on from those still there instead of failing and stalling this copy."""
    gone = Fixed("b", LatencySample.failed("b", 10.0, "No such file or directory: .../b/secrets/admin.password"))
    members = {"a": (lambda: Fixed("a", ls("a", 2.0, 100)), lambda: (lambda: 0.0)),
               "b": (lambda: gone, lambda: (lambda: 0.0))}
    src = FollowingTenants(lambda: dict(members))
    assert not src.read().ok  # while b is counted and fails, the source fails (as AggregateOf does)
    del members["b"]  # b moved off: no longer a running tenant of the node
    s = src.read()
    assert s.ok and s.latency_s == pytest.approx(0.02) and "b" not in src.name
    members["c"] = (lambda: Fixed("c", ls("c", 6.0, 100)), lambda: (lambda: 0.0))
    s = src.read()
    assert s.ok and s.latency_s == pytest.approx(0.04) and s.count == 200
    # A member list that cannot be read keeps the population it had.
    src._members = lambda: (_ for _ in ()).throw(RuntimeError("node busy"))
    assert src.read().latency_s == pytest.approx(0.04)


def _reference_totals(text, metric_name, labels):
    """prometheus_client's own parser: what parse_histogram_totals must agree with."""
    from prometheus_client.parser import text_string_to_metric_families

    total_sum = total_count = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if any(s.labels.get(k) != v for k, v in labels.items()):
                continue
            if s.name == f"{metric_name}_sum":
                total_sum += s.value
            elif s.name == f"{metric_name}_count":
                total_count += s.value
    return total_sum, total_count


_label_values = st.text(alphabet=st.sampled_from('ab1_-."\\\n {}=,'), min_size=0, max_size=6)


@settings(max_examples=150, deadline=None)
@given(series=st.lists(st.tuples(st.sampled_from(["lat_seconds", "lat_seconds_x", "other"]), _label_values,
                                 st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)), max_size=12),
       want=_label_values)
def test_the_fast_parse_agrees_with_prometheus_clients_parser(series, want) -> None:
    """The scan that reads only the metric's own lines sums what the full parser sums, for label values with
    quotes, backslashes, newlines, braces and commas, and a metric whose name is a prefix of another's."""
    def esc(v):
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lines = []
    for i, (name, tenant, count, total) in enumerate(series):
        lines += [f"# HELP {name} h", f"# TYPE {name} histogram",
                  f'{name}_bucket{{tenant="{esc(tenant)}",le="+Inf"}} {count}',
                  f'{name}_count{{tenant="{esc(tenant)}",i="{i}"}} {count}',
                  f'{name}_sum{{i="{i}",tenant="{esc(tenant)}"}} {total!r}']
    page = "\n".join(lines) + "\n"
    ref = _reference_totals(page, "lat_seconds", {"tenant": want})
    if any(name == "lat_seconds" for name, *_ in series):
        assert parse_histogram_totals(page, "lat_seconds", {"tenant": want}) == pytest.approx(ref)
    else:
        with pytest.raises(LookupError):
            parse_histogram_totals(page, "lat_seconds", {"tenant": want})
