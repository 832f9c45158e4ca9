"""The phase-aimed chaos bench's pure logic (bench/benches/chaos/phases.py): the plan, where a fault
landed, time to writable from a writer's log, blame for a hand step, and the table."""

from __future__ import annotations

import math
from collections import Counter

from benches.chaos import phases
from slacker.oltp import Txn


def test_plan_is_seeded_and_covers_every_pair_before_any_twice():
    assert phases.plan(60, 1) == phases.plan(60, 1)
    assert phases.plan(60, 1) != phases.plan(60, 2)
    pairs = len(phases.AIMS) * len(phases.KINDS)
    together = [(c.aim, c.kind) for s in (1, 2, 3) for c in phases.plan(60, s)]
    counts = Counter(together)
    assert len(counts) == pairs  # 180 moves cover all 81 pairs
    assert min(counts.values()) >= 2 and max(counts.values()) <= 3
    assert all(0 <= c.offset <= 1 for s in (1, 2, 3) for c in phases.plan(60, s))


def test_hold_opens_the_aimed_phase():
    assert phases.hold_for("snapshot", 1.5) == {}
    assert phases.hold_for("fence", 1.5) == {"fenced": 1.5}
    assert phases.hold_for("freeze", 2) == {"frozen": 2}
    assert phases.hold_for("recovery", 1) == {"flipped": 1}


def doc(phase, step="", pnr=False, active=True):
    return {"phase": phase, "handover_step": step, "past_point_of_no_return": pnr, "active": active}


def test_landed_reads_the_handover_steps_and_the_target_activation():
    assert phases.landed(doc("snapshot"), None) == "snapshot"
    assert phases.landed(doc("preflight"), None) == "preflight"
    assert phases.landed(doc("handover", "locked"), None) == "freeze"
    assert phases.landed(doc("handover", ""), None) == "freeze"
    assert phases.landed(doc("handover", "fenced"), None) == "fence"
    assert phases.landed(doc("handover", "flipped", pnr=True), None) == "flip"
    assert phases.landed(doc("cleanup", pnr=True), True) == "activation"
    assert phases.landed(doc("cleanup", pnr=True), False) == "retire"
    assert phases.landed(doc("finishing", pnr=True), False) == "finishing"
    assert phases.landed(doc("recovering", pnr=True), False) == "recovery"
    assert phases.landed(doc("cleanup", active=False), False) == "ended"
    assert phases.landed(None, None) == "ended"
    assert phases.landed(None, None, recovered_once=True) == "recovery"


def test_first_accept_after_counts_only_acknowledged_writes_ending_after_the_restart():
    txns = [Txn(0.0, 1.0, "acked"), Txn(1.0, 5.0, "unknown"), Txn(5.0, 7.5, "acked"), Txn(7.5, 7.6, "acked")]
    assert phases.first_accept_after(txns, 2.0) == 5.5
    assert phases.first_accept_after(txns, 0.5) == 0.5
    assert phases.first_accept_after(txns, 8.0) is None
    # a write held across the restart and acknowledged after it counts at its acknowledgement
    assert phases.first_accept_after([Txn(0.0, 3.0, "acked")], 2.0) == 1.0


def test_blame_goes_to_the_run_that_left_files_behind():
    runs = [{"leftovers": []}, {"leftovers": ["node-2/tenants/t"]}, {"leftovers": []}, {"leftovers": []}]
    assert phases.blame(runs, 4) == 1
    assert phases.blame([{"leftovers": []}, {"leftovers": []}], 2) == 1
    assert phases.blame([], 0) == 0


def run(phase, kind, d, r, **kw):
    return {"landed": phase, "kind": kind, "ttw_direct_s": d, "ttw_router_s": r, "one_owner": True, **kw}


