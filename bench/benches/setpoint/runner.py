"""bench/setpoint's runner: its own two-node cluster, the tenants, and one harness run around one migration.

Bench.run_one is the unit every experiment is made of: start `slacker ycsb run`
on the tenants, warm up, migrate one tenant (fixed rate, a controller, or
unthrottled), stop the harness, and compute the latency before and during the
copy from the harness's per-second records. A CpuMonitor records what the rest
of the (shared) machine did meanwhile.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from benchkit import REPO as ROOT
from slacker import cgroups, local_cluster
from slacker.agent.client import cluster_clients
from slacker.agent.tenant_stats import data_bytes
from slacker.client import resolve
from slacker.config import load_cluster
from slacker.errors import SlackerError
from slacker.migration.options import MigrationOptions, MigrationRequest
from slacker.migration.remote import follow, start_migration
from slacker.units import parse_server_size
from slacker.ycsb.process import BenchmarkProcess

from . import log
from .analysis import MB, harness_records, latency_stats, mbs, ms, ts_of

WORKLOAD = str(ROOT / "workloads" / "slacker")
SETTLED_DIRTY_PAGES = 200  # 16 KiB pages: ~3 MB (in practice the wait runs to its 4 min cap after a 1 GB load)


def drop_page_cache() -> None:
    """Write back and drop the page cache (root): the files a migration just wrote are cached otherwise."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as exc:
        log(f"cannot drop the page cache ({exc}); the copy may read from memory")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port



# ----------------------------------------------------------------------------------------------
# neighbour CPU: the VM is shared; record how busy the rest of it was

