"""The command-line reference page, generated from the argument parser itself.

    python docs/generate/cli_reference.py --write docs/reference/cli.md

refreshes the part between the markers; a test fails when the page is stale.
"""

from __future__ import annotations

import importlib
import os

from jaxdet.cli.main import TF_COMMANDS, _parser
from jaxdet.cli.tfod_flags import help_text
from jaxdet.config.reference import replace_between

BEGIN = "<!-- cli-reference:begin -->"
END = "<!-- cli-reference:end -->"
WIDTH = 100  # help text wrapped as on a 100-column terminal, whatever the machine's


def cli_reference() -> str:
    """Markdown: the top-level help, then each command's help, in the parser's order, then
    the TF OD API's scripts (``jaxdet model_main_tf2`` ...) with their flags."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        parser = _parser()
        parts = ["```text", parser.format_help().rstrip(), "```"]
        commands = parser._subparsers._group_actions[0].choices
        for name, sub in commands.items():
            parts += ["", f"## jaxdet {name}", "", "```text", sub.format_help().rstrip(), "```"]
        for name in TF_COMMANDS:
            module = importlib.import_module(f"jaxdet.cli.{name}")
            parts += ["", f"## jaxdet {name}", "",
                      f"Also the command `{name}`. Flags as TF's script takes them "
                      "(absl's syntax).", "", "```text",
                      help_text(name, module.FLAGS).rstrip(), "```"]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(parts) + "\n"


def render(text: str) -> str:
    """``text`` with the part between the markers replaced by :func:`cli_reference`."""
    return replace_between(text, BEGIN, END, cli_reference())


if __name__ == "__main__":
    import argparse
    from pathlib import Path

    args_parser = argparse.ArgumentParser(description="print or refresh the CLI reference")
    args_parser.add_argument("--write", metavar="PAGE", help="update this Markdown page")
    args = args_parser.parse_args()
    if args.write:
        page = Path(args.write)
        page.write_text(render(page.read_text()))
    else:
        print(cli_reference(), end="")
