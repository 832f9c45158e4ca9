"""Measured scale on one machine: a local cluster of --nodes agents with a three-member etcd directory and
the router in front grows to each of --sizes tenants (lean defaults, placed by `tenant create` itself);
at each size, with every tenant idle and then under a light load (one client per tenant through the
router, a short read-write transaction every --period-s), it measures:

- `tenant create` as a user runs it (the CLI, wall time), for the last --timed-creates tenants created to
  reach the size, one at a time (the ones before them are created a few at a time, untimed);
- `slacker status --json` (the CLI, wall time), --status-repeats times, interleaved with as many runs of
  `slacker --version` (the CLI's own start, which every command pays), and every agent's
  `GET /v1/status` timed from this process (what `status` waits for once started);
- logins through the router (connect, the router's lookup, the tenant's authentication, SELECT 1);
- over --window-s: the agents' CPU idle and under the load, etcd's CPU, requests/s and watchers
  (its /metrics), the router's memory and threads, the tenants' memory (sum of Pss).

Each figure's growth from the smallest to the largest size is named (bench/benches/scale/report.py).
With --aliases it measures 100 to 10,000 directory entries instead (bench/benches/scale/tenk.py).

    bench/run scale --out docs/data/scale.json --plot docs/img/scale.png
    bench/run scale --sizes 4,8 --window-s 10        # a quick look

Everything it starts (agents, tenants, etcd, the router) is stopped at the end, also on failure and Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchkit import REPO as ROOT  # noqa: E402  (the repository, wherever the bench sits)

from benches.scale import measure, report
from benches.scale.cluster import ScaleCluster, memory_mib
from benches.scale.load import LightLoad

from slacker.client import resolve
from slacker.config import load_cluster
from slacker.procs import read_pid


def tenant_pids(run_dir: Path) -> list[int]:
    return [p for p in (read_pid(f) for f in run_dir.glob("node-*/tenants/*/run/mariadbd.pid")) if p is not None]


def main() -> None:
    if "--aliases" in sys.argv[1:]:
        from benches.scale import tenk
        return tenk.main()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aliases", action="store_true",
                    help="100 to 10,000 directory entries aliasing a few real tenants, one router in front: "
                         "`bench/run scale --aliases --help` (bench/benches/scale/tenk.py)")
    ap.add_argument("--sizes", default="10,40,100", help="tenant counts, ascending (default 10,40,100)")
    ap.add_argument("--nodes", type=int, default=3, help="agents (default 3; etcd runs on the first three)")
    ap.add_argument("--window-s", type=float, default=30.0, help="CPU and request-rate window (default 30)")
    ap.add_argument("--settle-s", type=float, default=10.0, help="wait before a window (default 10)")
    ap.add_argument("--status-repeats", type=int, default=5)
    ap.add_argument("--timed-creates", type=int, default=5,
                    help="the last this many tenants of each size are created one at a time and timed; the ones "
                         "before them --create-workers at a time (default 5)")
    ap.add_argument("--create-workers", type=int, default=3)
    ap.add_argument("--logins", type=int, default=30)
    ap.add_argument("--period-s", type=float, default=2.0, help="light load: one transaction per tenant per this")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--plot", help="write a PNG plot here")
    args = ap.parse_args()
    sizes, machine = measure.sizes_and_machine(ap, args)
    print(f"machine: {machine}")
    run_dir = Path(tempfile.mkdtemp(prefix="scale-", dir="/tmp"))
    block = random.Random(os.getpid()).randrange(2, 99)
    cluster = ScaleCluster(run_dir / "run", args.nodes, f"127.1.{block}.2", "40000-47999")
    levels: list[dict] = []
    load = None
    try:
        cluster.up()
        print(f"cluster: {args.nodes} nodes from {cluster.first_address}, etcd directory, router on "
              f"{cluster.router_listen}", flush=True)
        spec = load_cluster(str(cluster.path))
        created: list[str] = []
        creds: dict[str, str] = {}
        for size in sizes:
            creates = []
            before = len(created)
            bulk = [f"s{i + 1:03d}" for i in range(before, max(before, size - args.timed_creates))]
            with ThreadPoolExecutor(args.create_workers) as pool:
                list(pool.map(lambda tid: measure.create(cluster, tid), bulk))
            created += bulk
            while len(created) < size:
                tid = f"s{len(created) + 1:03d}"
                creates.append(measure.create(cluster, tid))
                created.append(tid)
            for tid in created[before:]:
                creds[tid] = resolve(tid, spec).password
            probe = LightLoad(cluster.router_listen, creds, args.period_s)
            for tid in created[before:]:
                probe.prepare(tid)
            print(f"  {size} tenants: created {size - before}, the last {len(creates)} timed (median "
                  f"{measure.median(creates):.2f} s)", flush=True)
            time.sleep(args.settle_s)
            idle = measure.window(cluster, args.window_s)
            load = LightLoad(cluster.router_listen, creds, args.period_s)
            load.start()
            time.sleep(args.settle_s)
            busy = measure.window(cluster, args.window_s)
            status = measure.status_times(cluster, args.status_repeats)
            cli_start = measure.cli_start_times(cluster, args.status_repeats)
            status_api = measure.status_api_times(cluster, args.status_repeats)
            logins = measure.login_times(load, created, args.logins, seed=size)
            done, errors = load.done, load.errors
            load.stop()
            load = None
            pss = sum(memory_mib(p)["pss"] for p in tenant_pids(cluster.run_dir))
            level = {
                "tenants": size, "created": len(creates),
                "create_s": measure.median(creates), "create_s_range": [min(creates), max(creates)],
                "status_s": measure.median(status), "status_s_range": [min(status), max(status)],
                "cli_start_s": measure.median(cli_start), "cli_start_s_range": [min(cli_start), max(cli_start)],
                "status_api_s": measure.median(status_api), "status_api_s_range": [min(status_api), max(status_api)],
                "login_s": measure.median(logins), "login_s_range": [min(logins), max(logins)],
                "agent_idle_cpu_s_per_s": idle["agent_cpu_s_per_s"], "tenant_rss_mib": pss,
                "load_transactions": done, "load_errors": errors,
                **busy, "idle": idle, "raw": {"create_s": creates, "status_s": status, "cli_start_s": cli_start, "status_api_s": status_api,
                        "login_s": logins},
            }
            levels.append(level)
            print(f"  {size} tenants: status {level['status_s']:.2f} s, login {level['login_s'] * 1000:.1f} ms, "
                  f"router {busy['router_rss_mib']:.0f} MiB / {busy['router_threads']} threads, agents "
                  f"{idle['agent_cpu_s_per_s']:.3f} CPU s/s idle, {busy['agent_cpu_s_per_s']:.3f} loaded, etcd "
                  f"{busy['etcd_requests_per_s']:.0f} req/s, {busy['etcd_watchers']:.0f} watchers, tenants "
                  f"{pss:.0f} MiB Pss; load {done} transactions, {errors} errors", flush=True)
    finally:
        if load is not None:
            load.stop()
        cluster.down()
        shutil.rmtree(run_dir, ignore_errors=True)
    print()
    print(report.table(levels))
    doc = {"machine": machine, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "params": vars(args), "levels": levels}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        report.plot(levels, args.plot)


if __name__ == "__main__":
    main()
