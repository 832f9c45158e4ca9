"""bench/setpoint as a package: the runner, the analysis, the plots, and one module per experiment.

    runner.py     the cluster, the tenants, one harness run around one migration (Bench.run_one)
    analysis.py   pure functions over what a run wrote, and the report's tables
    plots.py      matplotlib
    fig5.py, fig11.py, fig13a.py, fig13b.py, threshold.py, gains.py, compare.py, stable.py, oltp.py
                  the experiments: run(bench, ...) -> the result dict it also stores in bench.results
    protocol.py   the pure parts of stable and oltp: gates, the oracle, setpoint multiples, rotation, paired
                  stats; oltp's paired ratios, best oracle, 90 % interval, recovery time, clock agreement
    oltp_paced.lua  sysbench oltp_read_write at constant arrivals (the stable plant's sysbench load), with
                  each thread's per-second latency sums (--own-clock) for oltp

A new experiment is a module with a run(bench, ...) function, a name in bench/setpoint's
EXPERIMENTS and a line in its dispatch; its table goes into analysis.report, its plot into
plots.make_plots.
"""

from __future__ import annotations

import time


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
