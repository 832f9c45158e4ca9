"""The two experiments: a node drained three ways (the shared budget split fair, smallest-first, and one move
at a time), and two moves off one source (the shared budget against two independent controllers)."""

from __future__ import annotations

import statistics
import threading
import time

from slacker.migration.protocol import Phase
from slacker.migration.options import MigrationOptions, MigrationRequest
from slacker.migration.remote import latency_move, start_migration
from slacker.rebalance.drain import DrainOptions, drain
from slacker.rebalance.planner import Settings

from .cluster import Fleet, node_latency, wait_until

DRAIN_VARIANTS = {  # name -> (split, max_parallel or None for the number of tenants drained)
    "serial": ("fair", 1),
    "fair": ("fair", None),
    "smallest": ("smallest", None),
}


class Sampler:
    """Once a second: the node's tenants' latency (those still on it) while something runs."""

    def __init__(self, fleet: Fleet, node: str, exclude: set[str] | None = None) -> None:
        self.fleet, self.node, self.exclude = fleet, node, exclude or set()
        self.samples: list[tuple[float, float | None, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Sampler":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(10)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(1.0):
            try:
                lat, tps = node_latency(self.fleet, self.node, self.exclude)
            except Exception:  # noqa: BLE001 - an agent busy for a second: a gap in the series
                continue
            self.samples.append((time.monotonic() - t0, lat, tps))

    def mean(self) -> float | None:
        """Transaction-weighted mean over the run."""
        rows = [(lat, tps) for _, lat, tps in self.samples if lat is not None and tps > 0]
        w = sum(t for _, t in rows)
        return sum(lat * t for lat, t in rows) / w if w else None


def baseline_latency(fleet: Fleet, node: str, seconds: int = 10, tolerance: float = 0.1,
                     timeout_s: float = 240) -> float:
    """The node's latency at rest: the median of its per-second latencies over a window of `seconds`, taken
    once it agrees within `tolerance` with the window before (the load has stopped settling). A mean over a
    window that caught the machine still busy (forty tenants just loaded) can be twice the node's latency at
    rest, and a setpoint derived from it never binds. At the timeout, the lowest window's median."""
    windows: list[float] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        with Sampler(fleet, node) as s:
            time.sleep(seconds)
        lats = [lat for _, lat, tps in s.samples if lat is not None and tps > 0]
        if not lats:
            continue
        windows.append(statistics.median(lats))
        if len(windows) >= 2 and abs(windows[-1] - windows[-2]) <= tolerance * windows[-2]:
            return windows[-1]
    return min(windows) if windows else 0.001


def drain_once(fleet: Fleet, node: str, variant: str, sla_s: float, drained: list[str], writers: dict,
               oltp: dict, max_parallel: int = 0) -> dict:
    split, cap = DRAIN_VARIANTS[variant]
    opts = DrainOptions(max_parallel=cap or max_parallel or len(drained), split=split, max_freeze_s=2.0, lock_ttl_s=10.0,
                        poll_s=0.5).validate()
    settings = Settings(sla_s=sla_s, setpoint_margin=0.25, samples=2).validate()
    before = {t: (len(w.acked), len(w.errors)) for t, w in writers.items()}
    before_oltp = {t: (len(x.acked), sum(x.errors.values())) for t, x in oltp.items()}
    t0 = time.monotonic()
    with Sampler(fleet, node) as s:
        res = drain(fleet.agents, fleet.directory, node, settings, opts)
    took = time.monotonic() - t0
    owners = fleet.owners()
    setpoints = [t.setpoint_s for t in res.tenants.values() if t.setpoint_s]
    sp = min(setpoints) if setpoints else sla_s
    mean = s.mean()
    return {"variant": variant, "outcome": res.outcome, "drain_s": round(took, 2),
            "moved": sum(1 for t in res.tenants.values() if t.state == "moved"),
            "left_on_node": sorted(t for t, n in owners.items() if n == node),
            "on_cordoned": sorted(t for t, n in owners.items() if n in set(fleet.directory.cordons())),
            "setpoint_s": sp, "latency_mean_s": mean, "latency_over_setpoint": None if mean is None else mean / sp,
            "failed_requests": sum(len(w.errors) - before[t][1] for t, w in writers.items()),
            "failed_request_errors": [e for t, w in writers.items() for e in w.errors[before[t][1]:]][:20],
            "oltp_errors": sum(sum(x.errors.values()) - before_oltp[t][1] for t, x in oltp.items()),
            "oltp_error_kinds": {k: v for x in oltp.values() for k, v in x.errors.items()},
            "durations_s": {t.tenant: t.duration_s for t in res.tenants.values()},
            "series": s.samples}


def move_back(fleet: Fleet, node: str, tenants: list[str]) -> None:
    """Every drained tenant back to `node`, unthrottled, all at once (the next drain starts from the same
    layout)."""
    fleet.directory.uncordon(node)
    owners = fleet.owners()
    docs = []
    for t in tenants:
        src = owners[t]
        if src == node:
            continue
        request = MigrationRequest.checked(t, MigrationOptions(target=node, max_freeze_s=2.0))
        docs.append((src, start_migration(fleet.agents[src], request)))
    for src, doc in docs:
        wait_until(lambda: not fleet.agents[src].request("GET", f"/v1/migrations/{doc['id']}")["active"], 1800, 1.0)
    left = [t for t, n in fleet.owners().items() if t in tenants and n != node]
    if left:
        raise RuntimeError(f"could not move {left} back to {node}")


PAIR_TIMEOUT_S = 300.0  # two ~500 MB copies at the plant's ~10 MB/s take about 100 s


def pair_once(fleet: Fleet, node: str, budget: str, setpoint_s: float, pair: list[str],
              targets: list[str]) -> dict:
    """Two moves off `node` at once to two targets, both latency-targeting at `setpoint_s`, sharing the
    node's budget ("fair") or each with its own controller ("own"); the node's latency (all its tenants,
    as the controller reads it) while both copy."""
    # Both started at once (a start with a controller of its own measures the latency for a few seconds
    # before it answers; one after the other, the first copy could be over before the second began).
    docs: list = [None, None]

    def start(i: int, t: str, tgt: str) -> None:
        request = latency_move(t, tgt, setpoint_s, max_rate_bytes_per_s=None, max_freeze_s=2.0, budget=budget)
        docs[i] = start_migration(fleet.agents[node], request)
    threads = [threading.Thread(target=start, args=(i, t, tgt)) for i, (t, tgt) in enumerate(zip(pair, targets))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    copying: list[tuple[float, float | None, float]] = []
    deadline, stalled = time.monotonic() + PAIR_TIMEOUT_S, False
    with Sampler(fleet, node) as s:  # every tenant on the node, the moving ones too: the per-server SLA
        while True:
            states = [fleet.agents[node].request("GET", f"/v1/migrations/{d['id']}") for d in docs]
            if all(not x["active"] for x in states):
                break
            if time.monotonic() > deadline and not stalled:
                # A setpoint the paused copies alone reach holds both at 0 for ever: recorded, not waited out.
                stalled = True
                for x in states:
                    if x["active"]:
                        fleet.agents[node].request("POST", f"/v1/migrations/{x['id']}/abort",
                                                   {"reason": f"bench: the pair ran over {PAIR_TIMEOUT_S:.0f}s"})
            both = all(x["active"] and x.get("phase") == "snapshot" for x in states)
            if both and s.samples:
                copying.append(s.samples[-1])
            time.sleep(1.0)
    rows = [(lat, tps) for _, lat, tps in dict((c[0], c) for c in copying).values() if lat is not None and tps > 0]
    w = sum(t for _, t in rows)
    mean = sum(lat * t for lat, t in rows) / w if w else None
    return {"budget": budget, "setpoint_s": setpoint_s, "seconds_both_copying": len(rows), "stalled": stalled,
            "latency_mean_s": mean, "latency_over_setpoint": None if mean is None else mean / setpoint_s,
            "results": [x.get("result") for x in states], "series": s.samples}


def median_spread(xs: list[float]) -> tuple[float | None, float | None, float | None]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, None
    return statistics.median(xs), min(xs), max(xs)


def _drain_cli(node: str, sla_s: float, max_parallel: int):
    import subprocess
    import sys

    from .cluster import ROOT
    return subprocess.Popen([sys.executable, "-m", "slacker", "node", "drain", node, "--sla", f"{sla_s * 1000:.1f}ms",
                             "--max-parallel", str(max_parallel), "--max-freeze", "2s", "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


BEFORE_HANDOVER = {Phase.PREFLIGHT, Phase.SNAPSHOT, Phase.PREPARE, Phase.DELTA}


def _outgoing(fleet: Fleet, node: str) -> set[str]:
    """The node's outgoing moves that have not reached their handover (preflight, copy, prepare, delta)."""
    try:
        doc = fleet.agents[node].request("GET", "/v1/migrations", timeout_s=5)
    except Exception as exc:  # noqa: BLE001 - the agent is down (it was killed): nothing seen this poll
        print(f"  ({node}'s migrations not read: {exc})", flush=True)
        return set()
    return {m["tenant"] for m in doc.get("migrations", [])
            if m.get("active") and m.get("direction") != "incoming"
            and m.get("phase") in BEFORE_HANDOVER}


def interrupted_once(fleet: Fleet, node: str, sla_s: float, drained: list[str], writers: dict, oltp: dict,
                     max_parallel: int) -> dict:
    """`slacker node drain` as an operator runs it, interrupted twice: SIGINT of the CLI while its moves
    copy, then SIGKILL of the source's agent while the re-run's moves copy (the agent started again with
    `cluster up --dir`), then run until it exits 0. Each tenant must have moved exactly once: its owner
    epoch one higher than before, on a node that is not cordoned."""
    import signal

    epochs = {o.tenant: o.epoch for o in fleet.directory.list() if o.tenant in drained}
    before = {t: len(w.errors) for t, w in writers.items()}
    before_oltp = {t: sum(x.errors.values()) for t, x in oltp.items()}
    runs, events = [], []
    t0 = time.monotonic()

    def moving(run) -> set[str]:
        """Wait until one of the node's moves runs (or the run has exited: then nothing). One, not two:
        copies join a node's budget one at a time, and a short one may end before the next joins."""
        def seen():
            s = _outgoing(fleet, node)
            return s or ({"-"} if run.poll() is not None else None)
        return wait_until(seen, 600, 0.5) - {"-"}

    with Sampler(fleet, node) as s:
        p = _drain_cli(node, sla_s, max_parallel)
        first = moving(p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        runs.append({"rc": p.returncode, "stderr_tail": err.strip().splitlines()[-2:]})
        events.append((round(time.monotonic() - t0, 1), f"SIGINT of the CLI while {sorted(first)} were moving"))
        p = _drain_cli(node, sla_s, max_parallel)
        now = moving(p)
        if now:
            fleet.kill_agent(node)
            events.append((round(time.monotonic() - t0, 1), f"SIGKILL of {node}'s agent while {sorted(now)} were moving"))
            time.sleep(3)
            fleet.restart()
            events.append((round(time.monotonic() - t0, 1), f"{node}'s agent started again (cluster up --dir)"))
        else:
            events.append((round(time.monotonic() - t0, 1), "the re-run finished before a copy could be killed"))
        for attempt in range(4):
            out, err = p.communicate(timeout=3600)
            runs.append({"rc": p.returncode, "stderr_tail": err.strip().splitlines()[-2:]})
            if p.returncode == 0:
                break
            events.append((round(time.monotonic() - t0, 1), f"run exited {p.returncode}: run again"))
            p = _drain_cli(node, sla_s, max_parallel)
    took = time.monotonic() - t0
    owners = {o.tenant: o for o in fleet.directory.list() if o.tenant in drained}
    cordoned = set(fleet.directory.cordons())
    return {"variant": "interrupted", "drain_s": round(took, 2), "runs": runs, "events": events,
            "outcome": "drained" if runs[-1]["rc"] == 0 else f"exit {runs[-1]['rc']}",
            "epoch_steps": {t: owners[t].epoch - epochs[t] for t in drained},
            "moved_once": all(owners[t].epoch - epochs[t] == 1 for t in drained),
            "left_on_node": sorted(t for t in drained if owners[t].node == node),
            "on_cordoned": sorted(t for t in drained if owners[t].node in cordoned),
            "failed_requests": sum(len(w.errors) - before[t] for t, w in writers.items()),
            "failed_request_errors": [e for t, w in writers.items() for e in w.errors[before[t]:]][:20],
            "oltp_errors": sum(sum(x.errors.values()) - before_oltp[t] for t, x in oltp.items()),
            "series": s.samples}


def settle(fleet: Fleet, node: str, base_s: float, factor: float = 1.25, hold_s: int = 5,
           timeout_s: float = 180) -> float:
    """Wait until `node`'s latency has been within `factor` × its baseline for `hold_s` samples in a row:
    a drain that starts while the tenants just moved back warm their buffer pools would be charged their
    cold start. Returns the seconds waited (the timeout's, if it never settled: said in the data)."""
    t0, ok = time.monotonic(), 0
    while ok < hold_s and time.monotonic() - t0 < timeout_s:
        try:
            lat, _ = node_latency(fleet, node)
        except Exception:  # noqa: BLE001 - a busy agent: not settled yet
            lat = None
        ok = ok + 1 if lat is not None and lat <= factor * base_s else 0
        time.sleep(1.0)
    return round(time.monotonic() - t0, 1)
