import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models.layers import (
    BatchNorm,
    BatchNormParams,
    SeparableConv,
    activation,
    batch_norm,
    conv,
    make_divisible,
    max_pool_symmetric,
)
from random_arrays import normal


def _bn_state(bn):
    return np.asarray(bn.mean[...]).copy(), np.asarray(bn.var[...]).copy()


def test_activation_names():
    x = jnp.array([-2.0, 0.5, 8.0])
    np.testing.assert_allclose(activation("relu")(x), [0.0, 0.5, 8.0])
    np.testing.assert_allclose(activation("relu6")(x), [0.0, 0.5, 6.0])
    np.testing.assert_allclose(activation("swish")(x), x * jax.nn.sigmoid(x), rtol=1e-6)
    np.testing.assert_allclose(activation("none")(x), x)
    with pytest.raises(ValueError, match="relu6"):
        activation("gelu")


def test_make_divisible_matches_reference_rule():
    assert make_divisible(32 * 0.35) == 16  # 8 would be > 10% below 11.2
    assert make_divisible(16 * 0.35) == 8
    assert make_divisible(64 * 0.35) == 24
    assert make_divisible(5.6, 8, min_value=16) == 16
    assert make_divisible(1280 * 1.4) == 1792


def test_batch_norm_factory_settings():
    bn = batch_norm(4, BatchNormParams(momentum=0.9, epsilon=1e-5, frozen=True), jnp.bfloat16,
                    nnx.Rngs(0))
    assert isinstance(bn, BatchNorm)
    assert (bn.momentum, bn.epsilon, bn.frozen, bn.dtype) == (0.9, 1e-5, True, jnp.bfloat16)
    assert bn.scale.dtype == jnp.float32


def test_batch_norm_is_built_as_nnx_builds_one():
    """jaxdet's BatchNorm makes its vectors on the host instead of calling nnx.BatchNorm's
    constructor: every attribute that constructor sets (of the installed Flax) is there with
    the same value, it draws the same keys (the next layer's key is the same), and it
    normalizes as nnx's does in train and eval mode."""
    rngs_ours, rngs_nnx = nnx.Rngs(3), nnx.Rngs(3)
    ours = BatchNorm(5, momentum=0.9, epsilon=1e-4, dtype=jnp.bfloat16, rngs=rngs_ours)
    stock = nnx.BatchNorm(5, momentum=0.9, epsilon=1e-4, dtype=jnp.bfloat16,
                          param_dtype=jnp.float32, rngs=rngs_nnx)
    for name, value in vars(stock).items():
        assert name in vars(ours), name
        mine = vars(ours)[name]
        if isinstance(value, nnx.Variable):
            assert isinstance(mine, type(value)), name
            assert mine.dtype == value.dtype and mine.shape == value.shape, name
            np.testing.assert_array_equal(np.asarray(mine[...]), np.asarray(value[...]))
        elif not name.startswith("_"):
            assert mine == value, name
    np.testing.assert_array_equal(jax.random.key_data(rngs_ours.params()),
                                  jax.random.key_data(rngs_nnx.params()))
    x = normal(1, (4, 3, 3, 5)) * 3.0 + 1.0
    for mode in ("train", "eval"):
        getattr(ours, mode)(), getattr(stock, mode)()
        np.testing.assert_allclose(np.asarray(ours(x), np.float32),
                                   np.asarray(stock(x), np.float32), rtol=2e-2, atol=2e-2)
        np.testing.assert_allclose(np.asarray(ours.mean[...]), np.asarray(stock.mean[...]),
                                   rtol=1e-6)


def _randomized_bn(params, n=3):
    bn = batch_norm(n, params, None, nnx.Rngs(0))
    bn.scale[...] = jnp.array([1.5, 0.5, 2.0])
    bn.bias[...] = jnp.array([0.1, -0.2, 0.3])
    bn.mean[...] = jnp.array([0.5, -1.0, 2.0])
    bn.var[...] = jnp.array([4.0, 0.25, 1.0])
    return bn


def test_frozen_batch_norm_keeps_stats_and_gives_zero_grads_in_train_mode():
    bn = _randomized_bn(BatchNormParams(epsilon=1e-3, frozen=True))
    bn.train()
    assert bn.use_running_average is False  # train mode reached it; frozen wins anyway
    x = normal(0, (4, 5, 5, 3)) * 3.0 + 1.0
    before = _bn_state(bn)
    y = bn(x)
    after = _bn_state(bn)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    expected = (x - before[0]) / np.sqrt(before[1] + 1e-3) * bn.scale[...] + bn.bias[...]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)

    def loss(model, x):
        return jnp.sum(model(x) ** 2)

    grads = nnx.grad(loss)(bn, x)
    np.testing.assert_array_equal(grads["scale"][...], 0.0)
    np.testing.assert_array_equal(grads["bias"][...], 0.0)
    # The input still gets a gradient.
    gx = jax.grad(lambda x: loss(bn, x))(x)
    assert np.abs(np.asarray(gx)).sum() > 0


