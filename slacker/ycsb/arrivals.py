"""Open-loop arrival schedules: Poisson or constant, with rate steps (`--rate-step 60s:+40%`).

Arrival times depend only on the rate and the random stream, never on when
transactions complete; that is what makes the load generator open-loop.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Iterator

from ..errors import InvalidInput
from ..units import parse_duration

ARRIVALS = ("poisson", "constant")


@dataclass(frozen=True)
class RateStep:
    """At `at_s` after the start the rate changes: op is `*` (factor) or `=` (absolute tps)."""

    at_s: float
    op: str
    value: float
    text: str = ""

    def apply(self, rate_tps: float) -> float:
        return max(0.0, rate_tps * self.value if self.op == "*" else self.value)


_STEP_HINT = "for example 60s:+40%, 2m:-25%, 90s:x2 or 30s:=150"


def parse_rate_step(text: str) -> RateStep:
    """`T:+N%`, `T:-N%`, `T:xF` or `T:=TPS`, T a duration after the start of the run."""
    when, sep, change = str(text).partition(":")
    if not sep:
        raise InvalidInput(f"invalid rate step {text!r}", "expected TIME:CHANGE", _STEP_HINT)
    at_s = parse_duration(when)
    change = change.strip()
    m = re.match(r"^([+-])\s*([0-9]+(?:\.[0-9]*)?)\s*%$", change)
    if m:
        pct = float(m.group(2)) * (1 if m.group(1) == "+" else -1)
        return RateStep(at_s, "*", 1.0 + pct / 100.0, str(text))
    m = re.match(r"^[x*]\s*([0-9]+(?:\.[0-9]*)?)$", change)
    if m:
        return RateStep(at_s, "*", float(m.group(1)), str(text))
    m = re.match(r"^=\s*([0-9]+(?:\.[0-9]*)?)$", change)
    if m:
        return RateStep(at_s, "=", float(m.group(1)), str(text))
    raise InvalidInput(f"invalid rate step {text!r}", f"cannot read the change {change!r}", _STEP_HINT)


def parse_rates(text: str, n_tenants: int) -> list[float]:
    """`100` (for every tenant) or `100,50,50` (one per tenant), in transactions per second."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        rates = [float(p.removesuffix("/s").removesuffix("tps")) for p in parts]
    except ValueError:
        raise InvalidInput(f"invalid rate {text!r}", "expected transactions per second",
                           "for example --rate 100 or --rate 100,50,50") from None
    if any(not math.isfinite(r) or r <= 0 for r in rates):
        raise InvalidInput(f"invalid rate {text!r}", "rates must be positive", "for example --rate 100")
    if len(rates) == 1:
        return rates * n_tenants
    if len(rates) != n_tenants:
        raise InvalidInput(f"invalid rate {text!r}", f"{len(rates)} rates for {n_tenants} tenants",
                           "give one rate for all tenants or one per tenant")
    return rates


class RateProfile:
    """The offered rate as a step function of time since the start."""

    def __init__(self, base_tps: float, steps: list[RateStep] | tuple[RateStep, ...] = ()) -> None:
        self.base_tps = float(base_tps)
        self.steps = sorted(steps, key=lambda s: s.at_s)
        # (start_s, rate) segments; the first starts at 0.
        self.segments: list[tuple[float, float]] = [(0.0, self.base_tps)]
        rate = self.base_tps
        for step in self.steps:
            rate = step.apply(rate)
            if step.at_s <= 0:
                self.segments[0] = (0.0, rate)
            else:
                self.segments.append((step.at_s, rate))

    def rate_at(self, t_s: float) -> float:
        rate = self.segments[0][1]
        for start, r in self.segments:
            if start > t_s:
                break
            rate = r
        return rate

    def segment_at(self, t_s: float) -> tuple[float, float]:
        """(rate in force at t_s, time the next change happens or inf)."""
        rate, end = self.segments[0][1], math.inf
        for i, (start, r) in enumerate(self.segments):
            if start > t_s:
                end = start
                break
            rate = r
            end = self.segments[i + 1][0] if i + 1 < len(self.segments) else math.inf
        return rate, end


def arrival_offsets(kind: str, profile: RateProfile, rng: random.Random) -> Iterator[float]:
    """Arrival times (seconds after the start), endless and increasing.

    Poisson: exponential gaps at the rate in force; at a rate change the draw
    restarts at the boundary, which is exact because the process is memoryless.
    Constant: gaps of exactly 1/rate, the first at the start of each rate segment.
    """
    if kind not in ARRIVALS:
        raise InvalidInput(f"invalid arrival process {kind!r}", "expected poisson or constant",
                           "for example --arrival poisson")
    t = 0.0
    if kind == "constant":
        # A lattice start + k/rate per segment (no float drift over long runs); each
        # segment starts with an arrival at its first instant.
        while True:
            rate, end = profile.segment_at(t)
            if rate <= 0:
                if math.isinf(end):
                    return
                t = end
                continue
            start, k = t, 0
            while True:
                at = start + k / rate
                if at >= end:
                    break
                yield at
                k += 1
            t = end
    expovariate = rng.expovariate
    while True:
        rate, end = profile.segment_at(t)
        if rate <= 0:
            if math.isinf(end):
                return
            t = end
            continue
        nxt = t + expovariate(rate)
        if nxt >= end:
            t = end
            continue
        t = nxt
        yield t
