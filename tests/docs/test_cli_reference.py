"""The command-line reference page is the parser's own help, current."""

from pathlib import Path

from doc_generators import load_generator

cli_reference = load_generator("cli_reference")
BEGIN, render = cli_reference.BEGIN, cli_reference.render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"


def test_the_cli_reference_page_is_current():
    text = PAGE.read_text()
    assert BEGIN in text and "## jaxdet train" in text and "--no-progress" in text
    assert render(text) == text, (
        "docs/reference/cli.md is stale: run `python docs/generate/cli_reference.py --write "
        "docs/reference/cli.md`")
