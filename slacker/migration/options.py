"""A migration's options and the request that carries them from the CLI to the source agent (checked once
at each edge: the CLI's flags, the agent's decoding of the body), and the records a migration reports."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..controller.settings import ControllerSettings
from ..errors import InvalidInput, MigrationFailed
from ..delta import APPLIERS, DEFAULT_APPLIER, DEFAULT_MPL, parse_mpl
from ..transfer import DATA_PATHS, DEFAULT_PIPE
from .cutover import CutoverPlan

MODES = ("live", "stop-and-copy")
MAX_KEEP_S = 30 * 24 * 3600.0  # --keep-source at most


@dataclass
class MigrationOptions:
    target: str
    mode: str = "live"
    rate_bytes_per_s: float | None = None  # None = unthrottled; 0 = paused
    # Hard limit from requesting the lock to the directory's compare-and-set; delta rounds aim at half.
    max_freeze_s: float = 0.5
    # Handover attempts: one over its budget unfreezes the source, runs more delta rounds and retries.
    handover_attempts: int = 3
    # How long the handover waits, outside the freeze, for long transactions, long statements and DDL
    # on the source to end before it gives up (the source keeps serving).
    handover_wait_s: float = 60.0
    verify: bool = False  # online verification before the handover (slacker.verify)
    verify_only: bool = False  # run up to verification, then remove the target (the source untouched)
    verify_chunk_bytes: int = 2 * 1024 * 1024  # table data per verified chunk (slacker.verify.online)
    max_rounds: int = 20
    max_stalled_rounds: int = 3  # rounds in a row that did not shrink before giving up
    pipe: str = DEFAULT_PIPE
    # The native pipe's data path (slacker.transfer.DATA_PATHS): auto, splice, copy, splice-send.
    data_path: str = "auto"
    # How the snapshot is taken: auto (the tenant kind's own: a whole server's full hot backup, a shared tenant's
    # logical dump), logical (a shared tenant's `mariadb-dump --single-transaction`) or physical (a whole
    # server's backup; a shared tenant's partial one, `mariabackup --databases` + IMPORT TABLESPACE).
    snapshot: str = "auto"
    # On a TLS cluster, send the snapshot stream in plain text (an operator's opt-out for a private link;
    # the agents' API, replication and the routers keep TLS). Off a TLS cluster the stream is plain anyway.
    plain_stream: bool = False
    step_s: float = 1.0
    round_timeout_s: float = 600.0
    snapshot_timeout_s: float = 24 * 3600.0
    # The source renews a lease on the target this often; a target whose lease ran out asks the directory.
    lease_ttl_s: float = 10.0
    controller: ControllerSettings | None = None  # latency-targeting settings (a dict is checked in validate())
    # Fault injection for tests and rehearsals, honoured only when the agent's config enables it:
    # {"delta": 5} holds 5 s when that phase begins; {"frozen": 2} with the source frozen;
    # {"fenced": 2} fenced, before the compare-and-set; {"flipped": 2} right after it; {"activated": 2} after
    # the target took writes, before the routers are released. The target's activation pauses at
    # "activating", "started", "unfencing" and "unfenced" (slacker.migration.target.IncomingMigration.activate).
    hold_s: dict | None = None
    delta_applier: str = DEFAULT_APPLIER  # serial | concurrent (see docs/delta.md)
    delta_mpl: int | str = DEFAULT_MPL    # auto | parallel appliers
    # Relax the target's fsyncs while it is not the owner (docs/delta.md); off only for comparisons.
    delta_catchup: bool = True
    # When the handover may begin (slacker.migration.cutover): auto (as soon as the delta converges), manual,
    # at=TIME or window=HH:MM-HH:MM[,ZONE]; anything but auto waits in the ready phase. The timeout
    # (DURATION[,abort|wait], "" for 24h,abort) counts from the moment it is ready.
    cutover: str = "auto"
    cutover_timeout: str = ""
    # After the flip, keep the old copy this long (fenced, replicating from the new owner: slacker.migration.kept)
    # so `--revert` moves the tenant back with a freeze only; 0: retired at the flip.
    keep_source_s: float = 0.0
    # A move back to the node that keeps the tenant's old copy (`slacker migrate --revert`): no snapshot, the kept
    # copy catches up and the handover runs as in any move.
    revert: bool = False
    # The tenant's kind after the move, when it changes (`slacker migrate --into`): a whole server packed into the
    # target's shared server as its database ("shared"), or a shared tenant given a server of its own ("server").
    # None: it keeps its kind.
    into: str | None = None

    def cutover_plan(self) -> CutoverPlan:
        """The plan, as the agent reads it: a time that passed while the copy ran is taken as now."""
        return CutoverPlan.parse(self.cutover, self.cutover_timeout, strict=False)

    def validate(self) -> "MigrationOptions":
        if isinstance(self.controller, dict):
            self.controller = ControllerSettings.from_dict(self.controller)
        elif self.controller is not None and not isinstance(self.controller, ControllerSettings):
            raise InvalidInput("invalid controller settings", "expected an object", "")
        if self.mode not in MODES:
            raise InvalidInput(f"unknown mode {self.mode!r}", f"modes are {', '.join(MODES)}", "")
        if not 0.05 <= self.max_freeze_s <= 60:
            raise InvalidInput(f"--max-freeze {self.max_freeze_s}s is out of range", "it must be in [50ms, 60s]",
                               "for example 500ms")
        if not 1 <= self.handover_attempts <= 20:
            raise InvalidInput(f"--handover-attempts {self.handover_attempts} is out of range", "use 1 to 20", "")
        if not 0 <= self.handover_wait_s <= 24 * 3600:
            raise InvalidInput(f"--handover-wait {self.handover_wait_s}s is out of range", "use 0s to 24h",
                               "for example 60s")
        if self.verify_only:
            if self.mode != "live":
                raise InvalidInput("--verify-only needs a live migration",
                                   "stop-and-copy stops the source before anything can be compared", "")
            self.verify = True
        if not 16 * 1024 <= self.verify_chunk_bytes <= 1024 ** 3:
            raise InvalidInput(f"verify chunk of {self.verify_chunk_bytes} bytes is out of range", "use 16KiB to 1GiB", "")
        if self.rate_bytes_per_s is not None and self.rate_bytes_per_s < 0:
            raise InvalidInput("negative rate", "a rate is zero (paused) or positive", "")
        if self.max_rounds < 1 or self.max_stalled_rounds < 1:
            raise InvalidInput("round limits must be at least 1", "", "")
        if self.delta_applier not in APPLIERS:
            raise InvalidInput(f"unknown delta applier {self.delta_applier!r}", f"appliers are {', '.join(APPLIERS)}", "")
        self.delta_mpl = parse_mpl(self.delta_mpl)
        if self.data_path != "auto" and self.data_path not in DATA_PATHS:
            raise InvalidInput(f"unknown data path {self.data_path!r}", f"known: auto, {', '.join(DATA_PATHS)}",
                               "omit it for auto")
        if self.snapshot not in SNAPSHOTS:
            raise InvalidInput(f"unknown snapshot method {self.snapshot!r}", f"known: {', '.join(SNAPSHOTS)}",
                               "omit it for auto")
        if not isinstance(self.plain_stream, bool):
            raise InvalidInput("plain_stream must be true or false", f"got {self.plain_stream!r}", "")
        if not 0.1 <= self.step_s <= 60:
            raise InvalidInput(f"step {self.step_s}s is out of range", "use 0.1s to 60s", "")
        if not 2 <= self.lease_ttl_s <= 600:
            raise InvalidInput(f"lease {self.lease_ttl_s}s is out of range", "use 2s to 600s", "")
        if not isinstance(self.cutover, str) or not isinstance(self.cutover_timeout, str):
            raise InvalidInput("cutover and cutover_timeout must be strings", "", "")
        if not isinstance(self.keep_source_s, (int, float)) or not 0 <= self.keep_source_s <= MAX_KEEP_S:
            raise InvalidInput(f"--keep-source {self.keep_source_s!r} is out of range", "use 0s to 30d", "for example 1h")
        if self.keep_source_s and (self.mode != "live" or self.verify_only):
            raise InvalidInput("--keep-source needs a live migration that cuts over",
                               "stop-and-copy stops the source, --verify-only never flips", "drop --keep-source")
        if not isinstance(self.revert, bool):
            raise InvalidInput("revert must be true or false", f"got {self.revert!r}", "")
        if self.revert and (self.mode != "live" or self.verify_only or self.snapshot != "auto"
                            or self.cutover_plan().waits):
            raise InvalidInput("--revert takes no --mode, --snapshot, --verify-only or --cutover",
                               "a revert copies nothing and cuts over as soon as the kept copy caught up", "drop them")
        if self.into is not None:
            if self.into not in INTO_KINDS:
                raise InvalidInput(f"unknown tenant kind {self.into!r} for --into", f"kinds: {', '.join(INTO_KINDS)}", "")
            if self.mode != "live" or self.keep_source_s or self.revert:
                raise InvalidInput(f"--into {self.into} needs a live move that retires its source",
                                   "stop-and-copy, --keep-source and --revert keep the tenant's kind",
                                   "drop them, or --into")
        if self.cutover_plan().waits:
            if self.mode != "live":
                raise InvalidInput(f"--cutover {self.cutover} needs a live migration",
                                   "stop-and-copy stops the source at once: there is nothing to wait in", "")
            if self.verify_only:
                raise InvalidInput(f"--cutover {self.cutover} and --verify-only exclude each other",
                                   "--verify-only never cuts over", "drop one")
        return self


SNAPSHOTS = ("auto", "logical", "physical")
INTO_KINDS = ("server", "shared")  # slacker.kinds.KINDS (not imported: the options stay free of the kinds' code)

# Sent on every request whatever their value: agents one protocol version apart may have other defaults.
WIRE_ALWAYS = ("target", "mode", "max_freeze_s", "handover_attempts", "handover_wait_s", "verify", "max_rounds",
               "max_stalled_rounds", "rate_bytes_per_s")
_DEFAULTS = MigrationOptions(target="")


@dataclass
class MigrationRequest:
    """The body of POST /v1/migrations, typed: which tenant moves and how. Made by `checked` (the CLI, the
    rebalancer) or `from_wire` (the agent's route), each validating once; inside the agent it is passed on
    as it is, and the service and the phase machine trust it."""

    tenant: str
    options: MigrationOptions

    @classmethod
    def checked(cls, tenant: str, options: MigrationOptions) -> "MigrationRequest":
        return cls(tenant, options.validate())

    def to_wire(self) -> dict[str, Any]:
        """The JSON body: the keys every agent takes, then only the options that differ from the defaults (an
        agent a protocol version older refuses keys it does not know, and never gets one it was not sent)."""
        values = vars(self.options)
        body: dict[str, Any] = {"tenant": self.tenant}
        for f in fields(MigrationOptions):
            value = values[f.name]
            if f.name in WIRE_ALWAYS or value != vars(_DEFAULTS)[f.name]:
                body[f.name] = value.to_dict() if isinstance(value, ControllerSettings) else value
        return body

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> "MigrationRequest":
        """A body as it arrives at the agent: unknown keys refused, the options validated (the controller's
        settings typed before anything is measured)."""
        tenant = body.get("tenant")
        if not tenant:
            raise InvalidInput("migration needs a tenant", "", "")
        allowed = {f.name for f in fields(MigrationOptions)}
        unknown = set(body) - allowed - {"tenant"}
        if unknown:
            raise InvalidInput(f"unknown migration option(s) {', '.join(sorted(unknown))}", "", "")
        if "target" not in body:
            raise InvalidInput("migration needs a target node", "", "pass --to NODE")
        return cls.checked(str(tenant), MigrationOptions(**{k: v for k, v in body.items() if k in allowed}))


@dataclass
class RoundReport:
    n: int
    transactions: int
    bytes: int
    duration_s: float
    remaining_bytes: int
    est_freeze_ms: float
    write_tps: float | None = None   # the source's commit rate since the previous round
    apply_tps: float | None = None   # the target's latest saturated apply rate
    mpl: int | None = None           # parallel appliers at the round's end (0: serial)


@dataclass
class PhaseTiming:
    name: str
    started_at: str
    start_s: float
    duration_s: float | None = None


@dataclass
class HandoverAttempt:
    n: int
    outcome: str  # "flipped", "over budget", "failed"
    freeze_ms: float
    steps_ms: dict
    reason: str = ""
    interrupted: int = 0  # application statements interrupted to get the freeze granted


class MigrationAborted(MigrationFailed):
    pass


class OverBudget(MigrationFailed):
    """A handover attempt that would outlast --max-freeze: the source is unfrozen and unfenced."""
