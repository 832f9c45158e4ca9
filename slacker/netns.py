"""Local nodes as separate network hosts: one network namespace per node, joined by a bridge.

`slacker cluster up --netns` gives every node a namespace of its own with one
address on a veth pair whose other end sits on a bridge in the root namespace.
The root namespace holds an address on the bridge too (the CLI, tests and the
local etcd members reach the nodes through it), so an agent's API, its
tenants, the copy and replication all cross a real interface instead of
loopback. Names derive from the run directory, so two clusters on one machine
never share a namespace, and `teardown` finds everything again from
RUN_DIR/netns.json alone.
"""

from __future__ import annotations

import ctypes
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import Conflict, InvalidInput, MissingDependency, SlackerError

DEFAULT_SUBNET = "10.77.0.0/24"
NETNS_DIR = Path("/var/run/netns")
CLONE_NEWNET = 0x40000000
ETCD_MEMBERS = 3
_IP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NodeNet:
    name: str        # the Slacker node
    namespace: str   # `ip netns` name
    veth_root: str   # the pair's end on the bridge
    veth_node: str   # the pair's end inside the namespace
    address: str


@dataclass(frozen=True)
class Plan:
    run_id: str
    subnet: str
    bridge: str
    root_address: str          # the root namespace's address on the bridge
    etcd_addresses: tuple[str, ...]  # more root-side addresses, one per local etcd member
    nodes: tuple[NodeNet, ...]

    def node(self, name: str) -> NodeNet:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        return cls(run_id=d["run_id"], subnet=d["subnet"], bridge=d["bridge"], root_address=d["root_address"],
                   etcd_addresses=tuple(d["etcd_addresses"]), nodes=tuple(NodeNet(**n) for n in d["nodes"]))


def run_id(run_dir: Path) -> str:
    return hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:6]


def parse_subnet(text: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        raise InvalidInput(f"invalid --netns-subnet {text!r}", str(exc), "for example 10.77.0.0/24") from None
    if not net.is_private or net.is_loopback:
        raise InvalidInput(f"--netns-subnet {text} is not a private range", "the bridge must not shadow real hosts",
                           "use a range from 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16")
    return net


def plan(run_dir: Path, node_names: list[str], subnet: str = DEFAULT_SUBNET) -> Plan:
    """Names and addresses: node-k gets the subnet's (k+1)-th address, the root the first one and
    the local etcd members the last three."""
    net = parse_subnet(subnet)
    hosts = list(net.hosts())
    if len(node_names) + 1 + ETCD_MEMBERS > len(hosts):
        raise InvalidInput(f"--netns-subnet {subnet} is too small for {len(node_names)} nodes",
                           f"it has {len(hosts)} addresses; the root and {ETCD_MEMBERS} etcd members need "
                           f"{1 + ETCD_MEMBERS} of them", "use a /24")
    rid = run_id(run_dir)
    nodes = tuple(NodeNet(name=name, namespace=f"slacker-{rid}-{name}", veth_root=f"slv{rid}-{k + 1}",
                          veth_node=f"sln{rid}-{k + 1}", address=str(hosts[k + 1]))
                  for k, name in enumerate(node_names))
    return Plan(run_id=rid, subnet=str(net), bridge=f"slbr{rid}", root_address=str(hosts[0]),
                etcd_addresses=tuple(str(h) for h in hosts[-ETCD_MEMBERS:]), nodes=nodes)


# ---- the `ip` tool ---------------------------------------------------------------------

def ip_binary() -> str:
    path = shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.access(p, os.X_OK)),
                                      None)
    if path is None:
        raise MissingDependency("the ip command is not installed", "--netns sets up namespaces with iproute2",
                                "apt-get install iproute2")
    return path


