"""What the oltp bench's moves say of the throttle's loop: per controlled move, whether the node's memory
seeded its start, the 95th percentile of the clients' seconds during the copy against the setpoint, and the
loop's delays -- measured from the move's own per-second series (the rate set -> the bytes the pipe moved,
the rate set -> the clients' latency: the delay at which the changes follow most) beside what the controller
assumed (its `model_dead_s` and `model_lag_s` at the copy's end). Pure functions of results.json and the
series files the bench keeps (`<name>.migration.jsonl`); `report(res, out_dir)` prints the table.

    python -m benches.setpoint.loopdelay OUT_DIR      (from bench/, after bench/run setpoint --only oltp)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from .protocol import interval

MAX_DELAY = 6  # seconds of delay considered


def _snapshot_rows(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [r for r in (json.loads(x) for x in lines if x.strip()) if r.get("phase") == "snapshot"]


def best_delay(cause: list[float | None], effect: list[float | None], max_delay: int = MAX_DELAY) -> int | None:
    """The delay d (0..max_delay) at which the effect's changes follow the cause's most: argmax over d of
    the sum of Δcause[k - d]·Δeffect[k] over the seconds where both are known; None with no moving cause."""
    best, best_v = None, 0.0
    for d in range(max_delay + 1):
        v = 0.0
        for k in range(d + 1, len(effect)):
            c1, c0, e1, e0 = cause[k - d], cause[k - d - 1], effect[k], effect[k - 1]
            if None in (c1, c0, e1, e0):
                continue
            v += (c1 - c0) * (e1 - e0)
        if v > best_v:
            best, best_v = d, v
    return best


def move_figures(m: dict, out_dir: Path) -> dict:
    """One move's figures (see the module's docstring)."""
    rows = _snapshot_rows(Path(m.get("series_path") or out_dir / f"{m['name']}.migration.jsonl"))
    sp = m.get("setpoint_s")
    out: dict = {"name": m["name"], "member": m["member"], "seeded": m.get("seeded")}
    if rows:
        first = rows[0].get("rate_bytes_per_s")
        if out["seeded"] is None:
            # older runs did not record the entry: a start other than the safe 10 MB/s was the memory's
            out["seeded_start_bytes_per_s"] = None if first in (None, 10_000_000) else first
        rates = [r.get("rate_bytes_per_s") for r in rows]
        done = [r.get("bytes_done") for r in rows]
        flow = [None] + [None if a is None or b is None else (b - a) for a, b in zip(done, done[1:])]
        out["assumed_dead_s"] = rows[-1].get("model_dead_s")
        out["assumed_lag_s"] = rows[-1].get("model_lag_s")
        set_ = [None if r is None else float(r) for r in rates]
        out["measured_dead_s"] = best_delay(set_, flow)
        clients = {row[0]: row[1] for row in m.get("seconds") or []}  # s from the copy's start -> client ms
        lat = [clients.get(k) for k in range(len(rows))]
        out["measured_rate_to_latency_s"] = best_delay(set_, lat)
    secs = [row[1] / 1000 for row in m.get("seconds") or [] if row[1] is not None and 0 <= row[0] <= m["copy"][1] - m["copy"][0]]
    if secs and sp:
        secs.sort()
        out["p95_over_sp"] = secs[min(len(secs) - 1, math.ceil(0.95 * len(secs)) - 1)] / sp
    if m.get("mean_s") and sp:
        out["mean_over_sp"] = m["mean_s"] / sp
    return out


def figures(res: dict, out_dir: Path) -> dict:
    st = res.get("oltp") or {}
    per: list[dict] = []
    for b in st.get("blocks", []):
        fig = b.get("figures") or {}
        oracle = fig.get("oracle_rate")
        for mem, m in b.get("moves", {}).items():
            if m.get("kind") not in ("model", "pid") or "copy" not in m:
                continue
            f = move_figures(m, out_dir)
            f["block"] = b["block"]
            if mem.endswith(":b") and oracle:
                f["speed_over_oracle"] = m["rate"] / oracle
            unthr = b["moves"].get("unthrottled")
            if mem.endswith(":nb") and unthr and unthr.get("time_s"):
                f["time_over_unthrottled"] = m["time_s"] / unthr["time_s"]
            # the PID never takes the memory's seed (its start is its own); a model move started elsewhere than
            # the safe 10 MB/s was seeded
            f["first"] = m.get("kind") == "pid" or (f.get("seeded") is None and f.get("seeded_start_bytes_per_s") is None)
            per.append(f)
    return {"moves": per}


def report(res: dict, out_dir: Path) -> str:
    per = figures(res, out_dir)["moves"]
    lines = ["member, start: figure  median [90 % interval] (n)"]
    for mem in sorted({f["member"] for f in per}):
        for first in (True, False):
            sel = [f for f in per if f["member"] == mem and f["first"] == first]
            if not sel:
                continue
            for key in ("mean_over_sp", "p95_over_sp", "speed_over_oracle", "time_over_unthrottled"):
                v = interval([f.get(key) for f in sel])
                if v["n"]:
                    lines.append(f"{mem}, {'first' if first else 'seeded'}: {key} {v['median']:.2f} "
                                 f"[{v['lo']:.2f} - {v['hi']:.2f}] ({v['n']})")
    lines.append("loop delay per move: measured rate->throughput, rate->clients' latency; assumed dead, lag")
    for f in per:
        lines.append(f"  {f['name']}: {f.get('measured_dead_s')} s, {f.get('measured_rate_to_latency_s')} s; "
                     f"{f.get('assumed_dead_s')} s, {f.get('assumed_lag_s')} s")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    out_dir = Path(argv[0])
    res = json.loads((out_dir / "results.json").read_text())
    print(report(res, out_dir))
    if len(argv) > 1:
        Path(argv[1]).write_text(json.dumps(figures(res, out_dir), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
