"""Key and request generators with YCSB's algorithms, so key sets and skew match stock YCSB.

Keys are "user" + the FNV-1a-64 hash of the row number (hashed insert order);
the zipfian generator is Gray et al.'s ("Quickly Generating Billion-Record
Synthetic Databases", SIGMOD 1994) with YCSB's constant 0.99. Each worker owns
its generators and a seeded `random.Random`, so nothing here needs a lock except
the shared insert-key counter.
"""

from __future__ import annotations

import itertools
import math
import random
import string
import threading
from functools import lru_cache
from typing import Callable

MASK64 = (1 << 64) - 1
FNV_OFFSET_BASIS_64 = 0xCBF29CE484222325
FNV_PRIME_64 = 1099511628211
ZIPFIAN_CONSTANT = 0.99
# YCSB's ScrambledZipfianGenerator draws from 10^10 items with this precomputed zeta(10^10, 0.99).
SCRAMBLED_ITEM_COUNT = 10_000_000_000
SCRAMBLED_ZETAN = 26.46902820178302


def fnvhash64(val: int) -> int:
    """YCSB's Utils.fnvhash64: FNV-1a over the 8 low-order bytes, then Java's Math.abs of the signed result."""
    # Unrolled: this runs once per operation on the hot path. Python's >> on a
    # negative int is arithmetic, as Java's >> on a long.
    p, m = FNV_PRIME_64, MASK64
    h = ((FNV_OFFSET_BASIS_64 ^ (val & 0xFF)) * p) & m
    h = ((h ^ ((val >> 8) & 0xFF)) * p) & m
    h = ((h ^ ((val >> 16) & 0xFF)) * p) & m
    h = ((h ^ ((val >> 24) & 0xFF)) * p) & m
    h = ((h ^ ((val >> 32) & 0xFF)) * p) & m
    h = ((h ^ ((val >> 40) & 0xFF)) * p) & m
    h = ((h ^ ((val >> 48) & 0xFF)) * p) & m
    h = ((h ^ ((val >> 56) & 0xFF)) * p) & m
    if h >= 1 << 63:
        h = (1 << 64) - h
        if h == 1 << 63:  # Math.abs(Long.MIN_VALUE) stays negative in Java
            return -(1 << 63)
    return h


def _java_mod(a: int, n: int) -> int:
    # Java's % keeps the dividend's sign; only fnvhash64's one negative result can hit this.
    return a % n if a >= 0 else -((-a) % n)


def build_key_name(keynum: int, zeropadding: int = 1, ordered: bool = False) -> str:
    """CoreWorkload.buildKeyName: "user" + zero-padded (hashed) row number."""
    if not ordered:
        keynum = fnvhash64(keynum)
    value = str(keynum)
    return "user" + "0" * (zeropadding - len(value)) + value


def key_namer(zeropadding: int = 1, ordered: bool = False) -> Callable[[int], str]:
    """A fast build_key_name with the settings bound (the common case skips padding)."""
    if zeropadding <= 1:
        if ordered:
            return lambda k: "user" + str(k)
        return lambda k: "user" + str(fnvhash64(k))
    return lambda k: build_key_name(k, zeropadding, ordered)


# --- zeta -----------------------------------------------------------------------


def zeta_static(st: int, n: int, theta: float, initial_sum: float = 0.0) -> float:
    """sum_{i=st+1..n} 1/i^theta + initial_sum (YCSB's zetastatic)."""
    count = n - st
    if count <= 0:
        return initial_sum
    if count < 20_000:
        return initial_sum + math.fsum(1.0 / math.pow(i + 1, theta) for i in range(st, n))
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy ships with matplotlib
        return initial_sum + math.fsum(1.0 / math.pow(i + 1, theta) for i in range(st, n))
    total = initial_sum
    chunk = 1 << 20
    for lo in range(st + 1, n + 1, chunk):
        hi = min(n, lo + chunk - 1)
        total += float(np.sum(np.arange(lo, hi + 1, dtype=np.float64) ** -theta))
    return total


@lru_cache(maxsize=64)
def zeta(n: int, theta: float) -> float:
    """zeta(n, theta), cached: every worker's zipfian over the same rows shares it."""
    return zeta_static(0, n, theta)


