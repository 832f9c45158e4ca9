"""Feed the rebalancer's planner (slacker/rebalance/planner.py, unchanged) from a simulated fleet.

Every simulated minute is one stats interval: each tenant gets a sample (its load, its transactions, the
latency of the node it is on), and the rebalancer runs once, as from cron every minute. What the planner
sees is what agents would report: a node's tenants with their samples since they arrived there (a moved
tenant starts with none on its new node; the planner counts it with the load it was moved with, from the
moves in the directory's state), the last `samples` of them.

Policies:
- "none": no rebalancing, the reference.
- "serial": the planner as the runner uses it today, one move at a time; a move lasts its copy
  (data_bytes at `copy_rate` bytes/s) plus `handover_s`, and the tenant's load leaves its source at the end.
- "parallel": every pass asks the planner again after each move it plans, with the moves planned so far
  recorded as done (their nodes and tenant in cool-down, the tenant counted on its target), until it
  plans none or `max_moves_per_pass`; moves take effect within the minute. This is the planner's rules
  with moves run side by side (a move shorter than a stats interval), the most they can do.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from slacker.rebalance.planner import Move, NodeInput, Sample, Settings, State, plan

from .bound import min_removals
from .model import FleetModel, Loads


@dataclass
class SimOptions:
    policy: str = "parallel"
    minutes: int = 240
    warmup: int = 0                   # minutes before the planner runs (history fills after `samples`)
    copy_rate: float = 100e6          # bytes/s of a move's copy (serial policy)
    handover_s: float = 30.0
    max_moves_per_pass: int = 1000
    settings: Settings = field(default_factory=Settings)


def initial_placement(model: FleetModel, loads: np.ndarray) -> np.ndarray:
    """Largest first onto the least loaded node (the placement `tenant create` and a drain use, done once
    for the whole fleet with the loads of the first minute): the fleet starts balanced."""
    import heapq
    heap = [(0.0, n) for n in range(model.nodes)]
    assign = np.empty(model.tenants, dtype=np.int32)
    for i in np.argsort(-loads, kind="stable"):
        load, n = heapq.heappop(heap)
        assign[i] = n
        heapq.heappush(heap, (load + float(loads[i]), n))
    return assign


def run(model: FleetModel, opts: SimOptions, progress=None) -> dict:
    k = int(opts.settings.samples)
    gen = Loads(model)
    names = [f"node-{n + 1}" for n in range(model.nodes)]
    node_of = {name: n for n, name in enumerate(names)}
    tids = [f"t{i}" for i in range(model.tenants)]
    tenant_of = {t: i for i, t in enumerate(tids)}
    first = gen.step()
    assign = initial_placement(model, first)
    arrived = np.full(model.tenants, -10**9)     # minute a tenant arrived on its node (history since then)
    hist_load = np.zeros((k, model.tenants))     # newest last
    hist_lat = np.zeros((k, model.tenants))
    moves: list[Move] = []
    in_flight: dict[int, tuple[int, int]] = {}   # serial: tenant -> (target node, minute it ends)
    over_prev = np.zeros(model.nodes, dtype=bool)
    ep_start = np.zeros(model.nodes, dtype=np.int64)
    ep_bound = np.zeros(model.nodes, dtype=np.int64)

    def _ended(n: int, minute: int) -> None:
        # An episode of at least `samples` minutes is one the planner's rule (hot for `samples` samples in a
        # row) can see; shorter ones end before any rebalancer acting on samples could.
        if minute - ep_start[n] >= k:
            totals["persistent_episodes"] += 1
            totals["persistent_bound"] += int(ep_bound[n])
    records = []
    totals = {"moves": 0, "sla_moves": 0, "bound": 0, "episodes": 0, "persistent_bound": 0,
              "persistent_episodes": 0, "over_node_minutes": 0, "plan_calls": 0}
    plan_times: list[float] = []
    loads = first
    keep_s = max(opts.settings.no_return_s, opts.settings.tenant_cooldown_s, opts.settings.node_cooldown_s)
    for minute in range(opts.minutes):
        if minute > 0:
            loads = gen.step()
        now = minute * 60.0
        # Serial moves that end now: the tenant's load leaves for its target.
        for i, (tgt, end) in list(in_flight.items()):
            if end <= minute:
                assign[i] = tgt
                arrived[i] = minute
                del in_flight[i]
                for j, m in enumerate(moves):
                    if m.result == "running" and m.tenant == tids[i]:
                        moves[j] = Move(m.tenant, m.source, m.target, m.started_at, m.load, now, "succeeded")
        node_load = np.bincount(assign, weights=loads, minlength=model.nodes)
        lat = np.array([model.latency_s(x) for x in node_load])
        hist_load = np.roll(hist_load, -1, axis=0)
        hist_lat = np.roll(hist_lat, -1, axis=0)
        hist_load[-1] = loads
        hist_lat[-1] = lat[assign]
        over = node_load > model.sla_load
        # Overload episodes that begin now, and the fewest moves that could end each (bound.py).
        new = np.nonzero(over & ~over_prev)[0]
        for n in new:
            ep_bound[n] = min_removals(loads[assign == n], model.sla_load)
            ep_start[n] = minute
            totals["bound"] += int(ep_bound[n])
        totals["episodes"] += len(new)
        for n in np.nonzero(~over & over_prev)[0]:  # episodes that ended: did they last long enough to be seen?
            _ended(n, minute)
        totals["over_node_minutes"] += int(over.sum())
        over_prev = over
        rec = {"minute": minute, "over_sla": int(over.sum()), "max_util": float(node_load.max() / model.capacity),
               "p99_latency_s": float(np.quantile(lat, 0.99)), "moves": 0, "sla_moves": 0, "plan_s": 0.0,
               "plan_calls": 0, "hot": 0}
        moves = [m for m in moves if m.result == "running" or (m.finished_at or now) + keep_s > now]
        if opts.policy != "none" and minute >= max(opts.warmup, k):
            inputs = _inputs(model, names, tids, assign, arrived, hist_load, hist_lat, gen.data_bytes, minute, k)
            by_name = {n.name: n for n in inputs}
            for _ in range(opts.max_moves_per_pass if opts.policy == "parallel" else 1):
                t0 = time.perf_counter()
                p = plan(inputs, State(moves=list(moves)), opts.settings, now)
                dt = time.perf_counter() - t0
                plan_times.append(dt)
                rec["plan_s"] += dt
                rec["plan_calls"] += 1
                if rec["plan_calls"] == 1:
                    rec["hot"] = sum(1 for r in p.nodes if r.hot)
                if p.decision != "move":
                    break
                mv = p.move
                i, src, tgt = tenant_of[mv.tenant], node_of[mv.source], node_of[mv.target]
                sla = "latency" in p.nodes[src].reason  # hot by its latency, not only by its load
                rec["moves"] += 1
                rec["sla_moves"] += int(sla)
                if opts.policy == "serial":
                    dur_min = math.ceil((int(gen.data_bytes[i]) / opts.copy_rate + opts.handover_s) / 60.0)
                    in_flight[i] = (tgt, minute + dur_min)
                    moves.append(Move(mv.tenant, mv.source, mv.target, now, mv.tenant_load))
                    break
                # parallel: done within the minute; the planner sees it as a recent move, the tenant on its
                # target with no samples there yet.
                assign[i] = tgt
                arrived[i] = minute + 1  # its first sample there is the next minute's
                moves.append(Move(mv.tenant, mv.source, mv.target, now, mv.tenant_load, now, "succeeded"))
                by_name[mv.target].tenants[mv.tenant] = []
                del by_name[mv.source].tenants[mv.tenant]
        totals["moves"] += rec["moves"]
        totals["sla_moves"] += rec["sla_moves"]
        totals["plan_calls"] += rec["plan_calls"]
        records.append(rec)
        if progress and minute % 30 == 0:
            progress(rec)
    for n in np.nonzero(over_prev)[0]:
        _ended(n, opts.minutes)
    hours = opts.minutes / 60.0
    pt = sorted(plan_times)
    summary = dict(totals)
    summary.update({
        "policy": opts.policy, "hours": hours, "moves_per_hour": totals["moves"] / hours,
        "bound_per_hour": totals["bound"] / hours, "episodes_per_hour": totals["episodes"] / hours,
        "persistent_bound_per_hour": totals["persistent_bound"] / hours,
        "over_sla_fraction": totals["over_node_minutes"] / (model.nodes * opts.minutes),
        "plan_s_median": pt[len(pt) // 2] if pt else None, "plan_s_p95": pt[int(len(pt) * 0.95)] if pt else None,
        "plan_s_max": pt[-1] if pt else None,
        "pass_s_median": float(np.median([r["plan_s"] for r in records if r["plan_calls"]])) if pt else None,
        "pass_s_max": max((r["plan_s"] for r in records), default=0.0),
    })
    return {"summary": summary, "records": records}


def _inputs(model, names, tids, assign, arrived, hist_load, hist_lat, data_bytes, minute, k) -> list[NodeInput]:
    """What the agents would report: per node, its tenants' samples since they arrived, the last k."""
    tps = hist_load * model.tps_per_cpu
    inputs = [NodeInput(name) for name in names]
    for i in range(model.tenants):
        have = int(min(k, minute - arrived[i] + 1))
        samples = [Sample(t=(minute - j) * 60.0, load=float(hist_load[k - 1 - j, i]),
                          transactions_per_s=float(tps[k - 1 - j, i]), latency_s=float(hist_lat[k - 1 - j, i]),
                          data_bytes=int(data_bytes[i])) for j in range(have - 1, -1, -1)]
        inputs[assign[i]].tenants[tids[i]] = samples
    return inputs
