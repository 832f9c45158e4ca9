"""`slacker node cordon|uncordon|drain` on a real three-node cluster with a router.

A cordoned node receives no tenant from `tenant create` (with or without --on) and is never the
rebalancer's target; a drain moves every tenant off a node live, two at a time, while clients write
through the router (no failed request, every acknowledged write present), spreading them over the
open nodes, and leaves the node empty and cordoned; a drain interrupted by SIGINT and by SIGKILL of
the CLI, run again, finishes with every tenant moved exactly once (epoch 2).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pymysql
import pytest

from slacker.agent.client import cluster_clients
from slacker.client import resolve
from slacker.errors import SlackerError
from slacker.router import local as local_router

from .test_cli import one_line_error, slacker
from benchkit.writers import RoutedWriter

from .test_router import _wait_route


@pytest.fixture
def fleet(make_cluster):
    cluster = make_cluster(nodes=3, stats_interval_s=1)
    admin = local_router.start(cluster.path.parent, cluster.path, "127.0.0.1:0")
    yield cluster, local_router.listening(cluster.path.parent), admin
    local_router.stop(cluster.path.parent)


def _create(admin: str, tenant: str, *on: str) -> str:
    rc, out, err = slacker("tenant", "create", tenant, *on)
    assert rc == 0, out + err
    _wait_route(admin, tenant)
    return out.split(" on ", 1)[1].split()[0]


def _owners(cluster) -> dict:
    return {o.tenant: o for o in cluster_clients(cluster)[1].list()}


def _writers(cluster, listen, tenants) -> dict:
    return {t: RoutedWriter(listen, t, resolve(t, cluster).password).start() for t in tenants}


def _check_writers(writers: dict) -> None:
    for t, w in writers.items():
        lost = w.stop_and_check()
        assert not w.errors, f"{t}: {len(w.errors)} failed requests through the router: {w.errors[:3]}"
        assert not lost, f"{t}: acknowledged writes missing: {sorted(lost)[:10]}"
        assert len(w.acked) > 20, f"{t}: the writer hardly wrote ({len(w.acked)})"


def _drained(cluster, out: str, writers: dict) -> dict:
    """node-1 drained of the writers' tenants: said so, nothing lost or refused, each moved exactly once
    (created at epoch 1, one flip); the owners."""
    n = len(writers)
    assert "drained: node-1 is empty and stays cordoned" in out and f"{n} of {n} moved" in out, out
    _check_writers(writers)
    owners = _owners(cluster)
    assert not [t for t, o in owners.items() if o.node == "node-1"]
    assert {t: owners[t].epoch for t in writers} == {t: 2 for t in writers}
    return owners


def test_cordon_keeps_tenants_away_and_drain_moves_every_tenant_live(fleet):
    cluster, listen, admin = fleet
    rc, out, err = slacker("node", "cordon", "node-2", "--reason", "disk check")
    assert rc == 0 and "node-2 cordoned" in out, out + err
    rc, out, _ = slacker("node", "list", "--json")
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert nodes["node-2"]["cordoned"]["reason"] == "disk check" and nodes["node-1"]["cordoned"] is None
    rc, out, _ = slacker("status", "--json")
    assert {n["node"]: bool(n["cordoned"]) for n in json.loads(out)["nodes"]} == \
        {"node-1": False, "node-2": True, "node-3": False}
    rc, out, _ = slacker("status")
    assert "up, cordoned" in next(line for line in out.splitlines() if line.startswith("node-2"))

    # tenant create: refused on a cordoned node, and never placed there without --on.
    rc, _, err = slacker("tenant", "create", "nope", "--on", "node-2")
    one_line_error(rc, err, "cannot create tenant nope on node-2", "cordoned", "slacker node uncordon node-2")
    assert rc == 4
    busy = ("a1", "a2", "a3")
    for t in busy:
        _create(admin, t, "--on", "node-1")
    assert _create(admin, "n1") == "node-3"   # node-1 carries three, node-2 is cordoned
    writers = _writers(cluster, listen, busy)
    try:
        # The rebalancer: node-1 is hot by load; node-2 is never its target while cordoned.
        rules = ["--sla", "5s", "--samples", "2", "--hot-threshold", "25%", "--load-floor", "0.005",
                 "--min-tenant-load", "0.0005", "--min-tenant-share", "1%"]
        deadline = time.monotonic() + 45
        seen_move = None
        while time.monotonic() < deadline:
            rc, out, err = slacker("rebalance", "--json", *rules)
            assert rc == 0, err
            plan = json.loads(out)["plan"]
            reports = {n["name"]: n for n in plan["nodes"]}
            assert "cordoned (never a target)" in reports["node-2"]["reason"]
            if plan["decision"] == "move":
                seen_move = plan["move"]
                break
            time.sleep(1)
        assert seen_move is not None, plan["reason"]
        assert seen_move["source"] == "node-1" and seen_move["target"] == "node-3", seen_move

        # The drain, with node-2 open again: every tenant of node-1 leaves it, spread over node-2 and node-3.
        rc, out, err = slacker("node", "uncordon", "node-2")
        assert rc == 0 and "uncordoned" in out
        assert _create(admin, "n2") == "node-2"   # open again, and the emptiest
        rc, out, err = slacker("node", "drain", "node-1", "--dry-run", "--json")
        assert rc == 0, err
        planned = {t["tenant"]: t["target"] for t in json.loads(out)["tenants"]}
        assert set(planned) == set(busy) and "node-1" not in planned.values()
        assert set(planned.values()) == {"node-2", "node-3"}, planned  # spread over both open nodes
        assert _owners(cluster)["a1"].node == "node-1"  # a dry run moves nothing and cordons nothing
        assert "node-1" not in cluster_clients(cluster)[1].cordons()
        t0 = time.monotonic()
        rc, out, err = slacker("node", "drain", "node-1", "--sla", "5s", "--max-parallel", "2", "--max-freeze", "3s")
        print(out, err)
        assert rc == 0, out + err
        print(f"drain of 3 tenants: {time.monotonic() - t0:.1f}s")
        owners = _drained(cluster, out, writers)
    finally:
        for w in writers.values():
            w._stop.set()
    assert {owners[t].node for t in busy} == {"node-2", "node-3"}  # spread, not all on one
    rc, out, _ = slacker("node", "list")
    assert "cordoned" in next(line for line in out.splitlines() if line.startswith("node-1"))
    rc, _, err = slacker("tenant", "create", "n3", "--on", "node-1")
    assert rc == 4 and "cordoned" in err

    # Uncordoned, node-1 is the emptiest: the next tenant goes there.
    rc, out, err = slacker("node", "uncordon", "node-1")
    assert rc == 0, err
    assert _create(admin, "n3") == "node-1"


def _drain_proc(*extra: str) -> subprocess.Popen:
    """The drain as a script's background job starts it: with SIGINT ignored (`cmd &` without job control;
    a CI runner may start the whole suite so). `kill -INT` must still stop it cleanly."""
    return subprocess.Popen(["bash", "-c", 'trap "" INT; exec "$@"', "drain",
                             sys.executable, "-m", "slacker", "node", "drain", "node-1", "--sla", "5s",
                             "--max-parallel", "2", "--max-freeze", "3s", "--lock-ttl", "5s", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _wait_active(agent, n: int, timeout_s: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        migs = [m for m in agent.request("GET", "/v1/migrations")["migrations"]
                if m.get("active") and m.get("direction") != "incoming" and m.get("phase") == "snapshot"]
        if len(migs) >= n:
            return migs
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} migrations copying on node-1")


@pytest.mark.slow
def test_drain_interrupted_by_sigint_and_sigkill_resumes_and_moves_each_tenant_once(fleet):
    cluster, listen, admin = fleet
    agents, directory = cluster_clients(cluster)
    tenants = ("b1", "b2", "b3", "b4")
    for t in tenants:
        _create(admin, t, "--on", "node-1")
        # Copies join node-1's budget one at a time (ADMIT_AFTER_S apart): each must still copy when
        # the next joins, so that the first run is interrupted with two moves copying and two not begun.
        _pad(cluster, t, 20)
    writers = _writers(cluster, listen, tenants)
    try:
        # A slow copy (a rate cap) leaves time to interrupt each run while its moves copy.
        slow = ("--max-rate", "3MB/s")
        p = _drain_proc(*slow)
        first = _wait_active(agents["node-1"], 2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        print(out, err)
        assert p.returncode == 130, out + err
        assert "go on in the agents; run the same command again to continue" in err
        assert "node-1" in directory.cordons()

        # Run again: it follows the two migrations the first run started (not started twice) ...
        p = _drain_proc(*slow)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            started = {m["tenant"] for m in agents["node-1"].request("GET", "/v1/migrations")["migrations"]
                       if m.get("active") and m.get("direction") != "incoming"} - {m["tenant"] for m in first}
            if started:
                break
            time.sleep(0.2)
        assert started, "the second run started no move"
        p.send_signal(signal.SIGKILL)  # ... and is killed while a move of its own copies
        p.communicate(timeout=30)

        # The third run waits the killed run's lock out, follows what runs, and moves the rest.
        p = _drain_proc()
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            print(agents["node-1"].request("GET", "/v1/migrations"))
        print(out, err)
        assert p.returncode == 0, out + err
        _drained(cluster, out, writers)
    finally:
        for w in writers.values():
            w._stop.set()
    rc, out, _ = slacker("node", "uncordon", "node-1")
    assert rc == 0
    rc, out, _ = slacker("node", "list", "--json")
    assert next(n for n in json.loads(out)["nodes"] if n["node"] == "node-1")["cordoned"] is None


@pytest.mark.slow
def test_a_move_that_keeps_failing_is_reported_the_node_stays_cordoned_and_a_rerun_finishes(make_cluster):
    """f1 has a MyISAM table, so every live migration of it fails in preflight: it is tried 1 + --retries
    times, reported with its one-line reason and exit 8, while f2 moves; node-1 stays cordoned with f1
    serving on it. Once the table is InnoDB, the same command moves f1 (and only f1)."""
    cluster = make_cluster(nodes=3, stats_interval_s=1)
    for t in ("f1", "f2"):
        rc, _, err = slacker("tenant", "create", t, "--on", "node-1")
        assert rc == 0, err
    conn = resolve("f1", cluster).connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY) ENGINE=MyISAM")
    drain = ("node", "drain", "node-1", "--sla", "5s", "--retries", "1", "--max-freeze", "3s")
    rc, out, err = slacker(*drain)
    print(out, err)
    # stderr: the drain's events, then the one-line error.
    one_line_error(rc, err.strip().splitlines()[-1], "the drain of node-1 did not finish", "f1: migration f1-", "failed in phase preflight",
                   "1 table(s) not in InnoDB: m.t", "node-1 stays cordoned")
    assert rc == 8
    rows = {line.split()[0]: line for line in out.splitlines() if line[:2] in ("f1", "f2")}
    assert " moved " in rows["f2"] and " failed " in rows["f1"] and "not in InnoDB" in rows["f1"]
    assert rows["f1"].split()[5] == "2"  # tried once, retried once
    owners = _owners(cluster)
    assert owners["f1"].node == "node-1" and owners["f1"].epoch == 1 and owners["f2"].epoch == 2
    assert "node-1" in cluster_clients(cluster)[1].cordons()
    with conn.cursor() as cur:  # the source keeps serving
        cur.execute("INSERT INTO m.t VALUES (1)")
        cur.execute("ALTER TABLE m.t ENGINE=InnoDB")
    conn.close()
    rc, out, err = slacker(*drain)
    assert rc == 0, out + err
    assert "2 of 2 moved" in out and "by an earlier run" in next(ln for ln in out.splitlines() if ln.startswith("f2"))
    owners = _owners(cluster)
    assert owners["f1"].node != "node-1" and owners["f1"].epoch == 2 and owners["f2"].epoch == 2
    conn = resolve("f1", cluster).connect()
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM m.t")
        assert cur.fetchall() == ((1,),)


def test_drain_of_a_node_whose_agent_is_down_says_so(make_cluster):
    """A live move starts on the source's agent: with node-1's agent down the drain says why in one line,
    exit 8, and node-1 stays cordoned (the directory, on node-2, answers)."""
    cluster = make_cluster(nodes=2, directory_node="node-2")
    rc, _, err = slacker("tenant", "create", "g1", "--on", "node-1")
    assert rc == 0, err
    agents, directory = cluster_clients(cluster)
    agents["node-1"].request("POST", "/v1/shutdown", {"stop_tenants": False})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            agents["node-1"].request("GET", "/v1/status", timeout_s=2)
        except SlackerError:
            break
        time.sleep(0.5)
    rc, out, err = slacker("node", "drain", "node-1", "--sla", "5s")
    one_line_error(rc, err.strip().splitlines()[-1], "the drain of node-1 did not finish",
                   "g1: node-1's agent does not answer", "cannot reach agent node-1", "node-1 stays cordoned")
    assert rc == 8
    assert "node-1" in directory.cordons() and directory.lookup("g1").node == "node-1"


def _tenants_with_a_row(cluster, *tenants: str, pad_mb: int = 0) -> None:
    """Tenants on node-1, each with one row (k.t id 7) to find after its move, and `pad_mb` MB more in
    k.pad (copies long enough to overlap: a second copy joins a node's budget only after the controller
    has measured the first, slacker.rebalance.moves.ADMIT_AFTER_S)."""
    for t in tenants:
        rc, _, err = slacker("tenant", "create", t, "--on", "node-1")
        assert rc == 0, err
        conn = resolve(t, cluster).connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE k")
            cur.execute("CREATE TABLE k.t (id INT PRIMARY KEY)")
            cur.execute("INSERT INTO k.t VALUES (7)")
            conn.commit()
        conn.close()
        if pad_mb:
            _pad(cluster, t, pad_mb)


def _pad(cluster, tenant: str, mb: int) -> None:
    """`mb` MB more in the tenant (padding.t), so its copy lasts long enough to overlap another."""
    conn = resolve(tenant, cluster).connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE padding")
        cur.execute("CREATE TABLE padding.t (id INT PRIMARY KEY, v VARCHAR(1000))")
        cur.execute(f"INSERT INTO padding.t SELECT seq, REPEAT('x', 1000) FROM padding.seq_1_to_{mb * 1000}")
        conn.commit()
    conn.close()


@pytest.mark.slow
def test_drain_goes_on_across_a_restart_of_the_source_agent(make_cluster):
    """node-1's agent is killed while two moves copy and started again: the drain rides it out, the
    moves the restart ended are tried again, and every tenant ends off node-1, moved once."""
    from .test_router_handover import _kill_agent, _start_agent

    cluster = make_cluster(nodes=3, directory_node="node-3", stats_interval_s=1)
    agents, directory = cluster_clients(cluster)
    _tenants_with_a_row(cluster, "c1", "c2", pad_mb=40)
    p = _drain_proc("--max-rate", "2MB/s")
    try:
        _wait_active(agents["node-1"], 2)
        _wait_sharing(agents["node-1"], 2)  # the SIGKILL lands while both copies share node-1's budget
        _kill_agent(cluster, "node-1")
        time.sleep(2)
        _start_agent(cluster, "node-1")
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    print(out, err)
    assert p.returncode == 0, out + err
    assert "2 of 2 moved" in out
    owners = _owners(cluster)
    assert {t: (owners[t].node != "node-1", owners[t].epoch) for t in ("c1", "c2")} == \
        {"c1": (True, 2), "c2": (True, 2)}
    for t in ("c1", "c2"):
        conn = resolve(t, cluster).connect()  # the owner the directory names: the data there, and writable
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM k.t")
            assert cur.fetchall() == ((7,),)
            cur.execute("INSERT INTO k.t VALUES (8)")
        conn.close()


def test_uncordon_during_a_drain_stops_it_after_the_running_move(make_cluster):
    cluster = make_cluster(nodes=2, stats_interval_s=1)
    agents, directory = cluster_clients(cluster)
    for t in ("u1", "u2"):
        rc, _, err = slacker("tenant", "create", t, "--on", "node-1")
        assert rc == 0, err
    p = _drain_proc("--max-parallel", "1", "--max-rate", "2MB/s")
    try:
        [moving] = _wait_active(agents["node-1"], 1)
        rc, out, _ = slacker("node", "uncordon", "node-1")
        assert rc == 0
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 8, out + err
    assert "stopped: node-1 was uncordoned" in out, out
    owners = _owners(cluster)
    other = ({"u1", "u2"} - {moving["tenant"]}).pop()
    assert (owners[moving["tenant"]].node, owners[moving["tenant"]].epoch) == ("node-2", 2)  # it finished
    assert (owners[other].node, owners[other].epoch) == ("node-1", 1)  # never started
    assert "node-1" not in directory.cordons()


def _wait_sharing(agent, n: int, timeout_s: float = 60) -> dict:
    """node-1's budget (GET /v1/budget) once `n` copies share it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        doc = agent.request("GET", "/v1/budget")
        if doc["copying"] >= n and all(m["share_bytes_per_s"] for m in doc["members"]):
            return doc
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} copies share node-1's budget: {doc}")


