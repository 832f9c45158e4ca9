"""Controllers that set the copy rate: the default slack finder, the model controller (experimental),
the PID throttle and baselines.

The migration loop reads a latency sample once per step, calls `step()` and
applies `rate_bytes_per_s`. Prometheus gauges live in `slacker.controller.metrics`.
"""

from .base import ControllerStep, RateController
from .baselines import FixedRate, ThresholdThrottle
from .loop import RatePolicy
from .model import ModelController
from .pid import DEFAULT_GAINS, Gains, ThrottleConfig, ThrottleController, parse_gains
from .slack import SlackController

__all__ = [
    "DEFAULT_GAINS",
    "ControllerStep",
    "FixedRate",
    "Gains",
    "ModelController",
    "RateController",
    "RatePolicy",
    "SlackController",
    "ThresholdThrottle",
    "ThrottleConfig",
    "ThrottleController",
    "parse_gains",
]
