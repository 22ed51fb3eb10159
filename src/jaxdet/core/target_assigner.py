"""Per-image target assignment for anchor-based detectors (static shapes, vmap-able).

Follows TF OD API ``core/target_assigner.py`` with IoU similarity and the argmax or greedy
bipartite matcher:
every ground-truth field is gathered per anchor by ONE one-hot matmul over a table with
the ignored / unmatched sentinel rows prepended.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from jaxdet.core import box_ops
from jaxdet.core.matcher import argmax_match, bipartite_match, gather_by_match


def assign_targets(
    anchors: jnp.ndarray,
    gt_boxes: jnp.ndarray,
    gt_classes: jnp.ndarray,
    gt_valid: jnp.ndarray,
    gt_ignore: jnp.ndarray,
    *,
    num_classes: int,
    box_coder,
    matched_threshold: float,
    unmatched_threshold: float | None = None,
    negatives_lower_than_unmatched: bool = True,
    force_match_for_each_row: bool = False,
    matcher: Literal["argmax", "bipartite"] = "argmax",
    anchor_valid: jnp.ndarray | None = None,
) -> dict[str, jnp.ndarray]:
    """Targets for ``anchors[A, 4]`` from padded ground truth ``gt_*[N, ...]``.

    Returns a dict:

    * ``cls_targets`` [A, num_classes] float32: one-hot class for matched anchors, else 0.
    * ``cls_weights`` [A] float32: 1 for matched anchors and negatives; 0 for ignored (-2)
      anchors and for anchors matched to an ignore (crowd / difficult) ground truth.
    * ``box_targets`` [A, code_size]: ``box_coder.encode`` of the matched box, 0 where the
      anchor is not a positive.
    * ``box_weights`` [A] float32: 1 for positives (matched to a non-ignore ground truth).
    * ``match`` [A] int32 (row index, -1 unmatched, -2 ignored); ``num_positives`` [] float32.

    ``gt_classes`` are 0-based; padded rows (``gt_valid`` False) never match. Ignore ground
    truth takes part in matching so that the anchors covering it are neither positives nor
    negatives. ``matcher="bipartite"`` uses :func:`bipartite_match` (one anchor per ground
    truth; the thresholds and ``force_match_for_each_row`` are not used). Use ``jax.vmap``
    (keyword arguments closed over) for a batch. ``anchor_valid`` ``[A]``: anchors that take
    no part (TF prunes them before matching): no box forces them, and they come back as
    negatives for the caller to weight out.
    """
    anchors = anchors.astype(jnp.float32)
    gt_boxes = gt_boxes.astype(jnp.float32)
    gt_valid = gt_valid.astype(bool)
    similarity = box_ops.iou(gt_boxes, anchors)  # [N, A]
    if anchor_valid is not None:  # below any IoU: never a box's best anchor, never matched
        similarity = jnp.where(anchor_valid[None, :] > 0, similarity, -1.0)
    if matcher == "bipartite":
        match = bipartite_match(similarity, gt_valid)
    elif matcher == "argmax":
        match = argmax_match(
            similarity,
            gt_valid,
            matched_threshold,
            unmatched_threshold,
            negatives_lower_than_unmatched=negatives_lower_than_unmatched,
            force_match_for_each_row=force_match_for_each_row,
        )
    else:
        raise ValueError(f"matcher={matcher!r}; allowed: argmax, bipartite")

    # One table, one gather: [one-hot class | box | ignore flag]; padded rows zeroed so
    # garbage there (never selected) cannot leak through the matmul as NaN.
    table = jnp.concatenate(
        [
            jax.nn.one_hot(gt_classes, num_classes, dtype=jnp.float32),
            gt_boxes,
            gt_ignore.astype(jnp.float32)[:, None],
        ],
        axis=-1,
    )
    table = jnp.where(gt_valid[:, None], table, 0.0)
    sentinel = jnp.zeros((table.shape[-1],), jnp.float32)
    gathered = gather_by_match(table, match, sentinel, sentinel)
    cls_targets = gathered[:, :num_classes]
    matched_boxes = gathered[:, num_classes : num_classes + 4]
    matched_ignore = gathered[:, num_classes + 4] > 0.5

    matched = match >= 0
    positive = matched & ~matched_ignore
    # Encode the anchor itself where there is no match, so the codes stay finite.
    safe_boxes = jnp.where(matched[:, None], matched_boxes, anchors)
    codes = box_coder.encode(safe_boxes, anchors)
    box_targets = jnp.where(positive[:, None], codes, 0.0).astype(jnp.float32)

    cls_weights = ((match == -1) | positive).astype(jnp.float32)
    box_weights = positive.astype(jnp.float32)
    return {
        "cls_targets": cls_targets,
        "cls_weights": cls_weights,
        "box_targets": box_targets,
        "box_weights": box_weights,
        "match": match,
        "num_positives": jnp.sum(box_weights),
    }
