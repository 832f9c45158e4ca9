"""Cluster file and agent config (TOML): loading, validation at the edge, and writing.

The cluster file says how to reach the directory (etcd endpoints and prefix, or
the agent that serves the embedded SQLite one), the credential file this host
presents (`credential_file`, or `token_file` as older clusters call it;
slacker/credentials.py) and the CA. The fleet's nodes are members registered in
the directory; a [[nodes]] table in the file is a seed (see
`Cluster.refresh_members`). The CLI finds it via --cluster, $SLACKER_CLUSTER,
/etc/slacker/cluster.toml, or ./run/cluster.toml (a local cluster's, only where
no system file exists), and says which it used.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
import threading
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar
from pathlib import Path
from urllib.parse import urlparse

from .errors import InvalidInput, NotFound
from .tls import TlsFiles

DEFAULT_PORT_RANGE = (13306, 23305)  # tenants' ports on a node, both ends inclusive


def parse_port_range(text: str | tuple[int, int]) -> tuple[int, int]:
    """`13306-23305` -> (13306, 23305); both ends inclusive, within 1024-65535."""
    if isinstance(text, tuple):
        lo, hi = text
    else:
        m = re.match(r"^\s*(\d+)\s*-\s*(\d+)\s*$", str(text))
        if not m:
            raise InvalidInput(f"invalid port range {text!r}", "expected LOW-HIGH", "for example 13306-23305")
        lo, hi = int(m.group(1)), int(m.group(2))
    if not (1024 <= lo <= hi <= 65535):
        raise InvalidInput(f"invalid port range {lo}-{hi}", "ports must satisfy 1024 <= LOW <= HIGH <= 65535",
                           "for example 13306-23305")
    return lo, hi



TENANT_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,31})$")


def validate_tenant_id(tenant_id: str) -> str:
    """Lower-case letters, digits and dashes, 1-32 characters, not starting with a dash."""
    if not isinstance(tenant_id, str) or not TENANT_ID_RE.match(tenant_id) or len(tenant_id) > 32:
        raise InvalidInput(
            f"invalid tenant id {tenant_id!r}",
            "ids are 1-32 lower-case letters, digits or dashes, starting with a letter or digit",
            "for example t42 or shop-eu-1",
        )
    return tenant_id


SYSTEM_CLUSTER_FILE = Path("/etc/slacker/cluster.toml")
LOCAL_CLUSTER_FILE = Path("run/cluster.toml")
# The system file wins over the working directory's: a `run/` left in whatever directory an operator
# stands in must not redirect commands meant for the fleet.
DEFAULT_CLUSTER_PATHS = ((SYSTEM_CLUSTER_FILE, "the system file"), (LOCAL_CLUSTER_FILE, "the working directory"))
log = logging.getLogger("slacker.config")
# An unknown node name makes a reader ask the directory again, at most this often (it waits out the rest).
MEMBER_MISS_REFRESH_S = 1.0


@dataclass(frozen=True)
class NodeSpec:
    name: str
    url: str
    tenant_host: str
    protocol: int = 0  # the agent protocol it registered with; 0: unknown (a seed not registered yet)


DIRECTORY_BACKENDS = ("sqlite", "etcd")


@dataclass
class Cluster:
    # How a cluster reaches its directory to learn the members (cluster, token) -> DirectoryStore. Set by
    # slacker.agent.client, which holds the clients, when it is imported (agents and routers import it), and
    # by the CLI's load_cluster to a function importing it at the first read of the members (a command's
    # start loads neither http.client nor ssl): this module needs nothing above it. None: the seeds only.
    directory_factory: ClassVar[Callable[["Cluster", str], Any] | None] = None

    path: Path
    token_file: Path  # the credential file this host presents (`credential_file` or `token_file`)
    directory_node: str
    # [[nodes]] of the file: a bootstrap seed, not the membership.
    seeds: dict[str, NodeSpec] = field(default_factory=dict)
    # The agent that serves the embedded SQLite directory, when the file gives it as a URL.
    directory_url: str = ""
    # How the CLI found the file: "--cluster", "$SLACKER_CLUSTER", "the system file", "the working directory".
    found_by: str = "--cluster"
    directory_backend: str = "sqlite"  # "sqlite": served by directory_node; "etcd": etcd_endpoints
    etcd_endpoints: tuple[str, ...] = ()
    etcd_prefix: str = "/slacker"
    # Addresses on a bridge inside this machine (`cluster up --netns`): plain-text links there never
    # leave the machine, like loopback. Empty on real hosts.
    local_subnet: str = ""
    # The cluster CA: agents' https:// URLs and tenants' TLS are verified against it.
    tls_ca: Path | None = None
    # A local cluster's budget per node (`cluster up --cpu-per-node --cpu-period --cpu-weight
    # --disk-read-per-node`), as it was set up: cpu_per_node, cpu_period (s), cpu_weight, disk_read_per_node
    # (bytes/s). Empty when none was given.
    node_budget: dict = field(default_factory=dict)
    # The lowest generation of each derived credential the agents accept ([min_credential_generation]):
    # raised to revoke the older ones (docs/deployment.md, "Credentials").
    min_generation: dict = field(default_factory=dict)

    # Where members are learnt from (set by follow_members); None: the file's seeds only.
    member_source: object = field(default=None, repr=False, compare=False)
    # The members as this process knows them (see refresh_members); None: not read yet.
    _members: dict | None = field(default=None, repr=False, compare=False)
    members_read_at: float = field(default=0.0, repr=False, compare=False)  # monotonic; 0 = never
    members_error: str = field(default="", repr=False, compare=False)  # why the last read failed, if it did
    _refresh_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def nodes(self) -> dict[str, NodeSpec]:
        """The members as this process knows them. A file with [[nodes]] answers from them until
        follow_members() (the CLI, agents and routers call it); a file without reads the directory."""
        if self._members is None and self.member_source is None and not self.seeds:
            self._follow_from_file()
        return self._members if self._members is not None else self._fallback()

    def _fallback(self) -> dict[str, NodeSpec]:
        """Before any read of the members succeeded: the seeds, else the SQLite directory's own node."""
        if self.seeds or self.directory_backend != "sqlite" or not self.directory_url:
            return self.seeds
        return {self.directory_node: self.directory}

    def _follow_from_file(self) -> bool:
        from .errors import SlackerError
        factory = Cluster.directory_factory
        if factory is None:
            return False
        try:
            self.follow_members(factory(self, self.token()))
            return True
        except SlackerError as exc:
            log.debug("cannot reach the directory for the members: %s", exc.one_line())
            return False

    def node(self, name: str) -> NodeSpec:
        """A member by name. An unknown name makes a follower ask the directory again first: a node
        that joined after this process started is found without a restart."""
        spec = self.nodes.get(name)
        if spec is None and self.member_source is None:
            self._follow_from_file()
            spec = self.nodes.get(name)
        elif spec is None:
            # A view read before the node joined (`cluster up` registers every node just after the
            # agents' first reads) must not answer: read once more, after the miss, no sooner than
            # MEMBER_MISS_REFRESH_S after the last read (so unknown names cannot hammer the directory).
            missed_at = time.monotonic()
            time.sleep(max(0.0, self.members_read_at + MEMBER_MISS_REFRESH_S - missed_at))
            if self.members_read_at <= missed_at:
                self.refresh_members()
            spec = self.nodes.get(name)
        if spec is None:
            names = ', '.join(sorted(self.nodes)) or 'no nodes'
            if self.member_source is None:
                listed = f"{self.path} lists {names}"
            elif self.members_error:
                listed = f"the directory could not be read ({self.members_error}); the last view lists {names}"
            else:
                listed = f"the directory lists {names}"
            raise NotFound(f"node {name!r} is not a member of the cluster", listed,
                           "start its agent (it registers itself) or `slacker node add`; see `slacker node list`")
        return spec

    def follow_members(self, directory) -> "Cluster":
        """Learn members from `directory` from now on (and read them once)."""
        self.member_source = directory
        self.refresh_members()
        return self

    def refresh_members(self) -> dict[str, NodeSpec]:
        """Read the members again. The rule: every member the directory lists, as registered, plus
        each seed ([[nodes]]) of a name the directory neither lists nor records as removed by
        `slacker node remove` (so a cluster whose agents predate membership keeps its nodes). When the
        directory cannot be read, the last view stays (the seeds at first) and a warning is logged."""
        source = self.member_source
        if source is None:
            return self.seeds
        from .errors import SlackerError

        with self._refresh_lock:
            try:
                members = source.members()
                removed = source.removed_members() if self.seeds else set()
            except SlackerError as exc:
                # Debug only: the CLI goes on to report the directory in one line; agents log members_error.
                log.debug("cannot read the members from the directory, using the last known: %s", exc.one_line())
                self.members_error = exc.one_line()
                self.members_read_at = time.monotonic()
                return self._members if self._members is not None else self._fallback()
            self._members = merge_members(self.seeds, members, removed)
            self.members_error = ""
            self.members_read_at = time.monotonic()
            return self._members

    def token(self) -> str:
        """The bearer this host presents (whatever its scope)."""
        return read_token(self.token_file)

    def credential(self):
        """The credential this host presents, with its scope (slacker.credentials.Credential)."""
        from .credentials import parse
        return parse(self.token())

    def require_admin(self, action: str) -> None:
        """Refuse, before anything is changed, a command the credential this host presents may not run:
        the agents refuse it too, but some of its steps go to the directory (etcd) directly."""
        from .credentials import ADMIN
        from .errors import Forbidden
        cred = self.credential()
        if cred.scope != ADMIN:
            raise Forbidden(f"the {cred.scope} credential may not {action}", "it needs admin",
                            f"run it where the admin credential is ({self.token_file} holds the {cred.scope} one)")

    def keyring(self, who: str = "an agent"):
        """What an agent verifies every scope with: it needs the admin credential."""
        from .credentials import ADMIN, Keyring
        cred = self.credential()
        if cred.scope != ADMIN:
            raise InvalidInput(f"{who} needs the admin credential", f"{self.token_file} holds {cred}",
                               "a database host's cluster file names the admin credential file "
                               "(docs/deployment.md, \"Credentials\")")
        return Keyring(cred.token, self.min_generation)

    @property
    def directory(self) -> NodeSpec:
        """The agent that serves the embedded SQLite directory (its URL from the file, never the directory)."""
        if self.directory_url:
            seed = self.seeds.get(self.directory_node)
            return NodeSpec(self.directory_node, self.directory_url,
                            seed.tenant_host if seed else urlparse(self.directory_url).hostname or "")
        if self.directory_node in self.seeds:
            return self.seeds[self.directory_node]
        return self.node(self.directory_node)


