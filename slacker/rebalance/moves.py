"""Moves in flight: the one place that starts live migrations for the fleet commands and follows them.

A drain or a rebalancer pass asks it whether a move may start now (`may_start`), starts it, adopts
migrations an earlier run left running on the agents, and polls them all in one loop. How many run at
once follows from the source's latency budget (slacker.controller.budget, read from the agent's
GET /v1/budget): copies join a node's budget one at a time, the next only once the node's controller
has seen the ones already started for ADMIT_AFTER_S, and only while the node's latency leaves room
for another: its controller is at its maximum (the latency does not hold the copies back), or its
copies take under half of the room between the load's own latency and the setpoint. A copy joining
copies that the latency already holds back gets no more rate for the node -- the shares split the
same rate -- and adds what it costs the source whatever its rate. Each copy must still get
`min_share_bytes_per_s` of the node's rate; `--max-parallel` caps the count, and a target node
receives one copy at a time (its incoming budget: the copy's target guard is the one controller of
its latency).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..errors import AgentUnavailable, NotFound, SlackerError
from ..controller.model import START_RATE_BYTES_PER_S
from ..latency import DEFAULT_WINDOW_S
from ..migration.protocol import Phase
from ..migration.options import MigrationRequest
from ..migration.remote import start_migration

log = logging.getLogger("slacker.rebalance")

# One more copy off a node starts only while every copy would still get this much of the node's rate.
MIN_SHARE_BYTES_PER_S = 1_000_000
# A copy costs its source something the controller cannot pause (the backup tool polls the redo log for
# the whole copy), and the budget's rate only says what the copies already running leave once the
# controller has read the latency with them: two of its latency windows. Copies started together before
# that had put seven paused copies on a 0.5-core node, whose cost alone held it over its setpoint: no rate
# was left to finish any of them (bench/run fleet --cpu-per-node 0.5).
ADMIT_AFTER_S = 2 * DEFAULT_WINDOW_S
# A copy that ends within ADMIT_AFTER_S at the share of the node's rate it would get is gone before the controller
# could measure it, so the next copy does not wait for its measure (a drain of many small tenants would otherwise run
# them one after another whatever --max-parallel says); the latency's room still decides. The share is the node's
# rate over its copies, that one counted (the rate a first copy starts at when none runs), never taken under
# MIN_SHARE_BYTES_PER_S: this many bytes, where the node's copies are held to nothing.
SMALL_COPY_BYTES = MIN_SHARE_BYTES_PER_S * ADMIT_AFTER_S
# Copies whose cost takes under this share of the room between the load's own latency and the setpoint leave
# room for another: the model controller's own test for "no knee in sight" (ModelController.FREE), under which
# it rises freely.
FREE_ROOM_SHARE = 0.5
# Phases of a move whose copy has not ended: it is, or is about to be, one of the source budget's copies.
NOT_COPIED = (Phase.PENDING, Phase.PREFLIGHT, Phase.SNAPSHOT)
# A node whose budget has given none of its copies a byte for this long cannot finish any of them as
# they are: what they cost paused holds its latency over the setpoint. The controller's own verdict
# ("cannot finish") reads the same window (slacker.controller.loop.Feasibility).
SHED_AFTER_S = 30.0
LOST_AFTER_S = 120.0  # a source agent that has not answered for this long: the move's outcome is read elsewhere
# Each move in flight is watched by one long poll (GET /v1/migrations/ID?wait=), so the loop that follows the moves
# learns of an end as it happens, not at its next look: a drain's next small move to the same target starts then.
WATCH_WAIT_S = 5.0
WATCH_MIN_GAP_S = 0.05  # an agent that answers at once (it does not long-poll) is asked this often at most


@dataclass
class Running:
    tenant: str
    source: str
    target: str
    mid: str
    doc: dict
    started_at: float = field(default_factory=time.monotonic)
    data_bytes: int = 0  # the tenant's size as the plan knew it (0: not known)
    small: bool = False  # it was too small to be measured when it started (MoveRunner.is_small)
    adopted: bool = False                # started by an earlier run, followed by this one
    unreachable_since: float | None = None
    lost: str = ""                       # the source agent forgot it (restarted) or stopped answering
    shed: bool = False                   # stopped by the runner to let the source's other copies finish

    @property
    def active(self) -> bool:
        return bool(self.doc.get("active")) and not self.lost


class MoveRunner:
    def __init__(self, agents: dict, max_parallel: int = 2, min_share_bytes_per_s: float = MIN_SHARE_BYTES_PER_S,
                 budget: bool = True) -> None:
        self.agents = agents
        self.max_parallel = max_parallel
        self.min_share_bytes_per_s = min_share_bytes_per_s
        self.budget = budget  # False: the count alone (moves with controllers of their own, the bench baseline)
        self.running: dict[str, Running] = {}
        self._budgets: dict[str, tuple[float, dict | None]] = {}
        self.why_not = ""  # why the last may_start() said no
        self.cap: dict[str, int] = {}  # source -> copies at once, lowered each time it had to shed one
        self._stalled_since: dict[str, float] = {}
        self._ended = threading.Event()  # set by a move's watcher when its move ended (or could not be read)

    def _watch(self, r: Running) -> None:
        """Long-poll the move until it ends, then wake whoever waits in wait_end()."""
        path = f"/v1/migrations/{r.mid}"
        try:
            while self.running.get(r.tenant) is r:
                t0 = time.monotonic()
                doc = self.agents[r.source].request("GET", path, query={"wait": WATCH_WAIT_S},
                                                    timeout_s=WATCH_WAIT_S + 10)
                if not doc.get("active"):
                    break
                time.sleep(max(0.0, WATCH_MIN_GAP_S - (time.monotonic() - t0)))
        except Exception:  # noqa: BLE001 - poll() reads the move and says what went wrong; the watch just ends
            pass
        self._ended.set()

    def _follow(self, r: Running) -> Running:
        self.running[r.tenant] = r
        threading.Thread(target=self._watch, args=(r,), daemon=True, name=f"watch-{r.mid}").start()
        return r

    def wait_end(self, timeout_s: float) -> bool:
        """Sleep until a move in flight ends or `timeout_s` passes; True if one ended."""
        got = self._ended.wait(timeout_s)
        self._ended.clear()
        return got

    def budget_of(self, node: str) -> dict | None:
        """The node's budget (GET /v1/budget), read at most once a second; None if it does not answer."""
        at, doc = self._budgets.get(node, (0.0, None))
        if time.monotonic() - at >= 1.0:
            try:
                doc = self.agents[node].request("GET", "/v1/budget", timeout_s=5)
            except SlackerError:
                doc = None
            self._budgets[node] = (time.monotonic(), doc)
        return doc

    def is_small(self, source: str, data_bytes: int, pending: int = 0) -> bool:
        """Whether a copy of `data_bytes` off `source` (`pending` more starting with it) would end before the
        node's controller could measure it: within ADMIT_AFTER_S at its share of the node's rate."""
        if not data_bytes or data_bytes <= 0:
            return False  # not known: it waits its turn
        doc = self.budget_of(source) if self.budget else None
        copying = int((doc or {}).get("copying") or 0) if (doc or {}).get("active") else 0
        rate = (doc or {}).get("rate_bytes_per_s") if copying else None
        rate = START_RATE_BYTES_PER_S if rate is None else float(rate)
        share = max(self.min_share_bytes_per_s, rate / (copying + 1 + pending))
        return data_bytes <= max(SMALL_COPY_BYTES, share * ADMIT_AFTER_S)

    def may_start(self, source: str, target: str, pending: int = 0, pending_targets: tuple = (),
                  small: bool = False) -> bool:
        """Whether one more move from `source` to `target` ('' for any) may start now, `pending` more
        (to `pending_targets`) being about to. `small`: this copy and every pending one are too small to be
        measured (is_small: none waits for another's measure)."""
        if len(self.running) + pending >= self.max_parallel:
            self.why_not = f"--max-parallel {self.max_parallel} moves run"
            return False
        if target and (target in pending_targets or any(r.target == target for r in self.running.values())):
            self.why_not = f"{target} already receives a copy"
            return False
        if self.budget:
            unmeasured = [r for r in self.running.values() if r.source == source and r.active and not r.small
                          and r.doc.get("phase", Phase.PENDING) in NOT_COPIED]
            if source in self.cap and len(unmeasured) + pending >= self.cap[source]:
                self.why_not = (f"{source}'s budget held {self.cap[source] + 1} copies at 0 B/s: "
                                f"at most {self.cap[source]} at once now")
                return False
            if pending and not small:
                self.why_not = f"{source}'s budget takes one new copy at a time"
                return False
            if unmeasured and time.monotonic() - max(r.started_at for r in unmeasured) < ADMIT_AFTER_S:
                self.why_not = f"{source}'s budget has not yet measured its newest copy"
                return False
            doc = self.budget_of(source)
            if small and doc and doc.get("latency_s") is None:
                pass  # its controller has not read the latency with its copies yet: a small copy cannot wait for it
            elif doc and doc.get("active") and doc.get("copying"):
                rate = doc.get("rate_bytes_per_s")
                n = int(doc["copying"]) + 1 + pending
                spent = self._latency_spent(doc)
                if spent:
                    self.why_not = f"{source}'s latency budget is spent: {spent}"
                    return False
                if rate is not None and rate / n < self.min_share_bytes_per_s:
                    self.why_not = (f"{source}'s budget ({rate / 1e6:.1f} MB/s over {n - 1} copies) has no room "
                                    f"for another copy of {self.min_share_bytes_per_s / 1e6:.1f} MB/s")
                    return False
        self.why_not = ""
        return True

    @staticmethod
    def _latency_spent(doc: dict) -> str:
        """Why another copy would gain the node nothing ('' if it may): the node's controller holds its copies
        under its maximum for the latency, their cost taking half or more of the room between the load's own
        latency and the setpoint. The load's own latency is the lower of the one measured before the first copy
        and the model's fit of the copies' seconds (a figure measured while the machine was busy reads high, and
        would show room that is not there). Copies that the latency holds back and that leave rate unused are
        no exception: what holds the latency up then is not the rate, and another copy only adds its cost."""
        rate, fraction = doc.get("rate_bytes_per_s"), doc.get("fraction")
        if rate is None or (fraction is not None and fraction >= 1.0):
            return ""  # unthrottled, or a --max-rate cap binds: not the latency
        latency, setpoint = doc.get("latency_s"), doc.get("setpoint_s")
        copies = int(doc.get("copying") or 0)
        if latency is None or not setpoint:
            return f"the node's controller has not read the latency with its {copies} cop{'y' if copies == 1 else 'ies'} yet"
        loads = [x for x in (doc.get("load_latency_s"), doc.get("model_load_latency_s"))
                 if x is not None and 0 <= x < setpoint]
        base = min(loads) if loads else 0.0
        used = max(0.0, latency - base) / (setpoint - base)
        if used < FREE_ROOM_SHARE:
            return ""
        return (f"{copies} {'copy takes' if copies == 1 else 'copies take'} {used:.0%} of the room between the load's latency "
                f"and the setpoint ({latency * 1000:.1f} ms, {base * 1000:.1f} to {setpoint * 1000:.1f} ms); another "
                "would only split the node's rate and add its own cost")

    def shed_one(self, source: str, now: float | None = None) -> Running | None:
        """If `source`'s budget has held all its copies (two or more) below the least share for
        SHED_AFTER_S, abort the newest copy, mark it shed (its tenant waits its turn again, not counted
        as a failed attempt) and lower the source's cap on copies at once. Returns the move shed."""
        if not self.budget:
            return None
        now = time.monotonic() if now is None else now
        doc = self.budget_of(source)
        copying = int((doc or {}).get("copying") or 0)
        rate = (doc or {}).get("rate_bytes_per_s")
        if not (doc and doc.get("active") and copying >= 2 and rate is not None
                and rate / copying < self.min_share_bytes_per_s):
            self._stalled_since.pop(source, None)
            return None
        since = self._stalled_since.setdefault(source, now)
        if now - since < SHED_AFTER_S:
            return None
        copies = [r for r in self.running.values() if r.source == source and r.active and not r.shed
                  and r.doc.get("phase") == Phase.SNAPSHOT]
        if len(copies) < 2:
            return None
        victim = max(copies, key=lambda r: r.started_at)
        try:
            self.agents[source].request("POST", f"/v1/migrations/{victim.mid}/abort",
                                        {"reason": f"{source}'s copies held at 0 B/s for {SHED_AFTER_S:.0f}s: "
                                                   "stopped so the others can finish; it starts again later"})
        except SlackerError as exc:
            log.warning("shedding migration %s: %s", victim.mid, exc.one_line())
            return None
        victim.shed = True
        self.cap[source] = max(1, copying - 1)
        self._stalled_since.pop(source, None)
        return victim

    def start(self, tenant: str, source: str, target: str, request: MigrationRequest, data_bytes: int = 0,
              small: bool | None = None) -> Running:
        """Start one move; `small` as is_small() said when it was admitted (None: asked now)."""
        if small is None:
            small = self.is_small(source, data_bytes)
        doc = start_migration(self.agents[source], request)
        return self._follow(Running(tenant, source, target, doc["id"], doc, data_bytes=data_bytes, small=small))

    def start_all(self, moves: list[tuple]) -> dict[str, Running | SlackerError]:
        """Start several moves at once (tenant, source, target, request[, the tenant's size[, small]]): a start may
        measure the source's latency for a few seconds before it answers, and moves started one after another
        would lose that time each. Returns tenant -> its Running, or the error that refused it."""
        out: dict[str, Running | SlackerError] = {}

        def one(tenant: str, source: str, target: str, request: MigrationRequest, data_bytes: int = 0,
                small: bool | None = None) -> None:
            try:
                out[tenant] = self.start(tenant, source, target, request, data_bytes, small)
            except SlackerError as exc:
                out[tenant] = exc

        threads = [threading.Thread(target=one, args=m, daemon=True, name=f"start-{m[0]}") for m in moves]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def adopt(self, source: str, doc: dict) -> Running:
        return self._follow(Running(str(doc["tenant"]), source, str(doc.get("target")), str(doc["id"]), doc,
                                    adopted=True))

    def poll(self) -> list[Running]:
        """Read every running move's document; the ones that ended leave the runner and are returned."""
        ended = []
        for r in list(self.running.values()):
            try:
                r.doc = self.agents[r.source].request("GET", f"/v1/migrations/{r.mid}", timeout_s=10)
                r.unreachable_since = None
            except NotFound:
                r.lost = f"{r.source}'s agent no longer knows migration {r.mid} (it restarted)"
            except AgentUnavailable as exc:
                # An agent restarting: keep following; only a long silence ends the watch.
                now = time.monotonic()
                r.unreachable_since = r.unreachable_since or now
                if now - r.unreachable_since > LOST_AFTER_S:
                    r.lost = f"{r.source}'s agent has not answered for {LOST_AFTER_S:.0f}s: {exc.one_line()}"
            except SlackerError as exc:
                log.warning("following migration %s: %s", r.mid, exc.one_line())
            if not r.active:
                ended.append(self.running.pop(r.tenant))
        return ended
