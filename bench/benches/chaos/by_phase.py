"""`bench/run chaos --phases`: the phase-aimed chaos mode (issues 41 and 46).

Each move gets one fault aimed at a phase of the migration (phases.AIMS x phases.KINDS, spread over
the seeds), lands at a random offset inside it, and what died is brought back at once with
`slacker cluster up --dir RUN` (nothing else typed; if that is refused, the options are typed again
and the run counts a hand step). Per run: exactly one writable owner and it is the directory's,
acknowledged writes lost (direct, router), split-brain ticks, failed requests through the router,
time to writable (from the moment the last killed process runs again to the first write each writer
gets in), and whether every later move of the tenant went through with no hand step.

    bench/run chaos --phases --seeds 3 --moves 60 --json 'docs/data/chaos-phases-seed{seed}.json'
    bench/run chaos --phases --report docs/data/chaos-phases-seed*.json --plot docs/img/chaos-phases.png

With --kind shared the tenant is a database in node-1's shared server beside a neighbour on each node's shared
server (each with its own writer through the router); the faults add the copy tool (aimed at the snapshot and
prepare phases), a server kill is the node's shared server, and the runs count the neighbours' lost writes,
failed requests and time to writable after their own server's kill:

    bench/run chaos --phases --kind shared --seeds 1 --moves 60 --json 'docs/data/chaos-shared-seed{seed}.json'
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from . import phases


def _line(r: dict) -> str:
    def s(v):
        return "never" if v is None else f"{v:.2f}"
    hand = "HAND" if r.get("hand_steps") else ""
    return (f"{r['n']:>3} {r['aim']:<9} {r['kind']:<20} {r.get('landed', '-'):<10} {s(r.get('ttw_direct_s')):>7} "
            f"{s(r.get('ttw_router_s')):>7} {str(r.get('result')):<9} {'ok' if r.get('one_owner') else 'UNSAFE':<6} "
            f"{r.get('lost_direct', 0) + r.get('lost_router', 0):>4} {r.get('split_brain_ticks', 0):>5} "
            f"{r.get('router_failed', 0):>6} {r.get('seconds', 0):>6} {hand} {r.get('stuck', '')}")


HEADER = (f"{'n':>3} {'aim':<9} {'fault':<20} {'landed':<10} {'ttw dir':>7} {'ttw rtr':>7} {'result':<9} "
          f"{'safe':<6} {'lost':>4} {'split':>5} {'rfail':>6} {'secs':>6}")


def _rows_json(rows: list[dict]) -> list[dict]:
    return [{k: (phases._num(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]


def report(runs: list[dict], final: list[dict] | None = None) -> str:
    summ = phases.summary(runs)
    out = ["By the phase the fault landed in:", "", phases.markdown(phases.table(runs, by_kind=False)), "",
           "By phase and fault:", "", phases.markdown(phases.table(runs)), "", json.dumps(summ, indent=1)]
    blocked_final = [f for f in (final or []) if f.get("blocked")]
    if blocked_final:
        out.append(f"final clean moves blocked: {len(blocked_final)}")
    return "\n".join(out)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench/run chaos --phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", action="store_true", help="the phase-aimed mode (this one)")
    ap.add_argument("--kind", choices=["server", "shared"], default="server",
                    help="the tenant's kind: a whole server, or a database in the node's shared server")
    ap.add_argument("--snapshot", choices=["logical", "physical", "alternate"], default="alternate",
                    help="a shared move's snapshot method (alternate: odd moves physical, even ones logical)")
    ap.add_argument("--seeds", type=int, default=1, help="how many seeds, one fresh cluster each, run in sequence")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--moves", type=int, default=10, help="faulted moves per seed")
    ap.add_argument("--json", help="raw runs per seed; '{seed}' in the name is replaced by the seed")
    ap.add_argument("--rows", type=int, default=8000, help="rows of the tenant (~2.5 KB each; 8000: ~45 MB on disk)")
    ap.add_argument("--rate", type=float, default=40, help="acknowledged writes per second, per writer")
    ap.add_argument("--hold", type=float, default=1.5, help="seconds a migration holds at the aimed point")
    ap.add_argument("--copy-rate", type=float, default=8_000_000, help="bytes/s of the copy when aiming at the snapshot")
    ap.add_argument("--address", default="127.0.89.2", help="the first node's address")
    ap.add_argument("--api-port", type=int, default=7890)
    ap.add_argument("--port-range", default="34306-35305")
    ap.add_argument("--router", default="127.0.0.1:6133", help="the router's address (a stock client's)")
    ap.add_argument("--only", help="AIM:KIND[,AIM:KIND...] for the moves, in turn (to reproduce cases)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running and its directory behind")
    ap.add_argument("--report", nargs="+", help="print the table of these saved JSON files (no runs)")
    ap.add_argument("--plot", help="with --report: draw time to writable per phase into this PNG")
    args = ap.parse_args(argv)

    if args.report:
        runs, final = [], []
        for f in args.report:
            doc = json.loads(Path(f).read_text())
            runs += doc["runs"]
            final += doc.get("final_moves", [])
        print(report(runs, final))
        if args.plot:
            from .plot import draw
            draw(runs, args.plot)
        return

    from .aimed import Bench, Seed

    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cases = phases.plan(args.moves, seed, phases.KINDS_SHARED if args.kind == "shared" else phases.KINDS)
        if args.only:
            only = [tuple(x.split(":", 1)) for x in args.only.split(",")]
            cases = [phases.Case(*only[i % len(only)], c.offset) for i, c in enumerate(cases)]
        tmp = Path(tempfile.mkdtemp(prefix="sl-chaosph-", dir="/tmp"))
        bench = Bench(seed, tmp / "run", rows=args.rows, rate=args.rate, hold_s=args.hold, copy_rate=args.copy_rate,
                      address=args.address, api_port=args.api_port, port_range=args.port_range, router=args.router,
                      kind=args.kind, snapshot=args.snapshot)
        started = datetime.datetime.now(datetime.timezone.utc)
        print(f"# bench/run chaos --phases kind={args.kind} seed={seed} moves={args.moves} hold={args.hold}s rows={args.rows} "
              f"rate={args.rate}/s per writer, on {platform.node()} ({os.cpu_count()} cpus), "
              f"{started:%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}", flush=True)
        print(HEADER, flush=True)
        seed_run = None
        try:
            bench.start()
            seed_run = Seed(bench, cases)
            seed_run.run(on_run=lambda r: print(_line(r), flush=True))
        finally:
            bench.stop()
            runs = seed_run.runs if seed_run else []
            final = seed_run.final if seed_run else []
            lost_all = {}
            try:
                lost_all = {"direct": bench.lost(bench.direct.acked), "router": bench.lost(bench.routed.acked)}
                if getattr(bench, "neighbour_writers", None):
                    lost_all["neighbours"] = sum(bench.lost_of(nb, nb, w.acked) for nb, w in bench.neighbour_writers.items())
                    lost_all["neighbours_acked"] = sum(len(w.acked) for w in bench.neighbour_writers.values())
            except Exception as exc:
                lost_all = {"error": str(exc)[:200]}
            for f in final:
                print(f"final move {f['n']}: {f['result']} ({f['seconds']}s){' BLOCKED' if f.get('blocked') else ''}",
                      flush=True)
            text = report(runs, final)
            print(text, flush=True)
            print(f"whole seed: acknowledged direct {len(bench.direct.acked) if hasattr(bench, 'direct') else 0}, "
                  f"router {len(bench.routed.acked) if hasattr(bench, 'routed') else 0}; lost {lost_all}; "
                  f"probe rounds {bench.prober.rounds if hasattr(bench, 'prober') else 0}", flush=True)
            if args.json and runs:
                path = Path(args.json.replace("{seed}", str(seed)))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({
                    "seed": seed, "kind": args.kind, "moves": args.moves, "command": "bench/run chaos " + " ".join(argv),
                    "machine": f"{platform.node()} ({os.cpu_count()} cpus)", "started": started.isoformat(),
                    "load_end": os.getloadavg(), "hold_s": args.hold, "rows": args.rows, "rate": args.rate,
                    "runs": runs, "final_moves": final, "lost_whole_seed": lost_all,
                    "acked": {"direct": len(bench.direct.acked), "router": len(bench.routed.acked)}
                    if hasattr(bench, "direct") else {},
                    "probe_rounds": bench.prober.rounds if hasattr(bench, "prober") else 0,
                    "summary": phases.summary(runs), "table": _rows_json(phases.table(runs))}, indent=1))
            if not args.keep:
                bench.op.down()
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
