"""The controllers on an OLTP load, judged by paired differences within blocks: `--only oltp`.

Each block measures the tenant's capacity through the router, starts the load at --load-fraction of
it (sysbench oltp_read_write at constant arrivals, or the harness), takes the load's own latency on
its own clock (sysbench's per-thread seconds, the harness's records), and sets the binding setpoint
at --binding-mult times it and the non-binding one at --nonbinding-mult. Then, under that one load:
warm-up moves (unthrottled, not judged; the last one's rate places the fixed rates), and in an order
rotated each block: fixed rates (the oracle), the model with the router's latency source (the
default where a router carries the clients), the model with the server's, PID with the router's, at
the binding setpoint; an unthrottled move and the model at the non-binding one; and the load-step
arm (a second load at the same rate for --step-s seconds mid-copy), model with each source.

Every second a probe reads the router's and the server's latency for the tenant, so each move
records what each source saw beside the load's own clock. The pure parts (paired ratios, the
best oracle, the interval over blocks, recovery time, agreement) are in protocol.py.
"""

from __future__ import annotations

import statistics
import threading
import time

from slacker.client import resolve
from slacker.errors import SlackerError
from slacker.latency import PerformanceSchemaSource, RouterLatencySource
from slacker.router.control import registered_routers

from . import log, protocol
from .analysis import MB, mbs, ms, table
from .runner import Bench, Harness, drop_page_cache

SERVER_SOURCE = "performance-schema,table=transactions,exclude-user=slacker"
BINDING = ["model-router:b", "model-server:b", "pid-router:b"]
NONBINDING = ["model-router:nb"]
STEPS = ["step:model-router", "step:model-server"]


def members(n_fixed: int) -> list[str]:
    return [f"fixed:{i}" for i in range(n_fixed)] + BINDING + ["unthrottled"] + NONBINDING + STEPS


