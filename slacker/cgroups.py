"""CPU quotas and disk read limits for local nodes: one cgroup per node, holding its agent and (by
inheritance) its tenants.

A local cluster's nodes share the machine's cores, so a busy node slows the
others and moving a tenant relieves nothing. With a quota per node a node
behaves like a small host of its own. Works with the cgroup v1 `cpu`
controller (cpu.cfs_quota_us) and with cgroup v2 (cpu.max). Tenants are
started by the agent in a new session, which changes their session, not
their cgroup: children stay in their parent's cgroup.

The quota is enforced per period: a group that used its quota waits for the next
period, so a period of 100 ms (the kernel's default) can stall a node's queries for
tens of ms, which a latency setpoint of that order sees; a shorter period (e.g.
10 ms) bounds the stall. The quota is a ceiling, not a promise: on a contended
machine a group gets its quota only if its weight (cgroup v1 `cpu.shares`, v2
`cpu.weight`, here always on the v2 scale 1-10000, default 100) holds up against
its siblings at every level; so the weight is also set on the node's parents.

A disk read limit (cgroup v1 `blkio.throttle.read_bps_device`, v2 `io.max
rbps=`) makes a node behave like a host with a slower disk: its tenants' page
reads and the backup's reads of their files share that bandwidth, as on the
paper's machines, where the copy competes with the tenant for the disk.
Reads served by the page cache are not limited (drop it to measure).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidInput, MissingDependency, SlackerError

CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_PERIOD_S = 0.1   # the kernel's default CFS period
DEFAULT_WEIGHT = 100     # the v2 default (v1: 1024 shares)


@dataclass(frozen=True)
class _Group:
    path: Path
    version: int  # 1 or 2

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []


def _run_id(run_dir: Path) -> str:
    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]


def _hand_down(path: Path, controller: str) -> None:
    """cgroup v2 only lets a group use a controller if its parents hand it down."""
    for parent in (path.parent.parent, path.parent):
        parent.mkdir(exist_ok=True)
        ctl = parent / "cgroup.subtree_control"
        if controller not in ctl.read_text().split():
            ctl.write_text(f"+{controller}\n")


def _remove_when_empty(group: _Group, timeout_s: float) -> None:
    """Remove the group once its processes are gone (and the run's subtree when empty)."""
    if not group.path.exists():
        return
    deadline = time.monotonic() + timeout_s
    while group.pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    for d in (group.path, group.path.parent):
        try:
            d.rmdir()
        except OSError:
            break  # still in use (another node's group, or a straggler)


@dataclass(frozen=True)
class CpuGroup(_Group):
    def quota_cpus(self) -> float | None:
        if self.version == 1:
            quota = int((self.path / "cpu.cfs_quota_us").read_text())
            period = int((self.path / "cpu.cfs_period_us").read_text())
            return None if quota < 0 else quota / period
        q, p = (self.path / "cpu.max").read_text().split()
        return None if q == "max" else int(q) / int(p)

    def period_s(self) -> float:
        if self.version == 1:
            return int((self.path / "cpu.cfs_period_us").read_text()) / 1e6
        return int((self.path / "cpu.max").read_text().split()[1]) / 1e6

    def weight(self) -> int:
        """The group's weight on the v2 scale (v1 shares converted back)."""
        if self.version == 1:
            return shares_to_weight(int((self.path / "cpu.shares").read_text()))
        return int((self.path / "cpu.weight").read_text())

    def throttled_s(self) -> float:
        """How long the group was held back by its quota, in total."""
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line.strip())
        if self.version == 1:
            return int(stat.get("throttled_time", 0)) / 1e9
        return int(stat.get("throttled_usec", 0)) / 1e6


def _cpu_mount() -> tuple[Path, int]:
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return CGROUP_ROOT, 2
    raise MissingDependency("no cgroup cpu controller", f"neither {v1}/cpu.cfs_quota_us nor cgroup v2 with cpu",
                            "run without --cpu-per-node, or on a host with cgroups mounted")


