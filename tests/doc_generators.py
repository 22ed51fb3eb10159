"""The manual's generators (``docs/generate/*.py``), loaded by path: they are scripts of the
docs build, not modules of the jaxdet package. ``load_generator("zoo_table")``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

GENERATE = Path(__file__).resolve().parents[1] / "docs" / "generate"


def load_generator(name: str) -> ModuleType:
    """The module ``docs/generate/<name>.py``, imported from its file."""
    spec = importlib.util.spec_from_file_location(f"docs_generate_{name}", GENERATE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
