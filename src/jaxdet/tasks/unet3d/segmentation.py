"""Volumetric semantic segmentation: losses, the Dice metric and sliding-window inference
(pure functions; the 3D U-Net family, ``tasks.unet3d``).

Conventions:

* Volumes are channels-last: a batch of logits is f32[B, D, H, W, K] (K classes, class 0 the
  background), labels are int32[B, D, H, W] with values in ``0..K-1``; a single volume is
  [D, H, W, C] (C input channels).
* Dice, as the MLPerf training reference (``image_segmentation``) computes it: per example
  and per class, sums over all voxels of the example, ``(2 * |P & T| + s) / (|P| + |T| + s)``
  with ``s = 1e-6`` on both sides (the loss on softmax probabilities, the metric on one-hot
  argmax predictions), then averaged. By default the background class is left out (MLPerf's
  ``include_background=False``): KiTS19's mean Dice is the mean of kidney and tumour.
* The metric gives a class absent from both prediction and label a Dice of exactly 1.0 (the
  limit MLPerf's smoothing reaches), and computes ``2|P & T| / (|P| + |T|)`` exactly otherwise.
* Sliding windows follow nnU-Net: window starts evenly spaced from 0 to ``size - patch`` with
  at least ``overlap`` of a patch between neighbours, softmax probabilities blended with a
  Gaussian importance map (sigma = ``sigma_scale`` x patch side, 1/8 by default).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

DICE_SMOOTH = 1e-6
GAUSSIAN_FLOOR = 1e-6


def _one_hot(labels: jax.Array, num_classes: int) -> jax.Array:
    return jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)


def _keep_classes(x: jax.Array, include_background: bool) -> jax.Array:
    return x if include_background else x[..., 1:]


def soft_dice_scores(logits: jax.Array, labels: jax.Array, *, include_background: bool = False,
                     smooth: float = DICE_SMOOTH) -> jax.Array:
    """Soft Dice of softmax probabilities per example and class.

    Args:
      logits: f32[B, D, H, W, K]; labels: int[B, D, H, W] in ``0..K-1``.
      include_background: keep class 0 (False: the K - 1 foreground classes only).
      smooth: added to numerator and denominator (1e-6: MLPerf's).
    Returns:
      f32[B, K'] (K' = K, or K - 1 without the background):
      ``(2 sum(p * t) + smooth) / (sum(p) + sum(t) + smooth)`` over each example's voxels.
    """
    k = logits.shape[-1]
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    target = _one_hot(labels, k)
    axes = tuple(range(1, logits.ndim - 1))
    intersection = jnp.sum(probs * target, axis=axes)
    denominator = jnp.sum(probs, axis=axes) + jnp.sum(target, axis=axes)
    scores = (2.0 * intersection + smooth) / (denominator + smooth)
    return _keep_classes(scores, include_background)


def soft_dice_loss(logits: jax.Array, labels: jax.Array, *, include_background: bool = False,
                   smooth: float = DICE_SMOOTH) -> jax.Array:
    """f32[B]: each example's ``1 - soft Dice`` averaged over the classes
    (:func:`soft_dice_scores`; arguments as there). The batch loss is its mean (MLPerf's
    ``mean(1 - dice)`` over batch and classes)."""
    scores = soft_dice_scores(logits, labels, include_background=include_background,
                              smooth=smooth)
    return jnp.mean(1.0 - scores, axis=-1)


def cross_entropy_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """f32[B]: each example's softmax cross-entropy averaged over its voxels (logits
    f32[B, D, H, W, K], labels int[B, D, H, W]); the batch loss is its mean."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(log_probs, labels[..., None].astype(jnp.int32), axis=-1)
    return -jnp.mean(picked[..., 0], axis=tuple(range(1, labels.ndim)))


ADAPTIVE_DICE_EPSILON = 1e-7


