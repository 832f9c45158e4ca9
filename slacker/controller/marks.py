"""The seconds of a copy in which the copy is not what moves latency: one place that names them.

The migration's tick asks its `CopyMarks.mark(pipe, policy, now)` once a step and hands the answer to
`RatePolicy.step(mark=...)`; a controller leaves marked seconds out of what it learns
(slacker.controller.model) and the verdict does not count them. The marks:

- "read-in": the pipe reads the backup tool's program into the page cache at the copy's rate
  before starting it (slacker.pagecache); no data moves yet (held at rate zero it reads nothing, and
  is no mark: those seconds show the load alone);
- "backup start": the tool's first BACKUP_START_S seconds after the read-in: it opens its files and
  reads the first chunk of each at once, whatever the pipe's rate (a 1.5-4x stall of 2-6 s on a
  disk-bound host);
- "commit lock": the backup holds the commit lock; the copy runs unthrottled and the tenants wait;
- "paused": the operator paused the copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..transfer.base import ThrottledPipe
    from .loop import CopyRate

BACKUP_START_S = 6.0  # the longest start stall measured on a disk-bound host: 2-6 s


class CopyMarks:
    """The marks of one copy: it remembers when the backup tool started (after the read-in)."""

    def __init__(self) -> None:
        self.started_at: float | None = None

    def mark(self, pipe: ThrottledPipe | None, policy: CopyRate | None, now: float) -> str | None:
        """The mark of the second at `now`: the copy's pipe and its rate policy (None: no controller)."""
        if pipe is None:
            return None
        if pipe.prereading:
            self.started_at = None
            # A read-in held at rate zero reads nothing: its seconds show the load alone, not the copy.
            rate = pipe.rate
            return "read-in" if rate is None or rate > 0 else None
        if pipe.commit_locked:
            return "commit lock"
        if policy is not None and policy.controller.paused:
            return "paused"
        if self.started_at is None:
            self.started_at = now
        if now - self.started_at < BACKUP_START_S:
            return "backup start"
        return None
