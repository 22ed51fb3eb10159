"""Helpers shared by the box predictors."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax

from jaxdet.models import initializers

# RetinaNet / TF OD API heads: N(0, 0.01) kernels.
head_kernel_init = initializers.normal(0.01)
# Separable head convs (EfficientDet: automl and effdet): N(0, 1/fan_in) for the depthwise and
# the pointwise kernel alike. N(0, 0.01) on both factors would scale each layer's output by
# ~0.0024 (variance ~6e-6, far below batch norm's epsilon): a dead head that never trains.
separable_head_kernel_init = initializers.variance_scaling(1.0, "fan_in", "normal")


def prior_probability_bias(prior_probability: float) -> float:
    """Class-logit bias ``-log((1 - p) / p)`` so every anchor starts at probability ``p``."""
    if not 0.0 < prior_probability < 1.0:
        raise ValueError(f"prior_probability must be in (0, 1), got {prior_probability}")
    return -math.log((1.0 - prior_probability) / prior_probability)


def flatten_predictions(x: jax.Array, code_size: int) -> jax.Array:
    """``[B, h, w, K * code_size] -> [B, h * w * K, code_size]`` (order y -> x -> anchor)."""
    b, h, w, c = x.shape
    if c % code_size:
        raise ValueError(f"{c} channels do not split into predictions of size {code_size}")
    return x.reshape(b, h * w * (c // code_size), code_size)


def features_in_order(
    features: Mapping[int, jax.Array] | Sequence[jax.Array], levels: Sequence[int] | None
) -> list[jax.Array]:
    """Feature maps in ascending level order. A mapping must hold exactly ``levels`` (when
    given); a sequence is taken as already ordered."""
    if isinstance(features, Mapping):
        keys = sorted(features)
        if levels is not None and keys != sorted(levels):
            raise ValueError(f"head was built for levels {sorted(levels)}, got levels {keys}")
        return [features[k] for k in keys]
    features = list(features)
    if levels is not None and len(features) != len(levels):
        raise ValueError(f"head was built for {len(levels)} levels, got {len(features)} maps")
    return features
