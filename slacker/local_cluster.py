"""A local cluster on one machine: N agents on their own loopback addresses.

`up` writes the admin credential (RUN_DIR/token), the router's and the monitor's
(RUN_DIR/credentials/), a cluster file (how to reach the directory, the credential,
the CA: no node list) and one agent config per node under a run directory, starts
the agents as daemons, waits until each answers and registers each as a member. Each
node gets its own 127.0.0.x address, so a tenant keeps its port when it moves
between local nodes, and its own data root. With `directory="etcd"` a
three-member etcd cluster (local_etcd.py) starts first, on the first three
node addresses, and every agent uses it instead of node-1's SQLite file.
With `netns=True` each node lives in a network namespace of its own on a
bridge (netns.py): its own address, so its API, tenants, the copy and
replication cross a real interface; etcd then listens on the bridge.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from .agent.client import AgentClient
from . import cgroups, local_etcd, netns as netns_mod
from .config import DIRECTORY_BACKENDS, NodeSpec, load_agent_config, load_cluster, write_toml
from .errors import AgentUnavailable, Conflict, InvalidInput, SlackerError, VersionSkew
from .mariadb import write_secret
from .procs import alive as _alive, read_pid as _read_pid
from .tenants import TenantManager

DEFAULT_API_PORT = 7701
START_TIMEOUT_S = 90.0


def up(run_dir: Path, nodes: int = 2, first_address: str = "127.0.0.2", api_port: int = DEFAULT_API_PORT,
       port_range: str = "13306-23305", directory_node: str = "node-1", fault_injection: bool = False,
       directory: str = "sqlite", etcd_client_port: int = 2379, etcd_peer_port: int = 2380,
       cpu_per_node: float | None = None, netns: bool = False, netns_subnet: str = netns_mod.DEFAULT_SUBNET,
       stats_interval_s: float | None = None, tls: bool = False, disk_read_per_node: float | None = None,
       router: str | None = None, cpu_period_s: float = cgroups.DEFAULT_PERIOD_S,
       cpu_weight: int = cgroups.DEFAULT_WEIGHT) -> Path:
    """Start `nodes` local agents (and etcd if asked); returns the cluster file path.
    Re-running starts what is missing.

    `directory` is "sqlite" (`directory_node` serves it) or "etcd" (a local three-member etcd
    cluster on the first three node addresses); `fault_injection` lets migrations pause at named
    points (tests and rehearsals only). `cpu_per_node` puts each node's agent, and so its tenants
    and migration processes, in a cgroup with that many CPUs of quota per `cpu_period_s` and
    `cpu_weight` against the machine's other processes (agents already running keep their group; the
    quota itself is updated). `disk_read_per_node` (bytes/s) does the same with a
    limit on what each node reads from the disk under `run_dir` (a host with a slower disk). `netns`
    puts each node in a network namespace of its own with an address from `netns_subnet`
    (first_address is then unused). `stats_interval_s` sets the agents' load-history interval
    (default a minute; seconds in tests, see docs/rebalance.md).
    `tls` makes a cluster CA and a certificate per node (RUN_DIR/tls/) and turns on HTTPS for the
    agents, TLS for the snapshot stream, the tenants and replication; without it everything is plain
    text. `router` (HOST:PORT) also starts a router there (slacker/router/local.py)."""
    if cpu_per_node is not None:
        cgroups.validate_cpus(cpu_per_node)
    cgroups.validate_period(cpu_period_s)
    cgroups.validate_weight(cpu_weight)
    if disk_read_per_node is not None:
        cgroups.validate_read_bps(disk_read_per_node)
        cgroups.disk_of(run_dir)  # a run directory on tmpfs cannot be limited: say so before anything starts
    if directory not in DIRECTORY_BACKENDS:
        raise InvalidInput(f"unknown directory {directory!r}", f"expected one of {', '.join(DIRECTORY_BACKENDS)}", "")
    if directory == "etcd" and (etcd_client_port == etcd_peer_port or api_port in (etcd_client_port, etcd_peer_port)):
        raise InvalidInput("etcd ports clash", f"client {etcd_client_port}, peer {etcd_peer_port}, API {api_port}",
                           "give each its own port")
    if not 1 <= nodes <= 64:
        raise InvalidInput(f"--nodes {nodes} is out of range", "a local cluster has 1 to 64 nodes", "")
    if netns:
        netns_mod.check_privileges()
        netns_mod.plan(run_dir, [f"node-{i + 1}" for i in range(nodes)], netns_subnet)  # validates early
    try:
        base = ipaddress.IPv4Address(first_address)
    except ValueError:
        raise InvalidInput(f"invalid address {first_address!r}", "expected an IPv4 loopback address",
                           "for example 127.0.0.2") from None
    if not netns and (not base.is_loopback or not (base + max(nodes, 3) - 1).is_loopback):
        raise InvalidInput(f"address {first_address} with {nodes} nodes leaves 127.0.0.0/8",
                           "a local cluster lives on loopback", "use 127.0.0.2")
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    cluster_file = run_dir / "cluster.toml"
    token_file = run_dir / "token"
    if cluster_file.exists():
        _check_same_cluster(run_dir, load_cluster(str(cluster_file)), nodes, directory, netns, netns_subnet, tls,
                            str(base), api_port)
    if not token_file.exists():
        write_secret(token_file, secrets.token_hex(32) + "\n")
    from .config import read_token
    from .credentials import write_scoped_files
    # The other scopes' files beside the admin one: the local router gets the router credential only.
    write_scoped_files(read_token(token_file), run_dir / "credentials")
    names = [f"node-{i + 1}" for i in range(nodes)]
    net = netns_mod.setup(run_dir, names, netns_subnet) if netns else None
    specs = []
    for i, name in enumerate(names):
        host = net.node(name).address if net else str(base + i)
        specs.append({"name": name, "url": f"{'https' if tls else 'http'}://{host}:{api_port}", "tenant_host": host})
    if directory_node not in {s["name"] for s in specs}:
        raise InvalidInput(f"directory node {directory_node!r} is not one of the {nodes} nodes",
                           "it must be node-1 ... node-N", "for example --directory-node node-1")
    top = {"credential_file": str(token_file), "directory": directory_node}
    if directory != "etcd":  # the agent serving the SQLite directory: the one address the file needs
        top["directory_url"] = next(s["url"] for s in specs if s["name"] == directory_node)
    if cpu_per_node:
        top |= {"cpu_per_node": cpu_per_node, "cpu_period": cpu_period_s, "cpu_weight": cpu_weight}
    if disk_read_per_node:
        top["disk_read_per_node"] = int(disk_read_per_node)
    if net:
        top["local_subnet"] = net.subnet  # a bridge on this machine: plain-text links here stay on it
    pki = {}
    if tls:
        from .tls import ensure_cluster_pki
        pki = ensure_cluster_pki(run_dir / "tls", {s["name"]: [s["tenant_host"], s["name"]] for s in specs})
        top["tls_ca"] = str(next(iter(pki.values())).ca)
    if directory == "etcd":
        # Three members whatever the node count: one may fail and a majority remains.
        hosts = list(net.etcd_addresses) if net else [str(base + i) for i in range(3)]
        members = local_etcd.plan(hosts, etcd_client_port, etcd_peer_port, tls_dir=run_dir / "tls" if tls else None,
                                  source_addresses=(net.root_address,) if net else ("127.0.0.1",))
        endpoints = local_etcd.start(run_dir / "etcd", members)
        top |= {"directory_backend": "etcd", "etcd_endpoints": endpoints, "etcd_prefix": "/slacker"}
    asked = {"nodes": nodes, "first_address": str(base), "api_port": api_port, "port_range": port_range,
             "directory": directory, "directory_node": directory_node, "etcd_client_port": etcd_client_port,
             "etcd_peer_port": etcd_peer_port, "cpu_per_node": cpu_per_node, "disk_read_per_node": disk_read_per_node,
             "netns": netns, "netns_subnet": netns_subnet, "stats_interval_s": stats_interval_s, "tls": tls,
             "fault_injection": fault_injection, "router": router or "", "cpu_period_s": cpu_period_s,
             "cpu_weight": cpu_weight}
    # No [[nodes]]: the agents register themselves in the directory (and `up` registers them below).
    write_toml(cluster_file, top, {"up": {k: v for k, v in asked.items() if v is not None}},
               header="Slacker cluster file, written by `slacker cluster up` ([up]: the options it was run with).")
    for spec in specs:
        node_dir = run_dir / spec["name"]
        node_dir.mkdir(exist_ok=True)
        write_toml(node_dir / "agent.toml", {
            "node": spec["name"], "cluster": str(cluster_file), "data_root": str(node_dir),
            "listen": f"{spec['tenant_host']}:{api_port}", "tenant_host": spec["tenant_host"],
            "advertise_url": spec["url"],
            "port_range": port_range, "fault_injection": fault_injection,
            **({"stats_interval": float(stats_interval_s)} if stats_interval_s is not None else {}),
            **({f"tls_{k}": v for k, v in pki[spec["name"]].to_dict().items()} if tls else {})},
            header=f"Agent config of {spec['name']}, written by `slacker cluster up`.")
    cluster = load_cluster(str(cluster_file))
    token = cluster.token()
    # The directory node first: the others look tenants up there.
    specs.sort(key=lambda s: s["name"] != directory_node)
    groups: dict[str, list] = {s["name"]: [] for s in specs}
    for s in specs:
        if cpu_per_node:
            groups[s["name"]].append(cgroups.create(run_dir, s["name"], cpu_per_node, cpu_period_s, cpu_weight))
        if disk_read_per_node:
            groups[s["name"]].append(cgroups.create_disk(run_dir, s["name"], disk_read_per_node, run_dir))
    for spec in specs:
        client = AgentClient(spec["url"], token, spec["name"], timeout_s=5, ca_file=cluster.tls_ca)
        if _answers(client):
            continue
        _spawn_agent(run_dir / spec["name"], groups.get(spec["name"]))
    for spec in specs:
        _wait_answering(AgentClient(spec["url"], token, spec["name"], timeout_s=5, ca_file=cluster.tls_ca),
                        run_dir / spec["name"])
    _register(cluster, token, specs)
    if router:
        from .router import local as local_router
        local_router.start(run_dir, cluster_file, router)
    return cluster_file


UP_OPTIONS = ("nodes", "first_address", "api_port", "port_range", "directory", "directory_node",
              "etcd_client_port", "etcd_peer_port", "cpu_per_node", "disk_read_per_node", "netns", "netns_subnet",
              "stats_interval_s", "tls", "fault_injection", "router", "cpu_period_s", "cpu_weight")


def recorded_options(run_dir: Path) -> dict:
    """The options of `up` that made the cluster in `run_dir` (its cluster file's [up] table; for a
    file written before that table existed, what its cluster file and agent configs show), {} if
    there is no cluster there. `router` is "" for none."""
    cluster_file = Path(run_dir).resolve() / "cluster.toml"
    if not cluster_file.exists():
        return {}
    import tomllib
    doc = tomllib.loads(cluster_file.read_text())
    if isinstance(doc.get("up"), dict):
        return {k: v for k, v in doc["up"].items() if k in UP_OPTIONS}
    c = load_cluster(str(cluster_file))
    known = _local_or_seeds(cluster_file.parent, c)
    first = next((n for n in known if n.name == "node-1"), known[0])
    url = urlsplit(first.url)
    out = {"nodes": len(known), "directory": c.directory_backend, "directory_node": c.directory_node,
           "netns": bool(c.local_subnet), "tls": c.tls_ca is not None, "api_port": url.port}
    if c.local_subnet:
        out["netns_subnet"] = c.local_subnet
    else:
        out["first_address"] = url.hostname
    if c.etcd_endpoints:
        out["etcd_client_port"] = urlsplit(c.etcd_endpoints[0]).port
    agent_file = cluster_file.parent / first.name / "agent.toml"
    if agent_file.exists():
        agent = tomllib.loads(agent_file.read_text())
        out |= {k: agent[k] for k in ("port_range", "fault_injection") if k in agent}
        if "stats_interval" in agent:
            out["stats_interval_s"] = float(agent["stats_interval"])
    return out


def with_recorded(run_dir: Path, asked: dict, given: set[str]) -> dict:
    """`asked` (options of `up`) with every option not in `given` (left at its default) taken from
    the cluster already in `run_dir`: `cluster up --dir DIR` alone brings it back as it was made.
    Options given that differ in the cluster's shape are still refused by `up`."""
    recorded = recorded_options(run_dir)
    return {k: (recorded[k] if k not in given and k in recorded else v) for k, v in asked.items()}