# --- number generators ------------------------------------------------------------


class UniformGenerator:
    """Uniform over [lb, ub] (UniformLongGenerator)."""

    def __init__(self, lb: int, ub: int, rng: random.Random) -> None:
        self.lb, self.ub = lb, ub
        self.interval = ub - lb + 1
        self._random = rng.random

    def next(self) -> int:
        return self.lb + int(self._random() * self.interval)


class ConstantGenerator:
    def __init__(self, value: int) -> None:
        self.value = value

    def next(self) -> int:
        return self.value


class ZipfianGenerator:
    """Gray et al.'s zipfian over [min, max]: item `min` is the most popular, then min+1, ...

    Faithful to YCSB's ZipfianGenerator, including growing the item count
    incrementally (for the `latest` distribution) and its use of the original
    item count in eta.
    """

    def __init__(self, min_: int, max_: int, rng: random.Random, theta: float = ZIPFIAN_CONSTANT,
                 zetan: float | None = None) -> None:
        self.items = max_ - min_ + 1
        self.base = min_
        self.theta = theta
        self.zeta2theta = zeta_static(0, 2, theta)
        self.alpha = 1.0 / (1.0 - theta)
        self.zetan = zetan if zetan is not None else zeta(self.items, theta)
        self.countforzeta = self.items
        self.eta = (1 - math.pow(2.0 / self.items, 1 - theta)) / (1 - self.zeta2theta / self.zetan)
        self._second = 1.0 + math.pow(0.5, theta)
        self._random = rng.random
        self._lock = threading.Lock()

    def next_long(self, itemcount: int) -> int:
        if itemcount != self.countforzeta and itemcount > self.countforzeta:
            with self._lock:
                if itemcount > self.countforzeta:
                    self.zetan = zeta_static(self.countforzeta, itemcount, self.theta, self.zetan)
                    self.countforzeta = itemcount
                    self.eta = (1 - math.pow(2.0 / self.items, 1 - self.theta)) / (1 - self.zeta2theta / self.zetan)
        u = self._random()
        uz = u * self.zetan
        if uz < 1.0:
            return self.base
        if uz < self._second:
            return self.base + 1
        eta = self.eta
        return self.base + int(itemcount * math.pow(eta * u - eta + 1, self.alpha))

    def next(self) -> int:
        return self.next_long(self.items)


class ScrambledZipfianGenerator:
    """Zipfian popularity scattered over [min, max] by hashing (YCSB's ScrambledZipfianGenerator)."""

    def __init__(self, min_: int, max_: int, rng: random.Random) -> None:
        self.min = min_
        self.itemcount = max_ - min_ + 1
        # YCSB draws from 0..10^10 (10^10 + 1 items) with the precomputed zeta.
        self._gen = ZipfianGenerator(0, SCRAMBLED_ITEM_COUNT, rng, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN)

    def next(self) -> int:
        return self.min + _java_mod(fnvhash64(self._gen.next()), self.itemcount)


class HotspotGenerator:
    """A hot set of `hotset_fraction` of [lb, ub] gets `hot_opn_fraction` of the draws (HotspotIntegerGenerator)."""

    def __init__(self, lb: int, ub: int, hotset_fraction: float, hot_opn_fraction: float,
                 rng: random.Random) -> None:
        interval = ub - lb + 1
        self.lb = lb
        self.hot_interval = int(interval * hotset_fraction)
        self.cold_interval = interval - self.hot_interval
        self.hot_opn_fraction = hot_opn_fraction
        # YCSB divides by zero on an empty set; here the other set simply takes every draw.
        if self.hot_interval == 0:
            self.hot_opn_fraction = 0.0
        elif self.cold_interval == 0:
            self.hot_opn_fraction = 1.0
        self._random = rng.random

    def next(self) -> int:
        r = self._random
        if r() < self.hot_opn_fraction:
            return self.lb + int(r() * self.hot_interval)
        return self.lb + self.hot_interval + int(r() * self.cold_interval)


class ExponentialGenerator:
    """Exponentially distributed offsets: `percentile`% of draws fall below `range_` (ExponentialGenerator)."""

    def __init__(self, percentile: float, range_: float, rng: random.Random) -> None:
        self.gamma = -math.log(1.0 - percentile / 100.0) / range_
        self._random = rng.random

    def next(self) -> int:
        # 1 - u is in (0, 1], so the log is finite; the distribution is the same.
        return int(-math.log(1.0 - self._random()) / self.gamma)


