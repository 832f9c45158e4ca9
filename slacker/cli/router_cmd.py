"""`slacker router` (run one router in the foreground) and `slacker router status`."""

from __future__ import annotations

import click

from . import main
from .common import DURATION, HOST_PORT, HOST_PORT_OR_NONE, CliContext, option, pass_cli, print_json, print_table


@main.group("router", invoke_without_command=True)
@option("--listen", type=HOST_PORT, default="127.0.0.1:6033", show_default=True,
              help="Where clients connect to (0.0.0.0:PORT for every interface).")
@option("--admin", type=HOST_PORT_OR_NONE, default="127.0.0.1:6034", show_default=True,
              help="Address of the status and Prometheus metrics endpoint (/status, /metrics); '' for none.")
@option("--advertise", type=HOST_PORT, default=None, show_default="--listen; the host name for 0.0.0.0",
              help="The address `slacker locate` names.")
@option("--list-interval", type=DURATION, default="1s", show_default=True,
              help="How often a tenant the directory names but whose agent has not yet answered for its "
                   "credentials is asked again (every change of owner, creation and removal comes at once, "
                   "on one stream of the directory's changes).")
@option("--no-register", is_flag=True, help="Do not announce this router in the directory.")
@option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Certificate (PEM) to offer clients TLS with; with it the router refuses plain-text logins. "
                   "The owner side uses TLS by itself on a TLS cluster.")
@option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="Its private key (PEM).")
@click.pass_context
def router(ctx: click.Context, listen: str, admin: str, advertise: str | None, list_interval: float,
           no_register: bool, tls_cert: str | None, tls_key: str | None) -> None:
    """Serve every tenant on one MySQL-protocol address and follow the directory.

    Clients log in as USER@TENANT with the tenant's application password (for example
    `mariadb -h 127.0.0.1 -P 6033 -u app@t1 -p`); the router checks the password
    itself and forwards the connection to the tenant's current owner. Runs in the
    foreground until interrupted; see docs/router.md.
    """
    if ctx.invoked_subcommand is not None:
        return
    import logging
    import signal

    from ..agent.client import cluster_clients
    from ..router.control import Router, RouterOptions

    cli = ctx.find_object(CliContext)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = RouterOptions(listen=listen, admin=admin or None, advertise=advertise, list_interval_s=list_interval,
                         register=not no_register, tls_cert=tls_cert, tls_key=tls_key)
    cluster = cli.cluster()
    r = Router(cluster, opts, *cluster_clients(cluster)).start()
    signal.signal(signal.SIGTERM, lambda *_: r.stop())
    click.echo(f"router: clients to {r.listen} (USER@TENANT), status at http://{r.admin}/status, "
               f"metrics at http://{r.admin}/metrics" if r.admin else f"router: clients to {r.listen}", err=True)
    try:
        code = r.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        r.stop()
    ctx.exit(code)


@router.command("status")
@option("--admin", "admin", type=HOST_PORT, default=None, show_default="every router announced in the directory",
              help="One router's admin endpoint.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def router_status(cli: CliContext, admin: str | None, as_json: bool) -> None:
    """Routes, connections and directory reachability of running routers."""
    from ..errors import NotFound, SlackerError
    from ..router.control import fetch_status, registered_routers

    if admin:
        admins = [admin]
    else:
        from ..agent.client import cluster_clients
        _, directory = cluster_clients(cli.cluster())
        admins = [r["admin"] for r in registered_routers(directory) if r.get("admin")]
        if not admins:
            raise NotFound("no router is running", "none announced itself in the directory in the last 30 s",
                           "start one: `slacker router`, or `slacker cluster up` starts one")
    docs = []
    for a in admins:
        try:
            docs.append(fetch_status(a))
        except SlackerError as exc:
            docs.append({"admin": a, "error": exc.one_line()})
    if as_json:
        print_json({"routers": docs})
        return
    for d in docs:
        if "error" in d:
            click.echo(f"router {d['admin']}: {d['error']}")
            continue
        dr = d["directory"]
        state = "reachable" if dr["reachable"] else f"UNREACHABLE for {dr['since_s']:.0f}s ({dr['error']}): " \
                                                     "routing on the last owners known"
        click.echo(f"router {d['listen']} (admin {d['admin']}), up {d['uptime_s']:.0f}s, directory {state}")
        print_table(["tenant", "owner", "address", "epoch", "conns", "conns total", "statements", "auth fail",
                     "handovers", "ended at move"],
                    [[t["tenant"], t["node"] + (" (HELD)" if t.get("held") else ""),
                      f"{t['host']}:{t['port']}" if t["host"] else "-", t["epoch"],
                      t["connections_active"], t["connections_total"], t["statements_total"],
                      t["auth_failures_total"], t.get("holds_total", 0), t.get("ended_at_move_total", 0)]
                     for t in d["tenants"]])
