"""The simulated fleet: nodes, tenants and their loads over time.

A node is a server of `capacity` CPU s/s. Its latency follows an M/M/1-like curve in its utilisation u
(the sum of its tenants' loads over its capacity): latency = base / (1 - u), with `base` chosen so that
latency reaches the SLA at u = `sla_utilisation` (with the defaults: 10 ms at idle, 50 ms at u = 0.8).
Every tenant of a node sees the node's latency (the planner's node latency is the transaction-weighted
mean, so it is the node's); a tenant's transactions per second are proportional to its load.

A tenant's load at minute t is  base × diurnal(t) × walk(t) × burst(t):
- base: lognormal with spread `sigma` (skew: the top 1% of tenants carry ~10% of the load at
  sigma 1.2), scaled so the fleet's mean utilisation is `utilisation`, capped at `max_tenant_share` of a
  node (a tenant that does not fit on a node cannot be placed);
- diurnal: 1 + `diurnal` × sin(2π t / 24 h + φ), φ uniform per tenant (tenants in every time zone);
- walk: exp of a per-tenant AR(1) in log space, stationary spread `walk_sigma`, correlation time
  `walk_tau_min` (a tenant's business grows and shrinks);
- burst: × `burst_factor` for a uniform 30–90 minutes, starting as a Poisson process of
  `bursts_per_day` per tenant (a batch job, a launch).
Data size: lognormal around `data_gb` GB, correlated with the base load (bigger tenants are busier).

Deterministic in `seed`. Loads are generated a minute at a time (the agents' default stats interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class FleetModel:
    nodes: int = 1000
    tenants: int = 20000
    capacity: float = 8.0              # CPU s/s per node (8 cores)
    utilisation: float = 0.5           # the fleet's mean load / capacity
    sla_s: float = 0.050
    sla_utilisation: float = 0.8       # latency reaches the SLA here
    sigma: float = 1.2                 # lognormal spread of tenants' base loads
    max_tenant_share: float = 0.4      # no tenant's base load above this share of a node
    diurnal: float = 0.5
    walk_sigma: float = 0.3
    walk_tau_min: float = 120.0
    bursts_per_day: float = 0.5
    burst_factor: float = 4.0
    data_gb: float = 2.0
    tps_per_cpu: float = 500.0         # transactions per CPU second
    seed: int = 1

    @property
    def base_latency_s(self) -> float:
        return self.sla_s * (1 - self.sla_utilisation)

    @property
    def sla_load(self) -> float:
        """The node load at which its latency reaches the SLA."""
        return self.capacity * self.sla_utilisation

    def latency_s(self, load: float) -> float:
        u = min(load / self.capacity, 0.995)
        return self.base_latency_s / (1 - u)

    def describe(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {
            "base_latency_s": self.base_latency_s, "sla_load": self.sla_load}


@dataclass
class Loads:
    """The tenants' load process; `step()` advances one minute and returns every tenant's load."""

    model: FleetModel
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        m = self.model
        self.rng = np.random.default_rng(m.seed)
        raw = self.rng.lognormal(0.0, m.sigma, m.tenants)
        mean_load = m.utilisation * m.capacity * m.nodes / m.tenants
        base = raw * mean_load / raw.mean()
        cap = m.max_tenant_share * m.capacity
        for _ in range(20):  # cap, then rescale the rest so the fleet's mean stays as asked
            base = np.minimum(base, cap)
            base *= mean_load * m.tenants / base.sum()
        self.base = np.minimum(base, cap)
        self.phase = self.rng.uniform(0, 2 * math.pi, m.tenants)
        self.log_walk = self.rng.normal(0.0, m.walk_sigma, m.tenants)
        self.burst_left = np.zeros(m.tenants)
        rel = self.base / self.base.mean()
        self.data_bytes = (m.data_gb * 1e9 * np.sqrt(rel) * self.rng.lognormal(0.0, 0.5, m.tenants)).astype(np.int64)
        self.t = 0

    def step(self) -> np.ndarray:
        m = self.model
        a = math.exp(-1.0 / m.walk_tau_min)
        self.log_walk = a * self.log_walk + math.sqrt(1 - a * a) * m.walk_sigma * self.rng.normal(0, 1, m.tenants)
        start = self.rng.random(m.tenants) < m.bursts_per_day / 1440.0
        self.burst_left = np.where((self.burst_left <= 0) & start, self.rng.uniform(30, 90, m.tenants),
                                   self.burst_left - 1)
        diurnal = 1 + m.diurnal * np.sin(2 * math.pi * self.t / 1440.0 + self.phase)
        # The walk's mean is 1 (the lognormal's exp(-σ²/2)), so the fleet's mean load stays put.
        walk = np.exp(self.log_walk - m.walk_sigma ** 2 / 2)
        burst = np.where(self.burst_left > 0, m.burst_factor, 1.0)
        self.t += 1
        return self.base * diurnal * walk * burst
