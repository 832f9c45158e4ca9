"""bench/floor's runner: the bare pipeline and `slacker migrate --unthrottled` on the same tenant.

The cluster, the tenants and the CPU monitor are the setpoint bench's (Bench, CpuMonitor); this adds the
two things measured here. Both read the tenant where it is now and write next to the other node's
data, so the pair sees the same server, data, disk and page cache state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slacker import mariadb
from slacker.backup import select_tool
from slacker.errors import SlackerError
from slacker.tenants import TenantManager
from slacker.trash import tree_bytes

from . import log

from benchkit import REPO as ROOT  # noqa: E402  (the repository, wherever the bench sits)


def other(node: str) -> str:
    return "node-2" if node == "node-1" else "node-1"


def settle(bench, timeout_s: float = 30.0) -> None:
    """Before a timed run: no removal of an earlier run still going (a move deletes its old copy
    after its result; the bare pipeline's directory is removed after its timing) and no dirty pages
    of it left to write, so neither slows whichever run comes next."""
    deadline = time.monotonic() + timeout_s
    trash = [bench.run_dir / n / "tenants" / ".trash" for n in ("node-1", "node-2")]
    while any(t.is_dir() and any(t.iterdir()) for t in trash) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.sync()


def bare_pipeline(bench, tenant_id: str) -> dict:
    """`mariabackup --backup --stream=xbstream | mbstream -x -C DIR`, then `mariabackup --prepare`, timed,
    from the tenant's node into a directory beside the other node's data root; removed afterwards."""
    node = bench.node_of(tenant_id)
    tenant = TenantManager(bench.run_dir / node).get(tenant_id)
    tool = select_tool()
    settle(bench)
    work = Path(tempfile.mkdtemp(prefix="floor-bare-", dir=bench.run_dir / other(node)))
    try:
        defaults = work / "backup.cnf"
        mariadb.write_secret(defaults, tool.backup_defaults(tenant.config_file.read_text(), mariadb.BACKUP_USER,
                                                            tenant.backup_password(), tenant.socket))
        (work / "tmp").mkdir()
        dest = work / "data"
        dest.mkdir()
        t0 = time.monotonic()
        backup = subprocess.Popen(tool.stream_argv(defaults, work / "tmp"), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        extract = subprocess.run(tool.extract_argv(dest), stdin=backup.stdout, stderr=subprocess.PIPE)
        backup.stdout.close()
        rc = backup.wait()
        t1 = time.monotonic()
        if rc != 0 or extract.returncode != 0:
            raise SlackerError("bare pipeline failed", f"backup exit {rc}, extract exit {extract.returncode}: "
                               f"{extract.stderr.decode(errors='replace')[-300:]}", "")
        size = tree_bytes(dest)
        prep = subprocess.run(tool.prepare_argv(dest), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t2 = time.monotonic()
        if prep.returncode != 0:
            raise SlackerError("bare prepare failed", prep.stderr.decode(errors="replace")[-300:], "")
        return {"kind": "bare", "tenant": tenant_id, "node": node, "bytes": size, "copy_s": round(t1 - t0, 3),
                "prepare_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def migrate(bench, tenant_id: str, extra: list[str]) -> dict:
    """`slacker migrate TENANT --to OTHER --unthrottled --json EXTRA...`, timed from exec to exit."""
    node = bench.node_of(tenant_id)
    argv = [sys.executable, "-m", "slacker", "--cluster", str(bench.cluster_file), "migrate", tenant_id,
            "--to", other(node), "--unthrottled", "--json", *extra]
    settle(bench)
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       start_new_session=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SlackerError(f"migrate {tenant_id} failed", (p.stderr.strip() or p.stdout.strip())[-400:], "")
    doc = json.loads(p.stdout)
    return {"kind": "migrate", "tenant": tenant_id, "from": node, "to": other(node), "bytes": doc["bytes_total"],
            "total_s": round(wall, 3), "duration_s": doc["duration_s"],
            "cli_s": round(wall - doc["duration_s"], 3),
            "phases": {p["name"]: p["duration_s"] for p in doc["phases"]},
            "steps_ms": doc.get("steps_ms") or {}, "copy_stages": doc.get("copy_stages"),
            "handover_steps_ms": doc.get("handover_steps_ms") or {}, "rounds": len(doc.get("rounds") or []),
            "freeze_ms": doc.get("freeze_ms"), "id": doc["id"]}


def throttled(bench, tenant_id: str, rate: float, extra: list[str]) -> dict:
    """A fixed --rate copy: the rate achieved over the snapshot phase against the rate asked for."""
    node = bench.node_of(tenant_id)
    argv = [sys.executable, "-m", "slacker", "--cluster", str(bench.cluster_file), "migrate", tenant_id,
            "--to", other(node), "--rate", f"{int(rate)}B/s", "--json", *extra]
    p = subprocess.run(argv, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       start_new_session=True)
    if p.returncode != 0:
        raise SlackerError(f"migrate {tenant_id} --rate failed", (p.stderr.strip() or p.stdout.strip())[-400:], "")
    doc = json.loads(p.stdout)
    stages = (doc.get("copy_stages") or {}).get("sender") or {}
    snap = next(x for x in doc["phases"] if x["name"] == "snapshot")
    # the pipe's own span: first byte to the producer's end (the snapshot phase also holds pipe_start)
    span = stages.get("producer_eof_at_s", 0) - stages.get("first_byte_at_s", 0)
    if span <= 0:
        span = snap["duration_s"] - (doc.get("steps_ms") or {}).get("pipe_start", 0) / 1000
    return {"kind": "rate", "tenant": tenant_id, "asked": rate, "bytes": doc["bytes_total"],
            "span_s": round(span, 3), "achieved": doc["bytes_total"] / span,
            "error": doc["bytes_total"] / span / rate - 1, "path": stages.get("path")}


def log_run(r: dict) -> None:
    if r["kind"] == "bare":
        log(f"  bare      {r['tenant']:>6} {r['bytes'] / 1e6:7.0f} MB  copy {r['copy_s']:6.2f}s  "
            f"prepare {r['prepare_s']:5.2f}s  total {r['total_s']:6.2f}s")
    elif r["kind"] == "migrate":
        log(f"  migrate   {r['tenant']:>6} {r['bytes'] / 1e6:7.0f} MB  total {r['total_s']:6.2f}s  "
            f"(agent {r['duration_s']:.2f}s, cli {r['cli_s']:.2f}s) {r.get('variant', '')}")
    else:
        log(f"  rate      {r['tenant']:>6} asked {r['asked'] / 1e6:.1f} MB/s got {r['achieved'] / 1e6:.2f} MB/s "
            f"({r['error'] * 100:+.1f}%) {r.get('variant', '')}")
