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

import copy
import math
import random
import statistics
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


# ------------------------------------------------------------------------------------------------
# A family of plants (issue 32): controllers are accepted on aggregate goals over many plants,
# never on one trace. Each member is a seeded Scenario; FluidPlant runs it a second at a time.
#
# The per-second mean latency at an effective copy rate c (bytes/s moving through the pipe,
# `lag` seconds earlier) is
#
#     y = L0 · drift(t) · [(1 − h) + h · ((1 − ρ0) / (1 − ρ))^p] · (1 + lin · c / K) + backlog
#     ρ = (ρ0 · load(t) + (1 − ρ0) · c / K) / capacity(t)
#
# L0 the load's own latency, ρ0 its utilisation of the bottleneck, K the copy rate that saturates
# it (the knee's position), h the share of latency that queues (the knee's sharpness: small h,
# flat then sudden), p the queue's shape, lin a CPU-bound rise that starts at once (the copy's
# own CPU beside the load's threads). Over ρ = 1 the queue grows a backlog (ρ − 1 seconds a second)
# that drains by (1 − ρ)·drain a second when ρ falls: where nothing holds the copy back (a disk whose
# reads are capped per node, `yields=False`) the copy itself overruns it, as on the real host. Each second's mean carries lognormal AR(1) noise (a many-thread load's
# per-second mean: 5-40 %), seconds of stalls (capacity x0.3: a disk busy elsewhere), and
# optional load steps. The copy itself: a read-in of the backup tool (`preread_bytes` at the
# copy's rate, not counted as copied), then the tool's start (`start_s` seconds at `start_x`
# times the latency, whatever the rate), then the data at min(limit, the pipe's speed) while
# the redo log grows the total at `redo_bps`. The migration marks the read-in and the tool's
# start (it knows both); the plant reports the marks with each second.
#
# Calibration (docs/controller.md, "The plant family"): the ranges are those of the real runs
# in docs/results.md and issue 32 — disk-bound harness host: L0 3-5 ms unloaded, knee at
# 11-15 MB/s with a 25-35 MB/s pipe, start bursts 1.5-4x for 2-6 s; sysbench oltp_read_write at
# 600 txn/s, 16 threads, CPU-bound: L0 26 ms, an unthrottled ~90 MB/s copy at 2.2x L0, the
# load's own latency drifting 10-20 % over minutes.

RHO_MAX = 0.97
RHO_COPY = 0.9  # the bottleneck's scheduler gives the copy no more than takes utilisation here: beyond, the copy slows


@dataclass
class Scenario:
    seed: int
    kind: str  # binding | nonbinding | cannot | loadstep
    shape: str  # disk | cpu
    setpoint_s: float
    l0_s: float
    rho0: float
    knee_bps: float
    h: float
    p: float
    lin: float
    pipe_bps: float
    lag: int
    noise: float
    noise_corr: float
    stall_p: float
    tps: float
    total_bytes: float
    redo_bps: float = 0.0
    preread_bytes: float = 26e6
    start_s: int = 3
    start_x: float = 2.0
    drift: float = 0.0  # the load's own latency drifts by this share over its first five minutes
    load_step_at: float | None = None  # seconds into the copy
    load_step: float = 1.0  # arrivals x this from then on
    yields: bool = True  # the bottleneck's scheduler holds the copy back past RHO_COPY (CPU, an unthrottled disk);
    # False: nothing does (a disk whose reads are capped per node): the copy overruns it and a queue builds
    drain: float | None = None  # the backlog's drain rate at ρ = 0 (seconds of latency per second); None: 1
    start_burst: bool = False  # the tool's start alone (start_x) takes latency over twice the setpoint
    throttle_loss: float = 0.0  # a limited pipe moves this share less than the unthrottled one, even under its
    # limit (the real disk-bound host: 20.8 MB/s at a 47-54 MB/s limit, 25.2 MB/s unthrottled)
    rate_lag: int = 0  # seconds before the pipe's throughput follows a new limit (buffers, the tool's read-ahead:
    # issue 56's sysbench run, throughput 2-3 s behind the rate set); `lag` is then the latency's further delay
    load_step_s: float | None = None  # how long the load step lasts (None: to the end)
    tag: str = ""  # the family's own name for the plant's kind (sharp_family: tight, loose, nonbinding)

    def curve(self, c: float, t: float = 0.0, load: float = 1.0, capacity: float = 1.0) -> tuple[float, float]:
        """(mean latency without backlog or noise, utilisation) at effective copy rate c."""
        rho = (self.rho0 * load + (1 - self.rho0) * c / self.knee_bps) / capacity
        q = (1 - self.rho0) / (1 - min(rho, RHO_MAX))
        drift = 1.0 + self.drift * min(t, 300.0) / 300.0
        y = self.l0_s * drift * ((1 - self.h) + self.h * q ** self.p) * (1 + self.lin * c / self.knee_bps)
        return y, rho


