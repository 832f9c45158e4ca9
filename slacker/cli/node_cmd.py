"""`slacker node list|add|remove|cordon|uncordon|drain|memory`: the fleet's members, in and out of service (docs/fleet.md)."""

from __future__ import annotations

import sys
import time

import click

from ..errors import MigrationFailed, SlackerError
from ..units import format_duration, format_rate, format_size
from . import main
from .common import CPU, DURATION, FRACTION, RATE, CliContext, option, pass_cli, print_json, print_table, stop_like_ctrl_c
from .tenant_cmd import _clients

INTERRUPTED_EXIT = 130


@main.group("node")
def node() -> None:
    """The fleet's members: list, add and remove nodes; cordon, drain (move every tenant off, live), uncordon."""


@node.command("list")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def node_list(cli: CliContext, as_json: bool) -> None:
    """Each member of the directory (and each [[nodes]] seed not registered yet): its URL, protocol version,
    reachable or not, cordoned (since when, by whom, why), its tenants, its last drain."""
    from ..rebalance.drain import STATE_PREFIX

    cluster, agents, directory = _clients(cli)
    cordons = directory.cordons()
    registered = {m.name: m for m in directory.members()}
    owners: dict[str, list[str]] = {}
    for o in directory.list():
        owners.setdefault(o.node, []).append(o.tenant)
    drains = {v.get("node"): v for v in directory.state_list(STATE_PREFIX).values()}
    rows = []
    for name, agent in sorted(agents.items()):
        try:
            doc = agent.request("GET", "/v1/status", timeout_s=10)
            reachable, error = True, ""
        except SlackerError as exc:
            doc, reachable, error = {}, False, exc.one_line()
        c = cordons.get(name)
        d = drains.get(name)
        m = registered.get(name)
        rows.append({"node": name, "url": agent.url, "tenant_host": cluster.nodes[name].tenant_host,
                     "registered": m is not None, "registered_at": m.registered_at if m else None,
                     # what the agent answers with when it answers, else what it registered with
                     "protocol": doc.get("protocol") or (m.protocol if m else None) or agent.peer_protocol,
                     "reachable": reachable, "error": error,
                     "cordoned": None if c is None else c.to_dict(), "tenants": sorted(owners.get(name, [])),
                     "last_drain": None if d is None else {k: d.get(k) for k in ("outcome", "reason", "started_at",
                                                                                 "finished_at", "holder")}})
    if as_json:
        print_json({"nodes": rows})
        return
    print_table(["NODE", "URL", "PROTOCOL", "STATE", "SCHEDULING", "TENANTS", "LAST DRAIN"],
                [[r["node"], r["url"], r["protocol"] or "-",
                  ("up" if r["reachable"] else "UNREACHABLE") + ("" if r["registered"] else " (seed, not registered)"),
                  _scheduling(r["cordoned"]),
                  len(r["tenants"]), "-" if not r["last_drain"] else
                  f"{r['last_drain']['outcome']}: {r['last_drain']['reason']}"] for r in rows])


