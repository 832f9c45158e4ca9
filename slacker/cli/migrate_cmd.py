"""`slacker migrate`: start a migration on the source agent, show progress, print the summary."""

from __future__ import annotations

import sys
import time

import click

from ..controller.settings import CLI_KINDS, DEFAULT_KIND, KINDS, ControllerSettings, kind
from ..delta import DEFAULT_APPLIER, DEFAULT_MPL
from ..errors import Conflict, InvalidInput, MigrationFailed, NotFound, SlackerError
from ..latency import default_source_text
from ..migration.cutover import CutoverPlan
from ..migration.options import MigrationOptions, MigrationRequest
from ..migration.remote import follow, one_rate, parse_holds, start_migration
from ..transfer import DEFAULT_PIPE
from ..units import format_duration, format_rate, format_size
from . import main
from .common import DURATION, RATE, CliContext, needs_unit, option, pass_cli, print_fields, print_json, print_table, ready_text, source_state_text, binding_text

POLL_S = 0.5


def _controller_kind(ctx, param, value: str | None) -> str | None:
    """--controller, checked against the registry as it is parsed (one line for an unknown or removed kind)."""
    if value is not None and kind(value).name not in CLI_KINDS:
        raise InvalidInput(f"--controller {value} is not offered here", "a fixed rate is --rate", "for example --rate 20MB/s")
    return value


def _controller(setpoint: float | None, *, max_rate: float | None, latency_sources: tuple[str, ...],
                kind_name: str | None, gains: str | None, window: float | None, step: float | None, force: bool,
                target_setpoint: float | None, target_guard: bool) -> ControllerSettings | None:
    """--setpoint and the options that tune its controller (None: the defaults); refused without --setpoint."""
    if setpoint is None:
        if (any(x is not None for x in (max_rate, gains, window, step, kind_name, target_setpoint))
                or latency_sources or force or not target_guard):
            raise InvalidInput("controller options need --setpoint", "--controller, --max-rate, --gains, --window, "
                               "--step, --latency-source, --target-setpoint, --no-target-guard and --force only "
                               "apply to a latency-targeting migration", "")
        return None
    return ControllerSettings.from_dict({
        "setpoint_s": setpoint, "max_rate_bytes_per_s": max_rate, "latency_sources": list(latency_sources),
        "gains": gains, "window_s": window, "step_s": step, "force": force, "target_guard": target_guard,
        "target_setpoint_s": target_setpoint, "kind": kind_name})


@main.command("migrate")
@click.argument("tenant_id")
@option("--to", "target", metavar="NODE", help="Target node (a name from the cluster file).")
@option("--rate", type=RATE, default=None,
              help="Fixed copy rate, e.g. 20MB/s or 512KiB/s (k/M/G x1000, Ki/Mi/Gi x1024). 0 starts paused.")
@option("--unthrottled", is_flag=True, help="Copy as fast as the pipe goes (the default without --rate/--setpoint).")
@option("--setpoint", type=DURATION, default=None,
              help="Latency target, e.g. 1500ms: the controller sets the copy rate every step to hold it.")
@option("--max-rate", type=RATE, default=None, show_default="none: a 200MB/s scale",
              help="Cap on the controller's rate. Without it the controller works on a 200MB/s scale, and at its "
                   "maximum the copy runs unthrottled.")
@option("--latency-source", "latency_sources", multiple=True, metavar="SPEC",
              help="Where the controller reads latency (repeatable; the max wins): "
                   "prometheus,url=URL[,tenant=ID][,metric=NAME], "
                   "performance-schema[,table=transactions|statements][,user=U][,exclude-user=U] or "
                   "router[,table=transactions|statements]. "
                   "A source that sees nothing while the tenant commits is refused (blind).",
              show_default=default_source_text())
@option("--controller", "controller_kind", default=None, metavar="|".join(CLI_KINDS), callback=_controller_kind,
              show_default=DEFAULT_KIND, help="How the rate follows latency: "
                   + "; ".join(f"{k}: {KINDS[k].summary}" for k in CLI_KINDS) + ". See docs/controller.md.")
@option("--target-setpoint", type=DURATION, default=None,
              show_default="--setpoint", help="Latency target for the target node's tenants. The copy "
                   "follows whichever node is further over its own setpoint.")
@option("--no-target-guard", is_flag=True,
              help="Steer on the source's latency only; by default the target node's tenants are guarded too "
                   "(read from its agent, no Prometheus needed).")