class FluidPlant:
    """One Scenario, a second at a time; the noise does not depend on the rate (so a sweep of fixed
    rates on one seed sees the same noise: the oracle is a bisection)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        rng = random.Random(sc.seed * 7919 + 17)
        self._noise_rng, self._count_rng = random.Random(rng.random()), random.Random(rng.random())
        self._stall_rng = random.Random(rng.random())
        self._log_noise = 0.0
        self._stall_left = 0
        self.t = 0.0
        self.sum_s = self.count = 0.0
        self.bytes_done = 0.0
        self.preread_done = 0.0
        self.backlog_s = 0.0
        self._flows: deque[float] = deque([0.0] * sc.lag)
        self._limits: deque = deque([0.0] * sc.rate_lag)  # the limits set, not yet followed by the pipe
        self._started_at: float | None = None  # when the tool started (after the read-in)
        self._done = False
        self.latencies: list[float] = []  # per second
        self.marks: list[str | None] = []
        self.flows: list[float] = []  # bytes/s moved (copy or read-in) per second

    @property
    def total_bytes(self) -> float:
        return self.sc.total_bytes + self.sc.redo_bps * self.t

    @property
    def done(self) -> bool:
        return self._done

    def snapshot(self) -> tuple[float, float]:
        return self.sum_s, self.count

    def clock(self) -> float:
        return self.t

    def source(self, window_s: float = 3.0) -> CounterSource:
        return CounterSource(self.snapshot, name="plant", window_s=window_s, step_s=1.0, clock=self.clock)

    def advance(self, limit_bps: float | None) -> str | None:
        """One second with the pipe limited to `limit_bps` (None: unthrottled). Returns this second's mark."""
        sc, t = self.sc, self.t
        if sc.rate_lag:
            # The pipe follows its limit `rate_lag` seconds late (its buffers fill and drain at the old rate).
            self._limits.append(limit_bps)
            limit_bps = self._limits.popleft()
        speed = sc.pipe_bps if limit_bps is None else min(limit_bps, sc.pipe_bps * (1 - sc.throttle_loss))
        mark = None
        if self.preread_done < sc.preread_bytes:
            moved = min(speed, sc.preread_bytes - self.preread_done)
            self.preread_done += moved
            mark = "read-in" if moved > 0 else None  # held at rate 0 it reads nothing (slacker.controller.marks)
        else:
            if self._started_at is None:
                self._started_at = t
            moved = min(speed, max(0.0, self.total_bytes - self.bytes_done))
            self.bytes_done += moved
            self._done = self.bytes_done >= self.total_bytes
            if t - self._started_at < sc.start_s:
                mark = "backup start"
        since = None if sc.load_step_at is None or self._started_at is None else t - self._started_at - sc.load_step_at
        load = sc.load_step if since is not None and since >= 0 and (sc.load_step_s is None or since < sc.load_step_s) \
            else 1.0
        if self._stall_left <= 0 and self._stall_rng.random() < sc.stall_p:
            self._stall_left = self._stall_rng.randint(1, 2)
        capacity = 0.6 if self._stall_left > 0 else 1.0
        # The copy gets no more of the bottleneck than RHO_COPY leaves it: past the knee it slows itself.
        share = sc.knee_bps * max(0.0, RHO_COPY * capacity - sc.rho0 * load) / (1 - sc.rho0)
        if sc.yields and moved > share:
            if mark == "read-in":
                self.preread_done -= moved - share
            else:
                self.bytes_done -= moved - share
                self._done = self.bytes_done >= self.total_bytes
            moved = share
        self._flows.append(moved)
        c = self._flows.popleft()  # the copy's effect shows `lag` seconds later
        self._stall_left -= 1
        y, rho = sc.curve(c, t, load, capacity)
        # A fluid queue: past saturation the work not served this second waits (the backlog grows by ρ − 1
        # seconds a second), below it the spare capacity serves it (it drains by (1 − ρ)·drain a second).
        # The real disk-bound host: 1.5 s of backlog after 2 s at 31 MB/s, drained at 0.7-0.9 s a second.
        self.backlog_s = self.backlog_s + (rho - 1.0) if rho > 1.0 else \
            max(0.0, self.backlog_s - (1.0 - rho) * (1.0 if sc.drain is None else sc.drain))
        y += self.backlog_s
        if mark == "backup start":
            y *= sc.start_x
        r = sc.noise_corr
        self._log_noise = r * self._log_noise + math.sqrt(1 - r * r) * self._noise_rng.gauss(0.0, sc.noise)
        y *= math.exp(self._log_noise - sc.noise ** 2 / 2)
        n = max(1, round(self._count_rng.gauss(sc.tps * load, math.sqrt(sc.tps * load))))
        self.sum_s += y * n
        self.count += n
        self.t += 1.0
        self.latencies.append(y)
        self.marks.append(mark)
        self.flows.append(moved)
        return mark


