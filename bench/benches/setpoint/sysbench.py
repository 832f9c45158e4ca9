"""The sysbench load (issue 32): `sysbench oltp_read_write` at a fixed rate on the tenant, in place of the
project's harness, and the per-second latency it costs as the server counts it.

sysbench's own per-second report gives a percentile, not a mean, and the setpoint is a mean; so the
per-second mean comes from the tenant's performance_schema (transaction events of every user but
Slacker's, the controller's default source), read once a second as the tenant's application user and
following the tenant to its new owner. Records have the harness's shape (analysis.harness_records), so
the analysis is the same for both loads. sysbench's own 95th percentile per second is kept beside them
(`<name>.sysbench.log`).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from slacker.client import resolve
from slacker.errors import SlackerError
from slacker.latency import PerformanceSchemaSource

from . import log

DB = "sbtest"
PACED = Path(__file__).with_name("oltp_paced.lua")  # oltp_read_write at constant arrivals


def sysbench_cmd(ep, args, *extra: str, paced: bool = False) -> list[str]:
    return ["sysbench", str(PACED) if paced else "oltp_read_write", f"--mysql-host={ep.host}", f"--mysql-port={ep.port}",
            f"--mysql-user={ep.user}", f"--mysql-password={ep.password}", f"--mysql-db={DB}",
            f"--tables={args.sb_tables}", f"--table-size={args.sb_table_size}", "--db-ps-mode=auto", *extra]


def prepare(bench, tenant: str) -> dict:
    """Create the database and sysbench's tables on the tenant (binary-protocol prepared statements)."""
    a = bench.args
    t0 = time.monotonic()
    ep = resolve(tenant, directory=bench.directory, agents=bench.agents)
    conn = ep.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    finally:
        conn.close()
    p = subprocess.run(sysbench_cmd(ep, a, "--threads=2", "prepare"), capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise SlackerError("sysbench prepare failed", (p.stderr or p.stdout).strip()[-300:], "")
    info = {"load": "sysbench", "tables": a.sb_tables, "table_size": a.sb_table_size,
            "load_s": round(time.monotonic() - t0, 1)}
    log(f"tenant {tenant}: sysbench {a.sb_tables} x {a.sb_table_size:,} rows prepared in {info['load_s']}s")
    return info


class SysbenchLoad:
    """sysbench oltp_read_write at --tps with --sb-threads threads on one tenant, and a sampler writing
    the tenant's per-second mean transaction latency (performance_schema) as harness records."""

    def __init__(self, bench, name: str, tenants: list[str], rates: list[float], records: int,
                 steps: list[str] = (), time_s: float = 7200, sample: bool = True) -> None:
        if len(tenants) != 1 or steps:
            raise SlackerError("the sysbench load runs on one tenant at a fixed rate", "", "use the harness (--load ycsb)")
        self.bench, self.name, self.tenant = bench, name, tenants[0]
        self.out_path = bench.out_dir / f"{name}.harness.jsonl"
        self.log_path = bench.out_dir / f"{name}.sysbench.log"
        a = bench.args
        ep = routed(bench, resolve(self.tenant, directory=bench.directory, agents=bench.agents))
        # --sb-paced (the stable protocol): constant arrivals; else sysbench's own Poisson --rate
        paced = getattr(a, "sb_paced", False)
        own = ["--own-clock=on"] if paced and getattr(a, "own_clock", False) else []
        cmd = sysbench_cmd(ep, a, f"--threads={a.sb_threads}",
                           f"--paced-rate={rates[0]:g}" if paced else f"--rate={rates[0]:g}", f"--time={time_s:.0f}",
                           "--report-interval=1", "--mysql-ignore-errors=all", *own, "run", paced=paced)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        bench.cpu.extra_pids.add(self.proc.pid)
        bench.harnesses.append(self)
        self.started = time.time()
        self.result = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(rates[0],), daemon=True)
        if sample:
            self._thread.start()
        else:  # the caller measures the server itself (oltp.Probe): no second sampler
            self.out_path.write_text("")

    def url(self) -> str:  # no metrics endpoint: the controller reads performance_schema (its default)
        return ""

    def _sample(self, rate: float) -> None:
        src, node, prev, k = None, None, None, 0
        t_start = time.time()
        with open(self.out_path, "w") as out:
            while not self._stop.wait(1.0 - (time.time() - t_start) % 1.0):
                try:
                    own = self.bench.directory.lookup(self.tenant)
                    if src is None or own.node != node:
                        if src is not None:
                            src.close()
                        ep = resolve(self.tenant, directory=self.bench.directory, agents=self.bench.agents)
                        src = PerformanceSchemaSource(lambda ep=ep: ep.connect(timeout_s=2), kind="transactions",
                                                      exclude_users=("slacker",), name="sysbench-sampler")
                        node, prev = own.node, None
                    now = time.time()
                    s, c = src._snapshot()
                except Exception:  # noqa: BLE001 - the tenant moving: try again next second
                    prev = None
                    continue
                if prev is not None and c >= prev[2] and now > prev[0]:
                    dn, dt = c - prev[2], now - prev[0]
                    k += 1
                    rec = {"t_s": round(now - t_start, 3), "interval_s": round(dt, 4),
                           "time": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
                           "tenant": self.tenant, "phase": "run", "target_tps": rate, "completed": dn,
                           "offered_tps": rate, "achieved_tps": dn / dt, "queue_length": 0,
                           "latency_mean_s": (s - prev[1]) / dn if dn else None, "latency_p99_s": None, "node": node}
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                prev = (now, s, c)
        if src is not None:
            src.close()

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SlackerError("sysbench exited", Path(self.log_path).read_text()[-300:], "")
            if self.out_path.exists() and self.out_path.stat().st_size > 0:
                return
            if not self._thread.is_alive() and "@lat " in Path(self.log_path).read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise SlackerError("sysbench did not start", f"no latency in {timeout_s:.0f}s", "")

    def stop(self) -> None:
        if self.result is None:
            self._stop.set()
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            if self._thread.is_alive():
                self._thread.join(10)
            self._log.close()
            self.result = self.proc.returncode
        if self in self.bench.harnesses:
            self.bench.harnesses.remove(self)

    def kill(self) -> None:
        self.stop()

    def records(self) -> list[dict]:
        from .analysis import harness_records
        return harness_records(self.out_path) if self.out_path.exists() else []

    def own_clock(self, service: bool = False) -> dict[int, tuple[float, float]]:
        """sysbench's own clock (--own-clock): {second's end (unix s): (transactions, summed latency s)},
        the latency from each transaction's scheduled arrival (or, `service`, from its start)."""
        return own_clock(Path(self.log_path), service)


def own_clock(path: Path, service: bool = False) -> dict[int, tuple[float, float]]:
    """The @lat lines of oltp_paced.lua's --own-clock in a sysbench log, summed over threads per second."""
    out: dict[int, tuple[float, float]] = {}
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("@lat "):
            continue
        try:
            _, sec, _tid, n, resp, serv = line.split()
            k, n_, v = int(sec) + 1, float(n), float(serv if service else resp)
        except ValueError:
            continue
        c, s = out.get(k, (0.0, 0.0))
        out[k] = (c + n_, s + v)
    return out


def routed(bench, ep):
    """The tenant's endpoint through the bench's router (`bench.router_listen`), if it has one: the router's
    address and the application user named for the tenant (user@tenant)."""
    listen = getattr(bench, "router_listen", None)
    if not listen:
        return ep
    import dataclasses
    host, _, port = listen.rpartition(":")
    return dataclasses.replace(ep, host=host, port=int(port), user=f"{ep.user}@{ep.tenant}")
