"""Unthrottled throughput of each throttled-pipe implementation, relative to a raw pipe.

Every round runs the raw pipeline (`producer | extractor`, nothing in between)
and then each implementation (producer -> pipe -> TCP on 127.0.0.1 -> Receiver
-> extractor) on the same data; rounds alternate so drift hits all alike, and
the table shows medians. CPU is user+system of this process and all its
children (the receiver relay and the native pump run in this process).

Sources:
  synthetic (default)  `cat FILE` of --size-mb random bytes in /dev/shm into `cat > /dev/null`
  tenant               a real MariaDB tenant (slacker.tenants) with --tenant-mb of rows,
                       `mariabackup --backup --stream=xbstream` into `mbstream -x -C DIR`
  --producer JSON      any producer argv (JSON list); extractor `cat > /dev/null`
                       unless --extractor JSON is given

    bench/run transfer --runs 5
    bench/run transfer --source tenant --tenant-mb 64 --runs 5
    bench/run transfer --tls --runs 5     # native over TLS vs plain TCP, same rounds
    bench/run transfer --tls --netns --runs 5   # the same between two network hosts

With --netns the sender (producer side, the pipe) runs in a network namespace
of its own and the receiver in another, joined by veth pairs on a bridge as two
`cluster up --netns` nodes are, so the stream crosses real interfaces (MTU 1500)
instead of loopback; the raw pipeline has no network and stays as it is.
Needs root.

`native-tls` is the native pipe over TLS with the cluster's certificates (a
throwaway CA made for the run, as `cluster up --tls` makes one), the way a
TLS cluster sends a snapshot; `--tls` compares it with plain `native`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


from slacker.transfer import Receiver, make_pipe, new_token

RUN_TIMEOUT_S = 600.0


@dataclass
class Sample:
    seconds: float
    bytes: int
    cpu_s: float


@dataclass
class Series:
    name: str
    samples: list[Sample] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples)


def cpu_now() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Workload:
    """A producer and an extractor that can be run again and again on the same data."""

    def producer(self) -> list[str]:
        raise NotImplementedError

    def extractor(self) -> tuple[list[str], str | None]:
        """(argv, stdout path or None for /dev/null); called once per run (fresh target)."""
        raise NotImplementedError

    def after_run(self) -> None:
        pass

    def close(self) -> None:
        pass

    def describe(self) -> str:
        raise NotImplementedError


class Synthetic(Workload):
    def __init__(self, size_mb: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="slacker-bench-", dir="/dev/shm"))
        self.file = self.dir / "payload"
        with open(self.file, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size_mb):
                f.write(block)  # repeated 1 MiB: nothing in the path compresses, so fine
        self.size = size_mb << 20

    def producer(self) -> list[str]:
        return ["cat", str(self.file)]

    def extractor(self):
        return ["cat"], None

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self) -> str:
        return f"synthetic: cat of {self.size >> 20} MiB in /dev/shm -> cat > /dev/null"


class Custom(Workload):
    def __init__(self, producer: list[str], extractor: list[str] | None) -> None:
        self._producer = producer
        self._extractor = extractor or ["cat"]

    def producer(self) -> list[str]:
        return list(self._producer)

    def extractor(self):
        return list(self._extractor), None

    def describe(self) -> str:
        return f"custom: {self._producer} -> {self._extractor}"


class TenantBackup(Workload):
    """A real tenant, backed up by mariabackup and extracted by mbstream, each run afresh."""

    def __init__(self, tenant_mb: int) -> None:
        from slacker import backup, mariadb
        from slacker.tenants import TenantManager

        self.root = Path(tempfile.mkdtemp(prefix="slk-bench-"))
        self.mgr = TenantManager(self.root / "node")
        self.tenant = self.mgr.create("bench")
        self._load(tenant_mb)
        self.tool = backup.MariaBackup()
        self.defaults = self.root / "backup.cnf"
        mariadb.write_secret(self.defaults, self.tool.backup_defaults(
            self.tenant.config_file.read_text(), mariadb.BACKUP_USER, self.tenant.backup_password(),
            self.tenant.socket))
        self.work = self.root / "work"
        self.target = self.root / "target"
        self.mb = tenant_mb

    def _load(self, mb: int) -> None:
        conn = self.tenant.admin_connect(timeout_s=30)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE IF NOT EXISTS bench")
                cur.execute("CREATE TABLE bench.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARBINARY(1000))"
                            " ENGINE=InnoDB")
                row = os.urandom(500).hex()[:1000]
                rows = [(row,)] * 1000
                for _ in range(mb):
                    cur.executemany("INSERT INTO bench.t (v) VALUES (%s)", rows)
                    conn.commit()
        finally:
            conn.close()

    def producer(self) -> list[str]:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir()
        return self.tool.stream_argv(self.defaults, self.work)

    def extractor(self):
        shutil.rmtree(self.target, ignore_errors=True)
        self.target.mkdir()
        return self.tool.extract_argv(self.target), None

    def close(self) -> None:
        try:
            self.mgr.delete("bench")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def describe(self) -> str:
        return (f"tenant: mariabackup --backup --stream=xbstream of a {self.mb} MB-of-rows tenant "
                f"-> mbstream -x -C DIR")


def run_raw(w: Workload) -> Sample:
    producer = w.producer()
    extractor, out = w.extractor()
    r, wr = os.pipe()
    t0, c0 = time.monotonic(), cpu_now()
    sink = open(out, "wb") if out else subprocess.DEVNULL  # noqa: SIM115
    p1 = subprocess.Popen(producer, stdout=wr, stderr=subprocess.DEVNULL, start_new_session=True)
    p2 = subprocess.Popen(extractor, stdin=r, stdout=sink, stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(r)
    os.close(wr)
    rc1, rc2 = p1.wait(timeout=RUN_TIMEOUT_S), p2.wait(timeout=RUN_TIMEOUT_S)
    t1, c1 = time.monotonic(), cpu_now()
    if sink is not subprocess.DEVNULL:
        sink.close()
    if rc1 or rc2:
        raise SystemExit(f"raw pipeline failed: producer {rc1}, extractor {rc2}")
    w.after_run()
    return Sample(t1 - t0, 0, c1 - c0)


class Hosts:
    """Where the two ends of the stream run: both on 127.0.0.1 in this namespace, or (netns) the
    sender in one network namespace and the receiver in another, as two `cluster up --netns` nodes.

    Sockets belong to the namespace of the thread that creates them and new threads start in
    their creator's, so `with hosts.on("dst"): receiver.start()` listens inside dst (its relay
    thread too) and `with hosts.on("src"): pipe.start()` connects from src."""

    def __init__(self, use_netns: bool, subnet: str) -> None:
        self.src = self.dst = "127.0.0.1"
        self.run_dir: Path | None = None
        if not use_netns:
            return
        from slacker import netns
        netns.check_privileges()
        self.run_dir = Path(tempfile.mkdtemp(prefix="slbench-netns-", dir="/tmp"))
        plan = netns.setup(self.run_dir, ["src", "dst"], subnet)
        self.src, self.dst = plan.node("src").address, plan.node("dst").address
        self._fd = {side: os.open(netns.NETNS_DIR / plan.node(side).namespace, os.O_RDONLY | os.O_CLOEXEC)
                    for side in ("src", "dst")}
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._setns = ctypes.CDLL(None, use_errno=True).setns

    def _enter(self, fd: int) -> None:
        from slacker.netns import CLONE_NEWNET
        if self._setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns failed")

    @contextmanager
    def on(self, side: str):
        if self.run_dir is None:
            yield
            return
        self._enter(self._fd[side])
        try:
            yield
        finally:
            self._enter(self._home)

    def describe(self) -> str:
        if self.run_dir is None:
            return "loopback (127.0.0.1), one network namespace"
        return f"netns: sender {self.src} -> receiver {self.dst}, separate namespaces on a veth bridge"

    def close(self) -> None:
        if self.run_dir is None:
            return
        from slacker import netns
        for fd in (*self._fd.values(), self._home):
            os.close(fd)
        netns.teardown(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)


HOSTS: Hosts | None = None
_PKI: dict = {}


def tls_contexts() -> tuple:
    """(server, client) contexts from a CA made once for this run, as `cluster up --tls` makes one."""
    from slacker import tls
    if not _PKI:
        d = Path(tempfile.mkdtemp(prefix="slbench-tls-"))
        _PKI.update(tls.ensure_cluster_pki(d, {"src": [HOSTS.src], "dst": [HOSTS.dst]}))
        _PKI["dir"] = d
    src, dst = _PKI["src"], _PKI["dst"]
    return (tls.server_context(dst, stream=True), tls.client_context(src.ca, src.cert, src.key, stream=True))


def run_pipe(w: Workload, kind: str, options: dict) -> Sample:
    producer = w.producer()
    extractor, out = w.extractor()
    token = new_token()
    options = dict(options)
    server_ctx = client_ctx = None
    if options.pop("tls", False):
        server_ctx, client_ctx = tls_contexts()
        options["ssl_context"] = client_ctx
    t0, c0 = time.monotonic(), cpu_now()
    receiver = Receiver("bench", token, extractor, HOSTS.dst, extract_stdout=out, ssl_context=server_ctx)
    with HOSTS.on("dst"):
        port = receiver.start()
    pipe = make_pipe(kind, producer, HOSTS.dst, port, "bench", token, **options)
    try:
        with HOSTS.on("src"):
            pipe.start()
        result = pipe.wait(RUN_TIMEOUT_S)
        received = receiver.wait(RUN_TIMEOUT_S)
    finally:
        pipe.abort()
        receiver.abort()
    t1, c1 = time.monotonic(), cpu_now()
    assert received.bytes_received == result.bytes_sent
    w.after_run()
    return Sample(t1 - t0, result.bytes_sent, c1 - c0)


VARIANTS = {
    "native": ("native", {}),
    "native-splice": ("native", {"use_splice": True}),
    "native-tls": ("native", {"tls": True}),
    "pv": ("pv", {}),
    "pv-fixed": ("pv", {"rate_control": False}),
}


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still clean up the payload and tenant
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("synthetic", "tenant"), default="synthetic")
    ap.add_argument("--size-mb", type=int, default=512, help="synthetic payload size (MiB)")
    ap.add_argument("--tenant-mb", type=int, default=64, help="rows to load into the tenant (MB)")
    ap.add_argument("--producer", help="producer argv as a JSON list (overrides --source)")
    ap.add_argument("--extractor", help="extractor argv as a JSON list (with --producer)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--impl", default=None,
                    help=f"comma-separated, from {', '.join(VARIANTS)} (default native,native-splice,pv,pv-fixed)")
    ap.add_argument("--tls", action="store_true", help="compare native over TLS with plain native "
                                                       "(same as --impl native,native-tls)")
    ap.add_argument("--netns", action="store_true",
                    help="sender and receiver in two network namespaces on a bridge (needs root)")
    ap.add_argument("--netns-subnet", default="10.94.3.0/24", help="the bridge's subnet with --netns")
    args = ap.parse_args()
    if args.impl is None:
        args.impl = "native,native-tls" if args.tls else "native,native-splice,pv,pv-fixed"
    impls = [i.strip() for i in args.impl.split(",") if i.strip()]
    for i in impls:
        if i not in VARIANTS:
            ap.error(f"unknown implementation {i!r}")

    if args.producer:
        workload: Workload = Custom(json.loads(args.producer),
                                    json.loads(args.extractor) if args.extractor else None)
    elif args.source == "tenant":
        workload = TenantBackup(args.tenant_mb)
    else:
        workload = Synthetic(args.size_mb)

    global HOSTS
    HOSTS = Hosts(args.netns, args.netns_subnet)
    series = {name: Series(name) for name in ["raw", *impls]}
    try:
        for n in range(args.runs):
            series["raw"].samples.append(run_raw(workload))
            for name in impls:
                kind, options = VARIANTS[name]
                series[name].samples.append(run_pipe(workload, kind, options))
            print(f"round {n + 1}/{args.runs}: " + ", ".join(
                f"{s.name} {s.samples[-1].seconds:.3f}s" for s in series.values()), file=sys.stderr)
    finally:
        workload.close()
        HOSTS.close()
        if _PKI:
            shutil.rmtree(_PKI["dir"], ignore_errors=True)

    nbytes = statistics.median(s.bytes for name in impls for s in series[name].samples) if impls else 0
    for s in series["raw"].samples:
        s.bytes = int(nbytes)
    raw_t = series["raw"].median("seconds")
    print(f"# {workload.describe()}")
    print(f"# path: {HOSTS.describe()}")
    print(f"# {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}; {args.runs} alternating rounds, medians")
    print(f"# {platform.uname().system} {platform.uname().release} {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"# stream bytes: {int(nbytes)}")
    # ratio: against the raw pipe; "vs native": against plain native in the same rounds (TLS's cost).
    native_t = series["native"].median("seconds") if "native" in series else None
    print(f"{'implementation':<16}{'MB/s':>10}{'MB/s min-max':>16}{'ratio':>8}{'vs native':>10}"
          f"{'CPU s':>8}{'wall s':>9}")
    for s in series.values():
        t = s.median("seconds")
        lo, hi = nbytes / max(x.seconds for x in s.samples) / 1e6, nbytes / min(x.seconds for x in s.samples) / 1e6
        vs = f"{native_t / t:>10.2f}" if native_t else f"{'-':>10}"
        print(f"{s.name:<16}{nbytes / t / 1e6:>10.1f}{f'{lo:.0f}-{hi:.0f}':>16}{raw_t / t:>8.2f}{vs}"
              f"{s.median('cpu_s'):>8.2f}{t:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
