"""Figure 13b: five tenants on node-1, one migrating under the controller, then under a fixed rate at the
controller's average; latency over all five (the controller reads the histogram summed over all tenants).
"""

from __future__ import annotations

import os

from . import log
from .analysis import key
from .runner import Bench


def run(bench: Bench, sp: float) -> dict:
    a = bench.args
    # The migrating tenant is the single tenant of the other runs (its whole table is copied, so the
    # copy lasts as long as there); four tenants of --mt-records rows join it on its node. The harness
    # drives all five with recordcount=--mt-records: the mover's clients touch --mt-records of its rows
    # (hashed keys, spread over the whole table), the same number as the others'.
    mover = a.tenant
    bench.ensure_home(mover)
    node = bench.node_of(mover)
    others = [f"m{i}" for i in range(2, 6)]
    names = [mover] + others
    infos = []
    for n in others:
        infos.append(bench.create_and_load(n, a.mt_records, a.mt_buffer_pool, node=node))
    for n in others:
        bench.settle(n, a.settle_max)
    bench.results["mt_tenants"] = infos
    side = None
    if a.busy_target_tps:
        # A busy target: tenant b1 on the other node, driven by its own harness during both runs.
        other = "node-2" if node == "node-1" else "node-1"
        bench.results["busy_target"] = bench.create_and_load("b1", a.mt_records, a.mt_buffer_pool, node=other)
        bench.settle("b1", a.settle_max)
        side = (["b1"], [a.busy_target_tps])
    rates = [a.mt_tps / 5] * 5
    pid = bench.run_one(f"fig13b-{a.step_controller}-{key(sp)}", names, rates, a.mt_records,
                       migrate_tenant=mover, kind=a.step_controller, setpoint_s=sp, tenant_label=None,
                       side_load=side)
    # back to the others, unthrottled, so the fixed run starts from the same placement
    if bench.node_of(mover) != node:
        log(f"fig13b: moving {mover} back to {node} (unthrottled) for the fixed run")
        bench.migrate(mover, rate=None, name="fig13b-move-back", keep_series=False)
        os.sync()
    fixed = bench.run_one(f"fig13b-fixed-{key(sp)}", names, rates, a.mt_records, migrate_tenant=mover,
                         kind="fixed", setpoint_s=sp, rate=pid["migration"]["avg_rate"], tenant_label=None,
                         side_load=side)
    out = {"setpoint_s": sp, "pid": pid["name"], "fixed": fixed["name"], "tenants": names, "rates": rates,
           "controller": a.step_controller, "busy_target_tps": a.busy_target_tps,
           "source_node": node}
    bench.results["fig13b"] = out
    bench.save()
    return out
