"""Prometheus gauges for a running throttle controller, one series per migration.

Register once per registry with `ControllerMetrics.on(registry)`; call `update()`
each step and `remove()` when the migration ends so finished ones do not linger.
"""

from __future__ import annotations

import math
import threading
import weakref

from prometheus_client import CollectorRegistry, Gauge

from .report import StepReport

_LABELS = ("migration", "tenant")


class ControllerMetrics:
    _by_registry: "weakref.WeakKeyDictionary[CollectorRegistry, ControllerMetrics]" = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, _LABELS, registry=registry)

        self.latency = gauge("slacker_controller_latency_seconds", "Windowed transaction latency the controller saw (NaN: none).")
        self.setpoint = gauge("slacker_controller_setpoint_seconds", "Latency setpoint.")
        self.rate = gauge("slacker_controller_rate_bytes_per_second", "Copy rate set by the controller (0: paused; NaN: unthrottled).")
        self.fraction = gauge("slacker_controller_rate_fraction", "Copy rate as a fraction of the max rate.")
        self.p_term = gauge("slacker_controller_p_term", "Proportional contribution to the last rate change (fraction of max).")
        self.i_term = gauge("slacker_controller_i_term", "Integral contribution to the last rate change (fraction of max).")
        self.d_term = gauge("slacker_controller_d_term", "Derivative contribution to the last rate change (fraction of max).")
        self.source_ok = gauge("slacker_controller_latency_source_up", "1 if the latency source answered at the last step.")
        self._all = (self.latency, self.setpoint, self.rate, self.fraction, self.p_term, self.i_term, self.d_term, self.source_ok)

    @classmethod
    def on(cls, registry: CollectorRegistry) -> "ControllerMetrics":
        """The gauges on `registry`, registered the first time (a registry rejects duplicates)."""
        with cls._lock:
            metrics = cls._by_registry.get(registry)
            if metrics is None:
                metrics = cls._by_registry[registry] = cls(registry)
            return metrics

    def update(self, step: StepReport, migration: str, tenant: str) -> None:
        labels = {"migration": migration, "tenant": tenant}
        self.latency.labels(**labels).set(math.nan if step.latency_s is None else step.latency_s)
        self.setpoint.labels(**labels).set(math.nan if step.setpoint_s is None else step.setpoint_s)
        self.rate.labels(**labels).set(math.nan if step.rate_bytes_per_s is None else step.rate_bytes_per_s)
        self.fraction.labels(**labels).set(step.fraction)
        self.p_term.labels(**labels).set(step.p)
        self.i_term.labels(**labels).set(step.i)
        self.d_term.labels(**labels).set(step.d)
        self.source_ok.labels(**labels).set(1 if step.source_ok else 0)

    def remove(self, migration: str, tenant: str) -> None:
        for g in self._all:
            try:
                g.remove(migration, tenant)
            except KeyError:  # never updated for this migration
                pass
