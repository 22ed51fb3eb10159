"""The README's generated sections (config reference, shipped configs) match the code."""

from pathlib import Path

from jaxdet.config.reference import render_readme

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_generated_sections_are_current():
    text = README.read_text()
    assert render_readme(text) == text, (
        "README.md is stale: run `python -m jaxdet.config.reference --write README.md`"
    )


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
