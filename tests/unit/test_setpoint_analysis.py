"""bench/setpoint's analysis (bench/benches/setpoint/analysis.py): pure functions on synthetic records and results."""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timezone
from pathlib import Path

import pytest

from benches.setpoint import analysis as an

T0 = 1_800_000_000.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def rec(t_end: float, mean: float | None, completed: int = 10, tenant: str = "t1", phase: str = "run",
        target_tps: float = 10.0, p99: float | None = None, queue: int = 0) -> dict:
    """One harness interval record as harness_records returns it (1 s long, ending at t_end)."""
    return {"t_s": round(t_end - T0, 1), "interval_s": 1.0, "time": iso(t_end), "tenant": tenant, "phase": phase,
            "target_tps": target_tps, "completed": completed, "offered_tps": target_tps, "queue_length": queue,
            "latency_mean_s": mean, "latency_p99_s": p99 if p99 is not None else mean, "_end": t_end,
            "_start": t_end - 1.0}


def write_harness(path: Path, records: list[dict]) -> Path:
    lines = [json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) for r in records]
    path.write_text("\n".join(lines) + "\n{\"t_s\": 9")  # a partial last line, as while the harness writes
    return path


# --- reading ------------------------------------------------------------------------------------

def test_harness_records_adds_wall_clock_bounds_and_skips_a_partial_line(tmp_path):
    p = write_harness(tmp_path / "h.jsonl", [rec(T0 + 1, 0.01), rec(T0 + 2, 0.02)])
    rs = an.harness_records(p)
    assert len(rs) == 2
    assert rs[0]["_end"] == pytest.approx(T0 + 1)
    assert rs[1]["_start"] == pytest.approx(T0 + 1)


def test_ts_of_reads_z_and_offset_forms():
    assert an.ts_of("2027-01-15T08:00:00Z") == an.ts_of("2027-01-15T08:00:00+00:00")
    assert an.ts_of(iso(T0)) == pytest.approx(T0)


# --- latency ------------------------------------------------------------------------------------

def test_aggregate_merges_tenants_per_second_weighted_by_transactions():
    rs = [rec(T0 + 1, 0.010, 10, "a"), rec(T0 + 1, 0.040, 30, "b"), rec(T0 + 2, 0.02, 5, "a"),
          rec(T0 + 3, 0.5, 5, "a", phase="drain")]
    secs = an.aggregate(rs, T0, T0 + 10)
    assert [s["completed"] for s in secs] == [40, 5]  # the drain interval does not count
    assert secs[0]["mean"] == pytest.approx((0.010 * 10 + 0.040 * 30) / 40)
    # an interval counts when its middle is inside the window
    assert [s["completed"] for s in an.aggregate(rs, T0 + 0.4, T0 + 1.4)] == [40]
    assert an.aggregate(rs, T0 + 0.6, T0 + 1.4) == []


def test_latency_stats_on_synthetic_seconds():
    means = [0.010, 0.020, 0.030, 0.100]
    counts = [10, 10, 20, 10]
    rs = [rec(T0 + i + 1, m, n) for i, (m, n) in enumerate(zip(means, counts))]
    st = an.latency_stats(rs, T0, T0 + 4, setpoint=0.02)
    assert st["completed"] == 50
    assert st["mean_s"] == pytest.approx(sum(m * n for m, n in zip(means, counts)) / 50)
    assert st["std_s"] == pytest.approx(statistics.pstdev(means))
    assert st["max_1s_s"] == 0.100 and st["median_1s_s"] == pytest.approx(0.025)
    assert st["tps"] == pytest.approx(50 / 4)
    # 3 s trailing averages: 10, 15, 20, 50 ms; above 22 ms: the last one
    assert st["above_110pct_share"] == pytest.approx(1 / 4)


def test_latency_stats_without_transactions():
    st = an.latency_stats([rec(T0 + 1, None, 0)], T0, T0 + 2)
    assert st["mean_s"] is None and st["completed"] == 0 and st["seconds"] == 1


def test_smooth_is_a_trailing_average():
    assert an.smooth([3, 6, 9, 12], 3) == [3, 4.5, 6, 9]


# --- the load step ------------------------------------------------------------------------------

@pytest.mark.parametrize("after, expected", [
    ([(10.0, 0.05), (11.0, 0.09)], 0.0),                           # never above 1.1 x setpoint
    ([(10.0, 0.2), (11.0, 0.3), (12.0, 0.115), (15.0, 0.105)], 6.0),  # back below 0.11 after the peak
    ([(10.0, 0.05), (11.0, 0.3), (12.0, 0.2)], None),              # never came back
    ([], None),
])
def test_recovery_time(after, expected):
    assert an.recovery_s(after, 9.0, 0.1) == expected


