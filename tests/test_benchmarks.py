"""The benchmarks (``python -m benchmarks.<group>.<name>``, never run by the suite) still import:
a module moved in the package shows here, not on the day someone next measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in [*(ROOT / "benchmarks").glob("*/*.py"),
                              *(ROOT / "benchmarks").glob("*.py")] if p.name != "__init__.py")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.slow
def test_every_jaxdet_side_benchmark_imports():
    """Every script but the TF peer's (which need TensorFlow and the TF OD API), imported in
    one fresh process from the repository's root, as ``python -m`` would."""
    modules = [_module(p) for p in SCRIPTS if p.parent.name != "peers"]
    assert len(modules) > 20
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)"
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_no_benchmark_edits_the_import_path():
    """They import each other as a package (``benchmarks.common``), never through sys.path."""
    assert [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").rglob("*.py")
            if "sys.path" in p.read_text()] == []