class Probe:
    """Once a second: the tenant's cumulative latency sum and count at the routers and at the server
    (performance_schema, following the tenant to its owner), kept as per-second buckets
    {second's end: (transactions, summed latency s)} for each source."""

    def __init__(self, bench: Bench, tenant: str) -> None:
        self.bench, self.tenant = bench, tenant
        self.router: dict[int, tuple[float, float]] = {}
        self.server: dict[int, tuple[float, float]] = {}
        self.errors = {"router": 0, "server": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="oltp-probe", daemon=True)
        self._thread.start()

    def _admins(self) -> list[str]:
        return [r["admin"] for r in registered_routers(self.bench.directory) if r.get("admin")]

    def _loop(self) -> None:
        rsrc = RouterLatencySource(self.tenant, self._admins, step_s=1.0)
        psrc, node = None, None
        prev: dict[str, tuple | None] = {"router": None, "server": None}
        t_start = time.time()
        while not self._stop.wait(1.0 - (time.time() - t_start) % 1.0):
            now = time.time()
            try:
                own = self.bench.directory.lookup(self.tenant)
                if psrc is None or own.node != node:
                    if psrc is not None:
                        psrc.close()
                    ep = resolve(self.tenant, directory=self.bench.directory, agents=self.bench.agents)
                    psrc = PerformanceSchemaSource(lambda ep=ep: ep.connect(timeout_s=2), kind="transactions",
                                                   exclude_users=("slacker",), name="oltp-probe")
                    node, prev["server"] = own.node, None
            except Exception:  # noqa: BLE001 - the tenant moving: try again next second
                prev["server"] = None
            for key, read in (("router", lambda: rsrc._snapshot()[:2]),
                              ("server", lambda: psrc._snapshot() if psrc else None)):
                try:
                    snap = read()
                except Exception:  # noqa: BLE001 - a second unseen; the next delta starts anew
                    self.errors[key] += 1
                    prev[key] = None
                    continue
                if snap is None:
                    continue
                s, c = snap
                p = prev[key]
                if p is not None and c >= p[2]:
                    getattr(self, key)[round(now)] = (c - p[2], s - p[1])
                prev[key] = (now, s, c)
        if psrc is not None:
            psrc.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class Oltp:
    def __init__(self, bench: Bench) -> None:
        self.bench, self.a = bench, bench.args
        self.tenant = self.a.tenant
        self.st: dict = bench.results.setdefault("oltp", {"blocks": [], "load": self.a.load})
        self._block_load = None  # the block's load, while it runs (the moves wait for it to recover)

    # --- the load -----------------------------------------------------------------------------------------
    def start_load(self, name: str, tps: float, time_s: float | None = None):
        a, b = self.a, self.bench
        if a.load == "sysbench":
            from .sysbench import SysbenchLoad
            return SysbenchLoad(b, name, [self.tenant], [tps], a.records, time_s=time_s or 7200, sample=False)
        return Harness(b, name, [self.tenant], [tps], a.records)

    def clock(self, loads, service: bool | None = None) -> dict[int, tuple[float, float]]:
        """The loads' own clock, merged: {second's end: (transactions, summed latency s)}; by --judge-clock
        (or `service`): sysbench's transactions from their scheduled arrival (response) or their start
        (service); the harness's are always from the scheduled arrival."""
        service = self.a.judge_clock == "service" if service is None else service
        out: dict[int, tuple[float, float]] = {}
        for h in loads:
            if hasattr(h, "own_clock"):
                buckets = h.own_clock(service=service)
            else:
                buckets = {round(r["_end"]): (r["completed"], r["completed"] * (r["latency_mean_s"] or 0))
                           for r in h.records() if r.get("phase") == "run"}
            for k, (n, s) in buckets.items():
                c0, s0 = out.get(k, (0.0, 0.0))
                out[k] = (c0 + n, s0 + s)
        return out

    def capacity(self, k: int) -> float:
        """The tenant's capacity now, through the router: the load with no rate limit (sysbench closed
        loop; the harness at --capacity-probe-tps), transactions in the median second after a warm-up."""
        a = self.a
        name = f"o{k}-capacity"
        if a.load == "sysbench":
            h = self.start_load(name, 0)
        else:
            h = Harness(self.bench, name, [self.tenant], [a.capacity_probe_tps], a.records)
        try:
            h.wait_ready()
            time.sleep(a.capacity_s)
        finally:
            h.stop()
        secs = sorted(self.clock([h]).items())[2:-1]  # the first seconds ramp up, the last is cut short
        return statistics.median(n for _, (n, _) in secs) if secs else 0.0

    # --- one move -----------------------------------------------------------------------------------------
    def controller(self, kind: str, sp: float, source: str) -> dict:
        c = {"kind": kind, "setpoint_s": sp, "max_rate_bytes_per_s": self.a.max_rate, "force": True}
        if kind == "pid" and self.a.gains:
            c["gains"] = self.a.gains
        if source == "server":  # the router source is the default where a router carries the clients
            c["latency_sources"] = [SERVER_SOURCE]
        return c

    def move(self, blk: dict, member: str, name: str, *, rate: float | None = None, sp: float | None = None,
             kind: str = "unthrottled", source: str | None = None, step_tps: float | None = None,
             abort_after_s: float | None = None) -> dict:
        a, b = self.a, self.bench
        b.ensure_home(self.tenant)
        if a.disk_read_bps:
            drop_page_cache()  # the copy must read the (limited) disk, as the tenant's page reads do
        time.sleep(a.move_gap)
        waited, back = self._recover(blk)
        ctl = self.controller(kind, sp, source) if kind in ("model", "pid") else None
        stepper = None
        step: dict = {}
        if step_tps:
            agent = b.agents[b.node_of(self.tenant)]

            def copying() -> bool:
                try:
                    migs = agent.request("GET", "/v1/migrations", timeout_s=2).get("migrations", [])
                except SlackerError:
                    return False
                return any(x.get("tenant") == self.tenant and x.get("active") and x.get("phase") == "snapshot"
                           for x in migs)

            def second_load() -> None:
                deadline = time.monotonic() + 60
                while not copying() and time.monotonic() < deadline:
                    time.sleep(0.2)
                time.sleep(a.step_delay)
                step["at"] = time.time()
                h2 = self.start_load(f"{name}-step", step_tps, time_s=a.step_s)
                step["load"] = h2
                time.sleep(a.step_s)
                h2.stop()
                step["until"] = time.time()
            stepper = threading.Thread(target=second_load, daemon=True)
            stepper.start()
        try:
            # every move but a fixed rate's ends by itself; --move-timeout is the bench's, for them all alike
            mig = b.migrate(self.tenant, rate=rate, controller=ctl, name=name,
                            abort_after_s=abort_after_s or a.move_timeout)
        except SlackerError as exc:
            log(f"  {name}: {exc.one_line()}; left out of the block's figures")
            blk["moves"][member] = {"name": name, "member": member, "kind": kind, "source": source,
                                    "result": "failed", "error": exc.one_line()}
            if stepper is not None:
                stepper.join(a.step_s + a.step_delay + 30)
            return blk["moves"][member]
        if stepper is not None:
            stepper.join(a.step_s + a.step_delay + 30)
        c0 = mig["snapshot_start"]
        c1 = mig["snapshot_end"] - (a.tail_exclude if mig["result"] == "succeeded" else 0.0)
        if c1 - c0 < 2:
            c1 = mig["snapshot_end"]
        src = mig.get("latency_source") or {}
        m = {"name": name, "member": member, "kind": kind, "source": source, "setpoint_s": sp, "fixed_rate": rate,
             "result": mig["result"], "rate": mig["avg_rate"], "bytes": mig["bytes"],
             # asked -> done, as the user waits it: the load measured before the copy counts
             "time_s": (mig["finished"] or time.time()) - mig["posted"], "agent_duration_s": mig["duration_s"],
             "snapshot_s": mig["snapshot_s"], "copy": [c0, c1], "posted": mig["posted"],
             "end": mig["snapshot_end"], "latency_source": src.get("kind"),
             "latency_source_why": {t: v.get("why") for t, v in (src.get("tenants") or {}).items()},
             "seeded": src.get("seeded"),  # the node's memory's entry the controller started from (None: first)
             "series_path": mig["series_path"], "step": {k: v for k, v in step.items() if k != "load"} or None,
             "cpu_during_copy": b.cpu.summary(c0, mig["snapshot_end"]), "recovery_wait_s": waited,
             "started_recovered": back}
        blk["moves"][member] = m
        if "load" in step:
            blk.setdefault("_step_loads", {})[member] = step["load"]
        return m

    def _recover(self, blk: dict) -> tuple[float, bool]:
        """Wait (at most --recover-max) until the block's load is back under the binding setpoint on its own
        clock: the last move's queue in the client must not be the next move's. (seconds waited, whether it
        was back)."""
        load, limit = self._block_load, blk.get("setpoint_s")
        if load is None or not limit:
            return 0.0, True
        t0 = time.time()
        while True:
            now = time.time()
            if protocol.recovered(self.clock([load]), now - 1.0, limit):  # the last complete seconds
                return round(now - t0, 1), True
            if now - t0 >= self.a.recover_max:
                log(f"  the load is still over the setpoint after {self.a.recover_max:.0f}s: the move starts anyway "
                    "(marked started_recovered=false)")
                return round(now - t0, 1), False
            time.sleep(1.0)

    # --- a block ------------------------------------------------------------------------------------------
    def block(self, k: int, t_block: float) -> dict:
        a, b = self.a, self.bench
        blk: dict = {"block": k, "started": time.time(), "moves": {}}
        self.st["blocks"].append(blk)
        b.ensure_home(self.tenant)
        cap = self.capacity(k)
        tps = round(a.load_fraction * cap, 1)
        blk.update(capacity_tps=cap, offered_tps=tps)
        log(f"block {k}: capacity {cap:.0f} tps through the router; the load at {tps:g} tps")
        load = self.start_load(f"o{k}-load", tps)
        probe = Probe(b, self.tenant)
        try:
            load.wait_ready()
            time.sleep(a.warmup)
            t1 = time.time()
            own = protocol.window_mean(self.clock([load]), t1 - a.pre_window, t1)
            if not own:
                raise SystemExit(f"block {k}: the load measured no latency on its own clock")
            sp_b = a.binding_mult * own
            blk.update(own_s=own, setpoint_s=sp_b)
            self._block_load = load
            log(f"block {k}: the load's own latency {ms(own)} ms; binding setpoint {ms(sp_b)} ms "
                f"({a.binding_mult:g}x)")
            u_rate, u_mean = None, None
            for i in range(a.warmup_moves):
                w = self.move(blk, f"warmup:{i}", f"o{k}-warmup{i}")
                if w.get("rate"):
                    u_rate = w["rate"]
                    u_mean = protocol.window_mean(self.clock([load]), *w["copy"]) or u_mean
                self._line(k, w, t_block)
            if not u_rate:
                raise SystemExit(f"block {k}: no warm-up move completed; the fixed rates have nothing to go by")
            # The non-binding setpoint must sit above what an unthrottled copy does to this load.
            sp_nb = protocol.nonbinding_setpoint(own, a.nonbinding_mult, u_mean)
            rates = protocol.oracle_rates(u_rate, a.oracle_factors, own, u_mean, sp_b)
            blk.update(nonbinding_s=sp_nb, warmup_mean_s=u_mean, fixed_rates=rates)
            log(f"block {k}: the unthrottled warm-up copy at {mbs(u_rate)} MB/s took the load to "
                f"{ms(u_mean) if u_mean else '?'} ms; non-binding setpoint {ms(sp_nb)} ms")
            chosen = members(len(rates))
            if getattr(a, "members", None):  # --members: a subset, each name a member or a prefix (fixed)
                want = [m.strip() for m in a.members.split(",") if m.strip()]
                chosen = [m for m in chosen if any(m == w or m.startswith(w.rstrip("*")) for w in want)]
            order = protocol.rotated(chosen, k)
            blk["order"] = order
            log(f"block {k}: fixed rates {', '.join(mbs(r) for r in rates)} MB/s; order {' '.join(order)}")
            for mem in order:
                kind, _, arg = mem.partition(":")
                name = f"o{k}-{mem.replace(':', '-')}"
                if kind == "fixed":
                    m = self.move(blk, mem, name, rate=rates[int(arg)], abort_after_s=a.level)
                elif kind == "unthrottled":
                    m = self.move(blk, mem, name)
                elif kind == "step":
                    ctl, src = arg.split("-")
                    m = self.move(blk, mem, name, kind=ctl, source=src, sp=sp_b, step_tps=tps * (a.step_factor - 1))
                else:
                    ctl, _, rest = kind.partition("-")
                    m = self.move(blk, mem, name, kind=ctl, source=rest, sp=sp_b if arg == "b" else sp_nb)
                self._line(k, m, t_block, order.index(mem) + 1, len(order))
                b.save()
        finally:
            self._block_load = None
            load.stop()
            probe.stop()
        step_loads = blk.pop("_step_loads", {})
        self.analyse(blk, load, probe, step_loads)
        blk["ended"] = time.time()
        b.save()
        return blk

    def _line(self, k: int, m: dict, t_block: float, i: int = 0, n: int = 0) -> None:
        """One progress line per move, with the ETA of the block (from the last block's length) and the run."""
        a = self.a
        if m["result"] == "failed":
            return
        done = time.time() - t_block
        per_block = self.st.get("block_s") or a.block_estimate
        eta = per_block * (a.blocks - k + 1) - done
        log(f"  {m['name']}: {m['result']} {m['bytes'] / MB:.0f} MB in {m['snapshot_s']:.1f}s = {mbs(m['rate'])} MB/s"
            + (f" ({i}/{n})" if n else "") + f"; ETA {max(0, eta) / 60:.0f} min")

    # --- the block's figures --------------------------------------------------------------------------------
    def analyse(self, blk: dict, load, probe: Probe, step_loads: dict) -> None:
        a = self.a
        for mem, m in blk["moves"].items():
            if "copy" not in m:
                continue
            c0, c1 = m["copy"]
            loads = [load] + ([step_loads[mem]] if mem in step_loads else [])  # a step's second load: clients too
            clk, resp, svc = self.clock(loads), self.clock(loads, False), self.clock(loads, True)
            m["mean_s"] = protocol.window_mean(clk, c0, c1)
            m["mean_response_s"] = protocol.window_mean(resp, c0, c1)
            m["mean_service_s"] = protocol.window_mean(svc, c0, c1)
            m["router_mean_s"] = protocol.window_mean(probe.router, c0, c1)
            m["server_mean_s"] = protocol.window_mean(probe.server, c0, c1)
            own, sv1 = protocol.per_second(resp, c0, c1), protocol.per_second(svc, c0, c1)
            rt = protocol.per_second(probe.router, c0, c1)
            sv = protocol.per_second(probe.server, c0, c1)
            # the sources against the client's time for the same thing they time (from the transaction's
            # start), and against what the clients saw from the scheduled arrival
            m["agreement"] = {"router_vs_client": protocol.agreement(rt, sv1),
                              "server_vs_client": protocol.agreement(sv, sv1),
                              "router_vs_client_response": protocol.agreement(rt, own)}
            every = [protocol.per_second(x) for x in (resp, svc, probe.router, probe.server)]
            # [s from the copy's start, client response ms, client service ms, router ms, server ms]
            m["seconds"] = [[k - round(c0)] + [_r(x.get(k)) for x in every]
                            for k in range(round(c0) - 5, round(m["end"]) + 6)]
            if m.get("step") and m["step"].get("at"):
                t_at, t_to = m["step"]["at"], min(m["step"].get("until") or c1, c1)
                m["step"]["recovery_s"] = step_recovery(m, a.judge_clock)
                m["step"]["copy_ended_s"] = c1 - t_at
                m["step"]["step_in_copy_s"] = max(0.0, t_to - t_at)
        blk["probe_errors"] = dict(probe.errors)
        refigure(blk, a.judge_clock)
        log(f"block {blk['block']} figures: " + ", ".join(f"{k2} {v:.2f}" for k2, v in blk["figures"].items()
                                                         if isinstance(v, float) and not k2.endswith("_s")))