@pytest.mark.parametrize("after, expected", [
    ([(10.0, 0.05), (11.0, 0.09)], 0.0),                                        # never above
    ([(10.0, 0.2), (12.0, 0.1), (14.0, 0.5), (20.0, 0.1)], 3.0),                # back at 12 s; 14 s is later
    ([(10.0, 0.05), (11.0, 0.3), (12.0, 0.2)], None),                           # never came back
    ([], None),
])
def test_first_back_is_the_steps_own_response(after, expected):
    # recovery_s waits out the highest point since the step (a later flush or a second overshoot);
    # first_back_s is the step's own response.
    assert an.first_back_s(after, 9.0, 0.1) == expected
    if expected is not None and expected > 0:
        assert an.recovery_s(after, 9.0, 0.1) > expected


def test_step_analysis_finds_the_step_and_the_rates(tmp_path):
    # copy from T0+10 to T0+40; the offered load steps from 10 to 14 tps at T0+20; latency 20 ms before, 60 after
    rs = [rec(T0 + i, 0.02 if i <= 20 else 0.06, target_tps=10.0 if i <= 20 else 14.0) for i in range(1, 45)]
    h = write_harness(tmp_path / "h.jsonl", rs)
    series = [{"ts": iso(T0 + 10 + k), "phase": "snapshot", "bytes_done": k * (1e6 if k <= 10 else 2e6)}
              for k in range(0, 31)]
    sp = tmp_path / "m.jsonl"
    sp.write_text("\n".join(json.dumps(s) for s in series) + "\n")
    run = {"harness_path": str(h),
           "migration": {"snapshot_start": T0 + 10, "snapshot_end": T0 + 40, "bytes": 50e6, "series_path": str(sp)}}
    assert an.step_wall(run) == pytest.approx(T0 + 20)
    out = an.step_analysis(run, 0.03, 2.0)
    assert out["step_at_fraction_of_copy"] == pytest.approx(10 / 30)
    assert out["rate_before"] == pytest.approx(10e6 / 10)
    assert out["rate_after"] == pytest.approx((50e6 - 10e6) / 20)
    assert out["before"]["mean_s"] == pytest.approx(0.02)
    assert out["after"]["mean_s"] == pytest.approx(0.06)
    assert out["recovery_s"] is None  # 60 ms stays above 33 ms
    assert out["peak_3s_after_s"] == pytest.approx(0.06)


# --- fig5: knee, setpoints, oracle ---------------------------------------------------------------

def level(rate: float, mean: float | None, first: float | None = None, second: float | None = None,
          queue: int = 0) -> dict:
    return {"rate": rate, "achieved_rate": rate * 0.98, "stats": {"mean_s": mean, "queue_max": queue},
            "first_half_s": first if first is not None else mean, "second_half_s": second if second is not None else mean}


FIG5 = {"base": {"mean_s": 0.01},
        "levels": [level(10e6, 0.012), level(20e6, 0.025), level(40e6, 0.045), level(80e6, 0.09, 0.05, 0.13, 40),
                   level(120e6, 0.5)]}


def test_knee_is_the_first_level_whose_latency_runs_away():
    k = an.knee(FIG5)
    assert k["unloaded_s"] == 0.01
    assert k["knee_rate"] == pytest.approx(80e6 * 0.98)
    assert k["max_stable_rate"] == pytest.approx(40e6 * 0.98)
    assert k["knee_latency_s"] == pytest.approx(0.045)


def test_knee_on_a_jump_without_growth():
    f5 = {"base": {"mean_s": 0.01}, "levels": [level(10e6, 0.02), level(20e6, 0.25)]}  # > 20 x unloaded
    assert an.knee(f5)["knee_rate"] == pytest.approx(20e6 * 0.98)


def test_choose_setpoints():
    k = {"unloaded_s": 0.01, "knee_latency_s": 0.12}
    assert an.choose_setpoints(k, [0.05]) == [0.05]
    assert an.choose_setpoints(k, None, [3, 6]) == [0.03, 0.06]
    sps = an.choose_setpoints(k, n=4)
    assert sps[0] == 0.015 and sps[-1] == 0.12
    assert sps == sorted(sps) and len(sps) == 4
    assert sps[1] / sps[0] == pytest.approx(sps[2] / sps[1], rel=0.05)  # geometric


def test_oracle_is_the_highest_fixed_rate_that_met_the_setpoint():
    assert an.oracle_rates(FIG5, [0.03, 0.05, 0.005]) == {"30ms": 20e6, "50ms": 40e6, "5ms": None}


# --- the fixed throttle's curve -------------------------------------------------------------------

