"""The manual's generated parts (the config reference, the shipped-config table) match the
code."""

from pathlib import Path

import pytest

from jaxdet.config.reference import BEGIN, TABLE_BEGIN, render_generated

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {"reference/config.md": BEGIN, "models/index.md": TABLE_BEGIN}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_generated_parts_are_current(page):
    text = (DOCS / page).read_text()
    assert PAGES[page] in text
    assert render_generated(text) == text, (
        f"docs/{page} is stale: run `python -m jaxdet.config.reference --write "
        "docs/reference/config.md docs/models/index.md`")


def test_section_descriptions_are_whole_docstrings():
    """Every section of the reference shows its docstring whole (all paragraphs), never cut
    mid-sentence as the first line alone was ("... (ResNet: the stem and")."""
    from jaxdet.config.reference import _models_in, section_description
    from jaxdet.config.schema import BackboneConfig, Config

    seen, todo = set(), [Config]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for field in model.model_fields.values():
            todo += _models_in(field.annotation)
        text = section_description(model)
        if text:
            assert text[-1] in ".)", f"{model.__name__}: description ends mid-sentence: {text!r}"
            assert "``" not in text
    assert len(seen) > 30
    backbone = section_description(BackboneConfig)
    assert "(ResNet: the stem and stage widths" in backbone
    assert "(TF: `feature_extractor.conv_hyperparams` serves both)." in backbone
    assert "which support nothing else)." in backbone
