"""An OLTP load of multi-statement transactions that logs every commit it saw acknowledged.

Bank transfers: each transaction locks a hot account and a random one with
`SELECT ... FOR UPDATE`, moves an amount between them, and records the transfer;
closed-loop clients on a few hot rows keep some statement waiting on a row lock
almost all the time, as TPC-C's Payment does on its warehouse row. After a run,
`check()` proves on any server that every acknowledged transfer is there, none
that was refused is, and the balances agree with the transfers. It writes into the database it is given,
else its session's (a shared tenant's), else its own `oltp` (slacker/loads.py).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pymysql

from . import loads
from .loads import LoadDatabase

INITIAL_BALANCE = 1_000_000
DEFAULT_DATABASE = "oltp"  # a whole server's, where a session starts in no database


def schema(db: LoadDatabase) -> tuple[str, ...]:
    """The statements that make the load's tables in `db` (and `db` itself unless the session is in it)."""
    return (((f"CREATE DATABASE IF NOT EXISTS {db.quoted}",) if db.create else ()) + (
        f"CREATE TABLE IF NOT EXISTS {db.qualified('accounts')} (id INT PRIMARY KEY, balance BIGINT NOT NULL, "
        "pad VARCHAR(100) NOT NULL DEFAULT '') ENGINE=InnoDB",
        f"CREATE TABLE IF NOT EXISTS {db.qualified('transfers')} (id BIGINT PRIMARY KEY, src INT NOT NULL, "
        "dst INT NOT NULL, amount INT NOT NULL, at DOUBLE NOT NULL, KEY (src), KEY (dst)) ENGINE=InnoDB"))


SCHEMA = schema(LoadDatabase(DEFAULT_DATABASE, create=True))


def database_for(conn, database: str | None = None) -> LoadDatabase:
    """The database the load writes into on this connection's tenant (slacker/loads.py)."""
    return loads.for_connection(conn, database, DEFAULT_DATABASE)


@dataclass
class Txn:
    """One transaction as the client saw it (monotonic seconds)."""
    start: float
    end: float
    outcome: str  # "acked", "failed" (the server refused it: not committed), "unknown" (lost during COMMIT)
    error: str = ""


@dataclass
class CheckResult:
    transfers: int
    missing_acked: list[int] = field(default_factory=list)  # acknowledged but absent: a lost write
    unexpected: list[int] = field(default_factory=list)  # present but refused: a write that should not be
    balance_errors: list[int] = field(default_factory=list)  # accounts whose balance disagrees with transfers

    @property
    def ok(self) -> bool:
        return not (self.missing_acked or self.unexpected or self.balance_errors)


def load(conn, accounts: int = 1000, database: str | None = None) -> str:
    """Create the schema and the accounts (idempotent); the database's name."""
    db = database_for(conn, database)
    a = db.qualified("accounts")
    with conn.cursor() as cur:
        for stmt in schema(db):
            cur.execute(stmt)
        cur.execute(f"SELECT COUNT(*) FROM {a}")
        if cur.fetchone()[0] >= accounts:
            return db.name
        for lo in range(1, accounts + 1, 500):
            ids = range(lo, min(accounts, lo + 499) + 1)
            cur.execute(f"INSERT IGNORE INTO {a} (id, balance, pad) VALUES "
                        + ", ".join(f"({i}, {INITIAL_BALANCE}, REPEAT('p', 80))" for i in ids))
    if not conn.get_autocommit():
        conn.commit()
    return db.name


def check(conn, acked: set[int], failed: set[int], database: str | None = None) -> CheckResult:
    """What a server holds against what the clients saw."""
    db = database_for(conn, database)
    a, t = db.qualified("accounts"), db.qualified("transfers")
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM {t}")
        present = {r[0] for r in cur.fetchall()}
        cur.execute(f"SELECT a.id, a.balance - %s + COALESCE(o.s, 0) - COALESCE(i.s, 0) FROM {a} a "
                    f"LEFT JOIN (SELECT src, SUM(amount) s FROM {t} GROUP BY src) o ON o.src = a.id "
                    f"LEFT JOIN (SELECT dst, SUM(amount) s FROM {t} GROUP BY dst) i ON i.dst = a.id",
                    (INITIAL_BALANCE,))
        bad = [r[0] for r in cur.fetchall() if r[1] != 0]
    return CheckResult(len(present), sorted(acked - present), sorted(present & failed), bad)


@dataclass(frozen=True)
class TransferSql:
    """A transfer's statements on one database."""

    lock: str
    debit: str
    credit: str
    record: str

    @classmethod
    def on(cls, db: LoadDatabase) -> "TransferSql":
        a, t = db.qualified("accounts"), db.qualified("transfers")
        return cls(f"SELECT id, balance FROM {a} WHERE id IN (%s, %s) ORDER BY id FOR UPDATE",
                   f"UPDATE {a} SET balance = balance - %s WHERE id = %s",
                   f"UPDATE {a} SET balance = balance + %s WHERE id = %s",
                   f"INSERT INTO {t} VALUES (%s, %s, %s, %s, %s)")


