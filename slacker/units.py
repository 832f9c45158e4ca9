"""One parser for durations, sizes and rates, used by every option that takes them.

Durations: a number and a unit: `ms`, `s`, `m`, `h` (`1500ms`, `1.5s`, `2m`).
A bare number is seconds.

Sizes: a number and an optional prefix and `B`: decimal prefixes k/K, M, G, T
are powers of 1000; binary prefixes Ki, Mi, Gi, Ti are powers of 1024. `B` is
optional (`128M` = `128MB` = 128,000,000 bytes; `512KiB` = 524,288 bytes).
Exception, because MariaDB's own options read it that way: `parse_server_size`
treats a bare K/M/G suffix as binary, for values handed to mariadbd.

Rates: a size followed by `/s` (`20MB/s`, `512KiB/s`). `0` is a valid rate and
means "paused", never "unlimited".
"""

from __future__ import annotations

import math
import re

from .errors import InvalidInput

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PREFIXES = {
    "": 1,
    "k": 1000,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
}
_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>ms|s|min|m|h)?\s*$")
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<prefix>Ki|Mi|Gi|Ti|k|K|M|G|T)?(?P<b>B)?\s*$")


def parse_duration(text: str) -> float:
    """Parse `1500ms`, `1.5s`, `2m`, `1h` (bare number: seconds) into seconds."""
    m = _DURATION_RE.match(str(text))
    if not m:
        raise InvalidInput(
            f"invalid duration {text!r}",
            "expected a number with ms, s, m or h",
            "for example 1500ms, 1.5s or 2m",
        )
    return float(m.group("num")) * _DURATION_UNITS[m.group("unit") or "s"]


def parse_size(text: str) -> int:
    """Parse `128M`, `128MB`, `512KiB`, `1.5GiB` into bytes (k/M/G decimal, Ki/Mi/Gi binary)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise InvalidInput(
            f"invalid size {text!r}",
            "expected a number with an optional k, M, G, T (x1000) or Ki, Mi, Gi, Ti (x1024) prefix and B",
            "for example 128M, 64MiB or 1.5GB",
        )
    return int(round(float(m.group("num")) * _PREFIXES[m.group("prefix") or ""]))


def parse_rate(text: str) -> int:
    """Parse `20MB/s`, `512KiB/s` into bytes per second. `0` means paused."""
    s = str(text).strip()
    if s.endswith("/s"):
        s = s[:-2]
    elif s not in ("0",) and not re.match(r"^[0-9.]+$", s):
        raise InvalidInput(
            f"invalid rate {text!r}",
            "a rate is a size per second",
            "for example 20MB/s or 512KiB/s",
        )
    try:
        return parse_size(s)
    except InvalidInput:
        raise InvalidInput(
            f"invalid rate {text!r}",
            "expected a size per second with k, M, G (x1000) or Ki, Mi, Gi (x1024)",
            "for example 20MB/s or 512KiB/s",
        ) from None


def parse_server_size(text: str) -> int:
    """A size for mariadbd options: bare K/M/G are binary, as MariaDB reads them."""
    m = _SIZE_RE.match(str(text))
    if m and m.group("prefix") in ("K", "k", "M", "G", "T") and not m.group("b"):
        return parse_size(f"{m.group('num')}{m.group('prefix').upper()}i")
    return parse_size(text)


def format_duration(seconds: float) -> str:
    """Short human form: `850ms`, `12.3s`, `4m05s`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_size(n_bytes: float) -> str:
    """Decimal human form: `12.3MB`."""
    n = float(n_bytes)
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or prefix == "T":
            return f"{n:.0f}B" if prefix == "" else f"{n:.1f}{prefix}B"
        n /= 1000
    return f"{n:.1f}TB"  # pragma: no cover


def format_binary_size(n_bytes: float) -> str:
    """Binary human form for memory sizes: `128MiB`."""
    n = float(n_bytes)
    for prefix in ("", "Ki", "Mi", "Gi"):
        if abs(n) < 1024 or prefix == "Gi":
            return f"{n:.0f}B" if prefix == "" else f"{n:.4g}{prefix}B"
        n /= 1024
    return f"{n:.4g}GiB"  # pragma: no cover


def format_rate(bytes_per_s: float) -> str:
    if bytes_per_s is None or (isinstance(bytes_per_s, float) and math.isinf(bytes_per_s)):
        return "unlimited"
    return format_size(bytes_per_s) + "/s"
