"""Feature Pyramid Network, TF Object Detection API style (``fpn_top_down_feature_maps`` +
the ``bottom_up_block`` extra levels of the SSD FPN feature extractors).

For backbone levels ``min_level .. top`` (``top = min(max_level, highest backbone level)``):

* the top level is a 1x1 projection (with bias, no norm/activation) of the backbone map;
* every lower level adds a 1x1 projection of its backbone map to the 2x nearest-upsampled
  map above it (upsampled with ``jnp.repeat``, cropped to the lateral's size when the
  backbone map is odd-sized), then a 3x3 "smoothing" conv + BN + activation; the map passed
  further down is that sum (``top_down="merged"``) or the smoothed output
  (``"smoothed"``, TF2's Keras FPN);
* levels ``top+1 .. max_level`` come from a 3x3 stride-2 conv + BN + activation of the
  level below (the coarsest FPN output first).

All outputs have ``depth`` channels. ``use_depthwise`` makes the 3x3 convs separable
(depthwise 3x3 + pointwise 1x1, TF ``separable_conv2d``), as in the FPN-lite configs.
Convolutions use TF ``SAME`` padding.

torchvision's FPN (``ops.FeaturePyramidNetwork`` + ``LastLevelP6P7``) is the same with
``norm=None`` (3x3 convs with a bias, no BN), ``activation="none"``, ``smooth_top=True`` (the
top level's projection is smoothed too, and that smoothed map feeds the first extra level),
``extra_input_activation="relu"`` (P7 = conv(relu(P6))) and ``padding="symmetric"`` (the
stride-2 convs pad one row/column on every side). Its nearest-neighbour upsampling to the
lateral's size picks the same source pixels as repeat-and-crop on these (ceil-halved) sizes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models.layers import ActivationName, BatchNormParams, ConvNormAct, Padding, conv
from jaxdet.models.layers import activation as get_activation


def upsample2x_like(x: jax.Array, like: jax.Array) -> jax.Array:
    """Nearest-neighbour 2x upsampling by ``jnp.repeat`` (shards cleanly along H and W),
    cropped to ``like``'s spatial size."""
    y = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
    return y[:, : like.shape[1], : like.shape[2]]


class FPN(nnx.Module):
    """``__call__(features: {level: [B,H,W,C]}) -> {level: [B,h,w,depth]}`` for
    ``min_level..max_level``.

    ``out_channels`` is ``{level: depth}``. Attributes: ``lateral`` (1x1 projections, one per
    backbone level, ascending),
    ``smoothing`` (3x3 convs for the levels below the top, and the top too with
    ``smooth_top``, ascending), ``extra`` (stride-2 convs for levels above the backbone,
    ascending). ``batch_norm=None``: no norm in the 3x3 convs, which get a bias.
    """

    def __init__(
        self,
        in_channels: dict[int, int],
        min_level: int,
        max_level: int,
        depth: int,
        *,
        batch_norm: BatchNormParams | None,
        activation: ActivationName = "relu",
        use_depthwise: bool = False,
        top_down: str = "merged",
        smooth_top: bool = False,
        extra_input_activation: ActivationName = "none",
        padding: Padding = "same",
        dtype=None,
        rngs: nnx.Rngs,
    ):
        if top_down not in ("merged", "smoothed"):
            raise ValueError(f"top_down must be 'merged' or 'smoothed', got {top_down!r}")
        self.top_down = top_down
        self.smooth_top = smooth_top
        self.extra_input_act = get_activation(extra_input_activation)
        backbone_top = max(in_channels)
        if min_level not in in_channels:
            raise ValueError(
                f"FPN min_level {min_level} is not a backbone level (have {sorted(in_channels)})"
            )
        if max_level < min_level:
            raise ValueError(f"FPN max_level {max_level} < min_level {min_level}")
        self.min_level, self.max_level, self.depth = min_level, max_level, depth
        self.out_channels: dict[int, int] = {lvl: depth for lvl in range(min_level, max_level + 1)}
        self.top_level = min(max_level, backbone_top)
        self.backbone_levels = tuple(range(min_level, self.top_level + 1))
        missing = [lvl for lvl in self.backbone_levels if lvl not in in_channels]
        if missing:
            raise ValueError(f"FPN needs backbone levels {missing}; have {sorted(in_channels)}")
        unit = dict(batch_norm_params=batch_norm, activation_name=activation,
                    separable=use_depthwise, dtype=dtype, rngs=rngs)
        self.lateral = nnx.List([
            conv(in_channels[lvl], depth, 1, use_bias=True, padding="same", dtype=dtype,
                 rngs=rngs)
            for lvl in self.backbone_levels
        ])
        smoothed = self.backbone_levels if smooth_top else self.backbone_levels[:-1]
        self.smoothing = nnx.List([ConvNormAct(depth, depth, 3, 1, **unit) for _ in smoothed])
        self.extra = nnx.List([
            ConvNormAct(depth, depth, 3, 2, padding=padding, **unit)
            for _ in range(self.top_level + 1, max_level + 1)
        ])

    def __call__(self, features: dict[int, jax.Array]) -> dict[int, jax.Array]:
        levels = self.backbone_levels
        top_down = self.lateral[-1](features[levels[-1]])
        outputs = {levels[-1]: self.smoothing[-1](top_down) if self.smooth_top else top_down}
        if self.top_down == "smoothed":
            top_down = outputs[levels[-1]]
        for i in range(len(levels) - 2, -1, -1):
            lateral = self.lateral[i](features[levels[i]])
            top_down = upsample2x_like(top_down, lateral) + lateral
            outputs[levels[i]] = self.smoothing[i](top_down)
            if self.top_down == "smoothed":
                top_down = outputs[levels[i]]
        x = outputs[levels[-1]]
        for i, layer in enumerate(self.extra):
            x = layer(x if i == 0 else self.extra_input_act(x))
            outputs[self.top_level + 1 + i] = x
        return {lvl: outputs[lvl] for lvl in range(self.min_level, self.max_level + 1)}
