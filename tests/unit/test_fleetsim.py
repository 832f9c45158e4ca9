"""bench/fleetsim's parts: the lower bound on moves, and the planner fed by a small simulated fleet
keeping it under its SLA better than no rebalancing (pure logic; the planner is slacker's own)."""

from __future__ import annotations

from benches.fleetsim.bound import min_removals
from benches.fleetsim.model import FleetModel, Loads
from benches.fleetsim.sim import SimOptions, run


def test_fewest_removals_take_the_largest_first():
    assert min_removals([1, 5, 3, 1], 10) == 0        # not over
    assert min_removals([1, 5, 3, 1], 6) == 1         # excess 4: the 5 alone
    assert min_removals([1, 5, 3, 1], 2) == 2         # excess 8: 5 + 3
    assert min_removals([1, 5, 3, 1], 0) == 4


def test_the_model_keeps_its_mean_and_caps_a_tenant():
    m = FleetModel(nodes=20, tenants=400, seed=3)
    loads = Loads(m)
    assert abs(loads.base.mean() * m.tenants / (m.nodes * m.capacity) - m.utilisation) < 1e-9
    assert loads.base.max() <= m.max_tenant_share * m.capacity + 1e-12
    mean = sum(loads.step().sum() for _ in range(120)) / 120 / (m.nodes * m.capacity)
    assert 0.35 < mean < 0.65


def test_the_planner_keeps_a_small_hot_fleet_nearer_its_sla_than_no_rebalancing():
    m = FleetModel(nodes=20, tenants=400, utilisation=0.62, seed=5)
    none = run(m, SimOptions(policy="none", minutes=150))["summary"]
    par = run(m, SimOptions(policy="parallel", minutes=150))["summary"]
    assert none["over_sla_fraction"] > 0.02, none  # the load does push nodes over
    assert par["moves"] > 0 and par["plan_calls"] > par["moves"]
    assert par["over_sla_fraction"] < 0.5 * none["over_sla_fraction"], (par, none)
