"""Training-mode BatchNorm with the hand-written gradient (CPU) gives flax's values, running
statistics (the variance's unbiased, as TF's and PyTorch's) and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.backends.cpu import batch_norm as batch_norm_grad
from jaxdet.models.layers import BatchNorm
from random_arrays import normal, uniform

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU-only rewrite")


def _pair(channels: int):
    ours = BatchNorm(channels, momentum=0.9, epsilon=1e-3, rngs=nnx.Rngs(0))
    theirs = nnx.BatchNorm(channels, momentum=0.9, epsilon=1e-3, rngs=nnx.Rngs(0))
    scale = uniform(3, (channels,), 0.5, 2.0)
    bias = normal(4, (channels,))
    for module in (ours, theirs):
        module.scale[...] = scale
        module.bias[...] = bias
    return ours, theirs


def _loss_and_grads(module, x, weights):
    graphdef, params, batch_stats = nnx.split(module, nnx.Param, nnx.BatchStat)
    params, batch_stats = nnx.to_pure_dict(params), nnx.to_pure_dict(batch_stats)

    def loss(params, x):
        model = nnx.merge(graphdef, params, batch_stats)
        y = model(x)
        stats = nnx.to_pure_dict(nnx.state(model, nnx.BatchStat))
        return jnp.sum(jnp.clip(y, 0.0, 6.0) * weights), (y, stats)

    (value, (y, stats)), grads = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(
        params, x)
    return value, y, stats, grads


@pytest.mark.parametrize("shape", [(4, 6, 5, 7), (3, 11), (2, 3, 4, 5, 6)])
def test_matches_flax_values_statistics_and_gradients(shape):
    x = normal(0, shape) * 3.0 + 1.5
    # A constant channel: its variance is 0 (or rounds below it) and is clipped.
    x = x.at[..., 0].set(2.0)
    weights = normal(1, shape)
    ours, theirs = _pair(shape[-1])
    assert ours._hand_written_gradient(x, None)
    got, want = _loss_and_grads(ours, x, weights), _loss_and_grads(theirs, x, weights)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2]["mean"], want[2]["mean"], rtol=1e-5, atol=1e-6)
    # flax averages the biased batch variance in; jaxdet the unbiased one, as TF and PyTorch
    n = x.size // shape[-1]
    unbiased = 0.9 + (np.asarray(want[2]["var"]) - 0.9) * n / (n - 1)
    np.testing.assert_allclose(got[2]["var"], unbiased, rtol=1e-5, atol=1e-6)
    (got_params, got_x), (want_params, want_x) = got[3], want[3]
    np.testing.assert_allclose(got_x, want_x, rtol=1e-4, atol=1e-5)
    for name in ("scale", "bias"):
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-4, atol=1e-5)


def test_gradient_by_hand_on_one_channel():
    """Two values a, b: mean (a+b)/2, variance ((a-b)/2)^2, y = +-1 * scale + bias (eps 0):
    y does not depend on x at all, so dL/dx is 0 whatever dL/dy; dL/dscale = dy_a - dy_b for
    a > b, and dL/dbias = dy_a + dy_b."""
    x = jnp.asarray([[3.0], [1.0]])
    mean, raw = batch_norm_grad.batch_statistics(x)
    np.testing.assert_allclose([mean[0], raw[0]], [2.0, 1.0])

    def loss(x, scale, bias):
        y = batch_norm_grad.normalize_with_batch_statistics(
            x, *batch_norm_grad.batch_statistics(x), scale, bias, 0.0)
        return jnp.sum(y[:, 0] * jnp.asarray([0.7, -0.2]))

    grad_x, grad_scale, grad_bias = jax.grad(loss, (0, 1, 2))(x, jnp.ones(1) * 1.5,
                                                              jnp.zeros(1))
    np.testing.assert_allclose(grad_x, [[0.0], [0.0]], atol=1e-6)
    np.testing.assert_allclose(grad_scale, [0.9], rtol=1e-6)
    np.testing.assert_allclose(grad_bias, [0.5], rtol=1e-6)


def test_other_cases_keep_flax():
    bn = BatchNorm(4, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3, 4))
    assert bn._hand_written_gradient(x, None)
    assert not bn._hand_written_gradient(x.astype(jnp.bfloat16), None)
    assert not bn._hand_written_gradient(x, jnp.ones((2, 3, 1), bool))
