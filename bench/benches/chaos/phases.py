"""The phase-aimed chaos mode's pure logic: which fault goes where, which phase a fault landed in,
time to writable from the writers' logs, who is to blame for a hand step, and the per-phase table.

Nothing here touches a process or a socket (tests/unit/test_chaos_phases.py covers it); the runs
themselves are bench/benches/chaos/aimed.py.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from benchkit.stats import pct

# Where a fault is aimed. The handover's steps last milliseconds, so the migration is asked to hold
# (fault injection, `hold_s`) at the point that opens the phase, and the fault lands at a random
# offset inside the hold; the copy is slowed so it lasts seconds; "recovery" first kills the source
# agent past the flip, restarts it, and aims the run's fault at its recovery.
AIMS = ("snapshot", "prepare", "delta", "verify", "freeze", "fence", "flip", "cleanup", "recovery")
# The hold point that opens each aimed phase (None: the phase lasts seconds by itself).
HOLD_POINT = {"snapshot": None, "prepare": "prepare", "delta": "delta", "verify": "verify", "freeze": "frozen",
              "fence": "fenced", "flip": "flipped", "cleanup": "cleanup", "recovery": "flipped"}
# A hold before the flip keeps the source frozen: the freeze budget must outlast it.
HOLD_IN_FREEZE = ("freeze", "fence")

KINDS = ("kill-source-agent", "kill-target-agent", "kill-source-server", "kill-target-server", "kill-cli",
         "kill-router", "kill-directory-agent", "stop-directory", "abort")
# A shared tenant's move adds its copy tool (the source's `mariadb-dump` or `mariabackup --databases`, the target's
# `mariabackup --prepare`), which runs in the snapshot and prepare phases only. Its "server" kills are the node's
# shared server: every neighbour on it goes down with the mover.
KINDS_SHARED = KINDS + ("kill-copy-tool",)
ONLY_IN = {"kill-copy-tool": ("snapshot", "prepare")}

# Where a fault can land, in the order of a migration (the table's rows).
LANDED = ("preflight", "snapshot", "prepare", "delta", "verify", "freeze", "fence", "flip", "activation",
          "retire", "finishing", "recovery", "ended")


@dataclass(frozen=True)
class Case:
    aim: str
    kind: str
    offset: float  # fraction of the phase's window at which the fault lands (0..1)


def plan(moves: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[Case]:
    """`moves` cases for `seed`. Every (aim, kind) pair is one item of a block (a kind that lives in some
    phases only, ONLY_IN, is aimed at those); blocks are shuffled one by one from a fixed sequence, and seed
    s takes the s-th run of `moves` items from it, so seeds 1..k together cover every pair about
    k * moves / |pairs| times, none twice before all once."""
    pairs = [(a, k) for a in AIMS for k in kinds if a in ONLY_IN.get(k, AIMS)]
    start = (seed - 1) * moves
    seq: list[tuple[str, str]] = []
    block = 0
    while len(seq) < start + moves:
        b = list(pairs)
        random.Random(block).shuffle(b)
        seq += b
        block += 1
    rng = random.Random(seed * 7919)
    return [Case(a, k, round(rng.random(), 3)) for a, k in seq[start:start + moves]]


def hold_for(aim: str, hold_s: float) -> dict:
    """The request's hold_s for an aimed phase ({} when the phase needs none)."""
    point = HOLD_POINT[aim]
    return {point: hold_s} if point else {}


def landed(doc: dict | None, target_fenced: bool | None, recovered_once: bool = False) -> str:
    """The phase a fault lands in, from the source's migration document read just before it.

    `target_fenced`: the target's copy still refuses writes (its activation has not run); in the
    cleanup phase that separates the activation from the source's retirement."""
    if doc is None:
        return "recovery" if recovered_once else "ended"
    if not doc.get("active", False):
        return "ended"
    phase = doc.get("phase", "")
    if phase == "recovering":
        return "recovery"
    if phase == "finishing":
        return "finishing"
    if phase == "cleanup":
        return "activation" if target_fenced in (True, None) else "retire"
    if phase == "handover":
        if doc.get("past_point_of_no_return"):
            return "flip"
        return "fence" if doc.get("handover_step") == "fenced" else "freeze"
    if phase in ("pending", "preflight"):
        return "preflight"
    return phase if phase in LANDED else "ended"


def first_accept_after(txns, t: float) -> float | None:
    """Seconds from `t` to the first acknowledged write that ended at or after `t` (None: none yet).

    `txns` are (start, end, outcome) with monotonic times, as slacker.oltp.Txn holds them."""
    ends = [tx.end for tx in txns if tx.outcome == "acked" and tx.end >= t]
    return round(min(ends) - t, 3) if ends else None


def blame(runs: list[dict], blocked_at: int) -> int:
    """The run a blocked move at index `blocked_at` is charged to: the latest earlier run that left
    something behind, else the one just before (or the blocked run itself if it is the first)."""
    for j in range(blocked_at - 1, -1, -1):
        if runs[j].get("leftovers"):
            return j
    return max(0, blocked_at - 1)


def unsafe(run: dict) -> bool:
    """The run broke safety: not exactly one writable owner (the directory's), a lost write, or two
    servers taking writes in one probe tick."""
    return (not run.get("one_owner", run.get("blocked", False)) or run.get("lost_direct", 0) + run.get("lost_router", 0) > 0
            or run.get("split_brain_ticks", 0) > 0 or run.get("lost_neighbours", 0) > 0)


