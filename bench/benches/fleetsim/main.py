"""The rebalancer's planner past one machine: a simulated fleet of --nodes nodes and --tenants tenants
with skewed, shifting loads (bench/benches/fleetsim/model.py states the model) feeds the planner
(slacker/rebalance/planner.py, the same code `slacker rebalance` runs) every simulated minute.

For each --policies (none, serial, parallel; bench/benches/fleetsim/sim.py): moves per hour, the share of
node-minutes over the SLA, and the planner's time per call and per pass (a pass: every call of one
minute); against the lower bound on moves (bench/benches/fleetsim/bound.py): for every overload episode (a node
going over its SLA load), the fewest of its tenants that must leave it to end it.

    bench/run fleetsim                                   # 1000 nodes, 20000 tenants, 4 h
    bench/run fleetsim --nodes 100 --tenants 2000 --hours 2 --policies none,parallel

Pure computation (no cluster); times are of this process on this machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

from benchkit import REPO as ROOT  # noqa: E402  (the repository, wherever the bench sits)

from benches.fleetsim import plots
from benches.fleetsim.model import FleetModel
from benches.fleetsim.sim import SimOptions, run

POLICIES = ("none", "serial", "parallel")


def print_table(results: dict) -> None:
    print(f"\n| policy | moves/h | of them for latency | bound: all episodes (moves/h) | bound: episodes of 3+ min "
          f"| overload episodes/h | node-minutes over SLA | plan call (median, p95) | pass (median, max) |\n"
          f"|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for policy, res in results.items():
        s = res["summary"]
        call = "-" if s["plan_s_median"] is None else f"{s['plan_s_median']:.3f} s, {s['plan_s_p95']:.3f} s"
        pas = "-" if s["pass_s_median"] is None else f"{s['pass_s_median']:.2f} s, {s['pass_s_max']:.2f} s"
        print(f"| {policy} | {s['moves_per_hour']:.0f} | {s['sla_moves'] / s['hours']:.0f} | "
              f"{s['bound_per_hour']:.0f} | {s['persistent_bound_per_hour']:.0f} | {s['episodes_per_hour']:.0f} | {s['over_sla_fraction']:.2%} | {call} | "
              f"{pas} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=20000)
    ap.add_argument("--hours", type=float, default=4.0, help="simulated hours (default 4)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated: " + ", ".join(POLICIES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sigma", type=float, default=FleetModel.sigma, help="spread of tenants' base loads")
    ap.add_argument("--utilisation", type=float, default=FleetModel.utilisation, help="fleet's mean utilisation")
    ap.add_argument("--bursts-per-day", type=float, default=FleetModel.bursts_per_day)
    ap.add_argument("--max-moves-per-pass", type=int, default=1000, help="parallel policy's cap per minute")
    ap.add_argument("--out", help="write the summaries and per-minute records as JSON here")
    ap.add_argument("--plot", help="write a PNG plot here")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="only combine the results of earlier runs (one policy each, same fleet) into --out/--plot")
    args = ap.parse_args()
    if args.merge:
        docs = [json.loads(Path(f).read_text()) for f in args.merge]
        doc = dict(docs[0])
        doc["results"] = {k: v for d in docs for k, v in d["results"].items()}
        doc["argv"] = [d["argv"] for d in docs]
        if any(d["model"] != doc["model"] for d in docs):
            ap.error("the runs to merge simulated different fleets")
        print_table(doc["results"])
        if args.out:
            Path(args.out).write_text(json.dumps(doc) + "\n")
        if args.plot:
            plots.fleet(doc, args.plot)
        return
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            ap.error(f"unknown policy {p!r}: expected {', '.join(POLICIES)}")
    model = FleetModel(nodes=args.nodes, tenants=args.tenants, seed=args.seed, sigma=args.sigma,
                       utilisation=args.utilisation, bursts_per_day=args.bursts_per_day)
    machine = f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    print(f"machine: {machine}")
    print(f"fleet: {model.nodes} nodes x {model.capacity:g} CPU s/s, {model.tenants} tenants, mean utilisation "
          f"{model.utilisation:.0%}, SLA {model.sla_s * 1000:.0f} ms at {model.sla_utilisation:.0%}; "
          f"{args.hours:g} h simulated")
    results = {}
    for policy in policies:
        t0 = time.monotonic()
        res = run(model, SimOptions(policy=policy, minutes=int(args.hours * 60),
                                    max_moves_per_pass=args.max_moves_per_pass),
                  progress=lambda r, p=policy: print(
                      f"  {p} minute {r['minute']}: {r['over_sla']} nodes over the SLA, {r['hot']} hot, "
                      f"{r['moves']} moves, pass {r['plan_s']:.2f} s", flush=True))
        res["summary"]["wall_s"] = time.monotonic() - t0
        results[policy] = res
    print_table(results)
    doc = {"machine": machine, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "argv": sys.argv[1:], "model": model.describe(), "settings": SimOptions().settings.to_dict(),
           "results": results}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc) + "\n")
    if args.plot:
        plots.fleet(doc, args.plot)


if __name__ == "__main__":
    main()
