"""The figures at one size: `slacker status` and `tenant create` as a user runs them, logins through
the router, and over a window of the light load: the agents', etcd's and the router's CPU, memory and
threads, etcd's requests and watchers (from its /metrics)."""

from __future__ import annotations

import os
import platform
import random
import statistics
import subprocess
import sys
import time
import urllib.request

from .cluster import ScaleCluster, cpu_seconds, memory_mib, threads


def cli(cluster: ScaleCluster, *args: str, timeout_s: float = 300) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "slacker", "--cluster", str(cluster.path), *args],
                       capture_output=True, text=True, timeout=timeout_s)
    return time.monotonic() - t0, r


def create(cluster: ScaleCluster, tenant: str) -> float:
    dt, r = cli(cluster, "tenant", "create", tenant, "--json")
    if r.returncode != 0:
        raise RuntimeError(f"tenant create {tenant}: {r.stderr.strip()}")
    return dt


def create_on(cluster: ScaleCluster, tenant: str, node: str) -> float:
    dt, r = cli(cluster, "tenant", "create", tenant, "--on", node, "--json")
    if r.returncode != 0:
        raise RuntimeError(f"tenant create {tenant} --on {node}: {r.stderr.strip()}")
    return dt


def cli_ok(cluster: ScaleCluster, *args: str) -> tuple[float, str]:
    """A command's wall time and output; it must succeed."""
    dt, r = cli(cluster, *args)
    if r.returncode != 0:
        raise RuntimeError(f"slacker {' '.join(args)}: {r.stderr.strip()}")
    return dt, r.stdout


def cli_start_times(cluster: ScaleCluster, repeats: int) -> list[float]:
    """`slacker --version`: Python and the CLI starting, what every command pays before its own work."""
    return [cli(cluster, "--version")[0] for _ in range(repeats)]


def status_api_times(cluster: ScaleCluster, repeats: int) -> list[float]:
    """What `slacker status` waits for after the CLI has started: every agent's GET /v1/status, one after
    another as the CLI asks them, from a client already running."""
    from slacker.agent.client import cluster_clients
    from slacker.config import load_cluster
    agents, _ = cluster_clients(load_cluster(str(cluster.path)))
    out = []
    for _ in range(repeats):
        t0 = time.monotonic()
        for agent in agents.values():
            agent.request("GET", "/v1/status", timeout_s=60)
        out.append(time.monotonic() - t0)
    return out


def status_times(cluster: ScaleCluster, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        dt, r = cli(cluster, "status", "--json")
        if r.returncode != 0:
            raise RuntimeError(f"status: {r.stderr.strip()}")
        out.append(dt)
    return out


def login_times(load, tenants: list[str], n: int, seed: int = 1) -> list[float]:
    """Connect through the router (handshake, the router's lookup, the tenant's authentication) and run
    one statement, to tenants picked at random."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = rng.choice(tenants)
        t0 = time.perf_counter()
        conn = load.connect(t)
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
        out.append(time.perf_counter() - t0)
        conn.close()
    return out


def etcd_metrics(endpoints: list[str]) -> dict[str, float]:
    """Sums over the members of the series we read (requests handled, watchers, watch streams, keys)."""
    want = ("grpc_server_handled_total", "etcd_debugging_mvcc_watcher_total",
            "etcd_debugging_mvcc_watch_stream_total", "etcd_debugging_mvcc_keys_total",
            "etcd_mvcc_range_total", "etcd_mvcc_put_total", "etcd_mvcc_txn_total")
    out = {w: 0.0 for w in want}
    for ep in endpoints:
        try:
            with urllib.request.urlopen(f"{ep}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


def window(cluster: ScaleCluster, seconds: float) -> dict:
    """CPU s/s of the agents, etcd and the router over `seconds`, etcd's request rate over it, and the
    memory and threads at its end."""
    agents, etcd, router = cluster.agent_pids(), cluster.etcd_pids(), cluster.router_pids()
    c0 = {p: cpu_seconds(p) for p in agents + etcd + router}
    m0 = etcd_metrics(cluster.etcd_endpoints())
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    c1 = {p: cpu_seconds(p) for p in c0}
    m1 = etcd_metrics(cluster.etcd_endpoints())
    rate = lambda pids: sum(max(0.0, c1[p] - c0[p]) for p in pids) / dt  # noqa: E731
    rmem = [memory_mib(p) for p in router]
    return {
        "seconds": dt,
        "agent_cpu_s_per_s": rate(agents), "agent_cpu_per_node": [rate([p]) for p in agents],
        "agent_rss_mib": sum(memory_mib(p)["rss"] for p in agents), "agent_threads": sum(threads(p) for p in agents),
        "etcd_cpu_s_per_s": rate(etcd), "etcd_rss_mib": sum(memory_mib(p)["rss"] for p in etcd),
        "router_cpu_s_per_s": rate(router), "router_rss_mib": sum(m["rss"] for m in rmem),
        "router_pss_mib": sum(m["pss"] for m in rmem), "router_threads": sum(threads(p) for p in router),
        "etcd_requests_per_s": (m1["grpc_server_handled_total"] - m0["grpc_server_handled_total"]) / dt,
        "etcd_ranges_per_s": (m1["etcd_mvcc_range_total"] - m0["etcd_mvcc_range_total"]) / dt,
        "etcd_watchers": m1["etcd_debugging_mvcc_watcher_total"],
        "etcd_watch_streams": m1["etcd_debugging_mvcc_watch_stream_total"],
        "etcd_keys": m1["etcd_debugging_mvcc_keys_total"],
    }


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def sizes_and_machine(ap, args) -> tuple[list[int], str]:
    """--sizes checked (ascending, positive) and --nodes (etcd needs three), and the machine line both modes print."""
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(sizes) or sizes[0] < 1:
        ap.error("--sizes must be ascending positive counts")
    if args.nodes < 3:
        ap.error("--nodes must be at least 3 (the etcd directory runs on the first three node addresses)")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return sizes, f"{platform.node()} {os.cpu_count()} cores, {memory:.0f} GiB, {platform.platform()}"
