import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models.layers import BatchNorm, BatchNormParams
from jaxdet.tasks.ssd.heads.common import prior_probability_bias
from jaxdet.tasks.ssd.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.tasks.ssd.heads.weight_shared import WeightSharedBoxPredictor
from random_arrays import normal, seeds

BN = BatchNormParams()
apply = nnx.jit(lambda model, features: model(features))
LEVELS = [3, 4, 5]
SIZES = {3: (8, 6), 4: (4, 3), 5: (2, 2)}


def _features(depth, batch=2, seed=0):
    keys = seeds(seed, len(LEVELS))
    return {lvl: normal(k, (batch, *SIZES[lvl], depth))
            for k, lvl in zip(keys, LEVELS, strict=True)}


def _weight_shared(**kw):
    args = dict(in_depth=32, num_class_outputs=5, num_anchors_per_location=3, levels=LEVELS,
                depth=32, num_layers_before_predictor=2, batch_norm=BN, rngs=nnx.Rngs(0))
    args.update(kw)
    return WeightSharedBoxPredictor(**args)


def _modules_of(model, cls):
    return [m for _, m in nnx.iter_modules(model) if isinstance(m, cls)]


def test_prior_probability_bias_value():
    assert prior_probability_bias(0.01) == pytest.approx(-math.log(99.0))
    assert prior_probability_bias(0.01) == pytest.approx(-4.59512, abs=1e-5)
    with pytest.raises(ValueError):
        prior_probability_bias(0.0)


def test_weight_shared_structure_and_init():
    head = nnx.eval_shape(lambda: _weight_shared())
    # One conv per tower layer, shared across the 3 levels; BatchNorm per layer and level.
    convs = _modules_of(head, nnx.Conv)
    assert len(convs) == 2 + 2 + 2  # box tower, class tower, two predictors
    assert len(_modules_of(head, BatchNorm)) == 2 * 2 * 3
    assert len(head.box_norms[0]) == 3 and head.box_tower[0].bias is None
    shared = nnx.eval_shape(lambda: _weight_shared(share_norm_across_levels=True))
    assert len(_modules_of(shared, BatchNorm)) == 2 * 2
    gn = nnx.eval_shape(lambda: _weight_shared(norm="group_norm"))
    assert len(_modules_of(gn, nnx.GroupNorm)) == 2 * 2 * 3
    assert gn.box_norms[0][0].num_groups == 32
    plain = nnx.eval_shape(lambda: _weight_shared(norm="none"))
    assert plain.box_norms is None and plain.box_tower[0].bias is not None
    assert head.class_predictor.kernel.shape == (3, 3, 32, 3 * 5)
    assert head.box_predictor.kernel.shape == (3, 3, 32, 3 * 4)

    real = _weight_shared(num_layers_before_predictor=1, prior_probability=0.01)
    np.testing.assert_allclose(real.class_predictor.bias[...], -math.log(99.0), rtol=1e-6)
    np.testing.assert_array_equal(real.box_predictor.bias[...], 0.0)
    assert float(jnp.std(real.box_tower[0].kernel[...])) == pytest.approx(0.01, rel=0.1)


@pytest.mark.slow
def test_weight_shared_conv_weights_are_one_object_applied_to_every_level(build_fast):
    head = build_fast(lambda: _weight_shared())
    feats = _features(32)
    grads = nnx.jit(nnx.grad(lambda m, f: sum(jnp.sum(c) for c in m(f)[0])))(head, feats)
    # Conv kernel gradient is a single tensor (contributions of all levels summed) and the
    # per-level BatchNorm of the class tower gets its own gradient.
    assert grads["class_tower"][0]["kernel"].shape == (3, 3, 32, 32)
    for j in range(3):
        assert float(jnp.abs(grads["class_norms"][0][j]["scale"][...]).sum()) > 0
    # In train mode every level updates its own BatchNorm statistics.
    before = [np.asarray(n.mean[...]).copy() for n in head.box_norms[0]]
    apply(head, feats)
    after = [np.asarray(n.mean[...]) for n in head.box_norms[0]]
    assert all(not np.allclose(b, a) for b, a in zip(before, after, strict=True))


def test_weight_shared_output_shapes_and_order(build_fast):
    head = build_fast(lambda: _weight_shared(share_norm_across_levels=True))
    cls, box = apply(head, _features(32))
    assert [c.shape for c in cls] == [(2, 8 * 6 * 3, 5), (2, 4 * 3 * 3, 5), (2, 2 * 2 * 3, 5)]
    assert [b.shape for b in box] == [(2, 8 * 6 * 3, 4), (2, 4 * 3 * 3, 4), (2, 2 * 2 * 3, 4)]
    with pytest.raises(ValueError, match="levels"):
        head({3: jnp.zeros((1, 2, 2, 32))})


