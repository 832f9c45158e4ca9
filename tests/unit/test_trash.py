"""Crash-atomic removal (slacker/trash.py): trash names, and what a crash at any step leaves."""

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slacker import trash
from slacker.trash import TrashName

FIELD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1,
                max_size=40)


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler sees it."""


@given(kind=FIELD, subject=FIELD, reason=FIELD, migration=st.one_of(st.just(""), FIELD), stamp=FIELD)
def test_a_trash_name_says_what_it_was(kind, subject, reason, migration, stamp):
    name = TrashName(kind, subject, reason, migration, stamp)
    text = name.format()
    assert "/" not in text and len(text.split(trash.SEP)) == 5
    back = TrashName.parse(text)
    if migration == "-":  # "-" stands for "no migration" in a name
        assert back == TrashName(kind, subject, reason, "", stamp)
    else:
        assert back == name


@pytest.mark.parametrize("text", ["evch", "a~b~c", "tenant~evch~retired~-~x~y", "tenant~~retired~-~x",
                                  "tenant~ev ch~retired~-~x"])
def test_a_name_of_another_shape_is_not_guessed_at(text):
    assert TrashName.parse(text) is None


@pytest.mark.parametrize("bad", ["", "a/b", "a~b", "a b"])
def test_a_field_that_could_break_the_name_is_refused(bad):
    with pytest.raises(ValueError):
        TrashName("tenant", bad, "retired")


def test_as_field_makes_any_name_usable():
    assert trash.as_field("evch") == "evch"
    assert trash.as_field("a b/c") == "unnamed"
    TrashName("tenant", trash.as_field("wéird name"), "unknown")


def tenant_tree(root: Path, files: int = 20) -> set[str]:
    (root / "data" / "db").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "tenant.json").write_text("{}")
    for i in range(files):
        (root / "data" / "db" / f"t{i}.ibd").write_bytes(b"x" * 100)
    (root / "secrets" / "admin.password").write_text("pw")
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def contents(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_discard_removes_the_directory_and_leaves_no_trash(tmp_path):
    tenant_tree(tmp_path / "evch")
    dest = trash.discard(tmp_path / "evch", TrashName("tenant", "evch", "retired", "evch-20261127T1-ab12"))
    assert dest.parent == tmp_path / trash.TRASH and "retired" in dest.name and "evch-20261127T1-ab12" in dest.name
    assert sorted(os.listdir(tmp_path)) == [trash.TRASH] and os.listdir(tmp_path / trash.TRASH) == []
    assert trash.discard(tmp_path / "evch", TrashName("tenant", "evch", "retired")) is None  # nothing to do


@pytest.mark.parametrize("step", ["renamed", "removing"])
def test_a_kill_at_either_step_leaves_a_trash_entry_the_sweep_finishes(tmp_path, step):
    tenant_tree(tmp_path / "evch")

    def pause(at):
        if at == step:
            raise Killed()

    with pytest.raises(Killed):
        trash.discard(tmp_path / "evch", TrashName("tenant", "evch", "retired", "m1"), pause)
    assert not (tmp_path / "evch").exists(), "the tenant's name is free from the rename on"
    [left] = os.listdir(tmp_path / trash.TRASH)
    assert TrashName.parse(left).describe() == "tenant evch (retired, migration m1)"
    if step == "removing":
        assert 0 < len(contents(tmp_path / trash.TRASH / left)) < 24, "killed midway: partly removed"
    assert trash.sweep(tmp_path) == [left]
    assert os.listdir(tmp_path / trash.TRASH) == []
    assert trash.sweep(tmp_path) == []


@settings(max_examples=60, deadline=None)
@given(files=st.integers(0, 30), kill_after=st.integers(0, 40), data=st.data())
def test_a_kill_anywhere_leaves_the_directory_whole_or_gone(tmp_path_factory, files, kill_after, data):
    """Whatever filesystem call the kill lands before, the old name holds every file or nothing,
    and one sweep leaves nothing behind."""
    parent = tmp_path_factory.mktemp("p")
    whole = tenant_tree(parent / "t1", files)
    calls = {"n": 0}
    real = {name: getattr(os, name) for name in ("rename", "unlink", "rmdir")}

    def counting(name):
        def call(*a, **kw):
            if calls["n"] >= kill_after:
                raise Killed()
            calls["n"] += 1
            return real[name](*a, **kw)
        return call

    mp = pytest.MonkeyPatch()
    for name in real:
        mp.setattr(os, name, counting(name))
    try:
        trash.discard(parent / "t1", TrashName("tenant", "t1", "deleted"))
    except Killed:
        pass
    finally:
        mp.undo()
    trash.sweep(parent)
    if (parent / "t1").exists():
        assert contents(parent / "t1") == whole
    else:
        assert os.listdir(parent) == [trash.TRASH] and os.listdir(parent / trash.TRASH) == []


def test_sweep_leaves_an_entry_being_removed_by_this_process(tmp_path):
    seen = []

    def pause(at):
        if at == "renamed":
            seen.append(trash.sweep(tmp_path))

    tenant_tree(tmp_path / "evch")
    trash.discard(tmp_path / "evch", TrashName("tenant", "evch", "retired"), pause)
    assert seen == [[]]
    assert os.listdir(tmp_path / trash.TRASH) == []


def test_removal_does_not_follow_a_symlink_out_of_the_tree(tmp_path):
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "precious").write_text("x")
    tenant_tree(tmp_path / "t1")
    (tmp_path / "t1" / "link").symlink_to(outside)
    trash.discard(tmp_path / "t1", TrashName("tenant", "t1", "deleted"))
    assert (outside / "precious").read_text() == "x"
    assert not (tmp_path / "t1").exists()


def test_a_build_appears_whole_or_is_swept_at_start(tmp_path):
    built = trash.building_dir(tmp_path, "t1")
    (built / "tenant.json").write_text("{}")
    trash.put_in_place(built, tmp_path / "t1")
    assert (tmp_path / "t1" / "tenant.json").exists()
    half = trash.building_dir(tmp_path, "t2")
    (half / "secrets").mkdir()
    occupied = tmp_path / "t3"
    occupied.mkdir()
    (occupied / "x").write_text("x")
    with pytest.raises(OSError):
        trash.put_in_place(trash.building_dir(tmp_path, "t3"), occupied)
    assert (occupied / "x").exists()
    assert len(trash.sweep_building(tmp_path)) == 2
    assert os.listdir(tmp_path / trash.BUILDING) == []
    assert not (tmp_path / "t2").exists()


def test_quarantine_keeps_every_file_and_lists_it(tmp_path):
    whole = tenant_tree(tmp_path / "evch")
    (tmp_path / "evch" / "tenant.json").unlink()
    dest = trash.quarantine(tmp_path / "evch", TrashName("tenant", "evch", "unknown"))
    assert not (tmp_path / "evch").exists()
    assert contents(dest) == whole - {"tenant.json"}
    [q] = trash.quarantined(tmp_path)
    assert q["path"] == str(dest) and q["subject"] == "evch" and q["bytes"] == 20 * 100 + 2


def test_a_trash_entry_that_is_a_symlink_is_unlinked_not_followed(tmp_path):
    """A tenant directory that was a symlink (say, to another disk) and went to the trash: the sweep
    removes the link; the files it points at are not this removal's to delete."""
    outside = tmp_path / "elsewhere"
    whole = tenant_tree(outside)
    parent = tmp_path / "tenants"
    parent.mkdir()
    (parent / "t1").symlink_to(outside)
    trash.discard(parent / "t1", TrashName("tenant", "t1", "retired"))
    assert contents(outside) == whole
    assert os.listdir(parent / trash.TRASH) == []
    stray = parent / trash.TRASH / TrashName("tenant", "t2", "retired").format()
    stray.symlink_to(outside)
    assert trash.sweep(parent) == [stray.name]
    assert contents(outside) == whole and not os.path.lexists(stray)
    staging = parent / trash.BUILDING
    staging.mkdir()
    (staging / "t3~x").symlink_to(outside)
    trash.sweep_building(parent)
    assert contents(outside) == whole


