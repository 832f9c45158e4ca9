"""Binlog delta rounds: the appliers that catch a migration target up, and the round loop's judges."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

APPLIERS = ("serial", "concurrent")
DEFAULT_APPLIER = "concurrent"  # by measurement, docs/delta.md
DEFAULT_MPL = "auto"


def parse_mpl(value) -> int | str:
    """'auto' or an integer 1..64 (the parallel workers of the concurrent applier)."""
    from ..errors import InvalidInput

    if value is None or str(value).strip().lower() == "auto":
        return "auto"
    try:
        n = int(str(value).strip())
    except ValueError:
        raise InvalidInput(f"invalid --delta-mpl {value!r}", "expected auto or a number of parallel appliers",
                           "for example --delta-mpl auto or --delta-mpl 4") from None
    if not 1 <= n <= 64:
        raise InvalidInput(f"--delta-mpl {n} is out of range", "it must be between 1 and 64", "or use auto")
    return n


def make_applier(kind: str, connect: Callable, mpl: int | str = DEFAULT_MPL, datadir: Path | str | None = None,
                 catchup_mode: bool = True):
    """The delta applier for a migration target: `kind` serial|concurrent, `mpl` auto|N."""
    from ..errors import InvalidInput
    from .engine import EngineApplier

    if kind not in APPLIERS:
        raise InvalidInput(f"unknown delta applier {kind!r}", f"appliers are {', '.join(APPLIERS)}", "")
    return EngineApplier(connect, kind=kind, mpl=parse_mpl(mpl), datadir=datadir, catchup_mode=catchup_mode)
