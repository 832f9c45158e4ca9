"""Measure a byte counter over time, e.g. what a Receiver really got.

Used by the actuator tests and the bench: a rate limiter is judged at the
receiver, not by what the sender believes it sent.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable


class RateMeter:
    """Samples `counter()` every `interval_s` on a thread; query rates afterwards (or live)."""

    def __init__(self, counter: Callable[[], int], interval_s: float = 0.02) -> None:
        self._counter = counter
        self.interval_s = interval_s
        self._times: list[float] = []
        self._bytes: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rate-meter", daemon=True)

    def start(self) -> "RateMeter":
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self._sample()

    def __enter__(self) -> "RateMeter":
        return self if self._thread.is_alive() else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _sample(self) -> None:
        now, value = time.monotonic(), int(self._counter())
        with self._lock:
            self._times.append(now)
            self._bytes.append(value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def samples(self) -> list[tuple[float, int]]:
        with self._lock:
            return list(zip(self._times, self._bytes))

    def bytes_at(self, t: float) -> float:
        """Counter value at monotonic time `t`, linearly interpolated between samples."""
        with self._lock:
            times, values = list(self._times), list(self._bytes)
        if not times:
            return 0.0
        i = bisect.bisect_left(times, t)
        if i <= 0:
            return float(values[0])
        if i >= len(times):
            return float(values[-1])
        t0, t1, v0, v1 = times[i - 1], times[i], values[i - 1], values[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else float(v1)

    def bytes_between(self, t0: float, t1: float) -> float:
        return self.bytes_at(t1) - self.bytes_at(t0)

    def rate(self, t0: float, t1: float) -> float:
        """Average bytes per second over [t0, t1]."""
        return self.bytes_between(t0, t1) / (t1 - t0) if t1 > t0 else 0.0

    def max_bytes_in_window(self, window_s: float, t0: float, t1: float) -> float:
        """Largest amount received in any `window_s` inside [t0, t1]: the size of a burst."""
        best, t = 0.0, t0
        step = max(self.interval_s / 2, 0.005)
        while t + window_s <= t1 + 1e-9:
            best = max(best, self.bytes_between(t, t + window_s))
            t += step
        return best


def transfer_rate_meter(counter: Callable[[], int], interval_s: float = 0.02) -> RateMeter:
    """A started RateMeter over `counter` (e.g. `lambda: receiver.bytes_received`)."""
    return RateMeter(counter, interval_s).start()
