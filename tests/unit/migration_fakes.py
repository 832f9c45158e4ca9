"""Fake peers for the migration protocol's unit tests: a source server, a target agent and a directory
in memory, with faults that fire once at a named step. The phase machine, the handover, the flip and
the journal under test are the real ones; only what they talk to is fake.

Every request a role makes is also a moment at which clients write: the fake source commits one
transaction whenever it is writable, so a commit after the final position, or two writable servers
at once, shows up in `World.violations`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from slacker.directory import Ownership
from slacker.errors import AgentUnavailable, CatchUpTimeout, Conflict, LockNotGranted, SlackerError, TenantError
from slacker.migration.journal import Journal
from slacker.migration.machine import Migration
from slacker.migration.options import MigrationOptions
from slacker.migration.participants import NOBODY
from slacker.migration.protocol import TARGET_MOVES, Phase, TargetState, check

# Fault kinds: "error" fails the step before it happens; "lost" does it and then loses the reply.
FAULT_KINDS = ("error", "lost")
TARGET_STEPS = ("durable", "lease", "wait", "ready", "resume", "activate", "remove")
SOURCE_STEPS = ("freeze", "fence", "unfence", "retire")
DIRECTORY_STEPS = ("cas", "lookup")
STEPS = TARGET_STEPS + SOURCE_STEPS + DIRECTORY_STEPS


@dataclass
class World:
    """Everything outside the phase machine, and what the invariants are checked on."""
    faults: dict = field(default_factory=dict)  # step -> kind, each fires once
    fired: list = field(default_factory=list)
    violations: list = field(default_factory=list)
    # the source server
    gtid: int = 10
    frozen: bool = False
    read_only: bool = False
    fenced_on_disk: bool = False
    retired: bool = False
    final: int | None = None  # the final position the target was made to reach
    # the target
    target_state: str = TargetState.CATCHING_UP.value
    applied: int = 0
    lease_until: float = 0.0
    # the directory
    owner: str = "node-1"
    epoch: int = 1
    # what the test wants to happen
    lock_not_granted: int = 0  # the next N freezes are not granted
    slow_catch_up: int = 0  # the next N catch-ups time out
    blockers: list = field(default_factory=list)
    slow_directory_s: float = 0.0  # each directory call takes this long

    def fault(self, step: str) -> str | None:
        kind = self.faults.pop(step, None)
        if kind:
            self.fired.append((step, kind))
        return kind

    # ---- the clients -----------------------------------------------------------
    def source_writable(self) -> bool:
        return not (self.frozen or self.read_only or self.retired)

    def target_writable(self) -> bool:
        return self.target_state == TargetState.OWNED.value

    def clients_write(self) -> None:
        """A moment: clients commit on the source if it takes writes; the invariants are checked."""
        if self.source_writable():
            self.gtid += 1
            if self.final is not None and self.epoch > 1 and self.owner == "node-2":
                self.violations.append(f"a commit on the source after the flip (gtid {self.gtid})")
        if self.source_writable() and self.target_writable():
            self.violations.append("two writable servers")


class FakeSource:
    """The source side as the phase machine sees it (slacker.migration.source.SourceSide)."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.fenced = False
        self.interrupted: list[int] = []
        self.tenant_id = "t1"

    def _step(self, name: str) -> None:
        self.w.clients_write()
        kind = self.w.fault(name)
        if kind:
            raise TenantError(f"source {name} failed", "injected", "")

    def tenant(self):
        return SimpleNamespace(port=4000, host="127.0.0.2", info=SimpleNamespace(fenced=self.w.fenced_on_disk))

    def blockers(self, older_than_s: float) -> list[str]:
        self.w.clients_write()
        return self.w.blockers.pop(0) if self.w.blockers else []

    def warm(self) -> None:
        pass

    def freeze(self, lock_timeout_s: float):
        self._step("freeze")
        if self.w.lock_not_granted:
            self.w.lock_not_granted -= 1
            raise LockNotGranted("could not freeze the source", "not granted within 250ms", "", phase="handover")
        self.w.frozen = True
        return object()

    def frozen_position(self) -> str:
        assert self.w.frozen, "read the final position without the freeze"
        self.w.final = self.w.gtid
        return f"0-1-{self.w.gtid}"

    def frozen_checksums(self) -> dict:
        return {"db.t": self.w.gtid}

    def fence(self) -> None:
        self.fenced = True
        self.w.fenced_on_disk = True  # persisted first ...
        self._step("fence")
        self.w.read_only = True  # ... then told to the server

    def unfence(self) -> None:
        self.w.fenced_on_disk = False
        self.fenced = False
        self._step("unfence")
        self.w.read_only = False

    def unfreeze(self) -> None:
        self.w.frozen = False
        self.w.clients_write()

    def retire(self, migration: str = "", pause=None) -> None:
        self._step("retire")
        self.w.read_only = True
        self.w.retired = True


