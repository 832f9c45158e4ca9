"""Shared pieces of the migration tests: a loaded tenant, running migrations, leftover checks."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from slacker import ackwriter, loads, local_cluster
from slacker.agent.client import cluster_clients
from slacker.mariadb.rowsums import table_sums
from slacker.client import TenantClient, resolve
from slacker.router import local as local_router


def create_loaded_tenant(cluster, tenant_id: str = "mig", rows: int = 4000, node: str = "node-1",
                         database: str | None = None, kind: str = "server") -> None:
    """A tenant of `kind` (a whole server, or a database in the node's shared server) with about rows x 2.5 KB
    of data in two tables, in `database` (None: its session's, else shop: slacker/loads.py)."""
    agents, _ = cluster_clients(cluster)
    body = ({"id": tenant_id, "kind": "shared"} if kind == "shared"
            else {"id": tenant_id, "buffer_pool_bytes": 64 * 1024 * 1024})
    agents[node].request("POST", "/v1/tenants", body, timeout_s=180)
    ep = resolve(tenant_id, cluster)
    conn = ep.connect()
    db = loads.for_connection(conn, database, "shop")
    items, orders = db.qualified("items"), db.qualified("orders")
    with conn.cursor() as cur:
        if db.create:
            cur.execute(f"CREATE DATABASE {db.quoted}")
        cur.execute(f"CREATE TABLE {items} (id INT PRIMARY KEY, name VARCHAR(40), body TEXT)")
        cur.execute(f"CREATE TABLE {orders} (id INT AUTO_INCREMENT PRIMARY KEY, item INT, qty INT)")
        for start in range(0, rows, 500):
            vals = ",".join(f"({i}, 'item-{i}', REPEAT(MD5({i}), 75))" for i in range(start, min(rows, start + 500)))
            cur.execute(f"INSERT INTO {items} VALUES {vals}")
        cur.execute(f"INSERT INTO {orders} (item, qty) SELECT id, id % 7 FROM {items}")
    conn.close()


def start_migration(cluster, tenant_id: str, **options) -> dict:
    agents, directory = cluster_clients(cluster)
    own = directory.lookup(tenant_id)
    body = {"tenant": tenant_id, **options}
    return agents[own.node].request("POST", "/v1/migrations", body, timeout_s=120)


def wait_migration(cluster, source: str, mid: str, timeout_s: float = 180) -> dict:
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + timeout_s
    while True:
        doc = agents[source].request("GET", f"/v1/migrations/{mid}")
        if not doc["active"]:
            return doc
        assert time.monotonic() < deadline, f"migration still {doc['phase']} after {timeout_s}s"
        time.sleep(0.2)


def wait_until(cluster, mid: str, what: str, done, source: str = "node-1", timeout_s: float = 90) -> dict:
    """Poll the source's document of migration `mid` every 50 ms until `done(doc)`; fail saying `what`
    never happened. Returns that document."""
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + timeout_s
    while not done(doc := agents[source].request("GET", f"/v1/migrations/{mid}")):
        if time.monotonic() >= deadline:
            dump_agent_stacks(cluster)
            raise AssertionError(f"{what} never happened (phase {doc.get('phase')}, waiting for "
                                 f"{doc.get('waiting_for') or 'nothing'}, step {doc.get('handover_step')}; "
                                 "the agents' thread stacks are in their agent.log)")
        time.sleep(0.05)
    return doc


def dump_agent_stacks(cluster) -> None:
    """Ask every local agent of `cluster` to write its threads' stacks to its agent.log (SIGUSR1)."""
    import signal
    from slacker.procs import alive, read_pid
    for pid_file in cluster.path.parent.glob("*/agent.pid"):
        pid = read_pid(pid_file)
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGUSR1)


def wait_flipped(cluster, mid: str, source: str = "node-1", timeout_s: float = 90) -> dict:
    """Until the source reports the directory's compare-and-set done (the point of no return)."""
    return wait_until(cluster, mid, "the flip", lambda d: d["past_point_of_no_return"], source, timeout_s)


def wait_handover_step(cluster, mid: str, step: str, source: str = "node-1", timeout_s: float = 90) -> dict:
    """Until the source's handover is at `step` (locked, fenced, ...)."""
    return wait_until(cluster, mid, f"handover step {step}", lambda d: d["handover_step"] == step, source, timeout_s)


def wait_phase(cluster, source: str, mid: str, phase: str, timeout_s: float = 60, min_bytes: int = 0) -> dict:
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + timeout_s
    while True:
        doc = agents[source].request("GET", f"/v1/migrations/{mid}")
        if doc["phase"] == phase and doc["bytes_done"] >= min_bytes:
            return doc
        assert doc["active"], f"migration ended ({doc['result']}: {doc.get('error')}) before {phase}"
        assert time.monotonic() < deadline, f"never reached {phase} (at {doc['phase']})"
        time.sleep(0.05)


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains `text` (zombies excluded)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            out.append((int(d.name), cmd))
    return out


def tenant_checksums(cluster, tenant_id: str) -> dict:
    from slacker.tenants import TenantManager
    from slacker.config import load_agent_config
    _, directory = cluster_clients(cluster)
    own = directory.lookup(tenant_id)
    cfg = load_agent_config(cluster.path.parent / own.node / "agent.toml")
    t = TenantManager(cfg.data_root, host=cfg.tenant_host, node=own.node).get(tenant_id)
    conn = t.admin_connect()
    try:
        return table_sums(conn)
    finally:
        conn.close()


def acked_ids_present(cluster, tenant_id: str, ids: list[int], table: str = "log",
                      database: str | None = None) -> set[int]:
    """The ids of `ids` missing from `table` in `database` (None: the session's, else the ack writer's acks:
    slacker/loads.py) on the owner the directory names."""
    ep = resolve(tenant_id, cluster)
    conn = ep.connect()
    try:
        db = loads.for_connection(conn, database, ackwriter.DEFAULT_DATABASE)
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {db.qualified(loads.quote(table))}")
            have = {r[0] for r in cur.fetchall()}
    finally:
        conn.close()
    return set(ids) - have


def writers_verdict(cluster, tenant_id: str, writers) -> tuple[list[int], int, int]:
    """The acknowledged writers stopped, then judged on the owner: (acknowledged ids, how many are missing there,
    requests that failed or whose outcome is unknown)."""
    for w in writers:
        w.stop()
    acked = [i for w in writers for i in w.acked]
    lost = len(acked_ids_present(cluster, tenant_id, acked, database=writers[0].database))
    return acked, lost, sum(len(w.unknown) + sum(w.errors.values()) for w in writers)


def follow(cluster, tenant_id: str) -> TenantClient:
    return TenantClient.for_cluster(tenant_id, cluster, reconnect_timeout_s=60)


def node_dir(cluster, node: str) -> Path:
    return cluster.path.parent / node


def wait_writer_on(writer, node: str, timeout_s: float = 30) -> None:
    """Until the acknowledged writer has followed the tenant to `node` and committed there. After a
    directory outage its reconnect may sit in a watch for a few seconds after the flip."""
    deadline = time.monotonic() + timeout_s
    while True:
        ep = writer.client.endpoint
        if ep is not None and ep.node == node:
            break
        assert time.monotonic() < deadline, f"the writer is still on {ep.node if ep else None}, not {node}"
        time.sleep(0.1)
    acked = len(writer.acked)
    while len(writer.acked) <= acked:
        assert time.monotonic() < deadline, f"the writer reached {node} but commits nothing there"
        time.sleep(0.1)


def cgroups_usable() -> bool:
    """Root and a cgroup cpu controller: what the per-node CPU quota tests need."""
    from slacker import cgroups
    from slacker.errors import MissingDependency

    try:
        cgroups._cpu_mount()
    except MissingDependency:
        return False
    return os.geteuid() == 0


def evict_backup_tool() -> bool:
    """Drop mariabackup's own program from the page cache (its libraries are shared with running servers)."""
    from slacker import pagecache
    prog = pagecache.program_files("mariabackup")[0]
    fd = os.open(prog, os.O_RDONLY)
    try:
        os.fsync(fd)  # a copy just written: its dirty pages are not dropped until they are on disk
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    vec, _ = pagecache.resident(prog)
    return sum(b & 1 for b in vec) < len(vec) // 2


def wait_reading_in(cluster, mid: str, min_bytes: int = 1_000_000, timeout_s: float = 30) -> dict:
    """Until the source's pipe has read `min_bytes` of a cold backup tool in (slacker.pagecache); its status."""
    agents, _ = cluster_clients(cluster)
    deadline = time.monotonic() + timeout_s
    while True:
        cur = agents["node-1"].request("GET", f"/v1/migrations/{mid}")
        if cur["prereading"] and cur["preread_bytes"] >= min_bytes:
            return cur
        assert cur["active"] and time.monotonic() < deadline, cur
        time.sleep(0.1)


def routed_cluster_gone(run_dir: Path, tmp: Path, label: str, writers=()) -> None:
    """A bench's cleanup of a cluster with a router in `tmp`: its writers stopped, the router, the cluster
    (purged) and the temp dir gone; a failure is printed, the rest still runs."""
    for w in writers:
        w.stop()
    try:
        local_router.stop(run_dir)
    except Exception as exc:  # noqa: BLE001
        print(f"router stop {label}: {exc}", file=sys.stderr)
    cluster_down(run_dir, label, purge=True)
    shutil.rmtree(tmp, ignore_errors=True)


def cluster_down(run_dir: Path, label: str = "", purge: bool = False) -> None:
    """`slacker cluster down` for a bench's cleanup: a failure is printed, not raised, so the rest of
    the cleanup (other clusters, temp dirs) still runs."""
    try:
        local_cluster.down(run_dir, purge=purge)
    except Exception as exc:  # noqa: BLE001
        print(f"cluster down {label or run_dir}: {exc}", file=sys.stderr)