def test_isotonic_pools_violators():
    assert an.isotonic([(1, 1.0), (2, 3.0), (3, 2.0), (4, 5.0)]) == [(1, 1.0), (2.5, 2.5), (4, 5.0)]
    assert an.isotonic([(3, 1.0), (1, 2.0), (2, 3.0)]) == [(1, 2.0), (2.5, 2.0)]  # sorted by rate first
    pts = [(x, math.sin(x) + x / 3) for x in range(20)]
    fit = an.isotonic(pts)
    assert all(a[1] <= b[1] for a, b in zip(fit, fit[1:]))


def test_rate_at_latency_interpolates_on_the_curve():
    curve = [(10e6, 0.01), (20e6, 0.03), (40e6, 0.07)]
    assert an.rate_at_latency(curve, 0.02) == pytest.approx(15e6)
    assert an.rate_at_latency(curve, 0.05) == pytest.approx(30e6)
    assert an.rate_at_latency(curve, 0.005) is None  # below the curve
    assert an.rate_at_latency(curve, 0.5) == 40e6    # above: the highest rate
    assert an.rate_at_latency(curve[:1], 0.02) is None


def test_fixed_curve_from_fig5_and_fig11():
    # the fig11 point (30 MB/s, 50 ms) is slower than fig5's 39.2 MB/s at 45 ms: the two are pooled
    res = {"runs": {"fig5": FIG5, "f": {"copy": {"mean_s": 0.05}, "migration": {"avg_rate": 30e6}}},
           "fig11": [{"fixed": "f"}]}
    curve = an.fixed_curve(res)
    assert [x for x, _ in curve][:3] == pytest.approx([9.8e6, 19.6e6, (30e6 + 39.2e6) / 2])
    assert curve[2][1] == pytest.approx(0.0475)
    assert all(a[1] <= b[1] for a, b in zip(curve, curve[1:]))


# --- the comparison --------------------------------------------------------------------------------

def snap_series(t0: float, rates: list[float], lag: int = 0) -> list[dict]:
    """One sample a second; rates[i] is the copy's rate over the second before sample i. The progress
    line's throughput shows it `lag` samples late (its moving average)."""
    done, out = 0.0, []
    for i, r in enumerate(rates):
        done += r if i else 0.0
        out.append({"ts": iso(t0 + i), "phase": "snapshot", "bytes_done": done,
                    "throughput_bytes_per_s": rates[max(0, i - lag)]})
    return out


def test_time_to_90_percent_of_the_final_rate():
    rates = [1e6, 5e6, 8e6, 9.5e6, 10e6, 10e6, 10e6, 10e6, 10e6, 10e6]
    m = {"snapshot_start": T0, "snapshot_end": T0 + 12, "series": snap_series(T0, rates, lag=2)}
    assert an.ramp_s(m, 2.0) == pytest.approx(3.0)  # the copy's own bytes a second
    assert an.ramp_progress_s(m, 2.0) == pytest.approx(5.0)  # the progress line's average, 2 s behind
    m["series"] = snap_series(T0, [1e6, 1e6])
    assert an.ramp_s(m, 2.0) is None  # too few points


def cmp_run(mean: float, sd: float, rate: float, ramp_rates: list[float], mig_s: float) -> dict:
    return {"copy": {"mean_s": mean, "std_s": sd},
            "migration": {"avg_rate": rate, "snapshot_s": 20, "duration_s": mig_s, "result": "succeeded",
                          "snapshot_start": T0, "snapshot_end": T0 + 20, "series": snap_series(T0, ramp_rates)},
            "cpu_during_copy": {"others_cores": 0.1}}


def test_summarise_goals_against_the_oracle_and_unthrottled():
    flat = [10e6] * 15
    slow = [1e6] * 12 + [10e6] * 6
    runs = {"u": cmp_run(0.2, 0.05, 50e6, flat, 30.0), "s": cmp_run(0.052, 0.006, 19e6, flat, 60.0),
            "o": cmp_run(0.045, 0.004, 20e6, flat, 58.0), "p": cmp_run(0.07, 0.01, 25e6, slow, 50.0),
            "nb": cmp_run(0.15, 0.02, 48e6, flat, 33.0)}
    res = {"runs": runs, "config": {"tail_exclude": 2.0},
           "compare": {"binding": ["50ms"], "binding_s": [0.05], "nonbinding": 0.4, "oracle": {"50ms": 20e6},
                       "runs": [{"rep": 1, "kind": "unthrottled", "setpoint_s": None, "name": "u"},
                                {"rep": 1, "kind": "model", "setpoint_s": 0.05, "name": "s"},
                                {"rep": 1, "kind": "oracle", "setpoint_s": 0.05, "name": "o"},
                                {"rep": 1, "kind": "pid", "setpoint_s": 0.05, "name": "p"},
                                {"rep": 1, "kind": "model", "setpoint_s": 0.4, "name": "nb"}]}}
    sm = an.summarise(res)
    goals = {(g["setpoint"], g["kind"]): g for g in sm["goals"]}
    s = goals[("50ms", "model")]
    assert s["binds"] == pytest.approx(4.0)
    assert s["mean_within_10pct"] is True
    assert s["spread_vs_oracle"] == pytest.approx(1.5)
    assert s["speed_vs_oracle"] == pytest.approx(0.95)
    assert s["ramp_ok"] is True
    p = goals[("50ms", "pid")]
    assert p["mean_within_10pct"] is False and p["ramp_ok"] is False  # 90 % only after 12 s
    nb = goals[("400ms", "model")]
    assert nb["migration_vs_unthrottled"] == pytest.approx(1.1)
    table = an.report_compare(res)
    assert "| 50ms | model (default) | 1 | 1.04 [1.04-1.04] |" in table
    assert "| 50ms | velocity PID | 4.00 | no |" in table


