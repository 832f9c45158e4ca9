"""Wire format of a snapshot transfer: header, raw stream, trailer, verdict.

    sender -> receiver:  HEADER  (magic, migration id, per-migration token; from protocol 2 on, with
                                  magic SLKXFER2, the sender's agent protocol version too)
                         PAYLOAD (the producer's bytes, unframed, so pv|nc can carry it)
                         TRAILER (end magic + payload byte count), then half-close
    receiver -> sender:  VERDICT ("OK <bytes>\\n" or "ERR <reason>\\n"), then close

The payload is raw so that `producer | pv | nc` needs no framing process. A cut
connection is told apart from a clean end by the trailer: the sender writes it
only after the producer exited 0, and it carries the exact payload length, so a
stream that merely happens to end in the magic bytes is still refused. The
verdict exists because nc exits 0 even when the peer resets the connection.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import struct
import time
from dataclasses import dataclass

HEADER_MAGIC = b"SLKXFER1"  # protocol 1: no version field (a sender talking to a version-1 agent still uses it)
HEADER_MAGIC_V2 = b"SLKXFER2"  # protocol 2 on: the lengths are followed by the sender's version
_VERSION = struct.Struct("!H")
TRAILER_MAGIC = b"SLKEND01"
_LENGTHS = struct.Struct("!HH")
_COUNT = struct.Struct("!Q")
TRAILER_LEN = len(TRAILER_MAGIC) + _COUNT.size
MAX_ID_BYTES = 255
MAX_TOKEN_BYTES = 255
MIN_TOKEN_BYTES = 16
MAX_VERDICT_BYTES = 1024


class ProtocolError(Exception):
    """A peer spoke something that is not this protocol (internal; callers map it)."""


def new_token() -> str:
    """A fresh per-migration secret (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def _as_bytes(value: str | bytes, name: str, lo: int, hi: int) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if not lo <= len(raw) <= hi:
        raise ValueError(f"{name} must be {lo}-{hi} bytes, got {len(raw)}")
    return raw


def migration_id_bytes(migration_id: str | bytes) -> bytes:
    return _as_bytes(migration_id, "migration id", 1, MAX_ID_BYTES)


def token_bytes(token: str | bytes) -> bytes:
    return _as_bytes(token, "token", MIN_TOKEN_BYTES, MAX_TOKEN_BYTES)


def encode_header(migration_id: str | bytes, token: str | bytes, version: int | None = None,
                  dialect: int | None = None) -> bytes:
    """`version`: the sender's agent protocol; `dialect`: the one spoken with this receiver (the older
    side's). A version-1 dialect (or no version) writes the header a version-1 receiver reads."""
    mid = migration_id_bytes(migration_id)
    tok = token_bytes(token)
    if version is None or (dialect if dialect is not None else version) < 2:
        return HEADER_MAGIC + _LENGTHS.pack(len(mid), len(tok)) + mid + tok
    return HEADER_MAGIC_V2 + _LENGTHS.pack(len(mid), len(tok)) + _VERSION.pack(version) + mid + tok


def encode_trailer(payload_bytes: int) -> bytes:
    return TRAILER_MAGIC + _COUNT.pack(payload_bytes)


def parse_trailer(tail: bytes) -> int | None:
    """The payload length a trailer announces, or None if `tail` is not a trailer."""
    if len(tail) != TRAILER_LEN or not tail.startswith(TRAILER_MAGIC):
        return None
    return _COUNT.unpack(tail[len(TRAILER_MAGIC):])[0]


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProtocolError("header not received in time")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            raise ProtocolError("header not received in time") from None
        if not chunk:
            raise ProtocolError("connection closed inside the header")
        buf += chunk
    return bytes(buf)


@dataclass(frozen=True)
class Header:
    migration_id: bytes
    token: bytes
    version: int = 1  # the sender's agent protocol (1: a header without the field)

    def matches(self, migration_id: bytes, token: bytes) -> bool:
        """Constant-time check of both fields (both are always compared)."""
        id_ok = hmac.compare_digest(self.migration_id, migration_id)
        token_ok = hmac.compare_digest(self.token, token)
        return id_ok and token_ok


def read_header(sock: socket.socket, timeout_s: float) -> Header:
    """Read one header within `timeout_s`; ProtocolError on anything malformed."""
    deadline = time.monotonic() + timeout_s
    fixed = _recv_exact(sock, len(HEADER_MAGIC) + _LENGTHS.size, deadline)
    magic = fixed[: len(HEADER_MAGIC)]
    v2 = hmac.compare_digest(magic, HEADER_MAGIC_V2)
    if not v2 and not hmac.compare_digest(magic, HEADER_MAGIC):
        raise ProtocolError("bad magic")
    id_len, token_len = _LENGTHS.unpack(fixed[len(HEADER_MAGIC):])
    if not (1 <= id_len <= MAX_ID_BYTES and MIN_TOKEN_BYTES <= token_len <= MAX_TOKEN_BYTES):
        raise ProtocolError("bad field lengths")
    version = _VERSION.unpack(_recv_exact(sock, _VERSION.size, deadline))[0] if v2 else 1
    rest = _recv_exact(sock, id_len + token_len, deadline)
    return Header(rest[:id_len], rest[id_len:], version)


def half_close(sock: socket.socket) -> None:
    """End our direction of the stream, keep reading. On a TLS socket the TCP half-close goes
    under the TLS layer (ssl's own shutdown() would drop it and the verdict could not be read);
    the peer reads a clean end, and the trailer inside the TLS stream tells it the end is real."""
    socket.socket.shutdown(sock, socket.SHUT_WR)


def encode_verdict(ok: bool, payload_bytes: int = 0, reason: str = "") -> bytes:
    if ok:
        return b"OK %d\n" % payload_bytes
    text = " ".join(reason.split())[: MAX_VERDICT_BYTES - 8]
    return b"ERR " + text.encode("utf-8", "replace") + b"\n"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    payload_bytes: int = 0
    reason: str = ""


def parse_verdict(data: bytes) -> Verdict | None:
    """The receiver's verdict from whatever it sent back; None if it sent nothing usable."""
    line = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if line.startswith("OK "):
        try:
            return Verdict(True, int(line[3:]))
        except ValueError:
            return None
    if line.startswith("ERR"):
        return Verdict(False, 0, line[3:].strip())
    return None
