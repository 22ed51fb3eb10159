"""The manual speaks to users: the README stays a front page, and no page of it talks about how
the project is developed (issue or run numbers, test files, paths outside the repository);
that is CONTRIBUTING.md's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DEVELOPMENT_WORDS = re.compile(
    r"\bissues? #?\d+|\bruns? \d+\b|\bchange \d+|tests/[\w/]+\.py|\btest_\w+\.py|\.\./shared|"
    r"shared/data|/work/", re.IGNORECASE)


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the manual is docs/"


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_development_words(page):
    found = [f"{page.relative_to(ROOT)}:{n}: {m.group(0)!r}"
             for n, line in enumerate(page.read_text().splitlines(), 1)
             for m in DEVELOPMENT_WORDS.finditer(line)]
    assert not found, "\n".join(found)


def test_every_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert [p for p in pages if p not in nav] == []
