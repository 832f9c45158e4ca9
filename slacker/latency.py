"""Latency sources for the throttle controller, and the sliding window they share.

Every source turns a pair of ever-growing counters (total latency, transactions)
into the average latency over the last few seconds. Samples carry the sum and the
count, not just the average, so several sources combine exactly.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse  # urllib.request only where a source fetches: `migrate --help` reads this module
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import BlindLatencySource, InvalidInput, LatencySourceError, TargetLatencyError
from .mariadb.perfschema import check_enabled, handler_commits, latency_totals, performance_schema_sql

DEFAULT_METRIC = "slacker_ycsb_txn_latency_seconds"
DEFAULT_WINDOW_S = 3.0
DEFAULT_STEP_S = 1.0

# The default latency source (no --latency-source), per tenant of the source node: the first of these
# whose condition holds, as (source, what it reads, when; "" for always). slacker.sources.router.LatencyChoice
# decides by it and `slacker migrate --help` states it from it (tests/unit/test_docs_drift.py holds both).
DEFAULT_SOURCE_ORDER = (
    ("router", "the routers' transaction latency", "where a router carries the tenant's clients"),
    ("performance_schema", "the server's own (performance_schema)", ""),
)


def default_source_text() -> str:
    """DEFAULT_SOURCE_ORDER in words, as `--latency-source`'s help shows its default."""
    return "per tenant of the source node, " + ", else ".join(
        f"{what} {when}".strip() for _, what, when in DEFAULT_SOURCE_ORDER)


Clock = Callable[[], float]


@dataclass(frozen=True)
class LatencySample:
    """The average latency over one window, as total latency and transaction count.

    `ok` is False when the source could not be read; `error` then says why and the
    numbers mean nothing. An ok sample with count 0 is an empty window: nothing
    completed, so there is no evidence either way (latency_s is None, never 0).
    """

    source: str
    t: float  # clock time the underlying data was read (time.monotonic by default)
    sum_s: float = 0.0
    count: float = 0.0
    window_s: float = 0.0  # span the deltas actually cover
    ok: bool = True
    error: str = ""
    # Transactions the server(s) committed over the same window, from their own
    # counters (None: not watched). Tells an idle tenant from a source that is blind.
    server_commits: float | None = None
    blind: bool = False  # failed because the server committed while the source saw nothing
    # The newest step's own share of the window (its last second by default): None when not known.
    last_sum_s: float | None = None
    last_count: float | None = None
    # Transactions the source completed in the newest step, when last_count counts something else (the
    # target guard's worse side): the load the copy shares the source with (None: last_count is it).
    last_load: float | None = None
    # What kind of failure (slacker.errors), when not ok: set from `blind` when not given.
    failure: type[LatencySourceError] | None = None

    def __post_init__(self) -> None:
        if self.blind and not (self.failure and issubclass(self.failure, BlindLatencySource)):
            object.__setattr__(self, "failure", BlindLatencySource)
        elif not self.ok and self.failure is None:
            object.__setattr__(self, "failure", LatencySourceError)

    @property
    def newest_load(self) -> float | None:
        """Transactions the source completed in the newest step (None: not known)."""
        if not self.ok:
            return None
        return self.last_load if self.last_load is not None else self.last_count

    @property
    def latency_s(self) -> float | None:
        if not self.ok or self.count <= 0:
            return None
        return self.sum_s / self.count

    @property
    def last_latency_s(self) -> float | None:
        """The average over the newest step only: noisier than the window, but not behind it."""
        if not self.ok or self.last_sum_s is None or self.last_count is None or self.last_count <= 0:
            return None
        return self.last_sum_s / self.last_count

    @property
    def empty(self) -> bool:
        return self.ok and self.count <= 0

    @classmethod
    def failed(cls, source: str, t: float, error: str,
               failure: type[LatencySourceError] = LatencySourceError) -> "LatencySample":
        return cls(source=source, t=t, ok=False, error=error, failure=failure)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "t": self.t,
            "latency_s": self.latency_s,
            "sum_s": self.sum_s,
            "count": self.count,
            "window_s": self.window_s,
            "ok": self.ok,
            "error": self.error,
            "server_commits": self.server_commits,
            "blind": self.blind,
            "last_latency_s": self.last_latency_s,
        }


