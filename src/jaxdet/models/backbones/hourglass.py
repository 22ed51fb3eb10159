"""The stacked Hourglass network of the TF OD API's CenterNet (``hourglass_104``, and the
single-stack ``hourglass_10/20/32/52``), the CornerNet / CenterNet backbone; without its
downsampling stem (``initial_downsample=False``) also DeepMAC's mask network
(:func:`mask_network_spec`).

Layout (TF ``keras_models/hourglass_network.py``), NHWC throughout:

* stem: 7x7/2 conv + BN + ReLU to ``stem_channels``, then a stride-2 residual block to
  ``channels[0]``: stride 4. Without ``initial_downsample`` (TF's ``InputConvBlock``): a
  3x3/1 conv + BN + ReLU and a stride-1 residual block with a 1x1 conv skip: stride 1.
* ``num_stacks`` hourglasses, each an encoder-decoder over ``len(channels) - 1`` stages: at
  each stage a full-resolution branch (``blocks[0]`` residual blocks at ``channels[0]``) and
  a branch that downsamples with a stride-2 residual block to ``channels[1]``, recurses on
  ``channels[1:]`` / ``blocks[1:]`` (the innermost stage: ``blocks[-1]`` blocks), decodes
  back to ``channels[0]`` and upsamples 2x (nearest); the two branches are added.
* after each hourglass a 3x3 conv + BN + ReLU (the stack's output). Between stacks:
  ``relu(BN(1x1(stack input)) + BN(1x1(stack output)))`` -> residual block -> next stack.

Every conv has no bias and is followed by BatchNorm (TF: epsilon 1e-5 and Keras
``momentum=0.1``, i.e. jaxdet ``batch_norm.momentum: 0.1``: the running statistics move 90% of
the way to each batch's, PyTorch's convention carried over). Padding is symmetric (TF pads
``k // 2`` explicitly, then a VALID conv), so an input must divide by
``4 * 2**(len(channels) - 1)`` (128 for Hourglass-104) for the branches to line up.

A residual block: ``relu(BN(conv3x3(relu(BN(conv3x3/s(x))))) + skip(x))`` with ``skip`` a
1x1/s conv + BN when the stride or the width changes, else the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models.layers import BatchNormParams, conv
from jaxdet.models.layers import batch_norm as make_batch_norm


@dataclass(frozen=True)
class HourglassSpec:
    """One Hourglass network: ``channels`` / ``blocks`` per encoder-decoder stage (outermost
    first, one more entry than stages), the stem conv's width and the number of stacks."""

    stem_channels: int
    channels: tuple[int, ...]
    blocks: tuple[int, ...]
    num_stacks: int


# TF OD API CenterNet feature extractors (center_net_hourglass_feature_extractor.py).
HOURGLASS_SPECS: dict[str, HourglassSpec] = {
    "hourglass_10": HourglassSpec(32, (64, 64), (1, 1), 1),
    "hourglass_20": HourglassSpec(48, (96, 96, 144), (1, 2, 2), 1),
    "hourglass_32": HourglassSpec(48, (96, 96, 144, 144), (2, 2, 2, 2), 1),
    "hourglass_52": HourglassSpec(64, (128, 128, 192, 192, 192, 256), (2, 2, 2, 2, 2, 4), 1),
    "hourglass_104": HourglassSpec(128, (256, 256, 384, 384, 384, 512), (2, 2, 2, 2, 2, 4), 2),
}

# DeepMAC's mask networks (TF ``hourglass_network.hourglass_10/20/32/52/100`` with
# ``num_channels``): channels as multiples of ``num_channels``, residual blocks per stage.
MASK_NETWORKS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "hourglass10": ((2, 2), (1, 1)),
    "hourglass20": ((2, 2, 3), (1, 2, 2)),
    "hourglass32": ((2, 2, 3, 3), (2, 2, 2, 2)),
    "hourglass52": ((2, 2, 3, 3, 3, 4), (2, 2, 2, 2, 2, 4)),
    "hourglass100": ((2, 2, 3, 3, 3, 4), (4, 4, 4, 4, 4, 8)),
}