@node.command("add")
@click.argument("node_name", metavar="NODE")
@option("--url", required=True, metavar="URL", help="The node's agent API, as other hosts reach it: http(s)://HOST:PORT.")
@option("--tenant-host", required=True, metavar="HOST", help="The address clients reach the node's tenants at.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def node_add(cli: CliContext, node_name: str, url: str, tenant_host: str, as_json: bool) -> None:
    """Register NODE in the directory by hand (its agent also registers itself when it starts).

    \b
    Every agent, router and CLI learns of it from the directory: no file to edit, nothing to restart.
    Adding a node that is registered updates its record; its tenants' host cannot change (drain first).
    """
    from ..agent.client import AgentClient
    from ..directory import Member
    from ..membership import join

    cluster, _, directory = _clients(cli)
    try:  # the protocol its agent speaks, if it runs already
        protocol = int(AgentClient(url, cluster.token(), node_name, timeout_s=5, ca_file=cluster.tls_ca)
                       .request("GET", "/v1/status", timeout_s=5).get("protocol") or 0)
        note = f"its agent answers (protocol {protocol})"
    except SlackerError as exc:
        protocol, note = 0, f"its agent does not answer yet ({exc.why or exc.what})"
    m = join(directory, Member(node_name, url.rstrip("/"), tenant_host, protocol))
    if as_json:
        print_json({"node": m.name, "url": m.url, "tenant_host": m.tenant_host, "protocol": protocol,
                    "agent_answers": protocol > 0 or note.startswith("its agent answers"), "note": note})
        return
    click.echo(f"{m.name} registered at {m.url}, tenants on {m.tenant_host}; {note}")


@node.command("remove")
@click.argument("node_name", metavar="NODE")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def node_remove(cli: CliContext, node_name: str, as_json: bool) -> None:
    """Take NODE out of the fleet. Refused while it owns tenants or a migration from or to it runs
    (`slacker node drain NODE` first). Removing a node that is not a member changes nothing.
    Stop its agent afterwards: a running agent registers itself again at its next start."""
    from ..directory.base import validate_name
    from ..membership import leave

    cluster, agents, directory = _clients(cli)
    validate_name(node_name, "node name")
    removed = leave(directory, agents, node_name, seeded=node_name in cluster.seeds)
    if as_json:
        print_json({"node": node_name, "removed": bool(removed)})
    elif removed:
        click.echo(f"{node_name} removed from the fleet: no agent, router or CLI uses it from now on")
    else:
        click.echo(f"{node_name} is not a member: nothing to remove")


def _scheduling(c: dict | None) -> str:
    if c is None:
        return "open"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(c["since"]))
    return f"cordoned since {when}" + (f" ({c['reason']})" if c.get("reason") else "")


@node.command("cordon")
@click.argument("node_name", metavar="NODE")
@option("--reason", default=None, help="Why (shown in `slacker node list` and `slacker status`).")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def node_cordon(cli: CliContext, node_name: str, reason: str | None, as_json: bool) -> None:
    """Receive no new tenant on NODE (from `tenant create`, `rebalance`, another drain). Its tenants stay."""
    cluster, _, directory = _clients(cli)
    cluster.require_admin("cordon nodes")
    cluster.node(node_name)
    from ..rebalance.drain import DrainOptions

    c = directory.cordon(node_name, by=DrainOptions().holder, reason=reason or "cordoned by hand")
    if as_json:
        print_json({"node": node_name, "cordoned": True, "since": c.since, "reason": c.reason})
        return
    click.echo(f"{node_name} cordoned (since {time.strftime('%H:%M:%S UTC', time.gmtime(c.since))}): it receives "
               f"no new tenant; `slacker node drain {node_name}` moves its tenants off")


@node.command("uncordon")
@click.argument("node_name", metavar="NODE")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def node_uncordon(cli: CliContext, node_name: str, as_json: bool) -> None:
    """Let NODE receive tenants again."""
    cluster, _, directory = _clients(cli)
    cluster.require_admin("uncordon nodes")
    cluster.node(node_name)
    was = directory.uncordon(node_name)
    if as_json:
        print_json({"node": node_name, "cordoned": False, "was_cordoned": bool(was)})
        return
    click.echo(f"{node_name} uncordoned: it receives tenants again" if was else f"{node_name} was not cordoned")


