"""A family defined outside jaxdet (here, in this test module) joins with one registration:
its config section validates, and it builds, trains, resumes and summarizes through the same
jobs as the shipped families."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import ValidationError

from jaxdet import tasks
from jaxdet.config import schema as S
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.jobs import runs
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd import summary as ssd_summary
from jaxdet.train.checkpoint import Checkpointer

pytestmark = pytest.mark.xdist_group("shapes_demo")


class ToyModelConfig(S.SSDModelConfig):
    """The toy family's ``model:`` section: an SSD's fields under its own type."""

    type: Literal["toy_detector"] = "toy_detector"


BUILT: list[int] = []


def build_toy_task(config: S.Config, *, seed: int):
    """The toy family's builder: the SSD family's parts, counted."""
    BUILT.append(seed)
    return ssd_build.build_ssd_task(config, seed=seed)


TOY = tasks.TaskFamily(build_toy_task, ssd_build.ssd_fingerprint_fields,
                       ssd_summary.model_summary, ssd_summary.format_summary)


def _toy_config(tiny: list[str]):
    """The suite's tiny config as a toy_detector: the same train step program as the SSD's."""
    return load_config("shapes_demo", [*tiny, "model.type=toy_detector"])


def test_a_registered_family_trains_resumes_and_summarizes(tmp_path, tiny_overrides):
    with pytest.raises((ConfigError, ValidationError), match="toy_detector"):
        _toy_config(tiny_overrides)  # not a model type before registration
    name = tasks.register_family(TOY, ToyModelConfig)
    try:
        assert name == "toy_detector"
        with pytest.raises(ValueError, match="already taken"):
            tasks.register_family(TOY, ToyModelConfig)
        config = _toy_config(tiny_overrides)
        assert isinstance(config.model, ToyModelConfig)
        assert tasks.family(config) is TOY
        assert runs.train(config, tmp_path, stop_after=3, progress=False,
                          evaluate=False).step == 3
        assert BUILT, "the toy builder was not called"
        assert runs.train(config, tmp_path, progress=False, evaluate=False).steps_run == 3
        with Checkpointer(tmp_path / "checkpoints") as checkpointer:
            assert checkpointer.latest_step() == 6
        summary = tasks.family(config).summary(config, flops=False)
        assert summary["parameters"]["total"] > 0
        assert tasks.fingerprint_fields(config)["model"]["type"] == "toy_detector"
    finally:
        tasks.unregister_family("toy_detector")
    with pytest.raises((ConfigError, ValidationError), match="toy_detector"):
        _toy_config(tiny_overrides)
