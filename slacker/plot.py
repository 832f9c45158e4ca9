"""Plots of a migration's time series: latency against setpoint, and the copy rate.

The input is the run's JSONL file, one object per step with at least `t`, `phase`,
`rate_bytes_per_s` (null: unthrottled) and `bytes_done`, and `latency_s`,
`setpoint_s` and `throughput_bytes_per_s` when known. The figure is the paper's
Figure 12 view, with the phases shaded.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidInput

REQUIRED_KEYS = ("t", "phase", "rate_bytes_per_s", "bytes_done")

# Muted, distinct shades; phases beyond the list reuse them in order.
_PHASE_COLOURS = ["#e8eef7", "#f7efe2", "#e6f2e6", "#f3e6f2", "#eeeeee", "#f7f3d9"]


@dataclass(frozen=True)
class Point:
    t: float
    phase: str
    rate_bytes_per_s: float | None  # None: unthrottled
    bytes_done: float
    latency_s: float | None = None
    setpoint_s: float | None = None
    throughput_bytes_per_s: float | None = None
    duration_s: float | None = None  # on the last sample of a finished migration: its whole duration


def _number(value: object, key: str, where: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"malformed run file {where}", f"{key} must be a finite number, not {value!r}")
    return float(value)


def load_timeseries(path: str | os.PathLike) -> list[Point]:
    """Read and check a run's JSONL time series; points come back sorted by t."""
    p = Path(path)
    if not p.exists():
        raise InvalidInput(f"run file {p} not found", "no such file", "give the JSONL file a migration wrote")
    if p.is_dir():
        raise InvalidInput(f"run file {p} is a directory", "expected a JSONL file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read run file {p}", str(exc)) from None
    points: list[Point] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"malformed run file {where}", f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise InvalidInput(f"malformed run file {where}", "each line must be a JSON object")
        missing = [k for k in REQUIRED_KEYS if k not in obj]
        if missing:
            raise InvalidInput(f"malformed run file {where}", "missing " + ", ".join(missing))
        if not isinstance(obj["phase"], str):
            raise InvalidInput(f"malformed run file {where}", f"phase must be a string, not {obj['phase']!r}")
        points.append(
            Point(
                t=_number(obj["t"], "t", where),
                phase=obj["phase"],
                rate_bytes_per_s=_number(obj["rate_bytes_per_s"], "rate_bytes_per_s", where, optional=True),
                bytes_done=_number(obj["bytes_done"], "bytes_done", where),
                latency_s=_number(obj.get("latency_s"), "latency_s", where, optional=True),
                setpoint_s=_number(obj.get("setpoint_s"), "setpoint_s", where, optional=True),
                throughput_bytes_per_s=_number(
                    obj.get("throughput_bytes_per_s"), "throughput_bytes_per_s", where, optional=True
                ),
                duration_s=_number(obj.get("duration_s"), "duration_s", where, optional=True),
            )
        )
    if not points:
        raise InvalidInput(f"run file {p} is empty", "it has no time series lines")
    points.sort(key=lambda pt: pt.t)
    return points


def phase_spans(points: list[Point]) -> list[tuple[str, float, float]]:
    """Consecutive runs of the same phase as (phase, start t, end t)."""
    spans: list[tuple[str, float, float]] = []
    for i, pt in enumerate(points):
        end = points[i + 1].t if i + 1 < len(points) else pt.t
        if spans and spans[-1][0] == pt.phase:
            spans[-1] = (pt.phase, spans[-1][1], end)
        else:
            spans.append((pt.phase, pt.t, end))
    return spans


def run_title(points: list[Point]) -> str:
    """What `slacker migrate`'s summary says of the same run: the bytes copied and the migration's
    duration from its start to its end (a sample's t counts from the start; the first sample comes a
    step later, so the span of the samples would be a step short)."""
    from .units import format_duration, format_size

    duration = next((p.duration_s for p in reversed(points) if p.duration_s is not None), points[-1].t)
    return f"migration: {format_size(points[-1].bytes_done)} copied in {format_duration(duration)}"