class FakeTargetAgent:
    """The target agent's routes (slacker.migration.target.IncomingMigration) behind one request()."""

    peer_protocol: int | None = None  # as an AgentClient that has not heard the agent's version yet

    def __init__(self, world: World) -> None:
        self.w = world

    def warm(self) -> None:
        pass

    def _move(self, new: TargetState) -> None:
        check(TARGET_MOVES, self.w.target_state, new, "the fake target")
        self.w.target_state = new.value

    def request(self, method: str, path: str, body: dict | None = None, timeout_s: float = 60.0):
        w = self.w
        w.clients_write()
        step = "remove" if method == "DELETE" else path.rsplit("/", 1)[-1]
        kind = w.fault(step)
        if kind == "error":
            raise AgentUnavailable(f"target agent: {step} failed", "injected", "")
        doc = self._do(step, body or {})
        if kind == "lost":
            raise AgentUnavailable(f"target agent: the reply to {step} was lost", "injected", "")
        return doc

    def _do(self, step: str, body: dict) -> dict:
        w = self.w
        if step == "lease":
            w.lease_until = time.monotonic() + float(body["ttl_s"])
        elif step == "wait":
            if w.slow_catch_up:
                w.slow_catch_up -= 1
                raise CatchUpTimeout("the target did not catch up in time", "injected", "", phase="delta")
            w.applied = int(body["gtid"].rsplit("-", 1)[-1])
            return {"waited_s": 0.0}
        elif step == "ready":
            if w.target_state != TargetState.PROMOTED.value:
                self._move(TargetState.PROMOTED)
        elif step == "resume":
            if w.target_state == TargetState.PROMOTED.value:
                self._move(TargetState.CATCHING_UP)
        elif step == "activate":
            if w.target_state != TargetState.OWNED.value:
                if w.owner != "node-2":
                    raise Conflict("not ours to activate", f"the directory names {w.owner}", "")
                self._move(TargetState.OWNED)
        elif step == "remove":
            if w.target_state not in (TargetState.OWNED.value, TargetState.ABORTED.value):
                self._move(TargetState.ABORTED)
        elif step == "checksums":
            return {"checksums": {"db.t": w.applied}}
        return {}


class FakeDirectory:
    def __init__(self, world: World) -> None:
        self.w = world

    def _own(self) -> Ownership:
        host = "127.0.0.2" if self.w.owner == "node-1" else "127.0.0.3"
        return Ownership(tenant="t1", node=self.w.owner, host=host, port=4000, epoch=self.w.epoch, updated_at=0.0)

    def lookup(self, tenant: str) -> Ownership:
        self.w.clients_write()
        time.sleep(self.w.slow_directory_s)
        if self.w.fault("lookup"):
            raise AgentUnavailable("directory unreachable", "injected", "")
        return self._own()

    def compare_and_set(self, tenant: str, epoch: int, node: str, host: str, port: int, kind=None) -> Ownership:
        w = self.w
        w.clients_write()
        time.sleep(w.slow_directory_s)
        kind = w.fault("cas")
        if kind == "error":
            raise AgentUnavailable("directory unreachable", "injected", "")
        if w.epoch != epoch:
            raise Conflict("epoch moved", "", "")
        if node == "node-2" and w.target_state != TargetState.PROMOTED.value:
            w.violations.append(f"flipped to a target in state {w.target_state}")
        if node == "node-2" and w.applied != w.gtid:
            w.violations.append(f"flipped with the target at {w.applied}, the source at {w.gtid}")
        w.owner, w.epoch = node, w.epoch + 1
        if kind == "lost":
            raise AgentUnavailable("the directory's reply was lost", "injected", "")
        return self._own()

    def state_list(self, prefix: str) -> dict:
        return {}  # no router announced: the handover holds none (slacker/router/freeze.py)

    def warm(self) -> None:
        pass  # a store in the same process: no connection to open