def test_table_and_summary_count_unsafe_lost_split_brain_and_never_writable():
    runs = [run("flip", "kill-target-agent", 1.0, 2.0),
            run("flip", "kill-target-agent", 3.0, None, hand_steps=["removed by hand"]),
            run("delta", "kill-router", 0.0, 0.5, lost_router=2),
            run("fence", "kill-source-agent", 0.1, 0.1, one_owner=False, split_brain_ticks=1)]
    rows = phases.table(runs)
    assert [(r["phase"], r["kind"]) for r in rows] == [("delta", "kill-router"), ("fence", "kill-source-agent"),
                                                     ("flip", "kill-target-agent")]
    flip = rows[2]
    assert flip["count"] == 2 and flip["direct_p50"] == 2.0 and flip["direct_max"] == 3.0
    assert math.isinf(flip["router_max"]) and flip["hand_step_runs"] == 1 and flip["unsafe"] == 0
    assert rows[0]["unsafe"] == 1 and rows[0]["lost"] == 2
    assert rows[1]["unsafe"] == 1 and rows[1]["split_brain"] == 1
    s = phases.summary(runs)
    assert s["unsafe_runs"] == 2 and s["lost_router"] == 2 and s["hand_step_runs"] == 1
    assert s["ttw_router_max"] is None  # a writer that never got in: no finite maximum
    assert s["over_10s"] == 1
    assert s["worst"]["kind"] == "kill-target-agent" and s["worst"]["ttw_router_s"] is None
    assert "never" in phases.markdown(rows)


def test_a_move_refused_before_its_fault_counts_a_hand_step_and_no_time():
    runs = [run("delta", "kill-router", 0.5, 0.5),
            {"landed": "preflight", "kind": "kill-router", "blocked": True, "hand_steps": ["removed by hand"]}]
    rows = phases.table(runs)
    assert rows[0]["phase"] == "preflight" and rows[0]["hand_step_runs"] == 1 and rows[0]["unsafe"] == 0
    assert math.isnan(rows[0]["direct_max"])
    s = phases.summary(runs)
    assert s["ttw_direct_max"] == 0.5 and s["hand_step_runs"] == 1 and s["unsafe_runs"] == 0


def test_table_by_phase_sums_the_kinds():
    runs = [run("flip", "kill-target-agent", 1.0, 2.0), run("flip", "kill-router", 3.0, 0.5, router_failed=7),
            run("delta", "abort", 0.0, 0.0)]
    rows = phases.table(runs, by_kind=False)
    assert [(r["phase"], r["kind"], r["count"]) for r in rows] == [("delta", "all", 1), ("flip", "all", 2)]
    assert rows[1]["direct_max"] == 3.0 and rows[1]["router_max"] == 2.0 and rows[1]["router_failed"] == 7


def test_a_cli_that_quit_while_its_migration_went_on_is_counted():
    runs = [run("flip", "kill-source-agent", 0.1, 0.1, result="succeeded", cli_exit=6),
            run("flip", "kill-cli", 0.1, 0.1, result="succeeded", cli_exit=-9),
            run("delta", "abort", 0.0, 0.0, result="aborted", cli_exit=8)]
    assert phases.summary(runs)["cli_gave_up"] == 1


def test_the_shared_plan_aims_the_copy_tool_only_where_it_runs():
    cases = [c for s in (1, 2, 3) for c in phases.plan(60, s, phases.KINDS_SHARED)]
    tool = {c.aim for c in cases if c.kind == "kill-copy-tool"}
    assert tool == {"snapshot", "prepare"}
    pairs = {(c.aim, c.kind) for c in cases}
    assert len(pairs) == len(phases.AIMS) * len(phases.KINDS) + 2  # every other pair too


def test_a_neighbours_lost_write_is_unsafe_and_its_failures_are_charged_to_its_own_servers_kill():
    runs = [run("delta", "kill-source-server", 0.5, 0.5, lost_neighbours=0, neighbour_failed=7,
                neighbours_down=["nb1"], ttw_neighbours_s=12.0),
            run("flip", "kill-source-agent", 0.1, 0.1, lost_neighbours=1, neighbour_failed=2, neighbours_down=[])]
    assert not phases.unsafe(runs[0]) and phases.unsafe(runs[1])
    assert phases.table(runs)[1]["lost"] == 1
    s = phases.summary(runs)
    assert s["lost_neighbours"] == 1 and s["neighbour_failed"] == 9 and s["neighbour_failed_not_down"] == 2
    assert s["neighbour_ttw_max"] == 12.0 and s["neighbour_ttw_over_10s"] == 1
    assert "lost_neighbours" not in phases.summary([run("delta", "abort", 0.1, 0.1)])  # a whole server's runs
