"""CenterNet's network: a feature extractor that ends at one stride-``2**level`` map (e.g. a
backbone + FPN read at level 2, stride 4) and three heads on it, each a 3x3 conv + ReLU and a
1x1 conv: the per-class center heatmap (bias initialised to ``heatmap_bias_init``, -2.19 as in
the paper and the TF OD API: sigmoid 0.1), the box size (height, width in output pixels) and
the center offset (dy, dx)."""

from __future__ import annotations

import jax
from flax import nnx

from jaxdet.models.features import pyramid_features
from jaxdet.models.layers import conv

HEADS = ("heatmap", "size", "offset")


class PredictionHead(nnx.Module):
    """3x3 conv (``depth`` channels, bias) + ReLU + 1x1 conv (``out_channels``, bias)."""

    def __init__(self, in_channels: int, depth: int, out_channels: int, *,
                 bias_init: float = 0.0, dtype=None, rngs: nnx.Rngs):
        self.hidden = conv(in_channels, depth, 3, use_bias=True, dtype=dtype, rngs=rngs)
        self.out = conv(depth, out_channels, 1, use_bias=True, dtype=dtype, rngs=rngs,
                        bias_init=nnx.initializers.constant(bias_init))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jax.nn.relu(self.hidden(x)))


class CenterNet(nnx.Module):
    """``__call__(images [B, H, W, 3]) -> {"heatmap": [B, h, w, C] logits, "size": [B, h, w, 2],
    "offset": [B, h, w, 2]}`` at the feature map of ``level`` (h = H / 2**level).

    ``backbone`` maps images to ``{level: map}``; ``neck`` (or None) maps those to
    ``{level: map}``; ``channels`` is the width of the ``level`` map."""

    def __init__(self, backbone: nnx.Module, neck: nnx.Module | None, *, level: int,
                 channels: int, num_classes: int, head_depth: int = 256,
                 heatmap_bias_init: float = -2.19, dtype=None, rngs: nnx.Rngs):
        self.backbone = backbone
        self.neck = neck
        self.level = level
        self.heatmap = PredictionHead(channels, head_depth, num_classes,
                                      bias_init=heatmap_bias_init, dtype=dtype, rngs=rngs)
        self.size = PredictionHead(channels, head_depth, 2, dtype=dtype, rngs=rngs)
        self.offset = PredictionHead(channels, head_depth, 2, dtype=dtype, rngs=rngs)

    def __call__(self, images: jax.Array, *, rngs: nnx.Rngs | None = None) -> dict:
        x = pyramid_features(self.backbone, self.neck, images, rngs=rngs)[self.level]
        return {name: getattr(self, name)(x) for name in HEADS}
