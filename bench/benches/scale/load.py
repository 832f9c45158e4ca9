"""A light load on every tenant, through the router: one client per tenant, one short read-write
transaction every `period_s` (jittered), on a table the bench makes in each tenant."""

from __future__ import annotations

import random
import threading
import time

import pymysql


class LightLoad:
    def __init__(self, router: str, credentials: dict[str, str], period_s: float = 2.0) -> None:
        self.host, port = router.rsplit(":", 1)
        self.port = int(port)
        self.credentials = credentials  # tenant -> app password
        self.period_s = period_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.done = 0
        self.errors = 0
        self._lock = threading.Lock()

    def connect(self, tenant: str):
        return pymysql.connect(host=self.host, port=self.port, user=f"app@{tenant}",
                               password=self.credentials[tenant], autocommit=True, ssl_disabled=True,
                               connect_timeout=10, read_timeout=30)

    def prepare(self, tenant: str, wait_s: float = 15.0) -> None:
        # The router learns of a new tenant at its next directory listing (every second by default).
        deadline = time.monotonic() + wait_s
        while True:
            try:
                conn = self.connect(tenant)
                break
            except pymysql.err.OperationalError as exc:
                if "in the directory" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS scale")
            cur.execute("CREATE TABLE IF NOT EXISTS scale.kv (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
            cur.execute("INSERT IGNORE INTO scale.kv VALUES " + ",".join(f"({i}, 0)" for i in range(100)))
        conn.close()

    def _run(self, tenant: str) -> None:
        rng = random.Random(tenant)
        conn = None
        while not self._stop.wait(rng.uniform(0.5, 1.5) * self.period_s):
            try:
                if conn is None:
                    conn = self.connect(tenant)
                with conn.cursor() as cur:
                    conn.begin()
                    key = rng.randrange(100)
                    cur.execute("SELECT v FROM scale.kv WHERE id = %s", (key,))
                    cur.fetchall()
                    cur.execute("UPDATE scale.kv SET v = v + 1 WHERE id = %s", (key,))
                    conn.commit()
                with self._lock:
                    self.done += 1
            except pymysql.MySQLError:
                with self._lock:
                    self.errors += 1
                conn = None
        if conn is not None:
            conn.close()

    def start(self) -> None:
        for tenant in self.credentials:
            t = threading.Thread(target=self._run, args=(tenant,), daemon=True, name=f"load-{tenant}")
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=40)
        self._threads = []
        self._stop = threading.Event()