class LatencySource(ABC):
    """Something that can be asked, once a step, for the windowed average latency.

    read() never raises: a source that cannot answer returns a failed sample, so a
    broken endpoint slows the migration down instead of crashing it.
    """

    name: str = "latency"
    # A source guarding both ends (GuardedSource): after each read, each side's latency and which one binds.
    sides: dict[str, Any] | None = None

    @abstractmethod
    def read(self) -> LatencySample: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default has none."""


def validate_window(window_s: float, step_s: float) -> None:
    """Window and step must be positive and finite, with the window at least one step."""
    for label, value in (("window", window_s), ("step", step_s)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidInput(
                f"invalid {label} {value!r}",
                f"the {label} must be a positive number of seconds",
                "for example --window 3s --step 1s",
            )
    if window_s < step_s:
        raise InvalidInput(
            f"invalid window {window_s:g}s",
            f"the window must be at least one step ({step_s:g}s)",
            "for example --window 3s --step 1s",
        )


@dataclass
class _Snapshot:
    t: float
    sum_s: float
    count: float
    epoch: object = None


@dataclass
class CounterWindow:
    """A ring of (time, sum, count) snapshots; the window average comes from their deltas.

    Counters only grow, so a count or sum that goes down means the exporter
    restarted (or someone truncated the table): the old snapshots are useless and
    the window starts again from the new reading. A restart followed by enough
    traffic to pass the old totals is invisible in the counts, so a source may
    also pass an `epoch` (e.g. Prometheus `_created` timestamps) that changes
    when the counters were recreated. A frozenset epoch may grow (a new series
    starts from zero inside the window, so its whole count belongs to it); any
    other change is a restart.
    """

    window_s: float = DEFAULT_WINDOW_S
    step_s: float = DEFAULT_STEP_S
    _ring: deque[_Snapshot] = field(default_factory=deque, repr=False)
    resets: int = 0

    def __post_init__(self) -> None:
        validate_window(self.window_s, self.step_s)

    def add(self, t: float, sum_s: float, count: float, epoch: object = None) -> tuple[float, float, float]:
        """Record a reading; return (sum delta, count delta, span) over the window."""
        if self._ring:
            last = self._ring[-1]
            # A little slack on the sum: float sums of many observations are not exact.
            if (
                count < last.count
                or sum_s < last.sum_s - 1e-9 * max(1.0, abs(last.sum_s))
                or t < last.t
                or _epoch_changed(last.epoch, epoch)
            ):
                self._ring.clear()
                self.resets += 1
        self._ring.append(_Snapshot(t, sum_s, count, epoch))
        # Base the window on the oldest snapshot no older than the window, allowing
        # half a step of jitter so a loop that runs a little late still spans 3 steps.
        horizon = t - self.window_s - self.step_s / 2
        while len(self._ring) > 1 and self._ring[0].t < horizon:
            self._ring.popleft()
        base = self._ring[0]
        return sum_s - base.sum_s, count - base.count, t - base.t

    def last(self) -> tuple[float, float] | None:
        """(sum delta, count delta) of the newest step alone; None before two readings."""
        if len(self._ring) < 2:
            return None
        a, b = self._ring[-2], self._ring[-1]
        return b.sum_s - a.sum_s, b.count - a.count

    def clear(self) -> None:
        self._ring.clear()


def _epoch_changed(old: object, new: object) -> bool:
    if isinstance(old, frozenset) and isinstance(new, frozenset):
        return not old <= new
    return old != new


class CounterSource(LatencySource):
    """A source built on any pair of monotonically growing counters.

    `snapshot()` returns (total latency in seconds, total transactions) since some
    fixed origin, optionally with a third item, an epoch that changes when the
    counters are recreated; this class keeps the window and turns failures into
    failed samples. The Prometheus and performance_schema sources are two such
    snapshots.
    """

    def __init__(
        self,
        snapshot: Callable[[], tuple[float, float]] | None = None,
        *,
        name: str = "counters",
        window_s: float = DEFAULT_WINDOW_S,
        step_s: float = DEFAULT_STEP_S,
        clock: Clock = time.monotonic,
    ) -> None:
        self._snapshot_fn: Callable[[], tuple] | None = snapshot
        self.name = name
        self.window = CounterWindow(window_s, step_s)
        self._clock = clock

    def _snapshot(self) -> tuple:
        # Subclasses override this; plain CounterSources call the function given.
        if self._snapshot_fn is None:
            raise NotImplementedError("no snapshot function")
        return self._snapshot_fn()

    def read(self) -> LatencySample:
        t = self._clock()
        try:
            reading = tuple(self._snapshot())
            if len(reading) not in (2, 3):
                raise ValueError(f"snapshot must be (sum, count[, epoch]), got {len(reading)} items")
            sum_s, count = float(reading[0]), float(reading[1])
            epoch = reading[2] if len(reading) == 3 else None
            if not (math.isfinite(sum_s) and math.isfinite(count)) or count < 0:
                raise ValueError(f"counters out of range (sum={sum_s!r}, count={count!r})")
        except Exception as exc:  # noqa: BLE001 - any failure must become a sample, not a crash
            # A failed read leaves a gap; deltas across it would still be right, so the
            # ring is kept and the next good read spans the gap only within the window.
            return LatencySample.failed(self.name, t, _describe(exc))
        d_sum, d_count, span = self.window.add(t, sum_s, count, epoch)
        last = self.window.last()
        return LatencySample(self.name, t, sum_s=d_sum, count=d_count, window_s=span,
                             last_sum_s=None if last is None else last[0], last_count=None if last is None else last[1])


def _describe(exc: BaseException) -> str:
    import urllib.error

    text = str(exc) or type(exc).__name__
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        text = f"cannot reach endpoint: {exc.reason}"
    elif isinstance(exc, TimeoutError):
        text = f"timed out: {text}"
    return text.splitlines()[0][:300] if text else type(exc).__name__


def redact_url(url: str) -> str:
    """The URL without user:password, for names and error messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class PrometheusHistogramSource(CounterSource):
    """Average latency from a Prometheus histogram (or summary) endpoint.

    Scrapes `url`, sums `<metric>_sum` and `<metric>_count` over every series whose
    labels include `labels` (all series when empty), and averages over the window.
    """

    MAX_BODY_BYTES = 32 * 1024 * 1024

    def __init__(
        self,
        url: str,
        metric_name: str = DEFAULT_METRIC,
        labels: Mapping[str, str] | None = None,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        step_s: float = DEFAULT_STEP_S,
        timeout_s: float = 2.0,
        name: str | None = None,
        clock: Clock = time.monotonic,
        fetch: Callable[[], str] | None = None,
    ) -> None:
        if not metric_name or not metric_name.replace("_", "a").replace(":", "a").isalnum():
            raise InvalidInput(f"invalid metric name {metric_name!r}", "expected a Prometheus metric name")
        scheme = urllib.parse.urlsplit(url).scheme
        if fetch is None and scheme not in ("http", "https"):
            raise InvalidInput(f"invalid latency endpoint {redact_url(url)!r}", "expected an http:// or https:// URL")
        self.url = url
        self.metric_name = metric_name
        self.labels = dict(labels or {})
        self.timeout_s = timeout_s
        self._fetch = fetch or self._http_get
        label_text = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        default_name = f"prometheus:{redact_url(url)}" + (f"{{{label_text}}}" if label_text else "")
        super().__init__(name=name or default_name, window_s=window_s, step_s=step_s, clock=clock)

    def _http_get(self) -> str:
        import urllib.request

        req = urllib.request.Request(self.url, headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - scheme checked
            body = resp.read(self.MAX_BODY_BYTES + 1)
        if len(body) > self.MAX_BODY_BYTES:
            raise ValueError("metrics page larger than 32 MiB")
        return body.decode("utf-8")

    def _snapshot(self) -> tuple:
        return parse_histogram_totals(self._fetch(), self.metric_name, self.labels, with_epoch=True)


_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=\}))')
_ESCAPES = re.compile(r"\\(.)")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")


