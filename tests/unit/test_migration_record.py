"""The migration machine stays small and its names say one thing each.

What happened in a migration lives in its record (slacker/migration/record.py); the machine
(slacker/migration/machine.py) keeps only what it needs to decide what happens next. Counted from
the source, so a field added to the machine instead of the record shows up here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from slacker.migration.record import MigrationRecord

from .migration_fakes import World, hand_over, migration_at_handover

SLACKER = Path(__file__).resolve().parents[2] / "slacker"
MACHINE = SLACKER / "migration" / "machine.py"
MAX_MACHINE_FIELDS = 30

# The migration's document (status, `slacker migrate --json`, GET /v1/migrations/ID), in its order.
DOCUMENT_KEYS = [
    "id", "tenant", "source", "target", "mode", "phase", "active", "result", "protocol", "error", "phases",
    "bytes_done", "bytes_total", "preread_bytes", "prereading", "rate_bytes_per_s", "unthrottled",
    "throughput_bytes_per_s", "eta_s", "rounds", "freeze_ms", "handover_steps_ms", "steps_ms", "copy_stages",
    "handover_attempts", "verified", "verify", "epoch_before", "epoch_after", "past_point_of_no_return",
    "finishing_reason", "waiting", "waited", "waiting_for", "handover_step", "holding", "directory_outage_s",
    "warnings", "recovered", "series_path", "pipe", "max_freeze_ms", "duration_s", "ready", "revert", "kept", "controller",
    "latency_source", "delta",
]


def fields_of(tree: ast.AST, class_name: str) -> set[str]:
    """Every `self.X` a class's methods assign."""
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    out = set()
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for e in ast.walk(t):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                        out.add(e.attr)
    return out


def classes_named(name: str) -> list[str]:
    files = [f for f in sorted(SLACKER.rglob("*.py")) if f"class {name}" in f.read_text()]  # parse only those
    return [f"{f.relative_to(SLACKER)}:{n.lineno}" for f in files
            for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef) and n.name == name]


def test_the_machine_keeps_at_most_thirty_fields():
    fields = fields_of(ast.parse(MACHINE.read_text()), "Migration")
    assert len(fields) <= MAX_MACHINE_FIELDS, sorted(fields)
    # what happened is the record's, not the machine's
    assert not fields & {"phases", "rounds", "attempts", "warnings", "waited", "freeze_ms", "error"}, sorted(fields)


def test_the_counter_sees_every_assignment():
    tree = ast.parse("class Migration:\n    def __init__(self):\n        self.a = 1\n        self.b: int = 2\n"
                     "    def later(self):\n        self.c += 1\n        self.d, (self.e, x) = 1, (2, 3)\n")
    assert fields_of(tree, "Migration") == {"a", "b", "c", "d", "e"}


def test_a_migration_constructed_has_no_more_fields_than_counted(tmp_path):
    m = migration_at_handover(World(), tmp_path)
    assert len(vars(m)) <= MAX_MACHINE_FIELDS, sorted(vars(m))


def test_the_document_keeps_its_keys_in_order_before_and_after_a_handover(tmp_path):
    m = migration_at_handover(World(), tmp_path)
    assert list(m.to_dict()) == DOCUMENT_KEYS
    hand_over(m)
    doc = m.to_dict()
    assert list(doc) == DOCUMENT_KEYS
    assert doc["result"] == "succeeded" and doc["past_point_of_no_return"] and doc["source"] == "node-1"
    assert [a["outcome"] for a in doc["handover_attempts"]] == ["flipped"]
    assert doc["phases"][-1]["name"] == "cleanup" and doc["epoch_after"] == doc["epoch_before"] + 1


def test_one_class_per_name():
    assert len(classes_named("ControllerStep")) == 1, classes_named("ControllerStep")


def test_the_model_shares_the_guards_with_the_pid_not_its_law():
    from slacker.controller import ModelController, PidController
    from slacker.controller.guarded import GuardedController

    assert not issubclass(ModelController, PidController)
    assert issubclass(ModelController, GuardedController) and issubclass(PidController, GuardedController)
    assert "_law" in vars(ModelController) and "_law" in vars(PidController)
    assert classes_named("ThrottleController") == []


def test_a_running_machines_result_is_announced_after_its_last_step(tmp_path):
    """The long poll (GET ...?wait=) answers on `ended`: while the machine runs, a result alone does not set it, so
    a caller reading the series right after the answer finds the last sample written."""
    rec = MigrationRecord("m-1", "t1", "node-1", tmp_path / "m-1.jsonl", protocol=2)
    rec.hold_end()
    rec.result = "succeeded"
    assert not rec.ended.is_set()
    rec.release_end()
    assert rec.ended.is_set()
    other = MigrationRecord("m-2", "t1", "node-1", tmp_path / "m-2.jsonl", protocol=2)
    other.result = "failed"  # no machine holding it: at once
    assert other.ended.is_set()
