"""`slacker credential show` (mint a scoped credential to hand out) and `slacker credential info`."""

from __future__ import annotations

import click

from . import main
from .common import CliContext, option, pass_cli, print_json


@main.group("credential")
def credential() -> None:
    """Scoped credentials: admin, router, monitor (docs/deployment.md, "Credentials")."""


@credential.command("show")
@option("--scope", type=click.Choice(["router", "monitor"]), required=True,
              help="Which credential: router (application hosts) or monitor (Prometheus, dashboards).")
@option("--generation", type=click.IntRange(1, 1_000_000), default=None,
              show_default="the lowest the cluster file accepts, 1 unless raised",
              help="Its generation. A new generation is how a leaked credential is replaced.")
@option("--out", "out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write it to this file (mode 0600) instead of standard output.")
@pass_cli
def show(cli: CliContext, scope: str, generation: int | None, out: str | None) -> None:
    """Print (or write) the SCOPE credential, derived from the admin credential this host holds.

    Only a host with the admin credential can do this. Copy the result to the hosts that need it,
    for example `slacker credential show --scope router | ssh app1 'install -m 600 /dev/stdin
    /etc/slacker/router.cred'`.
    """
    from pathlib import Path

    from ..credentials import derive
    from ..mariadb import write_secret

    cluster = cli.cluster()
    keyring = cluster.keyring("minting a credential")
    generation = generation or keyring.min_generation[scope]
    token = derive(keyring.admin_secret, scope, generation)
    if out:
        write_secret(Path(out), token + "\n")
        click.echo(f"wrote the {scope} credential (generation {generation}) to {out}", err=True)
    else:
        click.echo(token)


@credential.command("info")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def info(cli: CliContext, as_json: bool) -> None:
    """Which credential this host presents (scope, generation, file), never the credential itself."""
    from ..credentials import DERIVED_SCOPES

    cluster = cli.cluster()
    cred = cluster.credential()
    doc = {"scope": cred.scope, "generation": cred.generation, "file": str(cluster.token_file),
           "min_generation": {s: int(cluster.min_generation.get(s, 1)) for s in DERIVED_SCOPES}}
    if as_json:
        print_json(doc)
        return
    click.echo(f"{cluster.token_file}: {cred}")


@credential.command("etcd-auth")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def etcd_auth(cli: CliContext, as_json: bool) -> None:
    """Turn on etcd's own authentication for this cluster's prefix (admin only; idempotent).

    Makes etcd's root user (the admin credential is its password: agents and admin hosts log in as
    root), a user and role per derived scope whose password is that scope's credential of the
    generation the cluster file accepts at least (router: read the prefix, write only its
    `state/routers/` keys; monitor: read the prefix), then enables authentication. Running agents,
    routers and CLIs log in when etcd first asks; run it again after raising a generation.
    """
    from ..credentials import DERIVED_SCOPES, derive
    from ..directory.etcd import EtcdStore, etcd_login, setup_auth
    from ..errors import InvalidInput

    cluster = cli.cluster()
    if cluster.directory_backend != "etcd":
        raise InvalidInput("etcd-auth needs the etcd directory", f"{cluster.path} uses {cluster.directory_backend}",
                           "with the SQLite directory the agents' API checks every credential already")
    keyring = cluster.keyring("turning on etcd's authentication")
    passwords = {"admin": keyring.admin_secret}
    passwords |= {s: derive(keyring.admin_secret, s, keyring.min_generation[s]) for s in DERIVED_SCOPES}
    store = EtcdStore(cluster.etcd_endpoints, cluster.etcd_prefix, ca_file=cluster.tls_ca,
                      auth=etcd_login("admin", keyring.admin_secret, cluster.etcd_prefix))
    steps = list(setup_auth(store, passwords))
    if as_json:
        print_json({"prefix": cluster.etcd_prefix, "steps": steps})  # the steps name users and roles, never a password
        return
    for line in steps:
        click.echo(line)


@credential.command("routes")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def routes(as_json: bool) -> None:
    """Which scope may call which agent route: the table the agents apply (slacker/credentials.py)."""
    from ..credentials import ACCESS, ADMIN, SCOPES
    from .common import print_table

    rows = [{"method": a.method, "route": a.route + (f" ({a.under}…)" if a.under else ""),
             "may": [s for s in SCOPES if s == ADMIN or s in a.scopes], "action": a.action} for a in ACCESS]
    if as_json:
        print_json({"routes": rows})
        return
    print_table(["method", "route", "may", "what"], [[r["method"], r["route"], ", ".join(r["may"]), r["action"]]
                                                     for r in rows])
