"""Crash-atomic removal and creation of directories (a tenant's files, a migration's work dir).

A directory is removed by first renaming it, in the same parent, into `.trash/` under a name that
says what it was (kind, subject, reason, migration), fsyncing both directories, and only then
deleting its contents; a process killed midway leaves a trash entry, never a half-removed directory
under its old name. Creation is the mirror: built under `.building/`, renamed into place when
whole. Files nobody can account for are moved into `.quarantine/`, never deleted. `sweep` and
`sweep_building` finish what a crash cut short (docs/migration.md, "Leftovers after a crash").
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .procs import kill_orphan, pids_with_arg

log = logging.getLogger("slacker.trash")

TRASH = ".trash"
BUILDING = ".building"
QUARANTINE = ".quarantine"
SEP = "~"
FIELD_RE = re.compile(r"^[A-Za-z0-9._-]+$")

# A pause(step) callback: fault injection between the steps of a removal ("renamed", "removing").
Pause = Callable[[str], None]

# Trash entries a removal in this process is deleting right now: a concurrent sweep leaves them be.
_active: set[str] = set()
_active_lock = threading.Lock()


def as_field(text: str) -> str:
    """`text` if it can stand in a trash name as it is, else "unnamed"."""
    return text if FIELD_RE.match(text) else "unnamed"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class TrashName:
    """What a trash (or quarantine) entry was: `KIND~SUBJECT~REASON~MIGRATION~STAMP`, MIGRATION "-" if none."""

    kind: str  # "tenant" (a tenant's directory) or "work" (a migration's work directory)
    subject: str  # the tenant id, or the migration id
    reason: str  # retired, deleted, rolled-back, unjournaled, interrupted, finished, failed-create, unknown
    migration: str = ""
    stamp: str = ""

    def __post_init__(self) -> None:
        for name in ("kind", "subject", "reason", "stamp"):
            value = getattr(self, name)
            if value and not FIELD_RE.match(value):
                raise ValueError(f"trash name field {name}={value!r} must match {FIELD_RE.pattern}")
        if self.migration and not FIELD_RE.match(self.migration):
            raise ValueError(f"trash name field migration={self.migration!r} must match {FIELD_RE.pattern}")
        if not (self.kind and self.subject and self.reason):
            raise ValueError("a trash name needs a kind, a subject and a reason")

    def format(self) -> str:
        return SEP.join((self.kind, self.subject, self.reason, self.migration or "-", self.stamp or _stamp()))

    @classmethod
    def parse(cls, name: str) -> "TrashName | None":
        """The fields of a name `format` wrote; None for any other name (left as it is, never guessed)."""
        parts = name.split(SEP)
        if len(parts) != 5:
            return None
        kind, subject, reason, migration, stamp = parts
        try:
            return cls(kind, subject, reason, "" if migration == "-" else migration, stamp)
        except ValueError:
            return None

    def describe(self) -> str:
        what = f"tenant {self.subject}" if self.kind == "tenant" else f"{self.kind} {self.subject}"
        return what + f" ({self.reason}" + (f", migration {self.migration})" if self.migration else ")")


def _ensure_dir(path: Path) -> None:
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent)


def remove_tree(root: Path, pause: Pause | None = None) -> None:
    """Delete a directory tree bottom-up, without following symlinks; `pause("removing")` once,
    halfway through its entries. A missing entry is fine (a sweep before us); other errors raise.
    A `root` that is a symlink is unlinked: os.walk would follow it to files that are not ours."""
    if os.path.islink(root):
        if pause is not None:
            pause("removing")
        os.unlink(root)
        return
    entries: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        entries += [(os.path.join(dirpath, f), False) for f in filenames]
        entries += [(os.path.join(dirpath, d), True) for d in dirnames]
    paused = False
    for i, (path, is_dir) in enumerate(entries):
        if pause is not None and not paused and i >= len(entries) // 2:
            pause("removing")
            paused = True
        try:
            if is_dir and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
    if pause is not None and not paused:
        pause("removing")
    try:
        if os.path.isdir(root) and not os.path.islink(root):
            os.rmdir(root)
        else:
            os.unlink(root)
    except FileNotFoundError:
        pass


class SetAside:
    """A directory renamed into `.trash/` (durably): its old name is free; `finish` deletes it.
    Until then a sweep in this process leaves it be; a crash leaves it to the agent's next sweep."""

    def __init__(self, entry: Path, name: TrashName, pause: Pause | None) -> None:
        self.entry, self.name, self._pause = entry, name, pause

    def finish(self) -> Path:
        """Delete the set-aside entry; a failure is logged and left to the next `sweep`."""
        try:
            remove_tree(self.entry, self._pause)
            fsync_dir(self.entry.parent)
        except OSError as exc:
            log.warning("could not finish removing %s (%s): %s; the agent retries", self.entry,
                        self.name.describe(), exc)
        finally:
            with _active_lock:
                _active.discard(str(self.entry))
        return self.entry


