"""The whole suite's schedule and its time budget.

Tests run side by side on pytest-xdist workers (scripts/test). They are handed out longest first, so the run
does not end waiting on one long test that started last, and the budget each kind of test has is checked
once the run ends: the tests over it are listed (a report, not a failure: a time bound would flake on a
busy machine). The budget is written down in README.md ("Tests and benchmarks").
"""

from __future__ import annotations

import time

# Seconds a test may take, by kind: a unit test computes, an integration test starts real servers; a test
# marked `slow` (a drain, a story of many commands) has the larger budget and is started first.
BUDGET_S = {"unit": 3.0, "integration": 45.0, "slow": 150.0}
SUITE_BUDGET_S = 25 * 60  # the whole verdict, install included (CI on 2 cores)
_RANK = {"slow": 0, "integration": 1, "unit": 2}

_started = time.monotonic()
_took: dict[str, float] = {}         # test -> seconds of its setup, call and teardown so far
_over: list[tuple[float, str, str]] = []


def _kind(nodeid: str, markers) -> str:
    if "slow" in markers:
        return "slow"
    return "integration" if "integration/" in nodeid.replace("\\", "/") else "unit"


def pytest_collection_modifyitems(config, items):
    # Stable: within a kind, the files' own order.
    items.sort(key=lambda item: _RANK[_kind(item.nodeid, {m.name for m in item.iter_markers()})])


def pytest_runtest_logreport(report):
    """Where the reports arrive (the controller, under xdist): each test's setup, call and teardown."""
    _took[report.nodeid] = _took.get(report.nodeid, 0.0) + report.duration
    if report.when == "teardown":
        kind = _kind(report.nodeid, report.keywords)
        if _took[report.nodeid] > BUDGET_S[kind]:
            _over.append((_took[report.nodeid], report.nodeid, kind))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if _over:
        tr.section("over their time budget (README.md, Tests and benchmarks)")
        for took, nodeid, kind in sorted(_over, reverse=True):
            tr.write_line(f"{took:7.1f} s  {nodeid}  ({kind}: {BUDGET_S[kind]:.0f} s)")
    if len(_took) > 500:  # the whole suite, not a file or two
        wall = time.monotonic() - _started
        verdict = "within" if wall <= SUITE_BUDGET_S else "OVER"
        tr.write_line(f"suite wall time {wall / 60:.1f} min: {verdict} the budget of {SUITE_BUDGET_S / 60:.0f} min "
                      "(install not counted)")
