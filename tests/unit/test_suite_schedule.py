"""How scripts/test schedules the suite: on pytest-xdist workers with --dist loadgroup, a module whose tests
share one cluster (an `xdist_group` mark) runs on one worker, so the cluster is made once. pytest 9.2 broke
this silently (the group never reached xdist's scheduler: each worker built its own cluster, and two built
the same wheel in one directory at once); this holds the pinned versions to it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import _kind

GROUPED = textwrap.dedent('''
    import os
    import pytest

    pytestmark = pytest.mark.xdist_group("one_cluster")

    @pytest.fixture(scope="module")
    def cluster():
        with open(os.environ["SETUPS"], "a") as f:
            f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
        yield

    def test_a(cluster): pass
    def test_b(cluster): pass
    def test_c(cluster): pass
''')


def test_a_group_of_tests_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_plain.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(6)))
    setups = tmp_path / "setups"
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
                        "--dist", "loadgroup", str(tmp_path)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={"SETUPS": str(setups), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "9 passed" in p.stdout, p.stdout
    assert len(setups.read_text().split()) == 1, f"the group's cluster was made on {setups.read_text().split()}"


def test_the_kinds_of_test_and_their_order():
    assert _kind("tests/integration/test_fleet.py::test_x", {"slow"}) == "slow"
    assert _kind("tests/integration/test_fleet.py::test_x", {"integration"}) == "integration"
    assert _kind("tests/unit/test_units.py::test_x", set()) == "unit"


def test_every_module_that_shares_a_fixture_keeps_its_tests_on_one_worker():
    """A module-scoped fixture (a cluster its tests share, often in order) without an xdist_group mark is
    made again on each worker its tests land on, and a test that counts on an earlier one's state fails."""
    root = Path(__file__).resolve().parents[1] / "integration"
    bare = [p.name for p in sorted(root.glob("test_*.py"))
            if re.search(r"scope=\"(module|session|package)\"", p.read_text()) and "xdist_group" not in p.read_text()]
    assert bare == [], f"modules sharing a fixture without pytest.mark.xdist_group: {bare}"
