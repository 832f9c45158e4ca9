"""Which code may change a migration: the machine alone (slacker/migration/seams.py).

The roles get a read-only Seam and hand back typed results; nothing outside machine.py assigns the
migration's fields or reaches its private members, and every field is set in Migration.__init__.
Read from the source, so a role that starts writing `m.x = ...` again fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from slacker.migration.seams import RoundDone, Seam

SLACKER = Path(__file__).resolve().parents[2] / "slacker"
MACHINE = SLACKER / "migration" / "machine.py"
NAMES = {"m", "migration"}  # what the roles and the bolt-on sites call the migration


def _is_migration(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in NAMES and isinstance(node.value, ast.Name)
        and node.value.id == "self")


def reaches(tree: ast.AST, file: str) -> list[str]:
    """Assignments to the migration's fields, in-place changes of them, and reaches of its private members."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            places = list(n.targets if isinstance(n, ast.Assign) else [n.target])
            while places:
                p = places.pop()
                if isinstance(p, (ast.Tuple, ast.List)):
                    places += p.elts
                elif isinstance(p, ast.Attribute) and _is_migration(p.value):
                    out.append(f"{file}:{n.lineno} assigns .{p.attr}")
                elif isinstance(p, ast.Subscript) and isinstance(p.value, ast.Attribute) and _is_migration(p.value.value):
                    out.append(f"{file}:{n.lineno} changes .{p.value.attr}[...]")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend") \
                and isinstance(n.func.value, ast.Attribute) and _is_migration(n.func.value.value):
            out.append(f"{file}:{n.lineno} changes .{n.func.value.attr}")
        elif isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__") \
                and _is_migration(n.value):
            out.append(f"{file}:{n.lineno} reaches .{n.attr}")
    return out


def test_no_module_but_the_machine_changes_a_migration_or_reaches_inside_it():
    found = []
    for f in sorted(SLACKER.rglob("*.py")):
        if f != MACHINE:
            found += reaches(ast.parse(f.read_text()), str(f.relative_to(SLACKER)))
    assert found == []


def test_the_reader_sees_a_role_that_writes_or_reaches_in():
    bad = ast.parse("m.freeze_ms = 1\nm.rounds.append(r)\nself.m._cas_started = True\nmigration.paused_rate = 0\n"
                    "m.delta_stats['x'] = 1\nm.record(RoundDone(r))\nx = m.phase\n")
    assert sorted(reaches(bad, "bad.py")) == [
        "bad.py:1 assigns .freeze_ms", "bad.py:2 changes .rounds", "bad.py:3 assigns ._cas_started",
        "bad.py:3 reaches ._cas_started", "bad.py:4 assigns .paused_rate", "bad.py:5 changes .delta_stats[...]"]


def test_every_field_of_the_migration_is_set_in_its_init():
    cls = next(n for n in ast.parse(MACHINE.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "Migration")
    fields: dict[str, set] = {}
    for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef)):
        for n in ast.walk(fn):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    for e in ast.walk(t):
                        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                            fields.setdefault(fn.name, set()).add(e.attr)
    later = set().union(*(v for k, v in fields.items() if k != "__init__")) - fields["__init__"]
    assert later == set(), f"first set outside __init__: {sorted(later)}"


def test_a_role_reads_through_the_seam_and_cannot_assign():
    recorded = []
    record = SimpleNamespace(phase="delta", rounds=[1, 2], delta_stats={"mpl": 4})
    machine = SimpleNamespace(record=record, decided=recorded.append)
    seam = Seam(machine)
    assert seam.phase == "delta" and seam.rounds_done == 2
    seam.delta_stats["mpl"] = 9  # a copy: the record's own is untouched
    assert record.delta_stats == {"mpl": 4}
    with pytest.raises(AttributeError, match="cannot set"):
        seam.phase = "handover"
    seam.record(RoundDone(report=None))
    assert recorded == [RoundDone(report=None)]
