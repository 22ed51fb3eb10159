"""Building a model compiles no program of its own: its parameters, statistics and constants
are made on the host (``jaxdet.models.initializers``), not by one small XLA program per
shape."""

import logging
from pathlib import Path

import jax
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config

SRC = Path(__file__).resolve().parents[2] / "src" / "jaxdet"


# What nnx.Rngs compiles the first time a process uses it (its key from the seed, a key's
# fold-in with the stream's counter, the counter's increment): the same few programs for
# every model, whatever its layers.
RNG_PROGRAMS = ("_threefry_seed", "_threefry_fold_in", "add", "convert_element_type", "stage")


def _programs_compiled_by(build, caplog) -> list[str]:
    caplog.clear()
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax"):
        build()
    return [r.getMessage() for r in caplog.records
            if "Finished XLA compilation" in r.getMessage()]


@pytest.mark.parametrize("config", ["efficientdet_d0", "ssd_mobilenet_v2_320",
                                    "retinanet_resnet50_fpn_640", "mask_rcnn_shapes_demo",
                                    "faster_rcnn_resnet50_v1_fpn_640"])
@pytest.mark.slow
def test_building_a_model_compiles_no_program_of_its_own(config, caplog):
    """Parameters, batch-norm statistics and constants are made on the host: a fresh process
    compiles only the random streams' few programs (EfficientDet-D0 compiled 139 programs
    with Flax's initializers, 12 s of its 17 s build; 23 with batch norm's statistics made
    by jnp), and a second model built after it compiles nothing at all."""
    jax.clear_caches()  # what a fresh `jaxdet train` process sees
    compiled = _programs_compiled_by(lambda: tasks.build_task(load_config(config)), caplog)
    names = {m.split("jit(", 1)[1].split(")", 1)[0] for m in compiled}
    assert names <= set(RNG_PROGRAMS), compiled
    assert len(compiled) <= len(RNG_PROGRAMS), compiled
    other = "shapes_demo" if config != "shapes_demo" else "efficientdet_d0"
    assert _programs_compiled_by(lambda: tasks.build_task(load_config(other)), caplog) == []


def test_models_take_initializers_from_jaxdet_only():
    """Flax's initializers compile per shape when a model is built outside jit; every module
    takes its initializers from ``jaxdet.models.initializers`` instead."""
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name != "initializers.py" and "nnx.initializers." in p.read_text()]
    assert not offenders
