"""The seam between a migration and its controller: the kinds of controller (one registry) and a
migration's controller settings (one frozen dataclass, checked once where the request comes in).

The registry is what `slacker migrate --controller` offers, what a request is validated against and
what docs/controller.md lists (tests/unit/test_controller_settings.py checks the page against it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from ..errors import InvalidInput
from ..latency import DEFAULT_STEP_S, DEFAULT_WINDOW_S, validate_window
from ..units import parse_rate
from .base import RateController, check_max_rate, check_positive, check_setpoint
from .budget import DEFAULT_BUDGET, check_budget
from .baselines import FixedRate, ThresholdThrottle
from .model import ModelController
from .pid import DEFAULT_GAINS, Gains, PidController, parse_gains

DEFAULT_MAX_RATE = 200_000_000  # the controller's scale when no --max-rate is given (unthrottled at its top)


@dataclass(frozen=True)
class Kind:
    """One kind of controller: its name, its class, a line for the help, and whether it steers on latency
    (`fixed` does not: a benchmark baseline, not offered by the CLI)."""

    name: str
    cls: type[RateController]
    summary: str
    make: Callable[["ControllerSettings", float], RateController]
    steered: bool = True


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("model", ModelController,
         "fits latency against the copy rate online and moves the rate along the fit to the setpoint",
         lambda s, m: ModelController(s.setpoint_s, m, step_s=s.step_s)),
    Kind("pid", PidController, "the paper's velocity PID, the baseline (--gains)",
         lambda s, m: PidController(s.setpoint_s, m, s.gains, step_s=s.step_s)),
    Kind("threshold", ThresholdThrottle, "on/off: stopped over the setpoint, full speed under it",
         lambda s, m: ThresholdThrottle(s.setpoint_s, m, step_s=s.step_s)),
    Kind("fixed", FixedRate, "a fixed rate that reads latency but does not follow it (benchmarks)",
         lambda s, m: FixedRate(s.rate_bytes_per_s or 0.0, setpoint_s=s.setpoint_s), steered=False),
)}
DEFAULT_KIND = "model"
CLI_KINDS = tuple(k for k, v in KINDS.items() if v.steered)
# Kinds that existed once, with what to use instead: a one-line refusal rather than "unknown".
REMOVED = {"slack": "it was replaced by the model controller, the default"}


def kind(name: str) -> Kind:
    """The registry's entry for `name`, or a one-line refusal naming the choices."""
    if name in KINDS:
        return KINDS[name]
    why = REMOVED.get(name, f"the kinds are {', '.join(CLI_KINDS)}")
    raise InvalidInput(f"unknown controller {name!r}", why,
                       f"drop --controller (the default is {DEFAULT_KIND}) or choose {' | '.join(CLI_KINDS)}")


