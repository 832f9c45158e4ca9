"""bench/run delta: how fast a migration target drains a binlog backlog, per applier configuration.

Two real tenants on loopback: a source and a replica that follows it with
MariaDB GTID replication (what a migration target runs in the delta phase).
For each configuration and repetition:

1. the replica's apply (SQL thread) is stopped, its binlog fetch (IO thread) keeps running;
2. the applier is configured (durable or catch-up mode, serial or N parallel threads and a mode);
3. the source runs the closed-loop write-heavy load until it has committed --backlog transactions;
4. once the relay log holds them all, the apply is started and timed until it reaches the source.

drain rate = backlog / drain time. Configurations run interleaved in every
repetition, so the noise of a shared machine falls on all of them alike; the
median of the repetitions is reported, with each configuration's ratio to
serial-durable. `--live` also runs the load and the applier together and
reports whether the apply keeps up (the target's lag after the load stops).

    bench/run delta                          # the standard set, 3 repetitions
    bench/run delta --configs mpl --reps 3   # drain rate vs MPL 1..16 (Middle-R Fig. 3 view)
    bench/run delta --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path


import pymysql
from slacker import mariadb
from slacker.client import Endpoint
from slacker.mariadb import durability as catchup
from slacker.delta import gtid as gtids
from slacker.delta.applier import ReplicationApplier, SourceLink
from slacker.tenants import TenantManager
from slacker.ycsb import LoadConfig, RunConfig, TenantTarget, load_table, load_workload
from slacker.ycsb.runner import Harness
from benchkit import REPO
from benchkit.host import cpu_s, machine

PORT_RANGE = (46306, 46400)
CONN = ReplicationApplier.CONNECTION




# Server variables a configuration may change; every other configuration gets them back at these values.
KNOB_DEFAULTS = {"slave_parallel_max_queued": 131072, "innodb_log_file_buffering": 0}
# "-catchup" in a configuration's name: the catch-up mode of issue 13's first two sessions (no fsync per
# commit, the redo log still written to the OS at every commit); "-flush0" adds
# innodb_flush_log_at_trx_commit=0 (the redo log stays in the server's buffer; what catchup.RELAXED is now).
CATCHUP_2 = {"sync_binlog": 0, "innodb_flush_log_at_trx_commit": 2}


def config(name, threads=0, mode="optimistic", relaxed=True, **knobs):
    return {"name": name, "threads": threads, "mode": mode, "relaxed": relaxed, "knobs": knobs}


CONFIG_SETS = {
    "standard": [
        config("serial-durable", 0, relaxed=False),
        config("serial-catchup", 0),
        config("optimistic-4-durable", 4, relaxed=False),
        config("conservative-4-catchup", 4, "conservative"),
        config("optimistic-2-catchup", 2),
        config("optimistic-4-catchup", 4),
        config("optimistic-8-catchup", 8),
        config("aggressive-4-catchup", 4, "aggressive"),
    ],
    "knobs": [
        config("serial-durable", 0, relaxed=False),
        config("optimistic-8-catchup", 8),
        config("optimistic-8-catchup-q4m", 8, slave_parallel_max_queued=4 << 20),
        config("optimistic-8-catchup-flush0", 8, innodb_flush_log_at_trx_commit=0),
    ],
    # issue 13, third session: where the rest of the 3x goal could come from (redo writes per commit).
    "s3": [
        config("serial-durable", 0, relaxed=False),
        config("serial-catchup", 0),
        config("serial-catchup-flush0", 0, innodb_flush_log_at_trx_commit=0),
        config("optimistic-8-catchup", 8),
        config("optimistic-8-catchup-flush0", 8, innodb_flush_log_at_trx_commit=0),
        config("optimistic-16-catchup-flush0", 16, innodb_flush_log_at_trx_commit=0),
        config("conservative-8-catchup-flush0", 8, "conservative", innodb_flush_log_at_trx_commit=0),
    ],
    # The target's redo log buffer in catch-up mode: with innodb_flush_log_at_trx_commit=0 the redo of up to a
    # second of commits stays in the buffer, and a full buffer makes the applier wait for a write (the
    # target's Innodb_log_waits); with =2 each commit group writes it out, through the file system's cache
    # while innodb_log_file_buffering is ON. Run once per innodb_log_buffer_size to compare.
    "logbuf": [
        config("optimistic-8-flush0", 8, **catchup.RELAXED),
        config("optimistic-8-flush0-buffered", 8, **catchup.RELAXED, innodb_log_file_buffering=1),
        config("optimistic-8-flush2-buffered", 8, sync_binlog=0, innodb_flush_log_at_trx_commit=2,
               innodb_log_file_buffering=1),
    ],
    "mpl": [config(f"optimistic-{n}-catchup", n) for n in (1, 2, 3, 4, 6, 8, 12, 16)]
           + [config("serial-catchup", 0), dict(config("adaptive-catchup", 4), auto=True)],
    # Middle-R Figure 3 view in the product's catch-up mode (catchup.RELAXED), adaptive loop included.
    "mpl3": [config(f"optimistic-{n}", n, **catchup.RELAXED) for n in (1, 2, 4, 6, 8, 12, 16)]
            + [dict(config("adaptive", 4, **catchup.RELAXED), auto=True)],
    "live": [
        config("serial-durable", 0, relaxed=False),
        config("serial-catchup", 0),
        config("optimistic-2-catchup", 2),
        config("optimistic-4-catchup", 4),
        config("optimistic-8-catchup", 8),
        dict(config("adaptive-catchup", 4), auto=True),
    ],
}


class Rig:
    def __init__(self, root: Path, rows: int, mpl: int, workload: list[str], overrides: dict) -> None:
        self.mgr = TenantManager(root / "node", host="127.0.0.1", node="bench", port_range=PORT_RANGE)
        self.src = self.mgr.create("dsrc")
        self.dst = self.mgr.create("ddst")
        self.rows, self.mpl = rows, mpl
        self.wl = load_workload(workload, {"recordcount": rows, **overrides})
        self.sconn = self.src.admin_connect(timeout_s=10)
        self.dconn = self.dst.admin_connect(timeout_s=10)
        start = self.q(self.sconn, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0] or ""
        self.applier = ReplicationApplier(lambda: self.dst.admin_connect(timeout_s=10))
        self.applier.start(SourceLink(self.src.host, self.src.port, mariadb.REPL_USER, self.src.repl_password()),
                           start)
        ep = self.endpoint()
        load_table(LoadConfig(endpoint=ep, workload=self.wl, threads=4, drop=True))
        self.applier.wait_for(self.source_gtid(), 600)

    def redo(self) -> dict[str, int]:
        rows = self.q(self.dconn, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_lsn_current', 'Innodb_log_waits')")
        return {k: int(v) for k, v in rows} | {
            "innodb_log_buffer_size": int(self.q(self.dconn, "SELECT @@innodb_log_buffer_size")[0][0])}

    @staticmethod
    def q(conn, sql, args=None):
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def endpoint(self) -> Endpoint:
        return Endpoint(tenant="dsrc", host=self.src.host, port=self.src.port, user="app",
                        password=self.src.app_password(), node="bench", epoch=1)

    def source_gtid(self) -> str:
        return self.q(self.sconn, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0] or ""

    def io_pos(self) -> str:
        with self.dconn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SHOW SLAVE '{CONN}' STATUS")
            return cur.fetchone()["Gtid_IO_Pos"]

    def configure(self, cfg: dict) -> None:
        self.q(self.dconn, f"STOP SLAVE '{CONN}'")
        self.q(self.dconn, "SET GLOBAL slave_parallel_threads = %s", (cfg["threads"],))
        self.q(self.dconn, "SET GLOBAL slave_parallel_mode = %s", (cfg["mode"],))
        with self.dconn.cursor() as cur:
            catchup.set_durability(cur, CATCHUP_2 if cfg["relaxed"] else catchup.DURABLE)
            for name, value in (KNOB_DEFAULTS | cfg.get("knobs", {})).items():
                cur.execute(f"SET GLOBAL {name} = %s", (value,))
        self.q(self.dconn, f"START SLAVE '{CONN}' IO_THREAD")

    def load(self, duration_s: float | None, until_txns: int | None, seed: int):
        """Closed-loop write load; stops after duration_s or once until_txns have committed."""
        before = self.source_gtid()
        cfg = RunConfig(targets=[TenantTarget.fixed(self.endpoint(), None)], workload=self.wl, mpl=self.mpl,
                        duration_s=duration_s or 600, seed=seed, drain_timeout_s=5)
        t0 = time.monotonic()
        with Harness(cfg) as h:
            h.start()
            if until_txns:
                while gtids.transactions_between(before, self.source_gtid()) < until_txns:
                    time.sleep(0.02)
                h.stop(drain=True)
            res = h.wait()
        dt = time.monotonic() - t0
        after = self.source_gtid()
        return before, after, gtids.transactions_between(before, after), dt, res

    def drain(self, cfg: dict, backlog: int, seed: int) -> dict:
        self.configure(cfg)
        cpu0 = (cpu_s(self.src.pid()), cpu_s(os.getpid()), cpu_s(self.dst.pid()))
        before, after, txns, load_s, _ = self.load(None, backlog, seed)
        cpu1 = (cpu_s(self.src.pid()), cpu_s(os.getpid()), cpu_s(self.dst.pid()))
        # CPU split while the source committed the backlog: its server, the load clients (this process), the
        # target (its binlog fetch only: the apply is stopped).
        load_split = [round((b - a) / load_s, 2) for a, b in zip(cpu0, cpu1)]
        deadline = time.monotonic() + 120
        while not gtids.reached(self.io_pos(), after):
            if time.monotonic() > deadline:
                raise RuntimeError("relay log did not catch up")
            time.sleep(0.05)
        adaptive = None
        if cfg.get("auto"):
            # The migration's adaptive loop (slacker.delta.engine) on the same replication link, from
            # its usual start (MPL 4): its drain rate includes the cost of its own search.
            from slacker.delta.engine import EngineApplier

            adaptive = EngineApplier(lambda: self.dst.admin_connect(timeout_s=10), kind="concurrent", mpl="auto")
            adaptive._sampler = threading.Thread(target=adaptive._sample_loop, daemon=True)
        t0 = time.monotonic()
        c0 = cpu_s(self.dst.pid())
        s0 = cpu_s(self.src.pid())
        redo0 = self.redo()
        self.q(self.dconn, f"START SLAVE '{CONN}' SQL_THREAD")
        if adaptive is not None:
            adaptive._t0 = t0
            adaptive._sampler.start()
        self.applier.wait_for(after, 600)
        dt = time.monotonic() - t0
        cores = (cpu_s(self.dst.pid()) - c0) / dt
        src_cores = (cpu_s(self.src.pid()) - s0) / dt
        redo1 = self.redo()
        out = {"config": cfg["name"], "backlog": txns, "drain_s": round(dt, 3), "drain_tps": round(txns / dt, 1),
               "source_tps": round(txns / load_s, 1), "target_cores": round(cores, 2),
               "source_cores_drain": round(src_cores, 2),
               "load_cores": {"source": load_split[0], "clients": load_split[1], "target": load_split[2]},
               "loadavg": os.getloadavg()[0],
               # the target's redo: bytes per second of the drain, waits for a full log buffer, the buffer's size
               "redo_mb_s": round((redo1["Innodb_lsn_current"] - redo0["Innodb_lsn_current"]) / dt / 1e6, 2),
               "log_waits": redo1["Innodb_log_waits"] - redo0["Innodb_log_waits"],
               "log_buffer_mib": redo1["innodb_log_buffer_size"] >> 20}
        if adaptive is not None:
            adaptive._stop.set()
            adaptive._sampler.join()
            adaptive.close()
            out["mpl_end"] = adaptive.mpl
            out["mpl_path"] = [(s.t_s, s.mpl, s.apply_tps) for s in adaptive.samples if s.saturated]
        return out

    def live(self, cfg: dict, rate: float | None, duration_s: float, seed: int) -> dict:
        """Load and applier together: does the target keep up? (lag = transactions fetched or not, not applied)."""
        from slacker.delta.engine import EngineApplier

        self.applier.abort()
        kind = "serial" if cfg["threads"] == 0 else "concurrent"
        mpl = "auto" if cfg.get("auto") else max(1, cfg["threads"])
        applier = EngineApplier(lambda: self.dst.admin_connect(timeout_s=10), kind=kind, mpl=mpl,
                                catchup_mode=cfg["relaxed"], datadir=self.dst.datadir)
        if not cfg["relaxed"]:
            with self.dconn.cursor() as cur:
                catchup.set_durability(cur, catchup.DURABLE)
        start = self.q(self.dconn, "SELECT @@GLOBAL.gtid_slave_pos")[0][0] or ""
        applier.start(SourceLink(self.src.host, self.src.port, mariadb.REPL_USER, self.src.repl_password()), start)
        self.applier = applier
        lags, stop = [], threading.Event()

        def sample():
            t0 = time.monotonic()
            while not stop.wait(1.0):
                src = self.source_gtid()
                applied = self.q(self.dconn, "SELECT @@GLOBAL.gtid_slave_pos")[0][0] or ""
                lags.append((round(time.monotonic() - t0, 1), gtids.transactions_between(applied, src), applier.mpl))

        th = threading.Thread(target=sample, daemon=True)
        applied0 = start
        th.start()
        if rate is None:
            before, after, txns, load_s, _ = self.load(duration_s, None, seed)
        else:
            before = self.source_gtid()
            cfg_run = RunConfig(targets=[TenantTarget.fixed(self.endpoint(), rate)], workload=self.wl,
                                mpl=max(self.mpl, 32), duration_s=duration_s, seed=seed, drain_timeout_s=5)
            t0 = time.monotonic()
            with Harness(cfg_run) as h:
                h.start()
                h.wait()
            load_s = time.monotonic() - t0
            after = self.source_gtid()
            txns = gtids.transactions_between(before, after)
        stop.set()
        th.join()
        applied_end = self.q(self.dconn, "SELECT @@GLOBAL.gtid_slave_pos")[0][0] or ""
        lag_end = gtids.transactions_between(applied_end, after)
        apply_tps = gtids.transactions_between(applied0, applied_end) / load_s
        t_catch = time.monotonic()
        applier.wait_for(after, 600)
        catch_s = time.monotonic() - t_catch
        # Converges: the lag stays small (under 2 s of writes) instead of growing with the load.
        source_tps = txns / load_s
        converges = lag_end <= max(200, 2 * source_tps) if source_tps else True
        st = applier.stats()
        return {"config": cfg["name"], "offered": rate or "closed", "source_tps": round(source_tps, 1),
                "apply_tps": round(apply_tps, 1), "lag_end": lag_end, "catch_up_s": round(catch_s, 2),
                "converges": converges, "mpl_end": applier.mpl, "best_mpl": st.get("best_mpl"),
                "lags": lags, "mpl_samples": [(s["t_s"], s["mpl"], s["apply_tps"], s["saturated"])
                                               for s in st.get("samples", [])]}

    def close(self) -> None:
        try:
            self.applier.abort()
        finally:
            for t in self.mgr.list():
                self.mgr.kill_tenant(t)


def live_main(rig: Rig, configs: list[dict], args, results: list) -> None:
    rates = [None if r.strip() == "max" else float(r) for r in args.live.split(",")]
    for rep in range(args.reps):
        for rate in rates:
            for cfg in configs:
                r = rig.live(cfg, rate, args.duration, seed=rep * 1000 + len(results))
                r["rep"] = rep
                results.append(r)
                print(f"rep {rep} offered {str(r['offered']):>6} {r['config']:<22} source {r['source_tps']:7.0f}/s "
                      f"apply {r['apply_tps']:7.0f}/s lag at end {r['lag_end']:6d} "
                      f"({'keeps up' if r['converges'] else 'FALLS BEHIND'}) mpl {r['mpl_end']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="standard", help="standard, mpl, or comma-separated names")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backlog", type=int, default=8000, help="transactions in the backlog")
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--mpl", type=int, default=16, help="load clients (closed loop)")
    ap.add_argument("-p", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--json", dest="json_path")
    ap.add_argument("--live", default=None, metavar="RATE[,RATE...]",
                    help="instead of drains: run load and applier together at these offered rates (txn/s; "
                         "'max' = closed loop) and report whether the target keeps up")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load per --live run")
    args = ap.parse_args()
    overrides = dict(o.split("=", 1) for o in args.overrides)
    if args.configs in CONFIG_SETS:
        configs = CONFIG_SETS[args.configs]
    else:
        every = {c["name"]: c for s in CONFIG_SETS.values() for c in s}
        configs = [every[n] for n in args.configs.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    rig = Rig(root, args.rows, args.mpl, [str(REPO / "workloads" / "writeheavy")], overrides)
    results = []
    if args.live:
        try:
            live_main(rig, configs, args, results)
        finally:
            rig.close()
            shutil.rmtree(root, ignore_errors=True)
        if args.json_path:
            Path(args.json_path).write_text(json.dumps({
                "machine": machine(),
                "args": vars(args), "results": results}, indent=1))
        return
    try:
        for rep in range(args.reps):
            order = configs[rep % len(configs):] + configs[:rep % len(configs)]  # rotate: no config always first
            for cfg in order:
                r = rig.drain(cfg, args.backlog, seed=rep * 100 + len(results))
                r["rep"] = rep
                results.append(r)
                print(f"rep {rep} {r['config']:<24} backlog {r['backlog']:>6} drained in {r['drain_s']:6.2f}s "
                      f"= {r['drain_tps']:8.1f} txn/s (source committed {r['source_tps']:.0f}/s) target {r['target_cores']} cores"
                      f" redo {r['redo_mb_s']} MB/s, {r['log_waits']} waits for the {r['log_buffer_mib']} MiB log buffer"
                      + (f" MPL path {[m for _, m, _ in r['mpl_path']]}" if "mpl_path" in r else ""), flush=True)
    finally:
        rig.close()
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(r["drain_tps"] for r in results if r["config"] == "serial-durable") \
        if any(r["config"] == "serial-durable" for r in results) else None
    summary = []
    print(f"\n{'config':<26}{'median txn/s':>14}{'min':>9}{'max':>9}{'x serial-durable':>18}")
    for cfg in configs:
        rates = [r["drain_tps"] for r in results if r["config"] == cfg["name"]]
        med = statistics.median(rates)
        summary.append({"config": cfg["name"], "median_tps": med, "rates": rates,
                        "ratio": round(med / base, 2) if base else None})
        ratio = f"{med / base:.2f}" if base else "-"
        print(f"{cfg['name']:<26}{med:>14.0f}{min(rates):>9.0f}{max(rates):>9.0f}{ratio:>18}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({
            "machine": machine(),
            "args": vars(args), "results": results, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
