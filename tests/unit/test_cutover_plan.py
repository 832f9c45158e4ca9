"""The cutover plan (`--cutover`, `--cutover-timeout`): what is refused at the edge, and what the ready phase
is told each second. Pure logic; the clock is passed in."""

from datetime import datetime, timedelta, timezone

import pytest

from slacker.errors import InvalidInput
from slacker.migration.cutover import AT_WINDOW_S, KEEPS_UP_LAG_S, CutoverPlan

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("spec, what", [
    ("at=2026-12-02T11:59", "in the past"),
    ("at=next tuesday", "not a time"),
    ("window=24:00-02:00", "malformed"),
    ("window=02:00", "malformed"),
    ("window=02:00-02:00", "empty"),
    ("window=02:00-03:00,Nowhere/City", "unknown time zone"),
    ("later", "not a cutover plan"),
    ("at=2027-02-01T00:00", "after the wait's timeout"),
])
def test_bad_plans_are_refused_with_one_line(spec, what):
    with pytest.raises(InvalidInput, match=what) as exc:
        CutoverPlan.parse(spec, now=NOW)
    assert "\n" not in str(exc.value)


def test_bad_timeouts_are_refused():
    for text, what in (("6h,later", "unknown action"), ("soon", "invalid duration"), ("0s", "out of range")):
        with pytest.raises(InvalidInput, match=what):
            CutoverPlan.parse("manual", text, now=NOW)


def test_a_moment_that_passed_on_the_way_is_taken_by_the_agent():
    plan = CutoverPlan.parse("at=2026-12-02T11:59", strict=False, now=NOW)
    assert plan.kind == "at" and plan.in_moment(NOW)


def test_manual_goes_only_when_asked_and_the_timeout_aborts_or_waits():
    plan = CutoverPlan.parse("manual", "1h,abort", now=NOW)
    assert not plan.decide(NOW, 10, 0.01, now_asked=False).go
    assert plan.decide(NOW, 10, 5.0, now_asked=True).go  # the operator looked: even a lagging target
    assert plan.decide(NOW, 3600, 0.01, now_asked=False).end == "abort"
    waiting = CutoverPlan.parse("manual", "1h,wait", now=NOW).decide(NOW, 7200, 0.01, now_asked=False)
    assert not waiting.go and not waiting.end and "past its --cutover-timeout" in waiting.why


def test_at_goes_in_its_ten_minutes_while_the_target_keeps_up_and_never_after():
    at = NOW + timedelta(minutes=5)
    plan = CutoverPlan.parse(f"at={at.isoformat()}", "24h,wait", now=NOW)
    assert not plan.decide(NOW, 0, 0.0, now_asked=False).go
    assert plan.decide(at, 0, 0.0, now_asked=False).go
    lagging = plan.decide(at, 0, KEEPS_UP_LAG_S * 2, now_asked=False)
    assert not lagging.go and "lags" in lagging.why
    late = at + timedelta(seconds=AT_WINDOW_S)
    assert not plan.decide(late, 0, 0.0, now_asked=False).go  # a silent cutover later is what #414 warns of


def test_a_window_in_its_zone_spans_midnight_and_a_lagging_target_waits_for_the_next():
    plan = CutoverPlan.parse("window=23:30-00:30,Europe/Berlin", now=NOW)  # UTC+1 in December
    inside = datetime(2026, 12, 2, 23, 0, tzinfo=timezone.utc)  # 00:00 in Berlin
    assert plan.in_moment(inside) and plan.in_moment(datetime(2026, 12, 2, 22, 45, tzinfo=timezone.utc))
    assert not plan.in_moment(datetime(2026, 12, 2, 23, 30, tzinfo=timezone.utc))
    assert not plan.in_moment(NOW)
    assert plan.decide(inside, 60, 0.1, now_asked=False).go
    assert not plan.decide(inside, 60, None, now_asked=False).go  # no lag measured yet: not known to keep up
    assert not plan.decide(inside, 60, 3.0, now_asked=False).go


def test_the_plan_round_trips_through_its_spec():
    for spec in ("auto", "manual", "window=02:00-04:00,UTC", "at=2026-12-02T13:00:00+00:00"):
        plan = CutoverPlan.parse(spec, "6h,wait", now=NOW)
        again = CutoverPlan.parse(plan.spec(), plan.timeout_spec(), now=NOW)
        assert again == plan


@pytest.mark.parametrize("args, says", [
    (["--abort", "t42", "--cutover-now"], "--abort and --cutover-now exclude each other"),
    (["--finish", "t42", "--set", "pause"], "--finish and --set exclude each other"),
    (["--abort", "t42", "--verify"], "--verify does not apply to --abort"),
])
def test_actions_on_a_running_migration_are_checked_before_any_node_is_asked(args, says, tmp_path):
    from click.testing import CliRunner

    from slacker.cli import main

    r = CliRunner().invoke(main, ["--cluster", str(tmp_path / "none.toml"), "migrate", *args])
    assert r.exit_code == 2 and says in r.output, r.output
