"""bench/run ycsb: what the benchmark harness itself costs, and the highest rate it sustains here.

Creates a small tenant whose data lives in memory (tmpfs), loads it with the
`slacker` workload (10-operation transactions, 85% reads / 15% updates), then:

0. per driver: one connection running transactions back to back, client
   CPU per operation (the driver's own cost);
1. per driver (mysqlclient, PyMySQL): a fixed-rate run, reporting operations
   per CPU-second of the harness process (time.process_time over the run, all
   threads) and the tenant's own CPU use;
2. per driver: the highest offered rate with achieved >= 99% of offered,
   found by doubling and then bisecting, each probe a full open-loop run;
3. the harness without a database (simulated driver, zero service time): the
   ceiling of its own machinery (arrivals, queue, planning, accounting).

The tenant is removed at the end. Prints a table; --json FILE keeps the numbers.

    bench/run ycsb                      # about 5 minutes (uses .venv/bin/python by itself)
    bench/run ycsb --quick              # about 1 minute, rougher numbers
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from slacker.client import Endpoint
from slacker.tenants import TenantManager
from slacker.ycsb import LoadConfig, RunConfig, TenantTarget, load_table, load_workload, run_benchmark
from slacker.ycsb.simulated import SimulatedDriver, SimulatedServer
from benchkit.host import cpu_s

PORT_RANGE = (43306, 44305)




def probe(ep: Endpoint | None, wl, rate: float, duration_s: float, driver: str, seed: int,
          sim: SimulatedServer | None = None, mariadbd_pid: int | None = None) -> dict:
    target = TenantTarget.fixed(ep or Endpoint("sim", "sim", 0, "app", ""), rate, "bench")
    cfg = RunConfig([target], wl, mpl=10, duration_s=duration_s, seed=seed, driver=driver, drain_timeout_s=2.0,
                    driver_factory=(lambda: SimulatedDriver(sim)) if sim is not None else None)
    server0 = cpu_s(mariadbd_pid) if mariadbd_pid else float("nan")
    res = run_benchmark(cfg)
    server_cpu = cpu_s(mariadbd_pid) - server0 if mariadbd_pid else float("nan")
    t = res.tenants[0]
    return {
        "driver": driver if sim is None else "simulated", "rate_tps": rate, "duration_s": res.duration_s,
        "offered_tps": round(t.offered_tps, 1), "achieved_tps": round(t.achieved_tps, 1),
        "sustained": t.sustained, "queue_max": t.queue_max, "queue_at_end": t.queue_at_end,
        "p50_ms": _ms(t.latency.p50_s), "p99_ms": _ms(t.latency.p99_s), "max_ms": _ms(t.latency.max_s),
        "operations": res.operations_total, "harness_cpu_s": res.harness_cpu_s,
        "ops_per_cpu_s": round(res.ops_per_cpu_s or 0), "harness_cores": round(res.harness_cpu_s / res.elapsed_s, 3),
        "tenant_cpu_s": round(server_cpu, 2), "tenant_cores": round(server_cpu / res.elapsed_s, 3),
        "failures": t.failures,
    }


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000, 2)


def closed_loop_cost(ep: Endpoint, wl, driver: str, transactions: int) -> dict:
    """One connection, transactions back to back: client CPU per operation, no threads, no queue."""
    import random

    from slacker.loads import choose
    from slacker.ycsb.driver import get_driver
    from slacker.ycsb.properties import DEFAULT_DATABASE
    from slacker.ycsb.workload import SharedKeys, TransactionPlanner

    planner = TransactionPlanner(wl, SharedKeys.for_run(wl), random.Random(1))
    plans = [planner.plan() for _ in range(transactions)]
    d = get_driver(driver)
    conn = d.connect(ep, wl.database)
    db = choose(wl.database, d.session_database(conn), DEFAULT_DATABASE)  # as the harness decides (slacker/loads.py)
    if db.create:
        d.execute(conn, f"USE {db.quoted}")
    run = d.transaction_runner(conn)
    run(plans[0].statements)  # warm up
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for plan in plans:
        run(plan.statements)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    d.close(conn)
    ops = sum(p.operations for p in plans)
    return {"driver": driver, "transactions": transactions, "operations": ops,
            "client_cpu_us_per_op": round(cpu / ops * 1e6, 1), "wall_us_per_op": round(wall / ops * 1e6, 1),
            "ops_per_cpu_s": round(ops / cpu)}


def max_sustained(run, start: float, steps: int, settle_s: float) -> tuple[float, list[dict]]:
    """Double from `start` until a probe is not sustained, then bisect `steps` times.

    A probe that falls short is repeated once after a longer pause (an overloaded
    probe leaves the server busy for a moment, and other load on the machine
    comes and goes); the rate counts as sustained if either try was.
    """
    probes: list[dict] = []

    def ok(rate: float) -> bool:
        for attempt in range(2):
            p = run(rate)
            probes.append(p)
            _say(p)
            time.sleep(settle_s * (1 if p["sustained"] else 3))
            if p["sustained"]:
                return True
        return False

    good, bad = 0.0, None
    rate = start
    while bad is None:
        if ok(rate):
            good, rate = rate, rate * 2
        else:
            bad = rate
    for _ in range(steps):
        rate = round((good + bad) / 2, 1)
        if ok(rate):
            good = rate
        else:
            bad = rate
    return good, probes


def _say(p: dict) -> None:
    print(f"  {p['driver']:<11} rate {p['rate_tps']:>8.1f}  offered {p['offered_tps']:>8.1f}  achieved "
          f"{p['achieved_tps']:>8.1f}  {'ok ' if p['sustained'] else 'NOT'}  p99 {p['p99_ms']} ms  "
          f"harness {p['ops_per_cpu_s']:>7,} ops/CPU-s ({p['harness_cores']:.2f} cores)  tenant "
          f"{p['tenant_cores']:.2f} cores", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000, help="rows in the table (default 100000, ~100 MB)")
    ap.add_argument("--rate", type=float, default=200.0, help="fixed rate for the cost runs, txn/s (default 200)")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per fixed-rate run (default 15)")
    ap.add_argument("--probe-duration", type=float, default=10.0, help="seconds per search probe (default 10)")
    ap.add_argument("--bisect", type=int, default=4, help="bisection steps after doubling (default 4)")
    ap.add_argument("--drivers", default="mysqlclient,pymysql")
    ap.add_argument("--data-root", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp",
                    help="where the tenant's temp dir goes (default /dev/shm: in memory)")
    ap.add_argument("--json", dest="json_path", default=None, help="write the figures here")
    ap.add_argument("--quick", action="store_true", help="short runs and fewer probes")
    args = ap.parse_args()
    if args.quick:
        args.records, args.duration, args.probe_duration, args.bisect = 20_000, 6.0, 4.0, 2
    drivers = [d for d in args.drivers.split(",") if d]

    root = Path(tempfile.mkdtemp(prefix="sl-bench-", dir=args.data_root))
    mgr = TenantManager(root, host="127.0.0.1", node="bench", port_range=PORT_RANGE)
    report: dict = {
        "command": " ".join(["bench/run ycsb", *sys.argv[1:]]),
        "machine": subprocess.run(["uname", "-a"], capture_output=True, text=True).stdout.strip(),
        "cpus": os.cpu_count(), "python": platform.python_version(), "data_root": str(root),
        "records": args.records, "loadavg_start": os.getloadavg(),
    }
    print(f"machine: {report['machine']} ({report['cpus']} CPUs), Python {report['python']}, "
          f"load average {report['loadavg_start'][0]:.2f}")
    try:
        t0 = time.monotonic()
        tenant = mgr.create("ybench")
        print(f"tenant ybench on 127.0.0.1:{tenant.port}, data in {root} (created in {time.monotonic() - t0:.1f}s)")
        ep = Endpoint("ybench", tenant.host, tenant.port, "app", tenant.app_password())
        wl = load_workload(["slacker"], {"recordcount": args.records})
        loaded = load_table(LoadConfig(ep, wl, threads=4))
        report["load"] = {"rows": loaded.rows, "seconds": loaded.elapsed_s, "rows_per_s": round(loaded.rows_per_s)}
        print(f"loaded {loaded.rows:,} rows in {loaded.elapsed_s:.1f}s ({loaded.rows_per_s:,.0f} rows/s)")
        pid = tenant.pid()

        print("\n0. client cost per operation: one connection, closed loop (no harness threads or queue)")
        report["closed_loop"] = []
        for d in drivers:
            c = closed_loop_cost(ep, wl, d, 300 if args.quick else 1000)
            report["closed_loop"].append(c)
            print(f"  {d:<11} {c['client_cpu_us_per_op']:>6} us CPU/op, {c['wall_us_per_op']:>6} us wall/op, "
                  f"{c['ops_per_cpu_s']:>7,} ops/CPU-s")

        print(f"\n1. harness cost at a fixed {args.rate:g} txn/s for {args.duration:g}s (10 operations per txn)")
        report["fixed_rate"] = []
        for d in drivers:
            p = probe(ep, wl, args.rate, args.duration, d, seed=1, mariadbd_pid=pid)
            _say(p)
            report["fixed_rate"].append(p)
            time.sleep(1)

        print(f"\n2. highest offered rate with achieved >= 99% of offered ({args.probe_duration:g}s probes)")
        report["max_sustained"] = {}
        for d in drivers:
            best, probes = max_sustained(
                lambda r, d=d: probe(ep, wl, r, args.probe_duration, d, seed=2, mariadbd_pid=pid),
                start=100.0, steps=args.bisect, settle_s=2.0)
            report["max_sustained"][d] = {"rate_tps": best, "operations_per_s": best * 10, "probes": probes}
            print(f"  -> {d}: {best:g} txn/s ({best * 10:,.0f} operations/s)")

        print("\n3. the harness alone: simulated database with zero service time")
        sim = SimulatedServer()
        best, probes = max_sustained(lambda r: probe(None, wl, r, args.probe_duration, "mysqlclient", seed=3, sim=sim),
                                     start=1000.0, steps=args.bisect, settle_s=0.5)
        report["harness_only"] = {"rate_tps": best, "operations_per_s": best * 10, "probes": probes}
        print(f"  -> {best:g} txn/s ({best * 10:,.0f} operations/s)")
    finally:
        for t in mgr.list():
            mgr.kill_tenant(t)
        shutil.rmtree(root, ignore_errors=True)

    report["loadavg_end"] = os.getloadavg()
    print("\nsummary")
    for c in report["closed_loop"]:
        print(f"  {c['driver']:<11} {c['client_cpu_us_per_op']} us of client CPU per operation (one connection, "
              f"closed loop)")
    for p in report["fixed_rate"]:
        print(f"  {p['driver']:<11} {p['ops_per_cpu_s']:>8,} operations per harness CPU-second at {p['rate_tps']:g} "
              f"txn/s (p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms)")
    for d, m in report["max_sustained"].items():
        print(f"  {d:<11} sustains {m['rate_tps']:g} txn/s against the in-memory tenant")
    print(f"  harness alone sustains {report['harness_only']['rate_tps']:g} txn/s")
    print(f"  load average at start {report['loadavg_start'][0]:.2f}, at end {report['loadavg_end'][0]:.2f} "
          f"(other work on the machine skews these numbers)")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2))
        print(f"figures written to {args.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