@pytest.mark.slow
def test_two_moves_off_one_source_split_one_controller_s_rate(make_cluster):
    """Two copies off node-1 at once are throttled by node-1's one controller: its rate (at most the
    --max-rate given, the node's cap) is split between them, each gets about half, the sum never more; the
    migrations say so in their controller notes. Both finish, the data intact."""
    cluster = make_cluster(nodes=3, directory_node="node-3", stats_interval_s=1)
    agents, directory = cluster_clients(cluster)
    _tenants_with_a_row(cluster, "s1", "s2", pad_mb=40)
    cap = 4_000_000
    p = _drain_proc("--max-rate", "4MB/s")
    try:
        seen = []
        _wait_sharing(agents["node-1"], 2)
        for _ in range(4):
            doc = agents["node-1"].request("GET", "/v1/budget")
            if doc["copying"] == 2:
                seen.append(doc)
                notes = [m["controller"]["note"] for m in agents["node-1"].request("GET", "/v1/migrations")[
                    "migrations"] if m.get("active") and (m.get("controller") or {}).get("note")]
            time.sleep(1.0)
        out, err = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
    print(out, err, seen)
    assert seen, "the two copies never shared node-1's budget"
    for doc in seen:
        shares = [m["share_bytes_per_s"] for m in doc["members"] if m["copying"]]
        rate = doc["rate_bytes_per_s"]
        assert rate is not None and rate <= cap, doc
        assert sum(shares) <= rate and sum(shares) >= rate - 2, doc
        assert max(shares) - min(shares) <= 1, doc  # the fair split
    assert any("node budget (fair): 2 copies" in n for n in notes), notes
    assert p.returncode == 0, out + err
    assert "2 of 2 moved" in out
    owners = _owners(cluster)
    assert {owners[t].node for t in ("s1", "s2")} == {"node-2", "node-3"}  # one copy into each target
    for t in ("s1", "s2"):
        conn = resolve(t, cluster).connect()
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM k.t")
            assert cur.fetchall() == ((7,),)
        conn.close()
    assert agents["node-1"].request("GET", "/v1/budget")["active"] is False  # the last copy closed it


