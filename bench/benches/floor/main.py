"""The unthrottled copy against its floor: `slacker migrate --unthrottled` vs the bare pipeline.

The floor is the migration's own method run by hand on the same server and data:
`mariabackup --backup --stream=xbstream | mbstream -x -C DIR`, then `mariabackup --prepare`.
For each --tenants size, each repeat runs the bare pipeline and then every --variant of
`slacker migrate TENANT --to OTHER --unthrottled --json` (their order rotated each repeat), so
every migration is paired with the bare run just before it on the same data. Reported: medians
and min-max of the times and of the paired ratios, the fit seconds = fixed + size / marginal rate
over all sizes (the fixed cost per move is its intercept), and the breakdown of each migration
from its --json: the CLI's own time, the phases, the fixed steps (steps_ms) and where the copy's
sender and receiver waited and their CPU (copy_stages). With --rate-check, a fixed --rate copy per
variant and repeat on the first tenant: the rate achieved against the rate asked for.

    bench/run floor                                         # own cluster, defaults
    bench/run floor --variant copy="--data-path copy" --variant default=
    bench/run floor --cluster run/cluster.toml --tenants f200=65000 --repeats 1
    bench/run floor --report-only bench/out/floor/results.json
    bench/run floor --report-only after.json --before before.json     # two runs side by side
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

from benchkit import REPO as ROOT  # noqa: E402  (the repository, wherever the bench sits)

from benches.floor import analysis, log, runner
from benches.floor.plot import make_plot
from benches.setpoint.runner import Bench, guarded, machine_info
from slacker.errors import NotFound
from slacker.units import parse_rate


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="bench/run floor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", default="f200=65000,f800=420000,f3000=1700000",
                    help="NAME=ROWS,...: tenants of 1 KB ycsb rows, created and loaded when missing (default: "
                         "streams of about 0.2, 0.8 and 3 GB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", action="append", default=None, metavar="NAME=ARGS",
                    help="a named set of extra `slacker migrate` arguments, repeatable (default: one, 'default', "
                         "with none), e.g. copy=\"--data-path copy\"")
    ap.add_argument("--rate-check", type=parse_rate, default=None,
                    help="also a fixed --rate copy of the first tenant per variant and repeat (e.g. 20MB/s)")
    ap.add_argument("--buffer-pool", default="128M")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "out" / "floor"))
    ap.add_argument("--img", default=None, help="also copy the plot here (e.g. docs/img/floor-idle.png)")
    ap.add_argument("--data-copy", default=None, help="also write results.json here (e.g. docs/data/floor.json)")
    ap.add_argument("--address", default="127.0.77.2", help="loopback address of node-1")
    ap.add_argument("--api-port", type=int, default=7777)
    ap.add_argument("--port-range", default="29306-29405")
    ap.add_argument("--cluster", default=None, help="use this running cluster (its tenants are reused)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    ap.add_argument("--report-only", default=None, metavar="RESULTS_JSON",
                    help="print the tables and draw the plot (--img, else beside it) from a previous results.json")
    ap.add_argument("--before", default=None, metavar="RESULTS_JSON",
                    help="with --report-only: an earlier results.json shown beside it (variants before:NAME, after:NAME)")
    a = ap.parse_args(argv)
    a.tenants = [(n.strip(), int(r)) for n, r in (x.split("=") for x in a.tenants.split(",") if x.strip())]
    variants = {}
    for v in a.variant or ["default="]:
        name, _, extra = v.partition("=")
        variants[name.strip()] = shlex.split(extra)
    a.variants = variants
    # what the setpoint bench's Bench reads
    a.target_tmpfs, a.disk_read_bps, a.load, a.cpu_per_node, a.cpu_period, a.cpu_weight = "none", None, "ycsb", None, 0.1, 100
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report_only:
        res = json.loads(Path(args.report_only).read_text())
        if args.before:
            res = analysis.merge([("before", json.loads(Path(args.before).read_text())), ("after", res)])
        print(analysis.report(res))
        p = make_plot(res, Path(args.img or Path(args.report_only).with_suffix(".png")))
        print(f"plot: {p}")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    bench = Bench(args)
    res = {"command": " ".join(["bench/run floor", *(argv if argv is not None else sys.argv[1:])]),
           "machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "tenants": [n for n, _ in args.tenants], "variants": list(args.variants), "runs": []}
    bench.results = res

    def experiments() -> None:
        bench.setup()
        for name, rows in args.tenants:
            try:
                bench.node_of(name)
            except NotFound:
                bench.create_and_load(name, rows, args.buffer_pool)
        names = list(args.variants)
        for rep in range(args.repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            log(f"repeat {rep + 1}/{args.repeats} (variants in order {', '.join(order)})")
            for name, _ in args.tenants:
                runs = [runner.bare_pipeline(bench, name)]
                for v in order:
                    r = runner.migrate(bench, name, args.variants[v])
                    r["variant"] = v
                    runs.append(r)
                for r in runs:
                    r["repeat"] = rep
                    runner.log_run(r)
                res["runs"] += runs
                bench.save()
            if args.rate_check:
                for v in order:
                    r = runner.throttled(bench, args.tenants[0][0], args.rate_check, args.variants[v])
                    r.update(variant=v, repeat=rep)
                    runner.log_run(r)
                    res["runs"].append(r)
                bench.save()

    rc = guarded(bench, experiments)
    print(analysis.report(res))
    out = Path(bench.out_dir)
    p = make_plot(res, out / "floor.png")
    if p:
        print(f"plot: {p}")
        if args.img:
            shutil.copy(p, args.img)
    if args.data_copy:
        Path(args.data_copy).write_text(json.dumps(res, indent=1, default=str))
    print(f"raw results: {out / 'results.json'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