def step_recovery(m: dict, judge_clock: str = "response") -> float | None:
    """Seconds from the end of a move's load step until the clients' latency is back under the setpoint
    (protocol.recovery_s), from the per-second rows the move keeps, within the copy (after it the copy is
    not what holds the latency up). While the doubled load alone fills the tenant no copy rate can keep
    the setpoint, so the clock starts when the load returns to its level."""
    st = m.get("step") or {}
    if not st.get("at") or not m.get("seconds"):
        return None
    c0, c1 = m["copy"]
    col = 2 if judge_clock == "service" else 1
    secs = [(round(c0) + row[0], row[col] / 1000 if row[col] is not None else None) for row in m["seconds"]]
    secs = [(t, v) for t, v in secs if st["at"] - 1 <= t <= c1]
    return protocol.recovery_s(secs, m["setpoint_s"], min(st.get("until") or c1, c1))


def refigure(blk: dict, judge_clock: str = "response") -> None:
    """A block's figures from its moves' summaries (also for --report-only: a change here applies to old runs)."""
    runs = {mem: m for mem, m in blk["moves"].items()
            if not mem.startswith(("warmup", "step")) and m.get("rate") and m.get("time_s")}
    blk["figures"] = protocol.block_ratios(runs, blk["setpoint_s"], BINDING)
    for mem in NONBINDING:
        if blk["figures"].get(f"{mem}:bound"):
            blk["figures"][f"{mem}:time/unthr"] = None  # it bound: not a non-binding figure
    for mem in STEPS:
        m = blk["moves"].get(mem)
        if m and m.get("step"):
            m["step"]["recovery_s"] = step_recovery(m, judge_clock)
        blk["figures"][f"{mem}:recovery_s"] = (m.get("step") or {}).get("recovery_s") if m else None
    ag = [m["agreement"] for mem, m in blk["moves"].items() if not mem.startswith("warmup") and "agreement" in m]
    for key in ("router_vs_client", "server_vs_client"):
        for f in ("correlation", "ratio_of_means"):
            vals = [x[key][f] for x in ag if x[key][f] is not None]
            blk["figures"][f"{key}:{f}"] = statistics.median(vals) if vals else None


