"""RetinaNet-style box predictor with convolution weights shared across levels (TF OD API
``WeightSharedConvolutionalBoxPredictor``).

Separate class and box towers of ``num_layers_before_predictor`` kxk convs (``depth``
channels) followed by a kxk predictor conv. Tower and predictor convolutions are one set of
weights applied to every level; BatchNorm is per level (TF ``.../BatchNorm/feature_i``)
unless ``share_norm_across_levels``. ``norm="group_norm"`` uses GroupNorm with 32 groups
(torchvision RetinaNet v2); ``norm="none"`` gives the tower convs a bias instead, and
``use_bias=True`` gives them one as well as the norm (TF ``force_use_bias``, EfficientDet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import jax
from flax import nnx

from jaxdet.models import initializers, remat
from jaxdet.models.layers import ActivationName, BatchNormParams, SeparableConv, conv
from jaxdet.models.layers import activation as get_activation
from jaxdet.models.layers import batch_norm as make_batch_norm
from jaxdet.tasks.ssd.heads.common import (
    features_in_order,
    flatten_predictions,
    head_kernel_init,
    prior_probability_bias,
    separable_head_kernel_init,
)

Norm = Literal["batch_norm", "group_norm", "none"]
GROUP_NORM_GROUPS = 32


def _head_conv(in_ch, out_ch, kernel_size, *, use_bias, separable, bias_init, dtype, rngs):
    if separable:
        return SeparableConv(in_ch, out_ch, kernel_size, use_bias=use_bias, padding="same",
                             kernel_init=separable_head_kernel_init, bias_init=bias_init,
                             dtype=dtype, rngs=rngs)
    return conv(in_ch, out_ch, kernel_size, use_bias=use_bias, padding="same",
                kernel_init=head_kernel_init, bias_init=bias_init, dtype=dtype, rngs=rngs)


class WeightSharedBoxPredictor(nnx.Module):
    """``__call__(features) -> (class_logits, box_encodings)``, per level in ascending order:
    ``[B, h*w*K, num_class_outputs]`` and ``[B, h*w*K, box_code_size]``.

    ``features`` is ``{level: [B, h, w, in_depth]}`` holding exactly ``levels`` (or a list in
    ascending level order).

    Attributes: ``box_tower`` / ``class_tower`` (``nnx.List`` of convs, one per layer, shared
    by all levels), ``box_norms`` / ``class_norms`` (``[layer][level index]``, a single entry
    per layer when shared; ``None`` with ``norm="none"``), ``box_predictor``,
    ``class_predictor``.
    """

    def __init__(
        self,
        in_depth: int,
        num_class_outputs: int,
        num_anchors_per_location: int,
        levels: Sequence[int],
        depth: int = 256,
        num_layers_before_predictor: int = 4,
        kernel_size: int = 3,
        norm: Norm = "batch_norm",
        batch_norm: BatchNormParams | None = None,
        share_norm_across_levels: bool = False,
        share_prediction_tower: bool = False,
        prior_probability: float = 0.01,
        activation: ActivationName = "relu6",
        use_depthwise: bool = False,
        box_code_size: int = 4,
        use_bias: bool = False,
        *,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        if norm not in ("batch_norm", "group_norm", "none"):
            raise ValueError(f"norm must be 'batch_norm', 'group_norm' or 'none', got {norm!r}")
        if norm == "group_norm" and depth % GROUP_NORM_GROUPS:
            raise ValueError(
                f"group_norm needs depth divisible by {GROUP_NORM_GROUPS}, got {depth}"
            )
        batch_norm = batch_norm or BatchNormParams()
        self.levels = tuple(sorted(levels))
        self.num_class_outputs = num_class_outputs
        self.box_code_size = box_code_size
        self.num_anchors_per_location = num_anchors_per_location
        self.act = get_activation(activation)
        self.share_norm_across_levels = share_norm_across_levels

        def make_norm():
            if norm == "batch_norm":
                return make_batch_norm(depth, batch_norm, dtype, rngs)
            return nnx.GroupNorm(depth, num_groups=GROUP_NORM_GROUPS, epsilon=1e-5,
                                 scale_init=initializers.ones_init(),
                                 bias_init=initializers.zeros_init(), dtype=dtype, rngs=rngs)

        def make_tower():
            return nnx.List([
                _head_conv(in_depth if i == 0 else depth, depth, kernel_size,
                           use_bias=use_bias or norm == "none", separable=use_depthwise,
                           bias_init=initializers.zeros_init(), dtype=dtype, rngs=rngs)
                for i in range(num_layers_before_predictor)
            ])

        def make_norms():
            if norm == "none":
                return None
            per_layer = 1 if share_norm_across_levels else len(self.levels)
            return nnx.List([
                nnx.List([make_norm() for _ in range(per_layer)])
                for _ in range(num_layers_before_predictor)
            ])

        self.box_tower, self.box_norms = make_tower(), make_norms()
        # TF FPN-lite: one tower feeds both predictors (class_tower is then None).
        self.share_prediction_tower = share_prediction_tower
        if share_prediction_tower:
            self.class_tower, self.class_norms = None, None
        else:
            self.class_tower, self.class_norms = make_tower(), make_norms()
        pred_in = depth if num_layers_before_predictor > 0 else in_depth
        self.box_predictor = _head_conv(
            pred_in, num_anchors_per_location * box_code_size, kernel_size, use_bias=True,
            separable=use_depthwise, bias_init=initializers.zeros_init(), dtype=dtype,
            rngs=rngs)
        self.class_predictor = _head_conv(
            pred_in, num_anchors_per_location * num_class_outputs, kernel_size, use_bias=True,
            separable=use_depthwise,
            bias_init=initializers.constant(prior_probability_bias(prior_probability)),
            dtype=dtype, rngs=rngs)

    def _tower(self, tower, norms, x: jax.Array, level_index: int) -> jax.Array:
        for i, layer in enumerate(tower):
            x = layer(x)
            if norms is not None:
                x = norms[i][0 if self.share_norm_across_levels else level_index](x)
            x = self.act(x)
        return x

    def __call__(
        self, features: Mapping[int, jax.Array] | Sequence[jax.Array]
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        class_logits, box_encodings = [], []
        for j, x in enumerate(features_in_order(features, self.levels)):
            cls, box = remat.call_level(_predict_level, self, x, j)
            class_logits.append(cls)
            box_encodings.append(box)
        return class_logits, box_encodings


def _predict_level(
    head: WeightSharedBoxPredictor, x: jax.Array, level_index: int
) -> tuple[jax.Array, jax.Array]:
    """One level's ``(class_logits [B, h*w*K, C'], box_encodings [B, h*w*K, code])``."""
    box_features = head._tower(head.box_tower, head.box_norms, x, level_index)
    class_features = (
        box_features
        if head.share_prediction_tower
        else head._tower(head.class_tower, head.class_norms, x, level_index)
    )
    box = head.box_predictor(box_features)
    cls = head.class_predictor(class_features)
    return (flatten_predictions(cls, head.num_class_outputs),
            flatten_predictions(box, head.box_code_size))
