"""The notebooks of examples/ run, cell by cell, in a Jupyter kernel at a tiny size
(``JAXDET_EXAMPLES_QUICK=1``); a cell that raises fails the test. Their ``.ipynb`` twins are
the ``.py`` sources as jupytext pairs them (``make notebooks`` writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

EXAMPLES = Path(__file__).parents[2] / "examples"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
SOURCES = sorted(EXAMPLES.glob("*.py"))
NEEDS = {"few_shot_ducky": SHARED / "ducky"}  # data beside a clone, not in it

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("notebooks")]


def test_there_are_notebooks():
    assert {p.stem for p in SOURCES} >= {"tf_checkpoint_inference", "few_shot_ducky",
                                         "train_on_coco_data"}


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_runs(source, tmp_path, monkeypatch):
    needed = NEEDS.get(source.stem)
    if needed is not None and not needed.is_dir():
        pytest.skip(f"needs {needed}")
    monkeypatch.setenv("JAXDET_EXAMPLES_QUICK", "1")
    notebook = jupytext.read(source)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    images = [o for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, f"{source.name} drew no picture"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_the_ipynb_is_the_py_paired(source):
    paired = source.with_suffix(".ipynb")
    assert paired.is_file(), f"{paired.name} is missing: run make notebooks"
    want = [(c.cell_type, c.source) for c in jupytext.read(source).cells]
    got = [(c.cell_type, c.source) for c in nbformat.read(paired, as_version=4).cells]
    assert got == want, f"{paired.name} differs from {source.name}: run make notebooks"
