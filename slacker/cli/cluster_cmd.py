"""`slacker cluster up|down`: a local cluster of agents on loopback."""

from __future__ import annotations

from pathlib import Path

import click

from . import main
from .common import CPU, CPU_QUOTA, DURATION, HOST_PORT, RATE, CliContext, load_cluster, option, pass_cli, print_json


@main.group("cluster")
def cluster() -> None:
    """Start or stop a local cluster (N agents on 127.0.0.x, one machine)."""


# `cluster up` options under the names local_cluster.up takes them.
_UP_NAMES = {"address": "first_address", "stats_interval": "stats_interval_s", "no_router": "router",
             "cpu_period": "cpu_period_s"}


@cluster.command("up")
@option("--nodes", default=2, show_default=True, type=int, help="How many nodes (node-1 ... node-N).")
@option("--dir", "run_dir", default="run", show_default=True, type=click.Path(file_okay=False),
              help="Run directory: cluster file, token, one data root per node, agent logs.")
@option("--address", default="127.0.0.2", show_default=True, metavar="IP",
              help="Loopback address of node-1; node-k gets the k-th address from there.")
@option("--api-port", default=7701, show_default=True, metavar="PORT", type=click.IntRange(1024, 65535),
              help="Port of each agent's HTTP API (on its own address).")
@option("--port-range", default="13306-23305", show_default=True, metavar="LOW-HIGH", help="Tenant ports, LOW-HIGH.")
@option("--directory", "directory", type=click.Choice(["sqlite", "etcd"]), default="sqlite", show_default=True,
              help="sqlite: one node's agent serves the directory; etcd: a local 3-member etcd cluster does.")
@option("--directory-node", default="node-1", show_default=True, metavar="NODE",
              help="With --directory sqlite: the node whose agent serves the directory.")
@option("--etcd-client-port", default=2379, show_default=True, metavar="PORT", type=click.IntRange(1024, 65535),
              help="etcd members' client port (each member on its own address).")
@option("--etcd-peer-port", default=2380, show_default=True, metavar="PORT", type=click.IntRange(1024, 65535),
              help="etcd members' peer port.")
@option("--cpu-per-node", type=CPU_QUOTA, default=None, show_default="no quota",
              help="CPU quota of each node (its agent, tenants and migration processes) in cores, e.g. 0.6; "
                   "needs root and the cgroup cpu controller.")
@option("--cpu-period", type=DURATION, default="100ms", show_default=True,
              help="With --cpu-per-node: the quota's period. A node that used its quota waits for the next "
                   "period, so the period bounds the stall a query can see (10ms: stalls of at most ~10 ms).")
@option("--cpu-weight", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="With --cpu-per-node: each node's CPU weight (cgroup v2 scale; v1 shares = weight x 10.24) "
                   "against the machine's other processes, so the quota is really given on a busy machine "
                   "(100: as much as one plain process; e.g. 1000).")
@option("--disk-read-per-node", type=RATE, default=None,
              help="Limit what each node (its tenants, backups) reads from the disk under RUN_DIR, e.g. 40MB/s: "
                   "a host with a slower disk, where the copy competes with the tenants' page reads. Needs root "
                   "and the cgroup blkio (v1) or io (v2) controller.", show_default="no limit")
@option("--netns", is_flag=True,
              help="Put each node in a network namespace of its own on a bridge (separate network hosts on "
                   "one machine: API, tenants, copy and replication cross an interface). Needs root and `ip`.")
@option("--netns-subnet", default="10.77.0.0/24", show_default=True, metavar="CIDR",
              help="With --netns: the bridge's subnet (root gets the first address, node-k the (k+1)-th, etcd "
                   "the last three).")
@option("--stats-interval", type=DURATION, default=None, show_default="60s",
              help="Agents' load-history interval read by `slacker rebalance` (e.g. 2s for a demo).")
@option("--tls/--no-tls", default=None,
              help="Make a cluster CA and a certificate per node (RUN_DIR/tls/): the agent API is HTTPS, the "
                   "snapshot stream, replication and tenant connections use TLS (with --netns traffic crosses "
                   "interfaces); --no-tls turns it off with --netns.", show_default="on with --netns, off on loopback")
@option("--fault-injection", is_flag=True,
              help="Let migrations pause at named points (hold_s): for tests and rehearsals, never production.")
@option("--router", "router", type=HOST_PORT, default="127.0.0.1:6033", show_default=True,
              help="Start a router (one MySQL address for every tenant, docs/router.md) on HOST:PORT; its "
                   "status and metrics on the next port (port 0: free ports). --no-router: none.")
