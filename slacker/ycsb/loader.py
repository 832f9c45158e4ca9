"""`ycsb load`: create the usertable and bulk-load recordcount rows with multi-row INSERTs.

The key range [insertstart, insertstart+insertcount) is cut into contiguous
slices, one per loader connection (as YCSB splits a load across threads); each
sends batches of about a megabyte. Rows are the same rows YCSB would insert:
"user" + hashed row number, fieldcount random fields.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from .. import loads
from ..client import Endpoint
from ..errors import Conflict, InvalidInput, SlackerError, TenantError
from .driver import classify, db_errors, get_driver
from .generators import ValueGenerator, key_namer
from .properties import DEFAULT_DATABASE, Workload
from .workload import create_table_sql, insert_prefix

TARGET_STATEMENT_BYTES = 1_000_000  # well under MariaDB's 16 MiB max_allowed_packet


@dataclass
class LoadProgress:
    rows_done: int
    rows_total: int
    elapsed_s: float
    rows_per_s: float
    eta_s: float | None


@dataclass
class LoadResult:
    tenant: str
    database: str
    table: str
    rows: int
    elapsed_s: float
    rows_per_s: float
    approx_bytes: int
    threads: int
    batch_rows: int
    endpoint: str
    workload_sources: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadConfig:
    endpoint: Endpoint
    workload: Workload
    threads: int = 4
    batch_rows: int | None = None        # default: about 1 MB per statement
    database: str | None = None          # default: the workload's, else the session's, else ycsb
    drop: bool = False                   # drop and recreate an existing table
    driver: str = "mysqlclient"
    connect_timeout_s: float = 5.0
    query_timeout_s: float = 300.0
    seed: int = 1
    on_progress: Callable[[LoadProgress], None] | None = None
    progress_interval_s: float = 1.0


def load_table(cfg: LoadConfig) -> LoadResult:
    """Create the schema and load the rows; raise a one-line error on any failure."""
    wl = cfg.workload
    given = cfg.database or wl.database
    if given is not None:
        loads.check_database(given)
    if not (1 <= cfg.threads <= 64):
        raise InvalidInput(f"invalid thread count {cfg.threads}", "it must be between 1 and 64", "")
    batch = cfg.batch_rows or max(1, min(5000, TARGET_STATEMENT_BYTES // max(1, wl.row_bytes)))
    if batch < 1:
        raise InvalidInput(f"invalid batch size {batch}", "it must be at least 1 row", "")
    driver = get_driver(cfg.driver)
    errors = db_errors()
    ep = cfg.endpoint
    where = f"{ep.host}:{ep.port}"
    try:
        conn = driver.connect(ep, None, cfg.connect_timeout_s, cfg.query_timeout_s)
    except errors as exc:
        raise TenantError(f"cannot reach tenant {ep.tenant} at {where}", _describe(exc),
                          "check that it runs: `slacker status`, `slacker locate`") from None
    db = DEFAULT_DATABASE
    try:
        chosen = loads.choose(given, driver.session_database(conn), DEFAULT_DATABASE)
        db = chosen.name
        if chosen.create:
            driver.execute(conn, f"CREATE DATABASE IF NOT EXISTS {chosen.quoted}")
            driver.execute(conn, f"USE {chosen.quoted}")
        if cfg.drop:
            driver.execute(conn, f"DROP TABLE IF EXISTS {wl.table}")
        driver.execute(conn, create_table_sql(wl))
        rows = driver.execute(conn, f"SELECT 1 FROM {wl.table} LIMIT 1")
        if rows:
            raise Conflict(f"table {db}.{wl.table} on tenant {ep.tenant} already holds rows",
                           "loading again would collide with the existing keys",
                           "add --drop to recreate it, or run against it as it is")
    except errors as exc:
        raise TenantError(f"cannot prepare {db}.{wl.table} on tenant {ep.tenant}", _describe(exc), "") from None
    finally:
        driver.close(conn)

    lo, total = wl.insertstart, wl.insertcount
    n_threads = max(1, min(cfg.threads, total))
    bounds = [lo + total * i // n_threads for i in range(n_threads + 1)]
    done = [0] * n_threads
    failures: list[BaseException] = []
    stop = threading.Event()

    def load_slice(i: int) -> None:
        rng = random.Random(f"{cfg.seed}/load/{i}")
        values = ValueGenerator(wl.fieldlength, wl.minfieldlength, wl.fieldlengthdistribution, rng)
        key_name = key_namer(wl.zeropadding, wl.ordered_inserts)
        nfields = wl.fieldcount
        prefix = insert_prefix(wl)
        try:
            c = driver.connect(ep, db, cfg.connect_timeout_s, cfg.query_timeout_s)
        except errors as exc:
            failures.append(exc)
            stop.set()
            return
        try:
            nxt = values.next
            for start in range(bounds[i], bounds[i + 1], batch):
                if stop.is_set():
                    return
                end = min(start + batch, bounds[i + 1])
                rows = []
                for k in range(start, end):
                    rows.append("('" + key_name(k) + "','" + "','".join([nxt() for _ in range(nfields)]) + "')")
                rows.sort()  # key order within a batch: fewer page splits, ~1.4x faster here
                driver.execute(c, prefix + ",".join(rows))
                done[i] += end - start
        except errors as exc:
            failures.append(exc)
            stop.set()
        finally:
            driver.close(c)

    t0 = time.monotonic()
    threads = [threading.Thread(target=load_slice, args=(i,), name=f"ycsb-load-{i}", daemon=True)
               for i in range(n_threads)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(cfg.progress_interval_s / max(1, len(threads)))
            if cfg.on_progress is not None:
                cfg.on_progress(_progress(sum(done), total, time.monotonic() - t0))
    except KeyboardInterrupt:
        stop.set()
        for t in threads:
            t.join(30)
        raise
    elapsed = time.monotonic() - t0
    if failures:
        exc = failures[0]
        f = classify(exc)
        raise TenantError(f"loading {db}.{wl.table} on tenant {ep.tenant} failed after {sum(done)} rows",
                          _describe(exc), "rerun with --drop once the cause is fixed"
                          if f is None or not f.connection_lost else "check that the tenant runs, then rerun with --drop")
    rows_done = sum(done)
    return LoadResult(tenant=ep.tenant, database=db, table=wl.table, rows=rows_done, elapsed_s=round(elapsed, 3),
                      rows_per_s=rows_done / elapsed if elapsed > 0 else 0.0, approx_bytes=rows_done * wl.row_bytes,
                      threads=n_threads, batch_rows=batch, endpoint=where, workload_sources=list(wl.sources))


def _progress(done: int, total: int, elapsed: float) -> LoadProgress:
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else None
    return LoadProgress(done, total, elapsed, rate, eta)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SlackerError):
        return exc.one_line()
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):
        return f"{args[1]} (error {args[0]})"
    return str(exc) or type(exc).__name__
