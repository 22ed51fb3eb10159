"""SSD extra feature layers, TF Object Detection API style (``multi_resolution_feature_maps``
with a ``feature_map_layout`` whose first entries come from the backbone).

The source levels pass through unchanged. Each extra depth ``d`` adds one level, built from
the previous (coarsest) map by

* 1x1 conv ``d // 2`` + BN + activation, then
* 3x3 stride-2 conv ``d`` + BN + activation, or with ``use_depthwise`` a depthwise 3x3
  stride-2 conv + BN + activation followed by a 1x1 conv ``d`` + BN + activation.

TF ``SAME`` padding, so a 300x300 SSD MobileNet gives 19, 10, 5, 3, 2, 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
from flax import nnx

from jaxdet.models.layers import ActivationName, BatchNormParams, ConvNormAct, DepthwiseNormAct


class ExtraLayer(nnx.Module):
    """One extra SSD level: ``reduce`` (1x1, d//2) then ``downsample`` (3x3 s2, d) or
    ``downsample`` (depthwise 3x3 s2) + ``project`` (1x1, d)."""

    def __init__(self, in_channels, out_channels, *, use_depthwise, **unit):
        mid = out_channels // 2
        self.reduce = ConvNormAct(in_channels, mid, 1, 1, **unit)
        if use_depthwise:
            self.downsample = DepthwiseNormAct(mid, 3, 2, **unit)
            self.project = ConvNormAct(mid, out_channels, 1, 1, **unit)
        else:
            self.downsample = ConvNormAct(mid, out_channels, 3, 2, **unit)
            self.project = None

    def __call__(self, x):
        x = self.downsample(self.reduce(x))
        return self.project(x) if self.project is not None else x


class SSDFeatureMaps(nnx.Module):
    """``__call__(features) -> {level: map}``: the source levels, then one level per
    ``extra_depths`` entry numbered consecutively above the highest source level.

    ``out_channels`` gives the channel count per output level.
    """

    def __init__(
        self,
        in_channels: dict[int, int],
        source_levels: Sequence[int] = (4, 5),
        extra_depths: Sequence[int] = (512, 256, 256, 128),
        *,
        batch_norm: BatchNormParams,
        activation: ActivationName = "relu6",
        use_depthwise: bool = False,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        source_levels = tuple(sorted(source_levels))
        missing = [lvl for lvl in source_levels if lvl not in in_channels]
        if missing:
            raise ValueError(
                f"SSDFeatureMaps source levels {missing} are not backbone levels "
                f"(have {sorted(in_channels)})"
            )
        self.source_levels = source_levels
        self.out_channels: dict[int, int] = {lvl: in_channels[lvl] for lvl in source_levels}
        unit = dict(batch_norm_params=batch_norm, activation_name=activation, dtype=dtype,
                    rngs=rngs)
        layers = []
        prev_level = source_levels[-1]
        prev_ch = in_channels[prev_level]
        for d in extra_depths:
            layers.append(ExtraLayer(prev_ch, d, use_depthwise=use_depthwise, **unit))
            prev_level += 1
            prev_ch = d
            self.out_channels[prev_level] = d
        self.extra = nnx.List(layers)

    def __call__(self, features: dict[int, jax.Array]) -> dict[int, jax.Array]:
        out = {lvl: features[lvl] for lvl in self.source_levels}
        x = out[self.source_levels[-1]]
        level = self.source_levels[-1]
        for layer in self.extra:
            x = layer(x)
            level += 1
            out[level] = x
        return out
