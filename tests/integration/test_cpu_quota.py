"""`cluster up --cpu-per-node` / `--disk-read-per-node`: each node's agent and its tenants live in cgroups
with that CPU quota / disk read limit."""

from __future__ import annotations

import os
import threading
import time

import pytest

from slacker import cgroups
from slacker.agent.client import cluster_clients
from slacker.tenants import TenantManager
from slacker.config import load_agent_config

from benchkit.migration import cgroups_usable, node_dir


pytestmark = pytest.mark.skipif(not cgroups_usable(), reason="needs root and a cgroup cpu controller")

QUOTA = 0.25


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_tenants_run_inside_their_nodes_quota(make_cluster):
    c = make_cluster(nodes=2, cpu_per_node=QUOTA)
    agents, _ = cluster_clients(c)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "busy", "buffer_pool_bytes": 32 * 1024 * 1024},
                             timeout_s=180)
    g1, g2 = cgroups.group_for(c.path.parent, "node-1"), cgroups.group_for(c.path.parent, "node-2")
    assert g1.quota_cpus() == pytest.approx(QUOTA) and g2.quota_cpus() == pytest.approx(QUOTA)
    agent_pid = int((node_dir(c, "node-1") / "agent.pid").read_text())
    cfg = load_agent_config(node_dir(c, "node-1") / "agent.toml")
    tenant = TenantManager(cfg.data_root, host=cfg.tenant_host, node="node-1").get("busy")
    tenant_pid = int(tenant.pid_file.read_text())
    # The tenant was started by the agent in a session of its own, and still shares its cgroup.
    assert os.getsid(tenant_pid) != os.getsid(agent_pid)
    assert cgroups.group_of_pid(agent_pid) == cgroups.group_of_pid(tenant_pid)
    assert agent_pid in g1.pids() and tenant_pid in g1.pids()

    # A CPU-bound query on the tenant gets at most the node's quota.
    throttled_before = g1.throttled_s()
    conn = tenant.admin_connect()

    def burn():
        with conn.cursor() as cur:
            try:
                cur.execute("SET STATEMENT max_statement_time=4 FOR SELECT BENCHMARK(2000000000, MD5('slack'))")
            except Exception:
                pass  # interrupted by max_statement_time: expected

    cpu0, t0 = _cpu_s(tenant_pid), time.monotonic()
    th = threading.Thread(target=burn)
    th.start()
    th.join(60)
    used = (_cpu_s(tenant_pid) - cpu0) / (time.monotonic() - t0)
    conn.close()
    print(f"tenant used {used:.2f} CPU under a {QUOTA} quota; throttled {g1.throttled_s() - throttled_before:.2f}s")
    assert used <= QUOTA * 1.3, used
    assert g1.throttled_s() > throttled_before or used < QUOTA * 0.8  # held back, or the machine was busier

    from click.testing import CliRunner
    from slacker.cli import main
    r = CliRunner().invoke(main, ["cluster", "down", "--dir", str(c.path.parent)])
    assert r.exit_code == 0, r.output
    assert not g1.path.exists() and not g2.path.exists()


