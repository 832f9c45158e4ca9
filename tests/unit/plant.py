"""A simulated database server for controller tests: one disk shared by transactions and the copy.

Transactions arrive as a Poisson stream and queue FIFO for the disk; each needs
an Erlang-distributed amount of disk work, plus a fixed-ish overhead (round trips,
CPU) that the copy does not affect. The copy takes a share of the disk
proportional to its rate, so the transactions' service slows and, near
saturation, queueing makes latency climb steeply (the knee in the paper's
Figure 9). The rate acts after `delay_steps` (pipe buffers, backup tool
read-ahead). `disk_speed(t)` and `speed_noise` make a harder plant: a disk
whose speed changes over time (the knee moves) and wanders from step to step
the way a machine shared with other work does (an AR(1) lognormal factor);
`copy_cap` a source that cannot feed the copy faster (its disk, the backup tool). Completed transactions feed ever-growing sum/count counters, which
the real latency sources window exactly as they would a Prometheus histogram.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from slacker.controller.base import ControllerStep, RateController
from slacker.latency import CounterSource, LatencySample


@dataclass
class Plant:
    max_rate_bytes_per_s: float = 50e6
    work_s: float = 0.02  # mean disk time of one transaction with the whole disk to itself
    copy_share_at_max: float = 0.7  # disk share the copy takes at max rate
    arrival_rate: float | Callable[[float], float] = 22.5  # transactions per second
    erlang_shape: int = 4  # ~ a few I/O-bound operations per transaction
    overhead_s: float = 0.05  # latency outside the disk: round trips, CPU (not slowed by the copy)
    delay_steps: int = 1
    disk_speed: Callable[[float], float] | None = None  # the disk's speed over time (1 = nominal)
    speed_noise: float = 0.0  # sd of the log of a per-step speed factor (a shared machine)
    speed_noise_corr: float = 0.8  # its step-to-step correlation
    copy_cap: float | Callable[[float], float] | None = None  # fastest copy the source can feed (bytes/s)
    step_s: float = 1.0
    seed: int = 0
    bytes_done: int = 0  # what the copy moved so far (at the rate applied, or the cap if lower)
    t: float = 0.0
    sum_s: float = 0.0
    count: float = 0.0
    _queue: deque = field(default_factory=deque, repr=False)  # [arrival time, remaining work]
    _pending: deque = field(default_factory=deque, repr=False)
    _next_arrival: float | None = None
    _busy_until: float = 0.0
    _log_noise: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._pending.extend([0.0] * self.delay_steps)

    def load(self, t: float) -> float:
        return self.arrival_rate(t) if callable(self.arrival_rate) else self.arrival_rate

    def snapshot(self) -> tuple[float, float]:
        return self.sum_s, self.count

    def clock(self) -> float:
        return self.t

    def metrics_text(self, metric: str = "slacker_ycsb_txn_latency_seconds", tenant: str = "t1") -> str:
        return (
            f"# HELP {metric} Transaction latency.\n# TYPE {metric} histogram\n"
            f'{metric}_bucket{{tenant="{tenant}",le="+Inf"}} {self.count}\n'
            f'{metric}_count{{tenant="{tenant}"}} {self.count}\n'
            f'{metric}_sum{{tenant="{tenant}"}} {self.sum_s}\n'
        )

    def _work(self) -> float:
        k = self.erlang_shape
        return sum(self.rng.expovariate(k / self.work_s) for _ in range(k))

    def advance(self, rate_bytes_per_s: float) -> None:
        """Run one step with the copy at `rate_bytes_per_s` (applied after the delay)."""
        self._pending.append(min(1.0, max(0.0, rate_bytes_per_s / self.max_rate_bytes_per_s)))
        fraction = self._pending.popleft()
        start, end = self.t, self.t + self.step_s
        if self.copy_cap is not None:
            cap = self.copy_cap(start) if callable(self.copy_cap) else self.copy_cap
            fraction = min(fraction, cap / self.max_rate_bytes_per_s)
        self.bytes_done += int(fraction * self.max_rate_bytes_per_s * self.step_s)
        speed = 1.0 - self.copy_share_at_max * fraction
        if self.disk_speed is not None:
            speed *= self.disk_speed(start)
        if self.speed_noise > 0:
            rho = self.speed_noise_corr
            self._log_noise = rho * self._log_noise + (1 - rho * rho) ** 0.5 * self.rng.gauss(0.0, self.speed_noise)
            speed *= math.exp(self._log_noise)
        speed = max(1e-3, speed)
        lam = self.load(start)
        nxt = self._next_arrival if self._next_arrival is not None else start + self.rng.expovariate(lam)
        while nxt < end:
            self._queue.append([nxt, self._work()])
            nxt += self.rng.expovariate(lam)
        self._next_arrival = nxt
        cursor = start
        while self._queue:
            job = self._queue[0]
            cursor = max(cursor, job[0])
            finish = cursor + job[1] / speed
            if finish > end:
                job[1] -= (end - cursor) * speed
                break
            self._queue.popleft()
            self.sum_s += finish - job[0] + self.overhead_s * self.rng.uniform(0.5, 1.5)
            self.count += 1
            cursor = finish
        self.t = end

    def source(self, window_s: float = 3.0) -> CounterSource:
        return CounterSource(self.snapshot, name="plant", window_s=window_s, step_s=self.step_s, clock=self.clock)


@dataclass
class Trace:
    steps: list[ControllerStep]
    samples: list[LatencySample]

    def latencies(self, start: int = 0, end: int | None = None) -> list[float]:
        return [s.latency_s for s in self.steps[start:end] if s.latency_s is not None]

    def mean_latency(self, start: int = 0, end: int | None = None) -> float:
        values = self.latencies(start, end)
        return sum(values) / len(values)

    def fractions(self) -> list[float]:
        return [s.fraction for s in self.steps]


def simulate(
    controller: RateController,
    plant: Plant,
    steps: int,
    source: Callable[[], LatencySample] | None = None,
    on_step: Callable[[int, ControllerStep], None] | None = None,
) -> Trace:
    """The migration loop in miniature: read latency, step the controller, apply the rate."""
    read = source or plant.source().read
    trace = Trace([], [])
    for k in range(steps):
        plant.advance(controller.rate_bytes_per_s)
        sample = read()
        out = controller.step(sample, plant.t, plant.bytes_done)
        trace.steps.append(out)
        trace.samples.append(sample)
        if on_step:
            on_step(k, out)
    return trace
