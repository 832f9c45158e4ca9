"""`slacker tenant create|list|delete`, `slacker status`, `slacker locate`."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import Conflict, InvalidInput, NotFound, SlackerError
from ..units import format_binary_size, format_duration, format_size
from . import main
from .common import SERVER_SIZE, CliContext, option, pass_cli, print_json, print_table, ready_text, source_state_text, binding_text


def _clients(cli: CliContext):
    from ..agent.client import cluster_clients

    cluster = cli.cluster()
    agents, directory = cluster_clients(cluster)
    return cluster, agents, directory


@main.group("tenant")
def tenant() -> None:
    """Create, list and delete tenants: a MariaDB server process each, or (--shared) a database each in a
    node's shared server."""


@tenant.command("create")
@click.argument("tenant_id")
@option("--on", "node", default=None, metavar="NODE",
              show_default="the least loaded node reachable and not cordoned, as the drain's planner picks",
              help="Node to create it on (never a cordoned one).")
@option("--shared", is_flag=True,
              help="A database TENANT_ID in the node's shared server (made with its first shared tenant) with an "
                   "account of its own granted on that database only, instead of a server of its own "
                   "(docs/shared.md). Its id is the database's name: letters and digits, starting with a letter.")
@option("--buffer-pool", default=None, show_default="32M", type=SERVER_SIZE,
              help="InnoDB buffer pool: the most of the tenant's data and indexes kept in memory. Size it to the "
                   "tenant's working set (docs/configuration.md, 'Sizing a tenant'); it moves with the tenant. "
                   "Bare K/M/G are binary as in MariaDB (128M = 128MiB). Not with --shared (one pool for all).")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def tenant_create(cli: CliContext, tenant_id: str, node: str | None, shared: bool, buffer_pool: int | None,
                  as_json: bool) -> None:
    """Create tenant TENANT_ID: data directory, config, accounts, a running server (with --shared: a database
    and its account in the node's shared server).

    Ids are 1-32 lower-case letters, digits or dashes (a shared tenant's: no dashes). The port is a fixed
    function of the id (the next free one on a collision) and stays with the tenant when it moves; a shared
    tenant's is its node's shared server's.
    """
    kind = _kind(shared)
    kind.check_id(tenant_id)
    if shared and buffer_pool is not None:
        raise InvalidInput("--buffer-pool does not apply with --shared",
                           "a shared tenant is a database in the node's shared server, which has one pool for all",
                           "leave out --buffer-pool")
    cluster, agents, directory = _clients(cli)
    if node is None:
        from ..rebalance.runner import place_new_tenant

        node = place_new_tenant(agents, directory, tenant_id)
    else:
        _check_target(cluster, directory, tenant_id, node)
    doc = _create(agents[node], {"id": tenant_id, "kind": kind.name, "buffer_pool_bytes": buffer_pool}, kind, node)
    if as_json:
        print_json(doc)
        return
    if doc.get("database"):
        click.echo(f"created shared tenant {doc['id']} on {doc['node']} at {doc['host']}:{doc['port']} "
                   f"(database {doc['database']} in the node's shared server, epoch {doc['epoch']})")
    else:
        click.echo(f"created tenant {doc['id']} on {doc['node']} at {doc['host']}:{doc['port']} "
                   f"(buffer pool {format_binary_size(doc['buffer_pool_bytes'])}, epoch {doc['epoch']})")
    _connect_line(doc)


@tenant.command("register")
@click.argument("tenant_id")
@option("--on", "node", required=True, metavar="NODE", help="The node whose shared server holds the database.")
@option("--shared", is_flag=True, required=True,
              help="Register database TENANT_ID of the node's shared server (the only kind registered without a "
                   "copy; required, so the command says what it makes).")