@node.command("memory")
@click.argument("node_name", metavar="NODE")
@option("--reset", is_flag=True, help="Forget every entry: the next copy starts at the controller's safe start.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def node_memory(cli: CliContext, node_name: str, reset: bool, as_json: bool) -> None:
    """What NODE's controlled copies held, newest last: the next copy under a comparable setpoint and load (each
    within 1.5x) starts at the newest such entry's rate instead of the safe 10 MB/s (docs/controller.md, "The
    node's memory"). Fixed-rate and unthrottled copies never enter it."""
    cluster, agents, _ = _clients(cli)
    if reset:
        cluster.require_admin("reset the node's copy-rate memory")
    cluster.node(node_name)
    if reset:
        n = agents[node_name].request("POST", "/v1/budget/memory/reset", {}, timeout_s=10)["forgotten"]
        if as_json:
            print_json({"node": node_name, "forgotten": n})
        else:
            click.echo(f"{node_name}: forgot {n} entr{'y' if n == 1 else 'ies'}; its next copy starts at the "
                       "controller's safe start")
        return
    doc = agents[node_name].request("GET", "/v1/budget", timeout_s=10)
    mem = doc.get("memory") or {"entries": []}
    if as_json:
        print_json({"node": node_name, "seeded": doc.get("seeded"), **mem})
        return
    if not mem["entries"]:
        click.echo(f"{node_name}: no controlled copy remembered; its next copy starts at the controller's safe start")
        return
    print_table(["when (UTC)", "setpoint", "load's own", "held", "mean", "seconds", "migration"],
                [[time.strftime("%Y-%m-%d %H:%M", time.gmtime(e["at"])), f"{e['setpoint_s'] * 1e3:.0f} ms",
                  f"{e['load_latency_s'] * 1e3:.1f} ms", format_rate(e["rate_bytes_per_s"]),
                  f"{e['mean_latency_s'] * 1e3:.1f} ms", e["seconds"], e.get("migration") or "-"]
                 for e in mem["entries"]])


@node.command("drain")
@click.argument("node_name", metavar="NODE")
@option("--sla", type=DURATION, default="50ms", show_default=True,
              help="Per-server latency SLA: each move's setpoint derives from it as in `rebalance --execute`.")
@option("--max-parallel", type=click.IntRange(1, 64), default=2, show_default=True,
              help="A cap on the moves running at once; below it, one more copy starts once the node's "
                   "latency controller has measured the last one (6 s), while the node's latency leaves room "
                   "(the controller at its maximum, or its copies taking under half of the room between the "
                   "load's latency and the setpoint) and its budget leaves each copy at least 1 MB/s; each "
                   "target receives one copy at a time.")
@option("--split", type=click.Choice(["fair", "smallest"]), default="fair", show_default=True,
              help="How the node's one latency controller splits its rate among the copies: equal shares, or "
                   "most to the copy with the fewest bytes left.")
@option("--retries", type=click.IntRange(0, 100), default=2, show_default=True,
              help="A failed move is tried again this many times before it is reported.")
@option("--setpoint-margin", type=FRACTION, default="25%", show_default=True,
              help="The setpoint is the higher of --sla and the node's latency plus this margin.")
@option("--samples", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="History samples a load is averaged over (one per agent stats_interval).")
@option("--load-floor", type=CPU, default=0.05, show_default=True,
              help="Loads closer than this (CPU s/s) count as equal when targets are compared.")
@option("--max-rate", type=RATE, default=None, show_default="no cap",
              help="Cap on the node's copy rate: the max of its one controller, split among its copies.")
@option("--max-freeze", type=DURATION, default="500ms", show_default=True,
              help="Each migration's hard limit on the write freeze (as `slacker migrate --max-freeze`).")
@option("--lock-ttl", type=DURATION, default="30s", show_default=True,
              help="TTL of the drain's lock: a killed drain's lock is free after it, and the next run waits it out.")
@option("--release-kept", is_flag=True,
              help="Retire the old copies the node keeps after moves (--keep-source) before draining it; without "
                   "it a drain of such a node is refused (their way back would go with the node).")
@option("--dry-run", is_flag=True, help="Print the plan (each tenant's target) and change nothing.")
@option("--json", "as_json", is_flag=True, help="Print the result (or the plan) as one JSON document.")
@pass_cli
def node_drain(cli: CliContext, node_name: str, sla: float, max_parallel: int, split: str, retries: int,
               setpoint_margin: float,
               samples: int, load_floor: float, max_rate: int | None, max_freeze: float, lock_ttl: float,
               release_kept: bool, dry_run: bool, as_json: bool) -> None:
    """Cordon NODE, then move every tenant off it live, several at once.

    \b
    Targets: the least loaded node that is reachable and not cordoned, largest tenant
    first, so the load spreads. Run it again after an interruption: it follows the
    migrations still running and moves what is left. NODE stays cordoned.
    Exit: 0 drained; 8 a tenant could not be moved; 130 interrupted; 4 another drain runs.

    \b
    Examples:
      slacker node drain node-2 --dry-run        # the plan
      slacker node drain node-2 --sla 50ms       # do it
      slacker node uncordon node-2               # after the maintenance
    """
    from ..rebalance.drain import DrainOptions, drain
    from ..rebalance.planner import Settings

    cluster, agents, directory = _clients(cli)
    if not dry_run:
        cluster.require_admin("drain nodes")
    cluster.node(node_name)
    settings = Settings(sla_s=sla, setpoint_margin=setpoint_margin, samples=samples, load_floor=load_floor).validate()
    opts = DrainOptions(max_parallel=max_parallel, split=split, retries=retries, max_rate_bytes_per_s=max_rate,
                        max_freeze_s=max_freeze, lock_ttl_s=lock_ttl, dry_run=dry_run).validate()
    _kept_on(agents, node_name, release=release_kept and not dry_run, say=None if as_json else click.echo,
             refuse=not release_kept)
    view = DrainView(enabled=not as_json and not dry_run and sys.stderr.isatty())

    def say(msg: str) -> None:
        if not as_json:
            view.event(f"{time.strftime('%H:%M:%S')} {msg}")

    stop_like_ctrl_c()  # `kill -INT` stops a drain a script started in the background, as Ctrl-C does
    res = drain(agents, directory, node_name, settings, opts, on_update=view.draw, say=say)
    view.close()
    if as_json:
        print_json(res.to_dict())
    elif dry_run:
        print_drain_plan(res)
    else:
        print_drain_result(res)
    if res.outcome == "interrupted":
        if not as_json:
            click.echo(f"slacker: interrupted: {res.reason}", err=True)
        sys.exit(INTERRUPTED_EXIT)
    if res.outcome in ("failed", "stopped"):
        bad = [t for t in res.tenants.values() if t.state in ("failed", "unplaced")]
        first = f"{bad[0].tenant}: {bad[0].error}" if bad else res.reason
        raise MigrationFailed(f"the drain of {node_name} did not finish", first,
                              f"{node_name} stays cordoned; fix the cause as docs/fleet.md says, then run "
                              f"`slacker node drain {node_name}` again")


def _kept_on(agents: dict, node: str, release: bool, say, refuse: bool) -> None:
    """The old copies `node` keeps (--keep-source): refused (one line) unless released first."""
    from ..errors import Conflict

    from ..errors import AgentUnavailable

    try:
        kept = agents[node].request("GET", "/v1/kept", timeout_s=10).get("kept") or []
    except AgentUnavailable:  # the drain itself says what an unreachable node means
        return
    if not kept:
        return
    names = ", ".join(k["tenant"] for k in kept[:5]) + (" ..." if len(kept) > 5 else "")
    if refuse:
        raise Conflict(f"{node} keeps the old copies of {len(kept)} tenant(s) ({names})",
                       "a drain would take their way back with the node",
                       "give --release-kept, or `slacker migrate --release TENANT` each")
    if release:
        for k in kept:
            agents[node].request("POST", f"/v1/kept/{k['tenant']}/release", {"reason": "node drain --release-kept"},
                                 timeout_s=120)
            if say is not None:
                say(f"released the kept copy of {k['tenant']} on {node}")


def _row(t) -> list:
    total = t.bytes_total or t.data_bytes
    done = format_size(t.bytes_done) + ("/" + format_size(total) if total else "")
    rate = format_rate(t.rate_bytes_per_s) if t.rate_bytes_per_s else "-"
    state = t.state + (f" ({t.phase})" if t.state == "moving" and t.phase else "")
    note = t.error if t.state in ("failed", "unplaced", "waiting") and t.error else (
        t.verdict if t.state == "moving" and t.verdict else "resumed" if t.resumed else "")
    return [t.tenant, t.target or "-", state, done if t.state != "waiting" else "-", rate, t.attempts, note]


HEADERS = ["TENANT", "TARGET", "STATE", "BYTES", "RATE", "TRIES", "NOTE"]


def overall_line(res) -> str:
    c = res.counts()
    earlier = len(res.earlier.keys() - res.tenants.keys())
    eta = res.eta_s(time.time())
    return (f"drain {res.node}: {c['moved'] + earlier} of {c['total'] + earlier} moved, {c['moving']} moving, "
            f"{c['waiting']} waiting, {c['failed'] + c['unplaced']} failed; elapsed "
            f"{format_duration(time.time() - res.started_at)}"
            + (f", ETA {format_duration(eta)}" if eta is not None and c["moving"] + c["waiting"] else ""))


class DrainView:
    """The whole drain on a terminal: one row per tenant and an overall line, redrawn in place; events
    (started, moved, failed) scroll above it. Without a terminal, only the events, one per line."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.lines = 0

    def _clear(self) -> None:
        if self.lines:
            click.echo(f"\x1b[{self.lines}F\x1b[J", nl=False, err=True)
            self.lines = 0

    def event(self, msg: str) -> None:
        self._clear()
        click.echo(msg, err=True)

    def draw(self, res) -> None:
        if not self.enabled:
            return
        self._clear()
        rows = [_row(t) for t in sorted(res.tenants.values(), key=lambda t: t.tenant)]
        cells = [HEADERS] + [[str(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(HEADERS))]
        out = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()[:160] for r in cells]
        out.append(overall_line(res))
        click.echo("\n".join(out), err=True)
        self.lines = len(out)

    def close(self) -> None:
        self._clear()


def print_drain_plan(res) -> None:
    p = res.plan
    click.echo(f"drain plan for {res.node} (dry run: nothing changes"
               + ("; it is cordoned already)" if res.cordoned else "; the drain would cordon it first)"))
    click.echo("")
    print_table(["TENANT", "LOAD", "SIZE", "TARGET", "TARGET LOAD", "NOTE"],
                [[x.tenant, f"{x.load:.2f}", format_size(x.data_bytes) if x.data_bytes else "-", x.target,
                  f"{x.target_load_before:.2f} -> {x.target_load_after:.2f}",
                  "above the hot limit: no node had more room" if x.over_limit else ""] for x in p.placements]
                + [[t, "-", "-", "-", "-", why] for t, why in p.unplaced.items()])
    click.echo("")
    print_table(["NODE", "LOAD AFTER", "TENANTS AFTER", "NOTE"],
                [[n.name, f"{n.load:.2f}" if n.reachable else "-", n.tenants if n.reachable else "-",
                  "being drained" if n.name == res.node else n.why_not()] for n in p.nodes])
    if p.hot_limit is not None:
        click.echo(f"\nhot limit {p.hot_limit:.2f} CPU s/s (the load spread evenly over the targets, + "
                   "the rebalancer's threshold)")


def print_drain_result(res) -> None:
    rows = [[t.tenant, t.target or "-", t.state, "-" if t.duration_s is None else format_duration(t.duration_s),
             "-" if t.freeze_ms is None else f"{t.freeze_ms:.0f} ms", t.attempts,
             t.error if t.state in ("failed", "unplaced") else ("resumed" if t.resumed else "")]
            for t in sorted(res.tenants.values(), key=lambda t: t.tenant)]
    for tid, e in sorted(res.earlier.items()):
        if tid not in res.tenants:
            rows.append([tid, e.get("target") or "-", "moved", "-", "-", "-", "by an earlier run"])
    print_table(["TENANT", "TARGET", "RESULT", "DURATION", "FREEZE", "TRIES", "NOTE"], rows)
    click.echo("")
    click.echo(overall_line(res))
    click.echo(f"{res.outcome}: {res.reason}")
    if res.outcome == "drained":
        click.echo(f"when {res.node} is back in service: slacker node uncordon {res.node}")
