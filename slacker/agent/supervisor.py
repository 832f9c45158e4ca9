"""Keeps a node's tenants running and samples their health for status and metrics."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..errors import SlackerError
from ..tenants import TenantManager

log = logging.getLogger("slacker.agent.supervisor")


@dataclass
class TenantHealth:
    id: str
    host: str
    port: int
    desired_state: str
    running: bool
    healthy: bool
    queries_total: int = 0
    queries_per_s: float = 0.0
    connections: int = 0
    restarts: int = 0
    error: str = ""
    sampled_at: float = field(default_factory=time.monotonic)
    kind: str = "server"  # slacker.kinds: a whole server, or a database in the node's shared server


class Supervisor:
    """Every `interval_s`: start tenants that should run but don't, sample their counters, and
    finish removals of tenant files that a crash cut short.

    Tenants whose desired state is not "running" (stopped by the operator, or
    incoming/outgoing in a migration) are left alone.
    """

    def __init__(self, tenants: TenantManager, interval_s: float = 2.0) -> None:
        self.tenants = tenants
        self.interval_s = interval_s
        self._health: dict[str, TenantHealth] = {}
        # Samples of tenants another kind's manager takes itself (slacker/kinds/shared.py), by that kind.
        self._extra: dict[str, dict[str, TenantHealth]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Tenants being created, deleted or migrated: hands off.
        self.busy: set[str] = set()
        # Called first in every tick (reconciliation with the directory, incoming leases).
        self.on_tick: list = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def snapshot(self) -> dict[str, TenantHealth]:
        with self._lock:
            out = dict(self._health)
            for samples in self._extra.values():
                out.update(samples)
            return out

    def put_extra(self, kind: str, samples: dict[str, TenantHealth]) -> None:
        """The latest samples of one kind's tenants, all of them (one not in it is forgotten)."""
        with self._lock:
            self._extra[kind] = dict(samples)

    def forget(self, tenant_id: str) -> None:
        with self._lock:
            self._health.pop(tenant_id, None)
            for samples in self._extra.values():
                samples.pop(tenant_id, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the supervisor must outlive any single failure
                log.exception("supervisor tick failed")
            self._stop.wait(self.interval_s)

    def tick(self) -> None:
        for hook in list(self.on_tick):
            try:
                hook()
            except Exception:
                log.exception("supervisor hook failed")
        try:
            self.tenants.sweep()  # finish a removal a crash cut short (slacker/trash.py)
        except OSError as exc:
            log.warning("sweeping the tenants' trash: %s", exc)
        seen = set()
        for tenant in self.tenants.list():
            seen.add(tenant.id)
            if tenant.id in self.busy:
                continue
            prev = self._health.get(tenant.id)
            restarts = prev.restarts if prev else 0
            if tenant.info.desired_state == "running" and not tenant.is_running():
                log.warning("tenant %s is not running; starting it", tenant.id)
                try:
                    self.tenants.start_tenant(tenant)
                    restarts += 1
                except SlackerError as exc:
                    log.error("could not start tenant %s: %s", tenant.id, exc.one_line())
            h = self.tenants.health(tenant)
            now = time.monotonic()
            qps = 0.0
            if prev and h.get("questions") is not None and prev.queries_total and now > prev.sampled_at:
                delta = h.get("questions", 0) - prev.queries_total
                qps = max(0.0, delta / (now - prev.sampled_at))
            health = TenantHealth(
                id=tenant.id, host=tenant.host, port=tenant.port, desired_state=tenant.info.desired_state,
                running=h["running"], healthy=h["healthy"], queries_total=h.get("questions", 0),
                queries_per_s=qps, connections=h.get("connections", 0), restarts=restarts,
                error=h.get("error", ""), sampled_at=now)
            with self._lock:
                self._health[tenant.id] = health
        with self._lock:
            for gone in set(self._health) - seen:
                del self._health[gone]
