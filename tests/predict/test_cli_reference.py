"""The command-line reference page is the parser's own help, current."""

from pathlib import Path

from jaxdet.app.cli_reference import BEGIN, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"


def test_the_cli_reference_page_is_current():
    text = PAGE.read_text()
    assert BEGIN in text and "## jaxdet train" in text and "--no-progress" in text
    assert render(text) == text, (
        "docs/reference/cli.md is stale: run `python -m jaxdet.app.cli_reference --write "
        "docs/reference/cli.md`")
