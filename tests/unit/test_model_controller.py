"""The model controller (slacker.controller.model, the default) on a family of simulated plants.

The aggregate goals are issue 40's: a binding copy's mean within ±10 % of the setpoint at a speed of at
least 0.9x the best fixed rate's (the oracle); a copy that does not bind done in at most 1.15x the
unthrottled time; a +40 % load step back within 1.1x the setpoint in 10 s; a setpoint the load alone
exceeds said within a minute. The PID (`--controller pid`, the paper's baseline) runs beside it.

Seeds: the law was tuned on family seeds 0, 1 and 2 (bench/controller_plant --seed, commits 897f693 to
this one); the acceptance below runs on seeds 7 and 8, never used for tuning (HELD_OUT). Its thresholds
are the held-out figures (docs/controller.md, "The plant family") less about two standard errors of a
share over that many plants, not one plant under what was measured.
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics

import pytest

from slacker.controller import ModelController, PidController
from slacker.controller.loop import RatePolicy
from slacker.errors import InvalidInput
from slacker.latency import LatencySample

from benchkit import plant as plant_mod

MAX = 200e6
MAKERS = {"model": lambda sp, m: ModelController(sp, m), "pid": lambda sp, m: PidController(sp, m)}
TUNED = (0, 1, 2)  # the seeds the law's constants were chosen on
HELD_OUT = (7, 8)


@pytest.fixture(scope="module")
def family_rows() -> list[dict]:
    rows = []
    for seed in HELD_OUT:
        plants = plant_mod.family(120, seed=seed, kinds=("binding", "nonbinding", "loadstep", "binding"))
        rows += [plant_mod.evaluate(sc, MAKERS) for sc in plants]
    return rows


def test_the_family_has_every_class(family_rows):
    classes = [r["class"] for r in family_rows]
    assert classes.count("binding") >= 80 and classes.count("nonbinding") >= 40 and classes.count("loadstep") >= 40
    assert {r["shape"] for r in family_rows} == {"disk", "cpu"}
    assert {r["lag"] for r in family_rows} == {1, 2, 3, 4}
    assert sum(1 for r in family_rows if r["burst"]) >= 20  # starts that are not the copy's doing


def _goals(rows):
    return (plant_mod.goals(rows, k) for k in ("model", "pid"))


def test_a_copy_that_does_not_bind_runs_at_the_pipes_speed(family_rows):
    model, pid = _goals(family_rows)
    # A first move rises at most x3 per loop delay from its 10 MB/s start (issue 67): held out, median 1.14
    # (the law before, which rose to the cap on room it had not seen: 1.08), 56 % within 1.15 (before 92 %).
    assert model["nonbinding_time_median"] <= 1.15
    assert model["nonbinding_ok"] >= 0.45
    assert model["nonbinding_ok"] >= pid["nonbinding_ok"] + 0.15  # the PID's integral ramp: 30 %


def test_a_binding_copy_holds_the_setpoint_at_the_oracles_speed(family_rows):
    model, pid = _goals(family_rows)
    assert 0.9 <= model["binding_mean_median"] <= 1.1  # the goal, on the median plant (held out: 1.01)
    assert model["binding_speed_median"] >= 0.88  # (held out: 0.94; before issue 67's rise per delay 0.99)
    assert model["binding_within_10pct"] >= 0.6  # held out: 71 % of 95 plants (before 56 %; PID 51 %)
    assert model["binding_speed_ok"] >= 0.45  # held out: 54 % (before 63 %; PID 54 %)
    assert model["binding_both"] >= 0.35  # both at once, held out: 43 % (PID 33 %)
    assert model["binding_both"] >= pid["binding_both"]
    assert model["binding_within_10pct"] >= pid["binding_within_10pct"] + 0.1


def test_a_load_step_is_followed(family_rows):
    model, pid = _goals(family_rows)
    assert model["loadstep_back_10s"] >= 0.3  # held out: 40 % (some steps take the load alone over)
    assert model["loadstep_back_10s"] >= pid["loadstep_back_10s"]


def _on_seeds(name: str, n: int) -> dict[str, list[tuple[float, float]]]:
    """(mean / setpoint, speed / the oracle's) per controller on `n` seeds of a real run's plant."""
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in MAKERS}
    for i in range(n):
        sc = copy.deepcopy(plant_mod.real_plants()[name])
        sc.seed += i
        o = plant_mod.oracle(sc)
        for k in got:
            r = plant_mod.run_copy(sc, MAKERS[k])
            got[k].append((r.mean_ratio, r.rate / o.rate))
    return got


def test_the_real_failures_as_plants():
    """The real runs' plants (plant.real_plants()). The disk-bound host whose queue outlives the copy: the PID
    cycles through queues (real: 1.4-1.8x at 0.48x the oracle's speed) and misses the mean on every seed; the
    model meets it on few (2 of 8; real: 3 of 5 runs within ±10 %) and is nowhere near the PID's overshoot. The
    sysbench load (CPU-bound, a gradual rise): the model holds the mean, the PID stays under it, slower."""
    got = _on_seeds("disk-host", 8)
    within = {k: sum(1 for m, _ in v if 0.9 <= m <= 1.1) for k, v in got.items()}
    assert within["model"] > within["pid"] == 0, got  # measured: 2 of 8 (1.04, 1.07; median 1.19) and 0 of 8
    assert statistics.median(m for m, _ in got["model"]) <= 0.7 * statistics.median(m for m, _ in got["pid"]), got
    assert statistics.median(v for _, v in got["model"]) >= 0.75 >= statistics.median(v for _, v in got["pid"]), got
    sb = _on_seeds("sysbench", 6)
    # Under the setpoint, faster than the PID (measured: 0.84 at 0.68x the oracle's speed, the PID 0.84 at
    # 0.63x); a first move rises at most x3 per loop delay (5-6 s on this plant) from its 10 MB/s start.
    assert 0.8 <= statistics.median(m for m, _ in sb["model"]) <= 1.1, sb
    assert statistics.median(v for _, v in sb["model"]) >= statistics.median(v for _, v in sb["pid"]) + 0.03, sb


def test_a_setpoint_under_the_loads_own_latency_is_said_within_a_minute():
    plants = plant_mod.family(20, seed=2, kinds=("cannot",))
    said = [plant_mod.run_copy(sc, MAKERS["model"], max_s=120, record=True) for sc in plants]
    within = [r.verdict_s is not None and r.verdict_s <= 60 for r in said]
    assert sum(within) >= 18, [r.verdict_s for r in said]  # 19 of 20 (seed 2)
    verdict = next(s["verdict"] for s in said[0].states if s.get("verdict"))
    assert verdict["what"] == "cannot finish: the load alone is over the setpoint"
    assert verdict["figures"]["load_latency_s"] > verdict["figures"]["setpoint_s"]
    assert "--set setpoint=" in verdict["hint"] and "--abort" in verdict["hint"]


def test_a_copy_that_does_not_bind_gets_no_verdict():
    for sc in plant_mod.family(20, seed=3, kinds=("nonbinding",)):
        assert plant_mod.run_copy(sc, MAKERS["model"]).verdict_s is None, sc


def test_redo_that_grows_as_fast_as_the_copy_may_move_is_said():
    sc = plant_mod.family(1, seed=4, kinds=("binding",))[0]
    o = plant_mod.oracle(sc)
    sc.redo_bps = 1.2 * o.rate  # the data grows faster than the setpoint lets the copy move
    r = plant_mod.run_copy(sc, MAKERS["model"], max_s=120, record=True)
    assert r.seconds is None and r.verdict_s is not None and r.verdict_s <= 60
    verdict = next(s["verdict"] for s in r.states if s.get("verdict"))
    assert verdict["figures"]["growth_bytes_per_s"] > 0


def sample(latency_s: float, t: float, count: float = 100) -> LatencySample:
    return LatencySample("fake", t, sum_s=latency_s * count * 3, count=count * 3, window_s=3.0,
                         last_sum_s=latency_s * count, last_count=count)


def _marked_run(burst: float | None, seconds: int = 40) -> ModelController:
    c = ModelController(0.1, MAX)
    done = 0
    for k in range(seconds):
        mark = "backup start" if 3 <= k < 8 else None
        c.set_mark(mark)
        y = burst if burst and mark else 0.02 + 0.0000000001 * c.rate_bytes_per_s
        done += c.rate_bytes_per_s
        c.step(sample(y, float(k)), float(k), done)
    return c


def test_marked_seconds_are_not_fitted():
    """A burst during the backup's start (marked) that builds no queue teaches nothing: the model after it
    is the model without it."""
    c = _marked_run(0.15)
    assert c._fit.n > 20 and all(abs(z - 1 / 0.15) > 1e-6 for _, z, _ in c._fit.pts)
    without = _marked_run(None).state()["model_load_latency_s"]
    assert c.state()["model_load_latency_s"] == pytest.approx(without, rel=0.05)
    assert without == pytest.approx(0.02, rel=0.4)  # this plant is linear in latency, the model in 1/latency


def _start_run(sc, spread: float | None = None):
    ctl = []

    def make(sp, m):
        c = ModelController(sp, m)
        if spread is not None:
            c.SPREAD = spread
        ctl.append(c)
        return c
    return plant_mod.run_copy(sc, make, record=True), ctl[0]


def _burst_plant(seed: int):
    """A CPU-bound tenant whose backup tool's start alone costs 3x the setpoint (a queue by the law's test)
    at any rate, while the copy could move at ~60 MB/s under the setpoint: the start is not the copy's doing."""
    return plant_mod.Scenario(seed=seed, kind="binding", shape="cpu", setpoint_s=0.03, l0_s=0.015, rho0=0.5,
                              knee_bps=400e6, h=0.5, p=1.0, lin=0.8, pipe_bps=150e6, lag=2, noise=0.15,
                              noise_corr=0.3, stall_p=0.0, tps=400, total_bytes=4e9, start_s=6, start_x=6.0,
                              start_burst=True)


def test_a_start_burst_that_was_not_the_copys_is_dropped():
    """The start's queue, fitted provisionally, is dropped once the seconds after the mark say the copy does not
    cost that (the sysbench run of issue 40: the tool's start held the copy under 31 MB/s for 30 s)."""
    dropped = 0
    for seed in range(3):
        r, c = _start_run(_burst_plant(seed))
        dropped += c._dropped > 0  # (seed 0: the start ran to 180 MB/s, where the fit says the queue was the copy's)
        end = next(k for k, m in enumerate(r.marks) if k > 0 and m is None and r.marks[k - 1] == "backup start")
        # 15 s on, over 3x the 10 MB/s start (measured 59-143 MB/s; a rise waits a loop delay for its answer)
        rates = [s["rate_bytes_per_s"] or 200e6 for s in r.states[end + 15:end + 30]]
        assert min(rates) >= 30e6, (seed, [round(x / 1e6) for x in rates])
    assert dropped >= 2


def test_a_start_queue_the_copy_built_is_kept():
    """The opposite case, the real disk-bound host: the start's rate overran a disk whose reads are capped; the
    fit of the seconds after agrees, and the start's seconds stay in the fit (none dropped)."""
    queued = 0
    for seed in range(8):
        sc = copy.deepcopy(plant_mod.real_plants()["disk-host"])
        sc.seed += seed
        r, c = _start_run(sc)
        queued += any(s.get("model_queue_bytes_per_s") for s in r.states[:12])  # the start built a queue
        assert c._dropped == 0, seed
    assert queued >= 6


def test_no_knee_in_sight_reaches_full_speed_in_seconds():
    # Each rise at most `rise` x the rate whose cost the latency shows, held a loop delay (the 2 s lag assumed,
    # and the second) for its answer: 10 -> 30 -> 90 -> 200 MB/s in three delays, never faster (issue 67).
    c = ModelController(0.1, MAX)
    done, fractions = 0, []
    for k in range(12):
        done += c.rate_bytes_per_s
        fractions.append(c.step(sample(0.01, float(k)), float(k), done).fraction)
    assert fractions.index(1.0) <= 9, fractions
    assert all(f <= c.rise * max(fractions[max(0, i - 3):i]) + 1e-9 for i, f in enumerate(fractions) if i >= 3)


def test_the_load_alone_over_the_setpoint_stops_the_copy():
    # 30 steps (was 15): a queue halves the rate whose effect the latency shows, once per loop delay (the 2 s lag
    # assumed before it is measured, and the second), not every second on evidence older than the cut (issue 56).
    c = ModelController(0.01, MAX)
    done = 0
    for k in range(30):
        done += c.rate_bytes_per_s
        out = c.step(sample(0.05, float(k)), float(k), done)
    assert out.rate_bytes_per_s == 0 and "stopped" in out.note


def test_a_copy_stopped_on_a_server_whose_knee_is_far_under_the_cap_starts_again():
    """A small server (knee 0.9 MB/s, under half a per cent of the 200 MB/s cap; a 0.5-core node) where
    a load burst stopped the copy: once latency is back at half the setpoint, the copy moves again and
    settles near the rate the setpoint allows, rather than staying stopped because each step up from 0
    is smaller than the stop floor (the bench saw a copy held at 0 B/s for 10 minutes at 3 ms against 7 ms)."""
    knee, load_s, sp = 0.9e6, 0.003, 0.007
    c = ModelController(sp, MAX)
    done, x, rates = 0.0, 0.0, []
    for k in range(240):
        burst = 30 <= k < 90  # the load alone near three times its usual latency: the copy stops
        base = load_s * (2.8 if burst else 1.0)
        y = base / max(0.05, 1.0 - x / knee)  # the rate applied in the last step costs this much
        done += x
        x = c.step(sample(y, float(k)), float(k), int(done)).rate_bytes_per_s
        rates.append(x)
    assert min(rates[60:90]) == 0  # stopped by the burst
    allowed = knee * (1 - load_s / sp)  # the rate at which latency meets the setpoint: 0.51 MB/s
    after = rates[150:]
    assert min(after) > 0, after
    assert 0.3 * allowed <= statistics.median(after) <= 1.1 * allowed, statistics.median(after)


def test_a_rise_is_capped_at_rise_times_the_fastest_rate_seen():
    c = ModelController(1.0, MAX, start_rate_bytes_per_s=2e6, rise=2.0)
    done, rates = 0, []
    for k in range(6):  # latency over half the aim: a knee may be near
        done += c.rate_bytes_per_s
        rates.append(c.step(sample(0.8, float(k)), float(k), done).rate_bytes_per_s)
    assert all(b <= 2.0 * max(rates[: i + 1]) + 1 for i, b in enumerate(rates[1:]))


def test_the_lag_is_measured():
    """On plants of every lag, the lag the model settles on is the plant's, give or take a step -- and the long
    lags are told from the short ones (a lag stuck at the 2 s it starts from is within a step of 1-3 s plants,
    62 % of these: the first check alone cannot fail on it). Measured: 33 of 40 within a step; of the 23 plants
    of lag 3-4, 17 settle on 3 or more."""
    hits, long_hits, longs = 0, 0, 0
    plants = [sc for sc in plant_mod.family(40, seed=5, kinds=("binding",))]
    for sc in plants:
        r = plant_mod.run_copy(sc, MAKERS["model"], record=True)
        lags = [s.get("model_lag_s") for s in r.states[-30:] if s.get("model_lag_s") is not None]
        hits += bool(lags) and abs(lags[-1] - sc.lag) <= 1
        if sc.lag >= 3:
            longs += 1
            long_hits += bool(lags) and lags[-1] >= 3
    assert hits >= 0.6 * len(plants)
    assert longs >= 10 and long_hits >= 0.6 * longs, (long_hits, longs)


def test_the_start_rate_is_in_bytes_per_second_whatever_the_max():
    """The start protects a server's knee, which is in bytes/s: the same 10 MB/s with no --max-rate (the 200 MB/s
    scale), with scripts/demo's --max-rate 100MB/s, and never over a max under it."""
    assert ModelController(0.05, MAX).rate_bytes_per_s == ModelController(0.05, 100e6).rate_bytes_per_s == 10_000_000
    assert ModelController(0.05, 4e6).rate_bytes_per_s == 4_000_000
    c = ModelController(0.05, 100e6)
    c.set_max_rate(50e6)  # a live --set max-rate keeps the start (and the rates) in bytes/s
    assert c._start == pytest.approx(0.2)


@pytest.mark.parametrize("kw", [{"margin": -1}, {"rise": 0.5}, {"horizon_s": 0}, {"max_lag": 0}, {"start_rate_bytes_per_s": 0},
                                {"catch_up": math.nan}, {"catch_up": 1}])
def test_parameters_are_checked(kw):
    with pytest.raises(InvalidInput):
        ModelController(0.1, MAX, **kw)


def test_state_names_the_model_in_bytes_and_seconds():
    """The state is in bytes/s and seconds, whatever the max rate: a live --set max-rate=... rescales the model's
    fractions, so the knee and the rate the aim allows stay where the server put them."""
    c = ModelController(0.1, MAX)
    done = 0
    for k in range(25):  # a server whose knee is at 40 MB/s: 1/latency falls in a line with the rate moved
        rate = c.rate_bytes_per_s
        done += rate
        y = 1.0 / max(2.0, 100.0 * (1 - rate / 40e6))
        c.step(sample(y, float(k)), float(k), done)
    st = c.state()
    assert set(st) >= {"model_lag_s", "model_load_latency_s", "model_knee_bytes_per_s", "model_allowed_bytes_per_s",
                       "model_noise", "model_confidence"}
    assert st["model_knee_bytes_per_s"] > 20e6 and st["model_allowed_bytes_per_s"] > 0  # a slope was fitted
    c.set_max_rate(MAX / 2)
    after = c.state()
    for k in ("model_load_latency_s", "model_knee_bytes_per_s", "model_allowed_bytes_per_s"):
        assert after[k] == pytest.approx(st[k], rel=1e-6), k


def test_a_copy_far_under_its_knee_reaches_the_pipes_speed_in_two_loop_delays():
    """scripts/demo (issue 40): latency far under the setpoint (the load's own 8-19 ms against 50 ms; at 16-19 ms
    the copy at full speed adds 5-15 ms more), the pipe (100 MB/s) the only limit -- the copy reaches it within two loop delays
    of its start, the backup tool's read-in included, with the max rate the demo gives (--max-rate 100MB/s) or
    none. The load's own latency is measured before the copy, as the migration does (slacker.throttle.measure:
    the median of the seconds read, three when all are under the setpoint); without it the load's 16-19 ms
    counted as the copy's cost and the ramp took 4-6 s."""
    from slacker.controller.verdict import load_latency
    for max_rate, l0, seed in itertools.product((None, 100e6), (0.008, 0.012, 0.016, 0.019), range(3)):
        sc = plant_mod.Scenario(seed=seed, kind="nonbinding", shape="cpu", setpoint_s=0.05, l0_s=l0, rho0=0.3,
                                knee_bps=3e9, h=0.5, p=1.0, lin=0.1, pipe_bps=100e6, lag=2, noise=0.2,
                                noise_corr=0.3, stall_p=0.0, tps=200, total_bytes=3e9)
        p = plant_mod.FluidPlant(sc)
        src = p.source()
        before = []
        for _ in range(4):  # the migration reads latency before the copy (slacker.throttle.measure: a first
            # read, then one a second; three all under the setpoint end it)
            p.advance(0)
            before.append(src.read().last_latency_s)
        policy = RatePolicy(src, ModelController(sc.setpoint_s, max_rate or plant_mod.NOMINAL_MAX))
        policy.set_baseline(load_latency([y for y in before if y]))
        policy.unthrottled_at_max = max_rate is None
        rate, start = policy.initial_rate(), len(p.flows)
        for _ in range(10):
            mark = p.advance(rate)
            rate, _ = policy.step(p.t, int(p.bytes_done), mark=mark, bytes_total=p.total_bytes)
        flows = p.flows[start:]
        reached = next(k + 1 for k, f in enumerate(flows) if f >= 0.9 * 100e6)
        # Issue 56: a rise waits for the cost of the rate set to show in the latency (the plant's lag, 2 s, and
        # the window's second) instead of compounding on evidence the rate has not answered yet -- the limit
        # cycle on sysbench. Was 3 s; the backup's start (1-3x the latency, not the copy's) falls in that wait.
        # Issue 67: no rise past the evidence -- at most x3 the flow whose cost the latency shows, so 10 -> 30 ->
        # 90 MB/s, each rise held a loop delay (the lag and the window's second) for its answer.
        assert reached <= 1 + 2 * (sc.lag + 1), (max_rate, l0, seed, [round(f / 1e6) for f in flows])


def test_the_verdict_is_on_the_progress_line_and_in_status_with_no_eta():
    from slacker.cli.migrate_cmd import progress_line
    from slacker.cli.tenant_cmd import _migration_line

    verdict = {"what": "cannot finish: the load alone is over the setpoint",
               "why": "latency 52ms with the copy stopped for 30s, against a setpoint of 40ms: no copy rate meets it",
               "hint": "raise the setpoint above 68ms (slacker migrate TENANT --set setpoint=68ms), or stop it "
                       "(slacker migrate --abort TENANT)", "figures": {}}
    ctl = {"setpoint_s": 0.04, "latency_s": 0.052, "rate_bytes_per_s": 0, "source_state": "ok", "verdict": verdict}
    doc = {"phase": "snapshot", "bytes_done": 10, "bytes_total": 100, "rate_bytes_per_s": 0,
           "throughput_bytes_per_s": 0, "eta_s": None, "controller": ctl}
    line = progress_line(doc)
    assert "CANNOT FINISH: THE LOAD ALONE IS OVER THE SETPOINT: latency 52ms" in line and "--set setpoint=68ms" in line
    assert "ETA" not in line
    m = {"id": "m1", "tenant": "t1", "source": "node-1", "target": "node-2", "phase": "snapshot", "controller": ctl}
    assert "CANNOT FINISH" in _migration_line(m) and "--abort" in _migration_line(m)


def test_the_migration_marks_the_read_in_the_backups_start_the_lock_and_a_pause():
    from types import SimpleNamespace

    from slacker.controller.marks import BACKUP_START_S, CopyMarks

    pipe = SimpleNamespace(prereading=True, commit_locked=False, rate=None)  # a ThrottledPipe's attributes
    ctl = ModelController(0.1, MAX)
    policy = SimpleNamespace(controller=ctl)
    marks = CopyMarks()
    assert marks.mark(pipe, policy, 0.0) == "read-in"
    pipe.prereading = False
    assert marks.mark(pipe, policy, 10.0) == "backup start"  # the tool starts when the read-in ends
    assert marks.mark(pipe, policy, 10.0 + BACKUP_START_S - 0.1) == "backup start"
    assert marks.mark(pipe, policy, 10.0 + BACKUP_START_S) is None
    ctl.pause()
    assert marks.mark(pipe, policy, 30.0) == "paused"
    ctl.resume()
    pipe.commit_locked = True
    assert marks.mark(pipe, policy, 31.0) == "commit lock"
    assert CopyMarks().mark(None, None, 0.0) is None


def test_max_duration_aborts_with_the_verdicts_figures():
    """`slacker migrate --max-duration`: past it, the migration is aborted and the failure says why in the
    copy's terms (the cannot-finish verdict, when there is one)."""
    from slacker.cli.migrate_cmd import MaxDuration

    class Source:
        def __init__(self):
            self.posted = []

        def request(self, method, path, body=None):
            self.posted.append((method, path, body))
            return {}

    now = [0.0]
    src = Source()
    limit = MaxDuration(src, "m1", 60.0, clock=lambda: now[0])
    verdict = {"what": "cannot finish: the load alone is over the setpoint", "why": "latency 52ms with the copy "
               "stopped for 30s, against a setpoint of 40ms", "hint": "raise the setpoint above 68ms"}
    doc = {"active": True, "phase": "snapshot", "bytes_done": 10 << 20, "bytes_total": 100 << 20,
           "controller": {"verdict": verdict}}
    now[0] = 59.0
    limit.poll(doc)
    assert src.posted == [] and limit.reason is None
    now[0] = 61.0
    limit.poll(doc)
    limit.poll(doc)  # once
    assert len(src.posted) == 1 and src.posted[0][:2] == ("POST", "/v1/migrations/m1/abort")
    assert "--max-duration" in src.posted[0][2]["reason"]
    assert "the load alone is over the setpoint" in limit.reason and "latency 52ms" in limit.reason
    assert limit.hint == "raise the setpoint above 68ms"


def test_the_first_step_reads_what_the_pipe_moved_not_a_late_pipe():
    """The first step has no earlier byte count: the flow is what the pipe moved since it began. Read as
    0 ("the pipe has not answered"), every copy started with a dead time of one step and the model then
    took the latency for the effect of a rate set a step earlier."""
    moved = ModelController(0.1, MAX)
    moved.step(sample(0.02, 1.0), 1.0, int(moved.rate_bytes_per_s))
    assert moved.state()["model_dead_s"] == 0
    idle = ModelController(0.1, MAX)
    idle.step(sample(0.02, 1.0), 1.0, 0)  # nothing moved in the first step: that pipe is a step late
    assert idle.state()["model_dead_s"] == 1.0


def _toy_plant(c: ModelController):
    """latency = floor + slope x the last step's MB/s; returns step(floor, slope) -> (latency, rate set)."""
    at = {"t": 0.0, "done": 0, "rate": c.rate_bytes_per_s}

    def step(floor: float, slope: float) -> tuple[float, float]:
        at["t"] += 1.0
        at["done"] += int(at["rate"])
        y = floor + slope * at["rate"] / 1e6
        at["rate"] = c.step(sample(y, at["t"], 10), at["t"], at["done"]).rate_bytes_per_s
        return y, at["rate"]
    return step


def test_a_controller_that_outlives_a_copy_does_not_pay_for_old_latency():
    """A node's budget keeps one controller through a drain: 250 s of copies under a laxer setpoint, over
    the stricter one that follows, must not hold the next copies at 0 while latency is under the setpoint
    now. The aim's account of the mean starts again with a new setpoint (it did not: a drain's last two
    copies stood at 0 B/s for 17 minutes)."""
    c = ModelController(0.160, MAX)
    c.set_load_latency(0.035)
    step = _toy_plant(c)
    for _ in range(250):
        step(0.090, 0.006)  # the copies of minutes ago, over 58 ms
    c.set_setpoint(0.058)
    rates = [step(0.048, 0.002)[1] for _ in range(90)]
    assert max(rates[30:]) > 1e6, f"still held after the latency fell under the setpoint: {rates[-5:]}"