# --- the report ------------------------------------------------------------------------------------

def test_table_right_aligns_under_the_headers():
    assert an.table(["a", "bbb"], [[1, 2.5]], "T").splitlines() == ["T", "a  bbb", "-  ---", "1  2.5"]


def test_report_of_a_fig5_result_names_the_knee():
    f5 = dict(FIG5, tps=100.0, base_window=[T0, T0 + 20], gaps=[{"mean_s": 0.011}], gap=8.0,
              base=dict(FIG5["base"], std_s=0.001, cpu={"others_cores": 0.2}))
    for lv in f5["levels"]:
        lv.update(seconds=15.0, cpu={"others_cores": 0.1})
        lv["stats"]["std_s"] = 0.001
    res = {"runs": {"fig5": f5}, "knee": an.knee(f5)}
    text = an.report(res)
    assert "Figure 5 view: 100 tps offered" in text
    assert "knee (latency runs away) at 78.4 MB/s" in text
    assert "highest stable fixed rate 39.2 MB/s at 45.0 ms" in text


def test_run_figures_can_leave_out_the_copys_first_seconds(tmp_path):
    # A copy of 30 s whose first 5 s are the backup tool's start (1 s latency at any rate), then 20 ms.
    c0 = T0 + 100.0
    recs = [rec(c0 + k + 1, 1.0 if k < 5 else 0.02) for k in range(30)]
    path = write_harness(tmp_path / "h.jsonl", recs)
    whole = an.latency_stats(an.harness_records(path), c0, c0 + 30 - 2.0)
    run = {"migration": {"snapshot_start": c0, "snapshot_end": c0 + 30.0, "avg_rate": 8e6, "snapshot_s": 30.0,
                         "duration_s": 40.0, "result": "succeeded", "series_path": None},
           "copy": whole, "harness_path": str(path)}
    f_all = an.run_figures(run, 2.0)
    f_settled = an.run_figures(run, 2.0, head_exclude_s=6.0)
    assert f_all["mean_s"] == pytest.approx((5 * 1.0 + 22 * 0.02) / 27, rel=0.05)
    assert f_settled["mean_s"] == pytest.approx(0.02) and f_settled["sd_s"] == pytest.approx(0.0)


def test_compare_controllers_option_keeps_the_runs_order_and_rejects_unknown_names():
    import argparse

    from benches.setpoint.compare import parse_controllers

    assert parse_controllers("oracle, pid, model") == ["model", "pid", "oracle"]
    for bad in ("slack,bogus", "", ","):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a subset of model,pid,threshold,oracle"):
            parse_controllers(bad)


def test_fig13a_repeats_are_summarised_with_medians_and_never():
    one = {"setpoint_s": 0.1, "controller": "model"}
    reps = [dict(one, pid_analysis={"recovery_s": r}, fixed_analysis={"recovery_s": f})
            for r, f in ((7.0, 25.0), (15.0, None), (9.0, 21.0))]
    lines = an.fig13a_repeats_summary({"fig13a_repeats": reps})
    assert lines[0].startswith("over 3 repeats")
    assert lines[1] == "  model: 7, 15, 9 (median 9)"
    assert lines[2] == "  fixed: 25, never, 21 (median 25)"  # a run never back counts as the slowest
    assert an.fig13a_repeats_summary({"fig13a_repeats": reps[:1]}) == []  # one repeat: the table says it all


def test_fig13a_repeats_option_takes_a_whole_number_of_at_least_one():
    import argparse

    from benches.setpoint.fig13a import parse_repeats

    assert parse_repeats("3") == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number >= 1"):
            parse_repeats(bad)
