"""Every ```console block of the manual prints what it shows (see console_blocks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from console_blocks import BLOCK, ROOT, check_page, pages  # noqa: E402

PAGES = [p for p in pages() if BLOCK.search(p.read_text())]


def test_the_manual_has_console_blocks():
    assert len(PAGES) >= 1


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.slow
def test_console_blocks_print_what_they_show(page):
    problems = check_page(page)
    assert not problems, "\n\n".join(problems) + (
        "\n\nrun `python tests/docs/console_blocks.py --write` to refresh them")
