"""Every measured figure the manual quotes is one on the results page.

A speed, a ratio, an accuracy, a duration, a memory size or a percentage quoted in the README
or a user page of docs/ (the top-level pages, guides/ and models/) must also be on
docs/results.md, where it stands with its command, machine, date and rounds. A page that wants
a figure the results page does not carry links there instead of quoting one of its own.

What counts as a figure (:func:`figures`): a throughput (``123 img/s``, ``12.3 images/s``,
``900 images per second``), a ratio written against its number (``1.8x``, ``1.8×``; ``640 x
640`` and ``3x3`` are sizes), an AP (``AP 0.236``, ``AP50 0.436``, ``0.236 AP``, ``box AP
0.60``), a duration (``45 s``, ``3.2 min``, ``12 minutes``, ``650 ms``), a memory size (``4.1
GiB``, ``6.6 MB``) and a percentage (``12 %``, ``12%``). A range is one figure (``30-45x``); a
change (``785 to 650 ms``, ``760 -> 556 ms``) is two. Thousands' commas are dropped, ``×`` is
read as ``x`` and a line break as a space. Fenced code blocks count (a printed run is a
measurement), except those that show a ``$ jaxdet summary`` run, whose percentages are shares
of the counts it computes; inline code does not (a command, a setting, a message's wording).

How a figure is found on the results page: a ratio, duration, memory size or percentage by its
number and unit together (``1.10x``, ``2.3 s``); a throughput or an AP by its number, in a
paragraph or table of the results page that names the unit (``img/s``, ``AP``), since its
tables give the unit once, in the column's header.

:data:`ALLOWED` lists the few numbers of that shape that are not measurements (settings,
limits, arithmetic, others' published figures), each with its reason; an entry that no longer
occurs on its page, or that the results page now carries, fails, so the list cannot go stale.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results.md"
PAGES = [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                     *sorted((ROOT / "docs" / "guides").glob("*.md")),
                     *sorted((ROOT / "docs" / "models").glob("*.md"))] if p != RESULTS]

_NUM = r"\d+(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s?[-–]\s?{_NUM})?"
# not the tail of a word, a number or an exponent ("3.95e-03"), nor a fraction's denominator
_CHANGE = rf"(?<![\w.,\-/]){_RANGE}(?:\s*(?:to|->|→)\s*{_RANGE})*"
_SPLIT = re.compile(r"\s*(?:to|->|→)\s*")
_UNIT_NAMES = {
    "img/s": "img/s", "images/s": "img/s", "images per second": "img/s",
    "images a second": "img/s",
    "ms": "ms", "s": "s", "sec": "s", "second": "s", "seconds": "s", "min": "min",
    "minute": "min", "minutes": "min", "h": "h", "hour": "h", "hours": "h",
    "%": "%", "x": "x",
}
PATTERNS = {
    "rate": r"img/s|images/s|images per second|images a second",
    "time": r"ms|s|sec|seconds?|min|minutes?|h|hours?",
    "memory": r"[KMGT]i?B",
    "percent": r"%",
}
PATTERNS = {kind: re.compile(rf"(?P<nums>{_CHANGE})\s?(?P<unit>{units})(?![\w/])")
            for kind, units in PATTERNS.items()}
PATTERNS["ratio"] = re.compile(rf"(?P<nums>{_CHANGE})(?P<unit>x)(?!\w)")
AP_PATTERN = re.compile(
    rf"\b(?:box |mask |keypoint )?(?P<name>AP(?:50|75|s|m|l)?)(?: of)? (?P<num>{_NUM})"
    rf"|(?<![\w.,\-/])(?P<num2>{_NUM}) (?:box |mask |keypoint )?(?P<name2>AP(?:50|75)?)\b")
# the unit a paragraph or table of the results page names once, for a bare number in it
_NAMES_UNIT = {"rate": re.compile(r"img/s|images/s|images per second"),
               "ap": re.compile(r"\bAP")}
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")


class Figure(NamedTuple):
    kind: str    # rate, time, memory, percent, ratio, ap
    text: str    # as normalised: "1274 img/s", "2.3 s", "4.1 GiB", "12%", "1.10x", "AP 0.236"
    number: str  # its number (or range), as normalised: "1274", "2.3", "30-45", "0.236"


def normalise(text: str) -> str:
    """Bold markers and thousands' commas dropped, ``×`` read as ``x``, runs of spaces as one."""
    text = text.replace("×", "x").replace("\u00a0", " ").replace("**", "")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return re.sub(r"[ \t]+", " ", text)


