"""Controller gauges on a Prometheus registry."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest

from slacker.controller import PidController
from slacker.controller.metrics import ControllerMetrics
from slacker.latency import LatencySample


def test_gauges_follow_controller_steps() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics.on(registry)
    assert ControllerMetrics.on(registry) is metrics  # registering twice would raise
    c = PidController(1.0, 50_000_000)
    labels = {"migration": "m1", "tenant": "t1"}

    step = c.step(LatencySample("x", 0.0, sum_s=50.0, count=100), 0.0)
    metrics.update(step, **labels)
    value = lambda name: registry.get_sample_value(name, labels)  # noqa: E731
    assert value("slacker_controller_latency_seconds") == 0.5
    assert value("slacker_controller_setpoint_seconds") == 1.0
    assert value("slacker_controller_rate_bytes_per_second") == step.rate_bytes_per_s
    assert value("slacker_controller_i_term") == step.i
    assert value("slacker_controller_latency_source_up") == 1

    step = c.step(LatencySample.failed("x", 1.0, "down"), 1.0)
    metrics.update(step, **labels)
    assert math.isnan(value("slacker_controller_latency_seconds"))
    assert value("slacker_controller_latency_source_up") == 0

    metrics.remove(**labels)
    metrics.remove(**labels)  # idempotent
    assert b'migration="m1"' not in generate_latest(registry)


def test_rate_policy_glue_never_raises_and_reports() -> None:
    from slacker.controller.loop import RatePolicy
    from slacker.latency import LatencySource

    class Broken(LatencySource):
        name = "broken"

        def read(self) -> LatencySample:
            raise RuntimeError("plugin bug")

    registry = CollectorRegistry()
    policy = RatePolicy(
        Broken(),
        PidController(1.0, 1000, initial_fraction=0.5),
        metrics=ControllerMetrics.on(registry),
        migration="m2",
        tenant="t2",
    )
    assert policy.initial_rate() == 500
    rates = []
    for k in range(6):
        rate, state = policy.step(float(k), k * 100)
        rates.append(rate)
    assert rates == [500, 500, 250, 125, 62, 31]
    assert state.source_ok is False and "plugin bug" in state.note and state.bytes_done == 500
    assert registry.get_sample_value("slacker_controller_rate_bytes_per_second", {"migration": "m2", "tenant": "t2"}) == 31
    policy.close()
    assert registry.get_sample_value("slacker_controller_rate_bytes_per_second", {"migration": "m2", "tenant": "t2"}) is None


def test_rate_policy_copies_unthrottled_at_a_nominal_max() -> None:
    # No --max-rate given: the max is a nominal scale, and at its maximum the pipe runs at full speed
    # (None = unthrottled), so a setpoint that does not bind costs nothing against the unthrottled copy.
    from slacker.controller import ModelController
    from slacker.controller.loop import RatePolicy
    from slacker.latency import LatencySource

    class Quiet(LatencySource):
        name = "quiet"

        def read(self) -> LatencySample:
            return LatencySample("quiet", 0.0, sum_s=1.0, count=100)  # 10 ms against a 1 s setpoint

    for nominal in (True, False):
        policy = RatePolicy(Quiet(), ModelController(1.0, 1000, start_rate_bytes_per_s=500, stale_after_s=1e9))
        policy.unthrottled_at_max = nominal
        rates = [policy.step(float(k), 500 * k)[0] for k in range(6)]
        assert rates[-1] == (None if nominal else 1000), rates  # at its maximum: unthrottled, or the cap given
        policy.controller.pause()
        assert policy.step(3.0, 0)[0] == 0  # paused is 0, never unthrottled


def test_a_max_rate_set_live_is_a_cap_again() -> None:
    from types import SimpleNamespace

    from slacker.controller import ModelController
    from slacker.controller.loop import RatePolicy
    from slacker.throttle import apply_settings

    policy = RatePolicy(None, ModelController(1.0, 1000))  # type: ignore[arg-type]
    policy.unthrottled_at_max = True
    apply_settings(SimpleNamespace(rate_policy=policy, pipe=None), {"max_rate_bytes_per_s": 500})
    assert policy.unthrottled_at_max is False and policy.controller.max_rate_bytes_per_s == 500
