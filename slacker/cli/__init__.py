"""The `slacker` command: parse, call the library, print (human or --json).

No migration or tenant logic lives here; every command is a thin wrapper so the
same work can be driven from Python.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import SlackerError
from .common import CliContext, option


class SlackerGroup(click.Group):
    """Turns SlackerError and usage errors into one line and a non-zero exit (traceback with --debug),
    or one JSON document when the command was given --json. Loads a command's family when it is asked
    for (FAMILIES), all of them to list them."""

    json_errors = False  # the command line asked for --json: errors are printed as JSON too

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.commands and name in FAMILIES:
            _load(FAMILIES[name])
        return super().get_command(ctx, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _register()
        return super().list_commands(ctx)

    def main(self, args=None, *rest, **kwargs):
        kwargs["standalone_mode"] = False
        args = list(sys.argv[1:] if args is None else args)
        args = self._hoist_globals(args)
        want_json = type(self).json_errors = _wants_json(args)
        from .common import forget_printed_json
        forget_printed_json()
        try:
            rv = super().main(args, *rest, **kwargs)
        except click.exceptions.Abort:  # a prompt declined (or closed): nothing was done
            _fail("aborted", "nothing was changed", "", 1, want_json, kind="Aborted")
        except click.UsageError as exc:
            cmd = exc.ctx.command_path if exc.ctx else "slacker"
            _fail(exc.format_message(), "", f"see '{cmd} --help'", 2, want_json, kind="UsageError")
        except click.ClickException as exc:
            _fail(exc.format_message(), "", "", exc.exit_code, want_json, kind=type(exc).__name__)
        sys.exit(rv if isinstance(rv, int) else 0)

    def _hoist_globals(self, args: list[str]) -> list[str]:
        """`--cluster FILE` and `--debug` are accepted after the subcommand too (`slacker status --debug`):
        moved in front of it unless the command there has an option of that name itself."""
        cmd: click.Command = self
        ctx = click.Context(self, resilient_parsing=True)
        front: list[str] = []
        out: list[str] = []
        i, seen_command = 0, False
        while i < len(args):
            a = args[i]
            if a == "--":
                out += args[i:]
                break
            name = a.split("=", 1)[0]
            if seen_command and name in _GLOBAL_OPTIONS and not _declares(cmd, name):
                takes = _GLOBAL_OPTIONS[name] and "=" not in a
                front += args[i:i + 1 + takes]
                i += 1 + takes
                continue
            if not a.startswith("-") and isinstance(cmd, click.Group):
                sub = cmd.get_command(ctx, a)
                if sub is not None:
                    cmd, seen_command = sub, True
            elif not seen_command and name in _GLOBAL_OPTIONS and _GLOBAL_OPTIONS[name] and "=" not in a:
                out += args[i:i + 2]  # a global before the command keeps its value
                i += 2
                continue
            out.append(a)
            i += 1
        return front + out

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SlackerError as exc:
            obj = ctx.find_object(CliContext)
            if obj is not None and obj.debug:
                raise
            _fail(exc.what, exc.why, exc.hint, exc.exit_code, self.json_errors, kind=type(exc).__name__,
                  line=exc.one_line())
        except KeyboardInterrupt:
            _fail("interrupted", "", "", 130, False, kind="Interrupted")


_GLOBAL_OPTIONS = {"--cluster": True, "--credential": True, "--debug": False}  # name -> takes a value

# One table of exit codes, for `slacker --help` and docs/configuration.md ("Exit codes").
EXIT_CODES = (
    (0, "success"),
    (1, "failed (a tenant server, a prompt declined, anything not below)"),
    (2, "invalid input: a bad option, id, unit or config"),
    (3, "not found: no such tenant, node, migration or file"),
    (4, "conflict: it exists already, is busy, or changed underneath"),
    (5, "a system package or program is missing"),
    (6, "an agent or the directory cannot be reached"),
    (7, "refused: a wrong credential, or a secret would cross an unencrypted link"),
    (8, "a migration failed (the source keeps serving), or a drain could not move a tenant"),
    (9, "protocol version skew: an agent (or this CLI) too far from the other side's version; upgrade the older"),
    (130, "interrupted (Ctrl-C); long commands can be run again to resume"),
)


def _declares(cmd: click.Command, name: str) -> bool:
    return any(name in p.opts or name in p.secondary_opts for p in cmd.params if isinstance(p, click.Option))


def _wants_json(args: list[str]) -> bool:
    return "--json" in args


def _fail(what: str, why: str, hint: str, code: int, as_json: bool, kind: str, line: str | None = None):
    """Print an error as one line on stderr, or, when the command was asked for --json and has printed
    nothing yet, as one JSON document on stdout ({"error": {...}}) so a script reads it where it reads
    the answer; then exit."""
    from .common import printed_json

    # A command that printed its document (a failed migration's result) keeps stdout to that one
    # document: its error line goes to stderr.
    if as_json and not printed_json():
        import json

        click.echo(json.dumps({"error": {"kind": kind, "what": what, "why": why, "hint": hint,
                                         "exit_code": code}}, sort_keys=True))
    elif line is not None:
        click.echo(f"slacker: error: {line}", err=True)
    elif kind == "Aborted":
        click.echo("slacker: aborted", err=True)
    elif kind == "Interrupted":
        click.echo("slacker: interrupted", err=True)
    else:
        click.echo(f"slacker: error: {what}" + (f" ({hint})" if hint else ""), err=True)
    sys.exit(code)


def _epilog() -> str:
    rows = "\n".join(f"{code:>5}  {meaning}" for code, meaning in EXIT_CODES)
    return ("Global options (--cluster, --credential, --debug) may also follow the command. Every command that has\n"
            "--json prints its errors as JSON too: {\"error\": {kind, what, why, hint, exit_code}}.\n\n"
            "\b\nExit codes:\n" + rows)


@click.group(cls=SlackerGroup, context_settings={"help_option_names": ["-h", "--help"], "show_default": True}, epilog=_epilog())
@option(
    "--cluster",
    "cluster_path",
    envvar="SLACKER_CLUSTER",
    type=click.Path(dir_okay=False),
    default=None,
    show_default="$SLACKER_CLUSTER, else /etc/slacker/cluster.toml if present, else ./run/cluster.toml",
    help="Cluster file (TOML). `slacker status` says which it used.",
)
@option(
    "--credential",
    "credential_path",
    envvar="SLACKER_CREDENTIAL",
    type=click.Path(dir_okay=False),
    default=None,
    help="Credential file to present instead of the one the cluster file names (admin, router or monitor; "
         "docs/deployment.md, \"Credentials\").",
    show_default="$SLACKER_CREDENTIAL, else the cluster file's",
)
@option("--debug", is_flag=True, help="Show tracebacks on errors.")
# The version as the package states it (pyproject.toml says the same; a unit test holds it): asking the
# installed distribution would load importlib.metadata, email and zipfile for `slacker --version`.
@click.version_option(version=__version__, package_name="slacker")
@click.pass_context
def main(ctx: click.Context, cluster_path: str | None, credential_path: str | None, debug: bool) -> None:
    """Slacker moves live MySQL/MariaDB tenants between servers inside the latency slack.

    Start with `slacker cluster up --nodes 2` for a local two-node cluster, then
    `slacker tenant create t1` and `slacker migrate t1 --to node-2`.
    """
    ctx.obj = CliContext(cluster_path=cluster_path, debug=debug, credential_path=credential_path)


def run() -> None:
    """The `slacker` console script: `main`, then out without the interpreter's teardown of every
    module it loaded (70-100 ms, a tenth of a short command) once the output is flushed. A command
    that left a non-daemon thread running is waited for as usual."""
    import os
    import threading
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    if "logging" in sys.modules:  # a command that logged: its handlers flushed (most never load it)
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`slacker status | head`): nothing more to say
            code = code or 1
    os._exit(code or 0)


# Each command family lives in its own module, imported when one of its commands runs (or for the
# command list): `slacker migrate` does not pay for importing the router, ycsb and the rebalancer.
FAMILIES = {"cluster": "cluster_cmd", "tenant": "tenant_cmd", "status": "tenant_cmd", "locate": "tenant_cmd",
            "agent": "agent_cmd", "migrate": "migrate_cmd", "ycsb": "ycsb_cmd", "plot": "plot_cmd",
            "rebalance": "rebalance_cmd", "node": "node_cmd", "router": "router_cmd",
            "config": "config_cmd", "credential": "credential_cmd"}


def _load(module: str) -> None:
    try:
        __import__(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:  # a command family not built yet
        if exc.name != f"{__name__}.{module}":
            raise


def _register() -> None:
    for module in dict.fromkeys(FAMILIES.values()):
        _load(module)