def adaptive_dice_loss(logits: jax.Array, labels: jax.Array, *,
                       epsilon: float = ADAPTIVE_DICE_EPSILON) -> jax.Array:
    """f32[]: the Cloud TPU 3D U-Net reference's ``adaptive_dice32`` loss of a whole batch.

    With p = softmax(logits), t = one_hot(labels) and, per class c (background included),
    sums over the batch and all voxels together::

        I_c = sum(t_c * p_c),  U_c = sum(t_c + p_c)
        dice_c = 2 (I_c + epsilon) / (U_c + epsilon)
        w_c = exp(-dice_c)
        loss = 1 - sum_c(w_c dice_c) / (K exp(-1))

    Since ``d exp(-d)`` is largest (``exp(-1)``) at d = 1, the loss lies in [0, 1) and is 0
    when every class is predicted perfectly with certainty; the weights favour classes that
    are still poorly segmented. In float32 whatever the logits' dtype. The sums run over the
    whole batch, so the loss of a batch is not a sum (nor a mean) of per-example losses.

    Args:
      logits: f[B, D, H, W, K]; labels: int[B, D, H, W] in ``0..K-1``.
      epsilon: 1e-7, the reference's.
    """
    k = logits.shape[-1]
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    target = _one_hot(labels, k)
    axes = tuple(range(logits.ndim - 1))
    intersection = jnp.sum(target * probs, axis=axes)
    union = jnp.sum(target + probs, axis=axes)
    dice = 2.0 * (intersection + epsilon) / (union + epsilon)
    return 1.0 - jnp.sum(jnp.exp(-dice) * dice) / (k * math.exp(-1.0))


def dice_scores(predictions: jax.Array, labels: jax.Array, num_classes: int, *,
                include_background: bool = False) -> jax.Array:
    """Dice of hard label maps per example and class (the evaluation metric).

    Args:
      predictions, labels: int[B, D, H, W] class maps (predictions: e.g. the argmax of the
        probabilities).
      num_classes: K.
      include_background: keep class 0.
    Returns:
      f32[B, K']: ``2 |P & T| / (|P| + |T|)`` per class; 1.0 where the class is absent from
      both. The mean Dice of a case is the mean over K'; a data set's, the mean over cases.
    """
    p = _one_hot(predictions, num_classes)
    t = _one_hot(labels, num_classes)
    axes = tuple(range(1, labels.ndim))
    intersection = jnp.sum(p * t, axis=axes)
    total = jnp.sum(p, axis=axes) + jnp.sum(t, axis=axes)
    scores = jnp.where(total > 0, 2.0 * intersection / jnp.maximum(total, 1.0), 1.0)
    return _keep_classes(scores, include_background)


# --------------------------------------------------------------------------- sliding window


def gaussian_importance_map(patch_size: Sequence[int], sigma_scale: float = 0.125) -> np.ndarray:
    """f32[pD, pH, pW]: a separable Gaussian centred on the patch's centre ``(p - 1) / 2`` per
    axis (symmetric under flipping any axis), standard deviation ``sigma_scale * p``, scaled
    to a maximum of 1 and floored at 1e-6 so that every voxel has a positive weight (nnU-Net
    floors at its smallest positive weight)."""
    g = np.ones((), np.float64)
    for p in patch_size:
        x = np.arange(p, dtype=np.float64) - (p - 1) / 2.0
        g = g[..., None] * np.exp(-0.5 * (x / (sigma_scale * p)) ** 2)
    g = g / g.max()
    return np.maximum(g, GAUSSIAN_FLOOR).astype(np.float32)


def window_starts(size: int, patch: int, overlap: float = 0.5) -> tuple[int, ...]:
    """Start indices of the windows of one axis (nnU-Net's): ``n = ceil((size - patch) /
    (patch * (1 - overlap))) + 1`` windows, starts ``round(i * (size - patch) / (n - 1))``,
    so the first starts at 0, the last ends at ``size`` and neighbours share at least
    ``overlap * patch`` voxels (up to rounding). Needs ``patch <= size``."""
    if patch > size:
        raise ValueError(f"patch {patch} is larger than the axis ({size}); pad the volume first")
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap {overlap} must be in [0, 1)")
    if size == patch:
        return (0,)
    n = math.ceil((size - patch) / (patch * (1.0 - overlap))) + 1
    step = (size - patch) / (n - 1)
    return tuple(int(np.round(i * step)) for i in range(n))


def sliding_window_positions(volume_size: Sequence[int], patch_size: Sequence[int],
                             overlap: float = 0.5) -> list[tuple[int, ...]]:
    """Every window's start (z, y, x) over a volume of ``volume_size`` (each side at least
    the patch's), depth-major: the product of the axes' :func:`window_starts`."""
    axes = [window_starts(s, p, overlap) for s, p in zip(volume_size, patch_size, strict=True)]
    return list(itertools.product(*axes))


