"""Every package says what it holds: the docstring of each package's ``__init__.py`` under
``src/jaxdet`` names each of its modules and subpackages.

The convention: a module or subpackage is named in double backticks, as ``name``,
``name.py``, ``name/`` or inside a dotted name (``tasks.unet3d.segmentation``,
``task.UNet3DTask``); a module whose name starts with ``_`` is private and left out. The
packages are found on disk at test time (a new package is checked the day it appears), and
their docstrings are read from the source, without importing them.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

import jaxdet

PACKAGE = Path(jaxdet.__file__).parent
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py")
                  if "__pycache__" not in p.parts)


def _dotted(package: Path) -> str:
    return ".".join(("jaxdet", *package.relative_to(PACKAGE).parts))


def _members(package: Path) -> list[str]:
    """The package's modules and subpackages, private ones left out."""
    return sorted(m.name for m in pkgutil.iter_modules([str(package)])
                  if not m.name.startswith("_"))


def named_in(docstring: str) -> set[str]:
    """The module names ``docstring`` names in double backticks (see the module docstring)."""
    names = set()
    for span in re.findall(r"``([^`]+)``", docstring):
        span = span.strip().removesuffix("/").removesuffix(".py").removesuffix("()")
        if DOTTED.fullmatch(span):
            names.update(span.split("."))
    return names


def test_the_convention_reads_names_paths_and_dotted_names():
    doc = "``trace`` and ``model.py``, ``cpu/``, ``tasks.unet3d.segmentation``; not ``a b`` or x"
    assert named_in(doc) >= {"trace", "model", "cpu", "segmentation"}
    assert not named_in(doc) & {"a", "b", "x"}


@pytest.mark.parametrize("package", _packages(), ids=_dotted)
def test_the_package_docstring_names_every_module(package):
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [name for name in _members(package) if name not in named_in(docstring)]
    assert not missing, (
        f"{_dotted(package)}'s docstring (its __init__.py) does not name {missing}: say in a "
        "line what each holds, the name in double backticks (``name``)")
