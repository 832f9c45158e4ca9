"""The seam between a migration and its controller (issue 40): one registry of kinds, settings a frozen
dataclass checked once, the step report one typed record, latency-source failures typed."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from slacker.controller import ModelController, RatePolicy, PidController
from slacker.controller.report import StepReport
from slacker.controller.settings import CLI_KINDS, DEFAULT_KIND, KINDS, ControllerSettings
from slacker.controller.verdict import OVER_SHARE, STILL_SHARE
from slacker.errors import BlindLatencySource, InvalidInput, LatencySourceError, TargetLatencyError
from slacker.latency import GuardedSource, LatencySample, LatencySource
from slacker.migration.options import MigrationOptions

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_controller_slack_is_refused_with_one_line():
    p = subprocess.run([sys.executable, "-m", "slacker", "migrate", "t1", "--to", "node-2", "--setpoint", "50ms",
                        "--controller", "slack"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "unknown controller 'slack'" in lines[0] and "replaced by the model controller" in lines[0]
    assert "model | pid | threshold" in lines[0]


def test_the_registry_is_what_the_cli_offers_and_the_docs_list():
    assert DEFAULT_KIND == "model" and KINDS["model"].cls is ModelController and KINDS["pid"].cls is PidController
    assert CLI_KINDS == ("model", "pid", "threshold")  # fixed: --rate
    help_text = subprocess.run([sys.executable, "-m", "slacker", "migrate", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    assert "--controller model|pid|threshold" in help_text and "[default: model]" in " ".join(help_text.split())
    for page in ("controller.md", "migration.md"):
        text = (DOCS / page).read_text()
        assert "--controller " + "\\|".join(CLI_KINDS) in text, page
    assert "| `model` |" in (DOCS / "controller.md").read_text()  # the options table's default


def test_settings_are_checked_once_and_frozen():
    s = ControllerSettings.from_dict({"setpoint_s": 0.05, "gains": "0.2,0.05,0.1", "window_s": None,
                                      "max_rate_bytes_per_s": "50MB/s", "latency_sources": ["performance-schema"]})
    assert s.kind == "model" and s.window_s == 3.0 and s.max_rate_bytes_per_s == 50e6
    assert s.latency_sources == ("performance-schema",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.setpoint_s = 1.0  # type: ignore[misc]
    assert ControllerSettings.from_dict(s.to_dict()) == s
    assert isinstance(s.build(), ModelController) and s.build().max_rate_bytes_per_s == 50e6
    for bad, said in (({"setpoint_s": 0.05, "kind": "slack"}, "replaced by the model"),
                      ({"setpoint_s": 0.05, "bogus": 1}, r"unknown controller setting\(s\) bogus"),
                      ({"kind": "pid"}, "needs --setpoint"),
                      ({"setpoint_s": 0.05, "window_s": 0.5}, "window"),
                      ({"setpoint_s": -1}, "setpoint"),
                      ({"setpoint_s": 0.05, "force": "yes"}, "expected true or false"),
                      ({"setpoint_s": 0.05, "kind": "fixed"}, "needs a rate")):
        with pytest.raises(InvalidInput, match=said):
            ControllerSettings.from_dict(bad)
    # A request's dict becomes the typed settings once, in MigrationOptions.validate().
    opts = MigrationOptions(target="node-2", controller={"setpoint_s": 0.05, "kind": "pid"}).validate()
    assert isinstance(opts.controller, ControllerSettings) and opts.controller.kind == "pid"


def test_the_docs_verdict_shares_are_the_codes():
    text = " ".join((DOCS / "controller.md").read_text().split())
    assert f"at least {STILL_SHARE:.0%}".replace("%", " %") + " of the window's seconds" in text
    assert OVER_SHARE == 0.5 and "at least half of those" in text


class Fixed(LatencySource):
    name = "fixed"

    def __init__(self, sample: LatencySample) -> None:
        self.sample = sample

    def read(self) -> LatencySample:
        return self.sample


def test_latency_source_failures_are_typed():
    assert issubclass(LatencySourceError, InvalidInput)
    assert LatencySample.failed("a", 0.0, "connection refused").failure is LatencySourceError
    blind = LatencySample("a", 0.0, ok=False, blind=True, error="no transactions seen")
    assert blind.failure is BlindLatencySource and blind.blind
    ok = LatencySample("a", 0.0, sum_s=1.0, count=100)
    down = LatencySample.failed("t", 0.0, "connection refused")
    guard = GuardedSource(Fixed(ok), Fixed(down), setpoint=lambda: 0.05, target_setpoint=lambda: 0.05)
    g = guard.read()
    assert not g.ok and g.failure is TargetLatencyError


def test_the_step_report_is_one_record_that_series_status_and_metrics_read():
    from prometheus_client import CollectorRegistry

    from slacker.controller.metrics import ControllerMetrics

    registry = CollectorRegistry()
    policy = RatePolicy(Fixed(LatencySample("fixed", 0.0, sum_s=2.0, count=100, window_s=3.0, last_sum_s=0.6,
                                            last_count=30)),
                        ModelController(0.05, 100e6, stale_after_s=1e9), metrics=ControllerMetrics.on(registry),
                        migration="m1", tenant="t1")
    rate, report = policy.step(1.0, 10, mark="backup start")
    assert isinstance(report, StepReport) and rate == report.rate_bytes_per_s
    status = report.to_dict()
    series = report.series()
    assert status["mark"] == "backup start" and status["latency_s"] == pytest.approx(0.02)
    assert "model_lag_s" in status and "model_lag_s" in series  # the controller's state, flattened
    assert {"t", "rate_bytes_per_s", "bytes_done", "source"} & set(series) == set()  # the series has its own
    assert set(series) <= set(status)
    labels = {"migration": "m1", "tenant": "t1"}
    assert registry.get_sample_value("slacker_controller_latency_seconds", labels) == pytest.approx(report.latency_s)
    assert registry.get_sample_value("slacker_controller_rate_bytes_per_second", labels) == report.rate_bytes_per_s
    # Every key the status and the series show is a field of the record or the controller's state.
    names = {f.name for f in dataclasses.fields(StepReport)} | set(report.controller)
    assert set(status) <= names


def test_a_guarded_steps_sides_are_all_shown_even_with_no_evidence_on_one():
    """The target guard's keys are in the series and status whenever both ends are guarded (None: that side
    had no transactions), and absent when only the source is read."""
    idle = LatencySample("target", 0.0, window_s=3.0)  # nothing ran on the target
    busy = LatencySample("source", 0.0, sum_s=2.0, count=100, window_s=3.0)
    guarded = RatePolicy(GuardedSource(Fixed(busy), Fixed(idle), setpoint=lambda: 0.05, target_setpoint=lambda: 0.05),
                         ModelController(0.05, 100e6, stale_after_s=1e9))
    _, report = guarded.step(1.0, 0)
    series = report.series()
    assert series["target_latency_s"] is None and series["target_setpoint_s"] == 0.05
    assert {"binding", "source_latency_s"} <= set(series)
    _, alone = RatePolicy(Fixed(busy), ModelController(0.05, 100e6, stale_after_s=1e9)).step(1.0, 0)
    assert not {"binding", "target_latency_s", "target_setpoint_s"} & set(alone.series())


def test_a_setpoint_headroom_raises_only_a_setpoint_under_the_load_and_travels_only_when_set():
    c = ControllerSettings(setpoint_s=0.010, setpoint_headroom=0.25)
    assert c.setpoint_over(None) == (0.010, "")
    assert c.setpoint_over(0.006) == (0.010, "")            # 6 ms x 1.25 is under 10 ms: as asked
    sp, why = c.setpoint_over(0.013)
    assert sp == pytest.approx(0.01625) and "13.0ms" in why and "+ 25%" in why
    assert ControllerSettings(setpoint_s=0.010).setpoint_over(0.013) == (0.010, "")
    assert "setpoint_headroom" not in ControllerSettings(setpoint_s=0.01).to_dict()  # an older agent takes it
    assert ControllerSettings.from_dict(c.to_dict()) == c
    with pytest.raises(InvalidInput, match="invalid setpoint headroom"):
        ControllerSettings(setpoint_s=0.01, setpoint_headroom=-0.1)
