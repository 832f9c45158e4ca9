"""The agent protocol version: what every agent request and response, and the snapshot stream, carry.

Rule: two parties whose versions differ by at most one work together, the
newer speaking the older's dialect; farther apart they refuse, in one line
naming both versions and the side to upgrade. SLACKER_PROTOCOL_VERSION
overrides this build's version (tests simulate an upgrade with it).
"""

from __future__ import annotations

import os

from .errors import InvalidInput, VersionSkew

# 1: agents before membership and versioning (they send no version; absent means 1).
# 2: members in the directory, the version header and the stream's version field.
PROTOCOL_VERSION = 2
HEADER = "Slacker-Protocol"
NODE_HEADER = "Slacker-Node"  # who sends a request (an agent's node name, or "cli"), for the refusal's hint
ENV = "SLACKER_PROTOCOL_VERSION"
MAX_SKEW = 1
UNVERSIONED = 1


def current() -> int:
    """This process's protocol version (the override, when set, for tests and rehearsals)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return PROTOCOL_VERSION
    try:
        v = int(raw)
    except ValueError:
        v = 0
    if v < 1:
        raise InvalidInput(f"bad {ENV} {raw!r}", "expected a whole number of 1 or more", f"unset {ENV}")
    return v


def parse(raw: str | None) -> int:
    """A version header's value; a party that sends none speaks version 1."""
    try:
        return int(raw) if raw not in (None, "") else UNVERSIONED
    except ValueError:
        return 0


def compatible(a: int, b: int) -> bool:
    return abs(a - b) <= MAX_SKEW


def spoken(a: int, b: int) -> int:
    """The dialect two compatible parties use: the older one's."""
    return min(a, b)


def check(mine: int, theirs: int, me: str, them: str) -> None:
    """Raise VersionSkew (one line: both versions, which to upgrade) unless the two may talk."""
    if compatible(mine, theirs):
        return
    older = me if mine < theirs else them
    raise VersionSkew(f"protocol version skew: {me} speaks {mine}, {them} speaks {theirs}",
                      f"versions more than {MAX_SKEW} apart do not work together",
                      f"upgrade {older} (docs/deployment.md, rolling upgrade)")
