"""bench/ is one tool: every bench in bench/run's registry imports, answers --help and has its row in
docs/bench.md, and no bench reaches into tests/ or edits sys.path."""

from __future__ import annotations

import importlib
import re
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHES = runpy.run_path(str(REPO / "bench" / "run"))["BENCHES"]


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_bench_answers_help(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"bench/run {name}", "--help"])
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(BENCHES[name]).main()
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_every_bench_has_its_row_in_docs_bench_md():
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", (REPO / "docs" / "bench.md").read_text(), re.M))
    assert rows == set(BENCHES)


def test_no_bench_edits_sys_path_or_imports_from_tests():
    offenders = []
    for path in [REPO / "bench" / "run", *(REPO / "bench").rglob("*.py")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"sys\.path\.(insert|append)|^\s*(from|import) tests\b", line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_one_layout_a_package_per_bench_with_main_py():
    for name, module in BENCHES.items():
        assert module == f"benches.{name}.main", name
        assert (REPO / "bench" / "benches" / name / "main.py").is_file(), name
    assert not list((REPO / "bench").glob("*lib"))
    assert not list((REPO / "bench" / "benches").glob("*.py"))  # no flat bench files beside the packages
    assert not list((REPO / "bench").rglob("cli.py"))


def test_every_repository_path_a_bench_module_names_exists():
    """A bench that moved must not point at the old place (the setpoint runner's workload did)."""
    missing = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        rel = path.relative_to(REPO / "bench").with_suffix("")
        if "__pycache__" in rel.parts:
            continue
        module = importlib.import_module(".".join(p for p in rel.parts if p != "__init__"))
        for name, value in vars(module).items():
            if not name.startswith("__") and isinstance(value, (str, Path)) \
                    and str(value).startswith(str(REPO) + "/") \
                    and not Path(value).exists():
                missing.append(f"{rel}.{name} = {value}")
    assert missing == []