def _r(v: float | None) -> float | None:
    return round(v * 1000, 2) if v is not None else None


def run(bench: Bench) -> dict:
    o = Oltp(bench)
    a = bench.args
    deadline = a.until
    for k in range(1, a.blocks + 1):
        est = o.st.get("block_s") or a.block_estimate
        if deadline and time.time() + est > deadline:
            log(f"stopping before block {k} of {a.blocks}: it would end after --until "
                f"(a block takes ~{est / 60:.1f} min); {k - 1} block(s) completed")
            break
        t0 = time.time()
        o.block(k, t0)
        done = [b["ended"] - b["started"] for b in o.st["blocks"] if b.get("ended")]
        o.st["block_s"] = statistics.fmean(done)
        log(f"block {k} of {a.blocks} done in {(time.time() - t0) / 60:.1f} min; "
            f"ETA {o.st['block_s'] * (a.blocks - k) / 60:.0f} min")
    o.st["summary"] = summary(o.st)
    bench.save()
    return o.st


# --- the report -------------------------------------------------------------------------------------------

ROWS = [("model, router: mean/sp", "model-router:b:mean/sp", "upper <= 1.1"),
        ("model, server: mean/sp", "model-server:b:mean/sp", "upper <= 1.1"),
        ("PID, router: mean/sp", "pid-router:b:mean/sp", "upper <= 1.1"),
        ("model, router: speed/oracle", "model-router:b:speed/oracle", "median >= 0.85"),
        ("model, server: speed/oracle", "model-server:b:speed/oracle", "median >= 0.85"),
        ("PID, router: speed/oracle", "pid-router:b:speed/oracle", "median >= 0.85"),
        ("model, router, 4x: time/unthrottled", "model-router:nb:time/unthr", "median <= 1.15"),
        ("step, model, router: s back under sp after the step", "step:model-router:recovery_s", "<= 10 s"),
        ("step, model, server: s back under sp after the step", "step:model-server:recovery_s", "<= 10 s"),
        ("router / client, per second: correlation", "router_vs_client:correlation", ""),
        ("router / client: ratio of means", "router_vs_client:ratio_of_means", ""),
        ("server / client, per second: correlation", "server_vs_client:correlation", ""),
        ("server / client: ratio of means", "server_vs_client:ratio_of_means", "")]


