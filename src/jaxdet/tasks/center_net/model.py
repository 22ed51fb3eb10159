"""CenterNet's network: a feature extractor that ends at one stride-``2**level`` map (e.g. a
backbone + FPN read at level 2, stride 4) and three heads on it, each a 3x3 conv + ReLU and a
1x1 conv: the per-class center heatmap (bias initialised to ``heatmap_bias_init``, -2.19 as in
the paper and the TF OD API: sigmoid 0.1), the box size (height, width in output pixels) and
the center offset (dy, dx). Each keypoint task adds three more heads of the same shape
(:class:`KeypointHeads`): its per-keypoint heatmap, the local keypoint offset and the
regression from the object center to each keypoint. DeepMAC (``embeddings``) adds the
instance and pixel embedding heads (1x3 hidden convs, as TF builds them) to every set of heads,
and its mask network (``tasks.center_net.deepmac``) as ``mask_net``."""

from __future__ import annotations

import jax
from flax import nnx

from jaxdet.models import initializers
from jaxdet.models.features import pyramid_features
from jaxdet.models.layers import conv
from jaxdet.models.necks.identity import IdentityNeck

HEADS = ("heatmap", "size", "offset")


class PredictionHead(nnx.Module):
    """``kernel`` conv (3x3 unless given; ``depth`` channels, bias, output the input's size) +
    ReLU + 1x1 conv (``out_channels``, bias)."""

    def __init__(self, in_channels: int, depth: int, out_channels: int, *,
                 bias_init: float = 0.0, kernel: int | tuple[int, int] = 3, dtype=None,
                 rngs: nnx.Rngs):
        self.hidden = conv(in_channels, depth, kernel, use_bias=True, dtype=dtype, rngs=rngs)
        self.out = conv(depth, out_channels, 1, use_bias=True, dtype=dtype, rngs=rngs,
                        bias_init=initializers.constant(bias_init))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jax.nn.relu(self.hidden(x)))