def validate_cpus(cpus: float) -> float:
    ncpu = os.cpu_count() or 1
    if not 0.01 <= cpus <= ncpu:
        raise InvalidInput(f"--cpu-per-node {cpus:g} is out of range", f"this machine has {ncpu} CPUs",
                           "for example 0.6")
    return cpus


def validate_period(period_s: float) -> float:
    if not 0.001 <= period_s <= 1.0:
        raise InvalidInput(f"--cpu-period {period_s * 1000:g}ms is out of range", "the kernel takes 1 ms to 1 s",
                           "for example 10ms")
    return period_s


def validate_weight(weight: int) -> int:
    if not 1 <= weight <= 10_000:
        raise InvalidInput(f"--cpu-weight {weight} is out of range", "cgroup weights are 1 to 10000 (100: a plain "
                           "process's share)", "for example 1000")
    return weight


def weight_to_shares(weight: int) -> int:
    """v2 weight -> v1 cpu.shares (100 <-> 1024, the two defaults)."""
    return max(2, min(262_144, round(weight * 1024 / 100)))


def shares_to_weight(shares: int) -> int:
    return max(1, min(10_000, round(shares * 100 / 1024)))


def _set_weight(path: Path, version: int, weight: int) -> None:
    if version == 1:
        (path / "cpu.shares").write_text(f"{weight_to_shares(weight)}\n")
    else:
        (path / "cpu.weight").write_text(f"{weight}\n")


def _raise_parents(path: Path, version: int, weight: int) -> None:
    """Give the node's parents (slacker/<run>/, slacker/) at least `weight`: a child's weight only
    counts against its siblings, and the machine's other processes compete with the top group."""
    run = CpuGroup(path.parent, version)
    if run.weight() < weight:
        _set_weight(run.path, version, weight)
    _reweigh_top(path.parent.parent, version)


def _reweigh_top(top: Path, version: int) -> None:
    """The top group (shared by every local cluster's run) weighs what its heaviest run weighs, so a
    run's raised weight does not outlive it."""
    if not top.exists():
        return
    runs = [CpuGroup(d, version).weight() for d in top.iterdir() if d.is_dir() and (d / "cgroup.procs").exists()]
    _set_weight(top, version, max(runs, default=DEFAULT_WEIGHT))


def group_for(run_dir: Path, node: str) -> CpuGroup:
    """The cgroup of `node` of the local cluster in `run_dir` (one subtree per run dir)."""
    mount, version = _cpu_mount()
    return CpuGroup(mount / "slacker" / _run_id(run_dir) / node, version)


def create(run_dir: Path, node: str, cpus: float | None, period_s: float = DEFAULT_PERIOD_S,
           weight: int = DEFAULT_WEIGHT) -> CpuGroup:
    """Create (or update) the node's group (`node` may be any name under the run, e.g. a load generator's
    group) with a quota of `cpus` CPUs per `period_s` (None: no quota) and `weight` against its siblings."""
    if cpus is not None:
        validate_cpus(cpus)
    validate_period(period_s)
    validate_weight(weight)
    g = group_for(run_dir, node)
    try:
        if g.version == 2:
            _hand_down(g.path, "cpu")
        g.path.mkdir(parents=True, exist_ok=True)
        period_us = round(period_s * 1e6)
        quota = "max" if cpus is None else str(max(1000, int(cpus * period_us)))
        if g.version == 1:
            (g.path / "cpu.cfs_quota_us").write_text("-1\n")  # a period shorter than the old quota is refused
            (g.path / "cpu.cfs_period_us").write_text(f"{period_us}\n")
            (g.path / "cpu.cfs_quota_us").write_text(f"{-1 if quota == 'max' else quota}\n")
        else:
            (g.path / "cpu.max").write_text(f"{quota} {period_us}\n")
        _raise_parents(g.path, g.version, weight)
        _set_weight(g.path, g.version, weight)
    except OSError as exc:
        raise SlackerError(f"cannot set up the cgroup of {node}", f"{g.path}: {exc.strerror or exc}",
                           "--cpu-per-node needs root and a writable cgroup cpu controller") from None
    return g


