"""`slacker config check`: is this host's configuration one the agent (or router) can run with?

Loads the agent config and the cluster file with the loaders the daemons use, then checks what
they do not: that the running user can read the token and TLS files and write data_root, that
secrets are private, and that the MariaDB programs are installed. One line per check; exit 1 if any failed.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from . import main
from .common import CliContext, load_cluster, option, print_json

SYSTEM_AGENT_CONFIG = Path("/etc/slacker/agent.toml")
# What a database host runs: tenants (mariadbd, its bootstrap) and a migration's copy (mariabackup, mbstream).
PROGRAMS = ("mariadbd", "mariadb-install-db", "mariabackup", "mbstream")


@dataclass
class Check:
    check: str
    ok: bool
    detail: str


@main.group("config")
def config() -> None:
    """Check a host's Slacker configuration (docs/deployment.md)."""


@config.command("check")
@option("--agent", "agent_path", type=click.Path(dir_okay=False), default=None,
              show_default=f"{SYSTEM_AGENT_CONFIG} if it exists", help="Agent config to check (none on a router host).")
@option("--cluster", "cluster_path", type=click.Path(dir_okay=False), default=None,
              show_default="slacker's --cluster/$SLACKER_CLUSTER, else the agent config's `cluster`, else the usual lookup",
              help="Cluster file to check.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def config_check(ctx: click.Context, agent_path: str | None, cluster_path: str | None, as_json: bool) -> None:
    """Validate the agent config and the cluster file as the running user sees them.

    Run it as the service user (`runuser -u slacker -- slacker config check`): it checks that this
    user can read the token and keys and write data_root. Prints one line per check and exits 1 if
    any failed.
    """
    cli = ctx.find_object(CliContext)
    if agent_path is None and SYSTEM_AGENT_CONFIG.exists():
        agent_path = str(SYSTEM_AGENT_CONFIG)
    checks = run_checks(agent_path, cluster_path or (cli.cluster_path if cli else None))
    failed = [c for c in checks if not c.ok]
    if as_json:
        print_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        for c in checks:
            click.echo(f"{'ok  ' if c.ok else 'FAIL'}  {c.check}: {c.detail}")
        click.echo(f"{len(checks) - len(failed)} of {len(checks)} checks passed" if failed else
                   f"all {len(checks)} checks passed")
    ctx.exit(1 if failed else 0)


def run_checks(agent_path: str | None, cluster_path: str | None) -> list[Check]:
    """Every check, in order; a failed load skips the checks that need what it would have loaded."""
    from ..config import load_agent_config
    from ..errors import NotFound, SlackerError

    checks: list[Check] = []
    user = _user()
    checks.append(Check("user", True, f"{user} (uid {os.geteuid()})" +
                        ("; the production units run as the service user, not root" if os.geteuid() == 0 else "")))
    agent = None
    if agent_path is not None:
        try:
            agent = load_agent_config(agent_path)
            checks.append(Check("agent config", True, f"{agent.path}: node {agent.node}, listen "
                                f"{agent.listen_host}:{agent.listen_port}, tenants on {agent.tenant_host} "
                                f"ports {agent.port_range[0]}-{agent.port_range[1]}"))
        except SlackerError as exc:
            checks.append(Check("agent config", False, exc.one_line()))
    cluster = None
    try:
        path = cluster_path or (str(agent.cluster_file) if agent is not None else None)
        cluster = load_cluster(path)
        checks.append(Check("cluster file", True, f"{cluster.path} (from {cluster.found_by}): {len(cluster.nodes)} nodes, directory "
                            + (f"etcd ({len(cluster.etcd_endpoints)} endpoints)" if cluster.directory_backend == "etcd"
                               else f"sqlite on {cluster.directory_node}")))
    except SlackerError as exc:
        checks.append(Check("cluster file", False, exc.one_line()))
    if cluster is not None:
        checks.append(_token(cluster))
        if cluster.tls_ca is not None:
            checks.append(_readable("cluster CA", cluster.tls_ca))
    if agent is not None:
        if cluster is not None:
            try:
                spec = cluster.node(agent.node)
                checks.append(Check("node", True, f"{agent.node} is a member at {spec.url}"))
            except NotFound:  # a new host: its agent registers it in the directory at its first start
                checks.append(Check("node", True, f"{agent.node} is not a member yet: its agent registers it "
                                                  "in the directory when it starts"))
            except SlackerError as exc:  # the directory cannot be read: the agent starts and registers later
                checks.append(Check("node", True, f"{agent.node}: membership not checked ({exc.one_line()})"))
        if agent.tls is not None:
            checks += [_readable("TLS certificate", agent.tls.cert), _private("TLS key", agent.tls.key)]
        checks.append(_data_root(agent.data_root))
        checks += _secrets(agent.data_root)
        checks += [_program(p) for p in PROGRAMS]
    return checks


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _token(cluster) -> Check:
    from ..errors import NotFound, SlackerError

    try:
        cluster.token()  # readable by this user, 0600, long enough (the loader's own rules)
    except SlackerError as exc:
        return Check("token", False, exc.one_line())
    return _private("token", cluster.token_file)


def _readable(what: str, path: Path) -> Check:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return Check(what, False, f"{path}: cannot read it as {_user()} ({exc.strerror})")
    return Check(what, True, f"{path} readable")


def _private(what: str, path: Path) -> Check:
    """Readable by this user, owned by it, and by nobody else (0600 or 0400)."""
    try:
        st = path.stat()
        with open(path, "rb"):
            pass
    except OSError as exc:
        return Check(what, False, f"{path}: cannot read it as {_user()} ({exc.strerror})")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return Check(what, False, f"{path} has mode {oct(mode)}: others can read it (chmod 600 {path})")
    if st.st_uid != os.geteuid():
        return Check(what, False, f"{path} is owned by uid {st.st_uid}, not {_user()} (chown {_user()} {path})")
    return Check(what, True, f"{path} {oct(mode)}, owned by {_user()}")


def _data_root(root: Path) -> Check:
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check("data_root", False, f"{existing} is not writable by {_user()}"
                     + ("" if existing == root else f" (and {root} does not exist yet)"))
    if existing != root:
        return Check("data_root", True, f"{root} does not exist yet; {existing} lets {_user()} create it")
    st = root.stat()
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return Check("data_root", False, f"{root} has mode {oct(mode)}: others can write it (chmod 750 {root})")
    if st.st_uid != os.geteuid():
        return Check("data_root", False, f"{root} is owned by uid {st.st_uid}, not {_user()} "
                     f"(chown {_user()}: {root})")
    return Check("data_root", True, f"{root} {oct(mode)}, writable by {_user()}")


def _secrets(root: Path) -> list[Check]:
    """Tenants' passwords (tenants/ID/secrets/*): 0600 and this user's. One line for all of them."""
    files = sorted((root / "tenants").glob("*/secrets/*")) if (root / "tenants").is_dir() else []
    if not files:
        return []
    bad = []
    for f in files:
        st = f.stat()
        if stat.S_IMODE(st.st_mode) & 0o077 or st.st_uid != os.geteuid():
            bad.append(f"{f} ({oct(stat.S_IMODE(st.st_mode))}, uid {st.st_uid})")
    if bad:
        return [Check("tenant secrets", False, f"{len(bad)} of {len(files)} not 0600 and {_user()}'s: {bad[0]}"
                      f"{' ...' if len(bad) > 1 else ''} (chown -R {_user()}: {root}; chmod 600 those files)")]
    return [Check("tenant secrets", True, f"{len(files)} files, 0600 and {_user()}'s")]


def _program(name: str) -> Check:
    from ..errors import NotFound, SlackerError
    from ..mariadb.server import find_program

    try:
        return Check(name, True, find_program(name))
    except SlackerError as exc:
        return Check(name, False, exc.one_line())
