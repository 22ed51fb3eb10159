"""The TF OD API's CenterNet ResNet-v1 FPN feature extractor in jaxdet: parameter counts equal
TF's own (counted by fixtures/count_tf_center_net_fpn.py in TF 2.21), one stride-4 map of 64
channels, and a CenterNet config built on it trains through the generic step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.models.abstract import abstract_build

# tf.keras ResNet-v1 (biases in every conv, BN epsilon 1.001e-5) + CenterNet FPN
TF_COUNTS = {50: (24_809_920, 24_863_552), 101: (43_828_160, 43_934_016)}
HEADS_90 = 467_294  # 3x3 (64 -> 256) + 1x1 to 90 / 2 / 2, with biases: by hand


def _config(depth: int, *extra: str):
    return load_config("centernet_shapes_demo", [
        f"model.backbone={{name: resnet{depth}, stride_in_1x1: true, conv_bias: true, "
        "batch_norm: {epsilon: 1.001e-5}}", "model.neck={name: center_net_fpn}",
        "model.head_depth=256", "model.num_classes=90", "data.resizer.height=512",
        "data.resizer.width=512", *extra])


def _count(module, kind) -> int:
    return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, kind)))


@pytest.mark.parametrize("depth", [50, 101])
@pytest.mark.slow
def test_parameter_counts_equal_tf(depth):
    config = _config(depth)
    model = abstract_build(lambda: tasks.build_task(config).model)
    trainable = _count(model.backbone, nnx.Param) + _count(model.neck, nnx.Param)
    stats = _count(model.backbone, nnx.BatchStat) + _count(model.neck, nnx.BatchStat)
    assert (trainable, trainable + stats) == TF_COUNTS[depth]
    heads = sum(_count(getattr(model, n), nnx.Param) for n in ("heatmap", "size", "offset"))
    assert heads == 3 * 3 * 64 * 256 * 3 + 256 * 3 + 256 * (90 + 2 + 2) + 90 + 2 + 2 == HEADS_90
    model.eval()
    graphdef, state = nnx.split(model)
    out = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                         jax.ShapeDtypeStruct((1, 512, 512, 3), jnp.float32))
    assert out["heatmap"].shape == (1, 128, 128, 90) and out["size"].shape == (1, 128, 128, 2)


def test_level_must_be_the_necks():
    with pytest.raises(Exception, match="feature_level 3 is outside the FPN's levels 2..2"):
        _config(50, "model.feature_level=3")
