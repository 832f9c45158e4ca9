"""The point of no return: the directory's compare-and-set, and an abort decided against it under one
lock, so an abort lands before the flip is sent or is refused (the migration then only goes forward)."""

from __future__ import annotations

import threading
from typing import Callable


class PointOfNoReturn:
    def __init__(self, flip_sent: bool = False) -> None:
        self.flip_sent = flip_sent  # the compare-and-set was sent (its answer may not be known yet)
        self.abort_reason = ""
        self._aborted = threading.Event()
        self._lock = threading.Lock()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    def abort(self, reason: str) -> bool:
        """Ask to abort; False once the compare-and-set was sent."""
        with self._lock:
            if self.flip_sent:
                return False
            self.abort_reason = reason
            self._aborted.set()
            return True

    def wait(self, seconds: float) -> None:
        """Sleep, ended early by an abort."""
        self._aborted.wait(seconds)

    def send_flip(self, check_abort: Callable[[], None], guard: Callable[[], None] | None = None) -> None:
        """Mark the compare-and-set as sent, unless `check_abort` or `guard` raises first."""
        with self._lock:
            check_abort()
            if guard is not None:
                guard()
            self.flip_sent = True

    def flip_not_sent(self) -> None:
        """The compare-and-set was not applied: an abort is possible again."""
        self.flip_sent = False