def summary(st: dict) -> dict:
    """Median and 90 % interval over the completed blocks of each figure."""
    blocks = [b for b in st["blocks"] if b.get("figures")]
    return {key: protocol.interval([b["figures"].get(key) for b in blocks]) for _, key, _ in ROWS}


def met(key: str, goal: str, s: dict) -> str:
    if s["n"] == 0 or not goal:
        return ""
    if goal.startswith("upper"):
        return "yes" if s["hi"] <= 1.1 else "no"
    if goal.startswith("median >="):
        return "yes" if s["median"] >= 0.85 else "no"
    if goal.startswith("median <="):
        return "yes" if s["median"] <= 1.15 else "no"
    return "yes" if s["hi"] <= 10 else "no"


def report(res: dict) -> str:
    st = res.get("oltp")
    if not st:
        return ""
    blocks = [b for b in st["blocks"] if b.get("figures")]
    cfg = res["config"]
    out = [f"oltp: {st.get('load')} load through the router at {cfg.get('load_fraction')} of the capacity measured "
           f"before each block, {len(blocks)} block(s) completed of {cfg.get('blocks')}; setpoints "
           f"{cfg.get('binding_mult')}x and {cfg.get('nonbinding_mult')}x the load's own latency"
           + (f" (sysbench's clock from each transaction's {'start' if cfg.get('judge_clock') == 'service' else 'scheduled arrival'})"
              if st.get("load") == "sysbench" else " (the harness's clock, from the scheduled arrival)")]
    no_oracle = [b["block"] for b in blocks if b["figures"].get("oracle_rate") is None]
    if no_oracle:
        out.append(f"blocks where no fixed rate (nor the unthrottled move) met the binding setpoint, so speed / oracle "
                   f"is missing: {', '.join(map(str, no_oracle))}")
    bound = [f"{b['block']} (unthrottled {ms(b['moves']['unthrottled'].get('mean_s'))} ms > {ms(b['nonbinding_s'])} ms)"
             for b in blocks if any(b["figures"].get(f"{m}:bound") for m in NONBINDING) and "unthrottled" in b["moves"]]
    if bound:
        out.append("blocks where the non-binding setpoint bound (the unthrottled move went over it), so its time / "
                   f"unthrottled is left out: {', '.join(bound)}")
    failed = [m["name"] for b in st["blocks"] for m in b["moves"].values() if m.get("result") == "failed"]
    if failed:
        out.append(f"moves that failed (left out): {', '.join(failed)}")
    timed_out = [m["name"] for b in st["blocks"] for m in b["moves"].values()
                 if m.get("result") == "aborted" and m.get("fixed_rate") is None]
    if timed_out:
        out.append(f"moves aborted at --move-timeout (judged on what they copied): {', '.join(timed_out)}")
    rows = []
    for b in blocks:
        rows.append([b["block"], f"{b['capacity_tps']:.0f}", f"{b['offered_tps']:g}", ms(b["own_s"]), ms(b["setpoint_s"]),
                     mbs(b["figures"].get("oracle_rate")), " ".join(mbs(r, 0) for r in b.get("fixed_rates", []))])
    out.append(table(["block", "capacity tps", "load tps", "own ms", "setpoint ms", "best oracle MB/s",
                      "fixed MB/s"], rows))
    s = st.get("summary") or summary(st)
    rows = []
    for label, key, goal in ROWS:
        v = s.get(key) or protocol.interval([])
        per = " ".join(_f(b["figures"].get(key)) for b in blocks)
        rows.append([label, _f(v["median"]), f"{_f(v['lo'])} - {_f(v['hi'])}", v["n"], per, goal, met(key, goal, v)])
    out.append(table(["figure", "median", "90 % interval", "n", "per block", "goal", "met"], rows,
                     "paired within blocks: median and 90 % interval over blocks"))
    return "\n".join(out)