def prose(text: str) -> str:
    """The text without its inline code and without its fenced blocks that show a ``$ jaxdet
    summary`` run (computed counts); the other fenced blocks are kept."""
    kept, lines, block, fence = [], [], [], None
    for line in text.splitlines():
        if fence is None and _FENCE.match(line):
            fence, block = _FENCE.match(line).group(1), [line]
            kept.append(_INLINE_CODE.sub(" ", "\n".join(lines)))
            lines = []
        elif fence is None:
            lines.append(line)
        else:
            block.append(line)
            if line.strip().startswith(fence):
                if not any(b.startswith("$ jaxdet summary") for b in block):
                    kept.append("\n".join(block))
                fence = None
    kept.append(_INLINE_CODE.sub(" ", "\n".join(lines + block if fence else lines)))
    return "\n".join(kept)


def figures(text: str) -> list[Figure]:
    """The measured figures of a page's text, by kind (in :data:`PATTERNS`' order, then APs),
    each kind in order of appearance."""
    text = re.sub(r"\s+", " ", normalise(prose(text)))
    found = []
    for kind, pattern in PATTERNS.items():
        for m in pattern.finditer(text):
            unit = _UNIT_NAMES.get(m.group("unit"), m.group("unit"))
            for number in _SPLIT.split(m.group("nums")):
                number = re.sub(r"\s?[-–]\s?", "-", number)
                found.append(Figure(kind, number + ("" if unit in ("%", "x") else " ") + unit,
                                    number))
    for m in AP_PATTERN.finditer(text):
        name, number = m.group("name", "num") if m.group("num") else m.group("name2", "num2")
        found.append(Figure("ap", f"{name} {number}", number))
    return found


@functools.lru_cache(maxsize=4)
def _results_index(results_text: str) -> tuple[frozenset[str], dict[str, list[str]]]:
    """The results page's figures (as normalised), and its paragraphs and tables that name
    the unit of each kind that may stand bare."""
    blocks = re.split(r"\n\s*\n", normalise(prose(results_text)))
    return (frozenset(f.text for f in figures(results_text)),
            {kind: [b for b in blocks if unit.search(b)] for kind, unit in _NAMES_UNIT.items()})


def on_results_page(figure: Figure, results_text: str) -> bool:
    """Whether the results page carries ``figure`` (the module's docstring says how)."""
    texts, blocks = _results_index(results_text)
    if figure.kind not in blocks:
        return figure.text in texts
    return all(any(re.search(rf"(?<![\w.\-]){re.escape(n)}(?!\d)(?!\.\d)", b)
                   for b in blocks[figure.kind]) for n in figure.number.split("-"))