def test_set_aside_frees_the_name_at_once_and_a_sweep_waits_for_its_finish(tmp_path):
    """A migration's source: the old copy set aside before the result, deleted after it. Until it is
    finished a sweep of this process leaves it; finished, nothing is left; a crash before the finish
    (the entry not finished in this process) leaves it to a sweep."""
    whole = tenant_tree(tmp_path / "evch")
    pending = trash.set_aside(tmp_path / "evch", TrashName("tenant", "evch", "retired", "m1"))
    assert not (tmp_path / "evch").exists(), "the tenant's name is free once set aside"
    [left] = os.listdir(tmp_path / trash.TRASH)
    assert contents(tmp_path / trash.TRASH / left) == whole, "nothing deleted before the finish"
    assert trash.sweep(tmp_path) == [] and os.listdir(tmp_path / trash.TRASH) == [left]
    assert pending.finish() == tmp_path / trash.TRASH / left
    assert os.listdir(tmp_path / trash.TRASH) == []
    assert trash.set_aside(tmp_path / "evch", TrashName("tenant", "evch", "retired")) is None

    tenant_tree(tmp_path / "evch")
    crashed = trash.set_aside(tmp_path / "evch", TrashName("tenant", "evch", "retired", "m2"))
    with trash._active_lock:  # what a restarted process knows of it: nothing
        trash._active.discard(str(crashed.entry))
    assert trash.sweep(tmp_path) == [crashed.entry.name] and os.listdir(tmp_path / trash.TRASH) == []
