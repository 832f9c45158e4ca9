"""The glue the migration's tick calls: read latency, step the controller, report.

`RatePolicy.step(now, bytes_done)` returns the rate to apply and the step's report
(slacker.controller.report.StepReport); it never raises, whatever the source does.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Protocol

from ..latency import LatencySample, LatencySource
from .base import ControllerStep, RateController
from .metrics import ControllerMetrics
from .report import StepReport
from .verdict import Feasibility

log = logging.getLogger(__name__)


def source_state(sample: LatencySample) -> str:
    """One word for what the latency source gave this step, for status lines and the series.

    ok: latency measured; idle: nothing ran on the tenant(s), nothing to measure;
    blind: the servers committed transactions the source did not see; failed: no answer.
    """
    if sample.ok:
        return "idle" if sample.count <= 0 else "ok"
    return "blind" if sample.blind else "failed"


class CopyRate(Protocol):
    """What a migration's copy is paced by, stepped once per step by its telemetry: a move's own `RatePolicy`,
    or its `Share` of the node's one controller (slacker.controller.budget). `slacker migrate --set` changes
    either through the same calls."""

    migration: str
    kind: str  # the controller's kind (slacker.controller.settings)
    unthrottled_at_max: bool
    baseline_latency_s: float | None  # the load's latency before the copy
    baseline_idle: bool  # nothing ran on the tenants while it was measured
    latency_source: dict[str, Any] | None  # what the latency is read from, and why (LatencyChoice.to_dict)

    @property
    def controller(self) -> RateController: ...

    @property
    def source(self) -> LatencySource: ...

    @property
    def last(self) -> ControllerStep | None: ...

    def initial_rate(self) -> int | None: ...

    def step(self, now: float, bytes_done: int, mark: str | None = None,
             bytes_total: float | None = None) -> tuple[int | None, StepReport]: ...

    def set_setpoint(self, setpoint_s: float) -> None: ...

    def pause(self, paused: bool) -> None: ...

    def close(self) -> None: ...


class RatePolicy:
    """One move's own controller and latency source (`CopyRate`)."""

    def __init__(
        self,
        source: LatencySource,
        controller: RateController,
        *,
        metrics: ControllerMetrics | None = None,
        migration: str = "",
        tenant: str = "",
    ) -> None:
        self.source = source
        self.controller = controller
        self.metrics = metrics
        self.migration = migration
        self.tenant = tenant
        self.last: ControllerStep | None = None
        # At the controller's maximum, copy unthrottled (None) instead of at max rate: set when the max
        # rate is only a nominal scale (no --max-rate given), see slacker/throttle.py.
        self.unthrottled_at_max = False
        # Whether the copy can finish under the setpoint (slacker.controller.verdict); its window is
        # 30 s of the copy's own seconds, so a verdict comes within a minute of the copy's start.
        self.feasibility = Feasibility(window_s=30.0, step_s=controller.step_s)
        self.baseline_latency_s: float | None = None
        self.baseline_from = ""  # "measured", or "agent history" (slacker.throttle.build_rate_policy)
        self.baseline_idle = False
        self.kind = ""
        self.latency_source: dict[str, Any] | None = None

    def set_baseline(self, latency_s: float | None) -> None:
        """The load's own latency measured before any byte moved (slacker.throttle.measure): kept, and given
        to a controller that counts the copy's cost from it (the model: ModelController.set_load_latency)."""
        self.baseline_latency_s = latency_s
        self.controller.set_load_latency(latency_s)

    def initial_rate(self) -> int | None:
        """The rate to start the copy at, before the first step."""
        if self.unthrottled_at_max and self.controller.fraction >= 1.0 and not self.controller.paused:
            return None
        return self.controller.rate_bytes_per_s

    def step(self, now: float, bytes_done: int, mark: str | None = None,
             bytes_total: float | None = None) -> tuple[int | None, StepReport]:
        """`mark`: why this step's latency is not the copy's doing (see RateController.set_mark).
        `bytes_total`: the copy's size as known now (it grows with the backup's redo log), for the
        verdict on whether the copy can finish."""
        self.controller.set_mark(mark)
        try:
            sample = self.source.read()
        except Exception as exc:  # noqa: BLE001 - a source that breaks its promise still must not stop the copy loop
            log.exception("latency source %s raised", self.source.name)
            sample = LatencySample.failed(self.source.name, now, f"source raised: {exc}")
        out = self.controller.step(sample, now, bytes_done)
        self.last = out
        report = StepReport(
            t=out.t, latency_s=out.latency_s, setpoint_s=out.setpoint_s, p=out.p, i=out.i, d=out.d,
            fraction=out.fraction, rate_bytes_per_s=out.rate_bytes_per_s, bytes_done=out.bytes_done, note=out.note,
            source_ok=out.source_ok, source=sample.source, source_state=source_state(sample),
            source_error=None if sample.ok else sample.error, window_count=sample.count,
            last_latency_s=sample.last_latency_s,  # the newest step alone
            server_commits=sample.server_commits, mark=mark, controller=self.controller.state(),
        ).with_sides(self.source.sides)  # both ends guarded: each side, and which steered
        verdict = self.feasibility.update(now, report, bytes_done, bytes_total, bool(mark) or self.controller.paused)
        if verdict is not None:
            report = replace(report, verdict=verdict)
        if self.unthrottled_at_max and out.fraction >= 1.0 and not self.controller.paused:
            report = replace(report, note="at max: copying unthrottled", rate_bytes_per_s=None)
        if self.metrics is not None:
            self.metrics.update(report, self.migration, self.tenant)
        return report.rate_bytes_per_s, report

    def set_setpoint(self, setpoint_s: float) -> None:
        self.controller.set_setpoint(setpoint_s)

    def pause(self, paused: bool) -> None:
        if paused:
            self.controller.pause()
        else:
            self.controller.resume()

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.remove(self.migration, self.tenant)
        self.source.close()
