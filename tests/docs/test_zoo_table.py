"""The TF OD API guide's table of the 40 zoo configs is what the zoo's files give now."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_generators import load_generator

zoo_table = load_generator("zoo_table")
BEGIN, render = zoo_table.BEGIN, zoo_table.render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "tfod.md"
CONFIGS = ROOT.parent / "shared" / "data" / "tfod" / "configs"


def test_the_page_holds_a_row_per_zoo_config():
    text = PAGE.read_text()
    table = text[text.index(BEGIN):]
    assert table.count("_coco17_") + table.count("center_net_deepmac") >= 40


@pytest.mark.exhaustive
@pytest.mark.skipif(not CONFIGS.is_dir(), reason="needs the zoo's pipeline.configs")
def test_the_zoo_table_is_current():
    text = PAGE.read_text()
    assert render(text, CONFIGS) == text, (
        "docs/guides/tfod.md is stale: run `python docs/generate/zoo_table.py --configs "
        "DIR --write docs/guides/tfod.md`")