def _shape(nodes: int, directory: str, netns: bool, tls: bool, subnet: str = "", address: str = "",
           api_port: int = 0) -> str:
    """The options that fix a local cluster's shape, as `cluster up` spells them."""
    words = [f"--nodes {nodes}", f"--directory {directory}"]
    if netns:
        words.append("--netns" + (f" --netns-subnet {subnet}" if subnet else ""))
    words.append("--tls" if tls else "--no-tls")
    if address:
        words.append(f"--address {address}")
    return " ".join(words + [f"--api-port {api_port}"])


def _check_same_cluster(run_dir: Path, existing, nodes: int, directory: str, netns: bool, netns_subnet: str,
                        tls: bool, first_address: str, api_port: int) -> None:
    """`up` on a run directory that holds a cluster (running, or stopped by `down`) brings that
    cluster back: it must be asked for with the same shape and addresses, or its tenants would
    lose their nodes (the directory names them by address)."""
    # The cluster file records a namespaced cluster by its bridge's subnet (local_subnet);
    # netns.json only while the namespaces exist (`down` removes them with it).
    was_netns = bool(existing.local_subnet) or (run_dir / "netns.json").exists()
    saved = netns_mod.load(run_dir)
    was_subnet = existing.local_subnet or (saved.subnet if saved else "")
    same_subnet = not (netns and was_subnet) or \
        ipaddress.IPv4Network(was_subnet) == netns_mod.parse_subnet(netns_subnet)
    known = _local_or_seeds(run_dir, existing)
    first = next((n for n in known if n.name == "node-1"), known[0])
    url = urlsplit(first.url)
    had = (len(known), existing.directory_backend, was_netns, existing.tls_ca is not None)
    where = ("" if was_netns else url.hostname, url.port)
    asked = ("" if netns else first_address, api_port)
    if had != (nodes, directory, netns, tls) or not same_subnet or where != asked:
        raise Conflict(f"the cluster in {run_dir} was set up with {_shape(*had, was_subnet, *where)}",
                       f"you asked for {_shape(nodes, directory, netns, tls, netns_subnet if netns else '', *asked)}",
                       f"leave those options out to bring it back as it was, with its tenants: "
                       f"`slacker cluster up --dir {run_dir}`; or run "
                       f"`slacker cluster down --purge --dir {run_dir}` first (deletes every tenant)")


