"""The protocol's tables held against the code that moves through them.

slacker.migration.protocol declares the phases and both sides' states; the phase machine, its roles
and the target's incoming migration move through them by name (Phase.X, SourceState.X,
TargetState.X). Read from the source files themselves: every state of each table is one the code
enters, the code enters none that is not in the table, and no phase or state is spelt as a bare
string where a phase or a state is meant, so the table and the code cannot drift apart unnoticed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from slacker.migration.protocol import PHASE_MOVES, SOURCE_MOVES, TARGET_MOVES, Phase, SourceState, TargetState

MIGRATION = Path(__file__).resolve().parents[2] / "slacker" / "migration"
ENUMS = {"Phase": Phase, "SourceState": SourceState, "TargetState": TargetState}
VALUES = {s.value for e in ENUMS.values() for s in e}


def _trees() -> dict[str, ast.AST]:
    return {p.name: ast.parse(p.read_text()) for p in sorted(MIGRATION.glob("*.py")) if p.name != "protocol.py"}


def _member(node: ast.AST):
    """Phase.DELTA -> Phase.DELTA (the enum member), anything else -> None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ENUMS:
        return ENUMS[node.value.id][node.attr]
    return None


def _calls(name: str):
    """(file, the call's arguments and keywords) of every call of a method or function `name`."""
    for file, tree in _trees().items():
        for n in ast.walk(tree):
            if isinstance(n, ast.Call):
                f = n.func
                if (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name):
                    yield file, n


def entered() -> dict[type, set]:
    """What the code moves each side into: phases begun, journal states written, target states taken."""
    out: dict[type, set] = {Phase: set(), SourceState: set(), TargetState: set()}
    for _, call in _calls("enter"):
        out[Phase] |= {m for m in map(_member, call.args) if m is not None}
    for file, tree in _trees().items():
        for n in ast.walk(tree):
            # the machine's first phase: self.phase = Phase.PENDING
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "phase" for t in n.targets):
                if (m := _member(n.value)) is not None:
                    out[Phase].add(m)
            # a journal entry's state (Entry(...), journal.update(...)): the source's, or the target's first
            if isinstance(n, ast.keyword) and n.arg == "state" and (m := _member(n.value)) is not None:
                out[type(m)].add(m)
    for _, call in _calls("_move"):
        out[TargetState] |= {m for m in map(_member, call.args) if m is not None}
    return out


def test_every_phase_and_state_of_the_tables_is_one_the_code_enters_and_no_other():
    got = entered()
    for enum, table in ((Phase, PHASE_MOVES), (SourceState, SOURCE_MOVES), (TargetState, TARGET_MOVES)):
        assert got[enum] == set(table), f"{enum.__name__}: the code enters {sorted(got[enum])}, the table has {sorted(table)}"


def test_every_state_the_code_enters_is_reachable_in_its_table():
    for table, first in ((PHASE_MOVES, Phase.PENDING), (SOURCE_MOVES, SourceState.STARTED),
                         (TARGET_MOVES, TargetState.RECEIVING)):
        seen, todo = {first}, [first]
        while todo:
            for to in table[todo.pop()]:
                if to not in seen:
                    seen.add(to)
                    todo.append(to)
        assert seen == set(table), f"unreachable from {first}: {sorted(set(table) - seen)}"


def _is_phase_or_state(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("phase", "state")


def bare_literals(trees: dict[str, ast.AST]) -> list[str]:
    """Phase or state names spelt as strings where a phase or state is meant: passed as phase= or state=,
    to enter/_move/_require, or compared with a .phase or .state."""
    out = []

    def lits(node):
        return [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in VALUES]

    for file, tree in trees.items():
        for n in ast.walk(tree):
            found = []
            if isinstance(n, ast.keyword) and n.arg in ("phase", "state"):
                found = lits(n.value)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in (
                    "enter", "_move", "_require"):
                found = [c for a in n.args for c in lits(a)]
            elif isinstance(n, ast.Compare) and any(map(_is_phase_or_state, [n.left, *n.comparators])):
                found = [c for side in [n.left, *n.comparators] for c in lits(side)]
            elif isinstance(n, ast.Assign) and any(map(_is_phase_or_state, n.targets)):
                found = lits(n.value)
            out += [f"{file}:{c.lineno} {c.value!r}" for c in found]
    return out


def test_no_phase_or_state_is_a_bare_string_in_the_migration_package():
    assert bare_literals(_trees()) == []


def test_the_reader_sees_a_bare_phase_or_state_and_lets_other_strings_be():
    bad = ast.parse('m.enter("delta")\nif self.state == "owned": pass\nraise X("", phase="verify")\n'
                    'j.update(e, state="fenced")\nm.peer.step("verify", {})\nrecord("flipped", 1.0)\n')
    assert bare_literals({"bad.py": bad}) == ["bad.py:1 'delta'", "bad.py:2 'owned'", "bad.py:3 'verify'",
                                              "bad.py:4 'fenced'"]