class TransferLoad:
    """`threads` closed-loop clients, each on a connection of its own from `make_client()`.

    `make_client()` returns an object with `connection()` (a connected PyMySQL connection, following
    the tenant as slacker.client.TenantClient does), `close()` and `CONNECTION_ERRORS`. `database`: as
    for `load` (None: the session's, else `oltp`), asked once, of whichever session connects first.
    """

    def __init__(self, make_client: Callable[[], object], threads: int = 8, accounts: int = 1000,
                 hot_accounts: int = 4, think_s: float = 0.0, seed: int = 1, database: str | None = None) -> None:
        if database is not None:
            loads.check_database(database)
        self.make_client = make_client
        self.database = database
        self._sql: TransferSql | None = None
        self.threads = threads
        self.accounts = accounts
        self.hot_accounts = hot_accounts
        self.think_s = think_s
        self.seed = seed
        self.txns: list[Txn] = []
        self.acked: set[int] = set()
        self.failed: set[int] = set()
        self.unknown: set[int] = set()
        self.errors: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def start(self) -> "TransferLoad":
        for w in range(self.threads):
            t = threading.Thread(target=self._run, args=(w,), name=f"oltp-{w}", daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(timeout=60)

    def _note(self, txn: Txn, tid: int, error: str = "") -> None:
        with self._lock:
            self.txns.append(txn)
            {"acked": self.acked, "failed": self.failed, "unknown": self.unknown}[txn.outcome].add(tid)
            if error:
                self.errors[error] = self.errors.get(error, 0) + 1

    def _run(self, worker: int) -> None:
        rng = random.Random(self.seed * 1000 + worker)
        client = self.make_client()
        n = 0
        try:
            while not self._stop.is_set():
                n += 1
                tid = (worker + 1) * 100_000_000 + n
                src = rng.randint(1, self.hot_accounts)
                dst = rng.randint(self.hot_accounts + 1, self.accounts)
                if rng.random() < 0.5:
                    src, dst = dst, src
                t0 = time.monotonic()
                outcome, error = self._transfer(client, tid, src, dst, rng.randint(1, 100))
                self._note(Txn(t0, time.monotonic(), outcome, error), tid, error)
                if outcome != "acked" and not self._stop.is_set():
                    time.sleep(0.01)  # a client backs off a little after an error
                elif self.think_s:
                    time.sleep(self.think_s)
        finally:
            client.close()

    def _transfer(self, client, tid: int, src: int, dst: int, amount: int) -> tuple[str, str]:
        try:
            conn = client.connection()
        except Exception as exc:  # no owner reachable right now
            return "failed", type(exc).__name__
        committing = False
        try:
            sql = self._sql or self._statements(conn)
            conn.begin()
            with conn.cursor() as cur:
                cur.execute(sql.lock, (src, dst))
                cur.fetchall()
                cur.execute(sql.debit, (amount, src))
                cur.execute(sql.credit, (amount, dst))
                cur.execute(sql.record, (tid, src, dst, amount, time.time()))
            committing = True
            conn.commit()
            return "acked", ""
        except client.CONNECTION_ERRORS as exc:
            client.close()
            code = str(exc.args[0]) if getattr(exc, "args", None) else type(exc).__name__
            if committing and not _refused(exc):
                return "unknown", code
            return "failed", code
        except pymysql.err.MySQLError as exc:
            try:
                conn.rollback()
            except Exception:
                client.close()
            return "failed", str(exc.args[0]) if exc.args else type(exc).__name__

    def _statements(self, conn) -> TransferSql:
        # Every worker's session is the same tenant's: whichever asks first decides for all.
        db = database_for(conn, self.database)
        with self._lock:
            if self._sql is None:
                self.database, self._sql = db.name, TransferSql.on(db)
            return self._sql

    def transactions(self) -> list[Txn]:
        with self._lock:
            return list(self.txns)

    def summary(self, since: float | None = None, until: float | None = None) -> dict:
        return summarize(self.transactions(), since, until)


def summarize(txns: list[Txn], since: float | None = None, until: float | None = None) -> dict:
    """Throughput and latency of the transactions that ended in [since, until) (monotonic seconds)."""
    txns = [t for t in txns if (since is None or t.end >= since) and (until is None or t.end < until)]
    if not txns:
        return {"txns": 0, "acked": 0, "errors": 0, "tps": 0.0, "p95_ms": None, "max_ms": None}
    span = ((until if until is not None else max(t.end for t in txns))
            - (since if since is not None else min(t.start for t in txns)))
    lat = sorted((t.end - t.start) * 1000 for t in txns if t.outcome == "acked")
    acked = len(lat)
    return {"txns": len(txns), "acked": acked, "errors": len(txns) - acked,
            "tps": round(acked / span, 1) if span > 0 else 0.0,
            "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1) if lat else None,
            "max_ms": round(lat[-1], 1) if lat else None}


def _refused(exc) -> bool:
    """A server error during COMMIT that says it was not committed (as opposed to a lost reply)."""
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and isinstance(exc.args[0], int) \
        and exc.args[0] < 2000
