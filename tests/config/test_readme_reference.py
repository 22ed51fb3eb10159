"""The README's generated sections (config reference, shipped configs) match the code."""

from pathlib import Path

from jaxdet.config.reference import render_readme

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_generated_sections_are_current():
    text = README.read_text()
    assert render_readme(text) == text, (
        "README.md is stale: run `python -m jaxdet.config.reference --write README.md`"
    )