def remove(run_dir: Path, node: str, timeout_s: float = 10.0) -> None:
    """Remove the node's group once its processes are gone (and the run's subtree when empty)."""
    try:
        g = group_for(run_dir, node)
    except MissingDependency:
        return
    _remove_when_empty(g, timeout_s)
    try:
        _reweigh_top(g.path.parent.parent, g.version)
    except OSError:
        pass  # another run's group went meanwhile: the next create or remove reweighs


def group_of_pid(pid: int) -> str | None:
    """The cpu cgroup a process is in (v1 'cpu' line, else the v2 line), as a path from the mount."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
        if controllers == "":
            v2 = path
    return v2


# --- disk read limits ------------------------------------------------------------------------------

@dataclass(frozen=True)
class DiskGroup(_Group):
    device: str = ""  # "MAJ:MIN" of the whole disk the node's data lives on
    read_bps: int = 0


def _disk_mount() -> tuple[Path, int]:
    v1 = CGROUP_ROOT / "blkio"
    if (v1 / "blkio.throttle.read_bps_device").exists():
        return v1, 1
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists() and "io" in controllers.read_text().split():
        return CGROUP_ROOT, 2
    raise MissingDependency("no cgroup blkio/io controller", f"neither {v1}/blkio.throttle.read_bps_device nor "
                            "cgroup v2 with io", "run without --disk-read-per-node, or on a host with cgroups mounted")


def disk_of(path: Path) -> str:
    """MAJ:MIN of the disk holding `path`, or its nearest existing parent if it is not made yet (a
    partition's parent disk: throttling acts on the disk's queue)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = Path("/sys/dev/block") / dev
    if not sys_dev.exists():
        raise InvalidInput(f"{path} is not on a block device", f"device {dev} (tmpfs or a network filesystem?)",
                           "put the run directory on a disk, or run without --disk-read-per-node")
    if (sys_dev / "partition").exists():
        return (sys_dev.resolve().parent / "dev").read_text().strip()
    return dev


def validate_read_bps(bps: float) -> int:
    if not 1e6 <= bps <= 100e9:
        raise InvalidInput(f"--disk-read-per-node {bps:g} B/s is out of range", "1 MB/s to 100 GB/s",
                           "for example 40MB/s")
    return int(bps)


def disk_group_for(run_dir: Path, node: str) -> tuple[Path, int]:
    mount, version = _disk_mount()
    return mount / "slacker" / _run_id(run_dir) / node, version


def create_disk(run_dir: Path, node: str, read_bps: float, data_dir: Path) -> DiskGroup:
    """Create (or update) the node's disk group: reads from the disk under `data_dir` at most `read_bps`."""
    bps = validate_read_bps(read_bps)
    device = disk_of(data_dir)
    path, version = disk_group_for(run_dir, node)
    try:
        if version == 2:
            _hand_down(path, "io")
        path.mkdir(parents=True, exist_ok=True)
        if version == 1:
            (path / "blkio.throttle.read_bps_device").write_text(f"{device} {bps}\n")
        else:
            (path / "io.max").write_text(f"{device} rbps={bps}\n")
    except OSError as exc:
        raise SlackerError(f"cannot set up the disk cgroup of {node}", f"{path}: {exc.strerror or exc}",
                           "--disk-read-per-node needs root and a writable cgroup blkio/io controller") from None
    return DiskGroup(path, version, device, bps)


def remove_disk(run_dir: Path, node: str, timeout_s: float = 10.0) -> None:
    try:
        path, version = disk_group_for(run_dir, node)
    except MissingDependency:
        return
    _remove_when_empty(DiskGroup(path, version), timeout_s)
