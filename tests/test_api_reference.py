"""The public API's docstrings are complete enough to generate its reference: every public
function and method says what it takes, returns and raises, with an example; ``jaxdet``
exports exactly the API module's names, and ``import jaxdet`` alone does not load jax."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import jaxdet
from jaxdet import api

EXCEPTIONS = {"CheckpointError", "ConfigError", "CorruptImageError", "ExportError",
              "VolumeReadError", "WorkdirMismatch", "ZooDownloadError"}


def _public_callables():
    for name in api.__all__:
        obj = getattr(api, name)
        if name in EXCEPTIONS:
            continue
        yield name, obj
        if inspect.isclass(obj):
            for method, member in vars(obj).items():
                if not method.startswith("_") and inspect.isfunction(member):
                    yield f"{name}.{method}", member


def test_jaxdet_exports_the_api():
    assert set(jaxdet.__all__) == {"__version__", *api.__all__}
    for name in api.__all__:
        assert getattr(jaxdet, name) is getattr(api, name)


def test_every_public_function_documents_arguments_returns_errors_and_an_example():
    missing = []
    for name, obj in _public_callables():
        doc = inspect.getdoc(obj) or ""
        if len(doc) < 80:
            missing.append(f"{name}: no docstring")
            continue
        if inspect.isclass(obj):
            if "Example::" not in doc:
                missing.append(f"{name}: no example")
            continue
        parameters = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
        undocumented = [p for p in parameters if p not in doc]
        if undocumented:
            missing.append(f"{name}: arguments {undocumented} not described")
        returns = inspect.signature(obj).return_annotation
        if returns not in (None, "None", inspect.Signature.empty) and "Returns" not in doc \
                and not doc.startswith(("The ", "As ", "Whether ", "COCO", ":meth:")):
            missing.append(f"{name}: return value not described")
        if "." not in name and "Example::" not in doc:
            missing.append(f"{name}: no example")
    assert not missing, "\n".join(missing)


@pytest.mark.slow
def test_import_jaxdet_stays_light():
    code = "import sys, jaxdet; print('jax' in sys.modules, 'flax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]