@dataclass(frozen=True)
class ControllerSettings:
    """A latency-targeting migration's settings (the `controller` object of POST /v1/migrations)."""

    setpoint_s: float
    kind: str = DEFAULT_KIND
    max_rate_bytes_per_s: float | None = None  # None: a DEFAULT_MAX_RATE scale, unthrottled at its top
    gains: Gains = DEFAULT_GAINS  # pid only
    window_s: float = DEFAULT_WINDOW_S
    step_s: float = DEFAULT_STEP_S
    latency_sources: tuple[str, ...] = ()  # --latency-source specs; none: slacker.throttle.DEFAULT_SOURCES
    target_setpoint_s: float | None = None  # None: the setpoint
    target_guard: bool = True
    force: bool = False  # start even if the setpoint is under the load's own latency
    rate_bytes_per_s: float | None = None  # kind "fixed" only
    # The node's one controller for its outgoing copies, split fair or smallest-first (slacker.controller.budget);
    # "own": a controller of this move's own that ignores the node's other copies (a benchmark baseline).
    budget: str = DEFAULT_BUDGET
    # Set by the moves a drain or the rebalancer starts: a setpoint under the load's own latency, as this move's
    # latency source reads it before the copy, is raised to that latency x (1 + headroom). The caller chose the
    # setpoint from the servers' figures; the source may read what clients see through a router, which is more.
    setpoint_headroom: float | None = None

    def __post_init__(self) -> None:
        kind(self.kind)
        check_budget(self.budget)
        check_setpoint(self.setpoint_s)
        if self.max_rate_bytes_per_s is not None:
            check_max_rate(self.max_rate_bytes_per_s)
        if self.target_setpoint_s is not None:
            check_positive("target setpoint", self.target_setpoint_s, "for example --target-setpoint 50ms")
        if self.setpoint_headroom is not None and not 0.0 <= self.setpoint_headroom <= 10.0:
            raise InvalidInput(f"invalid setpoint headroom {self.setpoint_headroom!r}",
                               "expected a fraction of the load's latency from 0 to 10", "for example 0.25")
        if not isinstance(self.gains, Gains):
            raise InvalidInput(f"invalid gains {self.gains!r}", "expected Gains(kp, ki, kd)", "")
        validate_window(self.window_s, self.step_s)
        if self.kind == "fixed" and (self.rate_bytes_per_s is None or self.rate_bytes_per_s < 0):
            raise InvalidInput("a fixed-rate controller needs a rate", "rate_bytes_per_s is missing or negative", "")

    @property
    def steered(self) -> bool:
        return KINDS[self.kind].steered

    def setpoint_over(self, load_latency_s: float | None) -> tuple[float, str]:
        """The setpoint to steer at, given the load's own latency before the copy: the setpoint asked, or with a
        headroom and a load already over it, the load's latency x (1 + headroom); and why (empty: as asked)."""
        h = self.setpoint_headroom
        if h is None or load_latency_s is None or load_latency_s * (1 + h) <= self.setpoint_s:
            return self.setpoint_s, ""
        return load_latency_s * (1 + h), (f"raised from {self.setpoint_s * 1000:.1f}ms: the load alone reads "
                                          f"{load_latency_s * 1000:.1f}ms here, + {h:.0%}")

    @property
    def scale_bytes_per_s(self) -> float:
        """The rate at fraction 1: the --max-rate given, or the nominal scale."""
        return self.max_rate_bytes_per_s or DEFAULT_MAX_RATE

    def build(self) -> RateController:
        return KINDS[self.kind].make(self, self.scale_bytes_per_s)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ControllerSettings":
        """From a request's JSON: unknown keys refused, None meaning the default, strings parsed."""
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InvalidInput(f"unknown controller setting(s) {', '.join(sorted(unknown))}",
                               f"known: {', '.join(sorted(names))}", "")
        given = {k: v for k, v in d.items() if v is not None}
        if "setpoint_s" not in given:
            raise InvalidInput("a latency-targeting migration needs --setpoint", "", "for example --setpoint 1500ms")
        try:
            if isinstance(given.get("gains"), str):
                given["gains"] = parse_gains(given["gains"])
            elif isinstance(given.get("gains"), (list, tuple)):
                given["gains"] = Gains(*given["gains"])
            for k in ("setpoint_s", "window_s", "step_s", "target_setpoint_s", "setpoint_headroom"):
                if k in given:
                    given[k] = float(given[k])
            for k in ("max_rate_bytes_per_s", "rate_bytes_per_s"):
                if isinstance(given.get(k), str):
                    given[k] = float(parse_rate(given[k]))
                elif k in given:
                    given[k] = float(given[k])
            if "latency_sources" in given:
                given["latency_sources"] = tuple(str(x) for x in given["latency_sources"])
            for k in ("target_guard", "force"):
                if k in given and not isinstance(given[k], bool):
                    raise InvalidInput(f"invalid controller setting {k}={given[k]!r}", "expected true or false", "")
        except (TypeError, ValueError) as exc:
            raise InvalidInput("invalid controller settings", str(exc), "") from None
        return cls(**given)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gains"] = [self.gains.kp, self.gains.ki, self.gains.kd]
        d["latency_sources"] = list(self.latency_sources)
        if self.setpoint_headroom is None:
            del d["setpoint_headroom"]  # not sent unless set: a request an agent before it also takes
        return d
