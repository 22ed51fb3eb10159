"""Inception-ResNet-v2 (``models.backbones.inception_resnet_v2``) against the TF OD API's
``FasterRCNNInceptionResnetV2KerasFeatureExtractor`` (output stride 16): shapes, parameter
counts of both parts, and both parts' outputs with the same seeded weights. The TF numbers come
from ``fixtures/count_tf_inception_resnet_v2.py`` (run once with TensorFlow; this file does not
import it)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.backbones.inception_resnet_v2 import (
    TF_BATCH_NORM,
    ConvBN,
    InceptionResNetV2,
    ScalelessBatchNorm,
    avg_pool_same,
)
from jaxdet.models.layers import BatchNorm, BatchNormParams
from random_arrays import normal

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from count_tf_inception_resnet_v2 import COUNTS, OUTPUTS, seeded_value  # noqa: E402


def _abstract_model() -> InceptionResNetV2:
    return abstract_build(lambda: InceptionResNetV2(batch_norm=TF_BATCH_NORM, rngs=model_rngs(0)))


def _count(module: nnx.Module, kind) -> int:
    return sum(int(np.prod(v.shape)) for v in jax.tree.leaves(nnx.state(module, kind)))


def _first_stage_modules(model: InceptionResNetV2) -> list[nnx.Module]:
    return [*model.stem, *model.blocks_by_level()[3], *model.blocks_by_level()[4]]


def _box_classifier_modules(model: InceptionResNetV2) -> list[nnx.Module]:
    return [*model.blocks_by_level()[5], model.conv_7b]


@pytest.fixture(scope="module")
def abstract_model() -> InceptionResNetV2:
    """The network's shapes only (nothing initialized), in training mode."""
    return _abstract_model()


@pytest.mark.slow
def test_shapes_train_mode(abstract_model):
    """96x96 images -> 6x6x1088; 17x17 crops -> 9x9x1536 (TF SAME halves rounding up), traced
    abstractly in training mode (batch statistics)."""
    graphdef, state = nnx.split(abstract_model)

    def shape(method: str, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        def run(state, x):
            return getattr(nnx.merge(graphdef, state), method)(x)

        return jax.eval_shape(run, state, jax.ShapeDtypeStruct(input_shape, jnp.float32)).shape

    assert shape("first_stage", (2, 96, 96, 3)) == (2, 6, 6, 1088)
    assert shape("first_stage", (1, 100, 70, 3)) == (1, 7, 5, 1088)
    assert shape("box_classifier", (2, 17, 17, 1088)) == (2, 9, 9, 1536)
    assert abstract_model.out_channels == {4: 1088, 5: 1536}


@pytest.mark.slow
def test_parameter_counts_equal_tf(abstract_model):
    tf = json.loads(COUNTS.read_text())
    model = abstract_model
    for part, modules in (("proposal", _first_stage_modules(model)),
                          ("box_classifier", _box_classifier_modules(model))):
        params = sum(_count(m, nnx.Param) for m in modules)
        stats = sum(_count(m, nnx.BatchStat) for m in modules)
        assert (params, stats) == (tf[part]["trainable"], tf[part]["non_trainable"]), part
    assert _count(model, nnx.Param) + _count(model, nnx.BatchStat) == tf["backbone_total"]
    # nothing but parameters and statistics (nnx.split(model, Param, BatchStat) is exhaustive)
    _, params, stats = nnx.split(model, nnx.Param, nnx.BatchStat)
    assert len(jax.tree.leaves(params)) == tf["proposal"]["trainable_tensors"] + \
        tf["box_classifier"]["trainable_tensors"]


@pytest.mark.parametrize("params", [BatchNormParams(), BatchNormParams(frozen=True),
                                    BatchNormParams(num_groups=2)])
@pytest.mark.parametrize("train", [True, False])
def test_scaleless_batch_norm_is_batch_norm_with_unit_scale(params, train):
    x = normal(0, (4, 3, 3, 5)) * 2.0 + 1.0
    ours = ScalelessBatchNorm(5, params, rngs=nnx.Rngs(0))
    ref = BatchNorm(5, frozen=params.frozen, num_groups=params.num_groups, rngs=nnx.Rngs(0))
    for bn in (ours, ref):
        bn.bias[...] = jnp.arange(5.0) * 0.1
        bn.mean[...] = jnp.full(5, 0.3)
        bn.var[...] = jnp.full(5, 2.0)
        if not train:
            bn.eval()
    np.testing.assert_allclose(ours(x), ref(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.mean[...], ref.mean[...], rtol=1e-6)
    assert "scale" not in nnx.state(ours)


def test_avg_pool_leaves_padding_out():
    x = jnp.arange(12.0).reshape(1, 3, 4, 1)
    out = avg_pool_same(x)[0, :, :, 0]
    assert float(out[0, 0]) == pytest.approx(np.mean([0, 1, 4, 5]))
    assert float(out[1, 1]) == pytest.approx(np.mean([0, 1, 2, 4, 5, 6, 8, 9, 10]))


def _keras_order(model: InceptionResNetV2) -> Iterator[tuple[str, nnx.Module]]:
    """(fixture key, module) for every layer with weights: the ``conv2d_bn`` units in Keras's
    creation order as ``unit0, unit1, ...`` (``conv_7b`` last) and each residual block's 1x1
    conv as ``block35_1_conv`` etc. (``count_tf_inception_resnet_v2.tf_keys``)."""
    units: list[ConvBN] = list(model.stem)
    for name in ("mixed_5b", "block35", "mixed_6a", "block17", "mixed_7a", "block8"):
        part = getattr(model, name)
        for i, block in enumerate(part if isinstance(part, nnx.List) else [part]):
            units += [u for branch in block.branches for u in branch]
            if getattr(block, "pool_conv", None) is not None:
                units.append(block.pool_conv)
            if hasattr(block, "up"):
                yield f"{name}_{i + 1}_conv", block.up
    units.append(model.conv_7b)
    yield from ((f"unit{i}", u) for i, u in enumerate(units))


def _seeded_model() -> InceptionResNetV2:
    """The network with the fixture's seeded weights, in eval mode (moving statistics)."""
    model = _abstract_model()
    seen = 0
    for key, module in _keras_order(model):
        conv = module.conv if isinstance(module, ConvBN) else module
        tensors = [(conv.kernel, "kernel")]
        if isinstance(module, ConvBN):
            norm = module.norm
            tensors += [(norm.bias, "beta"), (norm.mean, "moving_mean"),
                        (norm.var, "moving_variance")]
        else:
            tensors.append((conv.bias, "bias"))
        for var, kind in tensors:
            var.set_value(jnp.asarray(seeded_value(key, kind, tuple(var.shape))))
            seen += 1
    assert seen == len(jax.tree.leaves(nnx.state(model)))
    model.eval()
    return model


@pytest.mark.slow
def test_outputs_equal_tf():
    """Both parts with the same seeded weights as TF, in inference mode, on a 64x64 image and
    a 9x9 crop: within 1e-4 of TF's largest output."""
    tf = dict(np.load(OUTPUTS))
    model = _seeded_model()
    features = np.asarray(nnx.jit(lambda m, x: m.first_stage(x))(model, tf["image"]))
    boxes = np.asarray(nnx.jit(lambda m, x: m.box_classifier(x))(model, tf["crop"]))
    for ours, theirs in ((features, tf["proposal"]), (boxes, tf["box_classifier"])):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * np.abs(theirs).max())
