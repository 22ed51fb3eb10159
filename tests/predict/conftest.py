"""A tiny trained workdir, made once per session (the tiny config of tests/conftest.py)."""

from pathlib import Path

import pytest

from jaxdet.app import runs
from jaxdet.config.loader import load_config


@pytest.fixture(scope="session")
def tiny_config(tiny_overrides):
    """The suite's tiny config (tests/conftest.py) drawing 2 eval samples."""
    return load_config("shapes_demo", [*tiny_overrides, "eval.num_visualizations=2"])


@pytest.fixture(scope="session")
def trained(tiny_config, tmp_path_factory) -> Path:
    """Workdir trained 6 steps; its final eval wrote eval/step_6/{detections.json,samples.png}."""
    workdir = tmp_path_factory.mktemp("tiny_run")
    runs.train(tiny_config, workdir, progress=False)
    return workdir
