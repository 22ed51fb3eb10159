"""The notebooks of examples/ run, cell by cell, in a Jupyter kernel at a tiny size
(``JAXDET_EXAMPLES_QUICK=1``) in an empty folder: nothing of a clone is needed. The zoo
download runs against a local HTTP server (tests/zoo_server.py) where the notebook goes
online, and against a port where nothing listens where it goes offline; a cell that raises
fails the test. Their ``.ipynb`` twins are the ``.py`` sources as jupytext pairs them
(``make notebooks`` writes them), start with an "Open in Colab" link to themselves and the
install cell, and their stored outputs name no path outside their working folder and hold no
red log boxes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from zoo_server import closed_port_url, serve_zoo

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

REPO = Path(__file__).parents[2]
EXAMPLES = REPO / "examples"
SOURCES = sorted(EXAMPLES.glob("*.py"))
# (notebook, whether the zoo download succeeds): each branch a user can meet. The online run
# (its download from a local server) is under -m exhaustive: the same notebook runs offline in
# make test, and the download itself is checked in interop/test_tf_zoo.py
RUNS = [pytest.param(name, online, id=f"{name}-{'online' if online else 'offline'}",
                     marks=[pytest.mark.exhaustive] if online else [])
        for name, online in [("tf_checkpoint_inference", True),
                             ("tf_checkpoint_inference", False), ("few_shot_ducky", False),
                             ("train_on_coco_data", False)]]
OUTSIDE = re.compile(r"(/work/|/root/|/home/|/tmp/|site-packages|\.cache/jaxdet)")


def test_there_are_notebooks():
    assert {p.stem for p in SOURCES} == {run.values[0] for run in RUNS}


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize(("name", "online"), RUNS)
def test_notebook_runs(name, online, tmp_path, monkeypatch):
    monkeypatch.setenv("JAXDET_EXAMPLES_QUICK", "1")
    monkeypatch.setenv("JAXDET_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    notebook = jupytext.read(EXAMPLES / f"{name}.py")
    with serve_zoo(tmp_path / "zoo") as zoo:
        monkeypatch.setenv("JAXDET_ZOO_URL", zoo.url if online else closed_port_url())
        client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(work)}})
        client.execute()
    images = [o for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, f"{name} drew no picture"
    printed = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert ("offline:" in printed) != online or name == "train_on_coco_data"


def _repository() -> str:
    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
    return urls["Repository"].removeprefix("https://github.com/")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_the_ipynb_is_the_py_paired_and_starts_as_colab_expects(source):
    paired = source.with_suffix(".ipynb")
    assert paired.is_file(), f"{paired.name} is missing: run make notebooks"
    want = [(c.cell_type, c.source) for c in jupytext.read(source).cells]
    stored = nbformat.read(paired, as_version=4)
    got = [(c.cell_type, c.source) for c in stored.cells]
    assert got == want, f"{paired.name} differs from {source.name}: run make notebooks"
    title, install = stored.cells[0].source, stored.cells[1].source
    link = (f"https://colab.research.google.com/github/{_repository()}/blob/main/examples/"
            f"{paired.name}")
    assert f"[Open in Colab]({link})" in title
    assert "pip" in install and f"git+https://github.com/{_repository()}" in install
    text = "\n".join(c.source for c in stored.cells)
    for clone_only in ("parents[", "sys.path", "shared/data", "tests/"):
        assert clone_only not in text, f"{source.name} needs a clone: {clone_only}"
    for cell in stored.cells:
        for output in cell.get("outputs", []):
            assert output.get("name") != "stderr", f"{paired.name}: a red box: {output['text']}"
            shown = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
            assert not OUTSIDE.search(shown), f"{paired.name} shows a path: {shown[:200]}"