def _labels_at(line: str, pos: int) -> tuple[dict[str, str], int]:
    """The label set that opens at line[pos] ("{"), unescaped; and the index after its "}"."""
    out: dict[str, str] = {}
    pos += 1
    while True:
        if line.startswith("}", pos):
            return out, pos + 1
        m = _LABEL_PAIR.match(line, pos)
        if m is None:
            stripped = line[pos:].lstrip()
            if stripped.startswith("}"):
                return out, len(line) - len(stripped) + 1
            raise ValueError(f"bad label set in {line[:120]!r}")
        out[m.group(1)] = _ESCAPES.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        pos = m.end()


def parse_histogram_totals(
    text: str, metric_name: str, labels: Mapping[str, str] | None = None, with_epoch: bool = False
) -> tuple:
    """(sum, count) of a histogram or summary in Prometheus text, over matching series.

    A metric that is absent raises LookupError (usually a wrong name or URL); a
    metric with no matching series yet is (0, 0): the workload has not started.
    With `with_epoch`, a third item identifies the counters' incarnation: a
    frozenset of (labels, `<metric>_created`) of the matching series (empty when
    the exporter does not publish them).

    One pass over the lines that name the metric (a controller reads a router's whole page every second for
    each tenant: prometheus_client's parser took 30 ms for a 1,000-line page, an agent's CPU on a small node);
    every other sample line is only checked to start like one.
    """
    want = dict(labels or {})
    kinds = {f"{metric_name}_sum": 0, f"{metric_name}_count": 1, f"{metric_name}_created": 2}
    seen = False
    total_sum = total_count = 0.0
    created: set[tuple[tuple[tuple[str, str], ...], float]] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] == metric_name:
                seen = True
            continue
        if line[0] not in _NAME_START:
            raise ValueError(f"not a Prometheus text page (a sample line starts {line[:40]!r})")
        if not line.startswith(metric_name):
            continue
        brace, space = line.find("{"), line.find(" ")
        try:
            if brace != -1 and (space == -1 or brace < space):
                name = line[:brace].rstrip()
                kind = kinds.get(name)
                if kind is None:
                    continue
                got, after = _labels_at(line, brace)
                value = float(line[after:].split()[0])
            else:
                name = line[:space] if space != -1 else line
                kind = kinds.get(name)
                if kind is None:
                    continue
                got, value = {}, float(line[space:].split()[0])
        except (ValueError, IndexError) as exc:
            raise ValueError(f"not a Prometheus text page ({exc})") from None
        if any(got.get(k) != v for k, v in want.items()):
            seen = seen or kind != 2
            continue
        if kind == 0:
            total_sum += value
            seen = True
        elif kind == 1:
            total_count += value
            seen = True
        else:
            created.add((tuple(sorted(got.items())), value))
    if not seen:
        raise LookupError(f"metric {metric_name} not found on the page")
    if with_epoch:
        return total_sum, total_count, frozenset(created)
    return total_sum, total_count


