"""The delta phase's convergence verdict, on made-up round rates."""

from __future__ import annotations

from slacker.delta import make_applier, parse_mpl
from slacker.delta.convergence import ConvergenceJudge
from slacker.errors import InvalidInput

import pytest


def applier(best, explored=True, mpl=6, kind="concurrent"):
    return {"applier": kind, "apply_tps": best, "best_apply_tps": best, "best_mpl": mpl, "mpl": mpl,
            "explored": explored}


def test_writes_above_the_best_apply_rate_fail_with_both_rates():
    j = ConvergenceJudge()
    assert j.observe(1, None, applier(5200)) is None          # first round: no write rate yet
    assert j.observe(2, 6100, applier(5200)) is None
    msg = j.observe(3, 6100, applier(5200))
    assert msg == ("writes 6,100/s > apply 5,200/s at best MPL 6: the delta cannot converge; "
                   "migrate at a quieter time or move load first")


def test_no_verdict_while_the_mpl_search_is_unfinished_until_patience_runs_out():
    j = ConvergenceJudge(min_rounds=3, patience_rounds=6)
    verdicts = [j.observe(n, 6000, applier(4000, explored=False)) for n in range(1, 7)]
    assert verdicts[:5] == [None] * 5
    assert verdicts[5] is not None and "writes 6,000/s > apply 4,000/s" in verdicts[5]


def test_an_applier_that_keeps_up_is_never_failed():
    j = ConvergenceJudge()
    assert all(j.observe(n, 3000, applier(5000)) is None for n in range(1, 30))


def test_one_slow_round_is_not_enough():
    j = ConvergenceJudge(slower_rounds=2)
    rates = [3000, 3000, 6000, 3000, 6000, 3000]
    assert all(j.observe(n, w, applier(5000)) is None for n, w in enumerate(rates, 1))


def test_serial_applier_message_names_it():
    j = ConvergenceJudge()
    out = [j.observe(n, 2000, applier(1400, kind="serial", mpl=0)) for n in range(1, 4)]
    assert out[-1].startswith("writes 2,000/s > apply 1,400/s with the serial applier:")


def test_unmeasured_applier_gives_no_verdict():
    j = ConvergenceJudge()
    assert all(j.observe(n, 9000, {"applier": "concurrent"}) is None for n in range(1, 10))


def test_parse_mpl_and_factory_validate_at_the_edge():
    assert parse_mpl("auto") == "auto" and parse_mpl(None) == "auto" and parse_mpl("8") == 8
    for bad in ("0", "65", "many"):
        with pytest.raises(InvalidInput):
            parse_mpl(bad)
    with pytest.raises(InvalidInput, match="unknown delta applier"):
        make_applier("magic", lambda: None)
    a = make_applier("concurrent", lambda: None, mpl="auto")
    assert a.auto and a.mpl == 4 and a.controller is not None
    assert make_applier("serial", lambda: None).mpl == 0