def family(n: int, seed: int = 0, kinds: tuple[str, ...] = ("binding", "nonbinding")) -> list[Scenario]:
    """`n` seeded plants, the kinds taken in turn: knee position and sharpness, CPU- and disk-bound
    shapes, lag 1-4 s, noise 5-40 %, stalls, start bursts, pipes faster or slower than the knee."""
    out = []
    for i in range(n):
        rng = random.Random(seed * 100003 + i)
        kind = kinds[i % len(kinds)]
        shape = rng.choice(("disk", "cpu"))
        if shape == "disk":  # the harness host: a queue at the disk, a sharp knee
            l0, rho0, h, p, lin = rng.uniform(0.003, 0.03), rng.uniform(0.2, 0.6), rng.uniform(0.6, 0.95), \
                rng.uniform(1.0, 2.0), 0.0
            pipe = rng.uniform(20e6, 60e6)
            tps = rng.uniform(50, 200)
            start_x = rng.uniform(1.5, 4.0)
        else:  # sysbench on two cores: the copy's CPU beside 16 threads, a gradual rise and a late queue
            l0, rho0, h, p, lin = rng.uniform(0.01, 0.05), rng.uniform(0.4, 0.8), rng.uniform(0.2, 0.6), \
                1.0, rng.uniform(0.2, 1.0)
            pipe = rng.uniform(60e6, 150e6)
            tps = rng.uniform(300, 800)
            start_x = rng.uniform(1.1, 2.0)
        knee = pipe * (rng.uniform(1.5, 4.0) if kind == "nonbinding" else rng.uniform(0.3, 3.0))
        sc = Scenario(seed=seed * 100003 + i, kind=kind, shape=shape, setpoint_s=1.0, l0_s=l0, rho0=rho0,
                      knee_bps=knee, h=h, p=p, lin=lin, pipe_bps=pipe, lag=rng.randint(1, 4),
                      noise=rng.uniform(0.05, 0.4), noise_corr=rng.uniform(0.0, 0.7),
                      stall_p=rng.choice((0.0, 0.0, 0.02, 0.05)), tps=tps,
                      total_bytes=pipe * rng.uniform(12, 40), redo_bps=rng.uniform(0, 0.5e6),
                      start_s=rng.randint(1, 6), start_x=start_x, drift=rng.uniform(-0.15, 0.15))
        sc.throttle_loss = rng.choice((0.0, 0.0, rng.uniform(0.05, 0.2)))
        if shape == "disk" and rng.random() < 0.5:
            # A disk whose reads are capped per node (the real harness host): nothing holds the copy back,
            # past the knee a queue builds and drains at 0.6-0.9 s a second after the copy stops.
            sc.yields, sc.drain = False, rng.uniform(0.8, 1.6)
        top, _ = sc.curve(min(pipe, knee * (RHO_COPY - rho0) / (1 - rho0)))
        if kind == "nonbinding":
            sc.setpoint_s = top / rng.uniform(0.3, 0.7)
        elif kind == "cannot":
            sc.setpoint_s = l0 * rng.uniform(0.6, 0.95)
        else:
            # Binding: the setpoint where a rate of 15-70 % of the slower of pipe and knee sits, low enough
            # that the unthrottled copy is 1.5x over it or more; the data sized so the copy lasts 60-120 s
            # at that rate.
            c = min(pipe, knee) * rng.uniform(0.15, 0.7)
            while sc.curve(c)[0] * 1.5 > top and c > 0.02 * pipe:
                c *= 0.8
            sc.setpoint_s = max(sc.curve(c)[0], 1.1 * l0)
            sc.total_bytes = max(c * rng.uniform(60, 120), pipe * 12)
            if kind == "loadstep":
                sc.load_step_at, sc.load_step = sc.total_bytes / c / 3, 1.4
                sc.stall_p = 0.0
            elif rng.random() < 0.25:
                # The backup tool's own start costs the tenants 2.2-3.5x the setpoint whatever the copy's rate
                # (sysbench, issue 40: the tool's start alone doubled latency at 30 MB/s): a queue that is not
                # the copy's doing. Its opposite, a start whose queue is the copy's, is the disk whose reads are
                # capped (yields=False) overrun at the start's rate: real_plants()["disk-host"].
                sc.start_x = max(sc.start_x, rng.uniform(2.2, 3.5) * sc.setpoint_s / sc.l0_s)
                sc.start_burst = True
        out.append(sc)
    return out