def plot_run(points: list[Point], output: str | os.PathLike, title: str | None = None) -> Path:
    """Draw latency vs setpoint (top) and copy rate (bottom) over time to a PNG."""
    # The object API with the Agg canvas: no pyplot global state, no display needed.
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:  # the production install leaves plotting out (the `plot` extra)
        from .errors import MissingDependency
        raise MissingDependency("slacker plot needs matplotlib", "this install has no `plot` extra",
                                "plot on a workstation: pip install 'slacker[plot]'") from None

    out = Path(output)
    if not out.parent.exists():
        raise InvalidInput(f"cannot write {out}", f"directory {out.parent} does not exist")
    if not points:
        raise InvalidInput("nothing to plot", "the time series is empty")

    fig = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax_lat, ax_rate = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])

    ts = [p.t for p in points]
    lat_ms = [p.latency_s * 1000 if p.latency_s is not None else math.nan for p in points]
    sp_ms = [p.setpoint_s * 1000 if p.setpoint_s is not None else math.nan for p in points]
    rate_mb = [p.rate_bytes_per_s / 1e6 if p.rate_bytes_per_s is not None else math.nan for p in points]
    throughput_mb = [
        p.throughput_bytes_per_s / 1e6 if p.throughput_bytes_per_s is not None else math.nan for p in points
    ]

    # Phases are named in a legend below the plot: short phases (preflight,
    # handover) are too narrow to carry their own label.
    colours: dict[str, str] = {}
    for phase, start, end in phase_spans(points):
        colour = colours.setdefault(phase, _PHASE_COLOURS[len(colours) % len(_PHASE_COLOURS)])
        for ax in (ax_lat, ax_rate):
            ax.axvspan(start, end if end > start else start + 1e-9, color=colour, linewidth=0, zorder=0)
    fig.legend(
        handles=[Patch(facecolor=c, edgecolor="#bbbbbb", label=name) for name, c in colours.items()],
        loc="outside lower center",
        ncols=min(len(colours), 6),
        fontsize=8,
        frameon=False,
        title="phase",
        title_fontsize=8,
    )

    if any(not math.isnan(v) for v in lat_ms):
        ax_lat.plot(ts, lat_ms, color="#1f77b4", linewidth=1.2, label="latency (window avg)")
    if any(not math.isnan(v) for v in sp_ms):
        ax_lat.step(ts, sp_ms, where="post", color="#d62728", linestyle="--", linewidth=1.2, label="setpoint")
    ax_lat.set_ylabel("transaction latency (ms)")
    ax_lat.set_ylim(bottom=0)
    if ax_lat.get_legend_handles_labels()[0]:
        ax_lat.legend(loc="upper right", fontsize=8)
    else:
        ax_lat.text(0.5, 0.5, "no latency recorded", transform=ax_lat.transAxes, ha="center", color="#888888")
    ax_lat.grid(True, alpha=0.3)

    ax_rate.step(ts, rate_mb, where="post", color="#2ca02c", linewidth=1.2, label="rate limit (gaps: unthrottled)")
    if any(not math.isnan(v) for v in throughput_mb):
        ax_rate.plot(ts, throughput_mb, color="#7f7f7f", linewidth=0.9, alpha=0.8, label="measured throughput")
    ax_rate.legend(loc="upper right", fontsize=8)
    ax_rate.set_ylabel("copy rate (MB/s)")
    ax_rate.set_xlabel("time since migration start (s)")
    ax_rate.set_ylim(bottom=0)
    ax_rate.grid(True, alpha=0.3)

    fig.suptitle(title or run_title(points), fontsize=11)
    try:
        fig.savefig(out, format="png")
    except OSError as exc:
        raise InvalidInput(f"cannot write {out}", str(exc)) from None
    return out


def plot_file(run_file: str | os.PathLike, output: str | os.PathLike | None = None, title: str | None = None) -> Path:
    """Load a run file and plot it; the default output is the run file with .png."""
    points = load_timeseries(run_file)
    out = Path(output) if output is not None else Path(run_file).with_suffix(".png")
    return plot_run(points, out, title)