ROUTER_METRICS = {"transactions": "slacker_router_transaction_latency_seconds",
                  "statements": "slacker_router_statement_latency_seconds"}


def _router_metrics_page(admin: str, timeout_s: float) -> str:
    """A router's /metrics page from its admin address (HOST:PORT)."""
    import urllib.request

    url = admin if admin.startswith(("http://", "https://")) else f"http://{admin}"
    with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=timeout_s) as resp:  # noqa: S310 - http only
        return resp.read(PrometheusHistogramSource.MAX_BODY_BYTES).decode("utf-8")


def _router_recent(admin: str, query: dict, timeout_s: float) -> dict:
    """A router's GET /v1/latency/recent answer (router/admin.go) from its admin address (HOST:PORT)."""
    import urllib.request

    url = admin if admin.startswith(("http://", "https://")) else f"http://{admin}"
    full = f"{url.rstrip('/')}/v1/latency/recent?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(full, timeout=timeout_s) as resp:  # noqa: S310 - http only
        return json.loads(resp.read(65536).decode("utf-8"))


def router_traffic(tenant: str, admins: Sequence[str], kind: str = "transactions", timeout_s: float = 1.0,
                   fetch: Callable[[str], str] | None = None) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """Per router that answered: (`tenant`'s transactions (or statements) it measured so far, its clients'
    connections open now); and the routers that did not answer (admin -> why). The routers that carry the
    tenant's clients are those with both."""
    fetch = fetch or (lambda a: _router_metrics_page(a, timeout_s))
    out: dict[str, tuple[float, float]] = {}
    failed: dict[str, str] = {}
    prefix = f'slacker_router_connections{{tenant="{tenant}"}} '
    for admin in admins:
        try:
            page = fetch(admin)
            count = parse_histogram_totals(page, ROUTER_METRICS[kind], {"tenant": tenant})[1]
            conns = sum(float(line[len(prefix):]) for line in page.splitlines() if line.startswith(prefix))
            out[admin] = (count, conns)
        except Exception as exc:  # noqa: BLE001 - a router that does not answer carries nothing we can see
            failed[admin] = _describe(exc)
    return out, failed


