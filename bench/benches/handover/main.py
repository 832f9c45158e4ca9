"""Freeze window of live migrations under a steady write load and under an OLTP load.

Starts a local two-node cluster per load (loopback, temp dir), side by side:
`writes` drives its tenant with single-statement autocommit writers that log
every acknowledged commit; `oltp` with closed-loop clients running bank
transfers (slacker.oltp: multi-statement transactions, SELECT ... FOR UPDATE
on a few hot rows, so some statement always waits on a row lock). Each tenant
is migrated back and forth, the loads' migrations alternating, in --repeats
blocks of --migrations each. Prints per-migration rows and the summary per
load: success rate, freeze p50/p99/max, statements interrupted to get the
freeze, the clients' throughput and p95 in the seconds around each handover
against the seconds before its migration began (as ratios), and acknowledged
writes lost (must be 0), each as the median and spread over the repeats.

With --tls a second cluster made with `cluster up --tls` runs beside the plain
one, with the same load, and migrations alternate between the two, so the
freeze with TLS on is compared with plain text in one run.

    bench/run handover [--loads writes,oltp] [--repeats 3] [--migrations 10] [--json FILE]
    bench/run handover --tls --migrations 10
    bench/run handover --tls --netns --migrations 10   # both clusters on netns hosts

With --netns both clusters put every node in a network namespace of its own
(`cluster up --netns`; the plain one with --no-tls), so the API, the snapshot
stream, replication and the writers' traffic cross veth interfaces. Each row
also shows the snapshot phase's copy throughput (bytes sent / phase duration:
mariabackup, the pipe and the receiver as a user sees them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


from slacker import local_cluster, oltp
from slacker.ackwriter import AckedWriter
from slacker.agent.client import cluster_clients
from slacker.client import TenantClient, resolve
from slacker.config import load_cluster
from benchkit.stats import fmt_spread, pct, spread
from benchkit.host import machine as host_machine
from benchkit.migration import cluster_down


class Run:
    """One local two-node cluster with a loaded tenant, writers, and its migrations."""

    def __init__(self, name: str, load: str, tmp: Path, first: str, api_port: int, port_range: str, tls: bool, args,
                 netns_subnet: str | None = None) -> None:
        self.name, self.load_kind, self.tls, self.args = name, load, tls, args
        self.oltp: oltp.TransferLoad | None = None
        self.run_dir = tmp / name
        extra = {"netns": True, "netns_subnet": netns_subnet} if netns_subnet else {}
        path = local_cluster.up(self.run_dir, nodes=2, first_address=first, api_port=api_port,
                                port_range=port_range, tls=tls, **extra)
        self.cluster = load_cluster(str(path))
        self.agents, self.directory = cluster_clients(self.cluster)
        self.writers: list[AckedWriter] = []
        self.rows: list[dict] = []

    def load(self) -> None:
        args = self.args
        self.agents["node-1"].request("POST", "/v1/tenants", {"id": "bench"}, timeout_s=180)
        conn = resolve("bench", self.cluster).connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, body TEXT)")
            for s in range(0, args.rows, 1000):
                cur.execute("INSERT INTO shop.items VALUES " + ",".join(
                    f"({i}, REPEAT(MD5({i}), 75))" for i in range(s, min(args.rows, s + 1000))))
            if self.load_kind == "oltp":
                oltp.load(conn, accounts=args.accounts)
        conn.close()
        if self.load_kind == "oltp":
            self.oltp = oltp.TransferLoad(lambda: TenantClient.for_cluster("bench", self.cluster, reconnect_timeout_s=60),
                                          threads=args.clients).start()
        else:
            self.writers = [AckedWriter(TenantClient.for_cluster("bench", self.cluster), writer_id=w + 1,
                                        rate_per_s=args.rate / args.writers).start() for w in range(args.writers)]

    def txns(self) -> list:
        if self.oltp is not None:
            return self.oltp.transactions()
        return [t for w in self.writers for t in list(w.txns)]

    def migrate(self, n: int, repeat: int) -> dict:
        own = self.directory.lookup("bench")
        target = "node-2" if own.node == "node-1" else "node-1"
        began = time.monotonic()
        doc = self.agents[own.node].request("POST", "/v1/migrations", {
            "tenant": "bench", "target": target, "max_freeze_s": self.args.max_freeze}, timeout_s=120)
        handover = None
        while doc["active"]:
            time.sleep(0.05)
            doc = self.agents[own.node].request("GET", f"/v1/migrations/{doc['id']}")
            if handover is None and doc["phase"] == "handover":
                handover = time.monotonic()
        ended = time.monotonic()
        time.sleep(self.args.after)  # the clients' seconds after the handover belong to it
        txns = self.txns()
        before = oltp.summarize(txns, began - self.args.before, began)
        around = oltp.summarize(txns, (handover or ended) - 0.5, ended + self.args.after)
        snap = next((p for p in doc.get("phases", []) if p["name"] == "snapshot"), None)
        copy_s = snap and snap.get("duration_s")
        r = {"n": n, "repeat": repeat, "cluster": self.name, "load": self.load_kind, "from": own.node, "to": target,
             "result": doc["result"], "before": before, "around": around,
             "interrupted": sum(a.get("interrupted") or 0 for a in doc.get("handover_attempts") or []),
             "attempts": len(doc.get("handover_attempts") or []),
             "freeze_ms": doc["freeze_ms"], "steps_ms": doc.get("handover_steps_ms"), "rounds": len(doc["rounds"]),
             "duration_s": doc["duration_s"], "bytes": doc["bytes_total"], "copy_s": copy_s,
             "copy_mb_s": round(doc["bytes_total"] / copy_s / 1e6, 1) if copy_s else None,
             "error": (doc.get("error") or {}).get("what")}
        self.rows.append(r)
        print(f"{repeat}.{r['n']:<3d} {self.name:10} {r['from']} -> {r['to']}  {r['result']:9}  freeze "
              f"{r['freeze_ms'] or 0:7.1f} ms  attempts {r['attempts']}  interrupted {r['interrupted']:2d}  "
              f"rounds {r['rounds']}  clients {before['tps']:6.0f} -> {around['tps']:6.0f} txn/s, p95 "
              f"{before['p95_ms'] or 0:6.1f} -> {around['p95_ms'] or 0:6.1f} ms  total {r['duration_s']:.1f}s"
              + (f"  ({r['error']})" if r["error"] else ""), flush=True)
        return r

    def api_call_ms(self, calls: int = 20) -> dict:
        """One agent call on a kept-open connection vs a new one each time (a TLS handshake each)."""
        from slacker.agent.client import AgentClient
        spec = self.cluster.node("node-2")
        c = AgentClient(spec.url, self.cluster.token(), spec.name, ca_file=self.cluster.tls_ca)
        out = {}
        for mode in ("kept_open", "new_connection"):
            times = []
            for _ in range(calls):
                if mode == "new_connection":
                    c.close()
                t = time.monotonic()
                c.request("GET", "/v1/status")
                times.append((time.monotonic() - t) * 1000)
            out[mode] = round(statistics.median(times), 2)
        c.close()
        return out

    def finish(self) -> dict:
        for w in self.writers:
            w.stop()
        if self.oltp is not None:
            self.oltp.stop()
        conn = resolve("bench", self.cluster).connect()
        if self.oltp is not None:
            check = oltp.check(conn, self.oltp.acked, self.oltp.failed)
            acked, lost, wrong = len(self.oltp.acked), len(check.missing_acked), len(check.unexpected) + len(
                check.balance_errors)
            errors = dict(self.oltp.errors)
        else:
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM acks.log")
                have = {r[0] for r in cur.fetchall()}
            ids = [i for w in self.writers for i in w.acked]
            acked, lost, wrong = len(ids), len(set(ids) - have), 0
            errors = {}
            for w in self.writers:
                for k, v in w.errors.items():
                    errors[k] = errors.get(k, 0) + v
        conn.close()
        repeats = sorted({r["repeat"] for r in self.rows})
        per = [_block([r for r in self.rows if r["repeat"] == k]) for k in repeats]
        return {"cluster": self.name, "load": self.load_kind, "tls": self.tls, "repeats": per,
                **{key: spread([b[key] for b in per], 2) for key in per[0]},
                "acked": acked, "acked_lost": lost, "wrong_rows": wrong, "client_errors": errors}

    def down(self) -> None:
        cluster_down(self.run_dir, self.name)


def plot(rows: list[dict], max_freeze_s: float, out: Path, machine: str) -> None:
    """Left: every migration's freeze window per cluster; right: the clients' throughput and p95 in the
    seconds around each handover as a ratio of the seconds before its migration."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    clusters = list(dict.fromkeys(r["cluster"] for r in rows))
    fig = Figure(figsize=(12, 4.4))
    ax, bx = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, c in enumerate(clusters):
        mine = [r for r in rows if r["cluster"] == c]
        ok = [r["freeze_ms"] for r in mine if r["result"] == "succeeded"]
        ax.scatter([i + (k % 7 - 3) * 0.04 for k in range(len(ok))], ok, s=14, alpha=0.7,
                   label=f"{c}: {len(ok)}/{len(mine)} succeeded")
        if ok:
            ax.hlines(statistics.median(ok), i - 0.3, i + 0.3, color="black")
            ax.hlines(pct(ok, 0.99), i - 0.2, i + 0.2, color="grey", linestyles="dashed")
        tps = [r["around"]["tps"] / r["before"]["tps"] for r in mine if r["before"]["tps"]]
        p95 = [r["around"]["p95_ms"] / r["before"]["p95_ms"] for r in mine
               if r["before"]["p95_ms"] and r["around"]["p95_ms"] is not None]
        bx.boxplot([tps, p95], positions=[i * 3, i * 3 + 1], widths=0.7)
    ax.axhline(max_freeze_s * 1000, color="red", linestyle=":", label=f"--max-freeze {max_freeze_s * 1000:.0f} ms")
    ax.axhline(100, color="orange", linestyle=":", label="goal: p99 <= 100 ms")
    ax.set_xticks(range(len(clusters)), clusters)
    ax.set_ylabel("freeze window (ms); line: median, dashed: p99")
    ax.set_title("freeze window per migration")
    ax.legend(fontsize=7, loc="upper left")
    bx.set_xticks([i * 3 + k for i in range(len(clusters)) for k in (0, 1)],
                  [f"{c}\nthroughput" if k == 0 else f"{c}\np95" for c in clusters for k in (0, 1)], fontsize=7)
    bx.axhline(1.0, color="grey", linestyle=":")
    bx.set_yscale("log")  # a handover a client waited out shows as 10x and more
    bx.set_ylabel("around the handover / before the migration")
    bx.set_title("clients in the seconds around each handover")
    fig.suptitle(f"bench/run handover, {machine}", fontsize=8)
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(out))


