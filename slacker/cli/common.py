"""Shared CLI plumbing: the context object, option types using slacker.units, output helpers."""

from __future__ import annotations

import json
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

            from ..config import load_cluster

            self._cluster = load_cluster(self.cluster_path)
            if self.credential_path:
                self._cluster.token_file = Path(self.credential_path).resolve()
            ctx = click.get_current_context(silent=True)
            root = ctx.find_root() if ctx is not None else None
            if root is not None and root.get_parameter_source("cluster_path") == click.core.ParameterSource.ENVIRONMENT:
                self._cluster.found_by = "$SLACKER_CLUSTER"
        return self._cluster


pass_cli = click.make_pass_decorator(CliContext)


class _UnitType(click.ParamType):
    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except SlackerError as exc:
            self.fail(exc.one_line(), param, ctx)


DURATION = _UnitType("duration", units.parse_duration)
SIZE = _UnitType("size", units.parse_size)
SERVER_SIZE = _UnitType("size", units.parse_server_size)
RATE = _UnitType("rate", units.parse_rate)


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