@option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_cli
def tenant_register(cli: CliContext, tenant_id: str, node: str, shared: bool, as_json: bool) -> None:
    """Make database TENANT_ID, already in NODE's shared server (restored from a dump, say), a shared tenant
    without a copy: the directory names it, and it gets its own account granted on that database only."""
    if not shared:
        raise InvalidInput("tenant register needs --shared", "only a database in a node's shared server is "
                           "registered without a copy", f"slacker tenant register {tenant_id} --shared --on {node}")
    kind = _kind(True)
    kind.check_id(tenant_id)
    cluster, agents, directory = _clients(cli)
    _check_target(cluster, directory, tenant_id, node)
    doc = _create(agents[node], {"id": tenant_id, "kind": kind.name, "existing": True}, kind, node)
    if as_json:
        print_json(doc)
        return
    click.echo(f"registered shared tenant {doc['id']} on {doc['node']} at {doc['host']}:{doc['port']} "
               f"(database {doc['database']} as it was, epoch {doc['epoch']})")
    _connect_line(doc)


def _kind(shared: bool):
    from ..kinds import kind_of
    return kind_of("shared" if shared else None)


def _check_target(cluster, directory, tenant_id: str, node: str) -> None:
    cluster.node(node)
    cordon = directory.cordons().get(node)
    if cordon is not None:
        raise Conflict(f"cannot create tenant {tenant_id} on {node}", f"{node} is cordoned ({cordon.reason})",
                       f"leave out --on to let Slacker pick a node, or `slacker node uncordon {node}`")


def _create(agent, body: dict, kind, node: str) -> dict:
    doc = agent.request("POST", "/v1/tenants", {k: v for k, v in body.items() if v is not None}, timeout_s=180)
    if doc.get("kind", "server") != kind.name:  # an agent of a build before kinds ignored the kind
        raise Conflict(f"node {node} made a {doc.get('kind', 'server')} tenant {doc['id']}, not a {kind.name} one",
                       "its agent is of a build before tenant kinds", f"delete it (`slacker tenant delete {doc['id']}`) "
                       "and upgrade that node's Slacker")
    return doc


def _connect_line(doc: dict) -> None:
    if doc.get("owner_user") and doc["owner_user"] != doc["app_user"]:
        click.echo(f"connect as user {doc['app_user']}@{doc['id']} at the router (`slacker locate {doc['id']}`), or "
                   f"as {doc['owner_user']} in database {doc['database']} at the owner; password in "
                   f"{doc['app_password_file']}")
        return
    click.echo(f"connect as user {doc['app_user']}, password in {doc['app_password_file']}")


SUMMARY_ABOVE = 50  # more tenants than this (after the filters): a summary unless --all


def _filters(f):
    """--node, --tenant, --state and --all, shared by `tenant list` and `status`."""
    f = option("--all", "show_all", is_flag=True,
                     help=f"Print every tenant even when there are more than {SUMMARY_ABOVE} "
                          "(by default a large fleet prints a summary per node and the busiest tenants).")(f)
    f = option("--top", type=click.IntRange(0, 10000), default=10, show_default=True, metavar="N",
                     help="In a summary: how many of the busiest tenants (by queries/s) to print.")(f)
    f = option("--state", "state", type=click.Choice(["up", "down", "busy", "unknown"]), default=None,
                     help="Only tenants in this state (down includes running but not answering).")(f)
    f = option("--tenant", "pattern", default=None, metavar="GLOB",
                     help="Only tenants whose id matches GLOB (shell wildcards: 'shop-*').")(f)
    f = option("--node", "node_name", default=None, metavar="NAME", help="Only the tenants of node NAME.")(f)
    return f


def _state(r: dict) -> str:
    if r.get("running") is None:
        return "unknown"
    if r.get("healthy") is None:
        return "busy"
    return "up" if r.get("healthy") else ("running, not answering" if r.get("running") else "down")


def _keep(tenant_id: str, state: str, pattern: str | None, want_state: str | None) -> bool:
    from fnmatch import fnmatchcase

    if pattern is not None and not fnmatchcase(tenant_id, pattern):
        return False
    if want_state is not None and (state if state in ("up", "busy", "unknown") else "down") != want_state:
        return False
    return True


