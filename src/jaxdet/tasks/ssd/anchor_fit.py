"""How a config's anchors fit a dataset's boxes (``jaxdet summary --data``).

The ground-truth boxes of a source are brought to the network input as evaluation sees them
(the resizer only, no augmentation); each box's best IoU over all anchors decides whether the
argmax matcher can match it at ``matched_threshold``. A box no anchor reaches is *unmatched*:
it trains only through ``force_match_for_each_row`` (its best anchor, however poor) or not at
all. Boxes smaller than the smallest anchor or larger than the largest one show which way to
move ``model.anchors`` (``anchor_scale``, ``min_level`` / ``max_level``, or SSD's
``min_scale`` / ``max_scale``).

Conventions: boxes and anchors are PIXEL (ymin, xmin, ymax, xmax) in the network input's
canvas; a box's size is sqrt(height * width).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

MAX_BOXES = 20_000  # more boxes than this are sampled (seeded) for the IoU search
_CHUNK = 256  # boxes per IoU block: [256, A] floats at a time


def level_anchor_sizes(anchors_px: np.ndarray, level_counts: Sequence[int],
                       anchors_per_location: Sequence[int]) -> list[dict]:
    """Anchor shapes of each level, read from the anchors of its first location.

    Args:
      anchors_px: [A, 4] pixel anchors, level after level, ``anchors_per_location[l]``
        consecutive anchors per location (the generators' order).
      level_counts: anchors per level (sums to A).
    Returns:
      Per level ``{"sizes_px": sorted distinct sqrt(h*w), "aspect_ratios": distinct w/h in
      first-seen order, "min_px", "max_px"}`` (sizes rounded to 0.1 px, ratios to 0.01).
    """
    out, start = [], 0
    for count, k in zip(level_counts, anchors_per_location, strict=True):
        first = np.asarray(anchors_px[start:start + int(k)], np.float64)
        h, w = first[:, 2] - first[:, 0], first[:, 3] - first[:, 1]
        sizes = sorted({round(float(v), 1) for v in np.sqrt(h * w)})
        ratios = list(dict.fromkeys(round(float(v), 2) for v in w / h))
        out.append({"sizes_px": sizes, "aspect_ratios": ratios,
                    "min_px": sizes[0], "max_px": sizes[-1]})
        start += int(count)
    return out


def boxes_at_input(source, box_scale) -> np.ndarray:
    """Every non-crowd box of ``source`` in the network input's pixels, float64 [N, 4].

    ``box_scale(height, width) -> (sy, sx)`` is the resizer's (``data.resize``); a record
    without a size (height or width 0) is skipped.
    """
    rows = []
    for i in range(len(source)):
        record = source[i]
        if not record["height"] or not record["width"]:
            continue
        boxes = np.asarray(record["boxes"], np.float64).reshape(-1, 4)
        boxes = boxes[~np.asarray(record["is_crowd"], bool)]
        if boxes.size:
            sy, sx = box_scale(int(record["height"]), int(record["width"]))
            rows.append(boxes * np.array([sy, sx, sy, sx]))
    return np.concatenate(rows) if rows else np.zeros((0, 4))


@jax.jit
def _best_iou_block(boxes: jax.Array, anchors: jax.Array) -> jax.Array:
    """[n, 4] boxes x [A, 4] anchors -> [n] best IoU of each box over the anchors."""
    y0 = jnp.maximum(boxes[:, None, 0], anchors[None, :, 0])
    x0 = jnp.maximum(boxes[:, None, 1], anchors[None, :, 1])
    y1 = jnp.minimum(boxes[:, None, 2], anchors[None, :, 2])
    x1 = jnp.minimum(boxes[:, None, 3], anchors[None, :, 3])
    inter = jnp.clip(y1 - y0, 0) * jnp.clip(x1 - x0, 0)
    area_b = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    area_a = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
    union = area_b[:, None] + area_a[None, :] - inter
    return jnp.max(jnp.where(union > 0, inter / jnp.maximum(union, 1e-12), 0.0), axis=1)


def best_anchor_iou(boxes: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Best IoU of each box ([N, 4]) over all anchors ([A, 4]), float32 [N] (exact; blocks
    of a fixed size, so one compile whatever N is)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    anchors_j = jnp.asarray(anchors, jnp.float32)
    out = np.zeros((boxes.shape[0],), np.float32)
    for lo in range(0, boxes.shape[0], _CHUNK):
        block = boxes[lo:lo + _CHUNK]
        padded = np.zeros((_CHUNK, 4), np.float32)
        padded[:block.shape[0]] = block
        out[lo:lo + block.shape[0]] = np.asarray(_best_iou_block(padded, anchors_j))[
            :block.shape[0]]
    return out


def anchor_coverage(boxes: np.ndarray, anchors: np.ndarray, threshold: float, *,
                    max_boxes: int = MAX_BOXES, seed: int = 0) -> dict:
    """Which boxes no anchor matches at IoU >= ``threshold``.

    Args:
      boxes: [N, 4] pixel boxes at the network input (:func:`boxes_at_input`).
      anchors: [A, 4] pixel anchors.
      max_boxes: above this many boxes a seeded random sample of this size is searched.
    Returns:
      ``{"boxes": searched, "total_boxes": N, "threshold", "unmatched", "unmatched_fraction",
      "unmatched_size_px": [min, max] or None, "smaller_than_anchors",
      "larger_than_anchors", "median_best_iou"}``. Smaller/larger compare the unmatched
      boxes' sizes with the smallest and largest anchor size.
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    total = boxes.shape[0]
    if total > max_boxes:
        boxes = boxes[np.sort(np.random.default_rng(seed).choice(total, max_boxes, False))]
    best = best_anchor_iou(boxes, anchors)
    sizes = np.sqrt(np.clip(boxes[:, 2] - boxes[:, 0], 0, None)
                    * np.clip(boxes[:, 3] - boxes[:, 1], 0, None))
    a = np.asarray(anchors, np.float64)
    anchor_sizes = np.sqrt((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))
    missed = best < threshold
    return {
        "boxes": int(boxes.shape[0]),
        "total_boxes": int(total),
        "threshold": float(threshold),
        "unmatched": int(missed.sum()),
        "unmatched_fraction": float(missed.mean()) if boxes.shape[0] else 0.0,
        "unmatched_size_px": ([float(sizes[missed].min()), float(sizes[missed].max())]
                              if missed.any() else None),
        "smaller_than_anchors": int((missed & (sizes < anchor_sizes.min())).sum()),
        "larger_than_anchors": int((missed & (sizes > anchor_sizes.max())).sum()),
        "median_best_iou": float(np.median(best)) if boxes.shape[0] else None,
    }


def coverage_advice(coverage: dict, anchors_kind: str) -> list[str]:
    """One line of advice per problem the coverage shows (empty when under 1% unmatched)."""
    if coverage["unmatched_fraction"] < 0.01:
        return []
    knobs = ("model.anchors.anchor_scale or min_level/max_level" if anchors_kind == "multiscale"
             else "model.anchors.min_scale/max_scale")
    lines = []
    if coverage["larger_than_anchors"]:
        lines.append(f"{coverage['larger_than_anchors']:,} unmatched boxes are larger than the "
                     f"largest anchor: raise {knobs}")
    if coverage["smaller_than_anchors"]:
        lines.append(f"{coverage['smaller_than_anchors']:,} unmatched boxes are smaller than the "
                     f"smallest anchor: lower {knobs} (or use a larger input size)")
    rest = (coverage["unmatched"] - coverage["larger_than_anchors"]
            - coverage["smaller_than_anchors"])
    if rest:
        lines.append(f"{rest:,} unmatched boxes fall between anchor shapes or positions "
                     "(elongated, between two scales, or between centres when anchors are small "
                     "for their stride): add aspect ratios or scales_per_octave")
    return lines


__all__ = ["MAX_BOXES", "anchor_coverage", "best_anchor_iou", "boxes_at_input",
           "coverage_advice", "level_anchor_sizes"]