def test_disk_reads_are_limited_per_node(make_cluster):
    rate = 8_000_000
    c = make_cluster(nodes=1, disk_read_per_node=rate)
    agents, _ = cluster_clients(c)
    agents["node-1"].request("POST", "/v1/tenants", {"id": "slowdisk", "buffer_pool_bytes": 32 * 1024 * 1024},
                             timeout_s=180)
    path, _ = cgroups.disk_group_for(c.path.parent, "node-1")
    g = cgroups.DiskGroup(path, 1)
    agent_pid = int((node_dir(c, "node-1") / "agent.pid").read_text())
    cfg = load_agent_config(node_dir(c, "node-1") / "agent.toml")
    tenant_pid = int(TenantManager(cfg.data_root, host=cfg.tenant_host, node="node-1").get("slowdisk")
                     .pid_file.read_text())
    assert agent_pid in g.pids() and tenant_pid in g.pids()

    # A process of the node reading 24 MB from the disk (not the page cache) takes >= 3 s at 8 MB/s.
    f = node_dir(c, "node-1") / "blob"
    f.write_bytes(os.urandom(24_000_000))
    os.sync()
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # this file's pages only, not the machine's cache
    os.close(fd)
    import subprocess
    proc = subprocess.Popen(["sh", "-c", "read _; exec cat \"$0\" > /dev/null", str(f)], stdin=subprocess.PIPE)
    g.add(proc.pid)
    t0 = time.monotonic()
    proc.communicate(b"go\n", timeout=60)
    took = time.monotonic() - t0
    print(f"24 MB read in {took:.2f}s under an 8 MB/s limit")
    assert took >= 2.4, took

    from click.testing import CliRunner
    from slacker.cli import main
    r = CliRunner().invoke(main, ["cluster", "down", "--dir", str(c.path.parent)])
    assert r.exit_code == 0, r.output
    assert not path.exists()


BUSY = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"


def _busy(n: int) -> list:
    import subprocess
    import sys
    # each in a session of its own: with autogroup scheduling a session's processes share one weight, as
    # other users' jobs on a shared machine each come with theirs
    return [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True) for _ in range(n)]


def test_period_and_weight_are_set_recorded_and_hold_under_contention(make_cluster):
    """--cpu-period / --cpu-weight: read back from the kernel's files and the cluster file, and a node's
    budget is given while more busy processes than cores compete outside the node."""
    quota, weight = 0.4, 1000
    c = make_cluster(nodes=1, cpu_per_node=quota, cpu_period_s=0.01, cpu_weight=weight)
    g = cgroups.group_for(c.path.parent, "node-1")
    assert g.quota_cpus() == pytest.approx(quota) and g.period_s() == pytest.approx(0.01)
    assert g.weight() == weight
    if g.version == 1:
        assert (g.path / "cpu.cfs_period_us").read_text().strip() == "10000"
        assert (g.path / "cpu.cfs_quota_us").read_text().strip() == "4000"
        assert (g.path / "cpu.shares").read_text().strip() == str(cgroups.weight_to_shares(weight))
    # the node's parents carry at least its weight: against the machine's other processes they are the node
    assert cgroups.CpuGroup(g.path.parent, g.version).weight() >= weight
    assert cgroups.CpuGroup(g.path.parent.parent, g.version).weight() >= weight
    assert c.node_budget == {"cpu_per_node": quota, "cpu_period": 0.01, "cpu_weight": weight}

    # Six busy processes outside the node on a 2-core machine (plus whatever else runs): a weight-100
    # node would get about 2/7 CPU; with weight 1000 it gets its quota.
    hogs = _busy(6)
    burner = _busy(1)[0]
    try:
        g.add(burner.pid)
        time.sleep(1.0)
        cpu0, t0 = _cpu_s(burner.pid), time.monotonic()
        time.sleep(5.0)
        used = (_cpu_s(burner.pid) - cpu0) / (time.monotonic() - t0)
    finally:
        for p in hogs + [burner]:
            p.kill()
            p.wait()
    print(f"node with quota {quota} CPU, weight {weight}, 6 busy processes outside: used {used:.2f} CPU")
    assert quota * 0.85 <= used <= quota * 1.15, used


def test_bad_budget_is_refused_before_anything_starts(tmp_path):
    from click.testing import CliRunner
    from slacker.cli import main
    for argv, what in ((["--cpu-per-node", "0.5", "--cpu-period", "0.1ms"], "--cpu-period"),
                       (["--cpu-per-node", "0.5", "--cpu-weight", "0"], "--cpu-weight")):
        r = CliRunner().invoke(main, ["cluster", "up", "--dir", str(tmp_path / "run"), "--no-router", *argv])
        assert r.exit_code != 0 and what in r.output, r.output
        assert not (tmp_path / "run" / "cluster.toml").exists()