def test_trainable_batch_norm_updates_stats_in_train_mode_only():
    bn = _randomized_bn(BatchNormParams(momentum=0.9))
    x = normal(1, (8, 4, 4, 3)) + 5.0
    before = _bn_state(bn)
    bn.eval()
    y_eval = bn(x)
    np.testing.assert_array_equal(_bn_state(bn)[0], before[0])
    expected = (x - before[0]) / np.sqrt(before[1] + 1e-3) * bn.scale[...] + bn.bias[...]
    np.testing.assert_allclose(y_eval, expected, rtol=1e-5, atol=1e-5)
    bn.train()
    y_train = bn(x)
    batch_mean = np.asarray(x).mean(axis=(0, 1, 2))
    np.testing.assert_allclose(bn.mean[...], 0.9 * before[0] + 0.1 * batch_mean, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(y_train).mean(axis=(0, 1, 2)), bn.bias[...], atol=1e-4)
    grads = nnx.grad(lambda m, x: jnp.sum(m(x) * x))(bn, x)
    assert np.abs(np.asarray(grads["scale"][...])).sum() > 0


@pytest.mark.parametrize("path", ["backend form", "flax", "grouped"])
def test_running_variance_is_the_unbiased_batch_variance(path, monkeypatch):
    """As TF's fused batch norm (what the TF OD API trains with) and PyTorch's: the running
    variance moves towards n / (n - 1) times the variance that normalizes the batch; on 8
    values per feature (a 1x1 map of a batch of 8) that is 8 / 7. (TF 2.21's Keras
    BatchNormalization on this input moves it to the same values.)"""
    from jaxdet.backends import dispatch

    x = normal(3, (8, 1, 1, 3))
    groups = 2 if path == "grouped" else 1
    if path == "flax":
        monkeypatch.setattr(dispatch, "has_batch_norm_form", lambda dtype: False)
    bn = BatchNorm(3, momentum=0.25, epsilon=1e-3, num_groups=groups, rngs=nnx.Rngs(0))
    out = bn(x)
    values = np.asarray(x, np.float64).reshape(groups, -1, 3)
    unbiased = values.var(axis=1, ddof=1).mean(axis=0)
    np.testing.assert_allclose(bn.var[...], 0.25 * 1.0 + 0.75 * unbiased, rtol=1e-5)
    # normalization itself uses the biased variance
    biased = values.var(axis=1).reshape(groups, 1, 3)
    centred = values - values.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(out).reshape(groups, -1, 3),
                               centred / np.sqrt(biased + 1e-3), rtol=1e-4, atol=1e-5)


def test_batch_norm_bf16_compute_keeps_float32_params():
    bn = batch_norm(3, BatchNormParams(), jnp.bfloat16, nnx.Rngs(0))
    x = jnp.ones((2, 4, 4, 3), jnp.bfloat16)
    assert bn(x).dtype == jnp.bfloat16
    bn.eval()
    assert bn(x).dtype == jnp.bfloat16
    assert bn.mean.dtype == jnp.float32 and bn.scale.dtype == jnp.float32


@pytest.mark.parametrize(("kernel", "size"), [(1, 8), (3, 7), (3, 8), (7, 7)])
def test_symmetric_conv_matches_pytorch_padding(kernel, size):
    c = conv(2, 3, kernel, 2, rngs=nnx.Rngs(0))
    x = normal(0, (1, size, size, 2))
    y = c(x)
    pad = kernel // 2
    expected = jax.lax.conv_general_dilated(
        x, c.kernel[...], (2, 2), ((pad, pad), (pad, pad)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    assert y.shape[1] == (size + 2 * pad - kernel) // 2 + 1
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_same_padding_and_separable_conv():
    c = conv(2, 3, 3, 2, padding="same", rngs=nnx.Rngs(0))
    assert c(jnp.zeros((1, 19, 19, 2))).shape == (1, 10, 10, 3)
    sep = SeparableConv(4, 6, 3, 2, rngs=nnx.Rngs(0))
    assert sep.depthwise.kernel.shape == (3, 3, 1, 4)
    assert sep.pointwise.kernel.shape == (1, 1, 4, 6)
    assert sep(jnp.zeros((1, 5, 5, 4))).shape == (1, 3, 3, 6)
    with pytest.raises(ValueError, match="padding"):
        conv(2, 3, 3, padding="valid", rngs=nnx.Rngs(0))


def test_max_pool_symmetric_ignores_padding():
    x = -jnp.arange(25.0).reshape(1, 5, 5, 1) - 1.0  # all negative: zero padding would win
    y = max_pool_symmetric(x, 3, 2)
    assert y.shape == (1, 3, 3, 1)
    assert float(y[0, 0, 0, 0]) == -1.0
    assert float(y[0, 2, 2, 0]) == float(x[0, 3, 3, 0])
