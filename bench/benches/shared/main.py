"""bench/run shared: one shared tenant moved back and forth live among neighbours that write throughout.

A local two-node cluster with a router (loopback, temp dir). node-1's shared server holds --tenants shared
tenants, t1 (the mover, loaded with about --mb MB) and its neighbours t2..tN; node-2's shared server holds
one more (its shared server exists before the first move). Every tenant has an acknowledged-writes writer
through the router as app@TENANT (--writer-rate each). The mover then moves --moves times between the two
nodes with `slacker migrate` (a binding --setpoint by default, or --rate, or --unthrottled), one after the
other. Afterwards it prints, per move, the result, the time, the freeze window, the bytes copied and the
controller's mean latency over the copy ÷ the setpoint; and in all:

- acknowledged writes lost on the mover and on each neighbour (every acknowledged id must be in its table;
  must be 0), failed requests on the neighbours (any error or unknown outcome; must be 0), and the mover's
  own failed requests (statements the handover interrupted or met: reported);
- freeze p50 / p99 / max over the moves, mean latency ÷ setpoint (median and spread over the moves);
- leftovers: after the last move, anything of the mover on the node it left (database, account, replication
  connection, record; must be none);
- `tenant create --shared` p50 / p99 over the tenants made.

With --oltp the mover and its first neighbour also run the project's bank transfers through the router
(slacker.oltp: two clients each, multi-statement transactions with row-lock waits on a few hot accounts);
afterwards each one's balances and acknowledged transfers are checked (no client may die: a transfer may
be refused at the handover, never lost or half-applied).

With --consolidate the mover is a whole-server tenant on node-1 (its data in database t1) and the moves change
its kind: into node-2's shared server (`--into shared`) and back into a server of its own on node-1 (`--into
server`), alternately; its leftovers are checked on both forms (node-2's shared server, node-1's whole server).

    bench/run shared [--tenants 10] [--mb 100] [--moves 20] [--setpoint 30ms | --rate 20MB/s | --unthrottled]
                     [--writer-rate 20] [--oltp] [--consolidate] [--json FILE] [--plot PNG]
    bench/run shared --replot RUN.json [RUN.json ...] --plot PNG    # the figure of saved runs, side by side

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import pymysql
from click.testing import CliRunner

from slacker import local_cluster, oltp
from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.cli import main as cli
from slacker.client import Endpoint, TenantClient, resolve
from slacker.config import load_cluster
from slacker.router import local as local_router
from benchkit.host import machine as host_machine
from benchkit.migration import routed_cluster_gone
from benchkit.stats import pct, spread

CHUNK_ROWS = 2000
ROW_BYTES = 1000


def step_lengths(cumulative: dict) -> dict:
    """handover_steps_ms gives each step's time since the lock was asked for; each step's own length."""
    out, prev = {}, 0.0
    for k, v in sorted(cumulative.items(), key=lambda kv: kv[1]):
        out[k] = round(v - prev, 1)
        prev = v
    return out


def parse(argv=None):
    p = argparse.ArgumentParser(prog="bench/run shared", description=__doc__.splitlines()[0])
    p.add_argument("--tenants", type=int, default=10, help="shared tenants on node-1, the mover among them")
    p.add_argument("--mb", type=float, default=100.0, help="the mover's data, in MB (rows of ~1 KB)")
    p.add_argument("--moves", type=int, default=20)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--setpoint", default="30ms", help="each move's latency setpoint (default 30ms)")
    how.add_argument("--rate", help="a fixed rate instead (20MB/s)")
    how.add_argument("--unthrottled", action="store_true")
    p.add_argument("--writer-rate", type=float, default=20.0, help="acknowledged writes per second per tenant")
    p.add_argument("--oltp", action="store_true", help="bank transfers on the mover and one neighbour too")
    p.add_argument("--consolidate", action="store_true",
                   help="the mover a whole server, packed into node-2's shared server and unpacked again (--into)")
    p.add_argument("--snapshot", choices=["logical", "physical", "alternate"], default="logical",
                   help="the copy's method; alternate: odd moves physical, even ones logical (side by side in one "
                        "run; a table is moved back by the other method, see docs/shared.md)")
    p.add_argument("--first-address", default="127.0.90.1")
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path, help="freeze and latency ÷ setpoint per move (PNG)")
    p.add_argument("--replot", type=Path, nargs="+", metavar="JSON", help="draw saved runs' --json instead of running")
    return p.parse_args(argv)


def plot(runs: list[dict], out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for run in runs:
        a = run["args"]
        label = (f"setpoint {a['setpoint']}" if not a.get("rate") and not a.get("unthrottled")
                 else f"rate {a['rate']}" if a.get("rate") else "unthrottled") + f", {a['mb']:.0f} MB" + (
            ", bank transfers" if a.get("oltp") else "")
        n = [m["n"] for m in run["moves"]]
        ax1.plot(n, [m["freeze_ms"] for m in run["moves"]], marker="o", label=label)
        ratios = [m["latency_ratio"] for m in run["moves"]]
        if any(r is not None for r in ratios):
            ax2.plot(n, ratios, marker="o", label=label)
    ax1.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax1.set_ylabel("freeze (ms)")
    ax1.legend(fontsize=8)
    packed = any(run["args"].get("consolidate") for run in runs)
    ax1.set_title("a whole server packed into a shared server and out again" if packed else
                  "a shared tenant moved back and forth", fontsize=10)
    ax2.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax2.set_ylabel("mean latency over the copy ÷ setpoint")
    ax2.set_xlabel("move")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def q(conn, sql, *args):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def admin(run_dir: Path, node: str):
    d = run_dir / node
    password = (d / "shared" / "secrets" / "admin.password").read_text().strip()
    return pymysql.connect(unix_socket=str(d / "sock" / "_shared.sock"), user="slacker", password=password,
                           autocommit=True)


def leftovers(run_dir: Path, node: str, tid: str) -> list[str]:
    conn = admin(run_dir, node)
    try:
        out = []
        if q(conn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", tid):
            out.append("database")
        if q(conn, "SELECT 1 FROM mysql.global_priv WHERE User = %s", f"{tid}_app"):
            out.append("account")
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            out += [f"replication {r['Connection_name']}" for r in cur.fetchall()]
    finally:
        conn.close()
    if (run_dir / node / "shared" / "tenants" / tid).exists():
        out.append("record")
    return out


def series_latency_ratio(series_path: str) -> float | None:
    """The controller's mean latency over the copy's seconds ÷ its setpoint (None without a controller)."""
    try:
        rows = [json.loads(line) for line in Path(series_path).read_text().splitlines()]
    except OSError:
        return None
    vals = [(r["latency_s"], r["setpoint_s"]) for r in rows
            if r.get("phase") == "snapshot" and r.get("latency_s") is not None and r.get("setpoint_s")]
    if not vals:
        return None
    return statistics.fmean(v for v, _ in vals) / vals[0][1]


def main(argv=None) -> int:
    args = parse(argv)
    if args.replot:
        if not args.plot:
            raise SystemExit("bench/run shared: --replot needs --plot PNG")
        plot([json.loads(p.read_text()) for p in args.replot], args.plot)
        print(f"wrote {args.plot}")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-shared-"))
    run_dir = tmp / "run"
    writers: dict[str, AckedWriter] = {}
    try:
        path = local_cluster.up(run_dir, nodes=2, first_address=args.first_address)
        cluster = load_cluster(str(path))
        local_router.start(run_dir, path, "127.0.0.1:0")
        listen = local_router.listening(run_dir)
        host, port = listen.rsplit(":", 1)
        agents, directory = cluster_clients(cluster)
        ids = [f"t{i}" for i in range(1, args.tenants + 1)]
        create_s = []
        made = {}
        for tid, node in [(t, "node-1") for t in ids] + [("t99", "node-2")]:
            whole = args.consolidate and tid == ids[0]  # the mover: a whole server, whose kind the moves change
            t0 = time.monotonic()
            agents[node].request("POST", "/v1/tenants", {"id": tid} if whole else {"id": tid, "kind": "shared"},
                                 timeout_s=180)
            if not whole:
                create_s.append(time.monotonic() - t0)
            made[tid] = resolve(tid, cluster)
        print(f"{len(made)} shared tenants made: create p50 {pct(create_s, 0.5) * 1000:.0f} ms, "
              f"p99 {pct(create_s, 0.99) * 1000:.0f} ms", flush=True)
        mover = ids[0]
        conn = made[mover].connect()
        try:
            q(conn, f"CREATE DATABASE IF NOT EXISTS {mover}")  # a shared tenant's is there; a whole server's made
            q(conn, f"CREATE TABLE {mover}.bulk (id INT PRIMARY KEY, body VARCHAR(1000))")
            rows = int(args.mb * 1e6 / ROW_BYTES)
            for lo in range(0, rows, CHUNK_ROWS):
                q(conn, f"INSERT INTO {mover}.bulk VALUES " + ",".join(
                    f"({i}, REPEAT(MD5({i}), 30))" for i in range(lo, min(rows, lo + CHUNK_ROWS))))
        finally:
            conn.close()
        print(f"{mover} loaded: {rows:,} rows (~{args.mb:.0f} MB)", flush=True)
        for i, tid in enumerate(ids):
            ep = Endpoint(tid, host, int(port), f"app@{tid}", made[tid].password)
            writers[tid] = AckedWriter(TenantClient(tid, lambda ep=ep: ep, reconnect_timeout_s=10), writer_id=i + 1,
                                       rate_per_s=args.writer_rate, database=tid if tid == mover else None).start()
        transfers: dict[str, oltp.TransferLoad] = {}
        if args.oltp:
            for tid in ids[:2]:
                db = tid if args.consolidate and tid == mover else None  # a whole server's only database
                conn = made[tid].connect()
                try:
                    oltp.load(conn, accounts=500, database=db)
                finally:
                    conn.close()
                ep = Endpoint(tid, host, int(port), f"app@{tid}", made[tid].password)
                transfers[tid] = oltp.TransferLoad(lambda ep=ep, tid=tid: TenantClient(tid, lambda: ep,
                                                                                         reconnect_timeout_s=10),
                                                   threads=2, accounts=500, hot_accounts=4, database=db).start()
        time.sleep(5)  # the writers' own latency in the controller's first window
        how = (["--unthrottled"] if args.unthrottled else ["--rate", args.rate] if args.rate
               else ["--setpoint", args.setpoint])
        moves = []
        for n in range(args.moves):
            src = directory.lookup(mover).node
            dst = "node-2" if src == "node-1" else "node-1"
            method = (args.snapshot if args.snapshot != "alternate" else ("physical" if n % 2 == 0 else "logical"))
            t0 = time.monotonic()
            into = (["--into", "shared" if dst == "node-2" else "server"] if args.consolidate else [])
            r = CliRunner().invoke(cli, ["--cluster", str(path), "migrate", mover, "--to", dst, *how, *into,
                                         "--snapshot", method, "--json"])
            took = time.monotonic() - t0
            t1 = time.monotonic()
            waits = [(x.end - x.start) * 1000 for tid, w in writers.items() if tid != mover
                     for x in list(w.txns) if t0 <= x.start <= t1]
            try:
                doc = json.loads(r.stdout)
            except ValueError:
                doc = {"result": "failed", "error": r.stderr.strip()[-300:]}
            row = {"n": n + 1, "from": src, "to": dst, "snapshot": method, "result": doc.get("result"),
                   "s": round(took, 2), "neighbour_write_p99_ms": round(pct(waits, 0.99), 1) if waits else None,
                   "neighbour_write_max_ms": round(max(waits), 1) if waits else None,
                   "copy_s": next((p["duration_s"] for p in doc.get("phases", []) if p["name"] == "snapshot"), None),
                   "prepare_s": next((p["duration_s"] for p in doc.get("phases", []) if p["name"] == "prepare"), None),
                   "freeze_ms": doc.get("freeze_ms"), "bytes": doc.get("bytes_done"),
                   # where the freeze went: each step's own ms (locked, caught_up, target_ready, fenced, flipped)
                   "freeze_steps_ms": step_lengths(doc.get("handover_steps_ms") or {}),
                   "latency_ratio": series_latency_ratio(doc.get("series_path", "")) if not args.rate
                   and not args.unthrottled else None, "error": doc.get("error")}
            moves.append(row)
            ratio = f"{row['latency_ratio']:.2f}" if row["latency_ratio"] is not None else "-"
            print(f"move {n + 1:2d} {src} -> {dst} ({method}): {row['result']}, {took:.1f}s, freeze {row['freeze_ms']} ms, "
                  f"{(row['bytes'] or 0) / 1e6:.0f} MB, latency/setpoint {ratio}, neighbours' writes p99 "
                  f"{row['neighbour_write_p99_ms']} ms, max {row['neighbour_write_max_ms']} ms"
                  + (f"  ({row['error']})" if row["result"] != "succeeded" else ""), flush=True)
        time.sleep(2)
        for w in writers.values():
            w.stop()
        checks = {}
        for tid, load in transfers.items():
            load.stop()
            conn = resolve(tid, cluster).connect()
            try:
                c = oltp.check(conn, load.acked, load.failed, database=load.database)
            finally:
                conn.close()
            checks[tid] = {"ok": c.ok, "transfers": c.transfers, "acked": len(load.acked),
                           "refused": len(load.failed), "unknown": len(load.unknown), "missing_acked": len(c.missing_acked),
                           "unexpected": len(c.unexpected), "balance_errors": len(c.balance_errors),
                           "errors": dict(load.errors)}
        owner = directory.lookup(mover).node
        left = leftovers(run_dir, "node-2" if owner == "node-1" else "node-1", mover)
        if args.consolidate and owner == "node-2" and (run_dir / "node-1" / "tenants" / mover).exists():
            left.append("whole server")
        lost, failed = {}, {}
        for tid, w in writers.items():
            conn = made[tid].connect() if tid != mover else resolve(tid, cluster).connect()
            try:
                present = {r[0] for r in q(conn, f"SELECT id FROM {tid}.log")}
            finally:
                conn.close()
            lost[tid] = len(set(w.acked) - present)
            failed[tid] = len(w.unknown) + sum(w.errors.values())
        freezes = [m["freeze_ms"] for m in moves if m["freeze_ms"] is not None]
        ratios = [m["latency_ratio"] for m in moves if m["latency_ratio"] is not None]
        summary = {
            "machine": host_machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "moves": moves, "succeeded": sum(m["result"] == "succeeded" for m in moves),
            "freeze_ms": {"p50": pct(freezes, 0.5), "p99": pct(freezes, 0.99), "max": max(freezes, default=None)},
            "latency_ratio": spread(ratios), "lost": lost, "failed_requests": failed,
            "acked": {t: len(w.acked) for t, w in writers.items()}, "leftovers": left,
            "create_ms": {"p50": pct(create_s, 0.5) * 1000, "p99": pct(create_s, 0.99) * 1000},
            "oltp": checks,
        }
        steps = {}
        for m in moves:
            for k, v in (m.get("freeze_steps_ms") or {}).items():
                steps.setdefault(k, []).append(v)
        summary["freeze_steps_ms"] = {k: spread(v) for k, v in steps.items()}
        if steps:
            print("the freeze's steps (median ms): " + ", ".join(f"{k} {spread(v)['median']}" for k, v in steps.items()))
        for method in sorted({m["snapshot"] for m in moves}):
            ok_ = [m for m in moves if m["snapshot"] == method and m["result"] == "succeeded"]
            if ok_:
                summary.setdefault("by_snapshot", {})[method] = {
                    k: spread([m[k] for m in ok_]) for k in ("s", "copy_s", "prepare_s", "bytes", "freeze_ms",
                                                           "neighbour_write_p99_ms", "neighbour_write_max_ms")}
                b = summary["by_snapshot"][method]
                print(f"{method}: {len(ok_)} moves; time {b['s']['median']} s, copy {b['copy_s']['median']} s, prepare "
                      f"{b['prepare_s']['median']} s, {b['bytes']['median'] / 1e6:.0f} MB sent, freeze "
                      f"{b['freeze_ms']['median']} ms, neighbours' writes p99 {b['neighbour_write_p99_ms']['median']} ms, "
                      f"max {b['neighbour_write_max_ms']['median']} ms (medians)")
        print(f"\n{summary['succeeded']}/{len(moves)} moves succeeded; freeze p50 {summary['freeze_ms']['p50']:.0f} ms, "
              f"p99 {summary['freeze_ms']['p99']:.0f} ms, max {summary['freeze_ms']['max']:.0f} ms")
        if ratios:
            s = summary["latency_ratio"]
            print(f"mean latency over each copy / setpoint: median {s['median']} ({s['min']}-{s['max']})")
        print(f"acknowledged writes lost: mover {lost[mover]}, neighbours {sum(v for t, v in lost.items() if t != mover)}")
        print(f"failed requests: neighbours {sum(v for t, v in failed.items() if t != mover)}, mover {failed[mover]}")
        print(f"left on the node it left: {', '.join(left) or 'nothing'}")
        for tid, c in checks.items():
            print(f"bank transfers on {tid}: {'consistent' if c['ok'] else 'INCONSISTENT'}; {c['acked']} acknowledged, "
                  f"{c['refused']} refused, {c['unknown']} unknown; lost {c['missing_acked']}, "
                  f"balance errors {c['balance_errors']}")
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        if args.plot:
            plot([json.loads(json.dumps(summary, default=str))], args.plot)
        ok = (summary["succeeded"] == len(moves) and not any(lost.values()) and not left
              and not any(v for t, v in failed.items() if t != mover) and all(c["ok"] for c in checks.values()))
        return 0 if ok else 1
    finally:
        routed_cluster_gone(run_dir, tmp, "shared", writers.values())


if __name__ == "__main__":
    raise SystemExit(main())
