"""The Cloud TPU reference's 3D U-Net (tensorflow/tpu ``models/official/unet3d``, the Keras TF2
version of the spatial-partitioning reference, 128^3 configuration), NDHWC.

Its configuration: 128^3 x 1 patches, 3 classes, ``depth: 4``, ``num_base_filters: 32``,
``deconvolution: True``, ``use_batch_norm: True``, bfloat16, batch 8, Adam from 0.1 decayed
by 0.5 every 100 steps (not staircase), loss ``adaptive_dice32``
(``tasks.unet3d.segmentation.adaptive_dice_loss``). Its ``dropout`` and ``num_segmentation_levels``
settings are not used by the Keras model, so they have no counterpart here.

The network, for ``filters`` = (f0, f1, f2, f3) (the reference: 32, 64, 128, 256, i.e.
``num_base_filters * 2 ** l``):

* encoder level l: :class:`ConvBNReLU` (-> f_l) then :class:`ConvBNReLU` (-> 2 f_l); its
  output is level l's skip; between levels a 2x2x2 stride-2 max pool of it;
* decoder level l = L-2 .. 0: a 2x2x2 stride-2 transposed convolution with bias that keeps
  its input's width (2 f_{l+1}), concatenation [upsampled, skip] (upsampled first), two
  :class:`ConvBNReLU` of the skip's width 2 f_l;
* ``output``: 1x1x1 convolution with bias, 2 f0 -> ``num_classes`` logits (the reference
  applies a softmax in the model; here the task does, as for the MLPerf network).

Widths of the reference: 1 -> 32 -> 64 | 64 -> 128 | 128 -> 256 | 256 -> 512; decoder
512 (up) + 256 -> 256 -> 256; 256 + 128 -> 128 -> 128; 128 + 64 -> 64 -> 64; -> 3
(:func:`tpu_reference_parameter_count`: 19,073,795 parameters with 1 input channel and 3
classes, plus 4,672 BatchNorm running statistics).

A :class:`ConvBNReLU` is a 3x3x3 convolution with bias (SAME: padding 1), BatchNorm
(``models.layers.BatchNorm``: statistics over batch, depth, height and width per channel in
training, the running averages in eval mode; Keras' momentum 0.99, epsilon 1e-3, learned scale
and offset) and ReLU (leaky with ``negative_slope`` > 0). Kernels are Glorot-uniform, biases
zero (Keras' Conv3D / Conv3DTranspose defaults). The reference writes
``BatchNormalization(axis=1)`` on channels-last tensors, so it normalizes over the *depth*
axis (one statistic per depth row, over batch, height, width and channels): a slip, not a
design. This module normalizes over the channels, as the reference meant; its checkpoints
would not load here anyway (different norm parameter shapes).

Spatial partitioning as :class:`tasks.unet3d.model.UNet3D`: every convolution's output goes
through ``parallel.mesh.gather_thin_sides``; the transposed convolution is computed as a
per-voxel matmul (``model.upsample_2x``); max pooling is a reshape and a max over each
2x2x2 block (no window op for the partitioner to gather around); BatchNorm statistics over a
mesh are those of the global batch (GSPMD all-reduces the per-channel sums).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models import initializers
from jaxdet.models.layers import BatchNorm
from jaxdet.parallel.mesh import gather_thin_sides
from jaxdet.tasks.unet3d.model import check_input_sides, checked_levels, upsample_2x

# Keras' Conv3D / Conv3DTranspose default: Glorot uniform over fan_in + fan_out (symmetric, so
# the transposed kernel's (kd, kh, kw, in, out) layout gives Keras' numbers too)
glorot_uniform = initializers.glorot_uniform()
zeros = initializers.zeros_init()


def max_pool_2x(x: jax.Array) -> jax.Array:
    """2x2x2 max pool, stride 2, VALID: [B, D, H, W, C] -> [B, D/2, H/2, W/2, C] (even sides)."""
    b, d, h, w, c = x.shape
    return jnp.max(x.reshape(b, d // 2, 2, h // 2, 2, w // 2, 2, c), axis=(2, 4, 6))


class ConvBNReLU(nnx.Module):
    """3x3x3 conv (stride 1, SAME, bias) -> BatchNorm -> ReLU:
    [B, D, H, W, in] -> [B, D, H, W, out]."""

    def __init__(self, in_channels: int, out_channels: int, *, momentum: float = 0.99,
                 epsilon: float = 1e-3, negative_slope: float = 0.0, dtype=None,
                 conv_fn: Callable = jax.lax.conv_general_dilated, rngs: nnx.Rngs):
        self.conv = nnx.Conv(in_channels, out_channels, (3, 3, 3), padding=((1, 1),) * 3,
                             use_bias=True, dtype=dtype, kernel_init=glorot_uniform,
                             bias_init=zeros, conv_general_dilated=conv_fn, rngs=rngs)
        self.norm = BatchNorm(out_channels, momentum=momentum, epsilon=epsilon, dtype=dtype,
                              rngs=rngs)
        self.negative_slope = negative_slope

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.norm(gather_thin_sides(self.conv(x)))
        return jax.nn.relu(y) if self.negative_slope == 0 else jax.nn.leaky_relu(
            y, self.negative_slope)


class EncoderLevel(nnx.Module):
    """``ConvBNReLU(in, f)`` then ``ConvBNReLU(f, 2 f)``: [..., in] -> [..., 2 f]."""

    def __init__(self, in_channels: int, filters: int, **kw):
        self.conv1 = ConvBNReLU(in_channels, filters, **kw)
        self.conv2 = ConvBNReLU(filters, 2 * filters, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv2(self.conv1(x))


class DecoderLevel(nnx.Module):
    """2x2x2 stride-2 transposed conv (in -> in, bias), concatenate the skip ([..., out]),
    ``ConvBNReLU(in + out, out)``, ``ConvBNReLU(out, out)``:
    ([B, D, H, W, in], [B, 2D, 2H, 2W, out]) -> [B, 2D, 2H, 2W, out]."""

    def __init__(self, in_channels: int, out_channels: int, *, dtype=None, rngs: nnx.Rngs,
                 **kw):
        self.upsample_conv = nnx.ConvTranspose(in_channels, in_channels, (2, 2, 2), strides=2,
                                               padding="VALID", use_bias=True, dtype=dtype,
                                               kernel_init=glorot_uniform, bias_init=zeros,
                                               rngs=rngs)
        self.conv1 = ConvBNReLU(in_channels + out_channels, out_channels, dtype=dtype,
                                rngs=rngs, **kw)
        self.conv2 = ConvBNReLU(out_channels, out_channels, dtype=dtype, rngs=rngs, **kw)

    def __call__(self, x: jax.Array, skip: jax.Array) -> jax.Array:
        x = gather_thin_sides(upsample_2x(self.upsample_conv, x))
        return self.conv2(self.conv1(jnp.concatenate([x, skip.astype(x.dtype)], axis=-1)))


class TPUReferenceUNet3D(nnx.Module):
    """``__call__(volumes f[B, D, H, W, in_channels]) -> logits [B, D, H, W, num_classes]``
    (see the module docstring; ``filters``: the first convolution's width of each level, at
    least 2 levels; every side must divide by :attr:`max_stride`). Has BatchNorm: build it in
    train mode (nnx's default) and call ``.eval()`` for the running statistics."""

    def __init__(self, in_channels: int, num_classes: int,
                 filters: Sequence[int] = (32, 64, 128, 256), *, momentum: float = 0.99,
                 epsilon: float = 1e-3, negative_slope: float = 0.0, dtype=None,
                 conv_lowering: str = "native", rngs: nnx.Rngs):
        f, conv_fn = checked_levels(filters, conv_lowering)
        kw = {"momentum": momentum, "epsilon": epsilon, "negative_slope": negative_slope,
              "dtype": dtype, "conv_fn": conv_fn, "rngs": rngs}
        self.filters = f
        self.encoder = nnx.List([EncoderLevel(in_channels if i == 0 else 2 * f[i - 1], f[i],
                                              **kw) for i in range(len(f))])
        self.decoder = nnx.List([DecoderLevel(2 * f[i + 1], 2 * f[i], **kw)
                                 for i in range(len(f) - 2, -1, -1)])
        self.output = nnx.Conv(2 * f[0], num_classes, (1, 1, 1), use_bias=True, dtype=dtype,
                               kernel_init=glorot_uniform, bias_init=zeros,
                               conv_general_dilated=conv_fn, rngs=rngs)

    @property
    def max_stride(self) -> int:
        """2 ** (levels - 1): every input side must divide by it."""
        return 2 ** (len(self.filters) - 1)

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        check_input_sides(x, len(self.filters))
        skips = []
        for i, level in enumerate(self.encoder):
            if i:
                x = max_pool_2x(x)
            x = level(x)
            skips.append(x)
        for level, skip in zip(self.decoder, reversed(skips[:-1]), strict=True):
            x = level(x, skip)
        return self.output(x)


def tpu_reference_parameter_count(in_channels: int, num_classes: int,
                                  filters: Sequence[int]) -> int:
    """The parameters of :class:`TPUReferenceUNet3D` in closed form (BatchNorm's running mean
    and variance, 2 per channel, are ``batch_stats`` and not counted): per
    :class:`ConvBNReLU` 27 in out + out (kernel,
    bias) + 2 out (scale, offset); per decoder level l the transposed conv 8 c^2 + c
    (c = 2 f_{l+1}) and blocks (c + 2 f_l -> 2 f_l), (2 f_l -> 2 f_l); the output conv
    2 f0 K + K."""
    f = list(filters)

    def block(cin: int, cout: int) -> int:
        return 27 * cin * cout + 3 * cout

    total = 0
    for i, fi in enumerate(f):
        cin = in_channels if i == 0 else 2 * f[i - 1]
        total += block(cin, fi) + block(fi, 2 * fi)
    for i in range(len(f) - 1):
        c, out = 2 * f[i + 1], 2 * f[i]
        total += 8 * c * c + c + block(c + out, out) + block(out, out)
    return total + 2 * f[0] * num_classes + num_classes


__all__ = ["ConvBNReLU", "DecoderLevel", "EncoderLevel", "TPUReferenceUNet3D", "max_pool_2x",
           "tpu_reference_parameter_count"]
