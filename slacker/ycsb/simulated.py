"""A simulated database for the harness: fixed service times, scripted outages, no server.

Tests use it to check the latency accounting (queue time + service time),
retries and tenant following deterministically; bench/ycsb uses it to measure
the harness's own ceiling with the database taken out of the picture.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import pymysql

from ..client import Endpoint
from .driver import Driver, Statement


class SimulatedError(pymysql.err.OperationalError):
    """Raised like a real driver error: args are (MySQL error code, message)."""


@dataclass
class SimulatedServer:
    """One fake server. `serial` makes transactions run one at a time, like a saturated server.

    State changes (down, read_only) apply to new statements; `down` also makes
    connects fail, as a stopped server does.
    """

    service_time_s: float = 0.0
    per_statement_s: float = 0.0
    serial: bool = False
    down: bool = False
    read_only: bool = False
    fail_with: tuple[int, str] | None = None  # every transaction fails with this (code, message)
    rows: int = 1000
    database: str | None = None  # where a login puts a session naming none (the router, a shared tenant's)
    transactions: int = 0
    statements: int = 0
    executed: list[str] = field(default_factory=list, repr=False)  # every statement outside transactions
    connected: list[str | None] = field(default_factory=list, repr=False)  # each connection's database
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _serial_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> None:
        if self.down:
            raise SimulatedError(2013, "Lost connection to server during query")


class SimulatedConnection:
    def __init__(self, server: SimulatedServer, database: str | None = None) -> None:
        self.server = server
        self.database = database  # the session's, as DATABASE() says
        self.closed = False

    def close(self) -> None:
        self.closed = True


class SimulatedDriver(Driver):
    """A Driver whose servers are SimulatedServer objects, keyed by endpoint port."""

    name = "simulated"

    def __init__(self, servers: dict[int, SimulatedServer] | SimulatedServer) -> None:
        self.servers = servers if isinstance(servers, dict) else {0: servers}

    def _server(self, ep: Endpoint) -> SimulatedServer:
        if ep.port in self.servers:
            return self.servers[ep.port]
        if 0 in self.servers:
            return self.servers[0]
        raise SimulatedError(2002, f"Can't connect to server on '{ep.host}' (111)")

    def connect(self, ep, database, connect_timeout_s=5.0, query_timeout_s=60.0):
        server = self._server(ep)
        if server.down:
            raise SimulatedError(2002, f"Can't connect to server on '{ep.host}' (111)")
        session = database or ep.database or server.database  # server.database: where its login puts a session
        server.connected.append(session)
        return SimulatedConnection(server, session)

    def transaction_runner(self, conn: SimulatedConnection):
        server = conn.server

        def run(statements: Sequence[Statement]) -> None:
            if conn.closed:
                raise SimulatedError(2006, "Server has gone away")
            server.check()
            if server.fail_with is not None:
                raise SimulatedError(*server.fail_with)
            if server.read_only and any(not returns_rows for returns_rows, _ in statements):
                raise SimulatedError(1290, "The MariaDB server is running with the --read-only option")
            wait_s = server.service_time_s + server.per_statement_s * len(statements)
            if server.serial:
                with server._serial_lock:
                    _sleep(wait_s)
            else:
                _sleep(wait_s)
            server.check()
            with server._lock:
                server.transactions += 1
                server.statements += len(statements)

        return run

    def execute(self, conn: SimulatedConnection, sql: str) -> list[tuple[Any, ...]]:
        conn.server.check()
        conn.server.executed.append(sql)
        if sql.upper() == "SELECT DATABASE()":
            return [(conn.database,)]
        if sql.upper().startswith("USE "):
            conn.database = sql[4:].strip().strip("`")
        if "COUNT(*)" in sql.upper():
            return [(conn.server.rows,)]
        return [(1,)]

    def rollback_quietly(self, conn: Any) -> None:
        return None


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)
