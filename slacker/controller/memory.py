"""The node's memory of its controlled copies: where the next one starts (as TCP caches a path's ssthresh).

A controlled copy on the node's budget (the model or the PID, not a fixed rate, not unthrottled) leaves what
the node bore: the median flow its copies moved over the seconds of the copy's second half that met the
setpoint (not the tool's start, not a pause), with the setpoint and the load's own latency it ran under. The next copy whose setpoint and load are
comparable (each within COMPARABLE either way) and whose entry is at most MAX_AGE_S old starts at the newest
such entry's rate (ModelController.seed_rate): the rise from it is still bounded per loop delay, and a first
move, or one under a load or setpoint unlike any remembered, starts at the controller's safe start.

Kept in `<data root>/rate-memory.json` (crash-atomic: written to a temporary file, synced, renamed), shown by
GET /v1/budget and `slacker node memory`, emptied by `slacker node memory --reset` (POST
/v1/budget/memory/reset).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

KEEP = 32  # entries kept, newest last
MAX_AGE_S = 7 * 86400.0  # an entry older than this seeds nothing (the node's hardware and load drift)
COMPARABLE = 1.5  # a setpoint, or a load's own latency, within this factor either way of one remembered
MIN_SECONDS = 6  # unmarked copying seconds a copy needs (in its second half: 3) before it is remembered
KINDS = ("model", "pid")  # the controlled kinds that remember; fixed rates and unthrottled copies never do


def held_rate(steps: list[tuple[float, float | None, bool]], setpoint_s: float) -> tuple[float, float] | None:
    """(bytes/s the node bore within its setpoint, those seconds' mean latency) from a copy's steps [(flow
    bytes/s, latency s, marked)]: the median flow over the unmarked second half's seconds whose latency met the
    setpoint (a second over it is a rate being cut: the copy's overshoot, or the load's own change -- a load
    that doubled mid-copy held the copy low in seconds that say nothing of the node under its usual load).
    None with fewer than MIN_SECONDS unmarked steps, fewer than 3 such seconds, or no flow."""
    import statistics  # not at import: the CLI's start loads no more than it uses

    own = [(f, y) for f, y, marked in steps if not marked]
    if len(own) < MIN_SECONDS:
        return None
    within = [(f, y) for f, y in own[len(own) // 2:] if y is not None and 0 < y <= setpoint_s]
    if len(within) < 3:
        return None
    flow = statistics.median(f for f, _ in within)
    return (flow, statistics.fmean(y for _, y in within)) if flow > 0 else None


class RateMemory:
    def __init__(self, path: Path | None, clock=time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: list[dict] = self._load()

    def _load(self) -> list[dict]:
        if self.path is None or not self.path.exists():
            return []
        try:
            doc = json.loads(self.path.read_text())
            entries = [e for e in doc.get("entries", []) if isinstance(e, dict) and e.get("rate_bytes_per_s")]
            return entries[-KEEP:]
        except (OSError, ValueError, AttributeError):
            return []  # a memory that cannot be read seeds nothing: every copy starts safe

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"entries": self._entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def record(self, *, kind: str, setpoint_s: float, load_latency_s: float | None, rate_bytes_per_s: float,
               mean_latency_s: float, seconds: int, migration: str = "") -> dict | None:
        """Remember one controlled copy; None (nothing kept) for a kind that does not remember or no load latency."""
        if kind not in KINDS or not load_latency_s or not rate_bytes_per_s > 0:
            return None
        entry = {"at": round(self._clock(), 1), "kind": kind, "setpoint_s": round(setpoint_s, 6),
                 "load_latency_s": round(load_latency_s, 6), "rate_bytes_per_s": int(rate_bytes_per_s),
                 "mean_latency_s": round(mean_latency_s, 6), "seconds": int(seconds), "migration": migration}
        with self._lock:
            self._entries = (self._entries + [entry])[-KEEP:]
            self._save()
        return entry

    def lookup(self, setpoint_s: float, load_latency_s: float | None) -> dict | None:
        """The newest entry comparable in setpoint and load, not older than MAX_AGE_S; None if there is none."""
        if not load_latency_s or not setpoint_s:
            return None
        now = self._clock()

        def near(a: float, b: float) -> bool:
            return a > 0 and b > 0 and 1.0 / COMPARABLE <= a / b <= COMPARABLE

        with self._lock:
            for e in reversed(self._entries):
                if now - e["at"] <= MAX_AGE_S and near(e["setpoint_s"], setpoint_s) \
                        and near(e["load_latency_s"], load_latency_s):
                    return dict(e)
        return None

    def reset(self) -> int:
        """Forget everything; returns how many entries there were."""
        with self._lock:
            n = len(self._entries)
            self._entries = []
            self._save()
        return n

    def status(self) -> dict:
        with self._lock:
            return {"entries": [dict(e) for e in self._entries], "keep": KEEP, "max_age_s": MAX_AGE_S,
                    "comparable": COMPARABLE}