def _summary(rows: list[dict], top: int) -> None:
    """Per node: tenants and how many are up, down, busy; then the busiest tenants."""
    per: dict[str, dict] = {}
    for r in rows:
        p = per.setdefault(r["node"], {"tenants": 0, "up": 0, "down": 0, "other": 0, "qps": 0.0})
        p["tenants"] += 1
        st = _state(r)
        p["up" if st == "up" else "other" if st in ("busy", "unknown") else "down"] += 1
        p["qps"] += r.get("queries_per_s") or 0.0
    print_table(["NODE", "TENANTS", "UP", "DOWN", "BUSY/UNKNOWN", "QPS"],
                [[n, p["tenants"], p["up"], p["down"], p["other"], f"{p['qps']:.1f}"] for n, p in sorted(per.items())])
    busiest = sorted(rows, key=lambda r: (-(r.get("queries_per_s") or 0.0), r["id"]))[:top]
    if busiest:
        click.echo(f"busiest {len(busiest)} of {len(rows)}:")
        _tenant_table(busiest)
    click.echo(f"{len(rows)} tenants: a summary (--all prints every one, --json the whole document; "
               "--node, --tenant GLOB, --state filter)")


def _tenant_table(rows: list[dict]) -> None:
    print_table(["TENANT", "KIND", "NODE", "ADDRESS", "EPOCH", "STATE", "QPS", "CONNS"],
                [[r["id"], r["kind"], r["node"], f"{r['host']}:{r['port']}", r["epoch"], _state(r),
                  r["queries_per_s"] if r["queries_per_s"] is not None else "-",
                  r["connections"] if r["connections"] is not None else "-"] for r in rows])


@tenant.command("list")
@_filters
@option("--json", "as_json", is_flag=True, help="Print one JSON document (every tenant that passes the filters).")
@pass_cli
def tenant_list(cli: CliContext, node_name: str | None, pattern: str | None, state: str | None, top: int,
                show_all: bool, as_json: bool) -> None:
    """List tenants: owner node, address, epoch and health, from the directory and the agents.

    One read of the directory (in pages) and one request per agent, whatever the number of tenants.
    Above 50 tenants it prints a summary per node and the busiest tenants, unless --all.
    """
    cluster, agents, directory = _clients(cli)
    if node_name is not None:
        cluster.node(node_name)  # an unknown name: one line naming the known ones
    owners = {o.tenant: o for o in directory.list() if node_name is None or o.node == node_name}
    health = {}
    for name, agent in agents.items():
        if node_name is not None and name != node_name:
            continue
        try:
            for t in agent.request("GET", "/v1/tenants")["tenants"]:
                health[(name, t["id"])] = t
        except Exception as exc:  # one node down must not hide the others
            health[(name, None)] = {"error": str(exc)}
    rows = []
    for tid, o in sorted(owners.items()):
        h = health.get((o.node, tid), {})
        row = {"id": tid, "kind": o.kind, "node": o.node, "host": o.host, "port": o.port, "epoch": o.epoch,
               "running": h.get("running"), "healthy": h.get("healthy"),
               "queries_per_s": h.get("queries_per_s"), "connections": h.get("connections")}
        if _keep(tid, _state(row), pattern, state):
            rows.append(row)
    if as_json:
        print_json({"tenants": rows})
        return
    if len(rows) > SUMMARY_ABOVE and not show_all:
        _summary(rows, top)
        return
    _tenant_table(rows)


@tenant.command("delete")
@click.argument("tenant_id")
@option("--yes", is_flag=True, help="Do not ask for confirmation.")
@option("--json", "as_json", is_flag=True, help="Print one JSON document (the question, if asked, goes to stderr).")
@pass_cli
def tenant_delete(cli: CliContext, tenant_id: str, yes: bool, as_json: bool) -> None:
    """Stop tenant TENANT_ID and delete its data directory. This cannot be undone."""
    from ..config import validate_tenant_id

    validate_tenant_id(tenant_id)
    _, agents, directory = _clients(cli)
    own = directory.lookup(tenant_id)
    if not yes:
        click.confirm(f"delete tenant {tenant_id} on {own.node} and all its data?", abort=True, err=as_json)
    agents[own.node].request("DELETE", f"/v1/tenants/{tenant_id}", timeout_s=120)
    if as_json:
        print_json({"tenant": tenant_id, "node": own.node, "deleted": True})
        return
    click.echo(f"deleted tenant {tenant_id} from {own.node}")


@main.command("status")
@_filters
@option("--json", "as_json", is_flag=True,
              help="Print one JSON document (every node asked, each with every tenant that passes the filters).")