class KeypointHeads(nnx.Module):
    """One keypoint task's heads: ``heatmap`` (k channels, bias ``heatmap_bias_init``),
    ``offset`` (2, or 2k with ``per_keypoint_offset``: (dy, dx) per keypoint) and
    ``regression`` (2k: (dy, dx) from the object center to each keypoint, in output pixels)."""

    def __init__(self, channels: int, depth: int, num_keypoints: int, *,
                 per_keypoint_offset: bool, heatmap_bias_init: float, dtype=None,
                 rngs: nnx.Rngs):
        k = num_keypoints
        self.heatmap = PredictionHead(channels, depth, k, bias_init=heatmap_bias_init,
                                      dtype=dtype, rngs=rngs)
        self.offset = PredictionHead(channels, depth, 2 * k if per_keypoint_offset else 2,
                                     dtype=dtype, rngs=rngs)
        self.regression = PredictionHead(channels, depth, 2 * k, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> dict:
        return {"heatmap": self.heatmap(x), "offset": self.offset(x),
                "regression": self.regression(x)}


class Heads(nnx.Module):
    """Every head of one feature map: ``heatmap``, ``size``, ``offset``, with keypoint tasks
    ``keypoint_heads`` (one :class:`KeypointHeads` per task) and with ``embeddings`` (DeepMAC:
    ``(dim, pixel_embedding_dim, depth)``) ``instance_embedding`` and ``pixel_embedding``.
    ``__call__(x)`` gives ``{"heatmap", "size", "offset"[, "keypoints": [task outputs]][,
    "instance_embedding", "pixel_embedding"]}``."""

    def __init__(self, channels: int, depth: int, num_classes: int, *, heatmap_bias_init: float,
                 keypoint_tasks: tuple[tuple[int, bool, float], ...] = (),
                 embeddings: tuple[int, int, int] | None = None, dtype=None, rngs: nnx.Rngs):
        _add_heads(self, channels, depth, num_classes, heatmap_bias_init, keypoint_tasks,
                   dtype, rngs, embeddings)

    def __call__(self, x: jax.Array) -> dict:
        return _apply_heads(self, x)


def _add_heads(module: nnx.Module, channels: int, depth: int, num_classes: int,
               heatmap_bias_init: float, keypoint_tasks: tuple, dtype, rngs: nnx.Rngs,
               embeddings: tuple[int, int, int] | None = None) -> None:
    module.heatmap = PredictionHead(channels, depth, num_classes, bias_init=heatmap_bias_init,
                                    dtype=dtype, rngs=rngs)
    module.size = PredictionHead(channels, depth, 2, dtype=dtype, rngs=rngs)
    module.offset = PredictionHead(channels, depth, 2, dtype=dtype, rngs=rngs)
    if keypoint_tasks:  # absent otherwise: the variables of box-only models are unchanged
        module.keypoint_heads = nnx.List([
            KeypointHeads(channels, depth, k, per_keypoint_offset=per_kp,
                          heatmap_bias_init=bias, dtype=dtype, rngs=rngs)
            for k, per_kp, bias in keypoint_tasks])
    if embeddings is not None:  # DeepMAC: TF's make_prediction_net with 1x3 hidden kernels
        dim, pixel_dim, embedding_depth = embeddings
        for name, width in (("instance_embedding", dim), ("pixel_embedding", pixel_dim)):
            setattr(module, name, PredictionHead(channels, embedding_depth, width,
                                                 kernel=(1, 3), dtype=dtype, rngs=rngs))


def _apply_heads(module: nnx.Module, x: jax.Array) -> dict:
    out = {name: getattr(module, name)(x) for name in HEADS}
    if hasattr(module, "keypoint_heads"):
        out["keypoints"] = [heads(x) for heads in module.keypoint_heads]
    if hasattr(module, "instance_embedding"):
        out["instance_embedding"] = module.instance_embedding(x)
        out["pixel_embedding"] = module.pixel_embedding(x)
    return out


class CenterNet(nnx.Module):
    """``__call__(images [B, H, W, 3]) -> {"heatmap": [B, h, w, C] logits, "size": [B, h, w, 2],
    "offset": [B, h, w, 2]}`` at the feature map of ``level`` (h = H / 2**level).

    ``backbone`` maps images to ``{level: map}``; ``neck`` (or None) maps those to
    ``{level: map}``; ``channels`` is the width of the ``level`` map. ``keypoint_tasks``:
    ``(num_keypoints, per_keypoint_offset, heatmap_bias_init)`` per task; task ``i`` adds
    ``"keypoints"``: a list whose entry ``i`` is its :class:`KeypointHeads` outputs.

    A backbone with several outputs (``stack_outputs``: the stacked hourglasses) gets, as in
    the TF OD API, its own set of heads on each earlier output (``intermediate_heads``); their
    outputs come under ``"intermediate"`` (a list of dicts like the main one, first stack
    first) for the loss to average over; predictions read the last output only.

    DeepMAC: ``embeddings`` ``(dim, pixel_embedding_dim, depth)`` adds
    ``"instance_embedding"`` [B, h, w, dim] and ``"pixel_embedding"`` [B, h, w,
    pixel_embedding_dim] to every set of heads; ``mask_net`` (kept as ``self.mask_net``, not
    called here: it reads boxes) maps the per-box inputs to mask logits."""

    def __init__(self, backbone: nnx.Module, neck: nnx.Module | None, *, level: int,
                 channels: int, num_classes: int, head_depth: int = 256,
                 heatmap_bias_init: float = -2.19,
                 keypoint_tasks: tuple[tuple[int, bool, float], ...] = (),
                 embeddings: tuple[int, int, int] | None = None,
                 mask_net: nnx.Module | None = None, dtype=None, rngs: nnx.Rngs):
        self.backbone = backbone
        self.neck = neck
        self.level = level
        _add_heads(self, channels, head_depth, num_classes, heatmap_bias_init, keypoint_tasks,
                   dtype, rngs, embeddings)
        if mask_net is not None:  # absent otherwise: box-only variables stay as they were
            self.mask_net = mask_net
        stacks = getattr(getattr(backbone, "spec", None), "num_stacks", 1)
        if (hasattr(backbone, "stack_outputs") and stacks > 1
                and (neck is None or isinstance(neck, IdentityNeck))):
            self.intermediate_heads = nnx.List([
                Heads(channels, head_depth, num_classes, heatmap_bias_init=heatmap_bias_init,
                      keypoint_tasks=keypoint_tasks, embeddings=embeddings, dtype=dtype,
                      rngs=rngs)
                for _ in range(stacks - 1)])

    def __call__(self, images: jax.Array, *, rngs: nnx.Rngs | None = None) -> dict:
        if hasattr(self, "intermediate_heads"):
            maps = self.backbone.stack_outputs(images)
            out = _apply_heads(self, maps[-1])
            out["intermediate"] = [heads(x) for heads, x in zip(self.intermediate_heads,
                                                                 maps[:-1], strict=True)]
            return out
        x = pyramid_features(self.backbone, self.neck, images, rngs=rngs)[self.level]
        return _apply_heads(self, x)
