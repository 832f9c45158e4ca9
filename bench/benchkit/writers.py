"""Clients for benches and tests: an acknowledged writer through the router."""

from __future__ import annotations

import threading
import time

import pymysql

from slacker import loads


def _connect(listen: str, user: str, password: str, **kw):
    host, port = listen.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user=user, password=password, ssl_disabled=True,
                           autocommit=True, connect_timeout=5, **kw)


class RoutedWriter:
    """Inserts ids one at a time through the router (autocommit), reconnecting after an error; keeps
    what was acknowledged and every failed request. It writes table t in `database` (None: the session's, a
    shared tenant's own, else k: slacker/loads.py)."""

    def __init__(self, listen: str, tenant: str, password: str, rate_per_s: float = 25.0,
                 database: str | None = None) -> None:
        self.listen, self.tenant, self.password, self.period = listen, tenant, password, 1.0 / rate_per_s
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        conn = _connect(listen, f"app@{tenant}", password)
        db = loads.for_connection(conn, database, "k")
        self.database, self._table = db.name, db.qualified("t")
        with conn.cursor() as cur:
            if db.create:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {db.quoted}")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {self._table} (id INT PRIMARY KEY, pad VARCHAR(200))")
        conn.close()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "RoutedWriter":
        self._thread.start()
        return self

    def _run(self) -> None:
        conn, n = None, 0
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = _connect(self.listen, f"app@{self.tenant}", self.password, read_timeout=60,
                                    write_timeout=60)
                with conn.cursor() as cur:
                    cur.execute(f"INSERT INTO {self._table} VALUES (%s, REPEAT('x', 200))", (n + 1,))
                n += 1
                self.acked.append(n)
            except pymysql.MySQLError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                conn = None
                # The id's outcome is unknown: never reuse it.
                n += 1
            time.sleep(self.period)

    def stop_and_check(self) -> set[int]:
        self._stop.set()
        self._thread.join(90)
        conn = _connect(self.listen, f"app@{self.tenant}", self.password)
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {self._table}")
            present = {r[0] for r in cur.fetchall()}
        conn.close()
        return set(self.acked) - present
