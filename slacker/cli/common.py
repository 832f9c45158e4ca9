"""Shared CLI plumbing: the context object, option types using slacker.units, output helpers."""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass, field
from typing import Any, Callable

import click

from .. import units
from ..errors import SlackerError


@dataclass
class CliContext:
    cluster_path: str | None = None
    debug: bool = False
    credential_path: str | None = None  # --credential: present this file instead of the cluster file's
    _cluster: Any = field(default=None, repr=False)

    def cluster(self):
        """The cluster file, loaded once (raises a one-line error when missing)."""
        if self._cluster is None:
            from pathlib import Path

            self._cluster = load_cluster(self.cluster_path)
            if self.credential_path:
                self._cluster.token_file = Path(self.credential_path).resolve()
            ctx = click.get_current_context(silent=True)
            root = ctx.find_root() if ctx is not None else None
            if root is not None and root.get_parameter_source("cluster_path") == click.core.ParameterSource.ENVIRONMENT:
                self._cluster.found_by = "$SLACKER_CLUSTER"
        return self._cluster


pass_cli = click.make_pass_decorator(CliContext)


def load_cluster(path: str | None):
    """The cluster file (config.load_cluster), able to learn its members from the directory: the
    directory's clients (slacker.agent.client: http.client, ssl, both directory backends) are imported
    when the members are first read, not at every command's start."""
    from ..config import Cluster, load_cluster as load

    if Cluster.directory_factory is None:
        Cluster.directory_factory = staticmethod(_directory_for)
    return load(path)


def _directory_for(cluster, token: str):
    from ..agent.client import directory_for  # importing it sets Cluster.directory_factory for good

    return directory_for(cluster, token)


class SlackerOption(click.Option):
    """Every default is shown one way, `[default: 500ms]`: the value itself, or for an option whose
    absence means something computed, the text given as show_default (click would parenthesize it)."""

    def make_metavar(self, ctx: click.Context) -> str:
        # A count is N (click would say INTEGER RANGE; the range is shown beside the default).
        if self.metavar is None and isinstance(self.type, (click.types.IntParamType, click.IntRange)):
            return "N" + ("..." if self.nargs == -1 else "")
        return super().make_metavar(ctx)

    def get_help_extra(self, ctx: click.Context):
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        return extra


def option(*decls: str, **attrs: Any):
    """click.option with SlackerOption: what every command's options are declared with."""
    attrs.setdefault("cls", SlackerOption)
    return click.option(*decls, **attrs)


class NeedsUnit(click.UsageError):
    """`--rate 20: a rate needs a unit, e.g. 20MB/s`: one line naming the unit, exit 2."""


_BARE_NUMBER = re.compile(r"^\s*[0-9]*\.?[0-9]+\s*$")


def needs_unit(text: str) -> bool:
    """A bare number other than zero (zero is zero in any unit: `--rate 0` starts paused)."""
    return bool(_BARE_NUMBER.match(str(text))) and float(text) != 0


class _UnitType(click.ParamType):
    """A value with a unit, parsed by slacker.units; a bare number is refused rather than guessed."""

    def __init__(self, name: str, parse: Callable[[str], Any], noun: str, example: str) -> None:
        self.name = name
        self._parse = parse
        self.noun = noun
        self.example = example

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        if needs_unit(value):
            name = param.opts[0] if param is not None and getattr(param, "opts", None) else self.name
            raise NeedsUnit(f"{name} {value.strip()}: {self.noun} needs a unit, e.g. {self.example}", ctx)
        try:
            return self._parse(value)
        except SlackerError as exc:
            self.fail(exc.one_line(), param, ctx)


DURATION = _UnitType("duration", units.parse_duration, "a duration", "1500ms or 2s")
SIZE = _UnitType("size", units.parse_size, "a size", "128MB or 64MiB")
SERVER_SIZE = _UnitType("size", units.parse_server_size, "a size", "32M or 1G")
RATE = _UnitType("rate", units.parse_rate, "a rate", "20MB/s")
UNIT_TYPES = (DURATION, SIZE, SERVER_SIZE, RATE)


