"""The model controller on plants with dead time (issue 56): the pipe follows the rate set 0-4 s late
(`rate_lag`, sysbench's copy: throughput 2-3 s behind) and latency follows the throughput 1-3 s later
(`lag`); per-second noise 10-30 %; a load that doubles for 20 s mid-copy (benchkit.plant.delay_family).

The law was tuned on delay_family seeds 1 and 2; these run on seed 3 (held out). Figures per delay
(docs/controller.md, "Dead time"): the default against the law before issue 56 and the PID on the same plants.
What the issue asked per plant and this does not yet reach is said in the asserts' comments."""

from __future__ import annotations

import statistics

import pytest

from slacker.controller import ModelController

from benchkit import plant as P

SEED = 3  # held out: seeds 1 and 2 tuned the law
N = 18  # per delay: 6 binding (setpoint 1.6x the load's own latency), 6 not binding (4x), 6 load steps


def stops_after_settling(run: P.CopyRun, settle: int = 15) -> int:
    """How many times the copy was cut to 0 B/s after its first `settle` seconds (unmarked seconds)."""
    n, prev = 0, None
    for k, st in enumerate(run.states):
        stopped = st.get("rate_bytes_per_s") == 0 and st.get("mark") is None
        if k >= settle and stopped and prev is False:
            n += 1
        prev = stopped
    return n


def rows(delay: int) -> list[dict]:
    out = []
    for sc in P.delay_family(delay, N, seed=SEED):
        free = P.run_copy(sc)
        r = P.run_copy(sc, lambda sp, m: ModelController(sp, m), record=True)
        row = {"kind": sc.kind, "mean": r.mean_ratio, "stops": stops_after_settling(r),
               "dead": r.states[-1].get("model_dead_s"), "rate_lag": sc.rate_lag}
        if sc.kind == "nonbinding":
            row["time"] = r.seconds / free.seconds
        else:
            row["speed"] = r.rate / P.oracle(sc).rate
            row["back"] = r.back_within(1.0, 5) if sc.kind == "loadstep" else None
        out.append(row)
    return out


@pytest.fixture(scope="module")
def by_delay() -> dict[int, list[dict]]:
    return {d: rows(d) for d in range(5)}


def test_the_family_is_what_it_says():
    for d in range(5):
        plants = P.delay_family(d, N, seed=SEED)
        assert {sc.rate_lag for sc in plants} == {d} and {sc.lag for sc in plants} <= {1, 2, 3}
        assert [sc.kind for sc in plants].count("loadstep") == 6
        for sc in plants:
            if sc.kind == "nonbinding":
                assert P.run_copy(sc).mean_ratio <= 0.8
            else:
                assert P.run_copy(sc).mean_ratio >= 1.3  # binding: unthrottled well over the setpoint
            if sc.kind == "loadstep":
                assert sc.curve(0.0, load=2.0)[0] < sc.setpoint_s  # the doubled load alone leaves room


@pytest.mark.parametrize("delay", range(5))
def test_the_pipes_delay_is_measured(by_delay, delay):
    moved = [r for r in by_delay[delay] if r["kind"] != "nonbinding"]  # plants on which the rate moves
    assert sum(1 for r in moved if abs(r["dead"] - delay) <= 1) >= 0.8 * len(moved), [r["dead"] for r in moved]


@pytest.mark.parametrize("delay", range(5))
def test_a_binding_setpoint_is_held_on_the_median_plant(by_delay, delay):
    b = [r for r in by_delay[delay] if r["kind"] == "binding"]
    assert statistics.median(r["mean"] for r in b) <= 1.1  # measured 0.90-0.98 (issue 56's law: 1.02-1.07)
    # Every plant within 1.1 since issue 67's rise per loop delay (issue 56's law: 1.28).
    assert max(r["mean"] for r in b) <= 1.1  # measured max 1.08
    # Speed: measured median 0.73-0.87 of the oracle's on a first move from the 10 MB/s start (issue 56's law,
    # which rose to the cap on room it had not seen: 0.79-0.90); a seeded start: test_sharp_knee.py.
    assert statistics.median(r["speed"] for r in b) >= 0.6


@pytest.mark.parametrize("delay", range(5))
def test_fewer_stops_once_settled(by_delay, delay):
    """The limit cycle (climb on stale evidence, cut to 0, climb again): after the first 15 s no binding or
    load-step plant is cut to 0 more than once, and at most two of the 12 at all (measured: 0-1 stops over
    12 plants per delay; the law before issue 56: 20-27; the PID 24-67)."""
    r = [x for x in by_delay[delay] if x["kind"] != "nonbinding"]
    assert max(x["stops"] for x in r) <= 1
    assert sum(x["stops"] for x in r) <= 2


@pytest.mark.parametrize("delay", range(5))
def test_a_setpoint_that_does_not_bind_costs_little_time(by_delay, delay):
    # A node's first move, from the 10 MB/s start at most `rise` per loop delay: measured median 1.13-1.24 on
    # these 4-8 s delays (issue 56's law, which jumped to the cap: 1.08-1.10). The node's memory makes later
    # moves start where the last held (test_sharp_knee.py: median 1.00).
    nb = [r for r in by_delay[delay] if r["kind"] == "nonbinding"]
    assert statistics.median(r["time"] for r in nb) <= 1.4
    assert max(r["time"] for r in nb) <= 1.6


@pytest.mark.parametrize("delay", range(5))
def test_a_doubled_load_is_back_under_the_setpoint_within_10s(by_delay, delay):
    """Back under the setpoint (the mean of 5 s) within 10 s of the load doubling, on 4 of the 6 plants at
    least (measured 4-6 of 6 per delay; the law before issue 56: 6 of 6; not yet every plant: on a disk plant
    with a steep fitted slope the Newton step cuts ~1 MB/s a second and takes 11-19 s)."""
    ls = [r for r in by_delay[delay] if r["kind"] == "loadstep"]
    assert sum(1 for r in ls if r["back"] is not None and r["back"] <= 10) >= 4, [r["back"] for r in ls]
