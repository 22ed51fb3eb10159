"""The 3D U-Net's rewritten operations equal the native ones: ``depth_stacked_conv`` =
``lax.conv_general_dilated`` (3x3x3 stride 1 and 2, padding 1; a 1x1x1; values and both
gradients) and ``model.upsample_2x`` = flax's ``ConvTranspose`` 2x2x2 stride 2 (VALID)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.backends.cpu.conv3d import depth_stacked_conv
from jaxdet.tasks.unet3d.model import upsample_2x

DIMS = ("NDHWC", "DHWIO", "NDHWC")


@pytest.mark.parametrize("kernel,stride,pad,shape", [
    (3, 1, 1, (2, 8, 6, 10, 3)), (3, 2, 1, (1, 8, 8, 6, 4)), (1, 1, 0, (2, 4, 4, 4, 5)),
    (3, 2, 1, (1, 7, 5, 9, 2)),
])
def test_depth_stacked_conv_equals_the_native_3d_conv(kernel, stride, pad, shape):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=shape), jnp.float32)
    w = jnp.asarray(rng.normal(size=(kernel,) * 3 + (shape[-1], 6)), jnp.float32)
    args = ((stride,) * 3, ((pad, pad),) * 3)

    def native(x, w):
        return jax.lax.conv_general_dilated(x, w, *args, dimension_numbers=DIMS)

    def ours(x, w):
        return depth_stacked_conv(x, w, *args, dimension_numbers=DIMS)

    np.testing.assert_allclose(ours(x, w), native(x, w), rtol=1e-5, atol=1e-5)

    def loss(f):
        return lambda x, w: jnp.sum(jnp.sin(f(x, w)))

    for a, b in zip(jax.grad(loss(ours), (0, 1))(x, w), jax.grad(loss(native), (0, 1))(x, w),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_inside_flax_conv_and_fallback():
    conv = nnx.Conv(3, 4, (3, 3, 3), padding=((1, 1),) * 3, rngs=nnx.Rngs(0))
    ours = nnx.Conv(3, 4, (3, 3, 3), padding=((1, 1),) * 3, rngs=nnx.Rngs(0),
                    conv_general_dilated=depth_stacked_conv)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 4, 6, 8, 3)), jnp.float32)
    np.testing.assert_allclose(ours(x), conv(x), rtol=1e-5, atol=1e-5)
    # a dilated conv is not rewritten: the native op's numbers exactly
    dilated = nnx.Conv(3, 4, (3, 3, 3), padding=((2, 2),) * 3, kernel_dilation=2,
                       rngs=nnx.Rngs(0), conv_general_dilated=depth_stacked_conv)
    reference = nnx.Conv(3, 4, (3, 3, 3), padding=((2, 2),) * 3, kernel_dilation=2,
                         rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(dilated(x), reference(x))


def test_upsample_equals_flax_conv_transpose():
    up = nnx.ConvTranspose(5, 3, (2, 2, 2), strides=2, padding="VALID", rngs=nnx.Rngs(2),
                           bias_init=nnx.initializers.normal(1.0))
    x = jnp.asarray(np.random.default_rng(3).normal(size=(2, 3, 4, 2, 5)), jnp.float32)
    expected = up(x)
    assert expected.shape == (2, 6, 8, 4, 3)
    np.testing.assert_allclose(upsample_2x(up, x), expected, rtol=1e-5, atol=1e-5)
    # by hand: output voxel (1, 2, 3) is input voxel (0, 1, 1) times kernel tap (0, 1, 0)
    # (flax reads the kernel mirrored: tap 1 - (1, 0, 1))
    np.testing.assert_allclose(expected[0, 1, 2, 3],
                               x[0, 0, 1, 1] @ up.kernel[...][0, 1, 0] + up.bias[...],
                               rtol=1e-5)