class FakeNode:
    def __init__(self, world: World, root: Path) -> None:
        self.name = "node-1"
        self.protocol = 2
        self.token = "fake-token"
        self.config = SimpleNamespace(data_root=str(root), fault_injection=False, tls=None)
        self.journal = Journal(root / "journal")
        self.directory = FakeDirectory(world)
        self.target = FakeTargetAgent(world)
        nodes = {n: SimpleNamespace(name=n, tenant_host=h, url=f"http://{h}:1")
                 for n, h in (("node-1", "127.0.0.2"), ("node-2", "127.0.0.3"))}
        self.cluster = SimpleNamespace(node=lambda n: nodes[n], local_subnet=None, directory_backend="sqlite",
                                       directory_node="node-1")
        self.tenants = SimpleNamespace(exists=lambda tid: not world.retired)
        self.supervisor = SimpleNamespace(forget=lambda tid: None, busy=set())

    def refuse_unmovable(self, tenant_id: str, mode: str = "live", verify: bool = False,
                         snapshot: str = "auto", into: str | None = None) -> None:
        """A whole-server tenant's move is built (slacker/kinds/)."""

    def kind_here(self, tenant_id: str) -> str:
        return "server"

    def peer(self, name: str):
        assert name == "node-2"
        return self.target


_ids = itertools.count(1)


def migration_at_handover(world: World, root: Path, **options) -> Migration:
    """A migration whose copy and delta rounds are done: the next thing it does is the handover."""
    root = root / f"m{next(_ids)}"
    root.mkdir(parents=True)
    node = FakeNode(world, root)
    opts = MigrationOptions(target="node-2", handover_wait_s=options.pop("handover_wait_s", 0.3), **options)
    m = Migration(node, "t1", opts, participants=NOBODY)  # no router takes part
    m.source = FakeSource(world)
    m.record.epoch_before = world.epoch
    m._incoming_created = True

    def more_rounds():
        if world.frozen or world.read_only:
            world.violations.append("the source stays frozen or fenced through delta rounds")
        m.enter(Phase.DELTA)

    m.delta_rounds = SimpleNamespace(run=more_rounds)
    m.lease.granted_now()
    m.journal.write(m.entry)
    m.record.phase = Phase.DELTA
    m.finish_backoff_s = 0.001
    m.flip.ask_every_s = 0.001
    return m


def hand_over(m: Migration) -> None:
    """The rest of the migration from its handover: as `Migration.run` drives it after the delta rounds."""
    try:
        m._drive(m.handover.run)
    finally:
        m.lease.stop()


def target_settles(world: World) -> None:
    """The target agent's own settlement when the source goes quiet: it follows the directory."""
    if world.owner == "node-2" and world.target_state == TargetState.PROMOTED.value:
        world.target_state = TargetState.OWNED.value
    elif world.owner == "node-1" and world.target_state not in (TargetState.OWNED.value, TargetState.ABORTED.value):
        world.target_state = TargetState.ABORTED.value


def reconcile(world: World) -> None:
    """The source agent's reconciliation: a fenced tenant the directory names as owned here is unfenced."""
    if world.owner == "node-1" and not world.retired and world.fenced_on_disk:
        world.fenced_on_disk = world.read_only = False


def settle(world: World) -> None:
    target_settles(world)
    reconcile(world)


def end_state_violations(world: World, m: Migration) -> list[str]:
    """Exactly one writable server, the directory's; nothing of the migration left behind."""
    out = list(world.violations)
    err = m.record.error
    if err is not None and "cannot move from" in err.what:
        out.append(f"an illegal transition: {err.what}")
    writable = [n for n, ok in (("node-1", world.source_writable()), ("node-2", world.target_writable())) if ok]
    if writable != [world.owner]:
        out.append(f"writable {writable}, the directory names {world.owner}")
    if world.owner == "node-2" and m.result != "succeeded":
        out.append(f"flipped, yet the migration {m.result}")
    if world.owner == "node-1" and m.result == "succeeded":
        out.append("succeeded without a flip")
    if world.owner == "node-1" and world.fenced_on_disk:
        out.append("the owner stays fenced on disk")
    if m.journal.entries():
        out.append(f"journal left behind: {[e.state for e in m.journal.entries()]}")
    return out


def is_slacker_error(exc: BaseException) -> bool:
    return isinstance(exc, SlackerError)