@pass_cli
def status(cli: CliContext, node_name: str | None, pattern: str | None, state: str | None, top: int,
           show_all: bool, as_json: bool) -> None:
    """Show each node (reachable or not, its protocol version), its tenants and running migrations.

    One request per agent (each answers for all its tenants) and one to the directory's health. Above 50
    tenants the TENANTS column counts them (and how many are up) and the busiest are listed, unless --all.
    """
    cluster, agents, directory = _clients(cli)
    if node_name is not None:
        cluster.node(node_name)
    health = directory.health()
    try:
        cordons = directory.cordons()
    except SlackerError:  # the directory's health line says why
        cordons = {}
    asked = [(n, a) for n, a in agents.items() if node_name is None or n == node_name]
    nodes = []

    def ask(item):
        name, agent = item
        try:
            doc = agent.request("GET", "/v1/status", timeout_s=10)
            doc["reachable"] = True
        except Exception as exc:
            doc = {"node": name, "reachable": False, "error": str(exc), "tenants": []}
        return doc

    from concurrent.futures import ThreadPoolExecutor
    # The agents at once: one slow or unreachable node costs its timeout once, not once per node after it.
    with ThreadPoolExecutor(max(1, min(16, len(asked)))) as pool:
        docs = list(pool.map(ask, asked))
    for (name, _), doc in zip(asked, docs):
        c = cordons.get(name)
        doc["cordoned"] = None if c is None else c.to_dict()
        if pattern is not None or state is not None:
            doc["tenants"] = [t for t in doc.get("tenants", []) if _keep(t["id"], _state(t), pattern, state)]
        nodes.append(doc)
    if as_json:
        print_json({"cluster_file": str(cluster.path), "cluster_file_found_by": cluster.found_by,
                    "directory": cluster.directory_node,
                    "directory_backend": cluster.directory_backend, "directory_health": health,
                    "tls": cluster.tls_ca is not None, "tls_ca": str(cluster.tls_ca) if cluster.tls_ca else None,
                    "nodes": nodes})
        return
    sqlite = cluster.directory_backend == "sqlite"
    every = [t | {"node": n["node"]} for n in nodes for t in n.get("tenants", [])]
    summary = len(every) > SUMMARY_ABOVE and not show_all

    def tenants_cell(n: dict) -> str:
        ts = n.get("tenants", [])
        if summary:
            up = sum(1 for t in ts if _state(t) == "up")
            return f"{len(ts)} ({up} up)" if ts else "0"
        kept = {k["tenant"] for k in n.get("kept") or []}
        return ", ".join(t["id"] + (f" ({t['kind']})" if t.get("kind", "server") != "server" else "")
                         + (" (kept)" if t["id"] in kept else "") for t in ts) or "-"

    click.echo(f"cluster file: {cluster.path} (from {cluster.found_by})")
    print_table(["NODE", "URL", "PROTOCOL", "STATE", "TENANTS", "MIGRATIONS"],
                [[n["node"], cluster.node(n["node"]).url, n.get("protocol") or cluster.node(n["node"]).protocol or "-",
                  (("up" + (" (directory)" if sqlite and n.get("serves_directory") else "")) if n["reachable"]
                   else "UNREACHABLE") + (", cordoned" if n["cordoned"] else ""),
                  tenants_cell(n),
                  len([m for m in n.get("migrations", []) if m.get("active")])] for n in nodes])
    for n in nodes:
        for m in n.get("migrations", []) or []:
            if m.get("active"):
                click.echo(_migration_line(m))
        for k in n.get("kept") or []:
            click.echo(kept_line(k))
        if not n["reachable"]:
            click.echo(f"{n['node']}: {n['error']}")
        for w in n.get("warnings", []) or []:
            click.echo(f"{n['node']}: WARNING: {w}")
        if n.get("shared_server"):
            ss = n["shared_server"]
            click.echo(f"{n['node']}: shared server {ss['host']}:{ss['port']} ({'running' if ss['running'] else 'DOWN'}, "
                       f"gtid_domain_id {ss['gtid_domain_id']}), "
                       f"{sum(1 for t in n.get('tenants', []) if t.get('kind') == 'shared')} shared tenants")
    if summary:
        busiest = sorted(every, key=lambda t: (-(t.get("queries_per_s") or 0.0), t["id"]))[:top]
        if busiest:
            click.echo(f"busiest {len(busiest)} of {len(every)} tenants:")
            print_table(["TENANT", "NODE", "STATE", "QPS", "CONNS"],
                        [[t["id"], t["node"], _state(t), t.get("queries_per_s", "-"), t.get("connections", "-")]
                         for t in busiest])
        click.echo(f"{len(every)} tenants: counted per node (--all names every one, --json the whole document; "
                   "--node, --tenant GLOB, --state filter)")
    click.echo(_directory_line(cluster, health))
    click.echo(_transport_line(cluster))
    for m in health.get("members", []):
        state_text = ("leader" if m.get("leader") else "follower") if m.get("reachable") else "UNREACHABLE"
        click.echo(f"  {m['name']:8} {m.get('client_url') or '-':28} {state_text}"
                   + (f"  {m['error']}" if m.get("error") and not m.get("reachable") else ""))