class SequentialGenerator:
    """countstart, countstart+1, ... countend, then around again; shared between workers."""

    def __init__(self, countstart: int, countend: int, counter: "itertools.count[int] | None" = None) -> None:
        self.start = countstart
        self.interval = countend - countstart + 1
        self._counter = counter if counter is not None else itertools.count()

    def next(self) -> int:
        return self.start + next(self._counter) % self.interval


class AcknowledgedCounter:
    """Insert key numbers handed out in order; last_value() is the highest with all below acknowledged.

    Readers never pick a key above last_value(), so they never look for a row
    whose insert has not finished (YCSB's AcknowledgedCounterGenerator).
    """

    def __init__(self, start: int) -> None:
        self._next = start
        self._limit = start - 1
        self._acked: set[int] = set()
        self._lock = threading.Lock()

    def next_value(self) -> int:
        with self._lock:
            v = self._next
            self._next += 1
            return v

    def acknowledge(self, value: int) -> None:
        with self._lock:
            self._acked.add(value)
            limit = self._limit
            while limit + 1 in self._acked:
                limit += 1
                self._acked.discard(limit)
            self._limit = limit

    def last_value(self) -> int:
        return self._limit


class SkewedLatestGenerator:
    """Zipfian skewed towards the most recently inserted rows (YCSB's SkewedLatestGenerator)."""

    def __init__(self, basis: AcknowledgedCounter, rng: random.Random) -> None:
        self.basis = basis
        items = max(1, basis.last_value())
        self._zipfian = ZipfianGenerator(0, items - 1, rng)

    def next(self) -> int:
        max_ = self.basis.last_value()
        return max_ - self._zipfian.next_long(max_)


# --- operation choice and values ----------------------------------------------------


class DiscreteChooser:
    """Picks an index with the given weights, walking them in order as YCSB's DiscreteGenerator does."""

    def __init__(self, weights: tuple[float, ...] | list[float], rng: random.Random) -> None:
        total = float(sum(weights))
        if total <= 0:
            raise ValueError("weights must not all be zero")
        pairs = [(i, w / total) for i, w in enumerate(weights) if w > 0]
        # Cumulative thresholds turn the walk into a few comparisons.
        acc = 0.0
        self._thresholds: list[tuple[float, int]] = []
        for i, w in pairs:
            acc += w
            self._thresholds.append((acc, i))
        self._last = pairs[-1][0]
        self._random = rng.random

    def next(self) -> int:
        u = self._random()
        for threshold, i in self._thresholds:
            if u < threshold:
                return i
        return self._last


VALUE_ALPHABET = string.ascii_letters + string.digits
VALUE_POOL_CHARS = 1 << 18


@lru_cache(maxsize=4)
def value_pool(seed: int = 0x5C1AC6E7, size: int = VALUE_POOL_CHARS) -> str:
    """A fixed block of random letters and digits that field values are cut from.

    Cutting a random slice costs a fraction of generating fresh random bytes per
    field, and letters and digits never need SQL escaping.
    """
    rng = random.Random(seed)
    return "".join(rng.choices(VALUE_ALPHABET, k=size))


class ValueGenerator:
    """Random field values with YCSB's field length distributions."""

    def __init__(self, fieldlength: int, minfieldlength: int, distribution: str, rng: random.Random) -> None:
        if distribution == "constant":
            self._length: ConstantGenerator | UniformGenerator | ZipfianGenerator = ConstantGenerator(fieldlength)
        elif distribution == "uniform":
            self._length = UniformGenerator(minfieldlength, fieldlength, rng)
        elif distribution == "zipfian":
            self._length = ZipfianGenerator(minfieldlength, fieldlength, rng)
        else:
            raise ValueError(f"unknown field length distribution {distribution!r}")
        self.max_length = fieldlength
        self._pool = value_pool()
        self._span = len(self._pool) - fieldlength
        self._random = rng.random

    def next(self) -> str:
        n = self._length.next()
        off = int(self._random() * self._span)
        return self._pool[off:off + n]
