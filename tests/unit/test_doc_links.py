"""Every relative link and image in README.md, docs/*.md and docs/results/*.md points at a file that exists, and every
#anchor at a heading of the page it names (GitHub's anchor rules)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "results").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    out, seen = set(), {}
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for title in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(pages: list[Path]) -> list[str]:
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    return broken


def test_every_link_in_the_docs_resolves():
    assert broken_links(PAGES) == []


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A heading\n\n[ok](#a-heading) [gone](nothing.md) [bad](#no-heading)\n"
                    "![img](img/none.png)\n```\n[in code](ignored.md)\n```\n")
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        found = broken_links([page])
    finally:
        REPO = saved
    assert found == ["page.md: nothing.md (no such file)", "page.md: #no-heading (no such heading)",
                     "page.md: img/none.png (no such file)"]
