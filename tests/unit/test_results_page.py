"""docs/results.md is one page of today's figures: short enough to read (≤ 500 lines), no history (work
sessions, "yesterday", attempts, commit hashes), and a top table of claim · figure · conditions · goal ·
met that lists every section and marks every goal a section says was missed. The pages under
docs/results/ hold the longer tables and are held to the same no-history rule."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "results.md"
SUB_PAGES = sorted((REPO / "docs" / "results").glob("*.md"))
MAX_LINES = 500

HISTORY = re.compile(r"\bsessions?\b|\byesterday\b", re.I)
ATTEMPT = re.compile(r"\battempt(s|ed)?\b", re.I)
# A commit hash: 7-40 hex digits with at least one digit and one letter (so neither a number nor a word).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
# Names a command line or the code gives things; a bench option may contain a banned word.
NAMES = re.compile(r"--[\w-]+|\b\w+_\w+\b")
MISSED = re.compile(r"\bnot (?:met|reached|shown|resolvable)\b|\bmiss(?:es|ed)\b", re.I)
MARKED = re.compile(r"\bno\b|\bnot\b", re.I)
HEADER = ["claim", "figure", "conditions", "goal", "met"]


def slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower().replace("`", "")).replace(" ", "-")


def banned(text: str, attempts: bool = True) -> list[str]:
    plain = NAMES.sub(" ", text)
    found = [m.group(0) for m in HISTORY.finditer(plain)] + [m.group(0) for m in COMMIT.finditer(plain)]
    if attempts:
        found += [m.group(0) for m in ATTEMPT.finditer(plain)]
    return found


def top_table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """The first table's header and its rows by the #anchor their claim links to."""
    rows = [line for line in text.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    by_anchor = {}
    for row in cells[2:]:
        m = re.search(r"\]\(#([^)]+)\)", row[0])
        if m:
            by_anchor[m.group(1)] = row
    return (cells[0] if cells else []), by_anchor


def sections(text: str) -> dict[str, str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    parts = re.split(r"^## +(.+)$", text, flags=re.M)
    return {slug(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def problems(text: str) -> list[str]:
    out = []
    n = len(text.splitlines())
    if n > MAX_LINES:
        out.append(f"{n} lines (at most {MAX_LINES})")
    out += [f"history: {w!r}" for w in banned(text)]
    header, rows = top_table(text)
    if header != HEADER:
        out.append(f"top table's columns are {header}, not {HEADER}")
    for anchor, body in sections(text).items():
        row = rows.get(anchor)
        if row is None:
            out.append(f"section #{anchor} is not in the top table")
        elif MISSED.search(body) and not MARKED.search(row[-1]):
            out.append(f"section #{anchor} says a goal was missed; its row's 'met' is {row[-1]!r}")
    out += [f"the top table links #{a}, which is no section" for a in rows if a not in sections(text)]
    return out


def test_results_page_is_one_page_of_todays_figures():
    assert problems(PAGE.read_text()) == []


def test_results_sub_pages_tell_no_history():
    for page in SUB_PAGES:
        assert banned(page.read_text(), attempts=False) == [], page.name


def test_the_rules_catch_what_they_name():
    page = ("# Results\n\n| claim | figure | conditions | goal | met |\n|---|---|---|---|---|\n"
            "| [fast](#fast) | 1 s | idle | ≤ 2 s | yes |\n| [small](#small) | 9 MiB | idle | ≤ 5 MiB | yes |\n\n"
            "## Fast\n\nMeasured in the second session, yesterday, commit 4b3b18e; three attempts.\n\n"
            "```\nbench/run x --max-attempts 4\n```\n\n## Small\n\nThe goal is not met.\n\n## Forgotten\n\n"
            + "x\n" * MAX_LINES)
    assert problems(page) == [
        f"{len(page.splitlines())} lines (at most {MAX_LINES})",
        "history: 'session'", "history: 'yesterday'", "history: '4b3b18e'", "history: 'attempts'",
        "section #small says a goal was missed; its row's 'met' is 'yes'",
        "section #forgotten is not in the top table",
    ]
    assert banned("`performance_schema_session_connect_attrs_size`, `--handover-attempts 3`, 2097152 bytes") == []
