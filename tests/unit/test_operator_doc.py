"""docs/deployment.md's marked operator-path blocks and the list of what the operator-path test runs agree:
no mark the test ignores, no step the test expects missing, and every other shell block has a reason."""

from __future__ import annotations

from tests import operator_doc as od


def test_every_mark_is_consumed_and_every_consumed_mark_exists() -> None:
    written = od.marks_in_page()
    assert len(written) == len(set(written)), f"a mark is written twice: {written}"
    on_blocks = [b.mark for b in od.blocks() if b.mark]
    assert sorted(on_blocks) == sorted(written), "a mark must be the line right above a fenced block"
    assert set(written) - set(od.MARKS) == set(), "marked in deployment.md but not run by test_operator_path"
    assert set(od.MARKS) - set(written) == set(), "run by test_operator_path but no longer marked in deployment.md"
    assert len(set(od.MARKS)) == len(od.MARKS)


def test_every_shell_block_is_run_or_has_a_reason() -> None:
    unmarked = [b for b in od.blocks() if b.lang in ("sh", "python") and not b.mark]
    firsts = {b.line: od.command_lines(b.text)[0] for b in unmarked}
    no_reason = {line: first for line, first in firsts.items()
                 if not any(first.startswith(k) for k in od.NOT_RUN)}
    assert not no_reason, f"shell blocks of deployment.md neither marked operator-path nor in NOT_RUN: {no_reason}"
    stale = [k for k in od.NOT_RUN if not any(f.startswith(k) for f in firsts.values())]
    assert not stale, f"NOT_RUN names blocks deployment.md no longer has (unmarked): {stale}"


def test_lines_the_test_does_not_run_as_written_exist() -> None:
    lines = [line for b in od.blocks() if b.mark for line in od.command_lines(b.text)]
    for start in od.SKIPPED_LINES:
        assert any(line.startswith(start) for line in lines), f"SKIPPED_LINES names a line not in a marked block: {start}"
    systemctl = [line for line in lines if line.startswith("systemctl")]
    assert systemctl and all(od.SYSTEMCTL.match(line) for line in systemctl), systemctl


def test_the_parser_sees_marks_comments_and_fences(tmp_path) -> None:
    page = tmp_path / "p.md"
    page.write_text("text\n<!-- operator-path: one -->\n```sh\na --x 'b # c'  # on db-d\n# prose\n\n```\n"
                    "```sh\nplain\n```\n<!-- operator-path: orphan -->\n\nwords\n")
    bs = od.blocks(page)
    assert [(b.mark, b.lang) for b in bs] == [("one", "sh"), (None, "sh")]
    assert od.command_lines(bs[0].text) == ["a --x 'b # c'"]
    assert od.comment(bs[0].text.splitlines()[0]) == "on db-d"
    assert od.marks_in_page(page) == ["one", "orphan"]  # the orphan is refused by the first test's second assert