def mask_network_spec(name: str, num_channels: int) -> HourglassSpec:
    """The single-stack hourglass of DeepMAC's ``network_type`` ``name`` (a key of
    :data:`MASK_NETWORKS`) whose stem is ``num_channels`` wide (TF ``num_init_channels``)."""
    if name not in MASK_NETWORKS:
        raise ValueError(f"unknown DeepMAC mask network {name!r}; expected one of "
                         f"{', '.join(MASK_NETWORKS)}")
    widths, blocks = MASK_NETWORKS[name]
    return HourglassSpec(num_channels, tuple(w * num_channels for w in widths), blocks, 1)


class ConvBlock(nnx.Module):
    """conv (no bias, symmetric ``k // 2`` padding) -> BN (-> ReLU when ``relu``)."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int = 1, *,
                 relu: bool = True, bn: BatchNormParams, dtype, rngs: nnx.Rngs):
        self.conv = conv(in_ch, out_ch, kernel, stride, dtype=dtype, rngs=rngs)
        self.norm = make_batch_norm(out_ch, bn, dtype, rngs)
        self.relu = relu

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.norm(self.conv(x))
        return jax.nn.relu(x) if self.relu else x


class Residual(nnx.Module):
    """3x3/``stride`` conv block -> 3x3 conv + BN, plus the skip (1x1/``stride`` conv + BN
    when ``stride > 1``, the width changes or ``force_skip``), then ReLU."""

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1, *, bn: BatchNormParams,
                 dtype, rngs: nnx.Rngs, force_skip: bool = False):
        self.conv_block = ConvBlock(in_ch, out_ch, 3, stride, bn=bn, dtype=dtype, rngs=rngs)
        self.conv = conv(out_ch, out_ch, 3, dtype=dtype, rngs=rngs)
        self.norm = make_batch_norm(out_ch, bn, dtype, rngs)
        self.skip = (ConvBlock(in_ch, out_ch, 1, stride, relu=False, bn=bn, dtype=dtype,
                               rngs=rngs) if stride > 1 or in_ch != out_ch or force_skip
                     else None)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.norm(self.conv(self.conv_block(x)))
        return jax.nn.relu(y + (x if self.skip is None else self.skip(x)))


def _residuals(in_ch: int, out_ch: int, n: int, stride: int = 1, *, mid_ch: int | None = None,
               bn: BatchNormParams, dtype, rngs: nnx.Rngs) -> nnx.List:
    """``n`` residual blocks ``in_ch -> mid_ch -> ... -> mid_ch -> out_ch`` (``mid_ch``
    defaults to ``out_ch``), the first with ``stride`` (TF ``_make_repeated_residual_blocks``)."""
    mid_ch = out_ch if mid_ch is None else mid_ch
    widths = [in_ch] + [mid_ch] * (n - 1) + [out_ch]
    return nnx.List([Residual(widths[i], widths[i + 1], stride if i == 0 else 1, bn=bn,
                              dtype=dtype, rngs=rngs) for i in range(n)])


def _run(blocks, x: jax.Array) -> jax.Array:
    for block in blocks:
        x = block(x)
    return x


def upsample2x(x: jax.Array) -> jax.Array:
    """Nearest-neighbour 2x upsampling [B, H, W, C] -> [B, 2H, 2W, C] (Keras UpSampling2D)."""
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


class EncoderDecoder(nnx.Module):
    """One hourglass stage (recursive): ``skip(x) + upsample2x(decode(inner(down(x))))`` at
    ``channels[0]`` in and out; ``inner`` is the next stage, or residual blocks at the
    innermost one."""

    def __init__(self, channels: tuple[int, ...], blocks: tuple[int, ...], *,
                 bn: BatchNormParams, dtype, rngs: nnx.Rngs):
        outer, inner = channels[0], channels[1]
        kw = {"bn": bn, "dtype": dtype, "rngs": rngs}
        self.skip = _residuals(outer, outer, blocks[0], **kw)
        self.down = _residuals(outer, inner, blocks[0], 2, **kw)
        if len(channels) > 2:
            self.inner = EncoderDecoder(channels[1:], blocks[1:], **kw)
        else:
            self.inner = _residuals(inner, inner, blocks[1], **kw)
        self.decode = _residuals(inner, outer, blocks[0], mid_ch=inner, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = _run(self.down, x)
        y = self.inner(y) if isinstance(self.inner, EncoderDecoder) else _run(self.inner, y)
        return _run(self.skip, x) + upsample2x(_run(self.decode, y))


class Hourglass(nnx.Module):
    """``__call__(x [B, H, W, 3]) -> {2: [B, H/4, W/4, channels[0]]}``, the last stack's
    output; ``out_channels = {2: channels[0]}`` (256 for Hourglass-104). With
    ``initial_downsample=False`` the input has ``in_channels`` channels and the outputs keep
    its H x W (``out_channels = {0: channels[0]}``; DeepMAC's mask network).

    :meth:`stack_outputs` returns every stack's output (TF's CenterNet applies its heads to each
    of them in training and averages the losses; it predicts from the last). The intermediate
    one also feeds the next stack, so every parameter takes part in ``__call__``.
    """

    def __init__(self, spec: HourglassSpec, *, batch_norm: BatchNormParams, dtype=None,
                 in_channels: int = 3, initial_downsample: bool = True, rngs: nnx.Rngs):
        if len(spec.channels) != len(spec.blocks) or len(spec.channels) < 2:
            raise ValueError(f"an hourglass needs as many channels as blocks (>= 2), got "
                             f"{spec.channels} and {spec.blocks}")
        kw = {"bn": batch_norm, "dtype": dtype, "rngs": rngs}
        width = spec.channels[0]
        self.spec = spec
        stride = 2 if initial_downsample else 1
        self.stem = ConvBlock(in_channels, spec.stem_channels, 7 if initial_downsample else 3,
                              stride, **kw)
        self.stem_residual = Residual(spec.stem_channels, width, stride, force_skip=True, **kw)
        self.hourglasses = nnx.List([EncoderDecoder(spec.channels, spec.blocks, **kw)
                                     for _ in range(spec.num_stacks)])
        self.output_convs = nnx.List([ConvBlock(width, width, 3, **kw)
                                      for _ in range(spec.num_stacks)])
        n = spec.num_stacks - 1
        self.inter_inputs = nnx.List([ConvBlock(width, width, 1, relu=False, **kw)
                                      for _ in range(n)])
        self.inter_outputs = nnx.List([ConvBlock(width, width, 1, relu=False, **kw)
                                       for _ in range(n)])
        self.inter_residuals = nnx.List([Residual(width, width, **kw) for _ in range(n)])
        self.out_channels = {2 if initial_downsample else 0: width}
        self.divisor = stride * stride * 2 ** (len(spec.channels) - 1)

    def stack_outputs(self, x: jax.Array) -> list[jax.Array]:
        """Every stack's output, [B, H/4, W/4, channels[0]] each, first stack first."""
        h, w = x.shape[1:3]
        if h % self.divisor or w % self.divisor:
            raise ValueError(f"this hourglass needs an input whose height and width divide by "
                             f"{self.divisor}, got {h}x{w}")
        x = self.stem_residual(self.stem(x))
        outputs = []
        for i, (hourglass, output_conv) in enumerate(zip(self.hourglasses, self.output_convs,
                                                         strict=True)):
            out = output_conv(hourglass(x))
            outputs.append(out)
            if i < len(self.inter_residuals):
                merged = jax.nn.relu(self.inter_inputs[i](x) + self.inter_outputs[i](out))
                x = self.inter_residuals[i](merged)
        return outputs

    def __call__(self, x: jax.Array) -> dict[int, jax.Array]:
        (level,) = self.out_channels
        return {level: self.stack_outputs(x)[-1]}
