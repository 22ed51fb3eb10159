"""Elementwise, unreduced detection losses (callers apply weights and reductions).

Semantics of the TF OD API ``core/losses.py`` classes named in each docstring.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdet.core import box_ops


def weighted_sigmoid_loss(logits: jnp.ndarray, targets: jnp.ndarray) -> jnp.ndarray:
    """Sigmoid cross-entropy per entry ``[..., C]`` (TF ``WeightedSigmoidClassificationLoss``).

    Numerically stable form ``max(x, 0) - x * t + log1p(exp(-|x|))``.
    """
    return jnp.maximum(logits, 0.0) - logits * targets + jnp.log1p(jnp.exp(-jnp.abs(logits)))


def bootstrapped_sigmoid_loss(
    logits: jnp.ndarray, targets: jnp.ndarray, alpha: float = 0.5, hard: bool = False
) -> jnp.ndarray:
    """Bootstrapped sigmoid cross-entropy per entry ``[..., C]`` (TF
    ``BootstrappedSigmoidClassificationLoss``, Reed et al. 2014).

    The target becomes ``alpha * t + (1 - alpha) * q`` with ``q = sigmoid(logits)`` ("soft")
    or ``q = 1[sigmoid(logits) > 0.5]`` (``hard``), then sigmoid cross-entropy. As in TF the
    soft ``q`` is not stopped: the gradient flows through the target too.
    """
    p = jax.nn.sigmoid(logits)
    q = (p > 0.5).astype(logits.dtype) if hard else p
    return weighted_sigmoid_loss(logits, alpha * targets + (1.0 - alpha) * q)


def sigmoid_focal_loss(
    logits: jnp.ndarray,
    targets: jnp.ndarray,
    alpha: float | None = 0.25,
    gamma: float = 2.0,
) -> jnp.ndarray:
    """Focal loss per entry ``[..., C]`` (TF ``SigmoidFocalClassificationLoss``).

    ``ce * (1 - p_t)**gamma * (t * alpha + (1 - t) * (1 - alpha))`` with
    ``p_t = t * p + (1 - t) * (1 - p)``; ``alpha=None`` drops the alpha weighting and
    ``gamma=0`` the modulating factor.
    """
    ce = weighted_sigmoid_loss(logits, targets)
    p = jax.nn.sigmoid(logits)
    p_t = targets * p + (1.0 - targets) * (1.0 - p)
    loss = ce
    if gamma:
        loss = loss * jnp.power(1.0 - p_t, gamma)
    if alpha is not None:
        loss = loss * (targets * alpha + (1.0 - targets) * (1.0 - alpha))
    return loss


def softmax_cross_entropy_loss(
    logits: jnp.ndarray, targets: jnp.ndarray, logit_scale: float = 1.0
) -> jnp.ndarray:
    """Softmax cross-entropy over the last axis -> ``[...]``.

    TF ``WeightedSoftmaxClassificationLoss``: logits divided by ``logit_scale`` first.
    """
    log_probs = jax.nn.log_softmax(logits / logit_scale, axis=-1)
    return -jnp.sum(targets * log_probs, axis=-1)


def smooth_l1_loss(pred: jnp.ndarray, target: jnp.ndarray, delta: float = 1.0) -> jnp.ndarray:
    """Huber loss summed over the last axis -> ``[...]`` (TF ``WeightedSmoothL1LocalizationLoss``).

    Per coordinate ``0.5 x**2`` if ``|x| <= delta`` else ``delta * (|x| - 0.5 * delta)``.
    """
    x = jnp.abs(pred - target)
    quadratic = jnp.minimum(x, delta)
    linear = x - quadratic
    return jnp.sum(0.5 * quadratic**2 + delta * linear, axis=-1)


def l1_loss(pred: jnp.ndarray, target: jnp.ndarray) -> jnp.ndarray:
    """Absolute difference summed over the last axis -> ``[...]``."""
    return jnp.sum(jnp.abs(pred - target), axis=-1)


def l2_loss(pred: jnp.ndarray, target: jnp.ndarray) -> jnp.ndarray:
    """``0.5 * (pred - target)**2`` summed over the last axis -> ``[...]`` (TF
    ``WeightedL2LocalizationLoss``; TF multiplies the difference by the anchor weight before
    squaring, the same for the 0/1 weights used here)."""
    return jnp.sum(0.5 * jnp.square(pred - target), axis=-1)


def giou_loss(pred_boxes: jnp.ndarray, target_boxes: jnp.ndarray) -> jnp.ndarray:
    """``1 - giou`` of yxyx box pairs -> ``[...]`` (TF ``GIoULocalizationLoss``)."""
    return 1.0 - box_ops.giou(pred_boxes, target_boxes)
