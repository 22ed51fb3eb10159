"""The 3D U-Net of the MLPerf training reference (image_segmentation, KiTS19), NDHWC.

Levels ``0..L-1`` of widths ``filters`` (MLPerf: 32, 64, 128, 256, 320, 320; the last level
is the bottleneck). Module names follow the reference's (``input_block``, ``downsample``,
``bottleneck``, ``upsample``, ``output``) so that its PyTorch weights can be mapped by name:

* ``input_block``: two :class:`ConvBlock` (in_channels -> f0 -> f0);
* ``downsample[i]`` (levels 1..L-2) and ``bottleneck`` (level L-1): a stride-2 3x3x3
  :class:`ConvBlock` (f[l-1] -> f[l]) then a stride-1 one (f[l] -> f[l]);
* ``upsample[j]`` (from level L-1-j to L-2-j): a 2x2x2 stride-2 transposed convolution with
  bias (f[l] -> f[l-1]), concatenation with the encoder map of level l-1 (upsampled first,
  skip second, as the reference's ``torch.cat((x, skip))``), two :class:`ConvBlock`
  (2 f[l-1] -> f[l-1] -> f[l-1]);
* ``output``: 1x1x1 convolution with bias, f0 -> num_classes logits.

A :class:`ConvBlock` is a 3x3x3 convolution without bias (padding 1), instance norm with a
learned scale and offset (statistics per example and channel over D, H, W; epsilon 1e-5,
PyTorch's), leaky ReLU (slope 0.01). Convolution kernels are initialised as PyTorch's default
(uniform, bound 1 / sqrt(fan_in)), biases at zero. The input's sides must divide by
``2 ** (L - 1)``. No BatchNorm: the model has no ``batch_stats``.

Spatial partitioning (``parallel.spatial_axes``, a volume split along D, H and / or W over the
mesh axes ``spatial``, ``spatial_1``, ``spatial_2``): XLA's partitioner exchanges the 3x3x3
halos (collective-permute) and all-reduces the instance-norm statistics. Two things keep the
large activations from being all-gathered: the transposed convolutions are computed as per-voxel
matmuls (:func:`upsample_2x`), and maps with fewer than ``MIN_ROWS_PER_SHARD`` (2) rows per
shard along a split side are gathered whole along it on purpose
(``parallel.mesh.gather_thin_sides``, applied to every convolution's output; the rule
``parallel.mesh.check_volume_layout`` enforces). Such thin maps are the deepest, smallest
ones. Left split, a map with fewer rows than shards miscompiles (jax 0.10.2, XLA:CPU): a 16^3
patch on a 1 x 8 (depth) mesh, whose 4-row bottleneck lies over 8 shards, gets the bottleneck
convolution's kernel gradient off by 2e-4 relative while the loss is right
(``tests/parallel/test_unet3d_mesh.py`` keeps the case). Exactly one row per shard was exact
here, but is where the detectors' 2D miscompile shows (``models.thin_maps``), so the same
margin of 2 rows is kept. XLA gathers the input of the stride-2 convolution into the first
thin level (the last split level's map, still small: for a 128^3 patch on 8 depth shards,
level 3's 16^3 x 256) rather than that convolution's output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.backends import dispatch
from jaxdet.models import initializers
from jaxdet.parallel.mesh import gather_thin_sides

# How 3D convolutions are computed (same parameters, same numbers up to summation order):
# XLA's own 3D convolution, or as 2D ones with the depth taps stacked as channels, about 10x
# faster on XLA:CPU (``backends.dispatch.CONV3D_LOWERINGS``).
CONV_LOWERINGS: dict[str, Callable] = dispatch.CONV3D_LOWERINGS

# PyTorch's default Conv3d initialisation: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in))
torch_default_init = initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
zeros, ones = initializers.zeros_init(), initializers.ones_init()


class ConvBlock(nnx.Module):
    """3x3x3 conv (``stride``, padding 1, no bias) -> instance norm (affine) -> leaky ReLU:
    [B, D, H, W, in] -> [B, D / stride, H / stride, W / stride, out]."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1,
                 negative_slope: float = 0.01, epsilon: float = 1e-5, dtype=None,
                 conv_fn: Callable = jax.lax.conv_general_dilated, rngs: nnx.Rngs):
        self.conv = nnx.Conv(in_channels, out_channels, (3, 3, 3), strides=stride,
                             padding=((1, 1),) * 3, use_bias=False, dtype=dtype,
                             kernel_init=torch_default_init, conv_general_dilated=conv_fn,
                             rngs=rngs)
        self.norm = nnx.InstanceNorm(out_channels, epsilon=epsilon, dtype=dtype,
                                     use_fast_variance=False, scale_init=ones,
                                     bias_init=zeros, rngs=rngs)
        self.negative_slope = negative_slope

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.leaky_relu(self.norm(gather_thin_sides(self.conv(x))), self.negative_slope)


