"""The ready phase's loop (slacker.migration.ready) against a simulated source and target: the lag it reports is
end to end (a position not applied yet keeps its clock), it goes only in the plan's time with the target keeping
up or on --cutover-now, and a wait past its timeout ends as the operator chose."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from slacker.mariadb.ops import BinlogPosition
from slacker.migration import ready as ready_mod
from slacker.migration.cutover import CutoverPlan
from slacker.migration.options import MigrationAborted
from slacker.migration.protocol import Phase
from slacker.migration.ready import ReadyWait
from slacker.migration.seams import ReadyState

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc)


class World:
    """A source committing `tps` transactions a second and a target applying with `delay_s` of lag."""

    def __init__(self, delay_s: float = 0.01, tps: int = 100, step_s: float = 1.0) -> None:
        self.t = 0.0
        self.delay_s, self.tps = delay_s, tps
        self.states: list[ReadyState] = []
        self.phases: list[str] = []
        self.opts = type("Opts", (), {"step_s": step_s})()
        self.id = "m-1"
        self.source = self
        self.aborted = False
        self.on_step = None

    # the source
    def connect(self, timeout_s: float):
        return object()

    def seqno(self, t: float) -> int:
        return int(t * self.tps)

    def position(self) -> BinlogPosition:
        n = self.seqno(self.t)
        return BinlogPosition(f"0-1-{n}", "bin.000001", 1000 + 200 * n, (("bin.000001", 1000 + 200 * n),))

    # the seam
    def enter(self, phase) -> None:
        self.phases.append(phase)

    def check_abort(self) -> None:
        if self.aborted:
            raise MigrationAborted("aborted", "", "")

    def wait(self, seconds: float) -> None:
        self.t += seconds

    def record(self, state) -> None:
        self.states.append(state)
        if self.on_step is not None:
            self.on_step(self)

    def target(self, name: str, body: dict, timeout_s: float) -> dict:
        assert name == "wait" and body["probe"] is True
        wanted = int(body["gtid"].rsplit("-", 1)[1])
        # applied up to what the source had committed delay_s ago
        if self.seqno(self.t + body["timeout_s"] - self.delay_s) >= wanted:
            waited = max(0.002, min(body["timeout_s"], wanted / self.tps + self.delay_s - self.t))
            self.t += waited
            return {"caught_up": True, "waited_s": waited}
        self.t += body["timeout_s"]
        return {"caught_up": False, "waited_s": body["timeout_s"]}


@pytest.fixture
def world(monkeypatch):
    w = World()
    monkeypatch.setattr(ready_mod.ops, "binlog_position", lambda conn: w.position())
    monkeypatch.setattr(ready_mod.ops, "close_quietly", lambda conn: None)
    return w


def run(world, plan, *, asked_after: int | None = None, wall=lambda t: NOW + timedelta(seconds=t)):
    asked = threading.Event()
    if asked_after is not None:
        world.on_step = lambda w: asked.set() if len(w.states) >= asked_after else None
    r = ReadyWait(world, plan, ("bin.000001", 1000), asked, wall=lambda: wall(world.t), clock=lambda: world.t)
    return r.run()


def test_manual_waits_with_a_small_lag_until_cutover_now(world):
    why = run(world, CutoverPlan.parse("manual", now=NOW), asked_after=5)
    assert why == "--cutover-now" and world.phases == [Phase.READY]
    assert len(world.states) == 6
    s = world.states[-2]  # the last second it waited (the last one went)
    assert s.keeps_up and s.lag_ms <= 50 and s.lag_p99_ms <= 50
    assert s.waiting_for.startswith("waiting for `slacker migrate --cutover-now`")
    assert s.binlog_bytes > 0 and s.binlog_bytes_per_s == pytest.approx(200 * world.tps, rel=0.05)
    assert 4.0 <= s.ready_for_s <= 6.5  # about one second a step


def test_a_window_goes_at_once_when_the_target_keeps_up(world):
    assert "in its time" in run(world, CutoverPlan.parse("window=02:30-03:30", now=NOW))
    assert len(world.states) == 1


def test_a_lagging_target_never_cuts_over_in_its_window_and_the_timeout_aborts(world):
    world.delay_s = 30.0  # the target is half a minute behind and stays there
    plan = CutoverPlan.parse("window=02:30-03:30", "20s,abort", now=NOW)
    with pytest.raises(MigrationAborted, match="no cutover within --cutover-timeout"):
        run(world, plan)
    lags = [s.lag_ms for s in world.states]
    assert all(not s.keeps_up for s in world.states[2:])
    # the position read first keeps its clock: the lag grows second by second, it is not reset by each read
    assert lags[-1] > lags[2] > 1000
    assert "the target lags" in world.states[-2].waiting_for and world.states[-2].behind
    assert world.states[-1].ready_for_s >= 20


def test_wait_on_timeout_stays_ready_and_says_so(world):
    plan = CutoverPlan.parse("manual", "3s,wait", now=NOW)
    run(world, plan, asked_after=8)
    assert world.states[-2].past_timeout and "past its --cutover-timeout" in world.states[-2].waiting_for


def test_an_at_time_passed_while_lagging_only_waits_for_the_operator(world):
    world.delay_s = 30.0
    plan = CutoverPlan.parse("at=2026-12-02T03:00:05", now=NOW)
    run(world, plan, asked_after=700, wall=lambda t: NOW + timedelta(seconds=t))
    assert world.states[-1].lag_ms > 1000  # it never caught up, so it never went on its own
    assert any("passed without a cutover" in s.waiting_for for s in world.states)


def test_an_abort_while_ready_ends_the_wait(world):
    world.on_step = lambda w: setattr(w, "aborted", len(w.states) >= 3)
    with pytest.raises(MigrationAborted):
        run(world, CutoverPlan.parse("manual", now=NOW))
    assert len(world.states) == 3