def cli_gave_up(run: dict) -> bool:
    """`slacker migrate` (not itself killed) stopped with an error although its migration succeeded."""
    return (run.get("kind") != "kill-cli" and run.get("result") == "succeeded"
            and run.get("cli_exit") not in (0, None))


def _ttw(run: dict, key: str) -> float:
    """A run's time to writable for the table: a writer that never got a write in counts as infinite."""
    v = run.get(key)
    return math.inf if v is None else v


def table(runs: list[dict], by_kind: bool = True) -> list[dict]:
    """One row per (landed phase, kind) that had a run, in migration order, then kind order; with
    by_kind false, one row per landed phase (kind "all")."""
    rows = []
    for phase in LANDED:
        for kind in (KINDS_SHARED if by_kind else ("all",)):
            rs = [r for r in runs if r["landed"] == phase and kind in (r["kind"], "all")]
            if not rs:
                continue
            d = [_ttw(r, "ttw_direct_s") for r in rs if not r.get("blocked")]
            rt = [_ttw(r, "ttw_router_s") for r in rs if not r.get("blocked")]
            rows.append({"phase": phase, "kind": kind, "count": len(rs),
                         "direct_p50": pct(d, 0.5), "direct_max": max(d, default=math.nan),
                         "router_p50": pct(rt, 0.5), "router_max": max(rt, default=math.nan),
                         "unsafe": sum(unsafe(r) for r in rs),
                         "lost": sum(r.get("lost_direct", 0) + r.get("lost_router", 0) + r.get("lost_neighbours", 0)
                                     for r in rs),
                         "split_brain": sum(r.get("split_brain_ticks", 0) for r in rs),
                         "router_failed": sum(r.get("router_failed", 0) for r in rs),
                         "hand_step_runs": sum(bool(r.get("hand_steps")) for r in rs)})
    return rows


def worst(runs: list[dict]) -> dict | None:
    """The run with the longest time to writable (either writer; never writable counts as infinite)."""
    if not runs:
        return None
    return max(runs, key=lambda r: max(_ttw(r, "ttw_direct_s"), _ttw(r, "ttw_router_s")))


def summary(runs: list[dict]) -> dict:
    struck = [r for r in runs if not r.get("blocked")]  # a move refused before its fault has no restart to time
    d = [_ttw(r, "ttw_direct_s") for r in struck]
    rt = [_ttw(r, "ttw_router_s") for r in struck]
    w = worst(struck)
    return {"runs": len(runs), "unsafe_runs": sum(unsafe(r) for r in runs),
            "lost_direct": sum(r.get("lost_direct", 0) for r in runs),
            "lost_router": sum(r.get("lost_router", 0) for r in runs),
            "split_brain_ticks": sum(r.get("split_brain_ticks", 0) for r in runs),
            "router_failed": sum(r.get("router_failed", 0) for r in runs),
            **_neighbours(runs),
            "hand_step_runs": sum(bool(r.get("hand_steps")) for r in runs),
            "ttw_direct_p50": _num(pct(d, 0.5)), "ttw_direct_max": _num(max(d, default=math.nan)),
            "ttw_router_p50": _num(pct(rt, 0.5)), "ttw_router_max": _num(max(rt, default=math.nan)),
            "over_10s": sum(max(a, b) > 10 for a, b in zip(d, rt)),
            "cli_gave_up": sum(cli_gave_up(r) for r in runs),
            "worst": None if w is None else {k: w.get(k) for k in ("seed", "n", "aim", "kind", "landed",
                                                                    "ttw_direct_s", "ttw_router_s", "note")}}


def _neighbours(runs: list[dict]) -> dict:
    """A shared tenant's neighbours (runs with any): writes lost, failed requests (only a kill of their own shared
    server may fail them), and time to writable after such a kill (goal: within 10 s of its return)."""
    mine = [r for r in runs if "lost_neighbours" in r]
    if not mine:
        return {}
    back = [_ttw(r, "ttw_neighbours_s") for r in mine if r.get("neighbours_down")]
    return {"lost_neighbours": sum(r["lost_neighbours"] for r in mine),
            "neighbour_failed": sum(r.get("neighbour_failed", 0) for r in mine),
            "neighbour_failed_not_down": sum(r.get("neighbour_failed", 0) for r in mine if not r.get("neighbours_down")),
            "neighbour_ttw_max": _num(max(back, default=math.nan)),
            "neighbour_ttw_over_10s": sum(v > 10 for v in back)}


def _num(v: float):
    """JSON has no infinity: a writer that never got a write in is null."""
    return None if math.isinf(v) or math.isnan(v) else round(v, 3)


def fmt_s(v: float) -> str:
    if math.isinf(v):
        return "never"
    if math.isnan(v):
        return "-"
    return f"{v:.2f}"


def markdown(rows: list[dict]) -> str:
    out = ["| phase | fault | runs | to writable p50 / max, direct (s) | through the router (s) | unsafe | lost "
           "| split-brain ticks | router failed requests | hand-step runs |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['phase']} | {r['kind']} | {r['count']} | {fmt_s(r['direct_p50'])} / {fmt_s(r['direct_max'])} "
                   f"| {fmt_s(r['router_p50'])} / {fmt_s(r['router_max'])} | {r['unsafe']} | {r['lost']} "
                   f"| {r['split_brain']} | {r['router_failed']} | {r['hand_step_runs']} |")
    return "\n".join(out)
