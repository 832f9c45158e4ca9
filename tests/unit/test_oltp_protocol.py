"""The OLTP bench's pure parts (bench/benches/setpoint/protocol.py, `--only oltp`): the paired ratios of a block,
the best oracle, the interval over blocks, the recovery time after a load step, the agreement of two clocks,
and the own-clock lines of oltp_paced.lua."""

from __future__ import annotations

import pytest

from benches.setpoint import protocol as pr
from benches.setpoint.sysbench import own_clock

MB = 1 << 20


def test_interval_is_the_median_and_central_percentiles_over_blocks():
    s = pr.interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["median"] == 3.0 and s["n"] == 5
    # 5 % and 95 % by linear interpolation: 0.2 of the way from the lowest, and from the highest
    assert s["lo"] == pytest.approx(1.2) and s["hi"] == pytest.approx(4.8)
    s = pr.interval([0.9, None, 1.3])
    assert s["n"] == 2 and s["missing"] == 1 and s["median"] == pytest.approx(1.1)
    assert pr.interval([])["median"] is None and pr.interval([2.0])["lo"] == 2.0 == pr.interval([2.0])["hi"]


def test_best_oracle_is_the_fastest_rate_that_met_the_setpoint():
    fixed = [(50 * MB, 0.020), (100 * MB, 0.027), (150 * MB, 0.029), (280 * MB, 0.060)]
    assert pr.best_oracle(fixed, 0.028) == 100 * MB
    # a faster rate that met it wins even when a slower one did not (the curve is not monotone in one block)
    assert pr.best_oracle(fixed + [(200 * MB, 0.025)], 0.028) == 200 * MB
    assert pr.best_oracle(fixed, 0.010) is None
    assert pr.oracle_rates(200 * MB, [0.85, 0.35, 0.6]) == [70 * MB, 120 * MB, 170 * MB]
    # the warm-up's latency known: around where the line in 1/latency, (0, 1/own) -> (unthrottled, 1/its mean),
    # crosses 1/setpoint: (1/13 - 1/21) / (1/13 - 1/93) = 0.443 of 130 MB/s
    got = pr.oracle_rates(130 * MB, [0.5, 1, 2], own_s=0.013, unthrottled_mean_s=0.093, setpoint_s=0.021)
    assert got == pytest.approx([28.8 * MB, 57.6 * MB, 115.2 * MB], rel=0.01)
    # an unthrottled copy that built a queue (5 s against 3.9 ms) still places the rates where the load has
    # its room: (1 - 3.9/6.2) of the rate, not 0 (the disk-bound harness: a line in latency gave 0.01 MB/s)
    got = pr.oracle_rates(25.3 * MB, [0.5, 1, 2], own_s=0.0039, unthrottled_mean_s=5.18, setpoint_s=0.0062)
    assert got == pytest.approx([4.69 * MB, 9.39 * MB, 18.8 * MB], rel=0.01)
    # a factor at or over the unthrottled rate is dropped; the unthrottled copy under the setpoint: fractions
    assert pr.oracle_rates(130 * MB, [1, 2, 4], 0.013, 0.093, 0.021) == pytest.approx([57.6 * MB, 115.2 * MB], rel=0.01)
    assert pr.oracle_rates(100 * MB, [0.5, 2], 0.013, 0.018, 0.021) == pytest.approx([50 * MB, 95 * MB])


def test_a_nonbinding_setpoint_sits_above_the_unthrottled_copy():
    assert pr.nonbinding_setpoint(0.013, 4, 0.030) == pytest.approx(0.052)  # 4x binds nothing here
    assert pr.nonbinding_setpoint(0.013, 4, 0.094) == pytest.approx(0.1175)  # the copy took it to 94 ms
    assert pr.nonbinding_setpoint(0.013, 4, None) == pytest.approx(0.052)
    runs = {"unthrottled": {"rate": 150, "mean_s": 0.094, "time_s": 10.0},
            "model-router:nb": {"rate": 110, "mean_s": 0.05, "time_s": 13.0, "setpoint_s": 0.0535}}
    f = pr.block_ratios(runs, 0.02, [])
    assert f["model-router:nb:bound"] is True and f["model-router:nb:time/unthr"] == pytest.approx(1.3)
    runs["model-router:nb"]["setpoint_s"] = 0.1175
    assert pr.block_ratios(runs, 0.02, [])["model-router:nb:bound"] is False


