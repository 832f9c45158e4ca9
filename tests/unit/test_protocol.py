"""The migration protocol with fake peers: the transition tables, the handover step by step, and every
fault of the handover's matrix (an error, or a lost reply, at each step before and after the
compare-and-set), one at a time and in random combinations.

The phase machine, handover, flip and journal are the real ones (slacker.migration); the source
server, the target agent and the directory are fakes in memory (migration_fakes.py). Each scenario
ends with the invariants a user relies on: exactly one writable server and it is the one the
directory names, no commit on the source after the final position the target reached, no rollback
once the directory names the target, and no journal left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slacker.migration import protocol
from slacker.migration.protocol import (PHASE_MOVES, SOURCE_MOVES, TARGET_MOVES, IllegalTransition, Phase,
                                        SourceState, TargetState, check, check_journal)

from .migration_fakes import (FAULT_KINDS, STEPS, World, end_state_violations, hand_over, migration_at_handover,
                              settle)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migration.md"


# ---- the tables -----------------------------------------------------------------
def test_every_state_of_each_side_is_in_its_table_and_every_move_names_a_reason():
    for table, enum in ((PHASE_MOVES, Phase), (SOURCE_MOVES, SourceState), (TARGET_MOVES, TargetState)):
        assert set(table) == set(enum)
        for frm, moves in table.items():
            assert all(isinstance(to, enum) and why for to, why in moves.items()), frm


def test_an_illegal_transition_names_both_states():
    with pytest.raises(IllegalTransition) as info:
        check(SOURCE_MOVES, "flipped", "started", "the source's journal")
    assert "flipped" in info.value.what and "started" in info.value.what
    with pytest.raises(IllegalTransition):
        check(TARGET_MOVES, "receiving", "owned", "incoming migration m1")  # a flip to an unready target
    with pytest.raises(IllegalTransition):
        check_journal("target", "receiving", "catching-up")  # not a journaled state
    check(PHASE_MOVES, "handover", "handover", "m1")  # staying put is allowed


def test_the_point_of_no_return_has_no_way_back_in_the_tables():
    assert SourceState.STARTED not in SOURCE_MOVES[SourceState.FLIPPED]
    assert not SOURCE_MOVES[SourceState.FLIPPED]
    assert not TARGET_MOVES[TargetState.OWNED]
    assert Phase.DELTA not in PHASE_MOVES[Phase.CLEANUP] and Phase.DELTA not in PHASE_MOVES[Phase.FINISHING]


def test_the_docs_show_the_protocol_as_the_code_declares_it():
    assert protocol.markdown() in DOCS.read_text(), "regenerate with: python -m slacker.migration.protocol"


# ---- the handover, step by step -------------------------------------------------------
def _run(tmp_path, world: World, **options):
    m = migration_at_handover(world, tmp_path, **options)
    hand_over(m)
    settle(world)
    return m


def test_a_handover_without_faults_flips_once_and_leaves_the_target_the_only_writable(tmp_path):
    w = World()
    m = _run(tmp_path, w)
    assert m.result == "succeeded", m.record.error
    assert (w.owner, w.epoch) == ("node-2", 2)
    assert w.applied == w.final and w.retired
    assert [a.outcome for a in m.record.attempts] == ["flipped"]
    assert list(m.record.handover_steps_ms) == ["locked", "caught_up", "target_ready", "fenced", "flipped"]
    assert end_state_violations(w, m) == []


def test_a_lock_not_granted_is_retried_after_more_rounds_then_fails_with_the_source_serving(tmp_path):
    w = World(lock_not_granted=1)
    m = _run(tmp_path, w)
    assert m.result == "succeeded", m.record.error
    assert [a.outcome for a in m.record.attempts] == ["over budget", "flipped"]
    w = World(lock_not_granted=3)
    m = _run(tmp_path, w)
    assert m.result == "failed" and "did not fit" in m.record.error.what and "lock: not granted" in m.record.error.why
    assert w.owner == "node-1" and end_state_violations(w, m) == []


def test_a_slow_catch_up_is_over_budget_and_retried(tmp_path):
    w = World(slow_catch_up=1)
    m = _run(tmp_path, w)
    assert m.result == "succeeded", m.record.error
    assert [a.outcome for a in m.record.attempts] == ["over budget", "flipped"]
    assert w.target_state == "owned" and end_state_violations(w, m) == []


def test_a_directory_too_slow_for_the_budget_left_is_never_flipped_past_the_bound(tmp_path):
    # Its answer is the end of the freeze, and a flip sent cannot be taken back: an attempt that has
    # less time left than the directory's measured round trip gives up before the flip.
    w = World(slow_directory_s=0.15)
    m = _run(tmp_path, w, max_freeze_s=0.1)
    assert m.result == "failed" and "did not fit" in m.record.error.what, m.record.error
    assert "flip reached" in m.record.error.why and "needed" in m.record.error.why
    assert w.owner == "node-1" and w.epoch == 1 and end_state_violations(w, m) == []
    w = World(slow_directory_s=0.02)  # one that fits: the freeze, to its answer, stays within the bound
    m = _run(tmp_path, w, max_freeze_s=0.25)
    assert m.result == "succeeded", m.record.error
    assert all(a.freeze_ms <= 250 for a in m.record.attempts), m.record.attempts


def test_a_long_transaction_is_waited_for_outside_the_freeze_then_fails(tmp_path):
    w = World(blockers=[["connection 9 (user app): transaction open 12.0s"]] * 100)
    m = _run(tmp_path, w, handover_wait_s=0.2)
    assert m.result == "failed" and "--handover-wait" in m.record.error.what and "connection 9" in m.record.error.why
    assert m.record.attempts == [] and not w.fired  # never frozen
    assert end_state_violations(w, m) == []


def test_the_journal_refuses_a_move_the_protocol_does_not_have(tmp_path):
    w = World()
    m = migration_at_handover(w, tmp_path)
    with pytest.raises(IllegalTransition):
        m.journal.update(m.entry, state="flipped")  # started -> flipped skips the fence and the flip


# ---- faults: each step, each kind -----------------------------------------------------
@pytest.mark.parametrize("kind", FAULT_KINDS)
@pytest.mark.parametrize("step", STEPS)
def test_one_fault_at_any_step_ends_with_one_writable_owner_and_nothing_lost(tmp_path, step, kind):
    w = World(faults={step: kind})
    m = _run(tmp_path, w)
    assert end_state_violations(w, m) == [], (w.fired, m.result, m.record.error)
    if w.owner == "node-2":
        assert w.applied == w.final, "acknowledged commits missing on the new owner"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(faults=st.dictionaries(st.sampled_from(STEPS), st.sampled_from(FAULT_KINDS), max_size=4),
       not_granted=st.integers(0, 3), slow=st.integers(0, 3))
def test_no_sequence_of_faults_yields_two_owners_or_a_rollback_past_the_flip(tmp_path, faults, not_granted, slow):
    w = World(faults=dict(faults), lock_not_granted=not_granted, slow_catch_up=slow)
    m = _run(tmp_path, w)
    assert end_state_violations(w, m) == [], (w.fired, m.result, m.record.error)
