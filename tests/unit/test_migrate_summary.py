"""What `slacker migrate` prints about the delta phase: applier, MPL, and per-round write/apply rates."""

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