def set_aside(path: Path, name: TrashName, pause: Pause | None = None) -> SetAside | None:
    """The first, crash-atomic half of a removal: `path` renamed into `.trash/` and both directories
    fsynced. None if there was nothing to remove. The caller must `finish()` it (or leave it to a sweep)."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    trash = path.parent / TRASH
    _ensure_dir(trash)
    dest = trash / name.format()
    with _active_lock:
        _active.add(str(dest))
    try:
        os.rename(path, dest)
        fsync_dir(trash)
        fsync_dir(path.parent)
        if pause is not None:
            pause("renamed")
    except BaseException:  # a renamed entry is left to the next sweep, as a crash here would leave it
        with _active_lock:
            _active.discard(str(dest))
        raise
    return SetAside(dest, name, pause)


def discard(path: Path, name: TrashName, pause: Pause | None = None) -> Path | None:
    """Remove `path` crash-atomically: renamed into `.trash/` (durable) first, then deleted.

    Returns the trash entry, or None if there was nothing to remove. Once renamed, a failure to
    delete is logged and left to the next `sweep`: the old name is free either way."""
    pending = set_aside(path, name, pause)
    return pending.finish() if pending is not None else None


def sweep(parent: Path) -> list[str]:
    """Finish every removal under `parent/.trash/` that a crash cut short; returns what was removed.
    Safe at any time: an entry a removal of this process is deleting right now is left to it."""
    trash = Path(parent) / TRASH
    if not trash.is_dir():
        return []
    done = []
    for entry in sorted(trash.iterdir()):
        with _active_lock:
            if str(entry) in _active:
                continue
        parsed = TrashName.parse(entry.name)
        what = parsed.describe() if parsed else entry.name
        try:
            remove_tree(entry)
        except OSError as exc:
            log.warning("could not finish removing %s (%s): %s; retrying on the next tick", entry, what, exc)
            continue
        log.warning("finished removing %s, cut short before: %s", entry, what)
        done.append(entry.name)
    if done:
        fsync_dir(trash)
    return done


def building_dir(parent: Path, subject: str) -> Path:
    """A fresh directory under `parent/.building/` to lay something out in before `put_in_place`."""
    staging = Path(parent) / BUILDING
    _ensure_dir(staging)
    path = staging / f"{subject}{SEP}{_stamp()}"
    path.mkdir()
    return path


def put_in_place(built: Path, final: Path) -> None:
    """Rename a directory laid out by `building_dir` to its final name, durably. Refused (OSError)
    if `final` exists and is not empty: a whole directory appears there, or nothing does."""
    os.rename(built, final)
    fsync_dir(final.parent)
    fsync_dir(built.parent)


def sweep_building(parent: Path) -> list[str]:
    """At start only (nothing is being built then): remove what a crash left half built."""
    staging = Path(parent) / BUILDING
    if not staging.is_dir():
        return []
    done = []
    for entry in sorted(staging.iterdir()):
        # mariadb-install-db (and its bootstrap server) outlive a killed agent and write on: stopped first.
        for pid in pids_with_arg(f"--defaults-file={entry}/"):
            log.warning("stopping process %d, left running in the half-built %s", pid, entry)
            kill_orphan(pid)
        try:
            remove_tree(entry)
        except OSError as exc:
            log.warning("could not remove the half-built %s: %s", entry, exc)
            continue
        log.warning("removed %s: built halfway when the agent stopped", entry)
        done.append(entry.name)
    return done


def quarantine(path: Path, name: TrashName) -> Path:
    """Move `path` aside into `.quarantine/` (same parent, durable), keeping every file."""
    path = Path(path)
    qdir = path.parent / QUARANTINE
    _ensure_dir(qdir)
    dest = qdir / name.format()
    os.rename(path, dest)
    fsync_dir(qdir)
    fsync_dir(path.parent)
    return dest


def tree_bytes(root: Path) -> int:
    """Sum of the sizes of the files under `root` (symlinks not followed; files that vanish skipped)."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def quarantined(parent: Path) -> list[dict]:
    """What sits in `parent/.quarantine/`: path, what it was, bytes."""
    qdir = Path(parent) / QUARANTINE
    if not qdir.is_dir():
        return []
    out = []
    for entry in sorted(qdir.iterdir()):
        parsed = TrashName.parse(entry.name)
        out.append({"path": str(entry), "what": parsed.describe() if parsed else entry.name,
                    "subject": parsed.subject if parsed else entry.name, "bytes": tree_bytes(entry)})
    return out