def test_flattening_is_y_then_x_then_anchor(build_fast):
    """1x1 identity predictor: box[b, (y*w + x)*K + k, c] == input[b, y, x, k*4 + c]."""
    K = 2
    head = build_fast(lambda: WeightSharedBoxPredictor(
        K * 4, 3, K, [3], num_layers_before_predictor=0, kernel_size=1, rngs=nnx.Rngs(0)))
    head.box_predictor.kernel[...] = jnp.eye(K * 4).reshape(1, 1, K * 4, K * 4)
    head.box_predictor.bias[...] = jnp.zeros(K * 4)
    x = jnp.arange(2 * 3 * 5 * K * 4, dtype=jnp.float32).reshape(2, 3, 5, K * 4)
    _, (box,) = head({3: x})
    b, y, xx, k = 1, 2, 3, 1
    np.testing.assert_array_equal(box[b, (y * 5 + xx) * K + k], x[b, y, xx, k * 4:(k + 1) * 4])
    np.testing.assert_array_equal(box, x.reshape(2, 3 * 5 * K, 4))


@pytest.mark.slow  # its compile nears the quick tier's 3 s on a slow, busy 2-core VM
def test_weight_shared_group_norm_and_depthwise_run(build_fast):
    head = build_fast(lambda: _weight_shared(norm="group_norm", use_depthwise=True,
                                             activation="swish"))
    cls, box = apply(head, _features(32))
    assert cls[0].shape == (2, 8 * 6 * 3, 5) and box[2].shape == (2, 2 * 2 * 3, 4)
    assert head.class_tower[0].depthwise.kernel.shape == (3, 3, 1, 32)


def _conv_predictor(**kw):
    args = dict(in_channels=[16, 24, 8], num_class_outputs=4, num_anchors_per_location=[3, 6, 6],
                batch_norm=BN, rngs=nnx.Rngs(0))
    args.update(kw)
    return ConvolutionalBoxPredictor(**args)


def _conv_features(batch=2):
    keys = seeds(1, 3)
    return [normal(k, (batch, *SIZES[lvl], c))
            for k, lvl, c in zip(keys, LEVELS, [16, 24, 8], strict=True)]


def test_conv_predictor_separate_weights_per_level_and_shapes(build_fast):
    head = nnx.eval_shape(lambda: _conv_predictor(num_layers_before_predictor=1, depth=12,
                                                  kernel_size=3))
    assert len(head.predictors) == 3
    assert head.predictors[1].tower[0].conv.kernel.shape == (1, 1, 24, 12)
    assert head.predictors[1].class_predictor.conv.kernel.shape == (3, 3, 12, 6 * 4)
    assert head.predictors[0].box_predictor.conv.kernel.shape == (3, 3, 12, 3 * 4)
    fast = build_fast(lambda: _conv_predictor(kernel_size=3))
    cls, box = apply(fast, _conv_features())
    assert [c.shape for c in cls] == [(2, 8 * 6 * 3, 4), (2, 4 * 3 * 6, 4), (2, 2 * 2 * 6, 4)]
    assert [b.shape for b in box] == [(2, 8 * 6 * 3, 4), (2, 4 * 3 * 6, 4), (2, 2 * 2 * 6, 4)]
    real = _conv_predictor(in_channels=[8], num_anchors_per_location=[2],
                           class_prediction_bias_init=-4.6)
    np.testing.assert_allclose(real.predictors[0].class_predictor.conv.bias[...], -4.6)


@pytest.mark.slow
def test_conv_predictor_dropout_only_in_train_mode(build_fast):
    head = build_fast(lambda: _conv_predictor(use_dropout=True, dropout_keep_prob=0.5,
                                              use_depthwise=True, kernel_size=3))
    feats = _conv_features()
    head.eval()
    cls_a, box_a = apply(head, feats)
    cls_b, _ = apply(head, feats)
    np.testing.assert_array_equal(cls_a[0], cls_b[0])
    head.train()
    cls_t, box_t = apply(head, feats)
    assert not np.allclose(cls_t[0], cls_a[0])
    assert head.predictors[0].box_predictor.depthwise.conv.kernel.shape == (3, 3, 1, 16)
    with pytest.raises(ValueError, match="num_anchors_per_location"):
        _conv_predictor(num_anchors_per_location=[3])


def test_separable_head_starts_alive():
    """Separable tower/predictor kernels are N(0, 1/fan_in) (EfficientDet's init): a tower
    layer keeps unit-variance features near unit variance before its batch norm. N(0, 0.01) on
    both factors would leave ~6e-6, far below batch norm's epsilon (a head that never trains)."""
    head = _weight_shared(use_depthwise=True, num_layers_before_predictor=1,
                          prior_probability=0.01)
    tower = head.class_tower[0]
    depthwise, pointwise = tower.depthwise.kernel[...], tower.pointwise.kernel[...]
    assert depthwise.shape == (3, 3, 1, 32) and pointwise.shape == (1, 1, 32, 32)
    assert float(jnp.std(depthwise)) == pytest.approx(1 / 3, rel=0.15)  # fan_in 3*3*1
    assert float(jnp.std(pointwise)) == pytest.approx(32 ** -0.5, rel=0.15)  # fan_in 32
    x = normal(0, (2, 16, 16, 32))
    assert 0.2 < float(jnp.var(tower(x)[:, 1:-1, 1:-1])) < 5.0
    np.testing.assert_allclose(head.class_predictor.pointwise.bias[...], -math.log(99.0),
                               rtol=1e-6)
