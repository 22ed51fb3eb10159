import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.backbones.mobilenet import MobileNetV1, MobileNetV2
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import BatchNormParams
from random_arrays import normal

BN = BatchNormParams()


def _abstract_outputs(factory, image_hw, batch=2):
    """Output shapes of ``factory()(images)`` traced abstractly (no weights, no FLOPs)."""
    graphdef, state = nnx.split(abstract_build(factory))
    model = nnx.merge(graphdef, state)
    x = jax.ShapeDtypeStruct((batch, *image_hw, 3), jnp.float32)
    out = jax.eval_shape(lambda m, x: m(x), model, x)
    return model, {lvl: tuple(v.shape) for lvl, v in out.items()}


@pytest.mark.slow
def test_resnet50_runs_at_64x64(build_fast):
    model = build_fast(lambda: ResNet(50, batch_norm=BN, rngs=model_rngs(0)))
    model.eval()
    x = normal(0, (2, 64, 64, 3))
    out = nnx.jit(lambda m, x: m(x))(model, x)
    assert sorted(out) == [2, 3, 4, 5]
    assert model.out_channels == {2: 256, 3: 512, 4: 1024, 5: 2048}
    for level, y in out.items():
        stride = 2**level
        assert y.shape == (2, 64 // stride, 64 // stride, model.out_channels[level])
        assert y.dtype == jnp.float32
        assert np.isfinite(np.asarray(y)).all()


def test_resnet152_abstract_shapes():
    """ResNet-101/152 differ from 50 only in block counts (their parameter shapes are checked
    against torchvision in test_torch_names); trace 152 abstractly, odd-sized input."""
    model, out = _abstract_outputs(
        lambda: ResNet(152, batch_norm=BN, rngs=model_rngs(0)), (96, 130)
    )
    assert out == {2: (2, 24, 33, 256), 3: (2, 12, 17, 512), 4: (2, 6, 9, 1024),
                   5: (2, 3, 5, 2048)}
    assert [len(s) for s in (model.layer1, model.layer2, model.layer3, model.layer4)] == [
        3, 8, 36, 3]


def test_resnet_structure_mirrors_torchvision():
    model = abstract_build(lambda: ResNet(50, batch_norm=BN, rngs=model_rngs(0)))
    stages = (model.layer1, model.layer2, model.layer3, model.layer4)
    assert [len(s) for s in stages] == [3, 4, 6, 3]
    block = model.layer2[0]
    assert block.conv2.strides == 2 and block.conv1.strides == 1  # v1.5
    assert block.downsample[0].kernel.shape == (1, 1, 256, 512)
    assert model.layer2[1].downsample is None
    assert not hasattr(model, "fc")
    with pytest.raises(ValueError, match=r"\[18, 34, 50, 101, 152\]"):
        ResNet(26, batch_norm=BN, rngs=model_rngs(0))


V1_CHANNELS = {
    0.25: {2: 32, 3: 64, 4: 128, 5: 256},
    0.35: {2: 48, 3: 88, 4: 176, 5: 360},
    1.0: {2: 128, 3: 256, 4: 512, 5: 1024},
}
# (level 2, 3, 4, 5) and the level-4 expansion width.
V2_CHANNELS = {
    0.25: ({2: 8, 3: 8, 4: 24, 5: 1280}, 144),
    0.35: ({2: 8, 3: 16, 4: 32, 5: 1280}, 192),
    1.0: ({2: 24, 3: 32, 4: 96, 5: 1280}, 576),
}


@pytest.mark.parametrize("multiplier", sorted(V1_CHANNELS))
def test_mobilenet_v1_levels(multiplier):
    model, out = _abstract_outputs(
        lambda: MobileNetV1(multiplier, batch_norm=BN, rngs=model_rngs(0)), (64, 96)
    )
    assert model.out_channels == V1_CHANNELS[multiplier]
    for level, shape in out.items():
        assert shape == (2, 64 // 2**level, 96 // 2**level, model.out_channels[level])


@pytest.mark.parametrize("multiplier", sorted(V2_CHANNELS))
@pytest.mark.parametrize("from_expansion", [False, True])
def test_mobilenet_v2_levels(multiplier, from_expansion):
    model, out = _abstract_outputs(
        lambda: MobileNetV2(multiplier, level4_from_expansion=from_expansion, batch_norm=BN,
                            rngs=model_rngs(0)),
        (64, 96),
    )
    expected, expansion = V2_CHANNELS[multiplier]
    if from_expansion:
        expected = {**expected, 4: expansion}
    assert model.out_channels == expected
    assert sorted(out) == [2, 3, 4, 5]
    for level, shape in out.items():
        assert shape == (2, 64 // 2**level, 96 // 2**level, expected[level])


def test_mobilenet_min_depth_and_head_channels():
    model = abstract_build(lambda: MobileNetV2(0.35, min_depth=16, batch_norm=BN,
                                               rngs=model_rngs(0)))
    assert model.out_channels == {2: 16, 3: 16, 4: 32, 5: 1280}
    assert model.blocks[0][0].conv_pw.kernel.shape[-1] == 16
    big = abstract_build(lambda: MobileNetV2(1.4, batch_norm=BN, rngs=model_rngs(0)))
    assert big.out_channels[5] == 1792
    lite = abstract_build(lambda: MobileNetV2(1.0, head_channels=256, batch_norm=BN,
                                              rngs=model_rngs(0)))
    assert lite.out_channels[5] == 256
    # the TF OD API's Keras MobileNetV2: the head scaled below 1 only (TF's Conv_1 override)
    for multiplier, head in ((0.35, 448), (1.4, 1280)):
        tf_net = abstract_build(lambda m=multiplier: MobileNetV2(
            m, min_depth=16, head_scaling="below_1", batch_norm=BN, rngs=model_rngs(0)))
        assert tf_net.out_channels[5] == head


@pytest.mark.parametrize("cls", [MobileNetV1, MobileNetV2])
@pytest.mark.slow
def test_mobilenets_run_and_expansion_level_is_the_expansion_output(cls, build_fast):
    kwargs = {"level4_from_expansion": True} if cls is MobileNetV2 else {}
    model = build_fast(lambda: cls(0.25, batch_norm=BN, rngs=model_rngs(0), **kwargs))
    model.eval()
    x = normal(0, (1, 64, 64, 3))
    out = nnx.jit(lambda m, x: m(x))(model, x)
    for level, y in out.items():
        assert y.shape == (1, 64 // 2**level, 64 // 2**level, model.out_channels[level])
        assert np.isfinite(np.asarray(y)).all()
    if cls is MobileNetV2:
        # Level 4 is ReLU6-bounded and equals the first stride-32 block's expansion.
        y4 = np.asarray(out[4])
        assert y4.min() >= 0.0 and y4.max() <= 6.0
        assert model.blocks[5][0].conv_dw.strides == 2
