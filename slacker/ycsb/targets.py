"""Where a benchmarked tenant lives: a fixed address, or the directory's answer that follows handovers.

Workers share one EndpointTracker per tenant. After a connection error they ask
it to refresh; it re-resolves through the directory at most every
`min_refresh_s`, so ten workers losing their connections at once cause one
lookup, not ten.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..client import Endpoint
from ..errors import InvalidInput, SlackerError

Resolver = Callable[[], Endpoint]


@dataclass(frozen=True)
class TenantTarget:
    """One tenant to benchmark: its label, offered rate, and how to find it."""

    tenant: str
    rate_tps: float | None  # None: closed loop (clients back to back, no offered rate)
    resolver: Resolver

    @classmethod
    def fixed(cls, endpoint: Endpoint, rate_tps: float | None, tenant: str | None = None) -> "TenantTarget":
        """A tenant at a fixed address (no directory; reconnects go to the same place)."""
        return cls(tenant or endpoint.tenant, rate_tps, lambda: endpoint)


def read_password_file(path: str | Path) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise InvalidInput(f"cannot read password file {path}", exc.strerror or str(exc),
                           "give a readable file holding only the password") from None


def direct_endpoint(tenant: str, host: str, port: int, user: str, password_file: str | Path | None) -> Endpoint:
    password = read_password_file(password_file) if password_file else ""
    return Endpoint(tenant=tenant, host=host, port=int(port), user=user, password=password, node="", epoch=0)


def cluster_resolver(tenant_id: str, cluster) -> Resolver:
    """A resolver that asks the cluster's directory where the tenant lives now."""
    from ..agent.client import cluster_clients
    from ..client import resolve

    agents, directory = cluster_clients(cluster)
    for agent in agents.values():
        # A lookup on the reconnect path must not hang for the client's default 30 s.
        agent.timeout_s = min(agent.timeout_s, 5.0)
    return lambda: resolve(tenant_id, directory=directory, agents=agents)


class EndpointTracker:
    """The current endpoint of one tenant, refreshed on demand and rate-limited."""

    def __init__(self, tenant: str, resolver: Resolver, min_refresh_s: float = 0.1) -> None:
        self.tenant = tenant
        self._resolver = resolver
        self.min_refresh_s = min_refresh_s
        self._lock = threading.Lock()
        self._endpoint: Endpoint | None = None
        self._last_refresh = -1e9
        self.last_error = ""
        self.refreshes = 0

    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            return self.refresh(None, force=True)
        return self._endpoint

    def refresh(self, stale: Endpoint | None, force: bool = False) -> Endpoint:
        """A newer endpoint than `stale` if one is known or can be looked up now; else the current one.

        Resolution errors while the tenant moves are expected (the directory may
        briefly answer with a frozen owner); they are remembered, not raised,
        unless there is no endpoint at all yet.
        """
        with self._lock:
            current = self._endpoint
            if current is not None and current != stale and not force:
                return current  # another worker already refreshed
            now = time.monotonic()
            if current is not None and not force and now - self._last_refresh < self.min_refresh_s:
                return current
            self._last_refresh = now
            try:
                ep = self._resolver()
            except SlackerError as exc:
                self.last_error = exc.one_line()
                if current is None:
                    raise
                return current
            self.refreshes += 1
            self._endpoint = ep
            return ep