def check_privileges() -> None:
    ip_binary()
    if os.geteuid() != 0:
        raise SlackerError("--netns needs root", "creating network namespaces, veth pairs and a bridge "
                           "needs CAP_NET_ADMIN and CAP_SYS_ADMIN", "run it as root (sudo), or without --netns")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([ip_binary(), *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise SlackerError(f"`ip {' '.join(args)}` failed", proc.stderr.strip() or f"exit {proc.returncode}",
                           "is another cluster using these names or addresses? `slacker cluster down` it first")
    return proc


def _link_exists(name: str, namespace: str | None = None) -> bool:
    args = ("-n", namespace) if namespace else ()
    return _ip(*args, "link", "show", "dev", name, check=False).returncode == 0


def _namespaces() -> set[str]:
    out = _ip("netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _root_addresses() -> dict[str, str]:
    """Root namespace's IPv4 networks by interface: {"10.77.0.1/24": "slbrabc123", ...}."""
    out = _ip("-4", "-o", "addr", "show", check=False).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "inet":
            found[parts[3]] = parts[1]
    return found


def _check_subnet_free(p: Plan) -> None:
    mine = ipaddress.IPv4Network(p.subnet)
    for cidr, dev in _root_addresses().items():
        if dev == p.bridge:
            continue
        if ipaddress.IPv4Interface(cidr).network.overlaps(mine):
            raise Conflict(f"subnet {p.subnet} is already in use", f"{dev} has {cidr}",
                           "pick another with --netns-subnet, e.g. 10.78.0.0/24")


def setup(run_dir: Path, node_names: list[str], subnet: str = DEFAULT_SUBNET) -> Plan:
    """Create the bridge, namespaces and veth pairs (idempotent) and record them in RUN_DIR/netns.json."""
    check_privileges()
    run_dir = Path(run_dir).resolve()
    saved = load(run_dir)
    p = saved if saved is not None else plan(run_dir, node_names, subnet)
    if saved is not None and ([n.name for n in saved.nodes] != list(node_names)
                              or ipaddress.IPv4Network(subnet) != ipaddress.IPv4Network(saved.subnet)):
        raise Conflict(f"the namespaces of {run_dir} were set up for {len(saved.nodes)} nodes on {saved.subnet}",
                       f"you asked for {len(node_names)} on {subnet}",
                       f"run `slacker cluster down --purge --dir {run_dir}` first")
    _check_subnet_free(p)
    (run_dir / "netns.json").write_text(json.dumps(p.to_dict(), indent=1))  # before creating: teardown finds it
    prefix = ipaddress.IPv4Network(p.subnet).prefixlen
    if not _link_exists(p.bridge):
        _ip("link", "add", p.bridge, "type", "bridge")
    have = _root_addresses()
    for a in (p.root_address, *p.etcd_addresses):
        if f"{a}/{prefix}" not in have:
            _ip("addr", "add", f"{a}/{prefix}", "dev", p.bridge)
    _ip("link", "set", p.bridge, "up")
    _check_subnet_free(p)  # again: another cluster may have taken the subnet since the first check
    present = _namespaces()
    for n in p.nodes:
        if n.namespace not in present:
            _ip("netns", "add", n.namespace)
        if not _link_exists(n.veth_node, n.namespace):
            if _link_exists(n.veth_root):
                _ip("link", "del", n.veth_root)
            _ip("link", "add", n.veth_root, "type", "veth", "peer", "name", n.veth_node)
            _ip("link", "set", n.veth_node, "netns", n.namespace)
        _ip("link", "set", n.veth_root, "master", p.bridge, "up")
        _ip("-n", n.namespace, "link", "set", "lo", "up")
        out = _ip("-n", n.namespace, "-4", "-o", "addr", "show", "dev", n.veth_node).stdout
        if f" {n.address}/" not in out:
            _ip("-n", n.namespace, "addr", "add", f"{n.address}/{prefix}", "dev", n.veth_node)
        _ip("-n", n.namespace, "link", "set", n.veth_node, "up")
    _wait_reachable(p)
    return p


def _wait_reachable(p: Plan, timeout_s: float = 10.0) -> None:
    # A new bridge port goes through the listening/learning states before it forwards (with STP
    # off it is immediate, but the link must be up on both ends first).
    deadline = time.monotonic() + timeout_s
    for n in p.nodes:
        while True:
            out = _ip("-n", n.namespace, "link", "show", "dev", n.veth_node, check=False).stdout
            if "LOWER_UP" in out or time.monotonic() > deadline:
                break
            time.sleep(0.05)


def load(run_dir: Path) -> Plan | None:
    f = Path(run_dir) / "netns.json"
    if not f.exists():
        return None
    return Plan.from_dict(json.loads(f.read_text()))


def namespace_pids(namespace: str) -> list[int]:
    out = _ip("netns", "pids", namespace, check=False).stdout
    return [int(x) for x in out.split() if x.isdigit()]


def teardown(run_dir: Path, timeout_s: float = 10.0) -> list[str]:
    """Kill whatever still runs in the namespaces, delete them, their veths and the bridge.
    Idempotent: what is already gone is skipped. Returns what it removed."""
    p = load(run_dir)
    if p is None:
        return []
    check_privileges()
    removed = []
    present = _namespaces()
    for n in p.nodes:
        if n.namespace in present:
            pids = namespace_pids(n.namespace)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout_s
            while namespace_pids(n.namespace) and time.monotonic() < deadline:
                time.sleep(0.05)
            _ip("netns", "del", n.namespace, check=False)
            removed.append(n.namespace)
        if _link_exists(n.veth_root):  # normally gone with its peer's namespace
            _ip("link", "del", n.veth_root, check=False)
    if _link_exists(p.bridge):
        _ip("link", "del", p.bridge, check=False)
        removed.append(p.bridge)
    (Path(run_dir) / "netns.json").unlink(missing_ok=True)
    return removed


def prepare_enter(namespace: str):
    """(fd, enter): `enter()` moves the calling process into the namespace, for a child's
    preexec_fn; the caller closes `fd` after the fork. Everything that could take a lock (opening
    the file, finding setns in libc) happens here, before the fork. setns rather than
    `ip netns exec`, which also unshares the mount namespace and remounts /sys."""
    fd = os.open(NETNS_DIR / namespace, os.O_RDONLY | os.O_CLOEXEC)
    setns = ctypes.CDLL(None, use_errno=True).setns

    def enter() -> None:
        if setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({namespace}) failed")

    return fd, enter


def namespace_of_pid(pid: int) -> str | None:
    """The network namespace inode of a process, as /proc shows it (net:[4026...])."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None