def _f(v, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


# --- the plot -----------------------------------------------------------------------------------------------

def plot(res: dict, out_dir) -> list:
    """One figure: left, each judged ratio per block (dots) with its median and 90 % interval; right, the
    last block's model move (router source) per second on the three clocks against the setpoint."""
    from pathlib import Path
    st = res.get("oltp") or {}
    blocks = [b for b in st.get("blocks", []) if b.get("figures")]
    if not blocks:
        return []
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        log("plot skipped: matplotlib is not installed")
        return []
    path = Path(out_dir) / f"setpoint-oltp-{st.get('load', 'sysbench')}.png"
    fig = Figure(figsize=(12, 4.8))
    FigureCanvasAgg(fig)
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    rows = [r for r in ROWS[:7]]
    for i, (label, key, goal) in enumerate(rows):
        vals = [b["figures"].get(key) for b in blocks]
        pts = [v for v in vals if v is not None]
        ax.scatter(pts, [i] * len(pts), s=14, color="#777777", zorder=2)
        s = protocol.interval(vals)
        if s["n"]:
            ax.plot([s["lo"], s["hi"]], [i, i], color="#1f77b4", lw=3, zorder=1)
            ax.scatter([s["median"]], [i], marker="|", s=200, color="#d62728", zorder=3)
    ax.axvline(1.0, color="black", lw=0.8)
    for x, style in ((1.1, ":"), (0.85, "--"), (1.15, "-.")):
        ax.axvline(x, color="#999999", lw=0.8, ls=style)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"ratio (per block; bar: 90 % interval over {len(blocks)} blocks, red: median)")
    ax.set_title(f"{st.get('load')} through the router: paired within blocks", fontsize=10)
    m = blocks[-1]["moves"].get("model-router:b")
    if m and m.get("seconds"):
        secs = m["seconds"]
        for j, (lab, col) in enumerate((("client, from arrival", "black"), ("client, from start", "#7f7f7f"),
                                        ("router source", "#1f77b4"), ("server source", "#2ca02c")), start=1):
            pts = [(r[0], r[j]) for r in secs if r[j] is not None]
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=lab, color=col, lw=1.2)
        ax2.axhline(m["setpoint_s"] * 1000, color="#d62728", ls="--", lw=1, label="setpoint")
        ax2.axvline(0, color="#999999", lw=0.8)
        ax2.axvline(m["end"] - m["copy"][0], color="#999999", lw=0.8)
        ax2.set_yscale("log")
        ax2.set_xlabel("s from the copy's start")
        ax2.set_ylabel("mean latency per second, ms")
        ax2.set_title(f"block {blocks[-1]['block']}: model, router source, binding setpoint", fontsize=10)
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return [path]
