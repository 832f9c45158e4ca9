"""Controllers that set the copy rate: the model controller (the default), the paper's PID (the
baseline) and the on/off and fixed baselines; their registry and a migration's settings.

The migration loop reads a latency sample once per step, calls `step()` and
applies `rate_bytes_per_s`. Prometheus gauges live in `slacker.controller.metrics`.
"""

from typing import TYPE_CHECKING

from ..lazy import exports

if TYPE_CHECKING:
    from .base import ControllerStep, RateController
    from .baselines import FixedRate, ThresholdThrottle
    from .loop import RatePolicy
    from .model import ModelController
    from .pid import DEFAULT_GAINS, Gains, PidController, parse_gains
    from .settings import DEFAULT_KIND, KINDS, ControllerSettings

# Loaded on first use: `slacker migrate` needs only the settings; the loop and its Prometheus
# metrics would cost every CLI command a tenth of its start-up.
__getattr__ = exports(__name__, {
    "ControllerStep": "base", "RateController": "base", "FixedRate": "baselines", "ThresholdThrottle": "baselines",
    "RatePolicy": "loop", "ModelController": "model", "DEFAULT_GAINS": "pid", "Gains": "pid", "PidController": "pid",
    "parse_gains": "pid", "DEFAULT_KIND": "settings", "KINDS": "settings", "ControllerSettings": "settings",
})

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
