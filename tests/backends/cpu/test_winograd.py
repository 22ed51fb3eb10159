"""Winograd F(4x4, 3x3) convolutions compute lax's 3x3 convolution, values and gradients, and
the CPU router picks them only for the large float32 stride-1 3x3 convolutions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxdet.backends import trace
from jaxdet.backends.cpu import conv2d as depthwise
from jaxdet.backends.cpu import winograd
from random_arrays import normal

DN = ("NHWC", "HWIO", "NHWC")
DN_NNX = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))


def _lax_conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)), dimension_numbers=DN)


def test_one_dimensional_transforms_compute_a_correlation():
    """A^T [(G g) * (B^T d)] is the 4-output correlation of 6 inputs with a 3-tap filter,
    by hand in float64: y_i = sum_k d_(i+k) g_k."""
    rng = np.random.default_rng(0)
    for _ in range(5):
        d, g = rng.normal(size=6), rng.normal(size=3)
        want = [d[i] * g[0] + d[i + 1] * g[1] + d[i + 2] * g[2] for i in range(4)]
        got = winograd.OUTPUT_TRANSFORM @ ((winograd.KERNEL_TRANSFORM @ g)
                                           * (winograd.INPUT_TRANSFORM @ d))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(2, 9, 11, 5, 7), (1, 8, 8, 3, 4), (1, 4, 13, 6, 2),
                                   (3, 1, 1, 2, 3)])
def test_matches_lax_for_sizes_not_multiple_of_the_tile(shape):
    batch, height, width, cin, cout = shape
    x = normal(0, (batch, height, width, cin))
    k = normal(1, (3, 3, cin, cout))
    want = _lax_conv(x, k)
    scale = float(jnp.max(jnp.abs(want)))
    for fn in (winograd.winograd_conv3x3, jax.jit(winograd.winograd_conv3x3)):
        got = fn(x, k)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=5e-5 * scale, rtol=0)


@pytest.mark.slow
def test_gradients_match_lax():
    """The input gradient (Winograd with the flipped kernel) and the kernel gradient (the
    transposed algorithm) are lax's."""
    x = normal(0, (2, 10, 7, 6))
    k = normal(1, (3, 3, 6, 5))
    loss = lambda f: (lambda x, k: jnp.sum(jnp.sin(f(x, k))))  # noqa: E731
    want = jax.grad(loss(_lax_conv), (0, 1))(x, k)
    for grad in (jax.grad(loss(winograd.winograd_conv3x3), (0, 1)),
                 jax.jit(jax.grad(loss(winograd.winograd_conv3x3), (0, 1)))):
        for got, ref in zip(grad(x, k), want, strict=True):
            np.testing.assert_allclose(got, ref, atol=1e-4 * float(jnp.max(jnp.abs(ref))),
                                       rtol=0)


def _routed(x, k, strides=(1, 1), padding="SAME", rhs_dilation=None):
    return depthwise.conv_general_dilated(x, k, strides, padding, rhs_dilation=rhs_dilation,
                                          dimension_numbers=DN_NNX)


def _uses_winograd(*args, **kwargs) -> bool:
    jaxpr = str(jax.make_jaxpr(lambda x, k: _routed(x, k, **kwargs))(*args))
    return "conv_general_dilated" not in jaxpr


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU-only rewrite")
def test_router_picks_winograd_for_large_float32_3x3_stride_1_only():
    x = normal(0, (1, 32, 32, 64))
    k = normal(1, (3, 3, 64, 64)) * 0.05
    assert winograd.worth_it(x.shape, k.shape, x.dtype)
    assert _uses_winograd(x, k)
    assert _uses_winograd(x, k, padding=((1, 1), (1, 1)))
    want = _lax_conv(x, k)
    np.testing.assert_allclose(jax.jit(_routed)(x, k), want,
                               atol=5e-5 * float(jnp.max(jnp.abs(want))), rtol=0)
    # Everything else keeps XLA's convolution.
    assert not _uses_winograd(x, k, strides=(2, 2))
    assert not _uses_winograd(x, k, padding="VALID")
    assert not _uses_winograd(x, k, rhs_dilation=(2, 2))
    assert not _uses_winograd(x.astype(jnp.bfloat16), k.astype(jnp.bfloat16))
    assert not _uses_winograd(x[:, :16, :16], k)  # 16 tiles: the transforms would not pay
    assert not _uses_winograd(x[..., :32], k[:, :, :32, :32])
    assert not _uses_winograd(x, jnp.zeros((5, 5, 64, 64)))
    with trace.reference():
        assert not _uses_winograd(x, k)


def test_opt_out_and_symbolic_shapes_keep_xla(monkeypatch):
    monkeypatch.setenv("JAXDET_WINOGRAD", "0")
    assert not winograd.worth_it((1, 32, 32, 64), (3, 3, 64, 64), jnp.float32)
    monkeypatch.delenv("JAXDET_WINOGRAD")
    assert winograd.worth_it((1, 32, 32, 64), (3, 3, 64, 64), jnp.float32)
    (batch,) = jax.export.symbolic_shape("batch")
    assert not winograd.worth_it((batch, 32, 32, 64), (3, 3, 64, 64), jnp.float32)