class RouterLatencySource(CounterSource):
    """A tenant's latency as its clients see it, measured by the routers in their path (router/latency.go): per
    router a histogram of the tenant's transactions (from the first statement to the answer that ends it; or
    statements), summed over every router announced in the directory -- one population, each router weighted
    by how many it measured. A router that does not answer fails the sample (its clients' latency is unseen);
    a change in the set of routers starts the window anew (a router's totals are its own since it started)."""

    def __init__(self, tenant: str, routers: Callable[[], Sequence[str]], *, kind: str = "transactions",
                 window_s: float = DEFAULT_WINDOW_S, step_s: float = DEFAULT_STEP_S, timeout_s: float = 1.0,
                 fetch: Callable[[str], str] | None = None, clock: Clock = time.monotonic,
                 fetch_recent: Callable[[str, dict], dict] | None = None) -> None:
        if kind not in ROUTER_METRICS:
            raise InvalidInput(f"invalid router latency kind {kind!r}", "expected transactions or statements")
        self.tenant, self.kind = tenant, kind
        self._routers = routers
        self.timeout_s = min(timeout_s, max(0.2, step_s / 2))  # a step must not wait on a slow router
        self._fetch = fetch or (lambda a: _router_metrics_page(a, self.timeout_s))
        self._fetch_recent = fetch_recent or (lambda a, q: _router_recent(a, q, self.timeout_s))
        super().__init__(name=f"router:{tenant}", window_s=window_s, step_s=step_s, clock=clock)

    def _snapshot(self) -> tuple:
        admins = sorted(set(self._routers()))
        if not admins:
            raise LookupError("no router is announced in the directory")
        total_sum = total_count = 0.0
        for admin in admins:
            try:
                page = self._fetch(admin)
            except Exception as exc:  # noqa: BLE001
                raise LookupError(f"router {admin}: {_describe(exc)}") from None
            s, c = parse_histogram_totals(page, ROUTER_METRICS[self.kind], {"tenant": self.tenant})
            total_sum += s
            total_count += c
        return total_sum, total_count, tuple(admins)

    def recent(self, seconds: int) -> tuple[float, float] | None:
        """(sum of seconds, count) of the tenant's transactions (or statements) over the last `seconds` complete
        seconds, summed over every announced router's per-second ring (GET /v1/latency/recent): the load as it
        is now, without a window of reads. None when no router is announced or any fails to answer (its
        clients' share is unknown), or a router keeps fewer seconds than asked."""
        try:
            admins = sorted(set(self._routers()))
        except Exception:  # noqa: BLE001 - the directory's list: unknown, so no figure
            return None
        if not admins:
            return None
        total_sum = total_count = 0.0
        for admin in admins:
            try:
                doc = self._fetch_recent(admin, {"tenant": self.tenant, "seconds": seconds, "kind": self.kind})
                if int(doc["seconds"]) < seconds:
                    return None
                total_sum += float(doc["sum_s"])
                total_count += float(doc["count"])
            except Exception:  # noqa: BLE001 - a router that cannot say (down, an older build): unknown
                return None
        return total_sum, total_count


class PerformanceSchemaSource(CounterSource):
    """Average server-side latency from performance_schema summary tables.

    `kind="transactions"` (default) averages per transaction, however its
    statements were sent (text protocol, server-side prepared statements, stored
    procedures); it needs the `transaction` instrument, which Slacker's tenants
    enable in their config, and which this source switches on at runtime on a
    server started without it. `kind="statements"` averages per top-level
    statement; Slacker's tenants size statement instrumentation out to save
    memory, so on them it fails with a message saying so.
    `connect` must return a pymysql connection with connect/read timeouts set.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        kind: str = "transactions",
        users: Sequence[str] = (),
        exclude_users: Sequence[str] = (),
        window_s: float = DEFAULT_WINDOW_S,
        step_s: float = DEFAULT_STEP_S,
        name: str = "performance_schema",
        clock: Clock = time.monotonic,
    ) -> None:
        self._sql, self._params = performance_schema_sql(kind, users, exclude_users)
        self.kind = kind
        self._connect = connect
        self._conn: Any = None
        super().__init__(name=name, window_s=window_s, step_s=step_s, clock=clock)

    def _snapshot(self) -> tuple[float, float]:
        try:
            if self._conn is None:
                conn = self._connect()
                try:
                    check_enabled(conn, self.kind)
                except Exception:
                    _close_quietly(conn)
                    raise
                self._conn = conn
            return latency_totals(self._conn, self._sql, self._params)
        except Exception:
            self.close()  # reconnect next step rather than reuse a broken session
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - already broken or closing; nothing more to do
        pass


class CommitCounter:
    """The server's own count of commits (`Handler_commit`), to tell idle from blind.

    Handler_commit moves for every statement or transaction a client runs on a
    transactional table, whatever the protocol, and not for Slacker's own
    performance_schema reads or SHOW STATUS; so commits with no latency samples
    mean the latency source does not see the tenant's traffic. `connect` as for
    PerformanceSchemaSource. Raises on failure (WatchedSource turns that into
    "unknown").
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._conn: Any = None

    def __call__(self) -> float:
        try:
            if self._conn is None:
                self._conn = self._connect()
            return handler_commits(self._conn)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)


DEFAULT_BLIND_AFTER_COMMITS = 10


