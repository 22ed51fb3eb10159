"""Box arithmetic on ``(ymin, xmin, ymax, xmax)`` boxes.

Pure ``jnp`` functions: they work eagerly, under ``jax.jit`` and under ``jax.vmap``.
Pairwise functions (``intersection``, ``iou``, ``ioa``) take ``[N, 4]`` and ``[M, 4]`` and
return ``[N, M]``; elementwise functions broadcast over any leading axes.
Divisions are guarded: a zero denominator gives 0, never NaN (also in the gradient).
"""

from __future__ import annotations

import jax.numpy as jnp


def _safe_divide(num: jnp.ndarray, den: jnp.ndarray) -> jnp.ndarray:
    """``num / den`` where ``den > 0``, else 0 (NaN-free forward and backward)."""
    positive = den > 0
    return jnp.where(positive, num / jnp.where(positive, den, 1.0), 0.0)


def area(boxes: jnp.ndarray) -> jnp.ndarray:
    """Areas of ``boxes[..., 4]`` -> ``[...]``."""
    ymin, xmin, ymax, xmax = jnp.moveaxis(boxes, -1, 0)
    return (ymax - ymin) * (xmax - xmin)


def intersection(boxes1: jnp.ndarray, boxes2: jnp.ndarray) -> jnp.ndarray:
    """Pairwise intersection areas of ``boxes1[N, 4]`` and ``boxes2[M, 4]`` -> ``[N, M]``."""
    y1min, x1min, y1max, x1max = (boxes1[:, i : i + 1] for i in range(4))
    y2min, x2min, y2max, x2max = (boxes2[None, :, i] for i in range(4))
    h = jnp.maximum(jnp.minimum(y1max, y2max) - jnp.maximum(y1min, y2min), 0.0)
    w = jnp.maximum(jnp.minimum(x1max, x2max) - jnp.maximum(x1min, x2min), 0.0)
    return h * w


def iou(boxes1: jnp.ndarray, boxes2: jnp.ndarray) -> jnp.ndarray:
    """Pairwise intersection-over-union ``[N, M]``; 0 where the union is 0."""
    inter = intersection(boxes1, boxes2)
    union = area(boxes1)[:, None] + area(boxes2)[None, :] - inter
    return _safe_divide(inter, union)


def ioa(boxes1: jnp.ndarray, boxes2: jnp.ndarray) -> jnp.ndarray:
    """Pairwise intersection-over-area ``[N, M]`` = intersection / area(boxes2).

    TF OD API ``box_list_ops.ioa`` semantics (not symmetric); 0 where area(boxes2) is 0.
    """
    inter = intersection(boxes1, boxes2)
    return _safe_divide(inter, area(boxes2)[None, :])


def elementwise_iou(boxes1: jnp.ndarray, boxes2: jnp.ndarray) -> jnp.ndarray:
    """IoU of matching pairs ``boxes1[..., 4]`` / ``boxes2[..., 4]`` (broadcast) -> ``[...]``."""
    inter, union, _ = _elementwise_terms(boxes1, boxes2)
    return _safe_divide(inter, union)


def giou(boxes1: jnp.ndarray, boxes2: jnp.ndarray) -> jnp.ndarray:
    """Generalized IoU of matching pairs -> ``[...]``, in ``[-1, 1]``.

    ``giou = iou - (enclosing_area - union) / enclosing_area`` (Rezatofighi et al. 2019).
    Two identical degenerate boxes (enclosing area 0) give 0.
    """
    inter, union, enclosing = _elementwise_terms(boxes1, boxes2)
    return _safe_divide(inter, union) - _safe_divide(enclosing - union, enclosing)


def _elementwise_terms(boxes1, boxes2):
    y1min, x1min, y1max, x1max = jnp.moveaxis(boxes1, -1, 0)
    y2min, x2min, y2max, x2max = jnp.moveaxis(boxes2, -1, 0)
    h = jnp.maximum(jnp.minimum(y1max, y2max) - jnp.maximum(y1min, y2min), 0.0)
    w = jnp.maximum(jnp.minimum(x1max, x2max) - jnp.maximum(x1min, x2min), 0.0)
    inter = h * w
    union = area(boxes1) + area(boxes2) - inter
    enc_h = jnp.maximum(y1max, y2max) - jnp.minimum(y1min, y2min)
    enc_w = jnp.maximum(x1max, x2max) - jnp.minimum(x1min, x2min)
    return inter, union, enc_h * enc_w


def to_center_size(boxes: jnp.ndarray):
    """``boxes[..., 4]`` -> ``(ycenter, xcenter, height, width)``, each ``[...]``."""
    ymin, xmin, ymax, xmax = jnp.moveaxis(boxes, -1, 0)
    h = ymax - ymin
    w = xmax - xmin
    return ymin + 0.5 * h, xmin + 0.5 * w, h, w


def from_center_size(yc, xc, h, w) -> jnp.ndarray:
    """Inverse of :func:`to_center_size` -> ``[..., 4]`` yxyx boxes."""
    return jnp.stack([yc - 0.5 * h, xc - 0.5 * w, yc + 0.5 * h, xc + 0.5 * w], axis=-1)


def yxyx_to_xywh(boxes: jnp.ndarray) -> jnp.ndarray:
    """``(ymin, xmin, ymax, xmax)`` -> COCO ``(x, y, width, height)``."""
    ymin, xmin, ymax, xmax = jnp.moveaxis(boxes, -1, 0)
    return jnp.stack([xmin, ymin, xmax - xmin, ymax - ymin], axis=-1)


def clip_to_window(boxes: jnp.ndarray, window) -> jnp.ndarray:
    """Clip ``boxes[..., 4]`` to ``window = (ymin, xmin, ymax, xmax)``.

    TF OD API ``clip_to_window`` without the (dynamic-shape) filtering of boxes that
    become empty: such boxes stay, with zero area.
    """
    window = jnp.asarray(window, dtype=boxes.dtype)
    lo = jnp.stack([window[0], window[1], window[0], window[1]])
    hi = jnp.stack([window[2], window[3], window[2], window[3]])
    return jnp.clip(boxes, lo, hi)
