"""EfficientNet B0-B7 backbones: the TF / automl EfficientNet as timm's ``tf_efficientnet_b*``
lays it out (TF ``SAME`` padding everywhere), without the head conv and classifier.

Levels and strides (B0 channels; wider variants scale them by ``width``):

======  ======  ===========================  ========
level   stride  end of                       B0 ch
======  ======  ===========================  ========
2       4       stage 1 (``blocks[1]``)      24
3       8       stage 2 (``blocks[2]``)      40
4       16      stage 4 (``blocks[4]``)      112
5       32      stage 6 (``blocks[6]``)      320
======  ======  ===========================  ========

Names follow timm so the torch name maps take its ``state_dict``
one-to-one: ``conv_stem, bn1, blocks[i][j]`` where stage 0 holds depthwise-separable blocks
(``conv_dw, bn1, se, conv_pw, bn2``) and the others MBConv blocks (``conv_pw, bn1, conv_dw,
bn2, se, conv_pwl, bn3``); ``se`` is ``conv_reduce, conv_expand``.

``last_stage_blocks=1`` ends level 5 after the first block of the last stage and builds no
more of it: the TF OD API's EfficientDet endpoint (its later blocks are never applied).
``level_blocks`` takes a level's map after a given block of its stage instead of its end, the
stage's later blocks still feeding the next stage: the TF OD API takes fixed layers
(``TF_LEVEL_BLOCKS``: level 2 ``stack_1/block_1``, 3 ``stack_2/block_1``, 4
``stack_4/block_2``, 5 ``stack_6/block_0``), the ends of B0's stages but inside B1-B7's
deeper ones.

Compound scaling: channels (stem included) are ``make_divisible(c * width, 8)``, repeats
``ceil(r * depth)``. Drop-connect (stochastic depth) on residual branches: block ``b`` of
``N`` (counted over all stages from 0) drops with rate ``drop_connect_rate * b / N``, the
automl and timm rule.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models import initializers, remat
from jaxdet.models.layers import ActivationName, BatchNormParams, activation, conv, make_divisible
from jaxdet.models.layers import batch_norm as make_batch_norm

# variant: (width coefficient, depth coefficient); automl ``efficientnet_params``.
VARIANTS: dict[str, tuple[float, float]] = {
    "b0": (1.0, 1.0),
    "b1": (1.0, 1.1),
    "b2": (1.1, 1.2),
    "b3": (1.2, 1.4),
    "b4": (1.4, 1.8),
    "b5": (1.6, 2.2),
    "b6": (1.8, 2.6),
    "b7": (2.0, 3.1),
}
# (expansion, kernel, first stride, out channels, repeats) per stage, before scaling.
STAGES = (
    (1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1),
)
STEM_CHANNELS = 32
SE_RATIO = 0.25
# The block of its stage after which the TF OD API's EfficientDet takes each level's map.
TF_LEVEL_BLOCKS = {2: 1, 3: 1, 4: 2, 5: 0}
# Which stage (index into ``blocks``) ends each level.
LEVEL_STAGE = {2: 1, 3: 2, 4: 4, 5: 6}

# TF's official EfficientNet conv init: Keras VarianceScaling(2.0, fan_out, "normal"), which
# Keras draws as a truncated normal rescaled to variance 2 / fan_out, fan_out = kh * kw *
# out_channels / groups. For an HWIO depthwise kernel (kh, kw, 1, C) that is flax's fan_in.
_conv_init = initializers.variance_scaling(2.0, "fan_out", "truncated_normal")
_depthwise_init = initializers.variance_scaling(2.0, "fan_in", "truncated_normal")


def drop_connect(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
    """Keep each sample of ``x`` [B, ...] with probability ``1 - rate`` and scale the kept ones
    by ``1 / (1 - rate)`` (zero the others): stochastic depth on a residual branch."""
    keep_prob = 1.0 - rate
    keep = jax.random.bernoulli(key, keep_prob, (x.shape[0],) + (1,) * (x.ndim - 1))
    return x * (keep.astype(x.dtype) / jnp.asarray(keep_prob, x.dtype))


class SqueezeExcite(nnx.Module):
    """Global mean -> 1x1 conv (bias) -> activation -> 1x1 conv (bias) -> sigmoid gate,
    multiplied into ``x`` [B, H, W, C]. Attributes: ``conv_reduce``, ``conv_expand``."""

    def __init__(
        self, channels: int, reduced: int, *, activation_name: ActivationName, dtype, rngs
    ):
        self.conv_reduce = conv(channels, reduced, 1, use_bias=True, padding="same",
                                kernel_init=_conv_init, dtype=dtype, rngs=rngs)
        self.conv_expand = conv(reduced, channels, 1, use_bias=True, padding="same",
                                kernel_init=_conv_init, dtype=dtype, rngs=rngs)
        self.act = activation(activation_name)

    def __call__(self, x: jax.Array) -> jax.Array:
        s = jnp.mean(x, axis=(1, 2), keepdims=True, dtype=jnp.float32).astype(x.dtype)
        s = self.conv_expand(self.act(self.conv_reduce(s)))
        return x * jax.nn.sigmoid(s)


class _Block(nnx.Module):
    """Shared residual + drop-connect logic. ``deterministic`` is flipped by
    ``model.train()`` / ``model.eval()``; blocks are built in train mode."""

    has_skip: bool
    drop_rate: float
    deterministic: bool

    def _init_residual(self, in_ch: int, out_ch: int, stride: int, drop_rate: float) -> None:
        self.has_skip = stride == 1 and in_ch == out_ch
        self.drop_rate = float(drop_rate)
        self.deterministic = False

    def _residual(self, y: jax.Array, x: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        if not self.has_skip:
            return y
        if self.drop_rate > 0.0 and not self.deterministic and rngs is not None:
            y = drop_connect(y, self.drop_rate, rngs.dropout())
        return y + x


class DepthwiseSeparable(_Block):
    """depthwise kxk -> BN -> act -> SE -> pointwise 1x1 -> BN (no activation); residual when
    stride 1 and channels match. timm ``DepthwiseSeparableConv`` (EfficientNet stage 0)."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel: int, stride: int, *, drop_rate: float,
        bn_params: BatchNormParams, activation_name: ActivationName, dtype, rngs: nnx.Rngs,
    ):
        self.conv_dw = conv(in_ch, in_ch, kernel, stride, groups=in_ch, padding="same",
                            kernel_init=_depthwise_init, dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(in_ch, bn_params, dtype, rngs)
        self.se = SqueezeExcite(in_ch, max(1, int(in_ch * SE_RATIO)),
                                activation_name=activation_name, dtype=dtype, rngs=rngs)
        self.conv_pw = conv(in_ch, out_ch, 1, padding="same", kernel_init=_conv_init,
                            dtype=dtype, rngs=rngs)
        self.bn2 = make_batch_norm(out_ch, bn_params, dtype, rngs)
        self.act = activation(activation_name)
        self._init_residual(in_ch, out_ch, stride, drop_rate)

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        y = self.se(self.act(self.bn1(self.conv_dw(x))))
        y = self.bn2(self.conv_pw(y))
        return self._residual(y, x, rngs)


class MBConv(_Block):
    """1x1 expand -> BN -> act -> depthwise kxk (stride) -> BN -> act -> SE -> 1x1 project ->
    BN; residual when stride 1 and channels match. timm ``InvertedResidual``. The SE reduces
    to ``max(1, int(in_ch * 0.25))`` channels (of the block input, as automl)."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel: int, stride: int, expansion: int, *,
        drop_rate: float, bn_params: BatchNormParams, activation_name: ActivationName, dtype,
        rngs: nnx.Rngs,
    ):
        mid = make_divisible(in_ch * expansion)
        self.conv_pw = conv(in_ch, mid, 1, padding="same", kernel_init=_conv_init,
                            dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(mid, bn_params, dtype, rngs)
        self.conv_dw = conv(mid, mid, kernel, stride, groups=mid, padding="same",
                            kernel_init=_depthwise_init, dtype=dtype, rngs=rngs)
        self.bn2 = make_batch_norm(mid, bn_params, dtype, rngs)
        self.se = SqueezeExcite(mid, max(1, int(in_ch * SE_RATIO)),
                                activation_name=activation_name, dtype=dtype, rngs=rngs)
        self.conv_pwl = conv(mid, out_ch, 1, padding="same", kernel_init=_conv_init,
                             dtype=dtype, rngs=rngs)
        self.bn3 = make_batch_norm(out_ch, bn_params, dtype, rngs)
        self.act = activation(activation_name)
        self._init_residual(in_ch, out_ch, stride, drop_rate)

    def __call__(self, x: jax.Array, *, rngs: nnx.Rngs | None = None) -> jax.Array:
        y = self.act(self.bn1(self.conv_pw(x)))
        y = self.se(self.act(self.bn2(self.conv_dw(y))))
        y = self.bn3(self.conv_pwl(y))
        return self._residual(y, x, rngs)


def stage_repeats(variant: str) -> tuple[int, ...]:
    """Blocks per stage after depth scaling (B0: 1, 2, 2, 3, 3, 4, 1)."""
    _, depth = _coefficients(variant)
    return tuple(int(math.ceil(r * depth)) for *_, r in STAGES)


def _coefficients(variant: str) -> tuple[float, float]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ValueError(
            f"unknown EfficientNet variant {variant!r}; expected one of {sorted(VARIANTS)}"
        ) from None


class EfficientNet(nnx.Module):
    """EfficientNet-``variant`` backbone (timm ``tf_efficientnet_<variant>`` names, no head).

    ``__call__(x [B, H, W, 3], *, rngs=None) -> {level: [B, ceil(H / 2**level),
    ceil(W / 2**level), out_channels[level]]}`` for levels 2..5 (see the module docstring).
    Drop-connect applies only to blocks in train mode *and* when ``rngs`` is given (its
    ``dropout`` stream); otherwise the forward pass is deterministic.
    """

    VARIANTS = VARIANTS
    accepts_rngs = True  # SSDDetector passes the train step's rngs (drop-connect)

    def __init__(
        self,
        variant: str,
        *,
        batch_norm: BatchNormParams,
        drop_connect_rate: float = 0.2,
        activation_name: ActivationName = "swish",
        last_stage_blocks: int | None = None,
        level_blocks: dict[int, int] | None = None,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        width, _ = _coefficients(variant)
        if not 0.0 <= drop_connect_rate < 1.0:
            raise ValueError(f"drop_connect_rate must be in [0, 1), got {drop_connect_rate}")
        ch = lambda c: make_divisible(c * width, 8)  # noqa: E731
        repeats = stage_repeats(variant)
        total = sum(repeats)  # drop-connect rates count every block of the full network
        if last_stage_blocks is not None:
            if not 1 <= last_stage_blocks <= repeats[-1]:
                raise ValueError(f"last_stage_blocks must be in 1..{repeats[-1]} for {variant}, "
                                 f"got {last_stage_blocks}")
            repeats = (*repeats[:-1], last_stage_blocks)
        for level, block in (level_blocks or {}).items():
            if level not in LEVEL_STAGE or not 0 <= block < repeats[LEVEL_STAGE[level]]:
                raise ValueError(f"level_blocks: level {level} cannot end after block {block} "
                                 f"({variant}'s stages have {repeats} blocks)")
        self.level_blocks = dict(level_blocks or {})
        self.variant = variant
        stem = ch(STEM_CHANNELS)
        self.conv_stem = conv(3, stem, 3, 2, padding="same", kernel_init=_conv_init,
                              dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(stem, batch_norm, dtype, rngs)
        self.act = activation(activation_name)
        in_ch, index = stem, 0
        stages, stage_out = [], []
        for i, ((t, k, s, c, _), n) in enumerate(zip(STAGES, repeats, strict=True)):
            out_ch = ch(c)
            blocks = []
            for j in range(n):
                common = dict(
                    drop_rate=drop_connect_rate * index / total, bn_params=batch_norm,
                    activation_name=activation_name, dtype=dtype, rngs=rngs,
                )
                stride = s if j == 0 else 1
                if i == 0:
                    blocks.append(DepthwiseSeparable(in_ch, out_ch, k, stride, **common))
                else:
                    blocks.append(MBConv(in_ch, out_ch, k, stride, t, **common))
                in_ch, index = out_ch, index + 1
            stages.append(nnx.List(blocks))
            stage_out.append(out_ch)
        self.blocks = nnx.List(stages)
        self.out_channels: dict[int, int] = {
            level: stage_out[i] for level, i in LEVEL_STAGE.items()
        }

    def __call__(
        self, x: jax.Array, *, rngs: nnx.Rngs | None = None
    ) -> dict[int, jax.Array]:
        x = self.act(self.bn1(self.conv_stem(x)))
        stage_to_level = {i: level for level, i in LEVEL_STAGE.items()}
        features = {}
        for i, stage in enumerate(self.blocks):
            level = stage_to_level.get(i)
            cut = len(stage) if level is None else self.level_blocks.get(level, len(stage) - 1) + 1
            x = remat.run_blocks(list(stage)[:cut], x, rngs=rngs)
            if level is not None:
                features[level] = x
            x = remat.run_blocks(list(stage)[cut:], x, rngs=rngs)
        return features

    def blocks_by_level(self) -> dict[int, list[nnx.Module]]:
        """The MBConv blocks leading to each level (stage 0 counts towards level 2)."""
        return remat.blocks_by_level(self.blocks, LEVEL_STAGE)
