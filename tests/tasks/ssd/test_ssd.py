import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models.backbones.mobilenet import MobileNetV2
from jaxdet.models.layers import BatchNormParams
from jaxdet.models.necks.fpn import FPN
from jaxdet.tasks.ssd.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.tasks.ssd.heads.weight_shared import WeightSharedBoxPredictor
from jaxdet.tasks.ssd.model import SSDDetector, concat_levels
from jaxdet.tasks.ssd.ssd_feature_maps import SSDFeatureMaps
from random_arrays import normal

try:
    from jaxdet.core.anchors import MultiscaleAnchorGenerator, SSDAnchorGenerator
except ImportError:  # core/anchors is written concurrently; counts below are by hand too
    MultiscaleAnchorGenerator = SSDAnchorGenerator = None

BN = BatchNormParams()
NUM_CLASSES = 3
K = 6  # 2 scales x 3 aspect ratios


def _retinanet(dtype=jnp.float32):
    rngs = nnx.Rngs(0)
    backbone = MobileNetV2(0.35, batch_norm=BN, dtype=dtype, rngs=rngs)
    neck = FPN(backbone.out_channels, 3, 7, 32, batch_norm=BN, dtype=dtype, rngs=rngs)
    head = WeightSharedBoxPredictor(32, NUM_CLASSES, K, [3, 4, 5, 6, 7], depth=32,
                                    num_layers_before_predictor=2, batch_norm=BN,
                                    dtype=dtype, rngs=rngs)
    return SSDDetector(backbone, neck, head)


def _ssd(image_hw=(96, 96)):
    rngs = nnx.Rngs(0)
    backbone = MobileNetV2(0.35, level4_from_expansion=True, batch_norm=BN, rngs=rngs)
    neck = SSDFeatureMaps(backbone.out_channels, (4, 5), (64, 32, 32, 16), batch_norm=BN,
                          use_depthwise=True, rngs=rngs)
    head = ConvolutionalBoxPredictor(list(neck.out_channels.values()), NUM_CLASSES,
                                     [3, 6, 6, 6, 6, 6], kernel_size=3, use_depthwise=True,
                                     batch_norm=BN, rngs=rngs)
    return SSDDetector(backbone, neck, head)


def _num_anchors(model, image_hw, anchors_per_location):
    return sum(h * w * k for (h, w), k in
               zip(model.feature_shapes(image_hw), anchors_per_location, strict=True))


IMAGE_HW = (96, 80)


@pytest.fixture(scope="module")
def retinanet_eval(build_fast):
    """The tiny RetinaNet-style detector in eval mode, its input and its jitted output
    (one compile shared by the tests below)."""
    model = build_fast(_retinanet)
    model.eval()
    images = normal(0, (2, *IMAGE_HW, 3))
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, images):
        return nnx.merge(graphdef, state)(images)

    return model, images, forward, forward(state, images)


@pytest.mark.slow
def test_retinanet_style_detector_matches_anchor_count(retinanet_eval):
    model, _, _, out = retinanet_eval
    assert model.feature_shapes(IMAGE_HW) == [(12, 10), (6, 5), (3, 3), (2, 2), (1, 1)]
    expected = (12 * 10 + 6 * 5 + 3 * 3 + 2 * 2 + 1) * K  # = 984
    if MultiscaleAnchorGenerator is not None:
        gen = MultiscaleAnchorGenerator(min_level=3, max_level=7, scales_per_octave=2,
                                        aspect_ratios=(1.0, 2.0, 0.5))
        assert gen.num_anchors_per_location() == [K] * 5
        assert gen.feature_map_shapes(IMAGE_HW) == model.feature_shapes(IMAGE_HW)
        assert gen.generate(IMAGE_HW).shape[0] == expected
    assert len(out["class_logits"]) == len(out["box_encodings"]) == 5
    cls, box = concat_levels(out)
    assert cls.shape == (2, expected, NUM_CLASSES) and box.shape == (2, expected, 4)
    # Parameter groups for per-component learning rates / freezing.
    groups = {name: nnx.state(getattr(model, name), nnx.Param) for name in
              ("backbone", "neck", "head")}
    total = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert sum(sum(x.size for x in jax.tree.leaves(g)) for g in groups.values()) == total


@pytest.mark.slow
def test_jit_and_eager_agree_in_eval_mode(retinanet_eval):
    model, images, forward, jit_out = retinanet_eval
    # Fusion under jit reorders float32 sums; outputs are O(1), so 1e-3 is tight.
    jit_cls, jit_box = concat_levels(jit_out)
    eager_cls, eager_box = concat_levels(model(images))
    np.testing.assert_allclose(jit_cls, eager_cls, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(jit_box, eager_box, rtol=1e-3, atol=1e-3)
    # Eval mode is deterministic and leaves the running statistics alone.
    again, _ = concat_levels(forward(nnx.state(model), images))
    np.testing.assert_array_equal(again, jit_cls)


@pytest.mark.slow
def test_ssd_style_detector_matches_anchor_count():
    model = nnx.eval_shape(lambda: _ssd())
    image_hw = (96, 96)
    shapes = model.feature_shapes(image_hw)
    assert shapes == [(6, 6), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)]
    per_location = [3, 6, 6, 6, 6, 6]
    expected = _num_anchors(model, image_hw, per_location)
    if SSDAnchorGenerator is not None:
        gen = SSDAnchorGenerator(num_layers=6)
        assert gen.num_anchors_per_location() == per_location
        assert gen.generate(shapes, image_hw).shape[0] == expected
    graphdef, state = nnx.split(model)
    out = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                         jax.ShapeDtypeStruct((2, *image_hw, 3), jnp.float32))
    cls, box = jax.eval_shape(concat_levels, out)
    assert cls.shape == (2, expected, NUM_CLASSES) and box.shape == (2, expected, 4)


def test_feature_shapes_does_not_touch_state(build_fast):
    model = build_fast(_retinanet)
    before = jax.tree.map(np.asarray, nnx.state(model, nnx.BatchStat))
    model.feature_shapes(64)
    after = nnx.state(model, nnx.BatchStat)
    jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.asarray, after))


@pytest.mark.slow
def test_bfloat16_compute_with_float32_params(build_fast):
    """Train mode (batch statistics in float32, running averages updated in float32); the
    bf16 eval path of BatchNorm is covered in test_layers."""
    model = build_fast(lambda: _retinanet(dtype=jnp.bfloat16))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model)))
    out = nnx.jit(lambda m, x: m(x))(model, jnp.ones((1, 64, 64, 3)))
    cls, box = concat_levels(out)
    assert cls.dtype == jnp.bfloat16 and box.dtype == jnp.bfloat16
    assert np.isfinite(np.asarray(cls, np.float32)).all()
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model)))
