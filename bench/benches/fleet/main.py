"""`node drain` of one node under load: the shared latency budget against one move at a time.
Also two moves off one source with one controller against two.

Builds its own cluster: --nodes network-namespace nodes on a three-member etcd and a router; --drained
tenants of --records 1 KB rows on node-1 and the rest of --tenants spread over the other nodes; every
tenant under the harness (`slacker ycsb run`, --ycsb-rate txn/s each), acknowledged writers through the
router on the drained tenants and sysbench-style OLTP (slacker/oltp.py) on --oltp of them. The drain's
--sla is node-1's latency before, times --sla-factor. Each repeat (order rotated): the drain split fair,
smallest-first, and one move at a time (each followed by moving the tenants back), then two moves off
node-1 sharing its budget and with a controller each. Prints medians [min-max] and paired ratios; writes
--out (raw data) and --plot. Needs root (namespaces).

    bench/run fleet                                   # the full size of the issue
    bench/run fleet --nodes 4 --tenants 8 --drained 4 --records 20000   # a small machine
"""


from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from .cluster import Fleet, slacker
from .report import plot, summary, table
from benchkit.host import machine

from .runs import DRAIN_VARIANTS, baseline_latency, drain_once, interrupted_once, move_back, pair_once, settle


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="bench/run fleet", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--tenants", type=int, default=40, help="tenants in all (the drained ones included)")
    ap.add_argument("--drained", type=int, default=8, help="tenants on node-1, the node drained")
    ap.add_argument("--records", type=int, default=250_000,
                    help="1 KB YCSB rows per drained tenant (250000: about 2 GB on node-1 with --drained 8)")
    ap.add_argument("--other-records", type=int, default=5000, help="rows per tenant of the other nodes")
    ap.add_argument("--ycsb-rate", type=float, default=20.0, help="offered txn/s per tenant (the harness)")
    ap.add_argument("--other-rate", type=float, default=None,
                    help="offered txn/s per tenant of the other nodes (default: --ycsb-rate); forty tenants at 10 "
                         "txn/s each are 1.5 cores of mariadbd and 0.6 of harness, more than a 2-core machine has")
    ap.add_argument("--oltp", type=int, default=2, help="drained tenants that also run OLTP through the router")
    ap.add_argument("--sla-factor", type=float, default=1.5,
                    help="--sla of the drains: node-1's latency measured before, times this")
    ap.add_argument("--max-parallel", type=int, default=0,
                    help="the shared drains' cap on moves at once (0: the number drained, the budget decides)")
    ap.add_argument("--pair-sla-factor", type=float, default=1.5,
                    help="the two-moves setpoint: node-1's latency measured before, times this (it must bind)")
    ap.add_argument("--settle", type=float, default=90.0,
                    help="seconds the loads run before node-1's latency is measured (loading forty tenants leaves "
                         "the machine busy for a minute: a baseline taken then sets a setpoint that never binds)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu-per-node", type=float, default=None,
                    help="each node's CPU quota (cluster up --cpu-per-node): copies and queries then share a "
                         "node's cores, so its latency rises with the copy rate and the setpoint binds")
    ap.add_argument("--latency-terms", choices=["router", "server"], default="router",
                    help="how node-1's latency (at rest, the SLA from it, latency/setpoint) is read: as the routed "
                         "clients saw it (what a migration's default source reads for a tenant reached through a "
                         "router) or the servers' own (performance_schema, the agents' windows)")
    ap.add_argument("--only", choices=["drain", "pair", "interrupted"], default=None,
                    help="one experiment (default: the drains and the pairs each repeat, then the interrupted drain once)")
    ap.add_argument("--report", nargs="+", metavar="JSON", default=None,
                    help="run nothing: merge these data files (drains and pairs) and print the table and --plot")
    ap.add_argument("--out", default="docs/data/fleet.json")
    ap.add_argument("--plot", default="docs/img/fleet.png")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    from benchkit.writers import RoutedWriter
    from slacker import oltp as oltp_mod
    from slacker.client import resolve

    args = parse(argv)
    if args.report:
        docs = [json.loads(Path(p).read_text()) for p in args.report]
        # A file from an `--only pair` run, if given, is where the pairs come from (a later, dedicated run).
        pair_docs = [x for x in docs if "--only pair" in x["meta"].get("command", "")] or docs
        doc = dict(docs[0], drains=[d for x in docs for d in x["drains"]],
                   pairs=[p for x in pair_docs for p in x["pairs"]],
                   interrupted=[d for x in docs for d in x.get("interrupted", [])])
        plot(doc, args.plot)
        print(table(doc))
        return
    run_dir = Path(tempfile.mkdtemp(prefix="sl-fleet-bench-", dir="/tmp"))
    fleet = Fleet(run_dir, args.nodes, cpu_per_node=args.cpu_per_node, latency_terms=args.latency_terms)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        nodes = fleet.nodes()
        drained = [f"d{i + 1}" for i in range(args.drained)]
        others = [f"o{i + 1}" for i in range(max(0, args.tenants - args.drained))]
        layout = {t: "node-1" for t in drained}
        layout.update({t: nodes[1 + i % (len(nodes) - 1)] for i, t in enumerate(others)})
        t0 = time.monotonic()
        errors = []

        def make(t):
            try:
                fleet.create(t, layout[t], args.records if t in drained else args.other_records)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{t}: {exc}")
        threads = [threading.Thread(target=make, args=(t,)) for t in layout]
        for i in range(0, len(threads), 4):  # four at a time: the machine is small
            for th in threads[i:i + 4]:
                th.start()
            for th in threads[i:i + 4]:
                th.join()
        if errors:
            raise RuntimeError("; ".join(errors))
        print(f"{len(layout)} tenants created and loaded in {time.monotonic() - t0:.0f}s", flush=True)
        other_rate = args.ycsb_rate if args.other_rate is None else args.other_rate
        for group, records, rate in ((drained, args.records, args.ycsb_rate),
                                     (others, args.other_records, other_rate)):
            for i in range(0, len(group), 10):
                if group[i:i + 10]:
                    fleet.ycsb(group[i:i + 10], records, rate)
        writers = {t: RoutedWriter(fleet.listen, t, resolve(t, fleet.cluster).password, rate_per_s=10).start()
                   for t in drained}
        oltp = {t: fleet.oltp(t) for t in drained[:args.oltp]}
        time.sleep(args.settle)
        stats = fleet.agents["node-1"].request("GET", "/v1/tenant-stats")
        drained_bytes = sum(int(h[-1].get("data_bytes") or 0) for h in (stats.get("history") or {}).values() if h)
        base = baseline_latency(fleet, "node-1", seconds=20)
        sla = base * args.sla_factor
        print(f"node-1: {drained_bytes / 1e6:.0f} MB in {len(drained)} tenants, latency ({args.latency_terms}) {base * 1000:.1f} ms "
              f"before; --sla {sla * 1000:.1f} ms", flush=True)
        doc = {"meta": {"started": started, "nodes": args.nodes, "tenants": len(layout), "drained": len(drained),
                        "drained_bytes": drained_bytes, "records": args.records, "repeats": args.repeats,
                        "ycsb_rate": args.ycsb_rate, "other_rate": args.other_rate, "max_parallel": args.max_parallel, "oltp": args.oltp,
                        "cpu_per_node": args.cpu_per_node, "machine": machine(), "baseline_latency_s": base, "sla_s": sla,
                        "latency_terms": args.latency_terms,
                        "command": "bench/run fleet " + " ".join(argv or __import__("sys").argv[1:])},
               "drains": [], "pairs": [], "interrupted": [], "lost_acks": None, "oltp_check": None}
        variants = list(DRAIN_VARIANTS)

        def save() -> None:
            """After every run: a bench stopped half-way still leaves what it measured."""
            doc["summary"] = summary(doc)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(doc, indent=1, default=str))

        for r in range(args.repeats):
            if args.only in (None, "drain"):
                order = variants[r % 3:] + variants[:r % 3]  # rotated each repeat
                for v in order:
                    waited = settle(fleet, "node-1", base)
                    d = drain_once(fleet, "node-1", v, sla, drained, writers, oltp, args.max_parallel)
                    d["repeat"], d["settled_after_s"] = r, waited
                    doc["drains"].append(d)
                    save()
                    if d["outcome"] == "interrupted":  # the drain took the Ctrl-C meant for the bench
                        raise KeyboardInterrupt
                    print(f"repeat {r} {v}: {d['outcome']} in {d['drain_s']:.1f}s, latency/setpoint "
                          f"{d['latency_over_setpoint']}, failed requests {d['failed_requests']}", flush=True)
                    move_back(fleet, "node-1", drained)
            if args.only in (None, "pair"):
                for b in (["fair", "own"] if r % 2 == 0 else ["own", "fair"]):
                    waited = settle(fleet, "node-1", base)
                    p = pair_once(fleet, "node-1", b, base * args.pair_sla_factor, drained[:2], nodes[1:3])
                    p["repeat"], p["settled_after_s"] = r, waited
                    doc["pairs"].append(p)
                    save()
                    print(f"repeat {r} pair {b}: latency/setpoint {p['latency_over_setpoint']} over "
                          f"{p['seconds_both_copying']}s", flush=True)
                    move_back(fleet, "node-1", drained)
        if args.only in (None, "interrupted"):
            settle(fleet, "node-1", base)
            d = interrupted_once(fleet, "node-1", sla, drained, writers, oltp, args.max_parallel or len(drained))
            doc["interrupted"].append(d)
            save()
            print(f"interrupted drain: {d['outcome']} in {d['drain_s']:.1f}s, runs {[r['rc'] for r in d['runs']]}, "
                  f"each moved once {d['moved_once']}, failed requests {d['failed_requests']}", flush=True)
            move_back(fleet, "node-1", drained)
        lost = {t: sorted(w.stop_and_check()) for t, w in writers.items()}
        doc["lost_acks"] = sum(len(v) for v in lost.values())
        checks = {}
        for t, load in oltp.items():
            load.stop()
            conn = fleet_conn(fleet, t)
            c = oltp_mod.check(conn, load.acked, load.failed)
            conn.close()
            checks[t] = {"ok": c.ok, "transfers": c.transfers, "missing_acked": len(c.missing_acked)}
        doc["oltp_check"] = checks
        doc["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        save()
        plot(doc, args.plot)
        print(table(doc))
    finally:
        fleet.close()


def fleet_conn(fleet, tenant):
    from .cluster import RouterClient
    from slacker.client import resolve

    c = RouterClient(fleet.listen, tenant, resolve(tenant, fleet.cluster).password)
    conn = c.connection()
    conn.autocommit(True)
    return conn
