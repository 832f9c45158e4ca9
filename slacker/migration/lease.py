"""The source's lease on the target: renewed while the migration runs, so a target whose source went
silent asks the directory and cleans up instead of waiting forever (docs/migration.md, "The lease")."""

from __future__ import annotations

import logging
import threading
import time

from ..errors import SlackerError

log = logging.getLogger("slacker.migration.lease")

# A handover begins only with this much lease left, so the target cannot give up on us mid-flip.
LEASE_MARGIN_S = 3.0


class Lease:
    def __init__(self, peer, ttl_s: float, name: str) -> None:
        self.peer = peer
        self.default_ttl_s = ttl_s
        self.ttl_s = ttl_s  # what the next renewal asks for
        self.name = name
        self._ok_at: float | None = None
        self._ok_ttl = ttl_s
        self._stop = threading.Event()

    def granted_now(self) -> None:
        """The target was just created with a lease of the default length."""
        self._ok_at = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self._loop, name=f"lease-{self.name}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        interval = self.default_ttl_s / 4
        while not self._stop.wait(interval):
            try:
                self.renew(timeout_s=interval)
            except SlackerError as exc:
                log.warning("migration %s: lease renewal failed: %s", self.name, exc.one_line())

    def renew(self, timeout_s: float, ttl_s: float | None = None) -> None:
        if ttl_s is not None:
            self.ttl_s = ttl_s
        sent = time.monotonic()
        ttl = self.ttl_s
        self.peer.step("lease", {"ttl_s": ttl}, timeout_s=timeout_s)
        # Counted from when we sent it: the target counts from when it got it, which is later.
        self._ok_at, self._ok_ttl = sent, ttl

    def left_s(self) -> float:
        if self._ok_at is None:
            return 0.0
        return self._ok_ttl - (time.monotonic() - self._ok_at)
