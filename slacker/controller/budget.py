"""One latency budget per server: a single controller of the node's latency whose rate is split among
the node's concurrent outgoing copies (`slacker node drain`, a parallel rebalancer pass).

Two copies off one source, each with its own controller, each see the other's cost as their own and
fight over the same latency. Here the first latency-targeting move off a node builds the node's
RatePolicy (the same source, guard and baseline check a lone migration gets); later moves join it as
members. The controller steps once per step with the node's bytes (every member's, and those of
members that left), and its rate is split among the members copying now: `fair` (equal shares) or
`smallest` (the copy with the fewest bytes left gets the most, so moves finish, and free their slot,
sooner). A migration alone on its node gets exactly the rate its controller gives: it behaves as a
migration always did. `own` (a controller per migration, blind to the node's other copies) is a benchmark baseline.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from ..errors import InvalidInput
from ..latency import LatencySample, LatencySource
from .memory import RateMemory, held_rate
from .report import StepReport

if TYPE_CHECKING:  # only named in annotations: the loop (and Prometheus) load when a budget first runs one
    from .loop import RatePolicy

SPLITS = ("fair", "smallest")
BUDGETS = SPLITS + ("own",)  # "own": an independent controller per migration (bench baseline only)
DEFAULT_BUDGET = "fair"
# smallest-first: the other copies keep this fraction of the node's rate between them, so a paused copy's
# backup does not stall for the whole of a larger copy (and keeps its transfer's liveness).
SMALLEST_OTHERS_FRACTION = 0.2
# A member that has not stepped for this many steps is not copying (it is in prepare, delta, handover).
IDLE_AFTER_STEPS = 2.5
# The node's flow (bytes its copies moved per second) is read over this many seconds of its steps, against the
# least rate set over the same seconds: whether the copies use the rate they are given (GET /v1/budget).
FLOW_WINDOW_S = 3.0


def check_budget(name: str) -> str:
    if name not in BUDGETS:
        raise InvalidInput(f"unknown budget {name!r}", f"the budgets are {', '.join(SPLITS)}",
                           "for example --split fair")
    return name


def split_rate(rate: float | None, remaining: dict[str, int], how: str) -> dict[str, int | None]:
    """The node's `rate` split among the copies running now (`remaining`: bytes each has left).
    None (unthrottled) stays None for every copy; the shares add up to the rate."""
    if not remaining:
        return {}
    if rate is None:
        return {k: None for k in remaining}
    n = len(remaining)
    if n == 1 or how == "fair":
        return {k: int(rate / n) for k in remaining}
    first = min(remaining, key=lambda k: (remaining[k], k))
    others = rate * SMALLEST_OTHERS_FRACTION / (n - 1)
    return {k: int(rate - others * (n - 1)) if k == first else int(others) for k in remaining}


class TargetGuards(LatencySource):
    """The target guards of the node's members, read as one: the worst target (the highest latency) is
    the one the node's controller sees; any target that cannot be read fails the read. With one member
    it is that member's guard, unchanged."""

    def __init__(self) -> None:
        self._guards: dict[str, LatencySource] = {}
        self._lock = threading.Lock()
        self.name = "targets"

    def add(self, key: str, guard: LatencySource) -> None:
        with self._lock:
            self._guards[key] = guard

    def remove(self, key: str) -> None:
        with self._lock:
            g = self._guards.pop(key, None)
        if g is not None:
            g.close()

    def read(self) -> LatencySample:
        with self._lock:
            guards = list(self._guards.values())
        if len(guards) == 1:
            return guards[0].read()
        samples = [g.read() for g in guards]
        bad = [s for s in samples if not s.ok]
        if bad or not samples:
            return bad[0] if bad else LatencySample.failed(self.name, 0.0, "no target")
        with_lat = [s for s in samples if s.latency_s is not None]
        return max(with_lat, key=lambda s: s.latency_s) if with_lat else samples[0]

    def close(self) -> None:
        with self._lock:
            guards, self._guards = list(self._guards.values()), {}
        for g in guards:
            g.close()


@dataclass
class Member:
    key: str           # the migration's id (its tenant's until the id is known)
    tenant: str
    target: str
    setpoint_s: float
    bytes_done: int = 0
    bytes_total: int | None = None
    mark: str | None = None
    seen: float | None = None  # monotonic time of its last step (it is copying while it steps)
    paused: bool = False
    share: int | None = 0


