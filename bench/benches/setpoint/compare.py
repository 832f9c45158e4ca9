"""Every controller side by side (issues 14, 32): slack (the default), the model controller, velocity PID, on/off threshold, a fixed rate at the
oracle (from fig5) and unthrottled, at each binding setpoint and one that does not bind, --repeats
times, the order of the controllers rotated each repeat. Analysis: analysis.summarise/report_compare."""

from __future__ import annotations

import argparse

from . import log
from .analysis import key, mbs, migration_series, ms, oracle_rates
from .runner import Bench


KINDS = ("model", "pid", "threshold", "oracle")  # run at each binding setpoint, in this order (rotated)


def parse_controllers(text: str) -> list[str]:
    """--controllers: a comma-separated subset of KINDS, kept in KINDS' order."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = sorted(set(names) - set(KINDS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected a subset of {','.join(KINDS)}, got {text!r}")
    return [k for k in KINDS if k in names]


def run(bench: Bench, binding: list[float]) -> dict:
    a = bench.args
    if a.nonbinding_only:
        binding = []
    f5 = bench.results["runs"].get("fig5")
    oracle = oracle_rates(f5, binding) if f5 else {}
    for sp, rate in zip(binding, a.oracle_rates or []):
        oracle[key(sp)] = rate
    for sp in binding:
        if oracle.get(key(sp)) is None:
            oracle[key(sp)] = min(a.fixed_rates)
            log(f"compare: no fig5 level met {key(sp)}; oracle set to the lowest level {mbs(oracle[key(sp)], 0)} MB/s")
    c = {"binding": [key(sp) for sp in binding], "binding_s": binding, "oracle": oracle,
         "nonbinding": a.nonbinding_setpoint, "repeats": a.repeats, "runs": []}
    bench.results["compare"] = c
    log("compare: oracle rates " + ", ".join(f"{k} {mbs(v, 0)} MB/s" for k, v in oracle.items()))

    def one(rep: int, kind: str, sp: float | None) -> None:
        tag = "unthrottled" if kind == "unthrottled" else f"{kind}-{key(sp)}"
        name = f"cmp-r{rep}-{tag}"
        if kind == "oracle":
            bench.run_tenant(name, "fixed", sp, rate=oracle[key(sp)])
        else:
            bench.run_tenant(name, kind, sp)
        c["runs"].append({"rep": rep, "kind": kind, "setpoint_s": sp, "name": name})
        bench.save()

    once = set(getattr(a, "once", None) or ())
    for rep in range(1, a.repeats + 1):
        kinds = [k for k in a.controllers if rep == 1 or k not in once]
        one(rep, "unthrottled", None)
        if c["nonbinding"] is None:
            u = bench.results["runs"][c["runs"][-1]["name"]]["copy"]["mean_s"] or 0.1
            c["nonbinding"] = max(0.01, round(2 * u, 2 if u < 0.5 else 1))
            log(f"compare: non-binding setpoint {ms(c['nonbinding'], 0)} ms (twice the unthrottled copy's "
                f"{ms(u)} ms)")
        order = kinds[(rep - 1) % len(kinds):] + kinds[:(rep - 1) % len(kinds)]
        for sp in binding:
            for kind in order:
                one(rep, kind, sp)
        for kind in ("model", "pid"):
            if kind in kinds:
                one(rep, kind, c["nonbinding"])
    if a.cannot_setpoint:
        # A setpoint under what the load alone costs: when does the migration say it cannot finish?
        sp = a.cannot_setpoint
        name = f"cmp-cannot-model-{key(sp)}"
        run = bench.run_tenant(name, "model", sp, abort_after_s=a.cannot_abort)
        snap = [x for x in migration_series(bench.results["runs"][name]["migration"]) if x.get("phase") == "snapshot"]
        said = next((x for x in snap if x.get("verdict")), None)
        c["cannot"] = {"setpoint_s": sp, "name": name, "verdict_after_s": said["t"] if said else None,
                       "verdict": said["verdict"] if said else None, "pre_mean_s": run["pre"]["mean_s"]}
        log(f"compare: setpoint {ms(sp)} ms under the load's own latency ({ms(run['pre']['mean_s'])} ms before the "
            f"copy): " + (f"the verdict after {said['t']:.0f}s: {said['verdict']['what']}" if said else "no verdict"))
        bench.save()
    return c
