"""`slacker ycsb load|run`: the YCSB-style benchmark harness on the command line (thin: parse, call, print)."""

from __future__ import annotations

import sys

import click

from ..errors import InvalidInput
from . import main
from .common import DURATION, CliContext, option, pass_cli, print_json, stop_like_ctrl_c


def _endpoint_options(f):
    # Applied bottom-up: these appear in --help in this order.
    f = option("--password-file", type=click.Path(dir_okay=False),
                     help="File holding the password for --host (never give a password in argv).")(f)
    f = option("--user", default="app", metavar="USER", show_default=True, help="MySQL user for --host.")(f)
    f = option("--port", type=click.IntRange(1, 65535), default=3306, metavar="PORT", show_default=True, help="Port for --host.")(f)
    f = option("--host", default=None, metavar="HOST",
                     help="Connect to this server directly instead of resolving TENANT through the cluster.")(f)
    f = option("--database", default=None,
                     metavar="NAME", show_default="the workload's `database` property, else the session's (a shared tenant's own), else ycsb",
                     help="Database holding the table.")(f)
    f = option("--driver", type=click.Choice(["mysqlclient", "pymysql"]), default="mysqlclient",
                     show_default=True, help="SQL client library for the hot path.")(f)
    f = option("-p", "overrides", multiple=True, metavar="NAME=VALUE",
                     help="Override a workload property (repeatable), as YCSB's -p.")(f)
    f = option("-P", "workload_files", multiple=True, required=True, metavar="FILE",
                     help="Workload property file (repeatable), e.g. workloads/slacker or a bare name.")(f)
    return f


def _tenant_ids(text: str) -> list[str]:
    from ..config import validate_tenant_id

    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not ids:
        raise InvalidInput("no tenant given", "expected a tenant id or a comma-separated list", "for example t1,t2")
    return [validate_tenant_id(t) for t in ids]


def _direct(tenant: str, host: str, port: int, user: str, password_file: str | None):
    from ..ycsb.targets import direct_endpoint

    return direct_endpoint(tenant, host, port, user, password_file)


@main.group("ycsb")
def ycsb() -> None:
    """YCSB-style open-loop benchmark: load a tenant, then drive it at a rate and export its latency.

    \b
    slacker ycsb load t1 -P workloads/slacker -p recordcount=100000
    slacker ycsb run t1 -P workloads/slacker -p recordcount=100000 --rate 100 --duration 60s --metrics-port 9464
    """


