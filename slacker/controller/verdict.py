"""Whether a throttled copy can finish at all: said within a minute, not waited out.

Two ways a copy under a setpoint cannot end:

- the load alone costs more than the setpoint: latency stays over it while the copy is (nearly)
  stopped, so no rate the controller may choose meets it;
- the data grows as fast as the copy moves: the backup's redo log (or whatever the total counts)
  grows at g bytes/s while the copy the setpoint allows moves at most about g.

`Feasibility.update()` reads the controller's step (latency, rate, marks) and the copy's bytes
once a step, over a sliding window of `window_s` unmarked seconds, and returns None or a verdict:
what, the figures (the load's own latency, the rate the setpoint allows, the growth against the
copy's rate) and what to do. The ETA it gives is None (infinite) for a copy that cannot end.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

STOPPED_SHARE = 0.02  # a copy moving under this share of its top rate is stopped ...
AFTER_S = 5.0  # ... counted from this long after it last moved (the loop's longest lag: its queue shows meanwhile) ...
STILL_SHARE = 0.5  # ... in at least this share of the window's seconds ...
OVER_SHARE = 0.5  # ... and latency over the setpoint in at least this share of those seconds: the load's


def load_latency(seconds: list[float]) -> float | None:
    """The load's own latency from per-step readings: their median (one noisy second moves it little). The
    verdict reads it over the seconds the copy stood still; the start-up check over the seconds before it."""
    return statistics.median(seconds) if seconds else None


class Feasibility:
    def __init__(self, window_s: float = 30.0, step_s: float = 1.0) -> None:
        self.n = max(5, int(round(window_s / step_s)))
        self.step_s = step_s
        # (t, latency_s or None, setpoint_s, bytes_done, bytes_total or None, allowed rate or None)
        self._seen: deque[tuple[float, float | None, float, int, float | None, float | None]] = deque(maxlen=self.n)
        self._top = 0.0
        self.verdict: dict[str, Any] | None = None

    def update(self, now: float, report, bytes_done: int, bytes_total: float | None,
               marked: bool) -> dict[str, Any] | None:
        """`report`: this step's StepReport (slacker.controller.report)."""
        if marked or report.note == "paused":
            return self.verdict
        sp = report.setpoint_s
        if sp is None:
            return self.verdict
        self._seen.append((now, report.latency_s, sp, int(bytes_done), bytes_total,
                           report.controller.get("model_allowed_bytes_per_s")))
        if len(self._seen) < self.n:
            return self.verdict
        (t0, _, _, b0, tot0, _), (t1, _, _, b1, tot1, allowed) = self._seen[0], self._seen[-1]
        if t1 <= t0:
            return self.verdict
        rate = (b1 - b0) / (t1 - t0)
        growth = (tot1 - tot0) / (t1 - t0) if tot0 is not None and tot1 is not None else 0.0
        self._top = max(self._top, rate)
        lat = [y for _, y, _, _, _, _ in self._seen if y is not None]
        own = sum(lat) / len(lat) if lat else None
        stopped = rate <= STOPPED_SHARE * max(self._top, 1.0) or rate <= 1024
        # The load's own latency: the seconds in which the copy did not move (a copy that restarts for a
        # few seconds between stops does not hide that latency stays over the setpoint whenever it is still).
        seen = list(self._seen)
        still, since = [], 0.0
        for (ta, _, _, ba, _, _), (tb, y, _, bb, _, _) in zip(seen, seen[1:]):
            moving = tb <= ta or (bb - ba) / (tb - ta) > max(STOPPED_SHARE * self._top, 1024)
            since = 0.0 if moving else since + (tb - ta)
            if y is not None and since >= AFTER_S:  # still long enough that its last bytes no longer show
                still.append(y)
        alone = load_latency(still)
        figures = {"load_latency_s": own, "setpoint_s": sp, "copy_rate_bytes_per_s": round(rate),
                   "growth_bytes_per_s": round(growth), "allowed_bytes_per_s": allowed}
        verdict = None
        if alone is not None and len(still) >= STILL_SHARE * (len(seen) - 1) and alone > sp \
                and sum(1 for y in still if y > sp) >= OVER_SHARE * len(still):
            figures["load_latency_s"] = alone
            verdict = {
                "what": "cannot finish: the load alone is over the setpoint",
                "why": (f"latency {alone * 1000:.0f}ms with the copy stopped ({len(still)} of the last {t1 - t0:.0f}s), "
                        f"against a setpoint of {sp * 1000:.0f}ms: no copy rate meets it"),
                "hint": (f"raise the setpoint above {alone * 1000 * 1.3:.0f}ms (slacker migrate TENANT --set "
                         f"setpoint={alone * 1000 * 1.3:.0f}ms), or stop it (slacker migrate --abort TENANT)")}
        elif growth > 0 and rate <= 1.05 * growth and not stopped and own is not None and 0.8 * sp <= own <= 1.2 * sp:
            # The copy is held at the setpoint (latency near it, the copy moving) and still does not outrun the
            # growth. A copy stopped with latency far over is the first rule's (or a queue draining: no verdict).
            verdict = {
                "what": "cannot finish: the data grows as fast as the copy moves",
                "why": (f"the total grows {growth / 1e6:.2f} MB/s while the copy moves {rate / 1e6:.2f} MB/s "
                        f"under the setpoint of {sp * 1000:.0f}ms"),
                "hint": "raise the setpoint (slacker migrate TENANT --set setpoint=...), lower the write load, "
                        "or stop it (slacker migrate --abort TENANT)"}
        if verdict is not None:
            verdict["figures"] = figures
            verdict["t"] = now
            self.verdict = verdict
        elif self.verdict is not None and rate > 1.5 * growth and not stopped:
            self.verdict = None  # the copy moves again (the load fell, the setpoint was raised)
        return self.verdict

    def eta_s(self, remaining_bytes: float, rate: float, growth: float = 0.0) -> float | None:
        """Seconds left, or None when the copy cannot end (a verdict, or no progress on the total)."""
        if self.verdict is not None or rate - growth <= 0:
            return None
        return max(0.0, remaining_bytes / (rate - growth))
