"""bench/run cutover: a manual cutover held ready under writes through the router, an agent killed while ready, then moves cut over on request.

A local two-node cluster with a router (loopback, temp dir) and one tenant (--kind server: a mariadbd of its own;
shared: a database in node-1's shared server) loaded with about --mb MB. --writers acknowledged-writes writers
(--writer-rate each; 10 x 50/s = 500 txn/s by default) write through the router as app@TENANT throughout.

1. The hold: `slacker migrate TENANT --to node-2 --cutover manual` returns once the migration is ready; it is
   then held ready for --hold (default 10m), its end-to-end lag read from the source's document every second;
   at --kill-at of the hold the source agent is SIGKILLed and started again (the migration must resume, still
   ready). Then `slacker migrate --cutover-now`.
2. The moves: --moves more migrations back and forth, each `--cutover manual`, held ready --ready-s, then
   `--cutover-now`.

It prints the lag's p50 / p99 / max over the hold (goal: p99 <= 1 s), whether the wait survived the kill, the
freeze per move and its p50 / p99 (goal: p99 <= 100 ms over >= 10 moves), acknowledged writes lost (must be 0)
and failed requests (must be 0), the writers' achieved rate, and what the wait kept on the source.

    bench/run cutover [--kind server|shared] [--mb 50] [--writers 10] [--writer-rate 50] [--hold 10m]
                      [--kill-at 0.5] [--moves 10] [--ready-s 3] [--json FILE] [--plot PNG]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

from slacker import local_cluster
from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.cli import main as cli
from slacker.client import Endpoint, TenantClient, resolve
from slacker.config import load_cluster
from slacker.router import local as local_router
from slacker.units import parse_duration
from benchkit.faults import restart_agent
from benchkit.host import machine as host_machine
from benchkit.migration import writers_verdict, routed_cluster_gone, create_loaded_tenant, wait_migration
from benchkit.stats import pct, spread

TENANT = "c1"


def parse(argv=None):
    p = argparse.ArgumentParser(prog="bench/run cutover", description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=["server", "shared"], default="server")
    p.add_argument("--mb", type=float, default=50.0, help="the tenant's data, in MB")
    p.add_argument("--writers", type=int, default=10)
    p.add_argument("--writer-rate", type=float, default=50.0, help="acknowledged writes per second per writer")
    p.add_argument("--hold", default="10m", help="how long the first migration is held ready")
    p.add_argument("--kill-at", type=float, default=0.5, help="when in the hold the source agent is killed "
                   "(a fraction of it; negative: never)")
    p.add_argument("--moves", type=int, default=10)
    p.add_argument("--ready-s", type=float, default=3.0, help="how long each of the moves waits ready")
    p.add_argument("--first-address", default="127.0.92.1")
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path, help="the lag over the hold and the freeze per move (PNG)")
    return p.parse_args(argv)


def plot(summary: dict, out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(2, 1)
    t = [s["t"] for s in summary["hold"]["samples"]]
    ax1.plot(t, [s["lag_ms"] for s in summary["hold"]["samples"]], linewidth=1)
    if summary["hold"].get("killed_at_s") is not None:
        ax1.axvline(summary["hold"]["killed_at_s"], color="red", linestyle="--", linewidth=1,
                    label="source agent SIGKILLed and restarted")
        ax1.legend(fontsize=8)
    ax1.axhline(1000, color="grey", linestyle=":", linewidth=1)
    ax1.set_yscale("log")
    ax1.set_ylabel("end-to-end lag (ms)")
    ax1.set_xlabel("seconds ready")
    a = summary["args"]
    ax1.set_title(f"held ready under {summary['writes_per_s']:.0f} acknowledged writes/s through the router "
                  f"({a['kind']} tenant)")
    n = [m["n"] for m in summary["moves"]]
    ax2.plot(n, [m["freeze_ms"] for m in summary["moves"]], marker="o")
    ax2.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax2.set_ylabel("freeze at --cutover-now (ms)")
    ax2.set_xlabel("move")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def load_shared(ep, mb: float) -> None:
    conn = ep.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE bulk (id INT PRIMARY KEY, body VARCHAR(1000))")
            rows = int(mb * 1000)  # ~1 KB a row
            for lo in range(0, rows, 2000):
                cur.execute("INSERT INTO bulk VALUES " + ",".join(
                    f"({i}, REPEAT(MD5({i}), 30))" for i in range(lo, min(rows, lo + 2000))))
    finally:
        conn.close()


def run_cli(path: Path, *args: str):
    r = CliRunner().invoke(cli, ["--cluster", str(path), *args])
    if r.exit_code != 0:
        raise SystemExit(f"slacker {' '.join(args)}: exit {r.exit_code}: {r.output.strip()[-400:]}")
    return r


def doc_of(agents, node: str) -> dict:
    return agents[node].request("GET", f"/v1/migrations/{TENANT}")


def main(argv=None) -> int:
    args = parse(argv)
    hold_s = parse_duration(args.hold)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cutover-"))
    run_dir = tmp / "run"
    writers: list[AckedWriter] = []
    try:
        path = local_cluster.up(run_dir, nodes=2, first_address=args.first_address, fault_injection=True)
        cluster = load_cluster(str(path))
        local_router.start(run_dir, path, "127.0.0.1:0")
        host, port = local_router.listening(run_dir).rsplit(":", 1)
        agents, directory = cluster_clients(cluster)
        if args.kind == "server":
            create_loaded_tenant(cluster, TENANT, rows=int(args.mb * 400))  # ~2.5 KB a row
        else:
            run_cli(path, "tenant", "create", TENANT, "--shared", "--on", "node-1")
            run_cli(path, "tenant", "create", "c2", "--shared", "--on", "node-2")  # node-2's shared server
            load_shared(resolve(TENANT, cluster), args.mb)
        made = resolve(TENANT, cluster)
        ep = Endpoint(TENANT, host, int(port), f"app@{TENANT}", made.password)
        for i in range(args.writers):
            writers.append(AckedWriter(TenantClient(TENANT, lambda: ep, reconnect_timeout_s=10), writer_id=i + 1,
                                       rate_per_s=args.writer_rate).start())
        time.sleep(3)
        t_writes = time.monotonic()
        n_writes = sum(len(w.acked) for w in writers)

        # 1. the hold
        run_cli(path, "migrate", TENANT, "--to", "node-2", "--cutover", "manual", "--cutover-timeout", "24h,abort")
        mid = doc_of(agents, "node-1")["id"]
        print(f"migration {mid} ready; holding it {args.hold}", flush=True)
        t0 = time.monotonic()
        samples, killed_at, resumed, last_print = [], None, None, 0.0
        kill_at = hold_s * args.kill_at if args.kill_at >= 0 else None
        while (el := time.monotonic() - t0) < hold_s:
            if kill_at is not None and killed_at is None and el >= kill_at:
                killed_at = el
                restart_agent(cluster, "node-1")
                d = doc_of(agents, "node-1")
                resumed = d["id"] == mid and d["active"] and d["phase"] in ("recovering", "ready")
                print(f"{el:5.0f}s: source agent SIGKILLed and started again: migration {d['id']} {d['phase']}",
                      flush=True)
            d = doc_of(agents, "node-1")
            if not d["active"] or d["phase"] != "ready":
                if d["phase"] == "recovering":
                    time.sleep(0.2)
                    continue
                raise SystemExit(f"the migration left ready: {d['phase']}, {d.get('result')}: {d.get('error')}")
            r = d.get("ready") or {}
            if r.get("lag_ms") is not None:
                samples.append({"t": round(el, 1), "lag_ms": r["lag_ms"], "behind": r["behind"],
                                "binlog_bytes": r["binlog_bytes"]})
            if el - last_print >= 60:
                last_print = el
                print(f"{el:5.0f}s ready: lag {r.get('lag_ms')} ms (p99 {r.get('lag_p99_ms')} ms), "
                      f"source keeps {r.get('binlog_bytes', 0) / 1e6:.1f} MB of binlog", flush=True)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - el)))
        if killed_at is not None:
            resumed = resumed and doc_of(agents, "node-1").get("recovered") is True
        run_cli(path, "migrate", "--cutover-now", TENANT)
        end = wait_migration(cluster, "node-1", mid, timeout_s=300)
        moves = [{"n": 1, "from": "node-1", "to": "node-2", "result": end["result"], "freeze_ms": end.get("freeze_ms"),
                  "ready_s": round(hold_s, 1), "error": end.get("error")}]
        print(f"move 1 (held {args.hold}): {end['result']}, freeze {end.get('freeze_ms')} ms", flush=True)

        # 2. the moves
        for n in range(2, args.moves + 1):
            src = directory.lookup(TENANT).node
            dst = "node-2" if src == "node-1" else "node-1"
            run_cli(path, "migrate", TENANT, "--to", dst, "--cutover", "manual")
            m = doc_of(agents, src)["id"]
            time.sleep(args.ready_s)
            run_cli(path, "migrate", "--cutover-now", TENANT)
            end = wait_migration(cluster, src, m, timeout_s=300)
            moves.append({"n": n, "from": src, "to": dst, "result": end["result"], "freeze_ms": end.get("freeze_ms"),
                          "ready_s": args.ready_s, "error": end.get("error")})
            print(f"move {n} {src} -> {dst}: {end['result']}, freeze {end.get('freeze_ms')} ms", flush=True)
        writes_per_s = (sum(len(w.acked) for w in writers) - n_writes) / (time.monotonic() - t_writes)
        time.sleep(1)
        acked, lost, failed = writers_verdict(cluster, TENANT, writers)
        lags = [s["lag_ms"] for s in samples]
        freezes = [m["freeze_ms"] for m in moves if m["freeze_ms"] is not None]
        summary = {
            "machine": host_machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "writes_per_s": round(writes_per_s, 1),
            "hold": {"seconds": hold_s, "samples": samples, "killed_at_s": killed_at, "resumed": resumed,
                     "lag_ms": {"p50": pct(lags, 0.5), "p99": pct(lags, 0.99), "max": max(lags, default=None)},
                     "binlog_kept_bytes": samples[-1]["binlog_bytes"] if samples else None},
            "moves": moves, "succeeded": sum(m["result"] == "succeeded" for m in moves),
            "freeze_ms": {"p50": pct(freezes, 0.5), "p99": pct(freezes, 0.99), "max": max(freezes, default=None),
                          "spread": spread(freezes)},
            "acked": len(acked), "lost": lost, "failed_requests": failed,
        }
        h = summary["hold"]
        print(f"\nheld ready {hold_s:.0f} s under {writes_per_s:.0f} acknowledged writes/s through the router: lag p50 "
              f"{h['lag_ms']['p50']:.0f} ms, p99 {h['lag_ms']['p99']:.0f} ms, max {h['lag_ms']['max']:.0f} ms over "
              f"{len(lags)} s; source agent killed at {killed_at and round(killed_at)} s: "
              f"{'resumed, still ready' if resumed else 'NOT resumed' if killed_at is not None else 'not killed'}")
        print(f"{summary['succeeded']}/{len(moves)} cutovers succeeded; freeze p50 {summary['freeze_ms']['p50']:.0f} ms, "
              f"p99 {summary['freeze_ms']['p99']:.0f} ms, max {summary['freeze_ms']['max']:.0f} ms")
        print(f"acknowledged writes: {len(acked)}, lost {lost}; failed requests {failed}")
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        if args.plot:
            plot(summary, args.plot)
        ok = (summary["succeeded"] == len(moves) and lost == 0 and failed == 0
              and (killed_at is None or resumed))
        return 0 if ok else 1
    finally:
        routed_cluster_gone(run_dir, tmp, "cutover", writers)


if __name__ == "__main__":
    raise SystemExit(main())
