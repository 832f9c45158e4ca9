"""The handover fault matrix: live migrations under a steady write load, one random fault each.

Starts its own three-node local cluster (node-3 serves the directory), a tenant on node-1
driven by a writer that logs every acknowledged commit and by --oltp-clients closed-loop
clients running multi-statement transactions on hot rows (slacker.oltp, default 4), and a prober that tries a write on
every node's copy of the tenant every 100 ms. Then migrates the tenant back and forth between
node-1 and node-2; each migration gets one fault (kind and moment drawn from the seed):

  kinds:   abort, kill-source-agent, kill-target-agent, kill-source-server, kill-target-server,
           stop-directory (SIGSTOP of the directory's agent for a few seconds)
  moments: snapshot, delta, fenced (the source fenced, before the flip), flipped (after the flip)

After each fault it restarts what was killed, waits until exactly one server accepts writes and
it is the one the directory names, with nothing of the migration left on either node. At the end:
acknowledged writes lost (must be 0) and moments with two writable servers (must be 0), outcomes
(succeeded / rolled back / finished forward), freeze p50/p99/max.

    bench/run chaos [--migrations 60] [--seed 1] [--rate 50] [--json FILE]

With --phases, the phase-aimed mode instead (bench/benches/chaos/by_phase.py: each fault aimed at a phase
of the migration, the cluster brought back with `slacker cluster up --dir`, time to writable and
hand steps counted):

    bench/run chaos --phases --seeds 3 --moves 60 --json 'docs/data/chaos-phases-seed{seed}.json'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.config import load_cluster
from benchkit.faults import Scenario, directory_stopped
from benchkit.migration import acked_ids_present, cluster_down
from benchkit.stats import num, pct

KINDS = ("abort", "kill-source-agent", "kill-target-agent", "kill-source-server", "kill-target-server",
         "stop-directory")
BEFORE = ("snapshot", "delta", "fenced")


def plan(n: int, seed: int) -> list[tuple[str, str]]:
    """n (kind, moment) pairs; every third one after the flip, the rest spread over the earlier moments."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        moment = "flipped" if i % 3 == 2 else rng.choice(BEFORE)
        out.append((rng.choice(KINDS), moment))
    rng.shuffle(out)
    return out


class Runner:
    def __init__(self, s: Scenario, max_freeze_s: float, rate: float) -> None:
        self.s = s
        self.cluster = s.cluster
        self.max_freeze_s = max_freeze_s
        self.copy_rate = rate

    def doc(self, node: str, mid: str) -> dict | None:
        agents, _ = cluster_clients(self.cluster)
        try:
            return agents[node].request("GET", f"/v1/migrations/{mid}", timeout_s=5)
        except Exception:
            return None

    def wait_for(self, pred, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.02)
        return False

    def strike(self, kind: str, source: str, target: str, mid: str) -> list:
        """Do the fault; returns what must be undone afterwards."""
        s = self.s
        undo = []
        if kind == "abort":
            agents, _ = cluster_clients(self.cluster)
            try:
                agents[source].request("POST", f"/v1/migrations/{mid}/abort", {}, timeout_s=10)
            except Exception as exc:  # refused past the flip: that is the point
                undo.append(("note", type(exc).__name__))
        elif kind == "kill-source-agent":
            s.kill_agent(source)
            undo.append(("restart", source))
        elif kind == "kill-target-agent":
            s.kill_agent(target)
            undo.append(("restart", target))
        elif kind in ("kill-source-server", "kill-target-server"):
            try:
                s.kill_tenant_server(source if kind == "kill-source-server" else target)
            except AssertionError:  # it was gone already (retired, or not started yet)
                undo.append(("note", "no server to kill"))
        elif kind == "stop-directory":
            undo.append(("resume", directory_stopped(s, "node-3")))
        return undo

    def one(self, i: int, kind: str, moment: str, source: str, target: str) -> dict:
        s = self.s
        agents, _ = cluster_clients(self.cluster)
        body = {"tenant": s.tenant, "target": target, "max_freeze_s": self.max_freeze_s, "lease_ttl_s": 4}
        if moment == "snapshot":
            body["rate_bytes_per_s"] = self.copy_rate
        elif moment == "delta":
            body["hold_s"] = {"delta": 2}
        elif moment == "flipped":
            body["hold_s"] = {"flipped": 2}
        held = kind == "stop-directory" and moment == "fenced"
        if held:
            # The fenced window before the flip lasts milliseconds: hold it open so the directory is
            # really down when the flip is sent (the unknown-outcome case). Its freeze is not counted.
            body["hold_s"] = {"fenced": 1}
            body["max_freeze_s"] = 10
        t0 = time.monotonic()
        mid = agents[source].request("POST", "/v1/migrations", body, timeout_s=60)["id"]
        if moment == "snapshot":
            self.wait_for(lambda: (self.doc(source, mid) or {}).get("bytes_done", 0) > 300_000, 60)
        elif moment == "delta":
            self.wait_for(lambda: (self.doc(source, mid) or {}).get("phase") == "delta", 90)
        elif moment == "fenced":
            self.wait_for(lambda: s.fenced_on(source), 90)
        else:
            self.wait_for(lambda: (self.doc(source, mid) or {}).get("past_point_of_no_return"), 90)
        at_strike = self.doc(source, mid) or {}
        undo = self.strike(kind, source, target, mid)
        time.sleep(random.uniform(1, 3) if not held else random.uniform(4, 8))
        for what, arg in undo:
            if what == "note":
                continue
            if what == "restart":
                s.restart_agent(arg)
            elif what == "resume":
                arg()
        # The migration's own end, as its (possibly restarted) source agent reports it.
        doc = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            doc = self.doc(source, mid)
            if doc is not None and not doc["active"]:
                break
            time.sleep(0.3)
        owner = s.settled(mid, timeout_s=180)
        flipped = owner == target
        # Forward after a fault that struck past the flip; succeeded if the fault came too early to
        # matter or found nothing to hit; rolled back if the directory still names the source.
        outcome = ("rolled back" if not flipped else
                   "finished forward" if at_strike.get("past_point_of_no_return") else "succeeded")
        return {"n": i, "kind": kind, "moment": moment, "struck_in": at_strike.get("phase"),
                "struck_after_flip": bool(at_strike.get("past_point_of_no_return")),
                "result": doc["result"] if doc else None, "outcome": outcome, "owner": owner,
                "freeze_ms": doc.get("freeze_ms") if doc else None,
                "outage_s": doc.get("directory_outage_s") if doc else None,
                "attempts": len(doc.get("handover_attempts") or []) if doc else None, "held_in_freeze": held,
                "seconds": round(time.monotonic() - t0, 1)}


