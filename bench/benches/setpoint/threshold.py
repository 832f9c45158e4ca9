"""The on/off threshold throttle at one setpoint (compared with fig11's PID run at the same setpoint)."""

from __future__ import annotations

from .analysis import key
from .runner import Bench


def run(bench: Bench, sp: float) -> dict:
    r = bench.run_tenant(f"threshold-{key(sp)}", "threshold", sp)
    bench.results["threshold"] = {"setpoint_s": sp, "run": r["name"]}
    bench.save()
    return r
