"""A token bucket whose burst is bounded by the *current* rate.

The burst is at most `burst_s` worth of the current rate (never less than
`min_burst_bytes`), and a rate cut clamps the tokens already saved, so a cut
from 200MB/s to 1MB/s lets at most 100 ms of the new rate through early --
the credit problem pv 1.6 has (docs/transfer.md) cannot occur here.
A rate of 0 blocks on a condition variable: no polling while paused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_BURST_S = 0.1
DEFAULT_MIN_BURST_BYTES = 32 * 1024


class Aborted(Exception):
    """The bucket was closed while a caller waited."""


class TokenBucket:
    def __init__(
        self,
        rate_bytes_per_s: float | None,
        burst_s: float = DEFAULT_BURST_S,
        min_burst_bytes: int = DEFAULT_MIN_BURST_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cond = threading.Condition()
        self._clock = clock
        self.burst_s = burst_s
        self.min_burst_bytes = min_burst_bytes
        self._rate = rate_bytes_per_s
        self._tokens = 0.0
        self._last = clock()
        self._closed = False

    @property
    def rate(self) -> float | None:
        return self._rate

    def capacity(self, rate: float | None = None) -> float:
        """Largest burst at `rate` (default: the current rate); infinite when unlimited."""
        r = self._rate if rate is None else rate
        if r is None:
            return float("inf")
        return max(float(self.min_burst_bytes), r * self.burst_s)

    def _refill(self, now: float) -> None:
        if self._rate is not None and self._rate > 0:
            self._tokens = min(self.capacity(), self._tokens + (now - self._last) * self._rate)
        self._last = now

    def set_rate(self, rate_bytes_per_s: float | None) -> None:
        """Time so far is credited at the old rate; saved tokens are clamped to the new burst."""
        with self._cond:
            self._refill(self._clock())
            self._rate = rate_bytes_per_s
            if rate_bytes_per_s is not None:
                self._tokens = min(self._tokens, self.capacity())
            self._cond.notify_all()

    def refund(self, n: int) -> None:
        """Return granted bytes that were not sent (a short splice), capped at one burst."""
        with self._cond:
            if self._rate is not None:
                self._tokens = min(self.capacity(), self._tokens + n)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self, want: int) -> int:
        """Block until some bytes may be sent; return how many (1..want).

        Grants at most one burst's worth, so a caller holding a 1 MiB chunk at
        1MB/s sends it in 100 KB slices rather than as one early burst.
        """
        with self._cond:
            while True:
                if self._closed:
                    raise Aborted()
                rate = self._rate
                if rate is None:
                    return want
                now = self._clock()
                self._refill(now)
                if rate == 0:
                    self._cond.wait(1.0)  # woken by set_rate() or close(); no polling
                    continue
                grant = int(min(want, self.capacity()))
                if self._tokens >= grant:
                    self._tokens -= grant
                    return grant
                self._cond.wait((grant - self._tokens) / rate)