class _Cpu(click.ParamType):
    """CPU in cores (0.5 = half a core; CPU seconds per second for a load)."""

    name = "cpu"

    def __init__(self, positive: bool = False) -> None:
        self.positive = positive

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            cores = float(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not a CPU amount: a number of cores, e.g. 0.5", param, ctx)
        if cores < 0 or (self.positive and cores == 0) or cores != cores:
            self.fail(f"{value!r}: CPU is a number of cores {'above' if self.positive else 'from'} 0, e.g. 0.5",
                      param, ctx)
        return cores


CPU = _Cpu()
CPU_QUOTA = _Cpu(positive=True)


class _HostPort(click.ParamType):
    """HOST:PORT (an IPv6 host in brackets), checked on the way in and passed on as given."""

    name = "host:port"

    def __init__(self, allow_empty: bool = False) -> None:
        self.allow_empty = allow_empty

    def convert(self, value, param, ctx):
        text = str(value).strip()
        if text == "" and self.allow_empty:
            return text
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            self.fail(f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:6033", param, ctx)
        return text


HOST_PORT = _HostPort()
HOST_PORT_OR_NONE = _HostPort(allow_empty=True)


class _Fraction(click.ParamType):
    """25% or 0.25."""

    name = "fraction"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        text = str(value).strip()
        try:
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r} is not a fraction (for example 25% or 0.25)", param, ctx)


FRACTION = _Fraction()


_printed_json = False  # this run already printed its one JSON document (a failed migration's result)


def print_json(doc: Any) -> None:
    global _printed_json
    click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))
    _printed_json = True


def printed_json() -> bool:
    return _printed_json


def forget_printed_json() -> None:
    """A new command line starts with nothing printed (the CLI runs many in one process under tests)."""
    global _printed_json
    _printed_json = False


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    """A plain aligned table; empty tables say so."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            click.echo("  ".join("-" * w for w in widths))
    if not rows:
        click.echo("(none)")


def print_fields(rows: list[list[Any]]) -> None:
    """Aligned `name  value` lines."""
    width = max((len(str(r[0])) for r in rows), default=0)
    for name, value in rows:
        click.echo(f"{str(name).ljust(width)}  {value}")


def source_state_text(ctl: dict) -> str:
    """' (tenant idle)', ' (SOURCE BLIND: ...)', ...: empty when the source measured latency."""
    state = ctl.get("source_state")
    if state == "idle":
        return " (tenant idle)"
    if state == "blind":
        return f" (LATENCY SOURCE BLIND: {ctl.get('source_error') or 'no samples while the server commits'})"
    if state == "failed":
        return f" (latency source failed: {ctl.get('source_error') or 'no answer'})"
    return ""


def binding_text(ctl: dict) -> str:
    """' (target binds: 80ms/50ms)' when the target node's latency steers the copy; empty otherwise."""
    if ctl.get("binding") != "target" or ctl.get("target_latency_s") is None:
        return ""
    sp = ctl.get("target_setpoint_s")
    return f" (target binds: {ctl['target_latency_s'] * 1000:.0f}ms" + (f"/{sp * 1000:.0f}ms)" if sp else ")")


def stop_like_ctrl_c(sigterm: bool = False) -> None:
    """SIGINT ends the command like Ctrl-C (KeyboardInterrupt: it stops cleanly and says what goes on) even
    when the caller started it with SIGINT ignored -- a background job of a script (`cmd &` runs with SIGINT
    and SIGQUIT ignored, and Python then leaves them so) -- so that `kill -INT` still stops it; with
    `sigterm`, SIGTERM too (systemd, timeout). Call from the main thread."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if sigterm:
        signal.signal(signal.SIGTERM, interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, interrupt)


def ready_text(r: dict) -> str:
    """A ready migration's wait in one line (the document's `ready`: slacker.migration.ready)."""
    lag = "lag -" if r.get("lag_ms") is None else f"lag {r['lag_ms']:.0f}ms"
    if r.get("lag_p99_ms") is not None:
        lag += f" (p99 {r['lag_p99_ms']:.0f}ms)"
    keeps = "keeps up" if r.get("keeps_up") else "LAGS"
    return (f"ready {units.format_duration(r.get('ready_for_s') or 0)}, {lag}, target {keeps}; "
            f"{r.get('waiting_for', '')}; source keeps {units.format_size(r.get('binlog_bytes') or 0)} of binlog, "
            f"streams {units.format_rate(r.get('binlog_bytes_per_s') or 0)}")