class Level(nnx.Module):
    """An encoder level: ``ConvBlock(in, out, stride)`` then ``ConvBlock(out, out)``."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int,
                 negative_slope: float, epsilon: float, dtype=None,
                 conv_fn: Callable = jax.lax.conv_general_dilated, rngs: nnx.Rngs):
        kw = {"negative_slope": negative_slope, "epsilon": epsilon, "dtype": dtype,
              "conv_fn": conv_fn, "rngs": rngs}
        self.conv1 = ConvBlock(in_channels, out_channels, stride=stride, **kw)
        self.conv2 = ConvBlock(out_channels, out_channels, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv2(self.conv1(x))


def upsample_2x(conv: nnx.ConvTranspose, x: jax.Array) -> jax.Array:
    """``conv(x)`` for a 2x2x2, stride-2, VALID transposed convolution, computed as one
    per-voxel matmul: [B, D, H, W, in] -> [B, 2D, 2H, 2W, out].

    With kernel = stride the output blocks do not overlap: voxel (d, h, w) alone makes the
    2x2x2 block at (2d, 2h, 2w), through the kernel flipped as ``lax.conv_transpose`` uses it.
    Written as an einsum and a reshape, the spatially split forward and backward need no
    communication but the kernel gradient's all-reduce; XLA's SPMD partitioner (jax 0.10)
    all-gathers both the whole input and the whole output cotangent to compute the kernel
    gradient of the equivalent dilated convolution. Same parameters, same result.
    """
    kernel = conv.kernel[...][::-1, ::-1, ::-1]
    bias = conv.bias[...] if conv.bias is not None else None
    x, kernel, bias = conv.promote_dtype((x, kernel, bias), dtype=conv.dtype)
    y = jnp.einsum("bdhwc,ijkco->bdihjwko", x, kernel)
    b, d, _, h, _, w, _, out = y.shape
    y = y.reshape(b, 2 * d, 2 * h, 2 * w, out)
    return y if bias is None else y + bias


class UpLevel(nnx.Module):
    """A decoder level: 2x2x2 stride-2 transposed conv (in -> out, bias), concatenate the
    skip ([..., out]), ``ConvBlock(2 out, out)``, ``ConvBlock(out, out)``."""

    def __init__(self, in_channels: int, out_channels: int, *, negative_slope: float,
                 epsilon: float, dtype=None, conv_fn: Callable = jax.lax.conv_general_dilated,
                 rngs: nnx.Rngs):
        self.upsample_conv = nnx.ConvTranspose(in_channels, out_channels, (2, 2, 2),
                                               strides=2, padding="VALID", use_bias=True,
                                               dtype=dtype, kernel_init=torch_default_init,
                                               bias_init=zeros, rngs=rngs)
        kw = {"negative_slope": negative_slope, "epsilon": epsilon, "dtype": dtype,
              "conv_fn": conv_fn, "rngs": rngs}
        self.conv1 = ConvBlock(2 * out_channels, out_channels, **kw)
        self.conv2 = ConvBlock(out_channels, out_channels, **kw)

    def __call__(self, x: jax.Array, skip: jax.Array) -> jax.Array:
        x = gather_thin_sides(upsample_2x(self.upsample_conv, x))
        return self.conv2(self.conv1(jnp.concatenate([x, skip.astype(x.dtype)], axis=-1)))


def checked_levels(filters: Sequence[int], conv_lowering: str
                   ) -> tuple[tuple[int, ...], Callable]:
    """(the level widths as ints, the convolution function of ``conv_lowering``); ValueError
    for fewer than 2 levels or an unknown lowering (naming the allowed ones)."""
    f = tuple(int(c) for c in filters)
    if len(f) < 2:
        raise ValueError(f"filters {list(f)}: a U-Net needs at least 2 levels")
    if conv_lowering not in CONV_LOWERINGS:
        raise ValueError(f"conv_lowering {conv_lowering!r}; allowed: "
                         f"{', '.join(CONV_LOWERINGS)}")
    return f, CONV_LOWERINGS[conv_lowering]


def check_input_sides(x: jax.Array, levels: int) -> None:
    """Raise ValueError unless every side of ``x`` [B, D, H, W, C] divides by
    2 ** (``levels`` - 1), the deepest level's stride."""
    stride = 2 ** (levels - 1)
    if any(s % stride for s in x.shape[1:4]):
        raise ValueError(f"input sides {list(x.shape[1:4])} must divide by {stride} "
                         f"({levels} levels)")