@ycsb.command("load")
@click.argument("tenant")
@_endpoint_options
@option("--threads", type=int, default=4, show_default=True, help="Loader connections.")
@option("--batch-rows", type=int, default=None, show_default="about 1 MB per statement", help="Rows per INSERT.")
@option("--drop", is_flag=True, help="Drop and recreate the table if it exists.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@pass_cli
def load_cmd(cli: CliContext, tenant: str, workload_files, overrides, driver, database, host, port, user,
             password_file, threads, batch_rows, drop, as_json) -> None:
    """Create the usertable on TENANT and bulk-load `recordcount` rows."""
    from ..ycsb.loader import LoadConfig, load_table
    from ..ycsb.properties import load_workload
    from ..ycsb.report import load_progress_line, load_summary_line
    from ..ycsb.targets import cluster_resolver

    wl = load_workload(workload_files, overrides)
    ids = _tenant_ids(tenant)
    if len(ids) != 1:
        raise InvalidInput("load takes one tenant", f"got {len(ids)}", "load each tenant with its own command")
    if host:
        ep = _direct(ids[0], host, port, user, password_file)
    else:
        ep = cluster_resolver(ids[0], cli.cluster())()
    tty = sys.stderr.isatty()

    def progress(p) -> None:
        if as_json:
            return
        line = load_progress_line(p)
        if tty:
            click.echo("\r" + line + "\033[K", nl=False, err=True)
        else:
            click.echo(line, err=True)

    result = load_table(LoadConfig(endpoint=ep, workload=wl, threads=threads, batch_rows=batch_rows,
                                   database=database, drop=drop, driver=driver, on_progress=progress))
    if tty and not as_json:
        click.echo("", err=True)
    if as_json:
        print_json(result.to_dict())
    else:
        for ign in wl.ignored:
            click.echo(f"ignored property: {ign}", err=True)
        click.echo(load_summary_line(result))


@ycsb.command("run")
@click.argument("tenants")
@_endpoint_options
@option("--rate", default=None, metavar="TPS[,TPS...]",
              help="Offered transactions per second: one for all tenants or one per tenant. "
                   "Without it the run is closed-loop: --mpl clients per tenant issue back to back.")
@option("--mpl", type=int, default=10, show_default=True, help="Worker connections per tenant.")
@option("--duration", type=DURATION, default="120s", show_default=True, help="Length of the arrival window.")
@option("--rate-step", "rate_steps", multiple=True, metavar="TIME:CHANGE",
              help="Change the rate at TIME after the start: +40%, -25%, x2 or =150 (repeatable).")
@option("--arrival", type=click.Choice(["poisson", "constant"]), default="poisson", show_default=True,
              help="Arrival process.")
@option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT", help="Serve Prometheus metrics on this port (0: any free port).")
@option("--metrics-addr", default="127.0.0.1", show_default=True, metavar="HOST", help="Address for --metrics-port.")
@option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write per-interval JSON lines here.")
@option("--interval", type=DURATION, default="1s", show_default=True, help="Reporting interval.")
@option("--seed", type=int, default=None, show_default="random, reported", help="Seed for arrivals and key choice.")
@option("--retry-timeout", type=DURATION, default="30s", show_default=True,
              help="Give a failing transaction up this long after its first failure.")
@option("--drain-timeout", type=DURATION, default="30s", show_default=True,
              help="After the window, how long queued transactions may still run.")
@option("--quiet", is_flag=True, help="No per-interval lines, only the summary.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document (the RunResult) instead of text.")
@pass_cli
def run_cmd(cli: CliContext, tenants: str, workload_files, overrides, driver, database, host, port, user,
            password_file, rate, mpl, duration, rate_steps, arrival, metrics_port, metrics_addr, out_path, interval,
            seed, retry_timeout, drain_timeout, quiet, as_json) -> None:
    """Drive TENANTS (comma-separated) with open-loop (--rate) or closed-loop transactions; report latency.

    Each tenant gets an independent benchmark: its own arrivals, queue and MPL
    worker connections. Latency runs from a transaction's scheduled arrival to
    its commit, so queueing counts.
    """
    from ..ycsb.arrivals import parse_rate_step, parse_rates
    from ..ycsb.properties import load_workload
    from ..ycsb.report import INTERVAL_HEADER, INTERVAL_UNITS, interval_line, summary_lines
    from ..ycsb.runner import Harness, RunConfig
    from ..ycsb.targets import TenantTarget, cluster_resolver

    wl = load_workload(workload_files, overrides)
    ids = _tenant_ids(tenants)
    rates: list = parse_rates(rate, len(ids)) if rate is not None else [None] * len(ids)
    steps = [parse_rate_step(s) for s in rate_steps]
    if host:
        if len(ids) != 1:
            raise InvalidInput("--host takes one tenant", f"got {len(ids)}",
                               "run one command per server, or resolve tenants through the cluster")
        targets = [TenantTarget.fixed(_direct(ids[0], host, port, user, password_file), rates[0], ids[0])]
    else:
        cluster = cli.cluster()
        targets = [TenantTarget(t, r, cluster_resolver(t, cluster)) for t, r in zip(ids, rates)]

    printed = [0]

    def on_interval(rec) -> None:
        if printed[0] % (30 * len(ids)) == 0:
            click.echo(INTERVAL_HEADER)
            click.echo(INTERVAL_UNITS)
        printed[0] += 1
        click.echo(interval_line(rec))

    cfg = RunConfig(targets=targets, workload=wl, mpl=mpl, duration_s=duration, arrival=arrival, rate_steps=steps,
                    interval_s=interval, metrics_port=metrics_port, metrics_addr=metrics_addr, out_path=out_path,
                    seed=seed, driver=driver, database=database, retry_timeout_s=retry_timeout,
                    drain_timeout_s=drain_timeout, on_interval=None if (quiet or as_json) else on_interval)
    interrupted = False
    stop_like_ctrl_c(sigterm=True)  # SIGTERM (systemd, timeout, a bench stopping its load): the summary still prints
    with Harness(cfg) as h:
        h.start()
        if h.metrics_url and not as_json:
            click.echo(f"metrics: {h.metrics_url}", err=True)
        try:
            result = h.wait()
        except KeyboardInterrupt:
            interrupted = True
            result = h.result
    if result is None:  # pragma: no cover - wait() always finishes the run on interrupt
        sys.exit(130)
    if as_json:
        print_json(result.to_dict())
    else:
        for line in summary_lines(result):
            click.echo(line)
    if interrupted:
        sys.exit(130)