def _register(cluster, token: str, specs: list[dict]) -> None:
    """Each node as a member, with the protocol its agent answers with. The agents register themselves
    too; doing it here means `up` returns with every node known, whichever agent's retry is pending."""
    from .agent.client import directory_for
    from .directory import Member
    from .membership import join

    directory = directory_for(cluster, token, caller="slacker cluster up")
    for spec in specs:
        client = AgentClient(spec["url"], token, spec["name"], timeout_s=10, ca_file=cluster.tls_ca)
        doc = client.request("GET", "/v1/status", timeout_s=10)
        join(directory, Member(spec["name"], spec["url"], spec["tenant_host"], int(doc.get("protocol") or 0)))


def local_nodes(run_dir: Path) -> list[NodeSpec]:
    """The nodes `cluster up` made in `run_dir`, from their agent configs (node-1, node-2, ...)."""
    out = []
    for cfg_file in run_dir.glob("node-*/agent.toml"):
        try:
            cfg = load_agent_config(cfg_file)
        except SlackerError:  # not one `up` wrote whole: the caller falls back to the cluster file
            return []
        out.append(NodeSpec(cfg.node, cfg.advertised_url(), cfg.tenant_host))
    return sorted(out, key=lambda n: int(n.name.rpartition("-")[2]) if n.name.rpartition("-")[2].isdigit() else 0)