def _transport_line(cluster) -> str:
    """Whether what crosses between hosts is encrypted: the cluster's one choice, made at `cluster up`."""
    if cluster.tls_ca is not None:
        return (f"transport: TLS (CA {cluster.tls_ca}): agents' API, snapshot streams, replication and tenant "
                "clients; `migrate --plain-stream` sends one copy's stream in plain text")
    return ("transport: PLAIN TEXT: nothing the cluster sends is encrypted (made without TLS; "
            "`cluster up --tls`, docs/deployment.md)")


def _directory_line(cluster, health: dict) -> str:
    """One line on the directory's health: etcd members and leader, or the SQLite node."""
    if cluster.directory_backend == "etcd":
        if not health.get("members"):
            return f"directory: etcd UNAVAILABLE: {health.get('error', 'no member answered')}"
        up, total = health.get("members_up", 0), len(health["members"])
        state = "healthy" if health.get("healthy") else "NO QUORUM" if up <= total // 2 else "NO LEADER"
        return f"directory: etcd {state}, {up}/{total} members up, leader {health.get('leader') or '-'}"
    if health.get("healthy"):
        return f"directory: sqlite on {cluster.directory_node}, healthy"
    return f"directory: sqlite on {cluster.directory_node} UNAVAILABLE: {health.get('error', '?')}"


def kept_line(k: dict) -> str:
    """One kept old copy (--keep-source): whom it follows, how far behind, until when, what to do with it."""
    how = ("replicating" if k.get("replicating") else "NOT REPLICATING") + (
        f", lag {k['lag_s']:.0f}s" if k.get("lag_s") is not None else "")
    line = (f"{k['node']}: kept copy of {k['tenant']} (fenced; owner {k['owner']}, epoch {k['epoch']}), {how}, "
            f"released in {format_duration(k.get('left_s') or 0)}")
    if k.get("error"):
        line += f"; {k['error']}"
    return line + f"; back: slacker migrate --revert {k['tenant']}; drop: slacker migrate --release {k['tenant']}"


def _migration_line(m: dict) -> str:
    line = f"migration {m['id']}: {m['tenant']} {m['source']} -> {m['target']}, phase {m['phase']}"
    ctl = m.get("controller") or {}
    if ctl:
        lat = ctl.get("latency_s")
        rate = ctl.get("rate_bytes_per_s", 0)
        line += (f", latency {lat * 1000:.0f}ms" if lat is not None else ", latency -") + \
                f" vs setpoint {ctl.get('setpoint_s', 0) * 1000:.0f}ms, rate " + \
                ("unthrottled" if rate is None else f"{format_size(rate)}/s")
        line += source_state_text(ctl)
        line += binding_text(ctl)
        if ctl.get("verdict"):  # the copy cannot finish under this setpoint (slacker.controller.verdict)
            v = ctl["verdict"]
            line += f"; {v['what'].upper()}: {v['why']}; {v['hint']}"
    v = m.get("verify") or {}
    if m.get("phase") == "verify" and v:
        pct = 100 * v.get("bytes_done", 0) / v["bytes_total"] if v.get("bytes_total") else 0.0
        line += f", verified {pct:.0f}% (table {v.get('tables_done', 0)}/{v.get('tables_total', 0)})"
    if m.get("eta_s") is not None:
        line += f", ETA {m['eta_s']:.0f}s"
    if m.get("phase") == "ready" and m.get("ready"):  # waiting for its cutover (--cutover)
        line += f"; {ready_text(m['ready'])}"
    if m.get("waiting"):  # past the flip, a step cannot go on: what it waits for, whether writes go on
        line += f"; {m['waiting']['message']} (for {m['waiting']['seconds']:.0f}s)"
    elif m.get("finishing_reason"):
        line += f"; {'finishing' if m.get('past_point_of_no_return') else 'waiting'}: {m['finishing_reason']}"
    if m.get("waiting_for"):
        line += f"; the handover waits for {m['waiting_for']}"
    return line


