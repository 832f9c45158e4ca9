"""bench/run density: 10, 100 and 1,000 idle shared tenants on one node, and what each one costs the host.

A local one-node cluster with a router (loopback, temp dir). node-1's shared server grows to each of --sizes
shared tenants, each a database with its own account and --tables small InnoDB tables (made through the
router as app@TENANT). At each size, every tenant idle:

- the host's memory per tenant: Pss of the shared server and of the agent, summed and divided by the count
  (a whole-server tenant costs 37 MiB Pss idle: docs/results.md, "A lean tenant");
- `tenant create --shared` for the last --timed tenants to reach the size, one at a time: as a user runs it
  (the CLI, wall time) and the agent's own part (POST /v1/tenants from a client already running); the
  node's first shared tenant, whose create also starts the shared server, is not timed;
- a login through the router as app@TENANT and `SELECT 1`, --logins times to tenants picked at random;
- over --window-s: the agent's and the shared server's CPU s/s;
- the agent's /metrics: series and bytes, and the scrape's time (median of --scrapes).

Every figure is printed beside its ratio to the smallest size. The tenants before the timed ones are made
--parallel at a time through the agent's API (untimed).

    bench/run density [--sizes 10,100,1000] [--json docs/data/density.json] [--plot docs/img/density.png]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymysql

from benches.scale.cluster import cpu_seconds, free_port, memory_mib
from benches.scale.measure import login_times

from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.config import load_cluster
from slacker.procs import read_pid
from slacker.router import local as local_router


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


class Node:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        first = "127.0.0.2"
        self.path = local_cluster.up(run_dir, nodes=1, first_address=first, api_port=free_port(first),
                                     port_range="20000-20999")
        self.cluster = load_cluster(str(self.path))
        local_router.start(run_dir, self.path, "127.0.0.1:0")
        host, port = local_router.listening(run_dir).rsplit(":", 1)
        self.router = (host, int(port))
        self.agents, self.directory = cluster_clients(self.cluster)
        self.agent = self.agents["node-1"]
        self.passwords: dict[str, str] = {}

    def down(self) -> None:
        try:
            local_router.stop(self.run_dir)
        finally:
            local_cluster.down(self.run_dir, purge=True)

    def pids(self) -> tuple[int | None, int | None]:
        n1 = self.run_dir / "node-1"
        return read_pid(n1 / "agent.pid"), read_pid(n1 / "shared" / "run" / "mariadbd.pid")

    def create_api(self, tid: str) -> float:
        t0 = time.perf_counter()
        self.agent.request("POST", "/v1/tenants", {"id": tid, "kind": "shared"}, timeout_s=180)
        return time.perf_counter() - t0

    def create_cli(self, tid: str) -> float:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "slacker", "--cluster", str(self.path), "tenant", "create", tid,
                            "--shared", "--on", "node-1", "--json"], capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"tenant create {tid}: {r.stderr.strip()}")
        return time.perf_counter() - t0

    def connect(self, tid: str, wait_s: float = 15.0):
        if tid not in self.passwords:
            self.passwords[tid] = self.agent.request("GET", f"/v1/tenants/{tid}/credentials")["password"]
        deadline = time.monotonic() + wait_s
        while True:  # the router learns a new tenant at its next listing of the directory
            try:
                return pymysql.connect(host=self.router[0], port=self.router[1], user=f"app@{tid}",
                                       password=self.passwords[tid], autocommit=True, connect_timeout=10,
                                       read_timeout=30)
            except pymysql.err.OperationalError as exc:
                if "in the directory" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def fill(self, tid: str, tables: int) -> None:
        conn = self.connect(tid)
        try:
            with conn.cursor() as cur:
                for i in range(tables):
                    cur.execute(f"CREATE TABLE IF NOT EXISTS t{i} (id INT PRIMARY KEY, v VARCHAR(64), "
                                f"KEY (v)) ENGINE=InnoDB")
                    cur.execute(f"INSERT IGNORE INTO t{i} VALUES " + ",".join(f"({k}, 'v{k}')" for k in range(20)))
        finally:
            conn.close()


def scrape(node: Node) -> tuple[float, int, int]:
    spec = node.cluster.node("node-1")
    req = urllib.request.Request(f"{spec.url}/metrics", headers={"Authorization": f"Bearer {node.cluster.token()}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    dt = time.perf_counter() - t0
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    return dt, series, len(body)


def measure(node: Node, size: int, made: list[str], timed: int, args) -> dict:
    todo = [f"d{i:05d}" for i in range(len(made), size)]
    # The node's first shared tenant also makes and starts the shared server: made untimed.
    first = 1 if not made else 0
    cut = max(first, len(todo) - timed)
    untimed, timed_ids = todo[:cut], todo[cut:]
    t0 = time.monotonic()
    with ThreadPoolExecutor(args.parallel) as pool:
        for tid in pool.map(lambda t: (node.create_api(t), t)[1], untimed):
            made.append(tid)
    cli_s, api_s = [], []
    for i, tid in enumerate(timed_ids):  # alternately by the CLI and the API, one at a time
        (cli_s if i % 2 == 0 else api_s).append(node.create_cli(tid) if i % 2 == 0 else node.create_api(tid))
        made.append(tid)
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda t: node.fill(t, args.tables), todo))
    print(f"  {size}: {len(todo)} made and filled in {time.monotonic() - t0:.0f}s", flush=True)
    time.sleep(args.settle_s)
    logins = login_times(node, made, args.logins, seed=size)
    agent, server = node.pids()
    c0 = {p: cpu_seconds(p) for p in (agent, server)}
    w0 = time.monotonic()
    time.sleep(args.window_s)
    span = time.monotonic() - w0
    cpu = {p: (cpu_seconds(p) - c0[p]) / span for p in c0}
    scrapes = [scrape(node) for _ in range(args.scrapes)]
    mem_agent, mem_server = memory_mib(agent), memory_mib(server)
    return {
        "size": size, "tenants": len(made),
        "pss_mib": {"agent": mem_agent["pss"], "shared_server": mem_server["pss"]},
        "pss_per_tenant_mib": (mem_agent["pss"] + mem_server["pss"]) / len(made),
        "create_cli_s": cli_s, "create_api_s": api_s, "login_s": logins,
        "agent_cpu_s_per_s": cpu[agent], "server_cpu_s_per_s": cpu[server],
        "scrape_s": [s[0] for s in scrapes], "series": scrapes[-1][1], "metrics_bytes": scrapes[-1][2],
    }


def row(r: dict) -> dict:
    return {"p50 create (CLI)": statistics.median(r["create_cli_s"]), "p99 create (CLI)": pct(r["create_cli_s"], 99),
            "p50 create (API)": statistics.median(r["create_api_s"]), "p99 create (API)": pct(r["create_api_s"], 99),
            "p50 login": statistics.median(r["login_s"]), "p99 login": pct(r["login_s"], 99),
            "Pss/tenant MiB": r["pss_per_tenant_mib"], "agent CPU": r["agent_cpu_s_per_s"],
            "server CPU": r["server_cpu_s_per_s"], "series": r["series"],
            "scrape s": statistics.median(r["scrape_s"])}


def report(runs: list[dict]) -> None:
    base = row(runs[0])
    for r in runs:
        fig = row(r)
        print(f"\n{r['size']} shared tenants ({len(r['create_cli_s'])} + {len(r['create_api_s'])} creates timed; "
              f"agent {r['pss_mib']['agent']:.0f} MiB Pss, shared server "
              f"{r['pss_mib']['shared_server']:.0f} MiB Pss)")
        for k, v in fig.items():
            ratio = v / base[k] if base[k] else float("nan")
            unit = "ms" if k.endswith(("(CLI)", "(API)", "login", "scrape s")) else ""
            shown = f"{v * 1000:.1f} ms" if unit else (f"{v:.3f}" if isinstance(v, float) else str(v))
            print(f"  {k:18s} {shown:>12s}   x{ratio:.2f} the {runs[0]['size']}'s")


def plot(runs: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in runs]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].plot(sizes, [r["pss_per_tenant_mib"] for r in runs], "o-")
    ax[0].axhline(37, ls="--", c="grey")
    ax[0].text(sizes[0], 30, "a whole-server tenant: 37 MiB", fontsize=8)
    ax[0].set(xscale="log", yscale="log", xlabel="shared tenants on the node", ylabel="host Pss per tenant (MiB)")
    for k, lab in (("create_cli_s", "create (CLI) p50"), ("create_api_s", "create (API) p50")):
        ax[1].plot(sizes, [statistics.median(r[k]) * 1000 for r in runs], "o-", label=lab)
        ax[1].plot(sizes, [pct(r[k], 99) * 1000 for r in runs], "x:", label=lab.replace("p50", "p99"))
    ax[1].plot(sizes, [pct(r["login_s"], 99) * 1000 for r in runs], "s-", label="router login + SELECT 1 p99")
    ax[1].set(xscale="log", xlabel="shared tenants on the node", ylabel="ms")
    ax[1].legend(fontsize=7)
    ax[2].plot(sizes, [r["agent_cpu_s_per_s"] for r in runs], "o-", label="agent CPU s/s (idle)")
    ax[2].plot(sizes, [r["server_cpu_s_per_s"] for r in runs], "o-", label="shared server CPU s/s (idle)")
    ax[2].plot(sizes, [statistics.median(r["scrape_s"]) for r in runs], "s-", label="/metrics scrape (s)")
    ax[2].set(xscale="log", xlabel="shared tenants on the node")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,1000", help="ascending counts of shared tenants (default 10,100,1000)")
    ap.add_argument("--tables", type=int, default=4, help="small tables per tenant (default 4)")
    ap.add_argument("--timed", type=int, default=40, help="tenants timed one at a time to reach each size (half "
                                                          "by the CLI, half by the API; at most all of those "
                                                          "made for it; default 40)")
    ap.add_argument("--parallel", type=int, default=4, help="untimed creates at once (default 4)")
    ap.add_argument("--logins", type=int, default=300, help="router logins timed per size (default 300)")
    ap.add_argument("--window-s", type=float, default=30.0, help="idle CPU window per size (default 30)")
    ap.add_argument("--settle-s", type=float, default=10.0, help="idle before measuring (default 10)")
    ap.add_argument("--scrapes", type=int, default=5, help="/metrics scrapes timed per size (default 5)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--plot", help="write the figure here (PNG)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(sizes) or sizes[0] < 2:
        ap.error("--sizes must be ascending counts of at least 2")
    run_dir = Path(tempfile.mkdtemp(prefix="density-", dir="/tmp")) / "run"
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    machine = f"{platform.node()} {os.cpu_count()} cores, {memory:.0f} GiB, {platform.platform()}"
    print(f"density: {machine}", flush=True)
    node = Node(run_dir)
    runs: list[dict] = []
    made: list[str] = []
    try:
        for size in sizes:
            runs.append(measure(node, size, made, args.timed, args))
    finally:
        node.down()
    report(runs)
    doc = {"bench": "density", "machine": machine, "date": datetime.date.today().isoformat(),
           "args": vars(args), "runs": runs}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()
