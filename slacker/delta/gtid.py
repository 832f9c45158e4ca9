"""MariaDB GTID positions (`domain-server-seq`, comma-separated per domain) and binlog distances."""

from __future__ import annotations

from ..errors import InvalidInput


def parse_gtid_pos(text: str) -> dict[int, tuple[int, int]]:
    """'0-1-100,1-2-5' -> {0: (1, 100), 1: (2, 5)}. Empty text is the empty position."""
    out: dict[int, tuple[int, int]] = {}
    for part in (text or "").replace(" ", "").split(","):
        if not part:
            continue
        try:
            domain, server, seq = (int(x) for x in part.split("-"))
        except ValueError:
            raise InvalidInput(f"invalid GTID position {text!r}", f"cannot read {part!r}",
                               "expected domain-server-seq") from None
        out[domain] = (server, seq)
    return out


def format_gtid_pos(pos: dict[int, tuple[int, int]]) -> str:
    return ",".join(f"{d}-{s}-{q}" for d, (s, q) in sorted(pos.items()))


def reached(applied: str, wanted: str) -> bool:
    """True if every domain of `wanted` has been applied up to at least its sequence number."""
    a = parse_gtid_pos(applied)
    return all(d in a and a[d][1] >= q for d, (_, q) in parse_gtid_pos(wanted).items())


def transactions_between(older: str, newer: str) -> int:
    """Transactions committed between two positions of the same server (sum over domains)."""
    o, n = parse_gtid_pos(older), parse_gtid_pos(newer)
    return sum(max(0, q - (o.get(d, (0, 0))[1])) for d, (_, q) in n.items())


def binlog_bytes_between(binlogs: list[tuple[str, int]], start: tuple[str, int], end: tuple[str, int]) -> int:
    """Bytes of binlog between two (file, offset) coordinates, given SHOW BINARY LOGS (name, size)."""
    names = [n for n, _ in binlogs]
    sizes = dict(binlogs)
    if start[0] not in sizes or end[0] not in sizes:
        return max(0, end[1] - start[1]) if start[0] == end[0] else 0
    i, j = names.index(start[0]), names.index(end[0])
    if i == j:
        return max(0, end[1] - start[1])
    if i > j:
        return 0
    total = sizes[start[0]] - start[1]
    for name in names[i + 1:j]:
        total += sizes[name]
    return total + end[1]
