"""The phase-aimed chaos mode's runs: a local cluster driven with the `slacker` command as an operator
would, one fault per move aimed at a phase of the migration, the restart, and what each run cost.

One seed = one fresh three-node cluster (node-3 serves the directory, node-1 and node-2 take turns as
source and target) with a router on 127.0.0.1, one small tenant, two acknowledged writers (one at
the owner's address, re-located through the directory after a move; one through the router as a
stock MySQL client) and a prober that tries a write on every node's copy every 100 ms.

With kind "shared" the tenant is a database in node-1's shared server, and each of the two nodes' shared
servers holds a neighbour with its own acknowledged writer through the router: a move's source and target
each have one. A kill of a "server" is then the node's shared server (the neighbour on it fails while it is
down), and the copy tool (the dump or the partial backup) is one more process to kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pymysql

from slacker import mariadb
from slacker.ackwriter import AckedWriter, WriteProber
from slacker.agent.client import cluster_clients
from slacker.client import TenantClient, resolve
from slacker.config import load_cluster
from slacker.procs import alive, read_pid, wait_gone
from benchkit import REPO
from benchkit.faults import writable_nodes
from benchkit.migration import create_loaded_tenant, processes_mentioning

from . import phases

WRITABLE_WAIT_S = 120.0  # a writer with no write in after this long: "never" in the table
END_WAIT_S = 240.0       # the migration's own end, after the restart


class RouterClient(TenantClient):
    """The tenant through the router's one address, as a stock MySQL client reaches it (user app@TENANT):
    one connection attempt per request, no directory, no retry."""

    def __init__(self, address: str, tenant: str, password: str) -> None:
        super().__init__(tenant, resolver=None, reconnect_timeout_s=0)
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.user = f"{mariadb.APP_USER}@{tenant}"
        self.password = password

    def _connect(self, deadline: float) -> None:
        self.conn = pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                    autocommit=True, connect_timeout=3, read_timeout=30, write_timeout=30,
                                    ssl_disabled=True)


class Operator:
    """The `slacker` command as an operator types it, against one run directory."""

    def __init__(self, run_dir: Path, create_options: list[str]) -> None:
        self.run_dir = run_dir
        self.create_options = create_options
        self.cluster_file = run_dir / "cluster.toml"

    def slacker(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slacker", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=timeout_s)

    def create(self) -> None:
        r = self.slacker("cluster", "up", "--dir", str(self.run_dir), *self.create_options)
        if r.returncode:
            raise RuntimeError(f"cluster up failed: {r.stdout}{r.stderr}")

    def bring_back(self) -> str | None:
        """`slacker cluster up --dir RUN`, nothing else. If that is refused, the options are typed again
        (a hand step); returns the hand step's description, or None."""
        return self.finish(self.bring_back_async())

    def bring_back_async(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "slacker", "cluster", "up", "--dir", str(self.run_dir)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finish(self, proc: subprocess.Popen) -> str | None:
        out = proc.communicate(timeout=300)[0]
        if proc.returncode == 0:
            return None
        # Once more as it was (an agent killed while this one was starting it fails the first try)...
        plain = self.slacker("cluster", "up", "--dir", str(self.run_dir))
        if plain.returncode == 0:
            return None
        # ... then with every option it was created with: a person had to look them up.
        first = (plain.stdout + plain.stderr).strip().splitlines()[-1:] or [""]
        again = self.slacker("cluster", "up", "--dir", str(self.run_dir), *self.create_options)
        if again.returncode:
            raise RuntimeError(f"cluster up with its options failed too: {again.stdout}{again.stderr}")
        return f"`cluster up --dir` refused ({first[0][:200]}); options re-typed"

    def down(self) -> None:
        self.slacker("cluster", "down", "--dir", str(self.run_dir), "--purge", timeout_s=180)


class Bench:
    def __init__(self, seed: int, run_dir: Path, *, rows: int, rate: float, hold_s: float, copy_rate: float,
                 address: str, api_port: int, port_range: str, router: str, log=print, kind: str = "server",
                 snapshot: str = "alternate") -> None:
        self.seed = seed
        self.kind = kind
        self.shared = kind == "shared"
        self.snapshot = snapshot  # a shared move's method: logical, physical, or alternate (odd moves physical)
        self.neighbours: dict[str, str] = {"chaosnb1": "node-1", "chaosnb2": "node-2"} if self.shared else {}
        self.rows = rows
        self.rate = rate
        self.hold_s = hold_s
        self.copy_rate = copy_rate
        self.router_address = router
        self.log = log
        self.tenant = "chaosph"
        self.op = Operator(run_dir, ["--nodes", "3", "--address", address, "--api-port", str(api_port),
                                     "--port-range", port_range, "--directory-node", "node-3", "--fault-injection",
                                     "--router", router])
        self.rng = random.Random(seed)
        self.pending: subprocess.Popen | None = None  # a `cluster up` running in the background
        self.aim = ""  # the running case's aimed phase

    # ---- setup -----------------------------------------------------------------------------
    def start(self) -> None:
        self.op.create()
        self.cluster = load_cluster(str(self.op.cluster_file))
        agents = cluster_clients(self.cluster)[0]
        for nb, node in self.neighbours.items():  # first, so both nodes' shared servers run before any move
            agents[node].request("POST", "/v1/tenants", {"id": nb, "kind": "shared"}, timeout_s=180)
        create_loaded_tenant(self.cluster, self.tenant, rows=self.rows, kind=self.kind)
        own = cluster_clients(self.cluster)[1].lookup(self.tenant)
        ep = resolve(self.tenant, self.cluster)
        self.password, self.user = ep.password, ep.user
        self.direct = AckedWriter(TenantClient.for_cluster(self.tenant, self.cluster, reconnect_timeout_s=5),
                                  writer_id=1, rate_per_s=self.rate).start()
        self.db = self.direct.database  # acks in a whole server, the tenant's own database in a shared one
        self.routed = AckedWriter(self.router_client(self.tenant, self.password), writer_id=2,
                                  rate_per_s=self.rate).start()
        self.neighbour_writers = {
            nb: AckedWriter(self.router_client(nb, resolve(nb, self.cluster).password), writer_id=10 + i,
                            rate_per_s=self.rate / 2).start()
            for i, nb in enumerate(self.neighbours)}
        if self.shared:
            self.servers = {n.name: (n.tenant_host, self.shared_port(n.name)) for n in self.cluster.nodes.values()
                            if n.name in self.neighbours.values()}
        else:
            self.servers = {n.name: (n.tenant_host, own.port) for n in self.cluster.nodes.values()}
        self.prober = WriteProber(self.servers, self.user, self.password, database=self.db).start()

    def router_client(self, tenant: str, password: str) -> RouterClient:
        """A client of `tenant` through the router, once the router knows it (it learns a new tenant from the
        directory's watch: a moment after it is created)."""
        routed = RouterClient(self.router_address, tenant, password)
        deadline = time.monotonic() + 60
        while True:
            try:
                routed.connection()
                return routed
            except Exception:
                if time.monotonic() > deadline:
                    raise
                routed.close()
                time.sleep(0.2)

    def shared_port(self, node: str) -> int:
        return int(json.loads((self.node_dir(node) / "shared" / "server.json").read_text())["port"])

    def stop(self) -> None:
        for part in ("direct", "routed", "prober"):
            if hasattr(self, part):
                getattr(self, part).stop()
        for w in getattr(self, "neighbour_writers", {}).values():
            w.stop()

    def record_file(self, node: str) -> Path:
        """The tenant's record on `node`: its server's metadata, or its record beside the shared server."""
        if self.shared:
            return self.node_dir(node) / "shared" / "tenants" / self.tenant / "tenant.json"
        return self.node_dir(node) / "tenants" / self.tenant / "tenant.json"

    def server_pid_file(self, node: str) -> Path:
        """The pid file of the server that holds the tenant on `node`."""
        if self.shared:
            return self.node_dir(node) / "shared" / "run" / "mariadbd.pid"
        return self.node_dir(node) / "tenants" / self.tenant / "run" / "mariadbd.pid"

    def node_dir(self, node: str) -> Path:
        return self.op.run_dir / node

    def agents(self):
        return cluster_clients(self.cluster)[0]

    def owner(self) -> str:
        return cluster_clients(self.cluster)[1].lookup(self.tenant).node

    def doc(self, node: str, key: str) -> dict | None:
        try:
            return self.agents()[node].request("GET", f"/v1/migrations/{key}", timeout_s=3)
        except Exception:
            return None

    def migration_ids(self, node: str) -> set[str]:
        try:
            return {m["id"] for m in self.agents()[node].request("GET", "/v1/migrations", timeout_s=3)["migrations"]}
        except Exception:
            return set()

    def wait_retiring(self, node: str, deadline: float) -> bool:
        """Until the tenant on `node` is marked retired on disk (True), or is gone or the time is up (False)."""
        meta = self.record_file(node)
        while time.monotonic() < deadline:
            if self.shared and not meta.exists():
                return True  # a shared copy's retirement begins by setting its record aside
            try:
                if json.loads(meta.read_text()).get("desired_state") == "retired":
                    return True
            except ValueError:
                pass  # being written
            except OSError:
                return False
            time.sleep(0.001)
        return False

    def target_fenced(self, node: str) -> bool | None:
        try:
            meta = json.loads(self.record_file(node).read_text())
            if self.shared and meta.get("state") != "ready":
                return True  # a move's incoming copy: no account to write with until its activation
            return bool(meta.get("fenced"))
        except (OSError, ValueError):
            return None

    # ---- faults ------------------------------------------------------------------------------
    def pid_of(self, kind: str, source: str, target: str, cli) -> tuple[int | None, str]:
        """The process a fault kind kills, and what it is."""
        if kind in ("kill-source-agent", "kill-target-agent", "kill-directory-agent", "stop-directory"):
            node = {"kill-source-agent": source, "kill-target-agent": target}.get(kind, "node-3")
            return read_pid(self.node_dir(node) / "agent.pid"), f"agent {node}"
        if kind in ("kill-source-server", "kill-target-server"):
            node = source if kind == "kill-source-server" else target
            return read_pid(self.server_pid_file(node)), \
                f"{node}'s shared server" if self.shared else f"{self.tenant}'s server on {node}"
        if kind == "kill-copy-tool":
            tools = [(pid, cmd) for pid, cmd in processes_mentioning(self.tenant)
                     if any(t in cmd.split(" ", 1)[0] for t in ("mariadb-dump", "mariabackup", "mariadb-backup"))
                     and alive(pid)]
            if not tools:
                return None, "copy tool"
            if self.aim == "prepare":  # the target's `--prepare`, not the source's stream that is ending then
                tools = [(pid, cmd) for pid, cmd in tools if "--prepare" in cmd]
                if not tools:
                    return None, "copy tool mariabackup --prepare"
            pid, cmd = tools[0]
            return pid, f"copy tool {Path(cmd.split(' ', 1)[0]).name} ({pid})"
        if kind == "kill-router":
            return read_pid(self.op.run_dir / "router" / "router.pid"), "router"
        if kind == "kill-cli":
            return cli.pid if cli.poll() is None else None, "slacker migrate"
        return None, ""

    def settle_pending(self) -> tuple[float | None, str | None]:
        """Wait for a `cluster up` started in the background (the recovery aim's first restart): when it
        returned, and its hand step. Two `cluster up` at once could start an agent twice."""
        if self.pending is None:
            return None, None
        hand = self.op.finish(self.pending)
        self.pending = None
        return time.monotonic(), hand

    def strike(self, kind: str, source: str, target: str, cli, restart_async: bool = False) -> dict:
        """Do the fault and bring back what it took, as an operator would, at once; returns when
        (monotonic) the last thing it took was running again, and what happened. With restart_async the
        `cluster up` runs on in the background (self.pending) and t_back is left to settle_pending."""
        out: dict = {"kind": kind}
        t_kill = time.monotonic()
        out["t_kill"] = t_kill
        if kind == "abort":
            r = self.op.slacker("--cluster", str(self.op.cluster_file), "migrate", "--abort", self.tenant,
                                timeout_s=60)
            out["note"] = (r.stdout or r.stderr).strip().splitlines()[-1][:200] if (r.stdout or r.stderr) else ""
            out["t_back"] = time.monotonic()
            return out
        pid, what = self.pid_of(kind, source, target, cli)
        if kind == "kill-copy-tool":
            # The prepare phase opens with its hold, before `mariabackup --prepare` starts: wait for the tool,
            # and kill it the moment it is seen (a short prepare is over within a poll or two).
            deadline = time.monotonic() + self.hold_s + 10
            while time.monotonic() < deadline and cli.poll() is None:
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        out["note"] = f"SIGKILL {what}"
                        out["t_back"] = time.monotonic()  # nothing to bring back: the agents go on
                        return out
                    except ProcessLookupError:
                        pass
                time.sleep(0.005)
                pid, what = self.pid_of(kind, source, target, cli)
            out["note"] = f"nothing to kill: no {what} running"
            out["t_back"] = t_kill
            return out
        if pid is None or not alive(pid):
            out["note"] = f"nothing to kill: no {what} running"
            out["t_back"] = t_kill
            return out
        if kind == "stop-directory":
            self.pending_done(out)
            os.kill(pid, signal.SIGSTOP)
            time.sleep(self.rng.uniform(1, 3))
            os.kill(pid, signal.SIGCONT)
            out["t_back"] = time.monotonic()
            out["note"] = f"{what} stopped {out['t_back'] - t_kill:.1f}s"
            return out
        if kind == "kill-router":
            os.killpg(pid, signal.SIGKILL)  # the whole router: its control side and its data path
        else:
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 10)
        out["note"] = f"SIGKILL {what}"
        if kind == "kill-cli":
            out["t_back"] = t_kill  # nothing to bring back: the agents run the migration
            return out
        if restart_async:
            self.pending = self.op.bring_back_async()
            return out
        self.pending_done(out)
        out["hand_step"] = self.op.bring_back()
        if kind in ("kill-source-server", "kill-target-server"):
            out["t_back"] = self._server_back(source if kind == "kill-source-server" else target, pid, t_kill)
        else:
            out["t_back"] = time.monotonic()  # cluster up returns once every agent and the router answer
        return out

    def pending_done(self, out: dict) -> None:
        t, hand = self.settle_pending()
        if t is not None:
            out["t_first_back"] = t
            out["first_hand_step"] = hand

    def _server_back(self, node: str, old_pid: int, t_kill: float, timeout_s: float = 60) -> float:
        """When the supervisor had the tenant's server running again on `node` (the kill's moment if it was
        not restarted there: retired, or a copy the migration removed)."""
        deadline = time.monotonic() + timeout_s
        pid_file = self.server_pid_file(node)
        while time.monotonic() < deadline:
            pid = read_pid(pid_file)
            if pid and pid != old_pid and alive(pid):
                return time.monotonic()
            if not self.shared and not (self.node_dir(node) / "tenants" / self.tenant).exists():
                return t_kill
            time.sleep(0.05)
        return t_kill

    # ---- checks ----------------------------------------------------------------------------------
    def writable(self) -> list[str]:
        return writable_nodes(self.servers, self.password, user=self.user, database=self.db)

    def leftovers(self, owner: str) -> list[str]:
        found = []
        for n in self.cluster.nodes:
            d = self.node_dir(n)
            found += [str(p) for p in (d / "journal").glob("*.json")]
            found += [str(p) for p in (d / "migrations").glob("*") if p.is_dir() and not p.name.startswith(".")]
            if n != owner and self.record_file(n).parent.exists():
                found.append(str(self.record_file(n).parent))
            areas = [d / "tenants" / ".trash", d / "tenants" / ".building", d / "migrations" / ".trash"]
            if self.shared:
                areas += [d / "shared" / "tenants" / ".trash", d / "shared" / "tenants" / ".building"]
            for area in areas:
                found += [str(p) for p in area.glob("*")]  # a removal or creation a crash cut short
            if self.shared and n in self.neighbours.values():
                found += [f"{n}: {what}" for what in self.in_shared_server(n, owner)]
        found += [cmd[:120] for _, cmd in processes_mentioning(f"{self.tenant}-20")]
        return found

    def in_shared_server(self, node: str, owner: str) -> list[str]:
        """What of the tenant `node`'s shared server still holds where it should not: its database and
        account anywhere but on the owner, and any replication connection (nothing else here replicates)."""
        d = self.node_dir(node)
        try:
            conn = pymysql.connect(unix_socket=str(d / "sock" / "_shared.sock"), user="slacker", autocommit=True,
                                   password=(d / "shared" / "secrets" / "admin.password").read_text().strip(),
                                   connect_timeout=2)
        except Exception as exc:
            return [f"shared server not answering ({type(exc).__name__})"]
        out = []
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                if node != owner:
                    cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (self.tenant,))
                    out += ["database"] if cur.fetchall() else []
                    cur.execute("SELECT 1 FROM mysql.global_priv WHERE User = %s", (self.user,))
                    out += ["account"] if cur.fetchall() else []
                cur.execute("SHOW ALL SLAVES STATUS")
                out += [f"replication {r['Connection_name']}" for r in cur.fetchall()]
        finally:
            conn.close()
        return out

    def settle(self, timeout_s: float = 60) -> tuple[str | None, list[str], bool]:
        """Until exactly one server takes writes and it is the directory's owner: (owner, writable, held)."""
        deadline = time.monotonic() + timeout_s
        owner, w = None, []
        while time.monotonic() < deadline:
            try:
                owner = self.owner()
                w = self.writable()
                if w == [owner]:
                    return owner, w, True
            except Exception:
                pass
            time.sleep(0.3)
        return owner, w, False

    def lost(self, ids: list[int]) -> int:
        if not ids:
            return 0
        return self.lost_of(self.tenant, self.db, ids)

    def lost_of(self, tenant: str, db: str, ids: list[int]) -> int:
        """Of the acknowledged `ids`, how many are not in `db`.log on `tenant`'s owner."""
        if not ids:
            return 0
        conn = resolve(tenant, self.cluster).connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT id FROM `{db}`.log WHERE id BETWEEN %s AND %s", (min(ids), max(ids)))
                have = {r[0] for r in cur.fetchall()}
        finally:
            conn.close()
        return len(set(ids) - have)

    # ---- one run -----------------------------------------------------------------------------
    def migrate_cmd(self, case: phases.Case, target: str, i: int = 1) -> list[str]:
        """The operator's `slacker migrate`, with --hold (rehearsals: the agents run with --fault-injection)
        at the point that opens the aimed phase (and a shared move's snapshot method, alternating by move)."""
        held = case.aim in phases.HOLD_IN_FREEZE
        cmd = [sys.executable, "-m", "slacker", "--cluster", str(self.op.cluster_file), "migrate", self.tenant,
               "--to", target, "--max-freeze", f"{self.hold_s + 1.5 if held else 0.5}s"]
        cmd += [f"--hold={point}={s}s" for point, s in phases.hold_for(case.aim, self.hold_s).items()]
        if case.aim == "snapshot":
            cmd += ["--rate", f"{int(self.copy_rate)}B/s"]
        if case.aim == "verify":
            cmd.append("--verify")
        if self.shared:
            method = self.snapshot if self.snapshot != "alternate" else ("physical" if i % 2 else "logical")
            if case.kind == "kill-copy-tool" and case.aim == "prepare":
                method = "physical"  # the dump's prepare runs no tool: only the partial backup's is there to kill
            cmd += ["--snapshot", method]
        return cmd

    def wait_aim(self, case: phases.Case, source: str, target: str, mid: str, deadline: float) -> dict | None:
        """Poll the source's migration until the aimed phase opens; returns its document then."""
        point = phases.HOLD_POINT[case.aim]
        while time.monotonic() < deadline:
            d = self.doc(source, mid)
            if d is None:
                time.sleep(0.02)
                continue
            if not d["active"]:
                return d
            step, pnr, phase = d.get("handover_step"), d.get("past_point_of_no_return"), d["phase"]
            if case.aim == "snapshot" and phase == "snapshot" and d.get("bytes_done", 0) > 0:
                return d
            if case.aim in ("prepare", "delta", "verify", "cleanup") and phase == point:
                return d
            if case.aim == "freeze" and phase == "handover" and step == "locked":
                return d
            if case.aim == "fence" and phase == "handover" and step == "fenced" and not pnr:
                return d
            if case.aim in ("flip", "recovery") and pnr:
                return d
            time.sleep(0.01)
        return None

    def one(self, i: int, case: phases.Case, source: str, target: str) -> dict:
        run: dict = {"seed": self.seed, "n": i, "aim": case.aim, "kind": case.kind, "source": source,
                     "target": target, "hand_steps": [], "faults": []}
        self.aim = case.aim
        marks = (len(self.direct.txns), len(self.routed.txns), len(self.direct.acked), len(self.routed.acked),
                 len(self.prober.double_writable))
        nb_marks = {nb: (len(w.txns), len(w.acked)) for nb, w in self.neighbour_writers.items()}
        before = self.migration_ids(source)
        cmd = self.migrate_cmd(case, target, i)
        if self.shared:
            run["snapshot"] = cmd[cmd.index("--snapshot") + 1]
        t0 = time.monotonic()
        cli = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
        mid = None
        deadline = time.monotonic() + 60
        while mid is None and time.monotonic() < deadline and cli.poll() is None:
            mid = next(iter(self.migration_ids(source) - before), None)
            time.sleep(0.02)
        if mid is None:
            mid = next(iter(self.migration_ids(source) - before), None)
        run["migration"] = mid
        if mid is None:  # refused at once (`migrate` exited): a later move blocked by an earlier run
            out = cli.communicate(timeout=30)[0] if cli.poll() is None else cli.stdout.read()
            run.update(blocked=True, cli_output=out.strip()[-400:], landed="preflight", seconds=0.0)
            return run
        d = self.wait_aim(case, source, target, mid, time.monotonic() + 120)
        t_aim = time.monotonic()  # the hold (if any) began at most one poll before this
        if d is not None and not d["active"] and d.get("result") == "failed" \
                and (d.get("error") or {}).get("phase") == "preflight":
            run.update(blocked=True, cli_output=(d.get("error") or {}).get("what", "") + ": "
                       + (d.get("error") or {}).get("why", ""), landed="preflight")
            cli.wait(timeout=30)
            return run
        recovered_once = False
        if case.aim == "recovery":
            # First the source agent, killed past the flip; `cluster up` brings it back in the background
            # and the run's fault lands while it comes up and recovers the migration.
            f = self.strike("kill-source-agent", source, target, cli, restart_async=True)
            run["faults"].append({"kind": f["kind"], "landed": "flip", "note": f.get("note")})
            recovered_once = True
            time.sleep(case.offset * 2.0)
        elif case.aim == "cleanup" and case.offset >= 0.5:
            # The source's retirement: marked retired on disk, then stopped and its files removed, all in
            # milliseconds. Watch for the mark and strike within 30 ms of it, with no request in between.
            retiring = self.wait_retiring(source, time.monotonic() + self.hold_s + 30)
            time.sleep((case.offset - 0.5) * 2 * 0.03)
        else:
            window = self.hold_s if phases.HOLD_POINT[case.aim] else 2.5
            time.sleep(case.offset * (2 if case.aim == "cleanup" else 1) * window)
        if case.aim == "cleanup" and case.offset >= 0.5:
            at = None
            run["landed"] = "retire" if retiring else "ended"
        else:
            at = self.doc(source, mid)
            run["landed"] = phases.landed(at, self.target_fenced(target), recovered_once)
        run["phase_at_strike"] = (at or {}).get("phase")
        f = self.strike(case.kind, source, target, cli)
        run["faults"].append({"kind": case.kind, "landed": run["landed"], "note": f.get("note")})
        if "t_first_back" not in f:  # the fault brought nothing back itself (abort, the CLI, nothing to kill)
            self.pending_done(f)
        for key in ("first_hand_step", "hand_step"):
            if f.get(key):
                run["hand_steps"].append(f[key])
        t_back = max(f["t_back"], f.get("t_first_back") or 0.0)
        run["killed_to_back_s"] = round(t_back - f["t_kill"], 3)
        # The neighbours whose shared server, or whose path (the router), the fault killed: their failed requests
        # are its doing, and their time to writable is counted as the mover's.
        struck = (f.get("note") or "").startswith("SIGKILL")
        killed = {"kill-source-server": source, "kill-target-server": target}.get(case.kind)
        run["neighbours_down"] = [nb for nb, node in self.neighbours.items()
                                  if struck and (node == killed or case.kind == "kill-router")]
        if phases.HOLD_POINT[case.aim]:
            # What was left of the hold when the restart ended: a migration that went on holding keeps the
            # tenant unwritable that long by the bench's own doing (at most --hold).
            run["hold_left_s"] = round(max(0.0, t_aim + self.hold_s - t_back), 3)
        # Time to writable: from the moment what died runs again to the first write each writer gets in.
        deadline = t_back + WRITABLE_WAIT_S
        ttw_d = ttw_r = None
        while time.monotonic() < deadline and (ttw_d is None or ttw_r is None):
            ttw_d = phases.first_accept_after(self.direct.txns[marks[0]:], t_back)
            ttw_r = phases.first_accept_after(self.routed.txns[marks[1]:], t_back)
            time.sleep(0.05)
        run["ttw_direct_s"], run["ttw_router_s"] = ttw_d, ttw_r
        # The whole gap as a writer saw it, from the fault itself (the restart's own time included).
        run["from_fault_direct_s"] = phases.first_accept_after(self.direct.txns[marks[0]:], f["t_kill"])
        run["from_fault_router_s"] = phases.first_accept_after(self.routed.txns[marks[1]:], f["t_kill"])
        if run["neighbours_down"]:
            deadline = t_back + WRITABLE_WAIT_S
            while True:
                back = [phases.first_accept_after(self.neighbour_writers[nb].txns[nb_marks[nb][0]:], t_back)
                        for nb in run["neighbours_down"]]
                if all(b is not None for b in back) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            run["ttw_neighbours_s"] = None if None in back else max(back)
        # The migration's own end, as the (maybe restarted) source agent reports it.
        end = None
        deadline = time.monotonic() + END_WAIT_S
        while time.monotonic() < deadline:
            end = self.doc(source, mid)
            if end is None and not alive_agent(self, source):
                time.sleep(0.3)
                continue
            if end is None or not end["active"]:
                break
            time.sleep(0.3)
        run["result"] = (end or {}).get("result")
        run["finishing_reason"] = (end or {}).get("finishing_reason")
        if end is not None and end.get("active"):
            run["stuck"] = f"still {end.get('phase')} after {END_WAIT_S:.0f}s: {end.get('finishing_reason')}"
        try:
            out = cli.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(cli.pid, signal.SIGKILL)
            out = cli.communicate()[0]
            run["cli_hung"] = True
        run["cli_exit"] = cli.returncode
        run["cli_output"] = (out or "").strip()[-300:]
        owner, w, held = self.settle()
        run.update(owner=owner, writable=w, one_owner=held)
        deadline = time.monotonic() + 20
        while True:
            left = self.leftovers(owner) if owner else ["no owner"]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        run["leftovers"] = left
        # Files an agent could not account for and moved aside (not in the way of a move, but reported).
        run["quarantined"] = sorted(str(p.relative_to(self.op.run_dir)) for n in self.cluster.nodes
                                    for p in (self.node_dir(n) / "tenants" / ".quarantine").glob("*"))
        run["split_brain_ticks"] = len(self.prober.double_writable) - marks[4]
        run["router_failed"] = sum(t.outcome != "acked" for t in self.routed.txns[marks[1]:])
        run["direct_failed"] = sum(t.outcome != "acked" for t in self.direct.txns[marks[0]:])
        # Every write acknowledged since the run began must be on the owner now (the final check
        # covers the whole seed again).
        run["acked_direct"] = len(self.direct.acked) - marks[2]
        run["acked_router"] = len(self.routed.acked) - marks[3]
        try:
            run["lost_direct"] = self.lost(self.direct.acked[marks[2]:])
            run["lost_router"] = self.lost(self.routed.acked[marks[3]:])
        except Exception as exc:  # no owner to ask: the run is unsafe already (one_owner false)
            run["lost_check"] = f"{type(exc).__name__}: {exc}"[:200]
        if self.shared:
            run["acked_neighbours"] = sum(len(w.acked) - nb_marks[nb][1] for nb, w in self.neighbour_writers.items())
            run["neighbour_failed"] = sum(t.outcome != "acked" for nb, w in self.neighbour_writers.items()
                                          for t in w.txns[nb_marks[nb][0]:])
            try:
                run["lost_neighbours"] = sum(self.lost_of(nb, nb, w.acked[nb_marks[nb][1]:])
                                             for nb, w in self.neighbour_writers.items())
            except Exception as exc:
                run["lost_neighbours"] = 0
                run["lost_check"] = f"neighbours: {type(exc).__name__}: {exc}"[:200]
        run["note"] = "; ".join(f["note"] for f in run["faults"] if f.get("note"))
        run["fault_injection"] = self.fault_injection_on()
        run["seconds"] = round(time.monotonic() - t0, 1)
        return run

    def fault_injection_on(self) -> bool:
        """Whether every agent still honours hold points (a restart that rewrote their configs without
        it would make the aimed holds silently not happen)."""
        return all(tomllib.loads((self.node_dir(n) / "agent.toml").read_text()).get("fault_injection") is True
                   for n in self.cluster.nodes)