class CpuMonitor:
    """Samples /proc every second: total busy CPU, and the part used by this benchmark's processes.

    Ours = processes whose command line contains the run directory (agents, tenants,
    mariabackup, mbstream) or that are a harness we started, with their reaped
    children (cutime/cstime). The rest is the neighbours'.
    """

    def __init__(self, *markers: str) -> None:
        self.markers = [m.encode() for m in markers if m]
        self.extra_pids: set[int] = set()
        self.samples: list[tuple[float, float, float]] = []  # (wall ts, busy cores, ours cores)
        self.disk: list[tuple[float, float, float, float]] = []  # (wall ts, read MB/s, write MB/s, io stall share)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-monitor", daemon=True)
        self._hz = os.sysconf("SC_CLK_TCK")

    def start(self) -> "CpuMonitor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(3)

    @staticmethod
    def _total() -> tuple[float, float]:
        with open("/proc/stat") as f:
            parts = [float(x) for x in f.readline().split()[1:]]
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
        return sum(parts[:8]) - idle, sum(parts[:8])

    def _ours(self) -> dict[int, float]:
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
                if pid not in self.extra_pids and not any(m in cmd for m in self.markers):
                    continue
                with open(f"/proc/{d}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
                out[pid] = sum(float(x) for x in st[11:15])  # utime stime cutime cstime
            except OSError:
                continue
        return out

    @staticmethod
    def _disk() -> tuple[float, float, float]:
        """Sectors read and written on whole disks (vd*, sd*, nvme*n*), and the io pressure 'some' total (us)."""
        rd = wr = 0.0
        try:
            with open("/proc/diskstats") as f:
                for line in f:
                    p = line.split()
                    name = p[2]
                    if (name.startswith(("vd", "sd", "xvd")) and not name[-1].isdigit()) or \
                            (name.startswith("nvme") and "p" not in name[4:]):
                        rd += float(p[5])
                        wr += float(p[9])
        except OSError:
            pass
        stall = 0.0
        try:
            with open("/proc/pressure/io") as f:
                stall = float(f.readline().split("total=")[1])
        except (OSError, IndexError, ValueError):
            pass
        return rd * 512, wr * 512, stall

    def _loop(self) -> None:
        prev_busy, _ = self._total()
        prev_ours = self._ours()
        prev_disk = self._disk()
        prev_t = time.monotonic()
        while not self._stop.wait(1.0):
            busy, _ = self._total()
            ours = self._ours()
            disk = self._disk()
            now = time.monotonic()
            dt = now - prev_t
            # a reaped child's whole CPU time lands in its parent's cutime at once: ignore such jumps
            cap = 1.5 * (os.cpu_count() or 1) * dt * self._hz
            d_ours = sum(d for d in (v - prev_ours.get(p, v) for p, v in ours.items()) if 0 < d <= cap)
            wall = time.time()
            self.samples.append((wall, (busy - prev_busy) / self._hz / dt, d_ours / self._hz / dt))
            self.disk.append((wall, (disk[0] - prev_disk[0]) / dt / MB, (disk[1] - prev_disk[1]) / dt / MB,
                              (disk[2] - prev_disk[2]) / dt / 1e6))
            prev_busy, prev_ours, prev_disk, prev_t = busy, ours, disk, now

    def summary(self, t0: float, t1: float) -> dict:
        sel = [s for s in self.samples if t0 <= s[0] <= t1]
        if not sel:
            return {"busy_cores": None, "ours_cores": None, "others_cores": None}
        busy = statistics.fmean(s[1] for s in sel)
        ours = statistics.fmean(min(s[2], s[1]) for s in sel)
        out = {"busy_cores": round(busy, 2), "ours_cores": round(ours, 2), "others_cores": round(max(0.0, busy - ours), 2)}
        dk = [d for d in self.disk if t0 <= d[0] <= t1]
        if dk:
            out.update(disk_read_mbps=round(statistics.fmean(d[1] for d in dk), 1),
                       disk_write_mbps=round(statistics.fmean(d[2] for d in dk), 1),
                       io_stall_share=round(statistics.fmean(d[3] for d in dk), 2))
        return out

    def window(self, t0: float, t1: float) -> dict:
        """The raw per-second samples in [t0, t1], for plots."""
        return {"cpu": [s for s in self.samples if t0 <= s[0] <= t1], "disk": [d for d in self.disk if t0 <= d[0] <= t1]}


# ----------------------------------------------------------------------------------------------
# harness runs

class Harness:
    """`slacker ycsb run` in its own process, with a metrics port and a per-interval file."""

    def __init__(self, bench: "Bench", name: str, tenants: list[str], rates: list[float], records: int,
                 steps: list[str] = ()) -> None:
        self.bench = bench
        self.name = name
        self.port = free_port()
        self.out_path = bench.out_dir / f"{name}.harness.jsonl"
        args = [",".join(tenants), "-P", WORKLOAD, "-p", f"recordcount={records}",
                "--rate", ",".join(f"{r:g}" for r in rates), "--mpl", str(bench.args.mpl), "--duration", "2h",
                "--metrics-port", str(self.port), "--out", str(self.out_path), "--quiet", "--drain-timeout", "5s"]
        for s in steps:
            args += ["--rate-step", s]
        if getattr(bench, "router_listen", None) and len(tenants) == 1:
            # through the bench's router: its address and the application user named for the tenant
            ep = resolve(tenants[0], directory=bench.directory, agents=bench.agents)
            pw = bench.run_dir / f"{tenants[0]}.app-password"
            pw.touch(mode=0o600)
            pw.write_text(ep.password)
            host, _, port = bench.router_listen.rpartition(":")
            args += ["--host", host, "--port", port, "--user", f"{ep.user}@{tenants[0]}", "--password-file", str(pw)]
        if bench.args.seed is not None:
            args += ["--seed", str(bench.args.seed)]
        if getattr(bench.args, "arrival", None):
            args += ["--arrival", bench.args.arrival]
        self.tenants = tenants
        self.proc = BenchmarkProcess.start(args, cluster=str(bench.cluster_file), cwd=str(ROOT))
        bench.harnesses.append(self)
        bench.cpu.extra_pids.add(self.proc.pid)
        self.started = time.time()
        self.result = None

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.proc.poll() is not None:
                raise SlackerError("benchmark harness exited", self.proc.stderr_text().strip()[-300:], "")
            if self.out_path.exists() and self.out_path.stat().st_size > 0:
                return
            time.sleep(0.2)
        raise SlackerError("benchmark harness did not start", f"no interval in {timeout_s:.0f}s", "")

    def stop(self) -> None:
        if self.result is None:
            try:
                self.result = self.proc.stop(20)
            except SlackerError as exc:
                log(f"harness {self.name}: {exc.one_line()}")
                self.proc.kill()
        if self in self.bench.harnesses:
            self.bench.harnesses.remove(self)

    def records(self) -> list[dict]:
        return harness_records(self.out_path) if self.out_path.exists() else []



def load_class(args):
    """The load a run drives: the project's harness, or sysbench (--load sysbench)."""
    if getattr(args, "load", "ycsb") == "sysbench":
        from .sysbench import SysbenchLoad
        return SysbenchLoad
    return Harness


# ----------------------------------------------------------------------------------------------
# the bench

def guarded(bench: "Bench", body) -> int:
    """Run a bench's experiments, `body()`, so that what ran is kept whatever ends them: Ctrl-C (130),
    a SystemExit with a message (2), any failure (1, with its traceback); the cluster is torn down
    and the results saved in every case. Returns the exit code (0 when `body` returned)."""
    rc = 0
    try:
        body()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        rc = 130
    except SystemExit as exc:
        log(str(exc))
        rc = 2
    except Exception as exc:  # noqa: BLE001 - report what ran, then clean up
        log(f"failed: {exc.one_line() if isinstance(exc, SlackerError) else exc}")
        traceback.print_exc()
        rc = 1
    finally:
        bench.teardown()
        bench.save()
    return rc


class Bench:
    """The cluster (set up here, or --cluster), the tenants on it, and results.json in --out-dir.

    Experiments call run_one (or run_tenant for the single tenant) and store their own
    summary in self.results under their name; every run is saved as soon as it ends."""

    def __init__(self, args) -> None:
        self.args = args
        self.out_dir = Path(args.out_dir).resolve()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.harnesses: list[Harness] = []
        self.results: dict = {"config": {}, "machine": {}, "runs": {}}
        self.tmp: Path | None = None
        self.run_dir: Path | None = None
        self.cluster_file: Path | None = None
        self.own_cluster = False
        self.cpu: CpuMonitor | None = None
        self.loadgen = None  # the load generator's cgroup (--cpu-per-node)
        self.preflight_s: list[float] = []
        self.shm: Path | None = None
        self.shm_mount: Path | None = None  # node-2's own tmpfs, unmounted at teardown
        # With the target in RAM every measured migration goes node-1 -> node-2 and the tenant comes back
        # unthrottled between runs; on one shared disk they alternate.
        self.home = "node-1" if args.target_tmpfs != "none" and not args.cluster else None
        self.router_listen: str | None = None  # the router the loads go through (--router), HOST:PORT

    # --- setup / teardown ----------------------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        if a.cluster:
            self.cluster_file = Path(a.cluster).resolve()
            self.run_dir = self.cluster_file.parent
            if (self.run_dir / "node-2").is_symlink() or os.path.ismount(self.run_dir / "node-2"):
                # a cluster left by --keep: node-2 is in RAM, so runs keep their direction
                self.home = "node-1"
        else:
            self.tmp = Path(tempfile.mkdtemp(prefix="slbench-setpoint-", dir="/tmp"))
            self.run_dir = self.tmp / "run"
            self.run_dir.mkdir()
            if a.target_tmpfs != "none":
                # node-2's data root in RAM: the copy lands off the source's disk, as on a second machine
                # A tmpfs mounted at RUN_DIR/node-2 where we can (root): the data root then lies inside the run
                # directory, which `cluster down` asks of a cluster it stops (a symlink resolves outside it and
                # down refused, leaving the agents and tenants running); else a directory on --target-tmpfs
                node2 = self.run_dir / "node-2"
                node2.mkdir()
                mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "slbench-node2", str(node2)],
                                         capture_output=True).returncode == 0
                if mounted:
                    self.shm_mount = node2
                    self.shm = node2
                else:
                    node2.rmdir()
                    self.shm = Path(tempfile.mkdtemp(prefix="slbench-setpoint-node2-", dir=a.target_tmpfs))
                    os.symlink(self.shm, node2)
                log(f"node-2's data root is on a tmpfs ({self.shm}{'' if mounted else ', on ' + a.target_tmpfs}); "
                    f"migrations go node-1 -> node-2, "
                    f"and the tenant is moved back unthrottled between runs")
            log(f"cluster up in {self.run_dir} ({a.address}, api port {a.api_port}, tenant ports {a.port_range})")
            self.own_cluster = True
            cpu = getattr(a, "cpu_per_node", None)
            budget = {"cpu_per_node": cpu, "cpu_period_s": a.cpu_period, "cpu_weight": a.cpu_weight} if cpu else {}
            self.cluster_file = local_cluster.up(self.run_dir, nodes=2, first_address=a.address,
                                                 api_port=a.api_port, port_range=a.port_range,
                                                 disk_read_per_node=a.disk_read_bps,
                                                 router="127.0.0.1:0" if getattr(a, "router", False) else None,
                                                 **budget)
            if a.disk_read_bps:
                log(f"each node reads at most {mbs(a.disk_read_bps, 0)} MB/s from the disk")
            if cpu:
                log(f"each node: {cpu:g} CPU per {a.cpu_period * 1000:g} ms, weight {a.cpu_weight}")
                # the load generator, the sampler (a thread of ours) and this process: outside the nodes'
                # budgets, in a group of their own with a high weight, so on a contended box they are run
                # soon after they wake and the latency measured is the nodes', not the wait for a core
                weight = getattr(a, "loadgen_weight", a.cpu_weight)
                self.loadgen = cgroups.create(self.run_dir, "loadgen", None, a.cpu_period, weight)
                log(f"the load generator and the sampler: no quota, weight {weight}")
                self.loadgen.add(os.getpid())
        self.cpu = CpuMonitor(str(self.run_dir), str(self.shm or "")).start()
        self.cluster = load_cluster(str(self.cluster_file))
        self.agents, self.directory = cluster_clients(self.cluster)
        if getattr(a, "router", False):
            from slacker.router import local as local_router
            self.router_listen = local_router.listening(self.run_dir)
            if not self.router_listen:
                raise SlackerError("the bench's router does not answer", f"no router in {self.run_dir}/router",
                                   "see router.log there")
            log(f"the loads go through the router on {self.router_listen}")

    def teardown(self) -> None:
        for h in list(self.harnesses):
            try:
                h.proc.kill()
            except Exception:  # noqa: BLE001
                pass
            self.harnesses.remove(h)
        if self.cpu is not None:
            self.cpu.stop()
        if self.loadgen is not None:
            (self.loadgen.path.parent.parent.parent / "cgroup.procs").write_text(f"{os.getpid()}\n")
            cgroups.remove(self.run_dir, "loadgen")
            self.loadgen = None
        if self.own_cluster and self.run_dir is not None:
            if self.args.keep:
                log(f"--keep: cluster left running; export SLACKER_CLUSTER={self.cluster_file}")
                return
            try:
                local_cluster.down(self.run_dir, purge=self.shm_mount is None)
                log("cluster down" + (" --purge" if self.shm_mount is None else ""))
            except Exception as exc:  # noqa: BLE001
                # its agents and tenants may still run: keep their directory, so `cluster down --dir` can stop them
                log(f"cluster down failed: {exc}; left in {self.run_dir} (slacker cluster down --purge --dir ...)")
                return
        if self.shm_mount is not None and not self.args.keep:
            if subprocess.run(["umount", str(self.shm_mount)], capture_output=True).returncode != 0:
                log(f"could not unmount {self.shm_mount}; left mounted (umount it by hand)")
                return
        if self.tmp is not None and not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self.shm is not None and self.shm_mount is None and not self.args.keep:
            shutil.rmtree(self.shm, ignore_errors=True)

    def slacker(self, *argv: str, timeout_s: float = 3600) -> str:
        cmd = [sys.executable, "-m", "slacker", "--cluster", str(self.cluster_file), *argv]
        p = subprocess.run(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout_s, start_new_session=True)
        if p.returncode != 0:
            raise SlackerError(f"`slacker {' '.join(argv)}` failed", (p.stderr.strip() or p.stdout.strip())[-400:], "")
        return p.stdout

    def create_and_load(self, tenant: str, records: int, buffer_pool: str, node: str = "node-1") -> dict:
        t0 = time.monotonic()
        self.agents[node].request("POST", "/v1/tenants", {"id": tenant, "buffer_pool_bytes": parse_server_size(buffer_pool)},
                                      timeout_s=180)
        if getattr(self.args, "load", "ycsb") == "sysbench":
            from .sysbench import prepare
            return prepare(self, tenant)
        out = self.slacker("ycsb", "load", tenant, "-P", WORKLOAD, "-p", f"recordcount={records}", "--json")
        doc = json.loads(out)
        info = {"tenant": tenant, "records": records, "buffer_pool": buffer_pool, "load_s": round(doc["elapsed_s"], 1),
                "rows_per_s": round(doc["rows_per_s"]), "setup_s": round(time.monotonic() - t0, 1)}
        log(f"tenant {tenant}: {records:,} rows loaded in {info['load_s']}s ({info['rows_per_s']:,} rows/s), "
            f"buffer pool {buffer_pool}")
        return info

    def settle(self, tenant: str, max_wait_s: float = 240.0) -> float:
        """Wait until the tenant has flushed the dirty pages a bulk load leaves behind.

        Right after a load InnoDB flushes and purges in the background for minutes; a run started then
        measures that as well (first runs showed 25-42 ms before the copy instead of ~10 ms).
        """
        t0 = time.monotonic()
        calm = 0
        dirty = -1
        conn = resolve(tenant, directory=self.directory, agents=self.agents).connect()
        try:
            with conn.cursor() as cur:
                while time.monotonic() - t0 < max_wait_s:
                    cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
                    dirty = int(cur.fetchone()[1])
                    calm = calm + 1 if dirty < SETTLED_DIRTY_PAGES else 0
                    if calm >= 3:
                        break
                    time.sleep(2)
        finally:
            conn.close()
        waited = time.monotonic() - t0
        log(f"{tenant}: settled after {waited:.0f}s ({dirty} dirty pages)")
        return waited

    def node_of(self, tenant: str) -> str:
        return self.directory.lookup(tenant).node

    def ensure_home(self, tenant: str) -> None:
        """Bring the tenant back to node-1 (unthrottled) and flush the page cache, when runs have a direction."""
        if self.home is None or self.node_of(tenant) == self.home:
            return
        t0 = time.monotonic()
        self.migrate(tenant, rate=None, name=f"move-back-{tenant}-{int(time.time())}", keep_series=False)
        os.sync()  # the copy just written to node-1's disk must not be flushed during the next run
        log(f"{tenant} moved back to {self.home} in {time.monotonic() - t0:.0f}s (unthrottled, then sync)")

    def data_bytes(self, tenant: str) -> int:
        """What a snapshot of the tenant will copy, roughly: its data directory without binlogs."""
        return data_bytes(self.run_dir / self.node_of(tenant) / "tenants" / tenant / "data", ("binlog",)) or 0

    # --- one migration ---------------------------------------------------------------------------
    def migrate(self, tenant: str, *, rate: float | None = None, controller: dict | None = None,
                abort_after_s: float | None = None, name: str = "", keep_series: bool = True) -> dict:
        src = self.node_of(tenant)
        target = "node-2" if src == "node-1" else "node-1"
        request = MigrationRequest.checked(tenant, MigrationOptions(target=target, rate_bytes_per_s=rate,
                                                                   controller=controller))
        posted = time.time()
        doc = start_migration(self.agents[src], request)
        mid = doc["id"]
        try:
            doc, aborted_at = self._follow(src, doc, abort_after_s)
        except BaseException:
            # interrupted or failed while following: a migration left running would block the next run
            try:
                self.agents[src].request("POST", f"/v1/migrations/{mid}/abort", {"reason": "bench stopped"})
            except Exception:  # noqa: BLE001
                pass
            raise
        series = self.agents[src].request("GET", f"/v1/migrations/{mid}/series")["lines"]
        series_path = self.out_dir / f"{name or mid}.migration.jsonl"
        if keep_series:
            series_path.write_text("\n".join(series) + ("\n" if series else ""))
        phases = {p["name"]: p for p in doc["phases"]}
        snap = phases.get("snapshot")
        if snap is None:
            raise SlackerError(f"migration {mid} never reached the snapshot", json.dumps(doc.get("error"))[:300], "")
        s0 = ts_of(snap["started_at"])
        s1 = s0 + (snap["duration_s"] if snap["duration_s"] is not None else (aborted_at or time.time()) - s0)
        if "preflight" in phases:
            self.preflight_s.append(s0 - posted)
        if doc["result"] != "succeeded" and aborted_at is None:
            raise SlackerError(f"migration {mid} {doc['result']}", json.dumps(doc.get("error"))[:300], "")
        if doc["result"] != "succeeded":
            doc["result"] = "aborted"  # we asked for it (older agents reported a broken pipe as "failed")
        copied = doc["bytes_total"] if doc["result"] == "succeeded" else doc["bytes_done"]
        if doc["result"] == "aborted":
            # bytes_done at abort time: the last snapshot sample of the series
            snaps = [json.loads(x) for x in series if '"snapshot"' in x]
            copied = max([s["bytes_done"] for s in snaps] or [0])
        return {"id": mid, "from": src, "to": target, "result": doc["result"], "posted": posted,
                "snapshot_start": s0, "snapshot_end": s1, "snapshot_s": s1 - s0, "bytes": copied,
                "avg_rate": copied / max(1e-9, s1 - s0), "duration_s": doc.get("duration_s"),
                "latency_source": doc.get("latency_source"),
                # when the agent says it ended (its clock from the migration's creation, placed by the snapshot)
                "finished": (s0 - snap["start_s"] + doc["duration_s"]
                             if snap.get("start_s") is not None and doc.get("duration_s") is not None else None),
                "phases": {k: v["duration_s"] for k, v in phases.items()},
                "series_path": str(series_path), "series": [json.loads(x) for x in series]}

    def _follow(self, src: str, doc: dict, abort_after_s: float | None) -> tuple[dict, float | None]:
        """Poll the migration until it ends; abort it after abort_after_s of snapshot or at --migration-timeout.

        Returns the final document and when the level abort was asked for (None if it was not)."""
        agent = self.agents[src]
        mid = doc["id"]
        state = {"aborted_at": None, "snap_seen": None, "deadline": time.monotonic() + self.args.migration_timeout}

        def on_poll(d: dict) -> None:
            if d["phase"] == "snapshot" and state["snap_seen"] is None:
                state["snap_seen"] = time.time()
            if (abort_after_s is not None and state["snap_seen"] is not None and state["aborted_at"] is None
                    and d["active"] and time.time() - state["snap_seen"] >= abort_after_s and d["phase"] == "snapshot"):
                state["aborted_at"] = time.time()
                try:
                    agent.request("POST", f"/v1/migrations/{mid}/abort", {"reason": "bench level over"})
                except SlackerError:
                    pass
            if time.monotonic() > state["deadline"] and d["active"]:
                agent.request("POST", f"/v1/migrations/{mid}/abort", {"reason": "bench timeout"})
                state["deadline"] = math.inf

        doc = follow(agent, doc, on_poll)
        return doc, state["aborted_at"]

    def controller(self, kind: str, setpoint_s: float, harness: Harness, rate: float | None = None,
                   tenant_label: str | None = None, gains: str | None = None) -> dict:
        c = {"kind": kind, "setpoint_s": setpoint_s, "max_rate_bytes_per_s": self.args.max_rate,
             "gains": gains or self.args.gains, "force": True}
        if harness.url():  # the harness's histogram; with sysbench the default source (performance_schema)
            c["latency_sources"] = [f"prometheus,url={harness.url()}" + (f",tenant={tenant_label}" if tenant_label else "")]
        if kind == "fixed":
            c["rate_bytes_per_s"] = rate
        return c

    def run_one(self, name: str, tenants: list[str], rates: list[float], records: int, *, migrate_tenant: str,
                kind: str, setpoint_s: float | None, rate: float | None = None, steps: list[str] = (),
                tenant_label: str | None = "same", warmup_s: float | None = None, gains: str | None = None,
                side_load: tuple[list[str], list[float]] | None = None, abort_after_s: float | None = None) -> dict:
        """One harness run around one migration; returns the run's record (also saved in results)."""
        warmup_s = self.args.warmup if warmup_s is None else warmup_s
        self.ensure_home(migrate_tenant)
        if self.args.disk_read_bps:
            drop_page_cache()  # the copy must read the disk, as the tenant's page reads do
        log(f"{name}: harness {','.join(tenants)} at {'+'.join(f'{r:g}' for r in rates)} tps"
            + (f", rate steps {' '.join(steps)}" if steps else "") + f"; warm-up {warmup_s:g}s")
        h = load_class(self.args)(self, name, tenants, rates, records, steps)
        side_h = Harness(self, name + "-target", side_load[0], side_load[1], records) if side_load else None
        try:
            h.wait_ready()
            if side_h is not None:
                side_h.wait_ready()
            time.sleep(warmup_s)
            label = migrate_tenant if tenant_label == "same" else tenant_label
            if kind == "unthrottled":
                mig = self.migrate(migrate_tenant, rate=None, name=name)
            else:
                ctl = self.controller(kind, setpoint_s, h, rate=rate, tenant_label=label, gains=gains)
                mig = self.migrate(migrate_tenant, rate=rate if kind == "fixed" else None, controller=ctl, name=name,
                                   abort_after_s=abort_after_s)
            time.sleep(self.args.post)
        finally:
            h.stop()
            if side_h is not None:
                side_h.stop()
        recs = h.records()
        pre = latency_stats(recs, mig["posted"] - min(10.0, warmup_s), mig["posted"] - 0.5)
        c0, c1 = mig["snapshot_start"], mig["snapshot_end"] - self.args.tail_exclude
        copy = latency_stats(recs, c0, c1, setpoint_s)
        whole = latency_stats(recs, mig["snapshot_start"], mig["snapshot_end"], setpoint_s)
        ctl_lat = [s["latency_s"] for s in mig["series"] if s.get("phase") == "snapshot" and s.get("latency_s") is not None]
        run = {"name": name, "kind": kind, "tenants": tenants, "tps": rates, "steps": list(steps),
               "setpoint_s": setpoint_s, "fixed_rate": rate if kind == "fixed" else None,
               "gains": (gains or self.args.gains) if kind == "pid" else None, "max_rate": self.args.max_rate,
               "migration": {k: v for k, v in mig.items() if k != "series"},
               "harness_path": str(h.out_path), "harness_started": h.started,
               "pre": pre, "copy": copy, "copy_whole": whole,
               "controller_mean_latency_s": statistics.fmean(ctl_lat) if ctl_lat else None,
               "cpu_during_copy": self.cpu.summary(c0, mig["snapshot_end"]),
               "machine_series": self.cpu.window(h.started, time.time()),
               "loadavg": os.getloadavg()}
        run["ratio"] = copy["mean_s"] / setpoint_s if (setpoint_s and copy["mean_s"]) else None
        if side_h is not None:
            # The target node's tenant(s): client-side latency during the copy, and how often the guard bound.
            srecs = side_h.records()
            snap = [x for x in mig["series"] if x.get("phase") == "snapshot"]
            run["target"] = {"tenants": side_load[0], "harness_path": str(side_h.out_path),
                             "pre": latency_stats(srecs, mig["posted"] - min(10.0, warmup_s), mig["posted"] - 0.5),
                             "copy": latency_stats(srecs, c0, c1, setpoint_s),
                             "steps": len(snap), "target_binds_steps": sum(1 for x in snap if x.get("binding") == "target")}
            log(f"{name}: target tenant(s) {','.join(side_load[0])}: latency before {ms(run['target']['pre']['mean_s'])} "
                f"ms, during copy {ms(run['target']['copy']['mean_s'])} ms; the target side bound "
                f"{run['target']['target_binds_steps']} of {run['target']['steps']} steps")
        self.results["runs"][name] = run
        self.save()
        log(f"{name}: {mig['result']}, {mig['bytes'] / MB:.0f} MB in {mig['snapshot_s']:.1f}s = "
            f"{mig['avg_rate'] / MB:.1f} MB/s; latency before {ms(pre['mean_s'])} ms, during copy "
            f"{ms(copy['mean_s'])} ms (sd {ms(copy['std_s'])})"
            + (f", {run['ratio']:.2f} x setpoint {ms(setpoint_s, 0)} ms" if run["ratio"] else "")
            + f"; other processes {run['cpu_during_copy']['others_cores']} cores")
        return run

    def run_tenant(self, name: str, kind: str, setpoint_s: float | None, *, rate: float | None = None,
                   steps: list[str] = (), gains: str | None = None, tps: float | None = None,
                   abort_after_s: float | None = None) -> dict:
        """run_one on the single tenant (--tenant, --records rows, offered --tps or `tps`), migrating it."""
        a = self.args
        return self.run_one(name, [a.tenant], [a.tps if tps is None else tps], a.records, migrate_tenant=a.tenant,
                            kind=kind, setpoint_s=setpoint_s, rate=rate, steps=steps, gains=gains,
                            abort_after_s=abort_after_s)

    def save(self) -> None:
        text = json.dumps(self.results, indent=1, default=str)
        (self.out_dir / "results.json").write_text(text)
        if getattr(self.args, "data_copy", None):
            Path(self.args.data_copy).write_text(text)


def machine_info() -> dict:
    def run(cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            return ""
    return {"uname": run(["uname", "-a"]), "cpus": os.cpu_count(),
            "cpu_model": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), ""),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "mariadbd": run(["mariadbd", "--version"]) or run(["/usr/sbin/mariadbd", "--version"]),
            "python": platform.python_version(), "loadavg_start": os.getloadavg()}

