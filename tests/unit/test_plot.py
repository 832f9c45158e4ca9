"""`slacker plot`: renders a PNG from a run's JSONL, and rejects bad files with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slacker.cli import main
from slacker.errors import InvalidInput
from slacker.plot import load_timeseries, phase_spans, plot_file, plot_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(path: Path, n: int = 60) -> Path:
    lines = []
    for k in range(n):
        phase = "preflight" if k < 3 else "snapshot" if k < 45 else "delta" if k < 55 else "handover"
        row = {"t": k * 1.0, "phase": phase, "rate_bytes_per_s": (k % 10) * 1e6, "bytes_done": k * 5e6}
        if phase == "snapshot":
            row.update(latency_s=0.8 + 0.05 * (k % 7), setpoint_s=1.0)
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_renders_a_png(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl")
    out = plot_file(run, tmp_path / "run.png")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_phase_spans_cover_the_run(tmp_path: Path) -> None:
    points = load_timeseries(write_run(tmp_path / "run.jsonl"))
    spans = phase_spans(points)
    assert [s[0] for s in spans] == ["preflight", "snapshot", "delta", "handover"]
    assert spans[0][1] == 0.0 and spans[1][1] == 3.0 and spans[-1][2] == 59.0


def test_plots_a_run_without_latency_and_unthrottled(tmp_path: Path) -> None:
    run = tmp_path / "fixed.jsonl"
    run.write_text(
        '{"t": 0, "phase": "snapshot", "rate_bytes_per_s": 0, "bytes_done": 0}\n'
        '{"t": 1, "phase": "snapshot", "rate_bytes_per_s": null, "bytes_done": 9, "throughput_bytes_per_s": 9}\n'
    )
    points = load_timeseries(run)
    assert points[1].rate_bytes_per_s is None and points[1].throughput_bytes_per_s == 9
    assert plot_run(points, tmp_path / "fixed.png").read_bytes().startswith(PNG_MAGIC)


def test_cli_plot_writes_png(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl")
    result = CliRunner().invoke(main, ["plot", str(run), "-o", str(tmp_path / "out.png"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {"output": str(tmp_path / "out.png"), "points": 60}
    assert (tmp_path / "out.png").read_bytes().startswith(PNG_MAGIC)
    # Default output name: beside the run file.
    result = CliRunner().invoke(main, ["plot", str(run)])
    assert result.exit_code == 0 and (tmp_path / "run.png").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "is empty"),
        ("\n\n", "is empty"),
        ('{"t": 0, "phase": "snapshot"', "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"t": 0, "phase": "snapshot", "bytes_done": 0}', "missing rate_bytes_per_s"),
        ('{"t": "soon", "phase": "snapshot", "rate_bytes_per_s": 0, "bytes_done": 0}', "t must be"),
        ('{"t": 0, "phase": 3, "rate_bytes_per_s": 0, "bytes_done": 0}', "phase must be"),
        ('{"t": 0, "phase": "x", "rate_bytes_per_s": 0, "bytes_done": 0, "latency_s": "slow"}', "latency_s"),
    ],
)
def test_bad_files_raise_invalid_input(tmp_path: Path, content: str, message: str) -> None:
    run = tmp_path / "bad.jsonl"
    run.write_text(content)
    with pytest.raises(InvalidInput, match=message):
        plot_file(run, tmp_path / "bad.png")


def test_cli_errors_are_one_line_and_non_zero(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["plot", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == InvalidInput.exit_code
    assert result.stderr.strip() == f"slacker: error: run file {tmp_path / 'missing.jsonl'} not found: no such file (give the JSONL file a migration wrote)"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    result = CliRunner().invoke(main, ["plot", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:1" in result.stderr and "Traceback" not in result.output


def test_output_directory_must_exist(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl")
    with pytest.raises(InvalidInput, match="does not exist"):
        plot_file(run, tmp_path / "nope" / "run.png")


def test_title_says_what_the_summary_says(tmp_path: Path, capsys) -> None:
    """The demo's plot said "118.1 MB in 8.0 s" where the summary said 9.0 s: the samples start a step
    after the migration, and the span of their t was shown. Both now count bytes copied and the
    migration's duration from start to end, in the same units."""
    from slacker.cli.migrate_cmd import print_summary
    from slacker.plot import run_title

    rows = [{"t": k + 1.0, "phase": "snapshot", "rate_bytes_per_s": None, "bytes_done": (k + 1) * 14.7625e6}
            for k in range(8)]
    rows[-1]["duration_s"] = 9.012  # the migration's last sample (written after it ended)
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    title = run_title(load_timeseries(run))
    assert title == "migration: 118.1MB copied in 9.0s"
    print_summary({"id": "m1", "result": "succeeded", "tenant": "t1", "source": "n1", "target": "n2", "mode": "stop",
                   "duration_s": 9.012, "phases": [{"name": "copy", "duration_s": 7.0}], "bytes_total": 118.1e6,
                   "bytes_done": rows[-1]["bytes_done"], "freeze_ms": None, "series_path": str(run), "rounds": []})
    out = capsys.readouterr().out
    assert "9.0s)" in out.splitlines()[0] and "118.1MB" in out
    # A series without the duration (an older run, or one still running): the time since the start.
    del rows[-1]["duration_s"]
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_title(load_timeseries(run)) == "migration: 118.1MB copied in 8.0s"
