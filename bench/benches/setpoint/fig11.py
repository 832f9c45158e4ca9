"""Figure 11: per setpoint, a PID migration, then a fixed-rate migration at the PID run's average rate."""

from __future__ import annotations

from .analysis import key
from .runner import Bench


def run(bench: Bench, setpoints: list[float]) -> list[dict]:
    pairs = []
    for sp in setpoints:
        pid = bench.run_tenant(f"fig11-pid-{key(sp)}", "pid", sp)
        fixed = bench.run_tenant(f"fig11-fixed-{key(sp)}", "fixed", sp, rate=pid["migration"]["avg_rate"])
        pairs.append({"setpoint_s": sp, "pid": pid["name"], "fixed": fixed["name"]})
        bench.results["fig11"] = pairs
        bench.save()
    bench.results["fig11"] = pairs
    bench.save()
    return pairs
