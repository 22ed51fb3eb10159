"""The manual's ```console blocks: each line that starts with ``$ `` is a command, the lines
after it what the command prints (stdout and stderr as a terminal shows them). The suite runs
every block and compares; ``python tests/docs/console_blocks.py --write`` runs them and
rewrites the shown output in place (a block that still matches is left as it is).

What varies from run to run is elided: ``...`` inside a line stands for any text there (a
rate, a time), a line that is only ``...`` for any number of lines (log lines).

Commands run in a fresh temporary folder with the ``jaxdet`` of this checkout, one after the
other (a later command may use what an earlier one wrote); the repository's ``examples/`` is
there too, as users of a clone have it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```console\n(.*?)^```$", re.S | re.M)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def commands(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def run(command: str, cwd: Path) -> str:
    """What ``command`` prints, stdout and stderr in one stream as a log file gets them,
    without trailing spaces."""
    argv = shlex.split(command)
    if argv[0] == "jaxdet":
        argv = [sys.executable, "-m", "jaxdet.cli.main", *argv[1:]]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "COLUMNS": "100", "NO_COLOR": "1",
           "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, timeout=600)
    text = done.stdout
    return "\n".join(line.rstrip() for line in text.splitlines())


def _line_pattern(line: str) -> str:
    return ".*?".join(re.escape(part) for part in line.split("..."))


def matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` shows, elisions (``...``) allowed."""
    pattern = "".join("(?:.*\n)*?" if line == "..." else _line_pattern(line) + "\n"
                      for line in shown.splitlines())
    return re.fullmatch(pattern, printed if printed.endswith("\n") else printed + "\n") \
        is not None


def render(block: str, cwd: Path) -> str:
    """The block with each command's output as it prints now."""
    out = []
    for command in commands(block):
        out.append(f"$ {command}")
        printed = run(command, cwd)
        if printed:
            out.append(printed)
    return "\n".join(out) + "\n"


def check_page(page: Path, write: bool = False) -> list[str]:
    """Mismatches of ``page``'s console blocks (empty: all current); ``write`` fixes them."""
    text = page.read_text()
    problems, pieces, last = [], [], 0
    with tempfile.TemporaryDirectory(prefix="jaxdet-doc-") as tmp:
        (Path(tmp) / "examples").symlink_to(ROOT / "examples")
        for match in BLOCK.finditer(text):
            shown = match.group(1)
            now = render(shown, Path(tmp))
            if matches(shown, now):
                now = shown
            else:
                problems.append(f"{page.relative_to(ROOT)}: a console block printed\n{now}"
                                f"instead of\n{shown}")
            pieces += [text[last:match.start(1)], now]
            last = match.end(1)
    if write and problems:
        page.write_text("".join(pieces) + text[last:])
    return problems


if __name__ == "__main__":
    write = "--write" in sys.argv[1:]
    found = [problem for page in pages() for problem in check_page(page, write=write)]
    print("\n\n".join(found) if found and not write else
          f"{len(found)} blocks rewritten" if write else "every console block is current")
