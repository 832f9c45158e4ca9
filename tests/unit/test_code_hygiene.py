"""Structural checks on the code base: symbols that were dead stay gone, and no comment or string in
slacker/ narrates the project's history (issue numbers, work sessions, commit hashes): a comment says
why the code is as it is now; how it got there belongs in the commit message."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE_DIRS = ("slacker", "bench", "tests")

# Functions, methods and classes nothing called; a definition of one of these names is a regression.
DEAD = {"ThrottleConfig", "set_warming", "is_read_only", "close_snapshot", "for_tenant", "_field_value",
        "operation_names"}
# Parameters nothing passed.
DEAD_PARAMETERS = {"warming"}
DEAD_ALLOWED: set[tuple[str, str]] = set()

ORDINAL = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|previous|earlier|\d+(?:st|nd|rd|th))"
HISTORY = re.compile("|".join([
    r"\bissues? \d+",                              # "issue 14", "issues 40 and 45"
    rf"\b{ORDINAL} session",                       # "seventh session", "the second session's sweep"
    r"\bsessions? \d",                             # "sessions 5-7"
    r"\byesterday\b",
    r"\b(?:commit|git show) [0-9a-f]{7,40}\b",     # a commit hash cited as a source
    r"\bdocs/history/",                            # a page that exists only in git history
    r"\bas before the\b|\bthe old behaviou?r\b",
]), re.I)


def python_files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py") if ".venv" not in p.parts)


def definitions(path: Path) -> list[tuple[str, int]]:
    """Names of the classes, functions and parameters defined in one file, with their lines."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.name, node.lineno))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            out += [(p.arg, node.lineno) for p in a.posonlyargs + a.args + a.kwonlyargs]
    return out


def dead_definitions(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        for name, line in definitions(path):
            if name in DEAD | DEAD_PARAMETERS and (rel, name) not in DEAD_ALLOWED:
                found.append(f"{rel}:{line}: {name}")
    return found


def prose(source: str) -> list[tuple[int, str]]:
    """Every comment block and string literal of a Python source with its first line: where history
    would be told. Identifiers (start_new_session) and code outside strings are not prose. Comments on
    consecutive lines are one block, so a phrase wrapped across two of them is still read whole."""
    out: list[tuple[int, str]] = []
    last_comment = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if tok.start[0] == last_comment + 1 and out:
                out[-1] = (out[-1][0], out[-1][1] + " " + text)
            else:
                out.append((tok.start[0], text))
            last_comment = tok.start[0]
        elif tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            out.append((tok.start[0], tok.string))
    return out


def history_lines(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        for line, text in prose(path.read_text()):
            m = HISTORY.search(re.sub(r"\s+", " ", text))
            if m:
                found.append(f"{path.relative_to(REPO).as_posix()}:{line}: {m.group(0)!r}")
    return found


def test_the_dead_symbols_stay_gone():
    assert dead_definitions(python_files(*CODE_DIRS)) == []


def test_no_comment_in_slacker_narrates_history():
    assert history_lines(python_files("slacker")) == []


def test_the_checks_find_what_they_look_for(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text('"""Where the copy waited (issue 45)."""\n'
                   "def close_snapshot(conn, warming=False):\n"
                   "    # the queue took seconds to drain (docs/results.md, issue 14, fifth\n"
                   "    # session). One thread is enough.\n"
                   "    y = 0\n"
                   "    x = 1  # measured in sessions 5-7\n"
                   "    return 'see git show 490c0e6:docs/history/issue-14.md'\n")
    assert dead_definitions([bad]) == ["bad.py:2: close_snapshot", "bad.py:2: warming"]
    assert [f.split(": ", 1)[0] for f in history_lines([bad])] == ["bad.py:1", "bad.py:3", "bad.py:6", "bad.py:7"]
    good = tmp_path / "good.py"
    good.write_text("import subprocess\n"
                    "subprocess.Popen(['x'], start_new_session=True)  # own session: signals for us miss it\n"
                    "SQL = 'SET SESSION max_statement_time = 0'\n"
                    "def step(now, mark=None):\n"
                    "    '''The server's session tickets arrive after the handshake.'''\n")
    assert dead_definitions([good]) == [] and history_lines([good]) == []
