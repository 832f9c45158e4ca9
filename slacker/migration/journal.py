"""The migration journal: one small JSON file per migration on each agent, fsynced at every step.

A restarted agent reads it to finish what it was doing: forward once the
directory shows the flip, back before it. The file is removed when the
migration has ended on that node, so an empty journal means nothing to do.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .protocol import check_journal


@dataclass
class Entry:
    id: str
    tenant: str
    role: str  # "source" or "target"
    peer: str  # the other node
    state: str
    epoch_before: int | None = None
    epoch_after: int | None = None
    final_gtid: str | None = None
    source_node: str = ""
    lease_until: float = 0.0  # target: wall-clock end of the source's last lease
    note: str = ""
    # source, state ready: what a restarted agent needs to resume the wait (the options as sent, the delta's
    # origin and position, the tenant's port on the target, when it became ready)
    resume: dict | None = None
    # source: --keep-source (seconds): a restarted agent past the flip keeps the old copy instead of retiring it
    keep_s: float = 0.0
    updated_at: float = field(default_factory=time.time)


class Journal:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        for stale in self.root.glob("*.tmp"):  # a write cut short by a crash; the .json before it stands
            stale.unlink(missing_ok=True)

    def _path(self, mid: str, role: str) -> Path:
        return self.root / f"{mid}.{role}.json"

    def write(self, entry: Entry) -> None:
        entry.updated_at = time.time()
        path = self._path(entry.id, entry.role)
        tmp = path.with_suffix(".tmp")
        with self._lock:
            with open(tmp, "w") as f:
                f.write(json.dumps(asdict(entry)))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def update(self, entry: Entry, **changes) -> None:
        """Change an entry and write it; a state change must be one the protocol allows."""
        if "state" in changes:
            check_journal(entry.role, entry.state, changes["state"])
        for k, v in changes.items():
            setattr(entry, k, v)
        self.write(entry)

    def remove(self, entry: Entry) -> None:
        with self._lock:
            self._path(entry.id, entry.role).unlink(missing_ok=True)

    def entries(self, role: str | None = None) -> list[Entry]:
        out = []
        for p in sorted(self.root.glob("*.json")):
            try:
                e = Entry(**json.loads(p.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if role is None or e.role == role:
                out.append(e)
        return out