def _block(rows: list[dict]) -> dict:
    """One repeat's figures."""
    ok = [r for r in rows if r["result"] == "succeeded"]
    freezes = [r["freeze_ms"] for r in ok]

    def ratio(key: str) -> float | None:
        vals = [r["around"][key] / r["before"][key] for r in rows if r["before"][key] and r["around"][key] is not None]
        return round(statistics.median(vals), 2) if vals else None

    return {"migrations": len(rows), "success_rate": round(len(ok) / len(rows), 3) if rows else None,
            "freeze_ms_p50": round(statistics.median(freezes), 1) if freezes else None,
            "freeze_ms_p99": round(pct(freezes, 0.99), 1) if freezes else None,
            "freeze_ms_max": max(freezes) if freezes else None,
            "interrupted_per_migration": round(statistics.mean(r["interrupted"] for r in rows), 1) if rows else None,
            "attempts_per_migration": round(statistics.mean(r["attempts"] for r in rows), 2) if rows else None,
            "tps_before": round(statistics.median(r["before"]["tps"] for r in rows), 1) if rows else None,
            "tps_around_ratio": ratio("tps"), "p95_around_ratio": ratio("p95_ms"),
            "p95_ms_before": round(statistics.median(r["before"]["p95_ms"] or 0 for r in rows), 1) if rows else None,
            "max_ms_around": max((r["around"]["max_ms"] or 0) for r in rows) if rows else None}


