"""Building a model compiles (almost) nothing: its parameters are drawn on the host
(``jaxdet.models.initializers``), not by one small XLA program per parameter shape."""

import logging
from pathlib import Path

import jax
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config

SRC = Path(__file__).resolve().parents[2] / "src" / "jaxdet"


@pytest.mark.parametrize("config", ["efficientdet_d0", "ssd_mobilenet_v2_320",
                                    "retinanet_resnet50_fpn_640", "mask_rcnn_shapes_demo"])
def test_building_a_model_compiles_no_random_draw(config, caplog):
    jax.clear_caches()  # what a fresh `jaxdet train` process sees
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax"):
        tasks.build_task(load_config(config))
    compiled = [r.getMessage() for r in caplog.records
                if "Finished XLA compilation" in r.getMessage()]
    random_draws = [m for m in compiled if any(
        f"jit({name})" in m for name in ("_normal", "_truncated_normal", "_uniform", "multiply"))]
    assert not random_draws
    # what is left: batch norm's zero / one statistics, one small program per channel count
    # (EfficientDet-D0 compiled 139 programs with Flax's initializers, 12 s of its 17 s build)
    assert len(compiled) <= 25, compiled


def test_models_take_initializers_from_jaxdet_only():
    """Flax's initializers compile per shape when a model is built outside jit; every module
    takes its initializers from ``jaxdet.models.initializers`` instead."""
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name != "initializers.py" and "nnx.initializers." in p.read_text()]
    assert not offenders
