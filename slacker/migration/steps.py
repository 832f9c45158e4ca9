"""How long a migration's fixed steps took, and where its copy waited.

`steps_ms` in the migration's document: each step the source ran, by name, in milliseconds
(summed when a step runs more than once): the preflight's parts (lookup, inspect, accounts,
target_status, target_create), pipe_start (the backup tool read into memory, connect, spawn),
copy, and every call on the target (target_stream, target_prepare, target_start,
target_replicate, ..., target_activate), then retire. `copy_stages` has the sender's and the
receiver's stage clocks (slacker.transfer.stages). See docs/migration.md.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class StepTimes:
    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.receiver: dict | None = None  # the receiver's stages, as the target's stream step returned them
        self._lock = threading.Lock()

    @contextmanager
    def timed(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            ms = (time.monotonic() - t0) * 1000
            with self._lock:
                self.ms[name] = round(self.ms.get(name, 0.0) + ms, 1)

    def copy_stages(self, pipe) -> dict | None:
        sender = pipe.stages if pipe is not None else None
        if sender is None and self.receiver is None:
            return None
        return {"sender": sender.as_dict() if sender is not None else None, "receiver": self.receiver}
