"""The one exception hierarchy of Slacker.

Every error a user can cause or meet carries three parts: what failed, why, and
what to do. The CLI prints them on one line and exits non-zero.
"""

from __future__ import annotations


class SlackerError(Exception):
    """Base class: `what` failed because `why`; `hint` says what to do."""

    exit_code = 1

    def __init__(self, what: str, why: str = "", hint: str = "") -> None:
        self.what = what
        self.why = why
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.what
        if self.why:
            text += f": {self.why}"
        if self.hint:
            text += f" ({self.hint})"
        # One line, always: tool output quoted in `why` must not break it.
        return " | ".join(part.strip() for part in text.splitlines() if part.strip())

    def to_dict(self) -> dict:
        return {"error": type(self).__name__, "what": self.what, "why": self.why, "hint": self.hint}


class InvalidInput(SlackerError):
    """Bad user input: an id, a unit, an option."""

    exit_code = 2


class LatencySourceError(InvalidInput):
    """A latency source that cannot be read: no answer, a wrong metric, performance_schema off. A failed
    LatencySample says which kind in `failure`; the migration refuses to start on one (nothing copied)."""


class BlindLatencySource(LatencySourceError):
    """The servers commit transactions the latency source does not see (a filter or a source that misses
    them): it would report an idle tenant while the tenants wait."""


class TargetLatencyError(LatencySourceError):
    """The target node's latency (the target guard, read from its agent) cannot be read."""


class NotFound(SlackerError):
    """A tenant, node or migration that does not exist."""

    exit_code = 3


class Conflict(SlackerError):
    """The thing exists already, is busy, or an epoch moved underneath us."""

    exit_code = 4


class PortTaken(Conflict):
    """A port another tenant is registered with (a creation picks the next one)."""


class MissingDependency(SlackerError):
    """A system package or program is not installed."""

    exit_code = 5


class TenantError(SlackerError):
    """A tenant server failed to start, stop or answer."""


class AgentUnavailable(SlackerError):
    """An agent could not be reached or refused us."""

    exit_code = 6


class DirectoryUnavailable(AgentUnavailable):
    """The directory store (e.g. etcd) could not be reached or has no quorum; a write's outcome is unknown."""

    exit_code = 6


class Unauthorized(SlackerError):
    """The bearer token was missing or wrong."""

    exit_code = 7


class Forbidden(SlackerError):
    """The credential is this cluster's but its scope does not cover the request (HTTP 403)."""

    exit_code = 7


class InsecureChannel(SlackerError):
    """A secret (a password) would cross a link that is neither TLS nor inside this machine."""

    exit_code = 7


class VersionSkew(SlackerError):
    """Two parties (agents, an agent and the CLI) speak protocol versions too far apart (slacker.protocol_version)."""

    exit_code = 9


class MigrationFailed(SlackerError):
    """A migration failed; `phase` names where. The source keeps serving."""

    exit_code = 8

    def __init__(self, what: str, why: str = "", hint: str = "", phase: str = "", detail: str = "") -> None:
        self.phase = phase
        # What a tool printed behind the message (the backup tool's stderr): kept for the agent
        # log, --json and --debug, never in the one-line message.
        self.detail = detail
        super().__init__(what, why, hint)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["phase"] = self.phase
        if self.detail:
            d["detail"] = self.detail
        return d


class LockNotGranted(MigrationFailed):
    """The source's freeze was not granted within its share of the freeze budget; nothing was frozen."""


class CatchUpTimeout(MigrationFailed):
    """The target did not reach the frozen source's position within the freeze budget."""


# Map names back to classes so errors survive a trip through the agent's HTTP API.
ERROR_CLASSES = {
    cls.__name__: cls
    for cls in (
        SlackerError,
        InvalidInput,
        NotFound,
        Conflict,
        PortTaken,
        MissingDependency,
        TenantError,
        AgentUnavailable,
        DirectoryUnavailable,
        Unauthorized,
        Forbidden,
        InsecureChannel,
        VersionSkew,
        MigrationFailed,
        LockNotGranted,
        CatchUpTimeout,
    )
}


def error_from_dict(d: dict) -> SlackerError:
    cls = ERROR_CLASSES.get(d.get("error", ""), SlackerError)
    if issubclass(cls, MigrationFailed):
        return cls(d.get("what", "?"), d.get("why", ""), d.get("hint", ""), d.get("phase", ""), d.get("detail", ""))
    return cls(d.get("what", "?"), d.get("why", ""), d.get("hint", ""))
