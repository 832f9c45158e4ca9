"""What `slacker migrate` and `slacker status` print: the delta phase (applier, MPL, per-round write/apply
rates) and the verification (progress, ETA, the verified position)."""

from __future__ import annotations

from slacker.cli.migrate_cmd import print_summary


def _doc(**delta):
    return {"id": "m1", "result": "succeeded", "tenant": "t1", "source": "n1", "target": "n2", "mode": "live",
            "duration_s": 12.0, "phases": [{"name": "snapshot", "duration_s": 2.0}, {"name": "delta", "duration_s": 3.0}],
            "bytes_total": 1000, "bytes_done": 1000, "freeze_ms": 113.0, "series_path": "/x.jsonl",
            "rounds": [{"n": 1, "transactions": 900, "bytes": 10000, "duration_s": 0.5, "remaining_bytes": 100,
                        "est_freeze_ms": 10.0, "write_tps": None, "apply_tps": 2968.3, "mpl": 8},
                       {"n": 2, "transactions": 400, "bytes": 4000, "duration_s": 0.2, "remaining_bytes": 10,
                        "est_freeze_ms": 1.0, "write_tps": 887.6, "apply_tps": 2968.3, "mpl": 6}],
            "delta": delta}


def test_summary_shows_applier_mpl_and_round_rates(capsys):
    print_summary(_doc(applier="concurrent", mpl=6, mpl_mode="auto", best_apply_tps=2968.3))
    out = capsys.readouterr().out
    assert "delta applier" in out and "concurrent, MPL 6 (auto), best apply 2,968/s" in out
    assert "WRITES" in out and "APPLY" in out and "MPL" in out
    assert "888/s" in out and "2,968/s" in out


def test_summary_of_a_serial_migration(capsys):
    print_summary(_doc(applier="serial", mpl=0, mpl_mode="fixed", best_apply_tps=None))
    out = capsys.readouterr().out
    assert "delta applier" in out and "serial" in out and "MPL 0" not in out


VERIFYING = {"id": "m1", "tenant": "t1", "source": "n1", "target": "n2", "phase": "verify", "bytes_done": 300_000_000,
             "bytes_total": 1_000_000_000, "rate_bytes_per_s": 50_000_000, "throughput_bytes_per_s": 40_000_000,
             "eta_s": 17.5, "rounds": [], "controller": {"setpoint_s": 0.02, "latency_s": 0.004,
                                                         "rate_bytes_per_s": 50_000_000},
             "verify": {"bytes_done": 300_000_000, "bytes_total": 900_000_000, "tables_done": 2, "tables_total": 5}}


def test_progress_and_status_lines_while_verifying():
    from slacker.cli.migrate_cmd import progress_line
    from slacker.cli.tenant_cmd import _migration_line

    line = progress_line(VERIFYING)
    assert line.startswith("[   verify] 300.0MB/900.0MB  33.3%"), line  # the verification's bytes, not the copy's
    assert "ETA 17.5s" in line and "table 2/5" in line and "latency 4ms/20ms" in line, line
    status = _migration_line(VERIFYING)
    assert "phase verify" in status and "verified 33% (table 2/5)" in status and "ETA 18s" in status, status


def test_summary_names_the_verified_position(capsys):
    doc = _doc(applier="serial", mpl=0)
    doc.update(verified=True, verify={"position": "0-1-2345", "tables_total": 3, "rows": 8400, "duration_s": 0.31})
    print_summary(doc)
    assert "equal at 0-1-2345 (3 tables, 8,400 rows, 310ms)" in capsys.readouterr().out


WAIT = ("past the flip: waiting for the target agent n2 to come back; the tenant is not writable until it does "
        "(`slacker status`)")


def test_a_wait_past_the_flip_is_said_on_the_progress_line_in_status_and_the_summary(capsys):
    from slacker.cli.migrate_cmd import progress_line
    from slacker.cli.tenant_cmd import _migration_line

    doc = dict(VERIFYING, phase="finishing", verify=None, eta_s=None, past_point_of_no_return=True,
               finishing_reason="target agent n2 failed: connection refused",
               waiting={"for": "target-agent", "node": "n2", "writable": False, "message": WAIT, "seconds": 42.0})
    assert WAIT in progress_line(doc) and "42.0s" in progress_line(doc)
    assert WAIT in _migration_line(doc) and "(for 42s)" in _migration_line(doc)
    done = _doc(applier="serial", mpl=0)
    done["waited"] = [{"for": "target-agent", "node": "n2", "writable": False, "message": WAIT, "seconds": 42.0}]
    print_summary(done)
    assert "waited past the flip" in capsys.readouterr().out


def test_without_a_terminal_the_wait_is_said_once_when_it_begins_and_once_when_it_ends(capsys):
    from slacker.cli.migrate_cmd import WaitNotice

    notice = WaitNotice(on_progress_line=False)
    waiting = {"id": "m1", "waiting": {"for": "target-agent", "message": WAIT, "seconds": 1.0}, "waited": []}
    for _ in range(3):
        notice.poll(waiting)
    notice.poll({"id": "m1", "waiting": None, "waited": [dict(waiting["waiting"], seconds=12.0)]})
    err = capsys.readouterr().err.splitlines()
    assert err == [f"slacker: migration m1: {WAIT}", "slacker: migration m1: going on after 12s past the flip"]
