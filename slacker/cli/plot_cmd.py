"""`slacker plot RUN.jsonl -o run.png`: latency, setpoint and copy rate of a migration."""

from __future__ import annotations

from pathlib import Path

import click

from . import main
from .common import option, print_json


@main.command("plot")
@click.argument("run_file", metavar="RUN.jsonl")
@option("-o", "--output", type=click.Path(dir_okay=False), default=None, show_default="RUN.png beside the run file", help="PNG to write.")
@option("--title", default=None, show_default="bytes moved and duration", help="Figure title.")
@option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def plot(run_file: str, output: str | None, title: str | None, as_json: bool) -> None:
    """Draw a migration's latency against its setpoint and the copy rate over time."""
    from ..plot import load_timeseries, plot_run  # matplotlib is slow to import; only here

    points = load_timeseries(run_file)
    out = Path(output) if output is not None else Path(run_file).with_suffix(".png")
    path = plot_run(points, out, title)
    if as_json:
        print_json({"output": str(path), "points": len(points)})
    else:
        click.echo(f"wrote {path} ({len(points)} points)")