def _fmt(s: dict, key: str, unit: str = "") -> str:
    return fmt_spread(s[key], unit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loads", default="writes,oltp", help="comma-separated: writes, oltp (one cluster each)")
    ap.add_argument("--repeats", type=int, default=3, help="blocks of --migrations per load")
    ap.add_argument("--migrations", type=int, default=10, help="migrations per load and repeat")
    ap.add_argument("--writers", type=int, default=4, help="writes load: writer threads (each its own connection)")
    ap.add_argument("--rate", type=float, default=300, help="writes load: total offered writes/s across writers")
    ap.add_argument("--clients", type=int, default=8, help="oltp load: closed-loop clients")
    ap.add_argument("--accounts", type=int, default=1000, help="oltp load: accounts (4 of them hot)")
    ap.add_argument("--rows", type=int, default=20000, help="rows preloaded (about 2.5 KB each)")
    ap.add_argument("--max-freeze", type=float, default=0.5)
    ap.add_argument("--before", type=float, default=3.0, help="seconds before a migration the clients are measured")
    ap.add_argument("--after", type=float, default=1.0, help="seconds after a handover counted as around it")
    ap.add_argument("--tls", action="store_true",
                    help="a second cluster per load made with `cluster up --tls`, migrations alternating")
    ap.add_argument("--netns", action="store_true",
                    help="every node of every cluster in a network namespace of its own (needs root)")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--plot", default=None, help="write a PNG: freeze per migration, clients around each handover")
    ap.add_argument("--replot", default=None, metavar="JSON", help="only draw --plot from an earlier run's --json")
    args = ap.parse_args()
    if args.replot:
        doc = json.loads(Path(args.replot).read_text())
        plot(doc["migrations"], doc["args"]["max_freeze"], Path(args.plot or "handover.png"), doc["machine"])
        return 0
    loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    if not loads or any(x not in ("writes", "oltp") for x in loads):
        ap.error("--loads takes writes and/or oltp")

    tmp = Path(tempfile.mkdtemp(prefix="slbench-", dir="/tmp"))
    runs: list[Run] = []
    try:
        k = 0
        for load in loads:
            for tls in ((False, True) if args.tls else (False,)):
                name = load + ("-tls" if tls else "")
                runs.append(Run(name, load, tmp, f"127.0.{77 + k}.2", 7790 + k,
                                f"{45306 + 500 * k}-{45805 + 500 * k}", tls, args,
                                f"10.93.{1 + k}.0/24" if args.netns else None))
                k += 1
        for r in runs:
            r.load()
        time.sleep(args.before)
        for rep in range(1, args.repeats + 1):
            for n in range(args.migrations):
                for r in runs:  # alternating: drift and load hit every cluster alike
                    r.migrate(n + 1, rep)
                    time.sleep(args.before)
        api = {r.name: r.api_call_ms() for r in runs}
        summaries = [r.finish() for r in runs]
    finally:
        for r in runs:
            r.down()
        shutil.rmtree(tmp, ignore_errors=True)

    machine = host_machine()
    where = "netns hosts (a network namespace per node)" if args.netns else "loopback"
    print(f"\nsummary ({machine}; {where}); median (min-max) over {args.repeats} repeats of "
          f"{args.migrations} migrations per load")
    for s in summaries:
        print(f"  {s['cluster']:10} success {_fmt(s, 'success_rate')}, freeze p50 {_fmt(s, 'freeze_ms_p50', ' ms')}, "
              f"p99 {_fmt(s, 'freeze_ms_p99', ' ms')}, max {_fmt(s, 'freeze_ms_max', ' ms')}; "
              f"interrupted/migration {_fmt(s, 'interrupted_per_migration')}; attempts/migration "
              f"{_fmt(s, 'attempts_per_migration')}")
        print(f"  {'':10} clients before {_fmt(s, 'tps_before', ' txn/s')}, p95 {_fmt(s, 'p95_ms_before', ' ms')}; "
              f"around the handover / before: throughput {_fmt(s, 'tps_around_ratio', 'x')}, "
              f"p95 {_fmt(s, 'p95_around_ratio', 'x')}; longest transaction around it "
              f"{_fmt(s, 'max_ms_around', ' ms')}")
        print(f"  {'':10} acknowledged {s['acked']}, lost {s['acked_lost']}, wrong rows {s['wrong_rows']}; "
              f"client errors {s['client_errors']}; agent call kept-open {api[s['cluster']]['kept_open']} ms, "
              f"new connection {api[s['cluster']]['new_connection']} ms")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"machine": machine, "netns": args.netns, "args": vars(args),
                                                   "summaries": summaries, "api_call_ms": api,
                                                   "migrations": [row for r in runs for row in r.rows]}, indent=2))
    if args.plot:
        plot([row for r in runs for row in r.rows], args.max_freeze, Path(args.plot), machine)
        print(f"plot: {args.plot}")
    ok = all(s["acked_lost"] == 0 and s["wrong_rows"] == 0 and s["success_rate"]["min"] == 1.0 for s in summaries)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
