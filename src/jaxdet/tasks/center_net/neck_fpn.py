"""The TF OD API's CenterNet ResNet-v1 FPN neck (``CenterNetResnetV1FpnFeatureExtractor``): one
stride-4 map from backbone levels 2-5.

``top = conv1x1(C5 -> filters[0])``; then for each of C4, C3, C2 in turn (``filters[i]``): top
is upsampled 2x (nearest) and added to ``conv1x1(C_l -> filters[i])``, then ``3x3 conv ->
BatchNorm -> ReLU`` to ``filters[i + 1]`` (the last keeps ``filters[-1]``). Every conv has a
bias (Keras' default), the 3x3 ones too despite the BatchNorm after them. With the default
``filters=(256, 128, 64)`` the output is 64 channels at level 2.

The TF OD API's CenterNet MobileNetV2-FPN (``CenterNetMobileNetV2FPNFeatureExtractor``) is
the same neck with ``filters=(64, 32, 24)`` over MobileNetV2's ``block_2_add``,
``block_5_add``, ``block_9_add`` and ``out_relu`` maps (24 channels at level 2), and two
options: ``separable`` (Keras ``SeparableConv2D`` for the 3x3 convs: a depthwise 3x3 without
bias, then a 1x1 with one) and ``interpolation="bilinear"`` (Keras ``UpSampling2D``'s bilinear
resize, half-pixel centers; ``"nearest"`` repeats pixels, which shards cleanly along H).
"""

from __future__ import annotations

from typing import Literal

import jax
from flax import nnx

from jaxdet.models.layers import BatchNormParams, SeparableConv, conv
from jaxdet.models.layers import batch_norm as make_batch_norm
from jaxdet.models.necks.fpn import upsample2x_like


class CenterNetFPN(nnx.Module):
    """``__call__({level: map}) -> {out_level: map}``; ``out_channels = {out_level:
    filters[-1]}`` with ``out_level = 5 - len(filters)``."""

    def __init__(self, in_channels: dict[int, int], filters: tuple[int, ...] = (256, 128, 64),
                 *, batch_norm: BatchNormParams, separable: bool = False,
                 interpolation: Literal["nearest", "bilinear"] = "nearest", dtype=None,
                 rngs: nnx.Rngs):
        top_level = max(in_channels)
        self.levels = [top_level - 1 - i for i in range(len(filters))]
        missing = [lv for lv in self.levels if lv not in in_channels]
        if missing:
            raise ValueError(f"the CenterNet FPN needs backbone levels {self.levels}; the "
                             f"backbone has no level {missing}")
        self.top = conv(in_channels[top_level], filters[0], 1, use_bias=True, dtype=dtype,
                        rngs=rngs)
        self.lateral = nnx.List([conv(in_channels[lv], f, 1, use_bias=True, dtype=dtype,
                                      rngs=rngs) for lv, f in zip(self.levels, filters,
                                                                  strict=True)])
        outs = [*filters[1:], filters[-1]]
        if separable:
            self.smooth = nnx.List([SeparableConv(f, o, 3, use_bias=True, padding="same",
                                                  dtype=dtype, rngs=rngs)
                                    for f, o in zip(filters, outs, strict=True)])
        else:
            self.smooth = nnx.List([conv(f, o, 3, use_bias=True, padding="same", dtype=dtype,
                                         rngs=rngs) for f, o in zip(filters, outs, strict=True)])
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got "
                             f"{interpolation!r}")
        self.interpolation = interpolation
        self.norms = nnx.List([make_batch_norm(o, batch_norm, dtype, rngs) for o in outs])
        self.out_level = self.levels[-1]
        self.out_channels = {self.out_level: outs[-1]}

    def __call__(self, features: dict[int, jax.Array]) -> dict[int, jax.Array]:
        top = self.top(features[max(features)])
        for lv, lateral, smooth, norm in zip(self.levels, self.lateral, self.smooth, self.norms,
                                             strict=True):
            x = features[lv]
            top = self._upsample(top, x) + lateral(x)
            top = jax.nn.relu(norm(smooth(top)))
        return {self.out_level: top}

    def _upsample(self, top: jax.Array, like: jax.Array) -> jax.Array:
        if self.interpolation == "nearest":
            return upsample2x_like(top, like)
        b, h, w, c = top.shape
        up = jax.image.resize(top, (b, 2 * h, 2 * w, c), "bilinear")
        return up[:, : like.shape[1], : like.shape[2]]
