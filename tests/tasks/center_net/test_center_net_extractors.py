"""The TF OD API's other CenterNet feature extractors in jaxdet: Hourglass-104 (and the
single-stack hourglasses), ResNet-v2-50/101 + the deconvolution stack, and MobileNetV2-FPN.
Parameter counts equal TF's own (counted by fixtures/count_tf_center_net_extractors.py in TF
2.21), each gives one stride-4 map, runs on a small input and, in a CenterNet config, trains
through the generic step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.models import build as model_build
from jaxdet.tasks.center_net.build import build_center_net_neck
from jaxdet.train.step import init_train_state, make_train_step

IDENTITY = "{name: identity}"
DECONV = "{name: center_net_deconv}"
MNV2 = "{name: mobilenet_v2, padding: same, batch_norm: {decay: 0.9997}}"
MNV2_FPN = "{name: center_net_mobilenet_v2_fpn}"

# name: (backbone, neck, TF trainable, TF all variables, output channels)
EXTRACTORS = {
    "hourglass_104": ("{name: hourglass_104}", IDENTITY, 187_700_352, 187_817_856, 256),
    "resnet_v2_50": ("{name: resnet_v2_50}", DECONV, 29_379_328, 29_422_464, 64),
    "resnet_v2_101": ("{name: resnet_v2_101}", DECONV, 48_388_864, 48_484_224, 64),
    "mobilenet_v2_fpn": (MNV2, MNV2_FPN, 2_342_440, 2_376_712, 24),
    "mobilenet_v2_fpn_separable": (MNV2, "{name: center_net_mobilenet_v2_fpn, "
                                   "use_separable_conv: true}", 2_316_384, 2_350_656, 24),
    "mobilenet_v2_fpn_x0.5": ("{name: mobilenet_v2, padding: same, depth_multiplier: 0.5}",
                              MNV2_FPN, 658_856, 676_280, 24),
    "mobilenet_v2_fpn_x1.4": ("{name: mobilenet_v2, padding: same, depth_multiplier: 1.4}",
                              MNV2_FPN, 4_206_184, 4_253_256, 24),
    "hourglass_10": ("{name: hourglass_10}", IDENTITY, 399_648, 401_376, 64),
    "hourglass_20": ("{name: hourglass_20}", IDENTITY, 3_103_440, 3_110_160, 96),
    "hourglass_32": ("{name: hourglass_32}", IDENTITY, 5_866_224, 5_877_840, 96),
    "hourglass_52": ("{name: hourglass_52}", IDENTITY, 23_435_072, 23_464_384, 128),
}
# The Keras ResNetV2's post_bn (2048 channels) follows conv5_block3_out, the layer TF's
# extractor reads: TF's extractor holds its variables but never uses them; jaxdet does not
# build it. TF's totals, post_bn included:
TF_RESNET_V2_WITH_POST_BN = {"resnet_v2_50": (29_383_424, 29_430_656),
                             "resnet_v2_101": (48_392_960, 48_492_416)}


def _config(backbone: str, neck: str, size: int = 256, *extra: str):
    return load_config("centernet_shapes_demo", [
        f"model.backbone={backbone}", f"model.neck={neck}", f"data.resizer.height={size}",
        f"data.resizer.width={size}", *extra])


class _Extractor(nnx.Module):
    """The config's backbone and neck, as ``tasks.build_task`` makes them for CenterNet."""

    def __init__(self, config):
        rngs = nnx.Rngs(0)
        self.backbone = model_build.build_backbone(config.model, dtype=jnp.float32, rngs=rngs)
        self.neck = build_center_net_neck(config.model, dict(self.backbone.out_channels),
                                          dtype=jnp.float32, rngs=rngs)

    def __call__(self, images: jax.Array) -> dict[int, jax.Array]:
        return self.neck(self.backbone(images))


def _count(module, kind) -> int:
    return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, kind)))


def _check_counts_and_shape(config, trainable: int, total: int, channels: int):
    model = nnx.eval_shape(lambda: _Extractor(config))
    params, stats = _count(model, nnx.Param), _count(model, nnx.BatchStat)
    assert (params, params + stats) == (trainable, total)
    assert model.neck.out_channels == {2: channels}
    model.eval()
    graphdef, state = nnx.split(model)
    features = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                              jax.ShapeDtypeStruct((1, 256, 256, 3), jnp.float32))
    assert {k: v.shape for k, v in features.items()} == {2: (1, 64, 64, channels)}


