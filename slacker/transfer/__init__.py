"""The throttled pipe: backup stream -> rate limiter -> TCP -> receiver -> extractor.

Two sender implementations share one small interface (ThrottledPipe): the
paper's `producer | pv | nc` (PvNcPipe) and an in-process token bucket
(NativePipe). `make_pipe()` picks one; DEFAULT_PIPE says which is used when
nobody asks, chosen by measurement (docs/transfer.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import exports

if TYPE_CHECKING:
    from .base import ThrottledPipe, TransferResult, normalize_rate
    from .bucket import TokenBucket
    from .meter import RateMeter, transfer_rate_meter
    from .native import NativePipe
    from .pipes import PIPES, make_pipe
    from .protocol import new_token
    from .pvnc import CreditGovernor, PvNcPipe
    from .receiver import ReceiveResult, Receiver

DEFAULT_PIPE = "native"
TLS_PIPES = {"native": True, "pv": False}  # which pipes can carry the stream over TLS
# The native pipe's data paths: how the bytes move on each side (sender, receiver), splice in the
# kernel or copy through Python (slacker.transfer.native.wants_splice).
DATA_PATHS = {"splice": (True, True), "copy": (False, False), "splice-send": (True, False)}

# Loaded on first use: `slacker migrate` (and its --help) needs only the names above, not the pipes'
# sockets, TLS and subprocesses.
__getattr__ = exports(__name__, {
    "ThrottledPipe": "base", "TransferResult": "base", "normalize_rate": "base", "TokenBucket": "bucket",
    "RateMeter": "meter", "transfer_rate_meter": "meter", "NativePipe": "native", "PIPES": "pipes",
    "make_pipe": "pipes", "new_token": "protocol", "CreditGovernor": "pvnc", "PvNcPipe": "pvnc",
    "ReceiveResult": "receiver", "Receiver": "receiver",
})


__all__ = [
    "DATA_PATHS",
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