def merge_members(seeds: dict[str, NodeSpec], members, removed: set[str]) -> dict[str, NodeSpec]:
    """The membership a reader uses: the directory's members, then the seeds it lacks (unless removed)."""
    out = {m.name: NodeSpec(m.name, m.url.rstrip("/"), m.tenant_host, int(m.protocol)) for m in members}
    for name, spec in seeds.items():
        if name not in out and name not in removed:
            out[name] = spec
    return dict(sorted(out.items()))


@dataclass
class AgentConfig:
    node: str
    cluster_file: Path
    data_root: Path
    listen_host: str
    listen_port: int
    tenant_host: str
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE
    path: Path | None = None
    # Honour migrations' hold_s (pauses at named points) for tests and rehearsals; off in production.
    fault_injection: bool = False
    # Per-tenant load history (GET /v1/tenant-stats, read by `slacker rebalance`): one sample every
    # stats_interval_s, the last stats_history kept. A minute in production, seconds in tests.
    stats_interval_s: float = 60.0
    stats_history: int = 30
    # This node's certificate, key and the cluster CA: the API is HTTPS, the snapshot stream, the
    # tenants and replication use TLS. None: plain text (the single-machine loopback default).
    tls: TlsFiles | None = None
    # With TLS: tenants refuse TCP clients without TLS (require_secure_transport; the unix socket stays open).
    tenant_require_tls: bool = True
    # The URL other hosts reach this agent at, as it registers itself in the directory. Empty: the
    # cluster file's [[nodes]] entry of this node if any, else derived (advertised_url()).
    advertise_url: str = ""
    # How often the agent re-reads the members from the directory (it also does on an unknown name).
    members_refresh_s: float = 10.0

    def advertised_url(self, seed_url: str = "") -> str:
        """advertise_url, else the seed's, else scheme from TLS, host from listen (or tenant_host, or this
        host's name when listen is a wildcard) and the listen port."""
        if self.advertise_url:
            return self.advertise_url
        if seed_url:
            return seed_url
        host = self.listen_host
        if host in ("", "0.0.0.0", "::", "[::]"):
            host = self.tenant_host if self.tenant_host not in ("", "0.0.0.0", "::") else socket.getfqdn()
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{'https' if self.tls is not None else 'http'}://{host}:{self.listen_port}"


