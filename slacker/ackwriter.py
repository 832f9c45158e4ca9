"""A client that writes at a steady rate and logs every commit it saw acknowledged.

It reaches the tenant through the directory (slacker.client.TenantClient), so
it follows a migration to the new owner. After the run, every id in `acked`
must be on whichever server owns the tenant: the tests and bench/handover use
it to prove that a migration loses nothing. It writes into the database it is given, else its session's
(a shared tenant's), else its own `acks` (slacker/loads.py).
"""

from __future__ import annotations

import threading
import time

import pymysql

from slacker import loads
from slacker.client import TenantClient
from slacker.loads import LoadDatabase
from slacker.oltp import Txn

DEFAULT_DATABASE = "acks"  # a whole server's, where a session starts in no database


def schema(db: LoadDatabase) -> tuple[str, ...]:
    """The statements that make the writer's tables in `db` (and `db` itself unless the session is in it)."""
    return (((f"CREATE DATABASE IF NOT EXISTS {db.quoted}",) if db.create else ()) + (
        f"CREATE TABLE IF NOT EXISTS {db.qualified('log')} (id BIGINT PRIMARY KEY, writer INT, "
        "payload VARCHAR(200), at DOUBLE)",
        f"CREATE TABLE IF NOT EXISTS {db.qualified('probe')} (node VARCHAR(32), n BIGINT, at DOUBLE)"))


SCHEMA = schema(LoadDatabase(DEFAULT_DATABASE, create=True))


class AckedWriter:
    """`database`: where it writes (None: its session's, else `acks`), decided by `start()`."""

    def __init__(self, client: TenantClient, writer_id: int = 1, rate_per_s: float = 100.0,
                 database: str | None = None) -> None:
        if database is not None:
            loads.check_database(database)
        self.client = client
        self.database = database
        self._insert = ""
        self.writer_id = writer_id
        self.interval = 1.0 / rate_per_s
        self.acked: list[int] = []
        self.unknown: list[int] = []  # outcome unknown: the connection broke during COMMIT
        self.errors: dict[str, int] = {}
        self.txns: list[Txn] = []  # every write as the client saw it (slacker.oltp.summarize reads them)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._next = writer_id * 10_000_000

    def start(self) -> "AckedWriter":
        db = self.client.run(self._prepare)
        self.database = db.name
        self._insert = f"INSERT INTO {db.qualified('log')} VALUES (%s, %s, REPEAT('x', 150), %s)"
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _prepare(self, conn) -> LoadDatabase:
        db = loads.for_connection(conn, self.database, DEFAULT_DATABASE)
        with conn.cursor() as cur:
            for stmt in schema(db):
                cur.execute(stmt)
        return db

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            # Steady schedule: a slow commit is not followed by a full extra interval of idling.
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()
            self._next += 1
            i = self._next
            t0 = time.monotonic()
            outcome = "unknown"
            try:
                conn = self.client.connection()
                with conn.cursor() as cur:
                    cur.execute(self._insert, (i, self.writer_id, time.time()))
                self.acked.append(i)
                outcome = "acked"
            except self.client.CONNECTION_ERRORS as exc:
                self.unknown.append(i)
                self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                self.client.close()
            except pymysql.err.MySQLError as exc:
                self.unknown.append(i)
                self.errors[str(exc.args[0])] = self.errors.get(str(exc.args[0]), 0) + 1
            except Exception as exc:  # TenantError while reconnecting: keep trying until stopped
                self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                time.sleep(0.05)
            self.txns.append(Txn(t0, time.monotonic(), outcome))


class WriteProber:
    """Tries a write on every server of a tenant every `interval_s`, to catch two writable at once.

    `servers` maps a node name to the (host, port) its copy of the tenant would listen on. A round
    in which more than one server accepted the INSERT is a moment with two writable owners.
    """

    def __init__(self, servers: dict[str, tuple[str, int]], user: str, password: str,
                 interval_s: float = 0.1, ssl_ca: str | None = None, database: str = DEFAULT_DATABASE) -> None:
        self.servers = servers
        self._insert = f"INSERT INTO {loads.quote(database)}.probe VALUES (%s, %s, %s)"
        self.ssl_ca = ssl_ca  # a TLS cluster's CA: the probes connect with TLS
        self.user = user
        self.password = password
        self.interval_s = interval_s
        self.rounds = 0
        self.accepted: dict[str, int] = {name: 0 for name in servers}
        self.double_writable: list[tuple[float, list[str]]] = []
        self._conns: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="write-prober", daemon=True)

    def start(self) -> "WriteProber":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:
                pass

    def _try(self, name: str, n: int) -> bool:
        from slacker import mariadb

        conn = self._conns.get(name)
        try:
            if conn is None:
                host, port = self.servers[name]
                tls = None
                if self.ssl_ca:
                    from slacker.tls import client_context
                    tls = client_context(self.ssl_ca)
                conn = mariadb.connect(user=self.user, password=self.password, host=host, port=port,
                                       timeout_s=0.5, ssl_context=tls)
                self._conns[name] = conn
            with conn.cursor() as cur:
                cur.execute(self._insert, (name, n, time.time()))
            return True
        except Exception:
            self._conns.pop(name, None)
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            return False

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.rounds += 1
            ok = [name for name in self.servers if self._try(name, self.rounds)]
            for name in ok:
                self.accepted[name] += 1
            if len(ok) > 1:
                self.double_writable.append((time.time(), ok))
