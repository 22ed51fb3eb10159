"""The plain SSD box predictor (TF OD API ``ConvolutionalBoxPredictor``): separate weights
per level.

Per level: ``num_layers_before_predictor`` 1x1 convs of ``depth`` channels + BN +
activation, then a kxk box conv (``K * box_code_size``) and a kxk class conv
(``K * num_class_outputs``, bias ``class_prediction_bias_init``), both with bias and no
norm. ``use_dropout`` applies dropout (keep probability ``dropout_keep_prob``) before the class
conv only, as TF does. ``use_depthwise`` (SSDLite) makes each predictor a depthwise kxk + BN
+ activation followed by a 1x1 conv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
from flax import nnx

from jaxdet.models import initializers, remat
from jaxdet.models.layers import (
    ActivationName,
    BatchNormParams,
    ConvNormAct,
    DepthwiseNormAct,
    conv,
)
from jaxdet.tasks.ssd.heads.common import features_in_order, flatten_predictions

# TF OD API SSD configs: truncated normal, stddev 0.03.
ssd_kernel_init = initializers.truncated_normal(0.03)


class Predictor(nnx.Module):
    """kxk conv with bias, or (``use_depthwise``) ``depthwise`` kxk + BN + act then 1x1
    ``conv``."""

    def __init__(self, in_ch, out_ch, kernel_size, *, use_depthwise, bias_init, unit, dtype,
                 rngs):
        if use_depthwise:
            self.depthwise = DepthwiseNormAct(in_ch, kernel_size, 1, **unit)
            kernel_size = 1
        else:
            self.depthwise = None
        self.conv = conv(in_ch, out_ch, kernel_size, use_bias=True, padding="same",
                         kernel_init=ssd_kernel_init, bias_init=bias_init, dtype=dtype,
                         rngs=rngs)

    def __call__(self, x):
        if self.depthwise is not None:
            x = self.depthwise(x)
        return self.conv(x)


class LevelPredictor(nnx.Module):
    """One level's tower (``tower``), ``box_predictor`` and ``class_predictor``."""

    def __init__(self, in_ch, num_anchors, *, num_class_outputs, box_code_size, kernel_size,
                 num_layers_before_predictor, depth, use_depthwise, class_bias_init, unit,
                 dtype, rngs):
        layers = []
        for _ in range(num_layers_before_predictor):
            layers.append(ConvNormAct(in_ch, depth, 1, 1, kernel_init=ssd_kernel_init, **unit))
            in_ch = depth
        self.tower = nnx.List(layers)
        common = dict(use_depthwise=use_depthwise, unit=unit, dtype=dtype, rngs=rngs)
        self.box_predictor = Predictor(
            in_ch, num_anchors * box_code_size, kernel_size,
            bias_init=initializers.zeros_init(), **common)
        self.class_predictor = Predictor(
            in_ch, num_anchors * num_class_outputs, kernel_size,
            bias_init=initializers.constant(class_bias_init), **common)


class ConvolutionalBoxPredictor(nnx.Module):
    """``__call__(features) -> (class_logits, box_encodings)``, per level in ascending order:
    ``[B, h*w*K_l, num_class_outputs]`` and ``[B, h*w*K_l, box_code_size]``.

    ``features`` is a list of maps in ascending level order, with ``in_channels[i]``
    channels (a ``{level: map}`` dict is taken in ascending key order). Attribute
    ``predictors`` is a ``nnx.List`` of :class:`LevelPredictor`, one per map.
    """

    def __init__(
        self,
        in_channels: Sequence[int],
        num_class_outputs: int,
        num_anchors_per_location: Sequence[int],
        kernel_size: int = 1,
        num_layers_before_predictor: int = 0,
        depth: int = 0,
        batch_norm: BatchNormParams | None = None,
        use_dropout: bool = False,
        dropout_keep_prob: float = 0.8,
        class_prediction_bias_init: float = 0.0,
        box_code_size: int = 4,
        *,
        activation: ActivationName = "relu6",
        use_depthwise: bool = False,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        if len(in_channels) != len(num_anchors_per_location):
            raise ValueError(
                f"{len(in_channels)} in_channels but {len(num_anchors_per_location)} "
                "num_anchors_per_location entries"
            )
        if num_layers_before_predictor > 0 and depth <= 0:
            raise ValueError("num_layers_before_predictor > 0 needs depth > 0")
        if not 0.0 < dropout_keep_prob <= 1.0:
            raise ValueError(f"dropout_keep_prob must be in (0, 1], got {dropout_keep_prob}")
        unit = dict(batch_norm_params=batch_norm or BatchNormParams(),
                    activation_name=activation, dtype=dtype, rngs=rngs)
        self.num_class_outputs = num_class_outputs
        self.box_code_size = box_code_size
        self.num_anchors_per_location = tuple(num_anchors_per_location)
        self.predictors = nnx.List([
            LevelPredictor(
                c, k, num_class_outputs=num_class_outputs, box_code_size=box_code_size,
                kernel_size=kernel_size, num_layers_before_predictor=num_layers_before_predictor,
                depth=depth, use_depthwise=use_depthwise,
                class_bias_init=class_prediction_bias_init, unit=unit, dtype=dtype, rngs=rngs)
            for c, k in zip(in_channels, num_anchors_per_location, strict=True)
        ])
        self.dropout = (
            nnx.Dropout(1.0 - dropout_keep_prob, rngs=rngs) if use_dropout else None
        )

    def __call__(
        self, features: Mapping[int, jax.Array] | Sequence[jax.Array]
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        maps = features_in_order(features, None)
        if len(maps) != len(self.predictors):
            raise ValueError(
                f"predictor was built for {len(self.predictors)} maps, got {len(maps)}"
            )
        class_logits, box_encodings = [], []
        for j, x in enumerate(maps):
            cls, box = remat.call_level(_predict_level, self, x, j)
            class_logits.append(cls)
            box_encodings.append(box)
        return class_logits, box_encodings


def _predict_level(
    head: ConvolutionalBoxPredictor, x: jax.Array, level_index: int
) -> tuple[jax.Array, jax.Array]:
    """One level's ``(class_logits [B, h*w*K, C'], box_encodings [B, h*w*K, code])``."""
    level = head.predictors[level_index]
    for layer in level.tower:
        x = layer(x)
    box = level.box_predictor(x)
    if head.dropout is not None:
        x = head.dropout(x)
    cls = level.class_predictor(x)
    return (flatten_predictions(cls, head.num_class_outputs),
            flatten_predictions(box, head.box_code_size))