def read_token(path: Path) -> str:
    try:
        st = path.stat()
        token = path.read_text().strip()
    except OSError as exc:
        raise NotFound(f"cannot read credential file {path}", exc.strerror or str(exc),
                       "check the cluster file's credential_file (or token_file)") from None
    if st.st_mode & 0o077:
        raise InvalidInput(f"credential file {path} is readable by others", f"mode {oct(st.st_mode & 0o777)}",
                           f"chmod 600 {path}")
    if len(token) < 16:
        raise InvalidInput(f"credential in {path} is too short", "it needs at least 16 characters",
                           "write a random token, e.g. from `openssl rand -hex 32`")
    return token


def _load_toml(path: Path, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise NotFound(f"{what} {path} not found", "no such file",
                       "run `slacker cluster up` or pass --cluster FILE") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{what} {path} is not valid TOML", str(exc), "fix the file") from None


def find_cluster_file(explicit: str | None) -> tuple[Path, str]:
    """The cluster file to use and how it was found: --cluster, then $SLACKER_CLUSTER, then the
    system file, then ./run/cluster.toml."""
    if explicit:
        return Path(explicit), "--cluster"
    if os.environ.get("SLACKER_CLUSTER"):
        return Path(os.environ["SLACKER_CLUSTER"]), "$SLACKER_CLUSTER"
    for p, how in DEFAULT_CLUSTER_PATHS:
        if p.exists():
            return p, how
    raise NotFound("no cluster file found",
                   "looked for --cluster, $SLACKER_CLUSTER, " + ", ".join(str(p) for p, _ in DEFAULT_CLUSTER_PATHS),
                   "run `slacker cluster up --nodes 2` for a local cluster, or pass --cluster FILE")


def load_cluster(explicit: str | None = None) -> Cluster:
    found, found_by = find_cluster_file(explicit)
    path = found.resolve()
    doc = _load_toml(path, "cluster file")
    try:
        token_file = _credential_file(doc, path)
        nodes = {}
        for n in doc.get("nodes", []):
            spec = NodeSpec(name=str(n["name"]), url=str(n["url"]).rstrip("/"),
                            tenant_host=str(n.get("tenant_host") or urlparse(n["url"]).hostname))
            if spec.name in nodes:
                raise InvalidInput(f"cluster file {path} names node {spec.name} twice", "", "remove one")
            nodes[spec.name] = spec
        directory = str(doc.get("directory") or next(iter(nodes), ""))
        directory_url = str(doc.get("directory_url", "")).rstrip("/")
        backend = str(doc.get("directory_backend", "sqlite"))
        endpoints = doc.get("etcd_endpoints", [])
        prefix = str(doc.get("etcd_prefix", "/slacker"))
        local_subnet = str(doc.get("local_subnet", ""))
        tls_ca = _path(doc["tls_ca"], path) if doc.get("tls_ca") else None
        budget = {k: doc[k] for k in ("cpu_per_node", "cpu_period", "cpu_weight", "disk_read_per_node") if k in doc}
        min_generation = _min_generation(doc.get("min_credential_generation", {}), path)
    except KeyError as exc:
        raise InvalidInput(f"cluster file {path} lacks {exc.args[0]!r}", "required key missing",
                           "see docs/configuration.md") from None
    if backend not in DIRECTORY_BACKENDS:
        raise InvalidInput(f"cluster file {path}: unknown directory_backend {backend!r}",
                           f"expected one of {', '.join(DIRECTORY_BACKENDS)}", "see docs/configuration.md")
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise InvalidInput(f"cluster file {path}: etcd_endpoints must be a list of URLs",
                           f"got {endpoints!r}", 'for example ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]')
    for e in endpoints:
        u = urlparse(e)
        if u.scheme not in ("http", "https") or not u.hostname or not u.port:
            raise InvalidInput(f"cluster file {path}: bad etcd endpoint {e!r}", "expected http(s)://HOST:PORT",
                               "see docs/configuration.md")
    if backend == "sqlite" and not (directory_url or nodes):
        raise InvalidInput(f"cluster file {path} does not say where the directory is",
                           "the SQLite directory needs directory_url (or a [[nodes]] entry for its node)",
                           'add directory = "node-1" and directory_url = "http://HOST:PORT" (docs/configuration.md)')
    if backend == "sqlite" and not directory:
        raise InvalidInput(f"cluster file {path} does not name the directory's node", "directory is missing",
                           'add directory = "node-1", the node whose agent serves the SQLite directory')
    if directory_url and urlparse(directory_url).scheme not in ("http", "https"):
        raise InvalidInput(f"cluster file {path}: bad directory_url {directory_url!r}", "expected http(s)://HOST:PORT",
                           "see docs/configuration.md")
    if directory_url.startswith("https:") and tls_ca is None:
        raise InvalidInput(f"cluster file {path}: directory_url is https but no tls_ca is given",
                           "agents' certificates are checked against the cluster CA", 'add tls_ca = "PATH/ca.crt"')
    if backend == "etcd" and not endpoints:
        raise InvalidInput(f"cluster file {path} uses the etcd directory without endpoints",
                           "etcd_endpoints is empty", "list the etcd members' client URLs")
    if not prefix.startswith("/") or prefix.endswith("/") or len(prefix) < 2:
        raise InvalidInput(f"cluster file {path}: bad etcd_prefix {prefix!r}", "expected /NAME", "for example /slacker")
    if local_subnet:
        try:
            ipaddress.IPv4Network(local_subnet)
        except ValueError as exc:
            raise InvalidInput(f"cluster file {path}: bad local_subnet {local_subnet!r}", str(exc),
                               "for example 10.77.0.0/24, or leave it out") from None
    for k, v in budget.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise InvalidInput(f"cluster file {path}: bad {k} {v!r}", "expected a positive number",
                               "see docs/configuration.md, or leave it out")
    for n in nodes.values():
        scheme = urlparse(n.url).scheme
        if scheme not in ("http", "https"):
            raise InvalidInput(f"cluster file {path}: node {n.name} has a bad url {n.url!r}",
                               "expected http(s)://HOST:PORT", "see docs/configuration.md")
        if scheme == "https" and tls_ca is None:
            raise InvalidInput(f"cluster file {path}: node {n.name} is https but no tls_ca is given",
                               "agents' certificates are checked against the cluster CA",
                               "add tls_ca = \"PATH/ca.crt\" (docs/deployment.md)")
    cluster = Cluster(path=path, token_file=token_file, directory_node=directory, seeds=nodes, found_by=found_by,
                      directory_url=directory_url, directory_backend=backend,
                      etcd_endpoints=tuple(e.rstrip("/") for e in endpoints),
                      etcd_prefix=prefix, tls_ca=tls_ca, local_subnet=local_subnet, node_budget=budget,
                      min_generation=min_generation)
    if backend == "sqlite" and not directory_url and directory not in nodes:
        raise InvalidInput(f"cluster file {path}: the directory node {directory!r} has no url",
                           "it is not among [[nodes]] and directory_url is not set", "add directory_url")
    return cluster


def _credential_file(doc: dict, path: Path) -> Path:
    """`credential_file` (what this host presents), or `token_file` as clusters before scoped credentials
    name it: an admin secret there stays the admin credential."""
    given = [k for k in ("credential_file", "token_file") if k in doc]
    if len(given) == 2:
        raise InvalidInput(f"cluster file {path} names both credential_file and token_file",
                           "they are the same setting", "keep credential_file")
    if not given:
        raise KeyError("credential_file")
    return _path(doc[given[0]], path)


def _min_generation(table, path: Path) -> dict[str, int]:
    from .credentials import DERIVED_SCOPES, MAX_GENERATION

    if not isinstance(table, dict):
        raise InvalidInput(f"cluster file {path}: min_credential_generation must be a table",
                           f"got {table!r}", "for example [min_credential_generation] router = 2")
    for scope, gen in table.items():
        if scope not in DERIVED_SCOPES or isinstance(gen, bool) or not isinstance(gen, int) \
                or not 1 <= gen <= MAX_GENERATION:
            raise InvalidInput(f"cluster file {path}: bad min_credential_generation {scope} = {gen!r}",
                               f"scopes are {', '.join(DERIVED_SCOPES)}, generations 1 to {MAX_GENERATION}",
                               "see docs/configuration.md")
    return dict(table)


def _bool(value, key: str, path: Path) -> bool:
    if isinstance(value, bool):
        return value
    raise InvalidInput(f"agent config {path}: {key} must be true or false", f"got {value!r}", "")


def _stats_interval(value, path: Path) -> float:
    from .units import parse_duration

    try:
        seconds = parse_duration(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, InvalidInput):
        seconds = -1.0
    if isinstance(value, bool) or not 1.0 <= seconds <= 3600.0:
        raise InvalidInput(f"agent config {path}: stats_interval {value!r} is out of range",
                           "it is 1s to 1h", 'for example stats_interval = "60s" (seconds in tests)')
    return seconds


def _members_refresh(value, path: Path) -> float:
    from .units import parse_duration

    try:
        seconds = parse_duration(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, InvalidInput):
        seconds = -1.0
    if isinstance(value, bool) or not 0.5 <= seconds <= 3600.0:
        raise InvalidInput(f"agent config {path}: members_refresh {value!r} is out of range",
                           "it is 0.5s to 1h", 'for example members_refresh = "10s"')
    return seconds


def _stats_history(value, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= 10_000:
        raise InvalidInput(f"agent config {path}: stats_history {value!r} is out of range",
                           "it is a number of samples, 3 to 10000", "for example stats_history = 30")
    return value


def _path(value, relative_to: Path) -> Path:
    p = Path(str(value))
    return p if p.is_absolute() else relative_to.parent / p


def _agent_tls(doc: dict, path: Path) -> TlsFiles | None:
    keys = ("tls_ca", "tls_cert", "tls_key")
    given = [k for k in keys if doc.get(k)]
    if not given:
        return None
    if len(given) != len(keys):
        raise InvalidInput(f"agent config {path}: TLS needs tls_ca, tls_cert and tls_key together",
                           f"only {', '.join(given)} given", "see docs/deployment.md")
    return TlsFiles(*(_path(doc[k], path) for k in keys)).check(f"agent config {path}")


def load_agent_config(path: str | Path) -> AgentConfig:
    path = Path(path).resolve()
    doc = _load_toml(path, "agent config")
    try:
        listen = str(doc["listen"])
        host, _, port = listen.rpartition(":")
        cluster_file = Path(doc["cluster"])
        if not cluster_file.is_absolute():
            cluster_file = path.parent / cluster_file
        data_root = Path(doc["data_root"])
        if not data_root.is_absolute():
            data_root = path.parent / data_root
        advertise = str(doc.get("advertise_url", "")).rstrip("/")
        if advertise and (urlparse(advertise).scheme not in ("http", "https") or not urlparse(advertise).port):
            raise InvalidInput(f"agent config {path}: bad advertise_url {advertise!r}", "expected http(s)://HOST:PORT",
                               "the URL other hosts reach this agent at, e.g. https://db4.example.net:7000")
        return AgentConfig(
            advertise_url=advertise,
            node=str(doc["node"]), cluster_file=cluster_file, data_root=data_root,
            listen_host=host or "127.0.0.1", listen_port=int(port),
            tenant_host=str(doc.get("tenant_host") or host or "127.0.0.1"),
            port_range=parse_port_range(doc.get("port_range", "%d-%d" % DEFAULT_PORT_RANGE)), path=path,
            fault_injection=_bool(doc.get("fault_injection", False), "fault_injection", path),
            stats_interval_s=_stats_interval(doc.get("stats_interval", 60.0), path),
            stats_history=_stats_history(doc.get("stats_history", 30), path),
            members_refresh_s=_members_refresh(doc.get("members_refresh", 10.0), path),
            tls=_agent_tls(doc, path),
            tenant_require_tls=_bool(doc.get("tenant_require_tls", True), "tenant_require_tls", path),
        )
    except KeyError as exc:
        raise InvalidInput(f"agent config {path} lacks {exc.args[0]!r}", "required key missing",
                           "see docs/configuration.md") from None
    except ValueError as exc:
        raise InvalidInput(f"agent config {path} is invalid", str(exc), "listen is HOST:PORT") from None


def _toml_value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'


def write_toml(path: Path, top: dict, tables: dict[str, list[dict] | dict] | None = None, header: str = "") -> None:
    """A tiny TOML writer for our flat files (scalars, tables, and arrays of tables)."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    for name, rows in (tables or {}).items():
        if isinstance(rows, dict):
            lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in rows.items()]
            continue
        for row in rows:
            lines += ["", f"[[{name}]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.items()]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