@option("--gains", default=None, metavar="KP,KI,KD", help="PID gains kp,ki,kd, with --controller pid (see docs/controller.md).")
@option("--window", type=DURATION, default=None, show_default="3s", help="Latency averaging window.")
@option("--step", type=DURATION, default=None, show_default="1s", help="Controller step.")
@option("--force", is_flag=True, help="Start even if the setpoint is below the latency measured now.")
@option("--max-freeze", type=DURATION, default="500ms",
              help="Hard limit on the write freeze, from the lock to the ownership flip; delta rounds aim at half.")
@option("--verify", is_flag=True,
              help="Before the handover, compare source and target row by row at one GTID position, online, paced "
                   "like the copy; a difference fails the migration (source serving, target removed). Adds "
                   "nothing to the freeze.")
@option("--verify-only", is_flag=True,
              help="Copy, catch up and verify as --verify does, then remove the target and stop: the source is "
                   "never frozen or fenced (a rehearsal of the move). Exit 0 when the copy was equal.")
@option("--mode", type=click.Choice(["live", "stop-and-copy"]), default="live", show_default=True,
              help="live: hot backup + delta rounds + brief freeze; stop-and-copy: the baseline with downtime.")
@option("--pipe", type=click.Choice(["native", "pv"]), default=None,
              show_default="native", help="Throttled pipe implementation (see docs/transfer.md).")
@option("--data-path", type=click.Choice(["auto", "splice", "copy", "splice-send"]), default=None,
              help="How the native pipe moves the bytes: splice (in the kernel on both sides, never through the "
                   "agents' memory), copy (read and write through the agents), splice-send (splice on the source, "
                   "copy on the target), auto (the fastest measured for a plain stream, copy under "
                   "TLS). For comparisons; see docs/transfer.md.", show_default="auto")
@option("--snapshot", "snapshot", type=click.Choice(["auto", "logical", "physical"]), default=None,
              show_default="auto",
              help="How the copy is taken. auto: the tenant kind's own (a whole server: a full hot backup; a shared "
                   "tenant: a logical dump, mariadb-dump --single-transaction). physical for a shared tenant: a "
                   "partial hot backup of its database (mariabackup --databases, --prepare --export, IMPORT "
                   "TABLESPACE). logical applies to shared tenants only. See docs/shared.md.")
@option("--into", "into", type=click.Choice(["shared", "server"]), default=None,
              help="Change the tenant's kind with the move. shared: pack a whole-server tenant into the target's "
                   "shared server as its database (it must hold one database, named as the tenant, and no "
                   "accounts of its own but app); server: give a shared tenant a mariadbd of its own on the target. "
                   "The client's login at the router stays the same. Live moves only. See docs/shared.md, "
                   "Consolidation.")
@option("--plain-stream", is_flag=True,
              help="On a TLS cluster, send the snapshot stream unencrypted (the agents' API, replication and the "
                   "routers keep TLS): for a private link where the copy's CPU matters more than its secrecy. "
                   "The result's copy_stages.*.path says tls or copy.")