class NodeBudget:
    """The node's one controller for its outgoing copies, and its members. Thread-safe: every member's
    telemetry thread steps it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._join_lock = threading.Lock()  # one join at a time: the first builds (and measures), the rest join
        self.policy: RatePolicy | None = None  # the node's controller while it has members
        self.key: tuple = ()                # what a member must share to join (kind, sources, max rate, ...)
        self.guards: TargetGuards | None = None
        self.members: dict[str, Member] = {}
        self.split = DEFAULT_BUDGET
        self.retired_bytes = 0
        self.retired_total = 0
        self.last_step: float | None = None
        self.rate: int | None = None
        self.report: StepReport | None = None
        self.step_s = 1.0
        self._steps: deque[tuple[float, int, int | None]] = deque(maxlen=16)  # (when, node's bytes, rate set then)
        # What the node's controlled copies held, and where the next starts (slacker.controller.memory); the
        # migration service gives it its file.
        self.memory = RateMemory(None)
        self.seeded: dict | None = None  # the memory's entry the node's controller started from
        self._copy_steps: list[tuple[float, float | None, bool]] = []  # (flow bytes/s, latency s, marked)

    # ---- membership ---------------------------------------------------------------------
    def join(self, tenant: str, target: str, settings, build: Callable[[TargetGuards], RatePolicy],
             guard: Callable[[], LatencySource] | None, split: str, metrics=None) -> "Share | None":
        """Join the node's budget (building its controller if it has none): `build(guards)` makes the
        RatePolicy a lone migration would get, its target guard read through `guards`; `guard()` makes a
        later member's target guard. None: the node's budget runs other settings (another controller kind,
        latency source or max rate); the caller gives this move a controller of its own."""
        key = (settings.kind, settings.max_rate_bytes_per_s, tuple(settings.latency_sources), settings.window_s,
               settings.step_s, settings.target_guard)
        with self._join_lock:
            with self._lock:
                joined = self.policy is not None
                if joined and key != self.key:
                    return None  # other controller settings: this move runs on a controller of its own
            if not joined:
                guards = TargetGuards()
                policy = build(guards)  # measures the latency before any byte moves; raises on a bad setpoint
                policy.metrics = None   # each member reports its own share
                seeded = self._seed(policy)
                with self._lock:
                    self.policy, self.key, self.guards = policy, key, guards
                    self.retired_bytes = self.retired_total = 0
                    self.last_step, self.rate, self.report = None, None, None
                    self.step_s = settings.step_s
                    self._steps.clear()
                    self._copy_steps = []
                    self.seeded = seeded
            elif guard is not None:
                self.guards.add(tenant, guard())
            with self._lock:
                self.split = split
                # The load's latency the node's controller measured before its first copy: a move with a headroom
                # (a drain's, the rebalancer's) steers at least that far over it (ControllerSettings.setpoint_over).
                member = Member(tenant, tenant, target, settings.setpoint_over(self.policy.baseline_latency_s)[0])
                self.members[tenant] = member
                self._set_setpoint()
                return Share(self, member, metrics)

    def _seed(self, policy: RatePolicy) -> dict | None:
        """Start the node's new controller where its memory says comparable copies held (a model controller
        with no start rate given); the entry used, or None (a first move: the controller's own safe start)."""
        ctl = policy.controller
        if policy.kind != "model":
            return None
        entry = self.memory.lookup(ctl.setpoint_s, policy.baseline_latency_s)
        if entry is None:
            return None
        ctl.seed_rate(min(entry["rate_bytes_per_s"], ctl.max_rate_bytes_per_s))
        if isinstance(policy.latency_source, dict):
            policy.latency_source["seeded"] = {k: entry[k] for k in ("rate_bytes_per_s", "setpoint_s",
                                                                     "load_latency_s", "at", "migration")}
        return entry

    def _remember(self, policy: RatePolicy, migration: str, steps: list) -> None:
        """The node's controlled copies have all ended (their `steps`): what they held seeds the next (RateMemory).
        A memory that cannot be written seeds nothing; the copy's outcome is not touched."""
        held = held_rate(steps, policy.controller.setpoint_s)
        if held is None:
            return
        try:
            self.memory.record(kind=policy.kind, setpoint_s=policy.controller.setpoint_s,
                               load_latency_s=policy.baseline_latency_s, rate_bytes_per_s=held[0],
                               mean_latency_s=held[1], seconds=len(steps), migration=migration)
        except OSError:
            pass

    def _set_setpoint(self) -> None:
        """The node's setpoint: the strictest of its members'."""
        if self.policy is not None and self.members:
            sp = min(member.setpoint_s for member in self.members.values())
            if sp != self.policy.controller.setpoint_s:
                self.policy.controller.set_setpoint(sp)

    def set_member_setpoint(self, member: Member, setpoint_s: float) -> None:
        """A member's own setpoint changed (`slacker migrate --set`): the node's is the strictest again."""
        with self._lock:
            member.setpoint_s = float(setpoint_s)
            self._set_setpoint()

    def pause_member(self, member: Member, paused: bool) -> None:
        """Pause or resume one member's copy; the others share the node's rate meanwhile."""
        with self._lock:
            member.paused = paused

    def leave(self, member: Member) -> None:
        with self._lock:
            if self.members.get(member.key) is not member:
                return
            del self.members[member.key]
            self.retired_bytes += member.bytes_done
            self.retired_total += member.bytes_total or member.bytes_done
            policy, guards, steps = self.policy, self.guards, []
            if self.members:
                self._set_setpoint()
                policy = None
            else:
                self.policy, self.guards, self.report, self.rate, self.last_step = None, None, None, None, None
                self._steps.clear()
                steps, self._copy_steps = self._copy_steps, []
        if policy is not None:
            self._remember(policy, member.key, steps)
            policy.close()  # the node's latency source, and every guard with it
        elif guards is not None:
            guards.remove(member.tenant)

    def rekey(self, member: Member, key: str) -> None:
        with self._lock:
            if self.members.get(member.key) is member:
                del self.members[member.key]
                member.key = key
                self.members[key] = member

    # ---- stepping -----------------------------------------------------------------------
    def _copying(self, now: float) -> dict[str, Member]:
        idle = IDLE_AFTER_STEPS * self.step_s
        return {k: member for k, member in self.members.items()
                if member.seen is not None and now - member.seen <= idle and not member.paused}

    def _shares(self, now: float) -> None:
        copying = self._copying(now)
        remaining = {k: max(0, (member.bytes_total or member.bytes_done) - member.bytes_done) for k, member in copying.items()}
        shares = split_rate(self.rate, remaining, self.split)
        for k, member in self.members.items():
            member.share = 0 if k not in shares else shares[k]

    def step(self, member: Member, now: float, bytes_done: int, mark: str | None, bytes_total: float | None):
        with self._lock:
            member.bytes_done, member.mark, member.seen = int(bytes_done), mark, now
            member.bytes_total = None if bytes_total is None else int(bytes_total)
            policy = self.policy
            due = self.last_step is None or now - self.last_step >= 0.5 * self.step_s
            if due:
                copying = self._copying(now)
                done = self.retired_bytes + sum(x.bytes_done for x in self.members.values())
                total = self.retired_total + sum((x.bytes_total or x.bytes_done) for x in self.members.values())
                marks = [x.mark for x in copying.values() if x.mark]
                self.rate, self.report = policy.step(now, done, mark=marks[0] if marks else None,
                                                     bytes_total=total)
                if self._steps and now > self._steps[-1][0] and copying:
                    flow = max(0, done - self._steps[-1][1]) / (now - self._steps[-1][0])
                    held = bool(marks) or any(x.paused for x in self.members.values())
                    self._copy_steps.append((flow, self.report.latency_s, held))
                self.last_step = now
                self._steps.append((now, done, self.rate))
            self._shares(now)
            share = 0 if member.paused else member.share
            report = self.report
            n = len(self._copying(now))
            if len(self.members) > 1:
                note = (f"node budget ({self.split}): {n} cop{'y' if n == 1 else 'ies'}, this one "
                        + ("unthrottled" if share is None else f"{share / 1e6:.1f} of "
                           f"{(self.rate or 0) / 1e6:.1f} MB/s"))
                report = replace(report, rate_bytes_per_s=share, bytes_done=member.bytes_done).with_note(note)
            elif member.paused:
                report = replace(report, rate_bytes_per_s=0).with_note("paused")
            return share, report

    def initial_share(self, member: Member) -> int | None:
        """The rate a member's copy starts at: a lone member the controller's initial rate, one joining
        copies already running an even part of the node's rate."""
        with self._lock:
            if member.paused:
                return 0
            others = [x for x in self._copying(time.monotonic()).values() if x is not member]
            if not others:
                return self.policy.initial_rate()
            return None if self.rate is None else int(self.rate / (len(others) + 1))

    def _flow(self) -> tuple[float | None, int | None]:
        """(bytes/s the node's copies moved over the last FLOW_WINDOW_S of steps, the least rate in force over
        those seconds): (None, None) before two steps span a second; a least rate of None: unthrottled in one
        of them (nothing held the copies back)."""
        if len(self._steps) < 2:
            return None, None
        newest = self._steps[-1][0]
        window = [s for s in self._steps if newest - s[0] <= FLOW_WINDOW_S + 0.25 * self.step_s]
        if len(window) < 2 or window[-1][0] - window[0][0] < 0.9 * self.step_s:
            return None, None
        flow = max(0, window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
        in_force = [s[2] for s in window[:-1]]  # a rate set at one step is in force until the next
        return flow, (None if any(r is None for r in in_force) else min(in_force))

    def status(self, now: float | None = None) -> dict:
        """GET /v1/budget: the node's controller and its members, for `node drain` and the benchmarks."""
        with self._lock:
            now = time.monotonic() if now is None else now
            copying = self._copying(now)
            r = self.report
            flow, held = self._flow()
            return {"active": self.policy is not None, "split": self.split,
                    # where the node's controller started (its memory's entry, or None: the safe start) and the memory
                    "seeded": self.seeded if self.policy is not None else None, "memory": self.memory.status(),
                    "rate_bytes_per_s": self.rate, "setpoint_s": None if r is None else r.setpoint_s,
                    # what the copies moved over the last seconds, and the least rate they were held to meanwhile
                    "flow_bytes_per_s": None if flow is None else int(flow), "held_bytes_per_s": held,
                    "latency_s": None if r is None else r.latency_s,
                    # the load's own latency: measured before the node's first copy, and as the model controller's
                    # fit of the copies' seconds puts it (the latency at no copy rate)
                    "load_latency_s": None if self.policy is None else self.policy.baseline_latency_s,
                    "model_load_latency_s": None if r is None else (r.controller or {}).get("model_load_latency_s"),
                    "fraction": None if r is None else r.fraction,
                    "copying": len(copying),
                    "members": [{"migration": member.key, "tenant": member.tenant, "target": member.target,
                                 "copying": k in copying, "paused": member.paused,
                                 "share_bytes_per_s": member.share if k in copying else 0,
                                 "bytes_done": member.bytes_done, "bytes_total": member.bytes_total}
                                for k, member in sorted(self.members.items())]}


class Share:
    """A member's view of its node's budget, in the place of a RatePolicy (both are a `CopyRate`): what the
    migration's telemetry steps, the verification paces by and `slacker migrate --set` changes."""

    def __init__(self, budget: NodeBudget, member: Member, metrics=None) -> None:
        self.budget, self.member, self.metrics = budget, member, metrics
        self._migration = ""
        policy = budget.policy  # the node's, built by the first member to join
        self.kind = policy.kind if policy is not None else ""
        self.baseline_latency_s = policy.baseline_latency_s if policy is not None else None
        self.baseline_idle = policy.baseline_idle if policy is not None else False
        self.latency_source = policy.latency_source if policy is not None else None
        self.closed = False

    @property
    def migration(self) -> str:
        return self._migration

    @migration.setter
    def migration(self, mid: str) -> None:
        self._migration = mid
        if mid:
            self.budget.rekey(self.member, mid)

    @property
    def tenant(self) -> str:
        return self.member.tenant

    @property
    def controller(self):
        return self.budget.policy.controller

    @property
    def source(self):
        return self.budget.policy.source

    @property
    def last(self):
        return self.budget.policy.last

    @property
    def unthrottled_at_max(self) -> bool:
        return self.budget.policy.unthrottled_at_max

    @unthrottled_at_max.setter
    def unthrottled_at_max(self, value: bool) -> None:
        self.budget.policy.unthrottled_at_max = value

    def initial_rate(self) -> int | None:
        return self.budget.initial_share(self.member)

    def step(self, now: float, bytes_done: int, mark: str | None = None,
             bytes_total: float | None = None) -> tuple[int | None, StepReport]:
        rate, report = self.budget.step(self.member, now, bytes_done, mark, bytes_total)
        if self.metrics is not None:
            self.metrics.update(report, self.migration, self.tenant)
        return rate, report

    # `slacker migrate --set` on one member: its own setpoint (the node takes the strictest), pause, resume
    # (this move only: the node's other copies share the rate).
    def set_setpoint(self, setpoint_s: float) -> None:
        self.budget.set_member_setpoint(self.member, setpoint_s)

    def pause(self, paused: bool) -> None:
        self.budget.pause_member(self.member, paused)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.metrics is not None:
            self.metrics.remove(self.migration, self.tenant)
        self.budget.leave(self.member)
