"""The fewest moves that can end a node's overload: a lower bound.

A node over its SLA load L with tenant loads x_1 ≥ x_2 ≥ … needs at least m tenants to leave it, where m is
the smallest count whose largest-first sum covers its excess (load − L): any m' < m tenants carry at most
the m' largest loads, which fall short. Summed over the overload episodes of a run (a node going from
at or under L to over it), this bounds from below the moves any policy needs to end those episodes from
those placements, however it picks tenants and targets; it assumes other nodes can take them.
Episodes shorter than the planner's `samples` minutes end before a rule that waits for that many samples
can act; the bound over the episodes that last at least that long is what a sample-driven rebalancer
could have prevented (sim.py counts both).
"""

from __future__ import annotations

from collections.abc import Iterable


def min_removals(tenant_loads: Iterable[float], limit: float) -> int:
    """Fewest tenants whose removal brings the node's load to at most `limit` (0 if it is not over).
    A node whose excess no set of its tenants covers (it cannot happen: removing all leaves 0) counts all."""
    loads = sorted(tenant_loads, reverse=True)
    excess = sum(loads) - limit
    n = 0
    for x in loads:
        if excess <= 1e-12:
            break
        excess -= x
        n += 1
    return n
