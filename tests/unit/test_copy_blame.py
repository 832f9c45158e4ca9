"""Which side of a broken snapshot copy failed (slacker/transfer/blame.py), and the backup tool's
line worth quoting (transfer/_proc.last_error_line)."""

from __future__ import annotations

from slacker.errors import MigrationFailed, error_from_dict
from slacker.transfer._proc import exit_text, last_error_line
from slacker.transfer.base import stage_error
from slacker.transfer.blame import explain

STARTUP_LOG = "\n".join([
    "[00] 2026-11-25 21:07:48 Connecting to server host: localhost, user: slacker_backup, password: set",
    "[00] 2026-11-25 21:07:48 Starting BACKUP STAGE START",
    "[00] 2026-11-25 21:07:48 Acquired locks for BACKUP STAGE START",
    "[00] 2026-11-25 21:07:48 Start scanning aria tables.",
    "[00] 2026-11-25 21:07:48 Streaming ./shop/orders.ibd",
    "[00] 2026-11-25 21:07:48         ...done",
    "[00] 2026-11-25 21:07:48 Streaming ./shop/items.ibd",
])
FAILED_LOG = STARTUP_LOG + "\n" + "\n".join([
    "[00] 2026-11-25 21:11:59 Error: failed to execute query SHOW STATUS LIKE 'Innodb_lsn_flushed': Server has gone away",
    "[00] FATAL ERROR: 2026-11-25 21:11:59 failed to execute query BACKUP LOCK `mysql`.`index_stats`: Server has gone away",
    "[00] 2026-11-25 21:11:59 Streaming ./shop/more.ibd",
])


def test_last_error_line_prefers_the_last_error_and_drops_the_tag_and_time():
    assert last_error_line(FAILED_LOG) == (
        "FATAL ERROR: 2026-11-25 21:11:59 failed to execute query BACKUP LOCK `mysql`.`index_stats`: "
        "Server has gone away", True)
    assert last_error_line(STARTUP_LOG) == ("Streaming ./shop/items.ibd", False)
    assert last_error_line("2026-11-25 21:07:48 0 [ERROR] InnoDB: Operating system error number 2\n") == (
        "[ERROR] InnoDB: Operating system error number 2", True)
    assert last_error_line("") == ("", False)
    assert len(last_error_line("Error: " + "x" * 1000)[0]) < 320


def test_exit_text_names_the_signal():
    assert exit_text(1) == "exited with code 1"
    assert exit_text(-9) == "was killed by SIGKILL"
    assert exit_text(-13) == "was killed by SIGPIPE"


def _pipe_error(stage: str, why: str, tail: str = STARTUP_LOG) -> MigrationFailed:
    return stage_error(stage, f"snapshot transfer m1 to 10.0.0.3:4000 failed at {stage}", why, tail)


def test_a_broken_link_quotes_no_tool_log_but_keeps_it_as_detail():
    err = _pipe_error("transport", "connection to the receiver broke after 17773200 bytes: [Errno 32] Broken pipe")
    assert "[00]" not in err.one_line() and "BACKUP STAGE" not in err.one_line()
    assert err.detail == STARTUP_LOG
    assert error_from_dict(err.to_dict()).detail == STARTUP_LOG  # across the agent's API (--json, --debug)


def test_the_producer_failing_quotes_its_error_line_only():
    err = _pipe_error("producer", "mariabackup exited with code 1 after 31998801 bytes", FAILED_LOG)
    line = err.one_line()
    assert "; its error: FATAL ERROR: 2026-11-25 21:11:59 failed to execute query BACKUP LOCK" in line
    assert "Innodb_lsn_flushed" not in line and "Streaming" not in line and "[00]" not in line


def _explain(err, down):
    asked = []

    def target_down():
        asked.append(1)
        return down
    out = explain(err, tenant="t42", source="node-1", target="node-2", bytes_sent=17_773_200, target_down=target_down)
    return out, asked


def test_a_dead_target_agent_is_named_with_the_next_step():
    err = _pipe_error("transport", "connection to the receiver broke after 17773200 bytes: [Errno 32] Broken pipe")
    out, asked = _explain(err, "[Errno 111] Connection refused")
    assert asked and out.phase == "snapshot" and out.stage == "transport"
    assert out.one_line() == (
        "the copy to node-2 broke after 17.8MB: node-2's agent does not answer: [Errno 111] Connection refused "
        "(start node-2's agent again (`slacker status` shows which agents answer, its log why it stopped), "
        "then retry `slacker migrate t42 --to node-2`)")
    assert out.detail == STARTUP_LOG
    # A producer that died of the cut (SIGPIPE under pv | nc) is not blamed when the target is gone.
    out, _ = _explain(_pipe_error("producer", "mariabackup was killed by SIGPIPE"), "timed out")
    assert out.what.startswith("the copy to node-2 broke") and "backup tool" not in out.what


def test_a_live_target_leaves_the_blame_where_it_broke():
    out, _ = _explain(_pipe_error("transport", "connection to the receiver broke: [Errno 104] reset"), None)
    assert out.what == "the copy to node-2 broke after 17.8MB while node-2's agent answers"
    assert "check the network between node-1 and node-2" in out.hint
    out, _ = _explain(_pipe_error("receiver", "the receiver refused the stream: disk full"), None)
    assert out.what == "node-2 refused the copy after 17.8MB" and "node-2's agent log" in out.hint
    out, _ = _explain(_pipe_error("producer", "mariabackup exited with code 1", FAILED_LOG), None)
    assert out.what == "the backup tool on node-1 failed after 17.8MB" and "its error: FATAL ERROR" in out.why
    assert "node-1's agent log" in out.hint and "slacker migrate t42 --to node-2" in out.hint


def test_an_abort_is_not_explained_and_the_target_not_asked():
    err = _pipe_error("aborted", "aborted after 5 bytes")
    out, asked = _explain(err, "down")
    assert out is err and not asked