@option("--no-router", is_flag=True, help="Start no router.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def cluster_up(nodes: int, run_dir: str, address: str, api_port: int, port_range: str, directory: str,
               directory_node: str, etcd_client_port: int, etcd_peer_port: int, cpu_per_node: float | None,
               cpu_period: float, cpu_weight: int, disk_read_per_node: float | None, netns: bool, netns_subnet: str, stats_interval: float | None,
               tls: bool | None, fault_injection: bool, router: str, no_router: bool, as_json: bool) -> None:
    """Start a local cluster and write its cluster file (RUN_DIR/cluster.toml).

    Idempotent: agents (and etcd members) already running are left alone, and
    after `cluster down` it brings the same cluster back with every tenant: an
    option not given is the one the cluster was made with (the cluster file's
    [up] table), so `cluster up --dir DIR` alone is enough; a given option that
    changes its shape is refused (`cluster down --purge` first). With
    the default SQLite directory node-1 serves it unless --directory-node names
    another; `--directory etcd` starts three etcd members on the first three
    node addresses and every agent uses them. `--netns` gives every node a
    network namespace and address of its own (etcd then listens on the bridge)
    and implies --tls (say --no-tls for plain text); `cluster down` removes them.
    """
    from ..local_cluster import up, with_recorded
    from ..config import parse_port_range

    parse_port_range(port_range)
    ctx = click.get_current_context()
    given = {_UP_NAMES.get(p, p) for p in ctx.params
             if ctx.get_parameter_source(p) is not click.core.ParameterSource.DEFAULT}
    opts = with_recorded(Path(run_dir), {
        "nodes": nodes, "first_address": address, "api_port": api_port, "port_range": port_range,
        "directory": directory, "directory_node": directory_node, "etcd_client_port": etcd_client_port,
        "etcd_peer_port": etcd_peer_port, "fault_injection": fault_injection, "cpu_per_node": cpu_per_node,
        "netns": netns, "netns_subnet": netns_subnet, "stats_interval_s": stats_interval, "tls": tls,
        "disk_read_per_node": disk_read_per_node, "router": "" if no_router else router,
        "cpu_period_s": cpu_period, "cpu_weight": cpu_weight}, given)
    if opts["tls"] is None:
        opts["tls"] = opts["netns"]  # separate network hosts: what crosses them is encrypted unless told not to
    opts["router"] = opts["router"] or None
    path = up(Path(run_dir), **opts)
    cpu_per_node, disk_read_per_node, no_router = opts["cpu_per_node"], opts["disk_read_per_node"], not opts["router"]
    cpu_period, cpu_weight = opts["cpu_period_s"], opts["cpu_weight"]
    c = load_cluster(str(path))
    from ..router.local import listening
    where = f"etcd at {', '.join(c.etcd_endpoints)}" if c.directory_backend == "etcd" else f"on {c.directory_node}"
    if as_json:
        print_json({"cluster_file": str(path), "nodes": [vars(n) for n in c.nodes.values()],
                    "directory": c.directory_node, "directory_backend": c.directory_backend,
                    "etcd_endpoints": list(c.etcd_endpoints), "cpu_per_node": cpu_per_node,
                    "cpu_period_s": cpu_period if cpu_per_node else None,
                    "cpu_weight": cpu_weight if cpu_per_node else None,
                    "disk_read_per_node": disk_read_per_node,
                    "netns_subnet": c.local_subnet or None, "tls_ca": str(c.tls_ca) if c.tls_ca else None,
                    "router": None if no_router else listening(Path(run_dir))})
        return
    click.echo(f"cluster up: {len(c.nodes)} nodes, directory {where}"
               + (f", {cpu_per_node:g} CPU per node (period {cpu_period * 1000:g} ms, weight {cpu_weight})"
                  if cpu_per_node else "")
               + (f", disk reads ≤ {disk_read_per_node / 1e6:g} MB/s per node" if disk_read_per_node else "")
               + (f", one network namespace per node on {c.local_subnet}" if c.local_subnet else "")
               + (f", TLS (CA {c.tls_ca})" if c.tls_ca else ", plain text"))
    for n in c.nodes.values():
        click.echo(f"  {n.name:8} {n.url:28} tenants on {n.tenant_host}")
    if not no_router:
        click.echo(f"  router   {str(listening(Path(run_dir))):28} every tenant: log in as USER@TENANT (docs/router.md)")
    click.echo(f"cluster file: {path}")
    if Path(run_dir).resolve() != Path("run").resolve():
        click.echo(f"use it with: export SLACKER_CLUSTER={path}")


@cluster.command("down")
@option("--dir", "run_dir", default=None, type=click.Path(file_okay=False),
              show_default="the cluster file's directory, else ./run", help="Run directory of the cluster.")
@option("--purge", is_flag=True, help="Also delete the run directory: all tenants' data is gone.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def cluster_down(cli: CliContext, run_dir: str | None, purge: bool, as_json: bool) -> None:
    """Stop every agent of a local cluster and its tenants, its etcd and namespaces.

    The data is kept: `cluster up --dir DIR` (no options needed) brings the same cluster
    back, every tenant on the node that served it. --purge deletes it all.
    """
    from ..local_cluster import down

    if run_dir is None:
        run_dir = str(Path(cli.cluster_path).parent) if cli.cluster_path else "run"
    stopped = down(Path(run_dir), purge=purge)
    if as_json:
        print_json({"run_dir": str(Path(run_dir).resolve()), "stopped": stopped, "purged": purge})
        return
    click.echo(f"cluster down: stopped {', '.join(stopped)}" + (" and removed its data" if purge else ""))