# Numbers of a figure's shape that are not measurements: page -> {figure as normalised: why}.
ALLOWED: dict[str, dict[str, str]] = {
    "docs/getting_started.md": {
        "30 s": "when the example sent SIGTERM to the run: part of the example, not a result",
        "334.5 img/s": "the rate inside the example's SIGTERM message, shown for its wording",
    },
    "docs/guides/choosing_a_config.md": {
        "13.6%": "boxes without an anchor, counted by `jaxdet summary` on the example data",
        "5.8%": "boxes without an anchor, counted by `jaxdet summary` on the example data",
    },
    "docs/guides/cloud_storage.md": {
        "8 MB": "the size of the blocks a TFRecord shard is read in: a setting",
    },
    "docs/guides/cpu_performance.md": {
        "32 MiB": "the smallest block the block cache keeps: a setting",
        "50 ms": "how long the block cache waits for a block in use: a setting",
        "4x": "Winograd F(4x4, 3x3) does 36 multiplies where the direct sum does 144: arithmetic",
        "6x": "MobileNetV2's expansion factor: the architecture",
    },
    "docs/guides/messy_data.md": {
        "24 GB": "the memory of the machine in the out-of-memory example: a specification",
    },
    "docs/guides/pretrained.md": {
        "AP 36.4": "torchvision's published accuracy of its own checkpoint, not measured here",
    },
    "docs/guides/tfod.md": {
        "3-9%": "the arithmetic of two momentum forms at momentum 0.9, not a measurement",
    },
    "docs/models/efficientdet.md": {
        "1%": "the tolerance the parameter counts are held to against the published ones",
        "5%": "the tolerance the multiply-adds are held to against the published ones",
    },
    "docs/models/faster_rcnn.md": {
        "6.6 MB": "arithmetic: 100 uint8 masks of 256 x 256 (stride 4 at a 1024-px input)",
        "105 MB": "arithmetic: 100 uint8 masks of 1024 x 1024",
    },
}


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_extractor_on_a_hand_written_snippet():
    snippet = "\n".join([
        "The loader made 1,274 img/s (12.5 images/s a core; 900 images per second at most),",
        "1.8x TF's and 30-45× the numpy path; a 640 x 640 input, 3x3 kernels, 2x2x2 pools.",
        "Held-out AP 0.236 (AP50 0.436); TF: 0.233 AP, box AP of **0.60**, mask AP 0.52.",
        "Steps went from 785 to 650 ms, 760 -> 556 ms, 1.7-2.2 to 1.1 s; 3.2 min, 12 minutes.",
        "Peak 4.1 GiB, 6.6 MB an image; 12 % and 30-40% of the time; lr 3.95e-03 img/s 333.2;",
        "`--steps 45 s` and `AP 0.9` are code; a figure broken over two lines: 2.3",
        "GB.",
        "```console",
        "$ jaxdet summary --config x",
        "  backbone  23,508,032  (71.6%)",
        "```",
        "```text",
        "trained 1500 steps in 1.8 min (256.8 img/s after a 6 s compile)",
        "```",
    ])
    assert [f.text for f in figures(snippet)] == [
        "1274 img/s", "12.5 img/s", "900 img/s", "256.8 img/s",
        "785 ms", "650 ms", "760 ms", "556 ms", "1.7-2.2 s", "1.1 s", "3.2 min", "12 min",
        "1.8 min", "6 s",
        "4.1 GiB", "6.6 MB", "2.3 GB",
        "12%", "30-40%",
        "1.8x", "30-45x",
        "AP 0.236", "AP50 0.436", "AP 0.233", "AP 0.60", "AP 0.52",
    ]


def test_a_figure_is_found_on_the_results_page_with_its_unit():
    results = ("| config | jaxdet img/s | ratio |\n| a | 1,274 | **1.10x** |\n\n"
               "The step took 2.3 s.\n\nCOCO AP 0.5 at step 100.")
    found = [Figure("rate", "1274 img/s", "1274"), Figure("ratio", "1.10x", "1.10"),
             Figure("time", "2.3 s", "2.3"), Figure("ap", "AP 0.5", "0.5")]
    missing = [Figure("ratio", "1.1x", "1.1"), Figure("time", "2.3 min", "2.3"),
               Figure("percent", "2.3%", "2.3"), Figure("ap", "AP 0.274", "0.274"),
               Figure("ap", "AP 1.10", "1.10"), Figure("rate", "100 img/s", "100")]
    assert [on_results_page(f, results) for f in found] == [True] * len(found)
    assert [on_results_page(f, results) for f in missing] == [False] * len(missing)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_figure_is_on_the_results_page(page):
    results = RESULTS.read_text()
    allowed = ALLOWED.get(_page_id(page), {})
    missing = [f.text for f in figures(page.read_text())
               if f.text not in allowed and not on_results_page(f, results)]
    assert not missing, (
        f"{_page_id(page)} quotes figures that docs/results.md does not carry: {missing}. Put a "
        "measured one on the results page (with its command, machine, date and rounds) and "
        "quote it as written there, or link to the results page instead")


@pytest.mark.parametrize(("page", "figure"),
                         [(page, fig) for page, entries in ALLOWED.items() for fig in entries])
def test_every_allowed_number_is_still_on_its_page(page, figure):
    assert ROOT / page in PAGES, f"{page} is not a page this test reads"
    on_page = [f for f in figures((ROOT / page).read_text()) if f.text == figure]
    assert on_page, f"{figure!r} no longer occurs on {page}: remove it from ALLOWED"
    assert not on_results_page(on_page[0], RESULTS.read_text()), (
        f"{figure!r} is on the results page now: remove it from ALLOWED for {page}")
