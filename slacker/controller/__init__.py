"""Controllers that set the copy rate: the model controller (the default), the paper's PID (the
baseline) and the on/off and fixed baselines; their registry and a migration's settings.

The migration loop reads a latency sample once per step, calls `step()` and
applies `rate_bytes_per_s`. Prometheus gauges live in `slacker.controller.metrics`.
"""

from .base import ControllerStep, RateController
from .baselines import FixedRate, ThresholdThrottle
from .loop import RatePolicy
from .model import ModelController
from .pid import DEFAULT_GAINS, Gains, PidController, parse_gains
from .settings import DEFAULT_KIND, KINDS, ControllerSettings

__all__ = [
    "DEFAULT_GAINS",
    "DEFAULT_KIND",
    "KINDS",
    "ControllerSettings",
    "ControllerStep",
    "FixedRate",
    "Gains",
    "ModelController",
    "PidController",
    "RateController",
    "RatePolicy",
    "ThresholdThrottle",
    "parse_gains",
]
