"""A node's latency: the mean over every transaction of its tenants (an SLA per server, the paper's §5.6),
computed here and only here -- for the controller's seed (slacker.throttle), the target guard of a rebalancer's
move (slacker.rebalance.runner), the drain's setpoint (slacker.rebalance.drain) and the planner's history
(slacker.rebalance.planner). Each tenant's figure counts by its transactions (its rate times its window)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MIN_TRANSACTIONS = 3.0  # fewer measured over the windows in all: no latency (the agents' rule)


def _get(row: Any, key: str, default: Any = None) -> Any:
    return row.get(key, default) if isinstance(row, Mapping) else getattr(row, key, default)


def node_latency(rows: Iterable[Any], *, exclude: Iterable[str] = (), failed: str = "skip",
                 min_transactions: float = MIN_TRANSACTIONS) -> float | None:
    """The transaction-weighted mean latency of `rows` (tenant-stats dicts or objects with `latency_s`,
    `transactions_per_s` and, optionally, `window_s` (1 s if absent), `ok` and `tenant`), the tenants in
    `exclude` left out. A row that failed (`ok` false): left out (`failed="skip"`: a guard or a plan reads
    the rest), or the node's latency is not known (`failed="unknown"`: a seed must not leave a tenant out).
    None with fewer than `min_transactions` transactions in all."""
    left_out = set(exclude)
    total = weight = 0.0
    for r in rows:
        if _get(r, "tenant") in left_out:
            continue
        if not _get(r, "ok", True):
            if failed == "unknown":
                return None
            continue
        y, tps = _get(r, "latency_s"), _get(r, "transactions_per_s") or 0.0
        if y is None or tps <= 0:
            continue
        w = tps * (_get(r, "window_s") or 1.0)
        total += y * w
        weight += w
    if weight <= 0 or weight < min_transactions:
        return None
    return total / weight
