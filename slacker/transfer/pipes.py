"""The senders by name and `make_pipe`, which builds one: imported when a copy starts, not by
`slacker migrate --help`, which needs only the names (slacker.transfer)."""

from __future__ import annotations

from ..errors import InvalidInput
from . import DEFAULT_PIPE, TLS_PIPES
from .base import ThrottledPipe
from .native import NativePipe
from .pvnc import PvNcPipe

PIPES: dict[str, type[ThrottledPipe]] = {"native": NativePipe, "pv": PvNcPipe}


def make_pipe(kind: str = DEFAULT_PIPE, *args, ssl_context=None, **kwargs) -> ThrottledPipe:
    """Build a sender of the given kind ("native" or "pv"); arguments as ThrottledPipe's.

    With `ssl_context` (the cluster requires TLS) only the native pipe can carry the stream:
    `pv | nc` would send the backup in plain text, so it is refused."""
    try:
        cls = PIPES[kind]
    except KeyError:
        raise InvalidInput(f"unknown pipe {kind!r}", f"known pipes: {', '.join(sorted(PIPES))}",
                           f"use one of them, or omit it for the default ({DEFAULT_PIPE})") from None
    if ssl_context is not None:
        if not TLS_PIPES.get(kind):
            raise InvalidInput(f"the {kind} pipe cannot be used: this cluster requires TLS",
                               "pv | nc sends the backup in plain text", "use --pipe native (the default)")
        kwargs["ssl_context"] = ssl_context
    return cls(*args, **kwargs)
