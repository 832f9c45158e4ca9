"""`slacker rebalance`: one pass of the rebalancer (plan; with --execute, one live migration). Safe from cron."""

from __future__ import annotations

import sys
import time

import click

from ..errors import MigrationFailed
from ..units import format_size
from . import main
from .common import CPU, DURATION, FRACTION, RATE, CliContext, option, pass_cli, print_json, print_table


@main.command("rebalance")
@option("--execute", is_flag=True,
              help="Carry the move out (a live migration, waited for) instead of only printing the plan.")
@option("--sla", type=DURATION, default="50ms", show_default=True,
              help="Per-server latency SLA: a node whose mean transaction latency is above it for --samples "
                   "samples in a row is hot. The migration's setpoint derives from it.")
@option("--hot-threshold", type=FRACTION, default="25%", show_default=True,
              help="A node is also hot when its load is this much above the cluster mean ...")
@option("--load-floor", type=CPU, default=0.05, show_default=True,
              help="... and at least this many CPU seconds per second above it (ignores noise on idle clusters).")
@option("--samples", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Consecutive history samples a node must be hot for (one per agent stats_interval).")
@option("--min-tenant-share", type=FRACTION, default="5%", show_default=True,
              help="Tenants with less than this share of their node's load are too small to matter.")
@option("--min-tenant-load", type=CPU, default=0.01, show_default=True,
              help="Tenants below this many CPU s/s are too small to matter.")
@option("--min-gap-shrink", type=FRACTION, default="20%", show_default=True,
              help="A move must shrink the load gap between source and target by this much (no ping-pong).")
@option("--tenant-cooldown", type=DURATION, default="30m", show_default=True,
              help="A moved tenant (or one whose move failed) is not moved again for this long.")
@option("--node-cooldown", type=DURATION, default="10m", show_default=True,
              help="A move's source and target are neither source nor target of another move for this long.")
@option("--no-return", type=DURATION, default="2h", show_default=True,
              help="A tenant never goes back to the node it left within this long.")
@option("--setpoint-margin", type=FRACTION, default="25%", show_default=True,
              help="The migration's setpoint is the higher of --sla and the source's latency plus this margin.")
@option("--max-rate", type=RATE, default=None, show_default="none: a 200MB/s scale",
              help="Cap on the migrations' copy rate. Without it the controller works on a 200MB/s scale, and "
                   "at its maximum the copy runs unthrottled.")
@option("--max-freeze", type=DURATION, default="500ms", show_default=True,
              help="The migration's hard limit on the write freeze (as `slacker migrate --max-freeze`).")
@option("--lock-ttl", type=DURATION, default="60s", show_default=True,
              help="TTL of the cluster lock, refreshed while the move runs: a crashed run's lock is free after it.")
@option("--max-wait", type=DURATION, default="4h", show_default=True,
              help="Stop waiting for the migration after this long (it goes on; the move is recorded as unknown).")
@option("--max-moves", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Moves in one pass, on disjoint node pairs (no node in two), run at once, each within its "
                   "source's latency budget. 1: one move per run, as from cron.")
@option("--json", "as_json", is_flag=True, help="Print the plan (and the move's outcome) as one JSON document.")
@pass_cli
def rebalance(cli: CliContext, execute: bool, sla: float, hot_threshold: float, load_floor: float, samples: int,
              min_tenant_share: float, min_tenant_load: float, min_gap_shrink: float, tenant_cooldown: float,
              node_cooldown: float, no_return: float, setpoint_margin: float, max_rate: int | None, max_freeze: float,
              lock_ttl: float,
              max_wait: float, max_moves: int, as_json: bool) -> None:
    """Find a node whose tenants break the latency SLA or carry far more load than the others, and move
    one tenant off it with a live, latency-targeting migration. Meant for cron: one pass, at most one move.

    \b
    Load is CPU seconds per second of a tenant's server process, averaged over the
    last --samples intervals of the agents' history; a node's load is its tenants' sum.
    Dry run by default: prints per node the load and latency seen, whether it is hot
    and why, and the move it would make. See docs/rebalance.md for every rule.

    \b
    Examples:
      slacker rebalance                          # what would it do?
      slacker rebalance --execute --sla 50ms     # from cron: do it
      slacker rebalance --json                   # the plan as one JSON document
    """
    from ..agent.client import cluster_clients
    from ..rebalance.planner import Settings
    from ..rebalance.runner import RunOptions, run

    settings = Settings(sla_s=sla, hot_threshold=hot_threshold, load_floor=load_floor, samples=samples,
                        min_tenant_share=min_tenant_share, min_tenant_load=min_tenant_load,
                        min_gap_shrink=min_gap_shrink, tenant_cooldown_s=tenant_cooldown,
                        node_cooldown_s=node_cooldown, no_return_s=no_return,
                        setpoint_margin=setpoint_margin).validate()
    opts = RunOptions(execute=execute, lock_ttl_s=lock_ttl, max_rate_bytes_per_s=max_rate, max_freeze_s=max_freeze,
                      max_wait_s=max_wait, max_moves=max_moves)
    if execute:
        cli.cluster().require_admin("move tenants (rebalance --execute)")
    agents, directory = cluster_clients(cli.cluster())

    def say(msg: str) -> None:
        if not as_json:
            click.echo(f"{time.strftime('%H:%M:%S')} {msg}", err=True)

    res = run(agents, directory, settings, opts, say)
    if as_json:
        print_json(res.to_dict())
    else:
        print_plan(res, execute)
    failed = [m["plan"]["move"]["tenant"] for m in res.more if m["result"] != "succeeded"]
    if res.executed and failed and res.result == "succeeded":
        raise MigrationFailed(f"the move of {', '.join(failed)} did not succeed", "see the pass's results above",
                              "the tenants are in cool-down, a later run may retry (see docs/rebalance.md)")
    if res.executed and res.result != "succeeded":
        raise MigrationFailed(f"the move of {res.plan.move.tenant} {res.result}", res.error,
                              "the source keeps serving unless the migration passed its flip; the tenant is in "
                              "cool-down, a later run may retry (see docs/rebalance.md)")


def _load(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1000:.0f}ms"


def print_plan(res, execute: bool) -> None:
    p = res.plan
    s = p.settings
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(p.at))
    click.echo(f"rebalance {'run' if execute else 'plan (dry run)'} at {when}: SLA {_ms(s.sla_s)}; hot = latency "
               f"above it, or load above mean x{1 + s.hot_threshold:g} and +{s.load_floor:g}, for {s.samples} "
               f"samples")
    click.echo(f"cluster mean load {_load(p.mean_load)} CPU s/s, hot limit {_load(p.hot_limit)}; lock {res.lock}")
    click.echo("")
    print_table(["NODE", "TENANTS", "LOAD", "LATENCY", "TXN/S", "HOT", "WHY"],
                [[n.name, len(n.tenants) if n.reachable else "-", _load(n.load), _ms(n.latency_s),
                  "-" if n.transactions_per_s is None else f"{n.transactions_per_s:,.0f}",
                  "yes" if n.hot else "no", n.reason + (f" ({n.error})" if n.error else "")] for n in p.nodes])
    if p.candidates:
        click.echo("")
        print_table(["TENANT", "KIND", "NODE", "LOAD", "TXN/S", "SIZE", "LOAD/GB", "VERDICT"],
                    [[c.tenant, c.kind, c.node, _load(c.load), f"{c.transactions_per_s:,.0f}",
                      "-" if c.data_bytes is None else format_size(c.data_bytes),
                      "-" if c.score is None else f"{c.score:.3g}", c.verdict] for c in p.candidates])
    for m in p.in_flight:
        click.echo(f"in flight: {m.tenant} {m.source} -> {m.target}")
    click.echo("")
    if p.decision != "move":
        click.echo(f"no move: {p.reason}")
        return
    mv = p.move
    click.echo(f"{'moving' if execute else 'would move'} {mv.tenant}: {mv.source} -> {mv.target}")
    click.echo(f"  why:      {mv.reason}")
    click.echo(f"  load:     {mv.source} {_load(mv.source_load_before)} -> {_load(mv.source_load_after)}, "
               f"{mv.target} {_load(mv.target_load_before)} -> {_load(mv.target_load_after)} "
               f"(gap {_load(mv.gap_before)} -> {_load(mv.gap_after)})")
    click.echo(f"  setpoint: {_ms(mv.setpoint_s)}, {mv.setpoint_reason}; copy paused while {mv.target}'s latency "
               f"is above the SLA")
    if not execute:
        click.echo("  run with --execute to carry it out")
        return
    if res.migration is not None:
        m = res.migration
        freeze = f", freeze {m['freeze_ms']:.0f} ms" if m.get("freeze_ms") is not None else ""
        click.echo(f"  result:   {res.result} (migration {m['id']}, {m.get('duration_s') or 0:.1f} s{freeze})")
        if res.error:
            click.echo(f"  error:    {res.error}")
    elif res.result:
        click.echo(f"  result:   {res.result}: {res.error}")
    for m in res.more:  # a parallel pass (--max-moves): the moves run with the first
        mv = m["plan"]["move"]
        click.echo(f"{'also moving' if execute else 'would also move'} {mv['tenant']}: {mv['source']} -> "
                   f"{mv['target']} (setpoint {_ms(mv['setpoint_s'])}): {mv['reason']}")
        if execute:
            click.echo(f"  result:   {m['result']}" + (f": {m['error']}" if m.get("error") else ""))
    for g in res.guard:
        click.echo(f"  target guard: copy {g['action']} (target latency {_ms(g.get('target_latency_s'))})")
    sys.stdout.flush()