@pytest.mark.slow
def test_a_node_whose_copies_are_all_held_at_zero_sheds_one_and_the_drain_still_finishes(make_cluster):
    """Two copies share node-1's budget; then node-1's latency goes over the setpoint whatever the copies
    do (z's transactions sleep 1 s against a 50 ms SLA), so the budget holds both at 0 B/s. After the
    feasibility window the drain stops the newer copy (the tenant keeps serving on node-1), says so, and
    from then on runs one copy at a time; once the load calms down every tenant moves, each exactly once
    and in one counted attempt, its data intact."""
    from slacker.rebalance.moves import SHED_AFTER_S

    cluster = make_cluster(nodes=3, directory_node="node-3", stats_interval_s=1)
    agents, _ = cluster_clients(cluster)
    _tenants_with_a_row(cluster, "h1", "h2", pad_mb=40)
    _tenants_with_a_row(cluster, "z")
    stop, started = threading.Event(), threading.Event()

    def busy(tenant: str) -> None:
        """Point reads until both h copies run: the drain moves the busiest tenants first (CPU over the last
        samples), and idle servers' background CPU alone would order h1, h2 and z by chance. z must be last."""
        conn = resolve(tenant, cluster).connect()
        with conn.cursor() as cur:
            while not started.is_set():
                cur.execute("SELECT id FROM k.t WHERE id = 7")
                cur.fetchall()
                time.sleep(0.002)
        conn.close()

    readers = [threading.Thread(target=busy, args=(t,), daemon=True) for t in ("h1", "h2")]
    for t in readers:
        t.start()
    time.sleep(4)  # the setpoint derives from node-1's latency (3 samples): not from the loading above

    def sleepy() -> None:  # transactions that take 1 s on the server, whatever the copies cost
        conn = resolve("z", cluster).connect()
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("BEGIN")
                cur.execute("UPDATE k.t SET id = id WHERE id = 7")
                cur.execute("DO SLEEP(1)")
                cur.execute("COMMIT")
        conn.close()

    p = subprocess.Popen([sys.executable, "-m", "slacker", "node", "drain", "node-1", "--sla", "50ms",
                          "--max-parallel", "2", "--max-rate", "4MB/s", "--max-freeze", "3s"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    threads = []
    try:
        _wait_sharing(agents["node-1"], 2)
        started.set()
        threads = [threading.Thread(target=sleepy, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + SHED_AFTER_S + 60
        while time.monotonic() < deadline:
            doc = agents["node-1"].request("GET", "/v1/budget")
            if doc["active"] and doc["copying"] < 2:
                break
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            print(agents["node-1"].request("GET", "/v1/migrations"), agents["node-1"].request("GET", "/v1/budget"))
    finally:
        stop.set()
        started.set()
        if p.poll() is None:
            p.kill()
    print(out, err)
    assert p.returncode == 0, out + err
    assert "copies were all held at 0 B/s, so no copy could finish; it starts again later, " \
           "at most 1 copy at once from now" in err, err
    assert "3 of 3 moved" in out
    # TENANT TARGET RESULT DURATION FREEZE ("14 ms") TRIES: the stopped copy is not a failed attempt
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in ("h1", "h2", "z")]
    assert [(r[0], r[2], r[6]) for r in rows] == [("h1", "moved", "1"), ("h2", "moved", "1"), ("z", "moved", "1")], out
    owners = _owners(cluster)
    assert {t: (owners[t].node != "node-1", owners[t].epoch) for t in ("h1", "h2", "z")} == \
        {t: (True, 2) for t in ("h1", "h2", "z")}
    for t in ("h1", "h2", "z"):
        conn = resolve(t, cluster).connect()
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM k.t")
            assert cur.fetchall() == ((7,),)
            cur.execute("SELECT COUNT(*) FROM padding.t" if t != "z" else "SELECT 40000")
            assert cur.fetchone()[0] == 40000
        conn.close()