def alive_agent(bench: Bench, node: str) -> bool:
    pid = read_pid(bench.node_dir(node) / "agent.pid")
    return bool(pid and alive(pid))


def other(node: str) -> str:
    return "node-2" if node == "node-1" else "node-1"


class Seed:
    """One seed's moves on a fresh cluster, with the hand steps a person would have had to take."""

    def __init__(self, bench: Bench, cases: list[phases.Case]) -> None:
        self.b = bench
        self.cases = cases
        self.runs: list[dict] = []
        self.final: list[dict] = []  # the two clean moves after the last run

    def hand_fix(self, blocked: dict) -> str:
        """What a person does when a move is refused: remove what the refusal names (the files of no
        known tenant on the target), by hand. Charged to the run that left it (phases.blame)."""
        b = self.b
        owner = b.owner()
        removed = []
        for path in b.leftovers(owner):
            p = Path(path)
            if p.exists() and p.is_dir() and str(p).startswith(str(b.op.run_dir)):
                subprocess.run(["rm", "-rf", str(p)], check=False)
                removed.append(str(p.relative_to(b.op.run_dir)))
            elif p.exists() and p.is_file() and str(p).startswith(str(b.op.run_dir)):
                p.unlink()
                removed.append(str(p.relative_to(b.op.run_dir)))
        step = (f"move {blocked['n']} refused ({blocked.get('cli_output', '')[-160:]}); removed by hand: "
                f"{', '.join(removed) or 'nothing found to remove'}")
        j = phases.blame(self.runs, len(self.runs))
        if self.runs:
            self.runs[j]["hand_steps"].append(step)
        return step

    def move(self, i: int, case: phases.Case, where: str) -> dict:
        run = self.b.one(i, case, where, other(where))
        if run.get("blocked"):
            run["blocked_by"] = self.hand_fix(run)
            retry = self.b.one(i, case, where, other(where))
            retry["retried_after_hand_step"] = run["blocked_by"]
            run = retry
        return run

    def run(self, on_run=lambda r: None) -> list[dict]:
        where = "node-1"
        for i, case in enumerate(self.cases, 1):
            r = self.move(i, case, where)
            self.runs.append(r)
            on_run(r)
            where = r.get("owner") or self.b.owner()
        # The later moves of the last runs: once each way with no fault, so every run's liveness is judged.
        for k in range(2):
            i = len(self.cases) + k + 1
            r = self.clean_move(i, where)
            if r.get("blocked"):
                r["blocked_by"] = self.hand_fix(r)
                r = self.clean_move(i, where)
            self.final.append(r)
            where = self.b.owner()
        return self.runs

    def clean_move(self, i: int, where: str) -> dict:
        """`slacker migrate TENANT --to OTHER`, the plain command, no fault."""
        t0 = time.monotonic()
        r = self.b.op.slacker("--cluster", str(self.b.op.cluster_file), "migrate", self.b.tenant, "--to", other(where),
                              "--json", timeout_s=600)
        out = (r.stdout or "") + (r.stderr or "")
        try:
            result = json.loads(r.stdout).get("result")
        except ValueError:
            result = None
        blocked = result != "succeeded"  # no fault in this move: anything but success is the earlier runs' doing
        return {"n": i, "clean": True, "source": where, "result": result, "cli_exit": r.returncode,
                "blocked": blocked, "cli_output": out.strip()[-300:], "seconds": round(time.monotonic() - t0, 1)}