def test_block_ratios_pair_each_arm_with_the_blocks_own_oracle_and_unthrottled_move():
    runs = {"fixed:0": {"rate": 50 * MB, "mean_s": 0.020, "time_s": None},
            "fixed:1": {"rate": 100 * MB, "mean_s": 0.026, "time_s": None},
            "fixed:2": {"rate": 150 * MB, "mean_s": 0.035, "time_s": None},
            "unthrottled": {"rate": 280 * MB, "mean_s": 0.060, "time_s": 8.0},
            "model-router:b": {"rate": 90 * MB, "mean_s": 0.0308, "time_s": 14.0},
            "pid-router:b": {"rate": 60 * MB, "mean_s": 0.024, "time_s": 20.0},
            "model-router:nb": {"rate": 270 * MB, "mean_s": 0.050, "time_s": 8.8}}
    f = pr.block_ratios(runs, 0.028, ["model-router:b", "model-server:b", "pid-router:b"])
    assert f["oracle_rate"] == 100 * MB
    assert f["model-router:b:mean/sp"] == pytest.approx(1.1)
    assert f["model-router:b:speed/oracle"] == pytest.approx(0.9)
    assert f["pid-router:b:speed/oracle"] == pytest.approx(0.6)
    assert f["model-server:b:mean/sp"] is None and f["model-server:b:speed/oracle"] is None  # did not run
    assert f["model-router:nb:time/unthr"] == pytest.approx(1.1)
    # where the unthrottled move itself met the setpoint, it is the oracle
    assert pr.block_ratios(runs, 0.070, ["model-router:b"])["oracle_rate"] == 280 * MB


def test_recovery_is_the_first_second_of_a_run_back_under_the_setpoint():
    sp, step = 0.030, 100.0
    secs = [(99.0, 0.020), (100.0, 0.021), (101.0, 0.025), (102.0, 0.045), (103.0, 0.060), (104.0, 0.029),
            (105.0, 0.035), (106.0, 0.028), (107.0, 0.027), (108.0, 0.029), (109.0, 0.040)]
    # above from 102; 104 dips under for one second only; back for three seconds in a row from 106
    assert pr.recovery_s(secs, sp, step) == pytest.approx(6.0)
    assert pr.recovery_s(secs, sp, step, hold=1) == pytest.approx(4.0)  # 104: the first second under
    assert pr.recovery_s([(101.0, 0.02), (102.0, 0.025)], sp, step) == 0.0  # never above
    assert pr.recovery_s([(101.0, 0.05), (102.0, 0.02), (103.0, 0.02)], sp, step) is None  # not confirmed
    assert pr.recovery_s([(99.0, 0.05)], sp, step) is None  # nothing after the step


def test_agreement_of_two_per_second_clocks():
    client = {t: 0.010 + 0.002 * (t % 5) for t in range(20)}
    router = {t: 0.95 * v for t, v in client.items() if t != 3}  # a little under, one second unseen
    a = pr.agreement(router, client)
    assert a["n"] == 19 and a["correlation"] == pytest.approx(1.0)
    assert a["ratio_of_means"] == pytest.approx(0.95) and a["median_ratio"] == pytest.approx(0.95)
    flat = pr.agreement({t: 0.01 for t in range(5)}, client)
    assert flat["correlation"] is None and flat["n"] == 5  # no variation: no correlation to speak of
    assert pr.agreement({}, client)["ratio_of_means"] is None