class WatchedSource(LatencySource):
    """A source checked against the server's own commit counters, over the same window.

    An empty window while the servers committed at least `min_commits` is not an
    idle tenant: the source cannot see the traffic (wrong filter, instrument off,
    a user filter that leaves the application out). Such a read becomes a failed
    sample marked `blind`, so the controller's failure rules apply and the reason
    shows. Every other read passes through with `server_commits` filled in.
    `commits` returns the total commits of the servers the source covers, summed
    (one or several callables).
    """

    def __init__(
        self,
        inner: LatencySource,
        commits: Callable[[], float] | Sequence[Callable[[], float]],
        *,
        min_commits: float = DEFAULT_BLIND_AFTER_COMMITS,
        window_s: float = DEFAULT_WINDOW_S,
        step_s: float = DEFAULT_STEP_S,
        clock: Clock = time.monotonic,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._commits = [commits] if callable(commits) else list(commits)
        self.min_commits = float(min_commits)
        self.window = CounterWindow(window_s, step_s)
        self._clock = clock

    def _commits_in_window(self) -> float | None:
        t = self._clock()
        try:
            total = sum(float(c()) for c in self._commits)
        except Exception:  # noqa: BLE001 - unknown traffic is no evidence of blindness
            self.window.clear()
            return None
        _, d_count, span = self.window.add(t, 0.0, total)
        return d_count if span > 0 else None

    def read(self) -> LatencySample:
        sample = _safe_read(self.inner)
        commits = self._commits_in_window()
        if commits is None:
            return sample
        if sample.ok and sample.count <= 0 and commits >= self.min_commits:
            return replace(sample, ok=False, blind=True, server_commits=commits, error=(
                f"no transactions seen while the server committed {commits:.0f} in the last "
                f"{sample.window_s or self.window.window_s:.0f}s: the source cannot see this tenant's traffic"))
        return replace(sample, server_commits=commits)

    def close(self) -> None:
        self.inner.close()
        for c in self._commits:
            close = getattr(c, "close", None)
            if close is not None:
                close()


def _combine_failures(samples: Sequence[LatencySample]) -> str:
    return "; ".join(f"{s.source}: {s.error}" for s in samples if not s.ok)


class MaxOf(LatencySource):
    """The worst of several sources (e.g. source and target node): least slack rules.

    If any source fails the result fails: the one we cannot see might be the one
    with no slack left. Sources with an empty window give no evidence and are
    skipped; if all are empty the result is empty.
    """

    def __init__(self, sources: Iterable[LatencySource], name: str | None = None) -> None:
        self.sources = list(sources)
        if not self.sources:
            raise InvalidInput("no latency sources given", "at least one is needed")
        self.name = name or "max(" + ", ".join(s.name for s in self.sources) + ")"

    def read(self) -> LatencySample:
        return max_of(self.name, [_safe_read(s) for s in self.sources])

    def close(self) -> None:
        for s in self.sources:
            s.close()


class AggregateOf(LatencySource):
    """All transactions of several sources as one population (every tenant of a node).

    The average is weighted by transaction count: sum of sums over sum of counts,
    over the same window, which is exact because samples carry both.
    """

    def __init__(self, sources: Iterable[LatencySource], name: str | None = None) -> None:
        self.sources = list(sources)
        if not self.sources:
            raise InvalidInput("no latency sources given", "at least one is needed")
        self.name = name or "all(" + ", ".join(s.name for s in self.sources) + ")"

    def read(self) -> LatencySample:
        return aggregate_of(self.name, [_safe_read(s) for s in self.sources])

    def close(self) -> None:
        for s in self.sources:
            s.close()


MeanOf = AggregateOf  # the name used in the design notes


class FollowingTenants(LatencySource):
    """Every tenant of a node as one population (AggregateOf, watched against their commit counters), following
    the node's tenants while a migration runs: a tenant another migration moves off leaves the population (its
    server is gone; reading it would fail the whole source and stall this copy), one that arrives joins.

    `members()` returns tenant id -> (make its latency source, make its commit counter). A change of
    membership starts the watch's commit window anew (a joining server's whole commit history is no burst).
    """

    def __init__(self, members: Callable[[], dict[str, tuple[Callable[[], LatencySource], Callable[[], float]]]],
                 *, window_s: float = DEFAULT_WINDOW_S, step_s: float = DEFAULT_STEP_S) -> None:
        self._members = members
        self.window_s, self.step_s = window_s, step_s
        self._parts: dict[str, tuple[LatencySource, Callable[[], float]]] = {}
        self._watch: WatchedSource | None = None
        self.name = "all()"
        self._refresh()
        if not self._parts:
            raise InvalidInput("no tenant to read latency from", "the node runs none", "")

    def _refresh(self) -> None:
        try:
            current = self._members()
        except Exception:  # noqa: BLE001 - keep the population we have
            return
        if set(current) == set(self._parts) or not current:
            return
        for tid in set(self._parts) - set(current):
            src, counter = self._parts.pop(tid)
            src.close()
            getattr(counter, "close", lambda: None)()
        for tid in sorted(set(current) - set(self._parts)):
            make_source, make_counter = current[tid]
            self._parts[tid] = (make_source(), make_counter())
        sources = [p[0] for p in self._parts.values()]
        inner = sources[0] if len(sources) == 1 else AggregateOf(sources)
        self.name = inner.name
        self._watch = WatchedSource(inner, [p[1] for p in self._parts.values()], window_s=self.window_s,
                                    step_s=self.step_s)

    def read(self) -> LatencySample:
        self._refresh()
        return self._watch.read()

    def close(self) -> None:
        for src, counter in self._parts.values():
            src.close()
            getattr(counter, "close", lambda: None)()
        self._parts.clear()


def _safe_read(source: LatencySource) -> LatencySample:
    # Third-party sources may not keep the never-raise promise; the combinators do.
    try:
        return source.read()
    except Exception as exc:  # noqa: BLE001
        return LatencySample.failed(getattr(source, "name", type(source).__name__), time.monotonic(), _describe(exc))


def _combined_failure(name: str, t: float, samples: Sequence[LatencySample]) -> LatencySample:
    failed = [s for s in samples if not s.ok]
    return replace(LatencySample.failed(name, t, _combine_failures(samples)), blind=all(s.blind for s in failed))


def _combined_times(samples: Sequence[LatencySample]) -> tuple[float, float]:
    # The oldest reading and the narrowest window: conservative for staleness checks.
    return min(s.t for s in samples), min(s.window_s for s in samples)


def max_of(name: str, samples: Sequence[LatencySample]) -> LatencySample:
    """Combine samples by taking the one with the highest latency."""
    t, window_s = _combined_times(samples)
    if any(not s.ok for s in samples):
        return _combined_failure(name, t, samples)
    with_data = [s for s in samples if s.count > 0]
    if not with_data:
        return LatencySample(name, t, window_s=window_s)
    worst = max(with_data, key=lambda s: s.sum_s / s.count)
    return LatencySample(name, t, sum_s=worst.sum_s, count=worst.count, window_s=window_s,
                         last_sum_s=worst.last_sum_s, last_count=worst.last_count, last_load=_total_load(samples))


def aggregate_of(name: str, samples: Sequence[LatencySample]) -> LatencySample:
    """Combine samples as one population: sum of sums over sum of counts."""
    t, window_s = _combined_times(samples)
    if any(not s.ok for s in samples):
        return _combined_failure(name, t, samples)
    lasts = None if any(s.last_count is None for s in samples) else \
        (sum(s.last_sum_s or 0.0 for s in samples), sum(s.last_count or 0.0 for s in samples))
    return LatencySample(
        name,
        t,
        sum_s=sum(s.sum_s for s in samples),
        count=sum(s.count for s in samples),
        window_s=window_s,
        last_sum_s=None if lasts is None else lasts[0],
        last_count=None if lasts is None else lasts[1],
        last_load=_total_load(samples),
    )


def _total_load(samples: Sequence[LatencySample]) -> float | None:
    """The newest step's transactions over all of them (None: one is not known)."""
    loads = [s.newest_load for s in samples]
    return None if any(x is None for x in loads) else sum(loads)


# --- parsing --latency-source -------------------------------------------------


@dataclass(frozen=True)
class LatencySourceSpec:
    """A parsed --latency-source value; the migration code builds the source from it."""

    kind: str  # "prometheus", "performance-schema" or "router"
    url: str = ""
    metric_name: str = DEFAULT_METRIC
    labels: Mapping[str, str] = field(default_factory=dict)
    pfs_kind: str = "transactions"
    users: tuple[str, ...] = ()
    exclude_users: tuple[str, ...] = ()
    node: str = "source"  # which side's server to read: source or target


def parse_latency_source_spec(text: str) -> LatencySourceSpec:
    """Parse `KIND[,key=value...]` (each kind's keys in its module of slacker.sources).

    prometheus: url= (required), metric= (default slacker_ycsb_txn_latency_seconds),
    node=source|target, any other key is a label filter.
    performance-schema (or pfs): table=statements|transactions, user=, exclude-user=
    (repeatable), node=source|target.
    router: table=transactions|statements.
    """
    from .sources import parse  # the kinds' modules import this one

    return parse(text)


# --- both ends guarded: the target node's tenants, through its agent ----------------


class NodeCountersSource(LatencySource):
    """Every tenant of another node as one population, from its agent's counters.

    `fetch()` returns the agent's `GET /v1/tenant-stats?counters=1` document; each
    tenant's ever-growing (sum, count) gets its own window here, and the window
    averages are summed (sum of sums over sum of counts), so the node's SLA is
    all its tenants, weighted by their traffic. A tenant that appears starts its
    own window (no evidence until its second read); one that goes away drops
    out. The agent unreachable, or a tenant's performance_schema failing, is a
    failed sample: the side we cannot see may be the one without slack.
    """

    def __init__(self, fetch: Callable[[], Mapping[str, Any]], *, name: str = "target",
                 window_s: float = DEFAULT_WINDOW_S, step_s: float = DEFAULT_STEP_S,
                 clock: Clock = time.monotonic) -> None:
        validate_window(window_s, step_s)
        self._fetch = fetch
        self.name = name
        self.window_s, self.step_s = window_s, step_s
        self._windows: dict[str, CounterWindow] = {}
        self._clock = clock

    def read(self) -> LatencySample:
        t = self._clock()
        try:
            doc = self._fetch()
            rows = doc.get("counters")
            if rows is None:
                raise ValueError("the agent does not publish tenant counters (an older version?)")
        except Exception as exc:  # noqa: BLE001 - any failure must become a sample
            return LatencySample.failed(self.name, t, _describe(exc))
        bad = [r for r in rows if r.get("error")]
        if bad:
            return LatencySample.failed(self.name, t, "; ".join(f"{r['tenant']}: {r['error']}" for r in bad))
        total_sum = total_count = 0.0
        last_sum, last_count = 0.0, 0.0
        spans = []
        seen = set()
        for r in rows:
            tid = str(r["tenant"])
            seen.add(tid)
            w = self._windows.get(tid)
            if w is None:
                w = self._windows[tid] = CounterWindow(self.window_s, self.step_s)
            d_sum, d_count, span = w.add(t, float(r["sum_s"]), float(r["count"]))
            total_sum += d_sum
            total_count += d_count
            spans.append(span)
            last = w.last()
            if last is not None:
                last_sum += last[0]
                last_count += last[1]
        for gone in set(self._windows) - seen:
            del self._windows[gone]
        return LatencySample(self.name, t, sum_s=total_sum, count=total_count, window_s=min(spans, default=0.0),
                             last_sum_s=last_sum, last_count=last_count)


class GuardedSource(LatencySource):
    """The source node's latency and the target node's, each against its own setpoint: the worse one steers.

    The controller sees one latency: max(source / setpoint, target / target
    setpoint) × setpoint, so a target at 1.2× its setpoint reads as 1.2× the
    source's setpoint. `setpoint()` and `target_setpoint()` are read every step
    (a live `--set setpoint=` moves both when the target follows the source).
    The source's own failure rules (blind, failed) pass through unchanged; a
    target that cannot be read fails the sample too. After each read, `sides`
    holds both latencies and which one bound, for the progress line and series.
    """

    def __init__(self, source: LatencySource, target: LatencySource, setpoint: Callable[[], float],
                 target_setpoint: Callable[[], float]) -> None:
        self.source, self.target = source, target
        self.name = source.name
        self._setpoint, self._target_setpoint = setpoint, target_setpoint
        self.sides: dict[str, Any] = {}

    def read(self) -> LatencySample:
        s, g = _safe_read(self.source), _safe_read(self.target)
        sp, tsp = float(self._setpoint()), float(self._target_setpoint())
        self.sides = {"source_latency_s": s.latency_s, "target_latency_s": g.latency_s,
                      "target_setpoint_s": tsp, "binding": None, "target_ok": g.ok,
                      "target_error": g.error if not g.ok else ""}
        if not s.ok:
            return s
        if not g.ok:
            return replace(LatencySample.failed(s.source, min(s.t, g.t), f"target guard: {g.error}", TargetLatencyError),
                           server_commits=s.server_commits)
        ratios = {}
        if s.latency_s is not None:
            ratios["source"] = (s.latency_s / sp, s.count)
        if g.latency_s is not None:
            ratios["target"] = (g.latency_s / tsp, g.count)
        if not ratios:
            return s  # nothing ran on either side: the source's empty (or idle) sample
        side = max(ratios, key=lambda k: ratios[k][0])
        ratio, count = ratios[side]
        self.sides["binding"] = side
        # The newest step alone, the same way: the worse of the two, in the source's setpoint.
        lasts = [x for x in ((s.last_latency_s, sp), (g.last_latency_s, tsp)) if x[0] is not None]
        last = max((v / spx for v, spx in lasts), default=None)
        last_fields = {"last_sum_s": None, "last_count": None} if last is None else \
            {"last_sum_s": last * sp, "last_count": 1.0}
        last_fields["last_load"] = s.newest_load  # the source's own transactions, whichever side steers
        if side == "source":
            return replace(s, **last_fields)
        return replace(s, sum_s=ratio * sp * count, count=count, t=min(s.t, g.t), **last_fields)

    def close(self) -> None:
        self.source.close()
        self.target.close()