@pytest.mark.parametrize("name", list(EXTRACTORS))
@pytest.mark.slow
def test_parameter_counts_equal_tf(name):
    backbone, neck, trainable, total, channels = EXTRACTORS[name]
    _check_counts_and_shape(_config(backbone, neck), trainable, total, channels)
    if name in TF_RESNET_V2_WITH_POST_BN:
        assert TF_RESNET_V2_WITH_POST_BN[name] == (trainable + 2 * 2048, total + 4 * 2048)


@pytest.mark.parametrize("name,size", [
    pytest.param("hourglass_104", 128, marks=pytest.mark.exhaustive),  # 16 s: counted abstractly
    ("resnet_v2_50", 64), ("mobilenet_v2_fpn", 64)])
@pytest.mark.slow
def test_forward_on_a_small_image(name, size, build_fast):
    """A concrete (jitted) forward of backbone + neck in eval mode with random weights: one
    finite stride-4 map. 128 is the smallest input Hourglass-104's five halvings after the
    stride-4 stem allow; its backbone's level 2 is the last of its two stacks' outputs."""
    backbone_cfg, neck_cfg, *_, channels = EXTRACTORS[name]
    config = _config(backbone_cfg, neck_cfg, size)
    model = build_fast(lambda: _Extractor(config))
    model.eval()
    graphdef, state = nnx.split(model)

    def forward(state, images):
        model = nnx.merge(graphdef, state)
        stacks = (model.backbone.stack_outputs(images) if name.startswith("hourglass")
                  else [])
        return model(images), stacks

    images = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (1, size, size, 3)),
                         jnp.float32)
    features, stacks = jax.jit(forward)(state, images)
    assert list(features) == [2] and features[2].shape == (1, size // 4, size // 4, channels)
    assert bool(jnp.isfinite(features[2]).all()) and float(jnp.abs(features[2]).max()) > 0
    if stacks:
        assert [o.shape for o in stacks] == [(1, size // 4, size // 4, 256)] * 2
        np.testing.assert_array_equal(stacks[-1], features[2])
        assert not np.allclose(stacks[0], stacks[1])


@pytest.mark.slow
def test_hourglass_inputs_must_divide_by_its_stride():
    """Hourglass-52 and -104: the stride-4 stem and five halvings need a multiple of 128."""
    config = _config("{name: hourglass_52}", IDENTITY, 64)
    model = nnx.eval_shape(lambda: _Extractor(config))
    with pytest.raises(ValueError, match="divide by 128, got 64x64"):
        jax.eval_shape(model, jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32))


def _batch(size: int) -> dict:
    images = np.full((2, size, size, 3), -1.0, np.float32)
    images[0, 8:32, 8:40, 0] = images[1, 16:48, 30:58, 1] = 1.0
    boxes = np.zeros((2, 4, 4), np.float32)
    boxes[0, 0], boxes[1, 0] = np.array([8, 8, 32, 40]) / size, np.array([16, 30, 48, 58]) / size
    valid = np.zeros((2, 4), bool)
    valid[:, 0] = True
    return {"images": images, "boxes": boxes, "classes": np.array([[0] * 4, [1] * 4], np.int32),
            "valid": valid, "ignore": np.zeros((2, 4), bool),
            "image_info": np.tile(np.float32([size, size, size, size]), (2, 1))}


# ResNet-v2-50 and MobileNetV2-FPN under -m exhaustive (40 s cold each): their forward passes
# above stay, and one extractor's train step
@pytest.mark.slow
@pytest.mark.parametrize("name", ["hourglass_10",
                                  pytest.param("mobilenet_v2_fpn", marks=pytest.mark.exhaustive),
                                  pytest.param("resnet_v2_50", marks=pytest.mark.exhaustive)])
def test_center_net_trains_one_step(name):
    """A ``model.type: center_net`` config with the extractor builds, and one train step
    through the generic step gives a finite loss and moves (nearly) all weights (64x64 inputs;
    Hourglass-10 is the TF OD API's own smallest hourglass)."""
    backbone, neck, *_ = EXTRACTORS[name]
    task = tasks.build_task(_config(backbone, neck, 64, "model.head_depth=16"))
    tx = optax.sgd(1e-3)
    step = make_train_step(task, tx, optax.constant_schedule(1e-3))
    state = init_train_state(task, tx, ema=False)
    before = jax.tree.map(np.asarray, state["params"])
    state, metrics = step(state, {k: jnp.asarray(v) for k, v in _batch(64).items()})
    assert np.isfinite(float(metrics["loss"])) and float(metrics["loss"]) > 0
    # (conv biases right before a training-mode BatchNorm get no gradient: not all weights)
    moved = sum(a.size for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(state["params"]),
                                       strict=True) if not np.array_equal(a, b))
    assert moved > 0.9 * sum(a.size for a in jax.tree.leaves(before))