def test_window_mean_weights_by_transactions():
    buckets = {10: (100.0, 1.0), 11: (300.0, 6.0), 12: (0.0, 0.0), 13: (50.0, 50.0)}
    assert pr.window_mean(buckets, 10, 12) == pytest.approx(7.0 / 400)
    assert pr.per_second(buckets, 11, 13) == {11: pytest.approx(0.02), 13: pytest.approx(1.0)}
    assert pr.window_mean(buckets, 20, 30) is None


def test_own_clock_sums_the_threads_lines_per_second(tmp_path):
    log = tmp_path / "x.sysbench.log"
    log.write_text("[ 1s ] thds: 16 tps: 100.0\n"
                   "@lat 1700000000 0 5 0.100000 0.050000\n"
                   "@lat 1700000000 1 5 0.300000 0.150000\n"
                   "@lat 1700000001 0 2 0.040000 0.040000\n"
                   "@lat broken\n")
    resp = own_clock(log)
    assert resp == {1700000001: (10.0, pytest.approx(0.4)), 1700000002: (2.0, pytest.approx(0.04))}
    assert own_clock(log, service=True)[1700000001] == (10.0, pytest.approx(0.2))
    assert own_clock(tmp_path / "none.log") == {}


def test_the_bench_posts_a_checked_request(monkeypatch):
    """The bench starts its moves through the same typed request as the CLI (a plain dict is refused)."""
    from types import SimpleNamespace

    from benches.setpoint import runner
    from slacker.migration.options import MigrationRequest

    sent = []

    class Posted(Exception):
        pass

    def start(agent, request):
        sent.append(request)
        raise Posted

    monkeypatch.setattr(runner, "start_migration", start)
    bench = SimpleNamespace(node_of=lambda t: "node-1", agents={"node-1": None})
    with pytest.raises(Posted):
        runner.Bench.migrate(bench, "t1", controller={"kind": "model", "setpoint_s": 0.02, "force": True})
    with pytest.raises(Posted):
        runner.Bench.migrate(bench, "t1", rate=5e6)
    assert all(isinstance(r, MigrationRequest) for r in sent)
    assert sent[0].to_wire()["controller"]["kind"] == "model" and sent[0].to_wire()["target"] == "node-2"
    assert sent[1].to_wire()["rate_bytes_per_s"] == 5e6 and "controller" not in sent[1].to_wire()


def test_step_recovery_counts_from_the_step_end():
    """The doubled load alone fills the tenant: the clock starts when the load returns to its level."""
    from benches.setpoint.oltp import step_recovery

    c0 = 1000.0
    # rows: [s from the copy's start, client response ms, service ms, router ms, server ms]
    lat = {**{s: 15.0 for s in range(0, 4)}, **{s: 300.0 for s in range(4, 24)}, 24: 60.0, 25: 30.0,
           **{s: 16.0 for s in range(26, 40)}}
    m = {"copy": [c0, c0 + 38], "setpoint_s": 0.02, "step": {"at": c0 + 4, "until": c0 + 24},
         "seconds": [[s, v, v, v, v] for s, v in sorted(lat.items())]}
    assert step_recovery(m) == pytest.approx(2.0)  # over at 24 and 25 s, back at 26 s
    m["step"]["until"] = None  # the step outlasted the copy: nothing after it within the copy
    assert step_recovery(m) is None


def test_a_move_waits_for_the_last_moves_queue_in_the_client_to_drain():
    # the harness's clock after a move: 5 s a transaction (its queue draining), then back at 3 ms
    buckets = {100: (100, 500.0), 101: (100, 300.0), 102: (100, 0.3), 103: (100, 0.31), 104: (100, 0.29),
               105: (100, 0.3)}
    assert not pr.recovered(buckets, 102.0, limit_s=0.0049)   # the queue still in the window
    assert pr.recovered(buckets, 105.0, limit_s=0.0049)       # the last 3 s back under the setpoint
    assert not pr.recovered({}, 105.0, limit_s=0.0049)        # no transactions: not known to be back
