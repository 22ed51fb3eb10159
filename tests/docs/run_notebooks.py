"""Run the notebooks of examples/ at full size, each in a scratch folder, and keep their
outputs in the ``.ipynb`` (what the docs site shows). ``make notebooks-run`` calls it.

Pictures are kept once, as JPEG where the notebook produced both a PNG and a JPEG of the
same image (a PIL image displays as both), so the stored notebooks stay small.
"""

from __future__ import annotations

import sys
import tempfile

import nbclient
import nbformat


def run(path: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    scratch = tempfile.mkdtemp(prefix="jaxdet-nb-")
    nbclient.NotebookClient(notebook, timeout=3600, kernel_name="python3",
                            resources={"metadata": {"path": scratch}}).execute()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/jpeg" in data and "image/png" in data:
                del data["image/png"]
    nbformat.write(notebook, path)
    print(f"ran {path} in {scratch}")


if __name__ == "__main__":
    for notebook_path in sys.argv[1:]:
        run(notebook_path)
