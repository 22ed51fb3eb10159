"""The CPU rewrites of depthwise and 1x1 convolutions compute exactly what lax computes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxdet.backends import trace
from jaxdet.backends.cpu import conv2d as depthwise
from random_arrays import normal

DN = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("padding", [((1, 1), (1, 1)), "SAME"])
def test_depthwise_matches_lax_values_and_gradients(stride, padding):
    x = normal(0, (2, 9, 11, 6))
    w = normal(1, (3, 3, 1, 6))

    def ref(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=DN,
                                        feature_group_count=6)

    def ours(x, w):
        return depthwise.conv_general_dilated(x, w, (stride, stride), padding,
                                              dimension_numbers=lax.ConvDimensionNumbers(
                                                  (0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)),
                                              feature_group_count=6)

    np.testing.assert_allclose(ours(x, w), ref(x, w), rtol=1e-5, atol=1e-5)
    loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w))))  # noqa: E731
    for a, b in zip(jax.grad(loss(ours), (0, 1))(x, w), jax.grad(loss(ref), (0, 1))(x, w),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw, kernel, stride, padding", [
    ((9, 11), 5, 1, "SAME"), ((9, 11), 5, 2, "SAME"), ((8, 8), 3, 2, ((0, 1), (0, 1))),
    ((7, 10), 3, 2, "VALID"), ((6, 6), 3, 3, ((2, 0), (1, 2))), ((8, 9), 1, 1, "SAME"),
    ((9, 7), 1, 2, "VALID"), ((10, 9), 2, 2, "SAME"), ((11, 8), 2, 3, ((1, 0), (0, 1)))])
@pytest.mark.slow
def test_depthwise_hand_written_gradient_matches_lax(hw, kernel, stride, padding):
    """The depthwise gradient (the input's phase by phase: each of the stride x stride input
    phases a shifted sum of the output gradient over the taps that reach it) is lax's for odd
    and even sizes, 5x5 kernels, strides 2-3, TF-style asymmetric and VALID padding, and
    kernels no larger than the stride (phases no tap reaches, rows past the last window);
    jitted and eager."""
    x = normal(0, (2, *hw, 6))
    w = normal(1, (kernel, kernel, 1, 6))
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))

    def ours(x, w):
        return depthwise.conv_general_dilated(x, w, (stride, stride), padding,
                                              dimension_numbers=dn, feature_group_count=6)

    def ref(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=DN,
                                        feature_group_count=6)

    np.testing.assert_allclose(ours(x, w), ref(x, w), rtol=1e-5, atol=1e-5)
    loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w))))  # noqa: E731
    want = jax.grad(loss(ref), (0, 1))(x, w)
    for grad in (jax.grad(loss(ours), (0, 1)), jax.jit(jax.grad(loss(ours), (0, 1)))):
        for a, b in zip(grad(x, w), want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_pointwise_matches_lax_and_grouped_non_depthwise_falls_back():
    x = normal(0, (2, 5, 7, 8))
    w = normal(1, (1, 1, 8, 4))
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    ours = jax.jit(lambda x, w: depthwise.conv_general_dilated(x, w, (1, 1), "VALID",
                                                                 dimension_numbers=dn))
    ref = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=DN)
    np.testing.assert_allclose(ours(x, w), ref, rtol=1e-5, atol=1e-5)
    # groups=2 (not depthwise) goes to lax unchanged
    wg = normal(2, (3, 3, 4, 4))
    got = depthwise.conv_general_dilated(x, wg, (1, 1), "SAME", dimension_numbers=dn,
                                         feature_group_count=2)
    want = lax.conv_general_dilated(x, wg, (1, 1), "SAME", dimension_numbers=DN,
                                    feature_group_count=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cin, cout", [(8, 4), (4, 8), (6, 6)])
@pytest.mark.parametrize("hw", [(5, 7), (64, 64)])
def test_pointwise_gradients_match_lax_with_either_operand_order(cin, cout, hw):
    """The 1x1 kernel gradient of a large map (8,192 positions, jaxdet's kernels off) puts the
    narrower of x and the output gradient on the left, a small one x; each order (and the tie)
    gives lax's gradients, jitted and eager."""
    x = normal(0, (2, *hw, cin))
    w = normal(1, (1, 1, cin, cout))
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))

    def ours(x, w):
        return depthwise.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)

    def ref(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN)

    loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w))))  # noqa: E731
    want = jax.grad(loss(ref), (0, 1))(x, w)
    for grad in (jax.grad(loss(ours), (0, 1)), jax.jit(jax.grad(loss(ours), (0, 1)))):
        with trace.portable():
            got = grad(x, w)
        assert got[1].shape == (1, 1, cin, cout)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw", [(8, 10), (7, 9)])
@pytest.mark.parametrize("padding", ["SAME", "VALID", ((0, 0), (0, 0))])
def test_strided_pointwise_matches_lax_values_and_gradients(hw, padding):
    x = normal(0, (2, *hw, 6))
    w = normal(1, (1, 1, 6, 5))
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))

    def ours(x, w):
        return depthwise.conv_general_dilated(x, w, (2, 2), padding, dimension_numbers=dn)

    def ref(x, w):
        return lax.conv_general_dilated(x, w, (2, 2), padding, dimension_numbers=DN)

    assert ours(x, w).shape == ref(x, w).shape == (2, (hw[0] + 1) // 2, (hw[1] + 1) // 2, 5)
    np.testing.assert_allclose(ours(x, w), ref(x, w), rtol=1e-5, atol=1e-5)
    loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w))))  # noqa: E731
    for a, b in zip(jax.grad(loss(ours), (0, 1))(x, w), jax.grad(loss(ref), (0, 1))(x, w),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, padding, dilation, channels", [
    (2, "SAME", 1, 3), (2, ((0, 1), (0, 1)), 1, 3), (1, "VALID", 2, 4), (1, "SAME", 1, 1)])
@pytest.mark.slow
def test_image_convolution_as_patch_matmul_matches_lax(stride, padding, dilation, channels):
    """A 3x3 convolution of an image (<= 4 channels: MobileNet's and EfficientNet's stems) is
    a matmul of its patches on CPU, with lax's values and gradients; wider patches stay lax."""
    x = normal(0, (2, 11, 9, channels))
    w = normal(1, (3, 3, channels, 5))
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))

    def ours(x, w):
        return depthwise.conv_general_dilated(x, w, (stride, stride), padding,
                                              rhs_dilation=(dilation, dilation),
                                              dimension_numbers=dn)

    def ref(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), padding,
                                        rhs_dilation=(dilation, dilation), dimension_numbers=DN)

    assert "conv_general_dilated" not in str(jax.make_jaxpr(ours)(x, w))
    np.testing.assert_allclose(ours(x, w), ref(x, w), rtol=1e-5, atol=1e-5)
    loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w))))  # noqa: E731
    for a, b in zip(jax.grad(loss(ours), (0, 1))(x, w), jax.grad(loss(ref), (0, 1))(x, w),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    wide = normal(2, (7, 7, channels, 5))  # a 7x7 stem stays lax
    assert "conv_general_dilated" in str(jax.make_jaxpr(ours)(x, wide))