@option("--max-rounds", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Give up if the delta has not converged after this many rounds.")
@option("--max-stalled-rounds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Give up after this many rounds in a row that did not shrink.")
@option("--delta-applier", type=click.Choice(["serial", "concurrent"]), default=None,
              help="How the target applies the binlog delta: one transaction at a time, or transactions that "
                   "did not conflict on the source in parallel (see docs/delta.md).", show_default="concurrent")
@option("--delta-mpl", default=None, metavar="auto|N", show_default="auto",
              help="Parallel appliers for --delta-applier concurrent: auto (adapts to measured apply rate) or N.")
@option("--catchup-mode/--no-catchup-mode", "catchup_mode", default=True, show_default=True,
              help="Relax the target's fsyncs during the delta phase (restored before the freeze). "
                   "--no-catchup-mode keeps every commit durable: slower, for comparisons.")
@option("--cutover", "cutover", default="auto", metavar="WHEN", show_default=True,
              help="When the handover may begin. auto: as soon as the delta converges. manual: only on "
                   "`--cutover-now`. at=TIME: from TIME (ISO 8601, UTC unless it names an offset) for ten minutes. "
                   "window=HH:MM-HH:MM[,ZONE]: in that daily window (UTC unless a zone is named). Anything but "
                   "auto waits ready: the target keeps applying, nothing is frozen, the source serves; a cutover "
                   "happens only in its time and only while the target keeps up (lag <= 1s). Enforced by the "
                   "agents (works with --detach). See docs/migration.md, Cutover.")
@option("--cutover-timeout", "cutover_timeout", default=None, metavar="DURATION[,abort|wait]",
              show_default="24h,abort",
              help="How long a migration may wait ready, from the moment it is ready; then abort (roll back, the "
                   "source keeps serving) or wait (stay ready, flagged; only --cutover-now or --abort end it).")
@option("--cutover-now", "cutover_now", is_flag=True,
              help="Cut the waiting migration of TENANT_ID over now (if it is still copying: as soon as it is "
                   "ready). With --verify: both sides compared online first; a difference fails the migration.")
@option("--keep-source", "keep_source", type=DURATION, default=None, metavar="DURATION", show_default="0s",
              help="After the flip, keep the old copy this long instead of retiring it: fenced (it never takes a "
                   "client write), replicating from the new owner, so `--revert` can move the tenant back with a "
                   "freeze only, nothing copied. Whole-server tenants. It costs the old node a running server and "
                   "the new owner a replication stream. See docs/migration.md, The way back.")
@option("--revert", "revert", is_flag=True,
              help="Move TENANT_ID back onto the old copy a --keep-source move kept: the kept copy catches up, then "
                   "the usual handover (freeze, fence, flip); 0 bytes copied. The copy it leaves is retired, or "
                   "kept with --keep-source.")
@option("--release", "release", is_flag=True,
              help="Retire the kept old copy of TENANT_ID now (before its --keep-source time ends): no way back "
                   "without a copy after this.")
@option("--abort", "abort_", is_flag=True,
              help="Abort the running migration of TENANT_ID (refused once the ownership flip was sent).")
@option("--finish", "finish_", is_flag=True,
              help="Retry now the forward steps of a migration past its flip (shown as finishing in status).")
@option("--handover-attempts", "handover_attempts", type=click.IntRange(1, 20), default=3,
              show_default=True, help="Handover attempts over --max-freeze before giving up (source serving).")
@option("--handover-wait", type=DURATION, default="60s",
              help="How long the handover waits, before freezing, for statements and write transactions on the "
                   "source older than --max-freeze (long transactions, batch statements, DDL) to end; then it "
                   "fails with the source serving.")
@option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Change a running migration: setpoint=900ms, max-rate=50MB/s, rate=10MB/s, pause, resume.")
@option("--max-duration", type=DURATION, default=None,
              help="Abort the migration (the source keeps serving) if it has not finished this long after it "
                   "started, and fail with the copy's figures (e.g. the cannot-finish verdict's). Enforced by this "
                   "command while it follows the migration (not with --detach).")
@option("--hold", "hold", multiple=True, metavar="POINT=DURATION",
              help="Rehearsals only (agents started with --fault-injection, refused otherwise): pause at a named "
                   "step, e.g. flipped=5s (docs/migration.md, fault injection) to kill a process there.")
@option("--detach", is_flag=True, help="Start it and return; follow with `slacker status`.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document at the end (no progress line).")
@pass_cli
def migrate(cli: CliContext, tenant_id: str, target: str | None, rate: int | None, unthrottled: bool,
            setpoint: float | None, max_rate: int | None, latency_sources: tuple[str, ...],
            controller_kind: str | None, target_setpoint: float | None, no_target_guard: bool, gains: str | None,
            window: float | None, step: float | None, force: bool, max_freeze: float, verify: bool, verify_only: bool,
            mode: str,
            pipe: str | None, data_path: str | None, snapshot: str | None, into: str | None, plain_stream: bool,
            max_rounds: int, max_stalled_rounds: int, delta_applier: str | None,
            delta_mpl: str | None, catchup_mode: bool, cutover: str, cutover_timeout: str | None, cutover_now: bool,
            keep_source: float | None, revert: bool, release: bool, abort_: bool, finish_: bool, handover_attempts: int,
            handover_wait: float, settings: tuple[str, ...], max_duration: float | None, hold: tuple[str, ...],
            detach: bool, as_json: bool) -> None:
    """Move TENANT_ID to another node while it keeps serving.

    \b
    Examples:
      slacker migrate t42 --to node-2                      # unthrottled live migration
      slacker migrate t42 --to node-1 --rate 20MB/s        # fixed throttle
      slacker migrate t42 --to node-2 --setpoint 1500ms    # hold latency at 1.5 s while copying
      slacker migrate t42 --set setpoint=900ms             # change it while it runs
      slacker migrate t42 --to node-1 --cutover manual     # copy, catch up, then wait ready
      slacker migrate c7 --to node-2 --into shared     # pack a whole server into node-2's shared server
      slacker migrate --cutover-now t42                    # ... and cut over now
      slacker migrate t42 --to node-2 --keep-source 1h     # keep the old copy, fenced, for an hour
      slacker migrate --revert t42 --keep-source 10m       # ... move back onto it, nothing copied
      slacker migrate --release t42                        # ... retire the kept copy now
      slacker migrate --abort t42                          # cancel; the source keeps serving
      slacker migrate --finish t42                         # past the flip: retry the last steps now

    Any failure before the ownership flip leaves the source serving and
    untouched and removes the partial copy on the target. The flip (a
    compare-and-set in the directory) is the point of no return: after it the
    migration only goes forward, retried by the agents until the target takes
    writes and the source is retired.
    """
    from ..agent.client import cluster_clients
    from ..config import validate_tenant_id
    from ..kinds import kind_of

    if settings and _is_setting(tenant_id) and not all(_is_setting(x) for x in settings):
        # `--set t42 setpoint=900ms`: click gave --set the tenant and TENANT_ID the setting.
        raise InvalidInput(f"--set {settings[-1]} {tenant_id}: the tenant goes before --set",
                           "--set takes a setting, not a tenant",
                           f"slacker migrate {settings[-1]} --set {tenant_id}")
    validate_tenant_id(tenant_id)
    body = parse_settings(settings) if settings else {}  # checked before any node is asked
    actions = [name for name, given in (("--abort", abort_), ("--finish", finish_), ("--cutover-now", cutover_now),
                                        ("--set", settings), ("--release", release), ("--revert", revert))
               if given]
    if len(actions) > 1:
        raise InvalidInput(f"{' and '.join(actions)} exclude each other", "each acts on the running migration", "pick one")
    if actions and verify and actions != ["--cutover-now"]:
        raise InvalidInput(f"--verify does not apply to {actions[0]}",
                           "it compares both sides before a handover", "give it to the migration, or with --cutover-now")
    if revert and target:
        raise InvalidInput("--revert and --to exclude each other", "a revert goes to the node that keeps the old copy",
                           "drop --to")
    if keep_source and actions not in ([], ["--revert"]):
        raise InvalidInput(f"--keep-source does not apply to {actions[0]}", "it is given to a migration", "drop it")
    cluster = cli.cluster()
    agents, directory = cluster_clients(cluster)
    own = directory.lookup(tenant_id)
    source = agents[own.node]
    if release:
        node = _kept_node(agents, tenant_id)
        doc = agents[node].request("POST", f"/v1/kept/{tenant_id}/release", {"reason": "released by the operator"},
                                   timeout_s=120)
        click.echo(f"released the kept copy of {tenant_id} on {node} (it followed {doc['owner']}): no way back "
                   "without a copy now")
        return
    if revert:
        target = _kept_node(agents, tenant_id)
        actions = []

    if actions:
        # After the flip the directory names the target; the migration runs on the old owner.
        source = _migration_agent(agents, tenant_id) or source
        if abort_:
            doc = source.request("POST", f"/v1/migrations/{tenant_id}/abort", {"reason": "aborted by the operator"})
            click.echo(f"aborting migration {doc['id']} (phase {doc['phase']})")
        if cutover_now:
            doc = source.request("POST", f"/v1/migrations/{tenant_id}/cutover", {"verify": True} if verify else {})
            click.echo(f"migration {doc['id']}: " + ("verifying both sides, then " if verify else "") + "cutting over "
                       + ("now" if doc["phase"] == "ready" else f"as soon as it is ready (phase {doc['phase']})")
                       + "; follow with `slacker status`")
        if finish_:
            doc = source.request("POST", f"/v1/migrations/{tenant_id}/finish", {})
            click.echo(f"migration {doc['id']}: retrying its forward steps now (phase {doc['phase']}"
                       + (f", last: {doc['finishing_reason']}" if doc.get("finishing_reason") else "") + ")")
        if settings:
            doc = source.request("POST", f"/v1/migrations/{tenant_id}/set", body)
            click.echo(f"migration {doc['id']}: " + ", ".join(f"{k}={v}" for k, v in body.items()))
        return

    # before anything starts (docs/shared.md)
    refusal = kind_of(own.kind).move_refusal(tenant_id, own.node, mode, verify or verify_only, snapshot or "auto",
                                             into=into if into != own.kind else None)
    if refusal is not None:
        raise refusal
    if not target:
        raise InvalidInput("missing --to NODE", "a migration needs a target node",
                           f"one of: {', '.join(n for n in cluster.nodes if n != own.node)}")
    cluster.node(target)
    if target == own.node:
        raise InvalidInput(f"tenant {tenant_id} is already on {target}", "source and target are the same node",
                           "pick another --to node")
    one_rate(rate, unthrottled, setpoint)
    if data_path and pipe == "pv":
        raise InvalidInput("--data-path applies to the native pipe", "pv | nc has a data path of its own",
                           "drop --data-path or --pipe pv")
    plan = CutoverPlan.parse(cutover, cutover_timeout)  # a past or malformed time refused here, in one line
    if plan.waits and max_duration is not None:
        raise InvalidInput(f"--max-duration and --cutover {cutover} exclude each other",
                           "a migration that waits ready ends by --cutover-timeout", "drop --max-duration")
    if revert:
        request = MigrationRequest.checked(tenant_id, MigrationOptions(
            target=target, revert=True, keep_source_s=keep_source or 0.0, max_freeze_s=max_freeze,
            handover_attempts=handover_attempts, handover_wait_s=handover_wait, hold_s=parse_holds(hold) or None))
    else:
        request = MigrationRequest.checked(tenant_id, MigrationOptions(
            keep_source_s=keep_source or 0.0, cutover=plan.spec(), cutover_timeout=cutover_timeout or "",
            target=target, mode=mode, rate_bytes_per_s=rate, max_freeze_s=max_freeze, handover_attempts=handover_attempts,
            handover_wait_s=handover_wait, verify=verify, verify_only=verify_only, max_rounds=max_rounds,
            max_stalled_rounds=max_stalled_rounds, pipe=pipe or DEFAULT_PIPE, data_path=data_path or "auto",
            snapshot=snapshot or "auto", plain_stream=plain_stream, into=into if into != own.kind else None,
            hold_s=parse_holds(hold) or None, delta_applier=delta_applier or DEFAULT_APPLIER,
            delta_mpl=delta_mpl or DEFAULT_MPL, delta_catchup=catchup_mode,
            controller=_controller(setpoint, max_rate=max_rate, latency_sources=latency_sources,
                                   kind_name=controller_kind, gains=gains, window=window, step=step, force=force,
                                   target_setpoint=target_setpoint, target_guard=not no_target_guard)))
    doc = start_migration(source, request)
    mid = doc["id"]
    if detach:
        if max_duration is not None:
            raise InvalidInput("--max-duration needs the command to follow the migration", "it was given --detach",
                               "drop --detach, or abort later with `slacker migrate --abort TENANT`")
        click.echo(f"migration {mid} started; follow it with `slacker status`")
        return
    limit = MaxDuration(source, mid, max_duration) if max_duration is not None else None
    show_progress = not as_json and sys.stderr.isatty()
    if not as_json:
        click.echo(f"migrating {tenant_id}: {own.node} -> {target} ({mode}), migration {mid}", err=True)

    said = WaitNotice(show_progress)
    gone = SourceGone(own.node, show_progress)

    def on_poll(d: dict) -> None:
        gone.back(d)
        if show_progress:
            click.echo("\r" + progress_line(d).ljust(100), nl=False, err=True)
        said.poll(d)
        if limit is not None:
            limit.poll(d)

    try:
        doc = follow(source, doc, on_poll, POLL_S, on_unreachable=gone.missing,
                     until=(lambda d: d["phase"] == "ready") if plan.waits else None)
    except NotFound as exc:
        if gone.since is None:
            raise
        raise NotFound(f"migration {mid}: the source agent {own.node} restarted and no longer knows it",
                       "it ended just before the agent stopped, so no journal entry was left to recover",
                       f"see where {tenant_id} is now: `slacker locate {tenant_id}`, `slacker status`") from exc
    except KeyboardInterrupt:
        if show_progress:
            click.echo("", err=True)
        try:
            source.request("POST", f"/v1/migrations/{mid}/abort", {"reason": "interrupted (Ctrl-C)"})
        except Conflict as exc:
            raise Conflict(f"migration {mid} is past its ownership flip", "it can no longer be aborted",
                           "the agent finishes it; follow with `slacker status`") from exc
        click.echo("slacker: interrupted: aborting the migration (the source keeps serving) ...", err=True)
        while doc["active"]:
            time.sleep(POLL_S)
            doc = source.request("GET", f"/v1/migrations/{mid}")
    if show_progress:
        click.echo("", err=True)
    if doc["active"] and doc["phase"] == "ready":  # the agents wait for the cutover; this command is done
        if as_json:
            print_json(doc)
        else:
            print_ready(doc)
        return
    if as_json:
        print_json(doc)
    else:
        print_summary(doc)
    ok = ("succeeded", "verified")  # verified: --verify-only, the copy was equal
    if doc["result"] not in ok and limit is not None and limit.reason:
        raise MigrationFailed(f"migration {mid} aborted after --max-duration {format_duration(max_duration)}",
                              limit.reason, limit.hint)
    if doc["result"] not in ok:
        e = doc.get("error") or {}
        if cli.debug and e.get("detail"):  # a tool's output behind the message (the agent log has it too)
            click.echo(f"the output behind the error (from {doc['source']}'s agent):\n{e['detail']}", err=True)
        hint = e.get("hint") if doc["result"] == "failed" else ""  # the next step, as the agent says it
        if doc.get("epoch_after") is None and "keeps serving" not in (hint or ""):
            hint = "; ".join(x for x in (hint, "the source keeps serving") if x)
        raise MigrationFailed(f"migration {mid} {doc['result']} in phase {e.get('phase') or doc['phase']}",
                              f"{e.get('what', '')}" + (f": {e['why']}" if e.get("why") else ""), hint)


class WaitNotice:
    """Past the flip, a step that cannot go on says what it waits for: on the progress line (a terminal),
    else one line on stderr when the wait begins and when it ends (stdout keeps its one JSON document)."""

    def __init__(self, on_progress_line: bool) -> None:
        self.on_progress_line = on_progress_line
        self.said: str | None = None  # the kind of wait last told

    def poll(self, doc: dict) -> None:
        w = doc.get("waiting")
        kind = w["for"] if w else None
        if kind == self.said or self.on_progress_line:
            self.said = kind
            return
        if w:
            click.echo(f"slacker: migration {doc['id']}: {w['message']}", err=True)
        elif self.said is not None:
            last = (doc.get("waited") or [{}])[-1]
            click.echo(f"slacker: migration {doc['id']}: going on after {last.get('seconds', 0):.0f}s "
                       "past the flip", err=True)
        self.said = kind


class SourceGone:
    """The source agent stopped answering while the command follows its migration: the agent recovers the
    migration from its journal when it restarts (under the same id), so the command waits for it and says
    so, instead of quitting with an error for a move that may well finish."""

    def __init__(self, node: str, on_progress_line: bool, clock=time.monotonic) -> None:
        self.node, self.on_progress_line, self.clock = node, on_progress_line, clock
        self.since: float | None = None

    def message(self, doc: dict, why: str) -> str:
        where = ("past the flip: the target takes over, and" if doc.get("epoch_after") is not None
                 else "before the flip: the source keeps the tenant, and")
        return (f"waiting for the source agent {self.node} to come back: it does not answer ({why}); {where} "
                "the restarted agent recovers the migration (restart it: `slacker cluster up --dir DIR`, "
                "or your service manager; Ctrl-C stops waiting)")

    def missing(self, doc: dict, exc: SlackerError) -> None:
        if self.since is None:
            self.since = self.clock()
            text = f"slacker: migration {doc['id']}: " + self.message(doc, exc.why or exc.what)
            click.echo(("\r" + text.ljust(100) if self.on_progress_line else text), err=True)
        elif self.on_progress_line:
            click.echo(f"\rwaiting for the source agent {self.node}: {self.clock() - self.since:.0f}s".ljust(100),
                       nl=False, err=True)

    def back(self, doc: dict) -> None:
        if self.since is None:
            return
        click.echo(("\r" if self.on_progress_line else "") + f"slacker: migration {doc['id']}: the source agent "
                   f"{self.node} answers again after {self.clock() - self.since:.0f}s", err=True)
        self.since = None


class MaxDuration:
    """--max-duration: abort the migration once it has run this long, keeping what the copy looked like
    (the cannot-finish verdict's figures when there is one) for the failure's message."""

    def __init__(self, source, mid: str, max_duration_s: float, clock=time.monotonic) -> None:
        self.source, self.mid, self.max_s, self.clock = source, mid, max_duration_s, clock
        self.deadline = clock() + max_duration_s
        self.reason: str | None = None
        self.hint = ""

    def poll(self, doc: dict) -> None:
        if self.reason is not None or not doc.get("active") or self.clock() < self.deadline:
            return
        ctl = doc.get("controller") or {}
        verdict = ctl.get("verdict")
        done, total = doc.get("bytes_done"), doc.get("bytes_total")
        where = f"in phase {doc.get('phase')}" + (
            f", {format_size(done)} of {format_size(total)} copied" if done is not None and total else "")
        if verdict:
            self.reason = f"{where}; {verdict['what']}: {verdict['why']}"
            self.hint = verdict.get("hint", "")
        else:
            self.reason = f"not finished after {format_duration(self.max_s)} ({where})"
            self.hint = "raise --max-duration, or the setpoint (--setpoint)"
        try:
            self.source.request("POST", f"/v1/migrations/{self.mid}/abort",
                                {"reason": f"--max-duration {format_duration(self.max_s)} passed"})
        except Conflict:  # past its ownership flip: it finishes, and the failure is not ours to say
            self.reason = None
            self.deadline = float("inf")


def _migration_agent(agents: dict, tenant_id: str):
    """The agent running an active migration of the tenant (the source), if any answers."""
    for agent in agents.values():
        try:
            doc = agent.request("GET", "/v1/migrations", timeout_s=10)
        except SlackerError:
            continue
        if any(m.get("tenant") == tenant_id and m.get("active") and m.get("source") for m in doc["migrations"]):
            return agent
    return None


def _kept_node(agents: dict, tenant_id: str) -> str:
    """The node that keeps the old copy of the tenant (--keep-source); NotFound, in one line, when none does."""
    for name, agent in agents.items():
        try:
            doc = agent.request("GET", "/v1/kept", timeout_s=10)
        except SlackerError:
            continue
        if any(k.get("tenant") == tenant_id for k in doc.get("kept") or []):
            return name
    raise NotFound(f"no node keeps an old copy of {tenant_id}",
                   "its last move did not keep its source (--keep-source), or the copy was released or its time ended",
                   "a move back needs a copy: `slacker migrate TENANT --to NODE`")


def _is_setting(text: str) -> bool:
    try:
        parse_settings((text,))
    except InvalidInput:
        return False
    return True


def parse_settings(settings: tuple[str, ...]) -> dict:
    from ..units import parse_duration, parse_rate

    out: dict = {}
    for s in settings:
        key, _, value = s.partition("=")
        key = key.strip().replace("_", "-")
        kind = DURATION if key == "setpoint" else RATE if key in ("max-rate", "rate") else None
        if kind is not None and needs_unit(value):
            raise InvalidInput(f"--set {s.strip()}: {kind.noun} needs a unit", "", f"e.g. {key}={kind.example.split()[0]}")
        if key == "setpoint" and value:
            out["setpoint_s"] = parse_duration(value)
        elif key == "max-rate" and value:
            out["max_rate_bytes_per_s"] = parse_rate(value)
        elif key == "rate" and value:
            out["rate_bytes_per_s"] = parse_rate(value)
        elif key in ("pause", "resume") and not value:
            out[key] = True
        else:
            raise InvalidInput(f"invalid setting {s!r}", "expected setpoint=DURATION, max-rate=RATE, rate=RATE, "
                               "pause or resume", "for example --set setpoint=900ms")
    return out


def progress_line(doc: dict) -> str:
    done, total = doc.get("bytes_done", 0), doc.get("bytes_total", 0)
    v = doc.get("verify") or {}
    if doc.get("phase") == "verify" and v:  # the rows summed on both sides, in table bytes
        total = v.get("bytes_total", 0)
    pct = f" {100 * done / total:5.1f}%" if total else ""
    rate = "unlimited" if doc.get("rate_bytes_per_s") is None else format_rate(doc["rate_bytes_per_s"])
    line = (f"[{doc['phase']:>9}] {format_size(done)}/{format_size(total)}{pct}  "
            f"at {format_rate(doc.get('throughput_bytes_per_s') or 0)} (limit {rate})")
    ctl = doc.get("controller") or {}
    if ctl.get("setpoint_s") is not None:
        lat = ctl.get("latency_s")
        line += f"  latency {lat * 1000:.0f}ms" if lat is not None else "  latency -"
        line += f"/{ctl['setpoint_s'] * 1000:.0f}ms"
        line += source_state_text(ctl)
        line += binding_text(ctl)
    verdict = ctl.get("verdict")
    if verdict:  # slacker.controller.verdict: the copy cannot finish under this setpoint
        line += f"  {verdict['what'].upper()}: {verdict['why']}; {verdict['hint']}"
    elif doc.get("prereading"):
        line += f"  (reading the backup tool into memory first: {format_size(doc.get('preread_bytes') or 0)})"
    elif doc.get("eta_s") is not None:
        line += f"  ETA {format_duration(doc['eta_s'])}"
    if doc["phase"] == "verify" and v:
        line += f"  table {v.get('tables_done', 0)}/{v.get('tables_total', 0)}"
    if doc.get("rounds") and doc["phase"] == "delta":
        line += f"  round {len(doc['rounds'])}"
    if doc["phase"] == "ready" and doc.get("ready"):
        line += f"  {ready_text(doc['ready'])}"
    if doc.get("waiting"):  # past the flip, a step cannot go on: what it waits for, whether writes go on
        line += f"  {doc['waiting']['message']} [{format_duration(doc['waiting']['seconds'])}]"
    elif doc.get("finishing_reason"):
        line += f"  ({doc['finishing_reason']})"
    if doc.get("waiting_for"):
        line += f"  (handover waits for {doc['waiting_for']})"
    return line


def print_ready(doc: dict) -> None:
    r = doc.get("ready") or {}
    click.echo(f"migration {doc['id']}: READY  ({doc['tenant']} {doc['source']} -> {doc['target']}, "
               f"--cutover {r.get('cutover', '?')}, timeout {r.get('cutover_timeout', '?')})")
    click.echo(f"  {ready_text(r)}")
    click.echo(f"  cut over now: slacker migrate --cutover-now {doc['tenant']}; cancel: slacker migrate --abort "
               f"{doc['tenant']}; follow: slacker status")


def print_summary(doc: dict) -> None:
    click.echo(f"migration {doc['id']}: {doc['result'].upper()}  ({doc['tenant']} {doc['source']} -> "
               f"{doc['target']}, {doc['mode']}, {format_duration(doc['duration_s'])})")
    click.echo("")
    print_table(["PHASE", "DURATION"], [[p["name"], format_duration(p["duration_s"] or 0)] for p in doc["phases"]])
    click.echo("")
    snap = next((p for p in doc["phases"] if p["name"] in ("snapshot", "copy")), None)
    avg = doc["bytes_total"] / snap["duration_s"] if snap and snap["duration_s"] else 0
    rows = [["bytes copied", format_size(doc["bytes_done"])], ["average copy rate", format_rate(avg)]]
    if doc["mode"] == "live":
        rows.append(["delta rounds", len(doc["rounds"])])
        d = doc.get("delta") or {}
        if d.get("applier"):
            how = d["applier"]
            if d["applier"] == "concurrent" and d.get("mpl") is not None:
                how += f", MPL {d['mpl']} ({d.get('mpl_mode', 'fixed')})"
            if d.get("best_apply_tps"):
                how += f", best apply {d['best_apply_tps']:,.0f}/s"
            rows.append(["delta applier", how])
    src = doc.get("latency_source") or {}
    if src:
        # which latency the controller steered by (the routers' or the server's), per tenant, and why
        per = src.get("tenants") or {}
        kinds = sorted({v["source"] for v in per.values()})
        how = src.get("why") or "; ".join(f"{tid}: {v['source']} ({v['why']})" for tid, v in sorted(per.items()))
        rows.append(["latency source", f"{src.get('kind')}" + (f" -- {how}" if how and kinds != ["performance_schema"]
                                                                or src.get("kind") == "given" else "")])
    if src.get("seeded"):
        sd = src["seeded"]  # the node's memory of its last comparable copy (slacker.controller.memory)
        rows.append(["start rate", f"{format_rate(sd['rate_bytes_per_s'])} from the node's memory (a copy that held it "
                                   f"at {sd['setpoint_s'] * 1e3:.0f} ms, load {sd['load_latency_s'] * 1e3:.1f} ms)"])
    rows.append(["freeze window", f"{doc['freeze_ms']:.0f} ms" if doc.get("freeze_ms") is not None else "-"])
    if len(doc.get("handover_attempts") or []) > 1:
        rows.append(["handover attempts", len(doc["handover_attempts"])])
    interrupted = sum(a.get("interrupted") or 0 for a in doc.get("handover_attempts") or [])
    if interrupted:
        rows.append(["statements interrupted", f"{interrupted}  <- waiting on row locks when the freeze began"])
    for w in doc.get("waited") or []:
        rows.append(["waited past the flip", f"{format_duration(w['seconds'])}: {w['message']}"])
    if doc.get("directory_outage_s"):
        rows.append(["directory outage", f"{doc['directory_outage_s']:.1f} s (writes refused meanwhile)"])
    for w in doc.get("warnings") or []:
        rows.append(["warning", w])
    v = doc.get("verify") or {}
    if doc.get("verified") is not None:
        how = ""
        if v.get("position"):
            how = (f" at {v['position']} ({v.get('tables_total', 0)} tables, {v.get('rows', 0):,} rows, "
                   f"{format_duration(v.get('duration_s') or 0)})")
        rows.append(["checksums", ("equal" if doc["verified"] else "DIFFER") + how])
    if doc.get("epoch_after") is not None:
        rows.append(["epoch", f"{doc['epoch_before']} -> {doc['epoch_after']}"])
    rows.append(["time series", doc["series_path"] + f" (on {doc['source']})"])
    print_fields(rows)
    if doc["rounds"]:
        click.echo("")
        def rate(v):
            return "-" if v is None else f"{v:,.0f}/s"

        print_table(["ROUND", "TXNS", "BYTES", "DURATION", "LEFT AFTER", "EST. FREEZE", "WRITES", "APPLY", "MPL"],
                    [[r["n"], r["transactions"], format_size(r["bytes"]), f"{r['duration_s'] * 1000:.0f} ms",
                      format_size(r["remaining_bytes"]), f"{r['est_freeze_ms']:.0f} ms", rate(r.get("write_tps")),
                      rate(r.get("apply_tps")), "-" if r.get("mpl") is None else r["mpl"]] for r in doc["rounds"]])
    if doc.get("error"):
        e = doc["error"]
        click.echo(f"\nfailed in phase {e.get('phase')}: {e.get('what')}: {e.get('why')}")