def pad_to_patch(volume_size: Sequence[int],
                 patch_size: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) padding per axis bringing each side of ``volume_size`` up to the
    patch's (centred, the extra voxel after; (0, 0) where the side is already large enough)."""
    pads = []
    for s, p in zip(volume_size, patch_size, strict=True):
        extra = max(p - s, 0)
        pads.append((extra // 2, extra - extra // 2))
    return pads


def sliding_window_inference(predict_patch: Callable[[jax.Array], jax.Array],
                             volume: jax.Array, patch_size: Sequence[int], *,
                             overlap: float = 0.5, sigma_scale: float = 0.125,
                             batch_size: int = 1, pad_value: float = 0.0) -> jax.Array:
    """Blended softmax probabilities of a whole volume from patch predictions.

    The volume is padded (``pad_value``, :func:`pad_to_patch`) where a side is smaller than
    the patch; windows (:func:`sliding_window_positions`, a static list) are taken
    ``batch_size`` at a time in a ``lax.scan`` (the last group repeats the first window with
    weight 0); each window's ``softmax(predict_patch(...))`` times the Gaussian map
    (:func:`gaussian_importance_map`) is added to the voxels it covers, and the sums are
    divided by the summed weights. Every shape is static: jit it once per volume size.

    Args:
      predict_patch: f32[b, pD, pH, pW, C] -> logits [b, pD, pH, pW, K] (b = ``batch_size``).
      volume: [D, H, W, C] (static size).
      patch_size: (pD, pH, pW).
    Returns:
      f32[D, H, W, K]: class probabilities (each voxel sums to 1).
    """
    volume = jnp.asarray(volume)
    if volume.ndim != 4:
        raise ValueError(f"volume must be [D, H, W, C]; got shape {tuple(volume.shape)}")
    patch = tuple(int(p) for p in patch_size)
    size, channels = tuple(volume.shape[:3]), volume.shape[3]
    pads = pad_to_patch(size, patch)
    padded = jnp.pad(volume, [*pads, (0, 0)], constant_values=pad_value)
    positions = sliding_window_positions(padded.shape[:3], patch, overlap)
    groups = -(-len(positions) // batch_size)
    extra = groups * batch_size - len(positions)
    starts = np.asarray(positions + [positions[0]] * extra, np.int32).reshape(
        groups, batch_size, 3)
    weights = np.asarray([1.0] * len(positions) + [0.0] * extra, np.float32).reshape(
        groups, batch_size)
    gaussian = jnp.asarray(gaussian_importance_map(patch, sigma_scale))[..., None]
    out = jax.eval_shape(predict_patch,
                         jax.ShapeDtypeStruct((batch_size, *patch, channels), volume.dtype))
    k = out.shape[-1]

    def take(start: jax.Array) -> jax.Array:
        return jax.lax.dynamic_slice(padded, (start[0], start[1], start[2], 0),
                                     (*patch, channels))

    def add(total: jax.Array, value: jax.Array, start: jax.Array) -> jax.Array:
        index = (start[0], start[1], start[2], 0)
        current = jax.lax.dynamic_slice(total, index, value.shape)
        return jax.lax.dynamic_update_slice(total, current + value, index)

    def body(carry, xs):
        probs_sum, weight_sum = carry
        group_starts, group_weights = xs
        logits = predict_patch(jax.vmap(take)(group_starts))
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        for i in range(batch_size):
            w = gaussian * group_weights[i]
            probs_sum = add(probs_sum, probs[i] * w, group_starts[i])
            weight_sum = add(weight_sum, w, group_starts[i])
        return (probs_sum, weight_sum), None

    init = (jnp.zeros((*padded.shape[:3], k), jnp.float32),
            jnp.zeros((*padded.shape[:3], 1), jnp.float32))
    (probs_sum, weight_sum), _ = jax.lax.scan(body, init, (starts, weights))
    probs = probs_sum / weight_sum
    return probs[pads[0][0]:pads[0][0] + size[0], pads[1][0]:pads[1][0] + size[1],
                 pads[2][0]:pads[2][0] + size[2]]


__all__ = ["ADAPTIVE_DICE_EPSILON", "DICE_SMOOTH", "adaptive_dice_loss", "cross_entropy_loss",
           "dice_scores", "gaussian_importance_map", "pad_to_patch", "sliding_window_inference",
           "sliding_window_positions", "soft_dice_loss", "soft_dice_scores", "window_starts"]