def _local_or_seeds(run_dir: Path, cluster) -> list[NodeSpec]:
    """A local cluster's nodes: its agent configs, else (a file from before membership) its [[nodes]]."""
    return local_nodes(run_dir) or list(cluster.seeds.values())


def _answers(client: AgentClient) -> bool:
    try:
        client.request("GET", "/v1/status")
        return True
    except VersionSkew:  # it answers, in a protocol too far from ours (an upgrade rehearsal)
        return True
    except AgentUnavailable:
        return False


def _spawn_agent(node_dir: Path, groups: list = ()) -> None:
    log = open(node_dir / "agent.log", "ab")
    net = netns_mod.load(node_dir.parent)
    ns_fd, enter_ns = netns_mod.prepare_enter(net.node(node_dir.name).namespace) if net else (None, None)

    # Join the node's cgroup and network namespace before exec, so nothing the agent starts
    # (tenants, backups, pipes) ever runs outside them.
    def join() -> None:
        for group in groups:
            group.add(os.getpid())
        if enter_ns is not None:
            enter_ns()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "slacker", "agent", "--config", str(node_dir / "agent.toml")],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True,
                                preexec_fn=join if groups or enter_ns is not None else None)
    finally:
        log.close()
        if ns_fd is not None:
            os.close(ns_fd)
    (node_dir / "agent.pid").write_text(f"{proc.pid}\n")


