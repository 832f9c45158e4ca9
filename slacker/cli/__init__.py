"""The `slacker` command: parse, call the library, print (human or --json).

No migration or tenant logic lives here; every command is a thin wrapper so the
same work can be driven from Python.
"""

from __future__ import annotations

import sys

import click

from ..errors import SlackerError
from .common import CliContext


class SlackerGroup(click.Group):
    """Turns SlackerError and usage errors into one line and a non-zero exit (traceback with --debug).
    Loads a command's family when it is asked for (FAMILIES), all of them to list them."""

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.commands and name in FAMILIES:
            _load(FAMILIES[name])
        return super().get_command(ctx, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _register()
        return super().list_commands(ctx)

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("slacker: aborted", err=True)
            sys.exit(130)
        except click.UsageError as exc:
            cmd = exc.ctx.command_path if exc.ctx else "slacker"
            click.echo(f"slacker: error: {exc.format_message()} (see '{cmd} --help')", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"slacker: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SlackerError as exc:
            obj = ctx.find_object(CliContext)
            if obj is not None and obj.debug:
                raise
            click.echo(f"slacker: error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("slacker: interrupted", err=True)
            sys.exit(130)


@click.group(cls=SlackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--cluster",
    "cluster_path",
    envvar="SLACKER_CLUSTER",
    type=click.Path(dir_okay=False),
    default=None,
    help="Cluster file (TOML). Default: $SLACKER_CLUSTER, else /etc/slacker/cluster.toml if present, else ./run/cluster.toml. `slacker status` says which it used.",
)
@click.option(
    "--credential",
    "credential_path",
    envvar="SLACKER_CREDENTIAL",
    type=click.Path(dir_okay=False),
    default=None,
    help="Credential file to present instead of the one the cluster file names (admin, router or monitor; "
         "docs/deployment.md, \"Credentials\"). Default: $SLACKER_CREDENTIAL, else the cluster file's.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(package_name="slacker")
@click.pass_context
def main(ctx: click.Context, cluster_path: str | None, credential_path: str | None, debug: bool) -> None:
    """Slacker moves live MySQL/MariaDB tenants between servers inside the latency slack.

    Start with `slacker cluster up --nodes 2` for a local two-node cluster, then
    `slacker tenant create t1` and `slacker migrate t1 --to node-2`.
    """
    ctx.obj = CliContext(cluster_path=cluster_path, debug=debug, credential_path=credential_path)


# Each command family lives in its own module, imported when one of its commands runs (or for the
# command list): `slacker migrate` does not pay for importing the router, ycsb and the rebalancer.
FAMILIES = {"cluster": "cluster_cmd", "tenant": "tenant_cmd", "status": "tenant_cmd", "locate": "tenant_cmd",
            "agent": "agent_cmd", "migrate": "migrate_cmd", "ycsb": "ycsb_cmd", "plot": "plot_cmd",
            "rebalance": "rebalance_cmd", "node": "node_cmd", "router": "router_cmd",
            "credential": "credential_cmd"}


def _load(module: str) -> None:
    try:
        __import__(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:  # a command family not built yet
        if exc.name != f"{__name__}.{module}":
            raise


def _register() -> None:
    for module in dict.fromkeys(FAMILIES.values()):
        _load(module)