def _oltp_summary(s: Scenario) -> dict:
    check = s.oltp_check()
    return {"acked": len(s.oltp.acked), "acked_lost": len(check.missing_acked),
            "refused_present": len(check.unexpected), "balance_errors": len(check.balance_errors),
            "errors": dict(s.oltp.errors)}


def main() -> None:
    if "--phases" in sys.argv[1:]:
        from benches.chaos.by_phase import main as phases_main
        phases_main(sys.argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--migrations", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=50, help="acknowledged writes per second")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--oltp-clients", type=int, default=4,
                    help="clients running bank transfers (SELECT ... FOR UPDATE on hot rows) beside the writer; 0: none")
    ap.add_argument("--max-freeze", type=float, default=0.5, help="seconds")
    ap.add_argument("--copy-rate", type=float, default=2_000_000, help="bytes/s of the copy when striking in it")
    ap.add_argument("--json", help="write every run and the summary here")
    ap.add_argument("--keep", action="store_true", help="leave the cluster directory behind")
    ap.add_argument("--only", help="KIND:MOMENT for every migration (to reproduce one case)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="sl-chaos-", dir="/tmp"))
    run_dir = tmp / "run"
    path = local_cluster.up(run_dir, nodes=3, first_address="127.0.88.2", api_port=7790,
                            port_range="33306-34305", directory_node="node-3", fault_injection=True)
    os.environ["SLACKER_CLUSTER"] = str(path)
    cluster = load_cluster(str(path))
    s = Scenario(cluster, tenant="chaos", rows=args.rows, rate_per_s=args.rate, oltp_clients=args.oltp_clients)
    runner = Runner(s, args.max_freeze, args.copy_rate)
    random.seed(args.seed)
    rows = []
    where = "node-1"
    print(f"# bench/run chaos seed={args.seed} migrations={args.migrations} rate={args.rate}/s "
          f"max_freeze={args.max_freeze * 1000:.0f}ms on {platform.node()} ({os.cpu_count()} cpus)", flush=True)
    print(f"{'n':>3} {'kind':<19} {'moment':<9} {'struck in':<10} {'after flip':<10} {'outcome':<17} "
          f"{'freeze ms':>9} {'outage s':>8} {'secs':>5}", flush=True)
    try:
        cases = plan(args.migrations, args.seed)
        if args.only:
            cases = [tuple(args.only.split(":", 1))] * args.migrations
        for i, (kind, moment) in enumerate(cases, 1):
            target = "node-2" if where == "node-1" else "node-1"
            r = runner.one(i, kind, moment, where, target)
            rows.append(r)
            where = r["owner"]
            print(f"{i:>3} {kind:<19} {moment:<9} {str(r['struck_in']):<10} {str(r['struck_after_flip']):<10} "
                  f"{r['outcome']:<17} {r['freeze_ms'] if r['freeze_ms'] is not None else '-':>9} "
                  f"{r['outage_s'] if r['outage_s'] else '-':>8} {r['seconds']:>5}", flush=True)
    finally:
        s.stop()
        lost = acked_ids_present(cluster, s.tenant, s.writer.acked) if rows else set()
        freezes = [r["freeze_ms"] for r in rows if r["freeze_ms"] is not None and not r["held_in_freeze"]]
        within = [r["freeze_ms"] for r in rows
                  if r["freeze_ms"] is not None and not r["held_in_freeze"] and not r["outage_s"]]
        summary = {
            "migrations": len(rows),
            "after_flip": sum(r["struck_after_flip"] for r in rows),
            "outcomes": {o: sum(r["outcome"] == o for r in rows)
                         for o in ("succeeded", "rolled back", "finished forward")},
            "acked_writes": len(s.writer.acked), "acked_writes_lost": len(lost),
            **({"oltp": _oltp_summary(s)} if s.oltp is not None and rows else {}),
            "probe_rounds": s.prober.rounds, "double_writable_moments": len(s.prober.double_writable),
            "freeze_ms": {"n": len(freezes), "p50": num(pct(freezes, 0.5), 1), "p99": num(pct(freezes, 0.99), 1),
                          "max": max(freezes) if freezes else None,
                          "max_without_outage": max(within) if within else None},
            "max_freeze_ms": args.max_freeze * 1000,
            "directory_outages": [r["outage_s"] for r in rows if r["outage_s"]],
            "median_seconds_per_migration": statistics.median([r["seconds"] for r in rows]) if rows else None,
        }
        print("\n" + json.dumps(summary, indent=2), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"seed": args.seed, "runs": rows, "summary": summary}, indent=1))
        cluster_down(run_dir, purge=not args.keep)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
