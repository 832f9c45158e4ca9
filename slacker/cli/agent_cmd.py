"""`slacker agent`: run the per-node daemon."""

from __future__ import annotations

import click

from . import main
from .common import option


@main.command("agent")
@option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="Agent config (TOML): node, cluster, data_root, listen, tenant_host, port_range.")
@option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]), help="Log verbosity (to stderr).")
def agent(config_path: str, log_level: str) -> None:
    """Run the per-node agent: tenant supervisor, HTTP API, /metrics, migrations.

    It keeps running until SIGTERM or SIGINT; tenants keep running after it stops
    (`slacker cluster down` stops both). The bearer token comes from the cluster
    file's token_file, never from the command line.
    """
    import logging

    from ..agent.node import Node
    from ..agent.server import run_forever
    from ..config import load_agent_config

    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_forever(Node(load_agent_config(config_path)))
