"""`bench/run scale --aliases`: 100 to 10,000 tenants in the directory behind one router, and what grows.

A local cluster of --nodes agents with a three-member etcd and a router in front (as `bench/run scale`),
one real tenant per node whose mariadbd the directory's aliases point at, and a real tenant `mover`
that is moved live at each size. At each of --sizes (directory entries), after registering the
aliases in etcd transactions (bench/benches/scale/aliases.py) and waiting for the router to route all of
them, it measures:

- over --window-s with the fleet idle: the router's threads and RSS (control side and data path), etcd's
  watch streams, watchers and requests/s (its /metrics, summed over the members), the agents' CPU;
- `slacker status` (the summary), `slacker status --json` and `slacker tenant list`, wall time as a user
  runs them;
- --logins logins through the router (connect as app@ALIAS, SELECT 1, close), p50 and p99;
- a directory entry written to a routed login + SELECT 1 (--routable-repeats aliases, the median), and
  one real `tenant create` returned to its first routed login + SELECT 1;
- a live move of `mover` (`slacker migrate`) under a client running SELECT 1 through the router without
  pause: the longest gap between two answers (the client-visible pause) and the errors it saw;
- with --faults, a second move with etcd's leader SIGKILLed before it and the history compacted after
  it: the same gap, and that the router routes the tenant to its new owner and keeps every entry.

    bench/run scale --aliases --sizes 100,1000,10000 --out docs/data/scale-aliases.json --plot docs/img/scale-aliases.png
    bench/run scale --aliases --sizes 100 --window-s 5 --logins 50 --faults     # a smoke run

It prints its progress and an estimate of the time left. Everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pymysql

from benches.scale import measure, report
from benches.scale.aliases import NODE, StandIn, Target, register
from benches.scale.cluster import ScaleCluster

from slacker import local_etcd
from slacker.client import resolve
from slacker.config import load_cluster
from slacker.directory import EtcdStore
from slacker.directory.etcd import _b64
from slacker.errors import SlackerError

T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {text}", flush=True)


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def router_routes(admin: str) -> int:
    with urllib.request.urlopen(f"http://{admin}/status", timeout=30) as r:
        doc = json.loads(r.read())
    return sum(1 for t in doc.get("tenants") or [] if t.get("host"))


def connect(listen: str, user: str, password: str):
    host, port = listen.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user=user, password=password, ssl_disabled=True,
                           autocommit=True, connect_timeout=10, read_timeout=30)


def login_once(listen: str, tenant: str, password: str) -> float:
    t0 = time.perf_counter()
    conn = connect(listen, f"app@{tenant}", password)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
    finally:
        conn.close()
    return time.perf_counter() - t0


def until_routable(listen: str, tenant: str, password: str, since: float, limit_s: float = 30.0) -> float:
    """Seconds from `since` (monotonic) to the first routed login + SELECT 1 that succeeds."""
    while True:
        try:
            login_once(listen, tenant, password)
            return time.monotonic() - since
        except pymysql.MySQLError:
            if time.monotonic() - since > limit_s:
                raise RuntimeError(f"{tenant} not routable {limit_s:.0f} s after it was made") from None
            time.sleep(0.002)


class Pinger:
    """SELECT 1 through the router without pause on one connection (a new one after an error): the
    times of its answers, to find the longest gap a move makes a client see."""

    def __init__(self, listen: str, tenant: str, password: str) -> None:
        self.args = (listen, f"app@{tenant}", password)
        self.answers: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pinger")

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = connect(*self.args)
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                    cur.fetchall()
                self.answers.append(time.monotonic())
            except pymysql.MySQLError as exc:
                self.errors.append(str(exc)[:200])
                conn = None
                time.sleep(0.005)
        if conn is not None:
            conn.close()

    def __enter__(self) -> "Pinger":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def longest_gap(self, start: float, end: float) -> float:
        ts = [t for t in self.answers if start <= t <= end]
        return max((b - a for a, b in zip(ts, ts[1:])), default=float("nan"))


def live_move(cluster: ScaleCluster, tenant: str, password: str, to: int) -> dict:
    """`slacker migrate TENANT --to node-TO` under a client running SELECT 1 through the router."""
    with Pinger(cluster.router_listen, tenant, password) as ping:
        time.sleep(1.0)
        t0 = time.monotonic()
        dt, r = measure.cli(cluster, "migrate", tenant, "--to", f"node-{to}", "--json", timeout_s=600)
        t1 = time.monotonic()
        time.sleep(1.0)
    try:
        result = json.loads(r.stdout).get("result")
    except ValueError:
        result = None
    if r.returncode != 0 or result != "succeeded":
        raise RuntimeError(f"migrate {tenant}: {r.stderr.strip() or r.stdout.strip()[:300]}")
    return {"pause_s": ping.longest_gap(t0, t1 + 1.0), "seconds": dt, "client_errors": len(ping.errors),
            "errors_sample": ping.errors[:3], "answers": len([t for t in ping.answers if t0 <= t <= t1])}


def served_by(listen: str, tenant: str, password: str) -> str:
    """The node whose mariadbd a new routed connection reaches (from its data directory's path)."""
    conn = connect(listen, f"app@{tenant}", password)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@datadir")
            path = cur.fetchone()[0]
    finally:
        conn.close()
    return next((part for part in Path(path).parts if part.startswith("node-")), path)


def move_under_etcd_faults(cluster: ScaleCluster, store: EtcdStore, tenant: str, password: str, to: int,
                           entries: int) -> dict:
    """The etcd leader SIGKILLed (every stream through it breaks), then a live move, then etcd's history
    compacted to its head; the member started again. The router must route the tenant to its new owner
    and keep every entry, reconnecting by itself."""
    etcd_dir = cluster.run_dir / "etcd"
    leader = store.health()["leader"]
    os.kill(local_etcd.member_pid(etcd_dir, leader), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not store.health().get("healthy"):
        if time.monotonic() > deadline:
            raise RuntimeError("etcd has no leader 30 s after its leader was killed")
        time.sleep(0.2)
    move = live_move(cluster, tenant, password, to)
    head = int(store.gw.call("/kv/range", {"key": _b64("/")}, idempotent=True)["header"]["revision"])
    store.gw.call("/kv/compaction", {"revision": str(head), "physical": True}, idempotent=True)
    local_etcd.start(etcd_dir, [])
    node = served_by(cluster.router_listen, tenant, password)
    if node != f"node-{to}":
        raise RuntimeError(f"after the faults the router sends {tenant} to {node}, not node-{to}")
    deadline = time.monotonic() + 60
    while (routes := router_routes(cluster.router_admin)) < entries and time.monotonic() < deadline:
        time.sleep(0.2)
    return move | {"killed_leader": leader, "served_by": node, "routes_after": routes}


def estimate_left(sizes: list[int], done: int, registered: int, rate_per_s: float, per_size_s: float) -> float:
    """Seconds left: the entries still to register at the rate seen (the router's catch-up counted as
    long again) plus the fixed part of each size still to measure."""
    left_entries = max(0, sizes[-1] - registered)
    return 2 * left_entries / max(rate_per_s, 1.0) + per_size_s * (len(sizes) - done)


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench/run scale --aliases", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aliases", action="store_true", help="this mode (directory entries aliasing real tenants)")
    ap.add_argument("--sizes", default="100,1000,10000", help="directory entries, ascending (default 100,1000,10000)")
    ap.add_argument("--nodes", type=int, default=3, help="agents, one real tenant each (default 3)")
    ap.add_argument("--window-s", type=float, default=30.0, help="idle window for CPU and rates (default 30)")
    ap.add_argument("--settle-s", type=float, default=5.0, help="wait before the window (default 5)")
    ap.add_argument("--status-repeats", type=int, default=3)
    ap.add_argument("--logins", type=int, default=300, help="logins through the router per size (default 300)")
    ap.add_argument("--routable-repeats", type=int, default=10, help="entries timed from write to login (default 10)")
    ap.add_argument("--no-move", action="store_true", help="skip the live move at each size")
    ap.add_argument("--faults", action="store_true",
                    help="at each size, a second live move with the etcd leader SIGKILLed before it and etcd's history "
                         "compacted after it: the router must route the tenant to its new owner and keep every entry")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--plot", help="write a PNG plot here")
    args = ap.parse_args()
    sizes, machine = measure.sizes_and_machine(ap, args)
    say(f"machine: {machine}")
    # A first guess of each size's fixed part; replaced by what the first size took.
    per_size_s = args.settle_s + args.window_s + 40 + args.logins * 0.01 + (0 if args.no_move else 25) \
        + (40 if args.faults else 0)
    say(f"{len(sizes)} sizes up to {sizes[-1]} entries: about "
        f"{estimate_left(sizes, 0, 0, 3000, per_size_s) / 60 + 1:.0f} min (cluster start included)")
    run_dir = Path(tempfile.mkdtemp(prefix="scale-aliases-", dir="/tmp"))
    block = random.Random(os.getpid()).randrange(2, 99)
    cluster = ScaleCluster(run_dir / "run", args.nodes, f"127.1.{block}.2", "40000-47999")
    stand_in = StandIn()
    levels: list[dict] = []
    store = None
    try:
        cluster.up()
        say(f"cluster: {args.nodes} nodes, etcd directory (3 members), router on {cluster.router_listen}")
        spec = load_cluster(str(cluster.path))
        store = EtcdStore(list(spec.etcd_endpoints), prefix=spec.etcd_prefix)
        targets = []
        for k in range(args.nodes):
            tid = f"base{k + 1}"
            measure.create_on(cluster, tid, f"node-{k + 1}")
            ep = resolve(tid, spec)
            targets.append(Target(tid, ep.host, ep.port, ep.password))
        measure.create_on(cluster, "mover", "node-1")
        mover_password = resolve("mover", spec).password
        real = args.nodes + 1
        say(f"real tenants: {', '.join(t.tenant for t in targets)} (alias targets) and mover")
        stand_in.start().join_fleet(store)
        say(f"stand-in agent of node 'aliases' at {stand_in.url}")
        registered, rate = 0, 3000.0
        mover_on, created = 1, 0
        for done, size in enumerate(sizes):
            t_size = time.monotonic()
            new = [(f"a{i:05d}", targets[i % len(targets)]) for i in range(registered, size)]

            def progress(n: int, total: int, dt: float) -> None:
                if n == total or n % (20 * 128) < 128:
                    say(f"  registered {registered + n}/{size} ({n / max(dt, 1e-3):.0f}/s)")

            reg_s = register(store, stand_in, new, progress)
            if new:
                rate = len(new) / max(reg_s, 1e-3)
            registered = size
            t_catch = time.monotonic()
            while router_routes(cluster.router_admin) < size + real:
                if time.monotonic() - t_catch > 600:
                    raise RuntimeError(f"the router routes {router_routes(cluster.router_admin)} of {size + real}")
                time.sleep(0.1)
            catch_up = time.monotonic() - t_catch
            say(f"{size} entries: registered in {reg_s:.1f} s, the router routes them all {catch_up:.2f} s later")
            time.sleep(args.settle_s)
            say(f"  idle window of {args.window_s:.0f} s")
            idle = measure.window(cluster, args.window_s)
            status = [measure.cli_ok(cluster, "status")[0] for _ in range(args.status_repeats)]
            status_json = measure.cli_ok(cluster, "status", "--json")[0]
            tenant_list = measure.cli_ok(cluster, "tenant", "list")[0]
            say(f"  status {statistics.median(status):.2f} s, --json {status_json:.2f} s, tenant list {tenant_list:.2f} s")
            rng = random.Random(size)
            aliases = [a for a in stand_in.targets]
            logins = []
            for _ in range(args.logins):
                a = rng.choice(aliases)
                logins.append(login_once(cluster.router_listen, a, stand_in.targets[a].password))
            say(f"  {len(logins)} logins: p50 {percentile(logins, 50) * 1000:.1f} ms, "
                f"p99 {percentile(logins, 99) * 1000:.1f} ms")
            entry = []
            for r in range(args.routable_repeats):
                alias, target = f"n{size:05d}x{r:02d}", targets[r % len(targets)]
                t0 = time.monotonic()
                register(store, stand_in, [(alias, target)])
                entry.append(until_routable(cluster.router_listen, alias, target.password, t0))
            created += 1
            tid = f"new{created}"
            t0 = time.monotonic()
            measure.create_on(cluster, tid, f"node-{created % args.nodes + 1}")
            t_created = time.monotonic()
            create_routable = until_routable(cluster.router_listen, tid, resolve(tid, spec).password, t_created)
            say(f"  entry to routed login: median {statistics.median(entry) * 1000:.1f} ms, max "
                f"{max(entry) * 1000:.1f} ms; `tenant create` ({t_created - t0:.1f} s) returned to routed login "
                f"{create_routable * 1000:.1f} ms")
            level = {"tenants": size, "directory_entries": size + real + args.routable_repeats * (done + 1) + created,
                     "register_s": reg_s, "router_catch_up_s": catch_up,
                     "status_s": statistics.median(status), "status_s_range": [min(status), max(status)],
                     "status_json_s": status_json, "tenant_list_s": tenant_list,
                     "login_p50_s": percentile(logins, 50), "login_p99_s": percentile(logins, 99),
                     "entry_routable_s": statistics.median(entry), "entry_routable_s_range": [min(entry), max(entry)],
                     "create_routable_s": create_routable, "create_s": t_created - t0,
                     **idle, "raw": {"status_s": status, "login_s": logins, "entry_routable_s": entry}}
            if not args.no_move:
                to = mover_on % args.nodes + 1
                move = live_move(cluster, "mover", mover_password, to)
                mover_on = to
                level |= {"move_pause_s": move["pause_s"], "move_s": move["seconds"],
                          "move_client_errors": move["client_errors"], "move_errors_sample": move["errors_sample"]}
                say(f"  live move of mover to node-{to} in {move['seconds']:.1f} s: longest gap between SELECT 1s "
                    f"{move['pause_s'] * 1000:.0f} ms, {move['client_errors']} client errors")
            if args.faults and not args.no_move:
                to = mover_on % args.nodes + 1
                fault = move_under_etcd_faults(cluster, store, "mover", mover_password, to, size + real)
                mover_on = to
                level |= {"fault_" + k: v for k, v in fault.items()}
                say(f"  live move to node-{to} with the etcd leader killed and the history compacted: longest gap "
                    f"{fault['pause_s'] * 1000:.0f} ms, {fault['client_errors']} client errors, served by "
                    f"{fault['served_by']}, router routes {fault['routes_after']} entries")
            levels.append(level)
            say(f"{size} entries: router {idle['router_threads']} threads, {idle['router_rss_mib']:.0f} MiB; etcd "
                f"{idle['etcd_watch_streams']:.0f} watch streams, {idle['etcd_watchers']:.0f} watchers, "
                f"{idle['etcd_requests_per_s']:.1f} req/s; agents {idle['agent_cpu_s_per_s']:.3f} CPU s/s")
            if done == 0:
                per_size_s = time.monotonic() - t_size - reg_s - catch_up
            left = estimate_left(sizes, done + 1, registered, rate, per_size_s)
            if done + 1 < len(sizes):
                say(f"about {left / 60:.1f} min left")
    finally:
        stand_in.stop()
        if store is not None:  # `cluster down` stops only the nodes it made: the stand-in leaves first
            try:
                store.remove_member(NODE)
            except SlackerError as exc:
                say(f"could not remove the stand-in node from the directory: {exc.one_line()}")
        cluster.down()
        shutil.rmtree(run_dir, ignore_errors=True)
    print()
    print(report.table(levels, report.FIGURES_ALIASES))
    doc = {"machine": machine, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "mode": "aliases", "params": vars(args), "levels": levels}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        report.plot(levels, args.plot, report.FIGURES_ALIASES)


if __name__ == "__main__":
    main()
