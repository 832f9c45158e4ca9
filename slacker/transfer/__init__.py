"""The throttled pipe: backup stream -> rate limiter -> TCP -> receiver -> extractor.

Two sender implementations share one small interface (ThrottledPipe): the
paper's `producer | pv | nc` (PvNcPipe) and an in-process token bucket
(NativePipe). `make_pipe()` picks one; DEFAULT_PIPE says which is used when
nobody asks, chosen by measurement (docs/transfer.md).
"""

from __future__ import annotations

from ..errors import InvalidInput
from .base import ThrottledPipe, TransferResult, normalize_rate
from .bucket import TokenBucket
from .meter import RateMeter, transfer_rate_meter
from .native import NativePipe
from .protocol import new_token
from .pvnc import CreditGovernor, PvNcPipe
from .receiver import ReceiveResult, Receiver

PIPES: dict[str, type[ThrottledPipe]] = {"native": NativePipe, "pv": PvNcPipe}
DEFAULT_PIPE = "native"
TLS_PIPES = {"native": True, "pv": False}  # which pipes can carry the stream over TLS


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


__all__ = [
    "DEFAULT_PIPE",
    "PIPES",
    "TLS_PIPES",
    "CreditGovernor",
    "NativePipe",
    "PvNcPipe",
    "RateMeter",
    "ReceiveResult",
    "Receiver",
    "ThrottledPipe",
    "TokenBucket",
    "TransferResult",
    "make_pipe",
    "new_token",
    "normalize_rate",
    "transfer_rate_meter",
]
