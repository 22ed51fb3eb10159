"""Every shipped config builds its model, and the head's outputs line up with its anchors.

Models are built abstractly (``nnx.eval_shape``) so even ResNet-152 at 1024 px costs no
memory or FLOPs.
"""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jaxdet.config.loader import load_config, shipped_config_names
from jaxdet.data import build as data_build
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.model import concat_levels

SSD_CONFIGS = [n for n in shipped_config_names() if load_config(n).model.type == "ssd"]
# D4-D7x (1024-1536 px, ~12-27 s each to trace) run under -m exhaustive; D6 (the BiFPN sum
# fusion and the largest separable heads) is built, traced and its outputs matched to its
# anchors by the summary test in the default suite
SLOW = {"efficientdet_d4", "efficientdet_d5", "efficientdet_d6", "efficientdet_d7",
        "efficientdet_d7x"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.exhaustive) if n in SLOW
                                  else n for n in SSD_CONFIGS])
@pytest.mark.slow
def test_shipped_config_builds_and_outputs_match_anchors(name):
    config = load_config(name)
    model = abstract_build(lambda: ssd_build.build_model(config))
    anchors = ssd_build.build_anchors(config, model)
    h, w = data_build.input_size(config.data)
    model.eval()
    graphdef, state = nnx.split(model)
    logits, boxes = jax.eval_shape(
        lambda st, x: concat_levels(nnx.merge(graphdef, st)(x)),
        state,
        jax.ShapeDtypeStruct((2, h, w, 3), jnp.float32),
    )
    assert anchors.shape == (boxes.shape[1], 4)
    assert logits.shape == (2, anchors.shape[0], ssd_build.num_class_outputs(config.model))
    assert boxes.shape[-1] == 4
    assert bool((anchors[:, 2:] > anchors[:, :2]).all())  # positive height and width