class UNet3D(nnx.Module):
    """``__call__(volumes f[B, D, H, W, in_channels]) -> logits [B, D, H, W, num_classes]``
    (see the module docstring; ``filters``: one width per level, at least 2 levels)."""

    def __init__(self, in_channels: int, num_classes: int,
                 filters: Sequence[int] = (32, 64, 128, 256, 320, 320), *,
                 negative_slope: float = 0.01, epsilon: float = 1e-5, dtype=None,
                 conv_lowering: str = "native", rngs: nnx.Rngs):
        f, conv_fn = checked_levels(filters, conv_lowering)
        kw = {"negative_slope": negative_slope, "epsilon": epsilon, "dtype": dtype,
              "conv_fn": conv_fn, "rngs": rngs}
        self.filters = f
        self.input_block = Level(in_channels, f[0], stride=1, **kw)
        self.downsample = nnx.List([Level(f[i - 1], f[i], stride=2, **kw)
                                    for i in range(1, len(f) - 1)])
        self.bottleneck = Level(f[-2], f[-1], stride=2, **kw)
        self.upsample = nnx.List([UpLevel(f[i], f[i - 1], **kw)
                                  for i in range(len(f) - 1, 0, -1)])
        self.output = nnx.Conv(f[0], num_classes, (1, 1, 1), use_bias=True, dtype=dtype,
                               kernel_init=torch_default_init, bias_init=zeros,
                               conv_general_dilated=conv_fn, rngs=rngs)

    @property
    def max_stride(self) -> int:
        """2 ** (levels - 1): every input side must divide by it."""
        return 2 ** (len(self.filters) - 1)

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        check_input_sides(x, len(self.filters))
        x = self.input_block(x)
        skips = [x]
        for level in self.downsample:
            x = level(x)
            skips.append(x)
        x = self.bottleneck(x)
        for level, skip in zip(self.upsample, reversed(skips), strict=True):
            x = level(x, skip)
        return self.output(x)


def unet3d_parameter_count(in_channels: int, num_classes: int, filters: Sequence[int]) -> int:
    """The parameters of :class:`UNet3D` in closed form: per :class:`ConvBlock` 27 in out
    (kernel) + 2 out (norm scale and offset); per decoder level also 8 in out + out (the
    transposed conv); the output conv f0 K + K."""
    f = list(filters)

    def block(cin: int, cout: int) -> int:
        return 27 * cin * cout + 2 * cout

    total = block(in_channels, f[0]) + block(f[0], f[0])
    for i in range(1, len(f)):
        total += block(f[i - 1], f[i]) + block(f[i], f[i])  # encoder level i
        total += 8 * f[i] * f[i - 1] + f[i - 1]  # transposed conv up to level i - 1
        total += block(2 * f[i - 1], f[i - 1]) + block(f[i - 1], f[i - 1])
    return total + f[0] * num_classes + num_classes


__all__ = ["ConvBlock", "Level", "UNet3D", "UpLevel", "check_input_sides", "checked_levels",
           "unet3d_parameter_count", "upsample_2x"]