def delay_family(delay: int, n: int, seed: int = 0) -> list[Scenario]:
    """`n` plants whose pipe follows its limit `delay` seconds late (issue 56: throughput 2-3 s behind the
    rate set, latency 3 s behind the throughput on sysbench), the latency lagging the throughput a further
    1-3 s; the kinds in turn: binding (the setpoint 1.6x the load's own latency, as the issue's bench),
    not binding (4x), and a load that doubles for 20 s mid-copy (binding, the doubled load alone under the
    setpoint). CPU- and disk-bound shapes alternate; per-second noise 10-30 %."""
    out = []
    kinds = ("binding", "nonbinding", "loadstep")
    for i in range(n):
        rng = random.Random(seed * 7_000_003 + delay * 1009 + i)
        kind, shape = kinds[i % 3], ("cpu", "disk")[(i // 3) % 2]
        step = kind == "loadstep"
        if shape == "cpu":  # sysbench at half capacity on two cores: the copy's CPU beside the load's threads
            l0, h, p, lin = rng.uniform(0.008, 0.03), rng.uniform(0.3, 0.6), 1.0, rng.uniform(0.3, 1.0)
            pipe, tps = rng.uniform(80e6, 280e6), rng.uniform(300, 800)
        else:
            l0, h, p, lin = rng.uniform(0.004, 0.02), rng.uniform(0.6, 0.9), rng.uniform(1.0, 1.6), 0.0
            pipe, tps = rng.uniform(25e6, 60e6), rng.uniform(80, 200)
        rho0 = rng.uniform(0.15, 0.25) if step else rng.uniform(0.3, 0.5)
        sc = Scenario(seed=seed * 7_000_003 + delay * 1009 + i, kind=kind, shape=shape, setpoint_s=1.0, l0_s=l0,
                      rho0=rho0, knee_bps=1.0, h=h, p=p, lin=lin, pipe_bps=pipe, lag=rng.randint(1, 3),
                      noise=rng.uniform(0.1, 0.3), noise_corr=rng.uniform(0.2, 0.6), stall_p=0.0, tps=tps,
                      total_bytes=pipe * rng.uniform(15, 30), redo_bps=rng.uniform(0, 0.3e6),
                      start_s=rng.randint(1, 4), start_x=rng.uniform(1.1, 1.6), rate_lag=delay)
        if kind == "nonbinding":
            sc.knee_bps = pipe * rng.uniform(1.5, 3.0)
            sc.setpoint_s = 4.0 * l0
            while sc.curve(pipe)[0] > 0.7 * sc.setpoint_s:
                sc.knee_bps *= 1.3
        else:
            sc.setpoint_s = 1.6 * l0
            while step and sc.curve(0.0, load=2.0)[0] > 0.75 * sc.setpoint_s:  # the doubled load alone leaves room
                sc.rho0 *= 0.85
            # The knee where a rate of 25-60 % of the pipe's meets the setpoint: the unthrottled copy well over it.
            target = pipe * rng.uniform(0.25, 0.6)
            lo, hi = target * 0.2, target * 20
            for _ in range(40):  # the knee at which curve(target) = the setpoint
                sc.knee_bps = (lo + hi) / 2
                lo, hi = (lo, sc.knee_bps) if sc.curve(target)[0] < sc.setpoint_s else (sc.knee_bps, hi)
            if step:
                sc.load_step, sc.load_step_s = 2.0, 20.0
                sc.total_bytes = target * rng.uniform(60, 90)
                sc.load_step_at = sc.total_bytes / target / 3
        out.append(sc)
    return out


def sharp_family(n: int, seed: int = 0) -> list[Scenario]:
    """`n` plants with what issue 67's real runs had and the older families lacked: a sharp knee (latency x3 or
    more over a 30 % rise of the rate: flat, then sudden), a short copy (8-15 s at the pipe's speed, a 1 GB
    tenant over a fast pipe), the pipe following its limit 2 s late plus latency's own lag of 1-2 s, read
    through the trailing 3 s window. The kinds in turn, on the setpoint's scale of the issue's bench: tight
    (1.6x the load's own latency), loose (4x, still under the unthrottled copy's latency: binding), not binding
    (1.3x the unthrottled copy's latency). CPU-bound (the copy yields past the knee) and disk-bound (a queue
    builds) alternate; per-second noise 8-25 %."""
    out = []
    kinds = ("tight", "loose", "nonbinding")
    for i in range(n):
        rng = random.Random(seed * 9_000_011 + i)
        kind, shape = kinds[i % 3], ("cpu", "disk")[(i // 3) % 2]
        l0 = rng.uniform(0.01, 0.03) if shape == "cpu" else rng.uniform(0.004, 0.015)
        pipe = rng.uniform(120e6, 260e6) if shape == "cpu" else rng.uniform(40e6, 90e6)
        sc = Scenario(seed=seed * 9_000_011 + i, kind="nonbinding" if kind == "nonbinding" else "binding",
                      shape=shape, setpoint_s=1.0, l0_s=l0, rho0=rng.uniform(0.3, 0.5), knee_bps=1.0,
                      h=rng.uniform(0.85, 0.97), p=rng.uniform(2.0, 3.0), lin=0.0, pipe_bps=pipe,
                      lag=rng.randint(1, 2), rate_lag=2, noise=rng.uniform(0.08, 0.25), noise_corr=rng.uniform(0.2, 0.5),
                      stall_p=0.0, tps=rng.uniform(300, 800) if shape == "cpu" else rng.uniform(100, 300),
                      total_bytes=pipe * rng.uniform(8, 15), redo_bps=rng.uniform(0, 0.3e6), preread_bytes=0.0,
                      start_s=rng.randint(1, 2), start_x=rng.uniform(1.0, 1.3))
        if shape == "disk":
            sc.yields, sc.drain = False, rng.uniform(0.8, 1.6)
        sc.tag = kind
        # The knee (the rate at which latency is 3x what it is at 0.77 of it) at 35-75 % of the pipe's speed.
        knee_at = pipe * rng.uniform(0.35, 0.75)
        lo, hi = knee_at * 0.5, knee_at * 5
        for _ in range(50):
            sc.knee_bps = (lo + hi) / 2
            y1, y0 = sc.curve(knee_at)[0], sc.curve(knee_at / 1.3)[0]
            lo, hi = (lo, sc.knee_bps) if y1 / y0 > 3.0 else (sc.knee_bps, hi)
        top = sc.curve(min(pipe, sc.knee_bps * (RHO_COPY - sc.rho0) / (1 - sc.rho0)))[0]
        sc.setpoint_s = {"tight": 1.6 * l0, "loose": min(4.0 * l0, top / 1.6), "nonbinding": 1.3 * top}[kind]
        out.append(sc)
    return out


def seeded(sc: Scenario, make: Callable, runs: int = 1) -> Callable:
    """A maker whose controller starts where the node's memory would start it: at the rate the same
    controller held over the copy's second half on the same plant, `runs` moves before (other noise)."""
    prev = copy.deepcopy(sc)
    start = None
    for k in range(runs):
        prev.seed = sc.seed + 1_000 * (k + 1)
        r = run_copy(prev, make if start is None else _with_start(make, start), record=True)
        held = [s["rate_bytes_per_s"] or prev.pipe_bps for s in r.states[len(r.states) // 2:]
                if s.get("mark") is None]
        start = statistics.median(held) if held else None
    return make if start is None else _with_start(make, start)


def _with_start(make: Callable, start: float) -> Callable:
    def build(sp, m):
        c = make(sp, m)
        if hasattr(c, "seed_rate"):
            c.seed_rate(start)
        return c
    return build


NOMINAL_MAX = 200e6  # the controller's max when no --max-rate is given (slacker.throttle.DEFAULT_MAX_RATE)


@dataclass
class CopyRun:
    seconds: float | None  # None: not done within the time allowed
    latencies: list[float]  # per second, the whole copy
    setpoint_s: float
    marks: list[str | None]  # per second: the read-in and the tool's start, which no rate changes
    moved: float
    verdict_s: float | None = None  # seconds into the copy at which the migration said it cannot finish
    states: list[dict] = field(default_factory=list)
    step_at: float | None = None  # when a load step arrived (plant seconds)

    @property
    def mean_ratio(self) -> float:
        """Mean latency over the copy's seconds that the copy moves (not the marked ones) / setpoint."""
        own = [y for y, m in zip(self.latencies, self.marks) if m is None] or self.latencies
        return statistics.fmean(own) / self.setpoint_s

    @property
    def rate(self) -> float:
        return self.moved / max(1.0, len(self.latencies))

    def back_within(self, share: float = 1.1, hold_s: int = 10) -> float | None:
        """Seconds from a load step until the latency's mean over the next `hold_s` s is within `share` x."""
        if self.step_at is None:
            return None
        k0 = int(self.step_at)
        for k in range(k0, len(self.latencies) - hold_s):
            if statistics.fmean(self.latencies[k:k + hold_s]) <= share * self.setpoint_s:
                return k - k0
        return None


def baseline(sc: Scenario, seconds: int = 5) -> float | None:
    """The load's own latency as the migration measures it before any byte moves (slacker.throttle.measure:
    the median of `seconds` one-second means), on a plant of its own so the copy's seconds are not shifted."""
    from slacker.controller.verdict import load_latency

    pre = FluidPlant(sc)
    src = pre.source()
    means = []
    for _ in range(seconds):
        pre.advance(0)
        y = src.read().last_latency_s
        if y:
            means.append(y)
    return load_latency(means)


def run_copy(sc: Scenario, make: Callable | None = None, limit: float | None = None, max_s: int = 900,
             record: bool = False) -> CopyRun:
    """One migration's copy on the plant: `make(setpoint_s, max_rate)` builds the controller, stepped
    through the migration's own glue (RatePolicy, marks and the verdict); or a fixed `limit` (None with
    no controller: unthrottled)."""
    from slacker.controller.loop import RatePolicy

    plant = FluidPlant(sc)
    policy = None
    rate = limit
    if make is not None:
        policy = RatePolicy(plant.source(), make(sc.setpoint_s, NOMINAL_MAX))
        policy.unthrottled_at_max = True
        policy.set_baseline(baseline(sc))
        rate = policy.initial_rate()
    run = CopyRun(None, plant.latencies, sc.setpoint_s, plant.marks, 0.0)
    for _ in range(max_s):
        mark = plant.advance(rate)
        if plant.done:
            run.seconds = plant.t
            break
        if policy is not None:
            rate, state = policy.step(plant.t, int(plant.bytes_done), mark=mark, bytes_total=plant.total_bytes)
            if state.verdict and run.verdict_s is None:
                run.verdict_s = plant.t
            if record:
                run.states.append(state.to_dict())
    run.moved = plant.bytes_done
    if sc.load_step_at is not None and plant._started_at is not None:
        run.step_at = plant._started_at + sc.load_step_at
    return run


def oracle(sc: Scenario, max_s: int = 3000) -> CopyRun | None:
    """The best fixed rate that meets the setpoint over the copy (a bisection: the noise does not depend
    on the rate); None when even the slowest rate tried does not."""
    lo, hi = 0.02 * sc.pipe_bps, sc.pipe_bps
    best = None
    for _ in range(12):
        mid = (lo + hi) / 2
        r = run_copy(sc, limit=mid, max_s=max_s)
        if r.seconds is not None and r.mean_ratio <= 1.0:
            best, lo = r, mid
        else:
            hi = mid
    return best


def classify(sc: Scenario, unthrottled: CopyRun) -> str:
    """The issue's classes: binding (unthrottled mean >= 1.3x the setpoint), not binding (<= 0.8x)."""
    if sc.kind == "cannot":
        return "cannot"
    m = unthrottled.mean_ratio
    if m >= 1.3:
        return "loadstep" if sc.kind == "loadstep" else "binding"
    if m <= 0.8 and sc.kind == "nonbinding":
        return "nonbinding"
    return "between"


def evaluate(sc: Scenario, makers: dict[str, Callable], max_s: int = 900) -> dict:
    """One plant: its class and, per controller, the figures its goals are about."""
    free = run_copy(sc, max_s=max_s)
    cls = classify(sc, free)
    out = {"seed": sc.seed, "class": cls, "shape": sc.shape, "lag": sc.lag, "noise": sc.noise, "burst": sc.start_burst,
           "unthrottled_s": free.seconds, "unthrottled_mean": free.mean_ratio}
    best = oracle(sc) if cls in ("binding", "loadstep") else None
    out["oracle_rate"] = best.rate if best else None
    for name, make in makers.items():
        r = run_copy(sc, make, max_s=max_s)
        row = {"seconds": r.seconds, "mean": r.mean_ratio, "verdict_s": r.verdict_s}
        if best is not None:
            row["speed"] = r.rate / best.rate
        if free.seconds and r.seconds:
            row["time"] = r.seconds / free.seconds
        if cls == "loadstep":
            row["back_s"] = r.back_within()
        out[name] = row
    return out


def goals(rows: list[dict], name: str) -> dict:
    """Aggregate figures of one controller over a family's rows: the share of plants meeting each goal."""
    def share(cls: str, ok) -> tuple[float, int]:
        sel = [r for r in rows if r["class"] == cls]
        return (sum(1 for r in sel if ok(r[name])) / len(sel) if sel else float("nan")), len(sel)

    b = [r[name] for r in rows if r["class"] == "binding" and "speed" in r[name]]
    nb = [r[name] for r in rows if r["class"] == "nonbinding" and r[name].get("time")]
    return {
        "binding_n": len(b),
        "binding_mean_median": statistics.median(x["mean"] for x in b) if b else float("nan"),
        "binding_within_10pct": share("binding", lambda x: 0.9 <= x["mean"] <= 1.1)[0],
        "binding_speed_median": statistics.median(x["speed"] for x in b) if b else float("nan"),
        "binding_speed_ok": share("binding", lambda x: x.get("speed", 0) >= 0.9)[0],
        "binding_both": share("binding", lambda x: 0.9 <= x["mean"] <= 1.1 and x.get("speed", 0) >= 0.9)[0],
        "nonbinding_n": len(nb),
        "nonbinding_time_median": statistics.median(x["time"] for x in nb) if nb else float("nan"),
        "nonbinding_ok": share("nonbinding", lambda x: (x.get("time") or 99) <= 1.15)[0],
        "cannot_said_60s": share("cannot", lambda x: x["verdict_s"] is not None and x["verdict_s"] <= 60)[0],
        "loadstep_back_10s": share("loadstep", lambda x: x.get("back_s") is not None and x["back_s"] <= 10)[0],
    }


# ------------------------------------------------------------------------------------------------
# Plants fitted to real runs (issue 32): every failure found on a real run becomes a plant here, and
# the model's and the PID's figures on these are checked against the real ones
# (tests/unit/test_model_controller.py, test_the_real_failures_as_plants).

def real_plants() -> dict[str, Scenario]:
    """The real runs, as plants, with the figures they were fitted to (per-second series in
    docs/data/setpoint-compare-i32-disk*.json and issue 32's sysbench runs)."""
    return {
        # bench/run setpoint compare --disk-read-bps 30MB/s --tps 100 --records 480000, 70 ms: the tenant's
        # own latency 4-10 ms; a copy at 9-10 MB/s 56-66 ms, at 11 MB/s 76-147 ms; the unthrottled copy
        # (25 MB/s, 33 s) builds a queue of ~0.65 s a second (mean 10-11 s), which drains at 0.6-0.9 s a
        # second once the copy stops; the copy's effect shows within the same second; per-second noise
        # of a 100 txn/s load ~35 %. Nothing holds the copy back: the disk's read cap is per node.
        "disk-host": Scenario(seed=32_001, kind="binding", shape="disk", setpoint_s=0.070, l0_s=0.007, rho0=0.44,
                              knee_bps=13e6, h=1.0, p=1.3, lin=0.0, pipe_bps=27e6, lag=1, noise=0.35,
                              noise_corr=0.3, stall_p=0.01, tps=100, total_bytes=0.91e9, redo_bps=0.1e6,
                              start_s=6, start_x=1.3, yields=False, drain=1.4, throttle_loss=0.17),
        # sysbench oltp_read_write, 16 threads at 600 txn/s, binary prepared statements, a ~1 GB tenant, 2
        # cores (issue 32): unloaded 26 ms; the unthrottled copy ~90 MB/s, 12 s, at 2.2x that (57 ms mean);
        # a 16-thread load's per-second mean wanders ~15 %; the load's own latency drifts up 10-20 % over
        # minutes. CPU-bound: the scheduler shares the cores (the copy slows itself, no runaway queue). Issue 56's
        # run: the throughput 2-3 s behind the rate set (142 MB/s set at t=4 s, its peak at t=7 s) and latency
        # ~3 s behind the throughput (its peak at t=10 s): rate_lag 2, lag 3 (was lag 2 and no pipe delay).
        "sysbench": Scenario(seed=32_002, kind="binding", shape="cpu", setpoint_s=0.044, l0_s=0.026, rho0=0.6,
                             knee_bps=200e6, h=0.5, p=1.0, lin=1.1, pipe_bps=90e6, lag=3, rate_lag=2, noise=0.25,
                             noise_corr=0.5, stall_p=0.0, tps=600, total_bytes=1.1e9, redo_bps=0.3e6,
                             start_s=3, start_x=1.3, drift=0.15),
    }