@main.command("locate")
@click.argument("tenant_id")
@option("--json", "as_json", is_flag=True,
              help="Print node, host, port, epoch, application user and its password file, and the routers.")
@option("--defaults-file", "defaults_file", type=click.Path(dir_okay=False),
              help="Also write the application's credentials, host and port to this file (mode 0600), for "
                   "`mariadb --defaults-extra-file=FILE`: the router's address and USER@TENANT when a router runs "
                   "(on a TLS cluster, a router with TLS), else the owner's. They come from the owner's agent (TLS or this "
                   "machine only), never on the terminal.")
@option("--owner", "owner_only", is_flag=True, help="Name only the owner, not the router.")
@pass_cli
def locate(cli: CliContext, tenant_id: str, as_json: bool, defaults_file: str | None, owner_only: bool) -> None:
    """Print where to connect to TENANT_ID: the router's HOST:PORT first when one runs
    (log in as USER@TENANT; the address never moves), then the current owner's."""
    from ..router.control import registered_routers
    from ..config import validate_tenant_id
    from ..kinds import kind_of

    validate_tenant_id(tenant_id)
    cluster, agents, directory = _clients(cli)
    own = directory.lookup(tenant_id)
    routers = [] if owner_only else registered_routers(directory)
    if defaults_file:
        from ..client import resolve
        from ..mariadb import client_defaults, write_secret

        ep = resolve(tenant_id, directory=directory, agents=agents)
        usable = [r for r in routers if r.get("tls") or not ep.ssl_ca]  # a TLS cluster: only a TLS router
        if usable:
            rhost, _, rport = usable[0]["address"].rpartition(":")
            text = client_defaults(f"{ep.user}@{tenant_id}", ep.password, host=rhost, port=int(rport))
            if ep.ssl_ca:
                text += f"ssl-ca = {ep.ssl_ca}\nssl-verify-server-cert\n"
        else:
            text = client_defaults(ep.user, ep.password, host=ep.host, port=ep.port)
            if ep.database:  # a shared tenant's account may use only its database: start there
                text += f"database = {ep.database}\n"
            if ep.ssl_ca:  # a TLS cluster's tenants refuse plain text: check them against the cluster CA
                text += f"ssl-ca = {ep.ssl_ca}\nssl-verify-server-cert\n"
        write_secret(Path(defaults_file), text)
    if not as_json:
        for r in routers:
            click.echo(f"{r['address']} (router: log in as USER@{tenant_id})")
        accounts = kind_of(own.kind).accounts(tenant_id)
        shared = (f"database {accounts.database} in {own.node}'s shared server, as {accounts.owner_user}"
                  if accounts.database else "")
        detail = "; ".join(x for x in ((f"owner {own.node}, epoch {own.epoch}" if routers else ""), shared) if x)
        click.echo(f"{own.host}:{own.port}" + (f" ({detail})" if detail else ""))
        return
    doc = own.to_dict()
    doc["routers"] = [{"address": r["address"], "host": r.get("host")} for r in routers]
    try:
        detail = agents[own.node].request("GET", f"/v1/tenants/{tenant_id}")
        doc.update(app_user=detail["app_user"], app_password_file=detail["app_password_file"],
                   owner_user=detail.get("owner_user", detail["app_user"]), database=detail.get("database"))
    except NotFound:
        doc.update(app_user=None, app_password_file=None, owner_user=None, database=None)
    print_json(doc)