def _wait_answering(client: AgentClient, node_dir: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _answers(client):
            return
        pid = _read_pid(node_dir / "agent.pid")
        if pid is None or not _alive(pid):
            break
        time.sleep(0.2)
    tail = " | ".join((node_dir / "agent.log").read_text(errors="replace").strip().splitlines()[-6:]) \
        if (node_dir / "agent.log").exists() else "no log"
    raise AgentUnavailable(f"agent {client.name} did not come up", tail, f"see {node_dir / 'agent.log'}")


def made_here(run_dir: Path, cluster) -> None:
    """Refuse a cluster that `cluster up` did not make in `run_dir`: its file must carry the [up] table
    `up` writes, and every node it names must have its agent config in `run_dir` with its data there.
    A copy of a fleet's cluster file (or a hand-written one) fails this, so `down` never stops, and
    `--purge` never deletes, the agents and tenants of a cluster it did not start."""
    import tomllib

    cluster_file = run_dir / "cluster.toml"
    try:
        doc = tomllib.loads(cluster_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"cannot read {cluster_file}", str(exc), "pass --dir of a local cluster") from None
    hint = ("`cluster down` stops only clusters made by `slacker cluster up`; stop a fleet's agents on "
            "their hosts (systemctl stop slacker-agent)")
    if not isinstance(doc.get("up"), dict):
        raise Conflict(f"{cluster_file} was not written by `slacker cluster up`", "it has no [up] table", hint)
    for spec in cluster.nodes.values():
        agent_file = run_dir / spec.name / "agent.toml"
        if not agent_file.exists():
            raise Conflict(f"{cluster_file} was not written by `slacker cluster up` in {run_dir}",
                           f"node {spec.name} has no agent config at {agent_file}", hint)
        data_root = load_agent_config(agent_file).data_root.resolve()
        if not data_root.is_relative_to(run_dir):
            raise Conflict(f"{cluster_file} was not written by `slacker cluster up` in {run_dir}",
                           f"node {spec.name} keeps its data in {data_root}, outside {run_dir}", hint)


def down(run_dir: Path, purge: bool = False, timeout_s: float = 60.0) -> list[str]:
    """Stop every agent of the local cluster and its tenants; `purge` also removes the run dir."""
    run_dir = run_dir.resolve()
    cluster_file = run_dir / "cluster.toml"
    if not cluster_file.exists() and (run_dir / "netns.json").exists():  # `up` failed half-way
        netns_mod.teardown(run_dir)
        return ["network namespaces"]
    if not cluster_file.exists():
        raise SlackerError(f"no local cluster in {run_dir}", "cluster.toml is missing",
                           "pass --dir, or nothing is running")
    cluster = load_cluster(str(cluster_file))
    made_here(run_dir, cluster)
    token = cluster.token()
    stopped = []
    from .router import local as local_router
    if local_router.stop(run_dir):  # first: it follows the directory
        stopped.append("router")
    for spec in reversed(_local_or_seeds(run_dir, cluster)):  # the directory node last
        node_dir = run_dir / spec.name
        client = AgentClient(spec.url, token, spec.name, timeout_s=10, ca_file=cluster.tls_ca)
        pid = _read_pid(node_dir / "agent.pid")
        try:
            # A node `down` stopped before has no pid file, and its address may be gone with its
            # namespace (a connect there waits out the timeout): ask it briefly, or not at all.
            if pid is None or _alive(pid):
                client.request("POST", "/v1/shutdown", {"stop_tenants": True}, timeout_s=10 if pid else 2)
        except (AgentUnavailable, VersionSkew):  # down or speaking another protocol: the signal stops it
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGTERM)
        if pid is not None:
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        # Whatever the agent did, no tenant process of this node may survive `down`.
        agent_cfg = node_dir / "agent.toml"
        if agent_cfg.exists():
            cfg = load_agent_config(agent_cfg)
            mgr = TenantManager(cfg.data_root, host=cfg.tenant_host, node=cfg.node, port_range=cfg.port_range)
            for t in mgr.list():
                mgr.stop_tenant(t)
            # and the node's shared server (its tenants' one process), which the tenant list does not hold
            from .shared_server import SharedServerManager
            SharedServerManager(mgr, None).stop()
        (node_dir / "agent.pid").unlink(missing_ok=True)
        cgroups.remove(run_dir, spec.name)
        cgroups.remove_disk(run_dir, spec.name)
        stopped.append(spec.name)
    if (run_dir / "etcd").exists():  # after the agents: they may use the directory while stopping
        local_etcd.stop(run_dir / "etcd")
        stopped.append("etcd")
    if (run_dir / "netns.json").exists():  # last: etcd listened on the bridge
        netns_mod.teardown(run_dir)
        stopped.append("network namespaces")
    if purge:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)
    return stopped
