"""PID runs at one setpoint with each of --gain-sets (kp,ki,kd)."""

from __future__ import annotations

from .analysis import key
from .runner import Bench


def run(bench: Bench, sp: float) -> list[dict]:
    a = bench.args
    out = []
    for i, g in enumerate(a.gain_sets):
        # the index keeps a repeated set (run-to-run spread) from overwriting the first
        r = bench.run_tenant(f"gains-{i + 1}-{g.replace(',', '_')}-{key(sp)}", "pid", sp, gains=g)
        out.append({"gains": g, "run": r["name"]})
    bench.results["gains"] = {"setpoint_s": sp, "runs": out}
    bench.save()
    return out
