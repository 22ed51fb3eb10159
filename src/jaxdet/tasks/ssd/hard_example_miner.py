"""Online hard example mining for single-stage detectors (TF OD API ``HardExampleMiner``).

Per image, every anchor is scored by its (already weighted) loss, greedy NMS over the
anchors' predicted boxes keeps the ``num_hard_examples`` hardest ones that do not overlap
much, and optionally the kept negatives are capped at ``max_negatives_per_positive`` times
the kept positives (at least ``min_negatives_per_image``). The loss is then summed over the
kept anchors only. Everything is static-shape: the result is a ``[A]`` 0/1 mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp

from jaxdet.core.nms import non_max_suppression


@dataclass(frozen=True)
class HardExampleMinerParams:
    """Static mining settings (hashable). TF proto defaults.

    ``num_hard_examples`` 0 keeps as many as NMS leaves (TF: unset); ``loss_type`` picks the
    score: ``classification_weight * cls + localization_weight * loc`` ("both"), or one of
    them; ``max_negatives_per_positive`` 0 means no cap.
    """

    num_hard_examples: int = 64
    iou_threshold: float = 0.7
    loss_type: Literal["both", "classification", "localization"] = "both"
    max_negatives_per_positive: float = 0
    min_negatives_per_image: int = 0

    def __post_init__(self):
        allowed = ("both", "classification", "localization")
        if self.loss_type not in allowed:
            raise ValueError(f"loss_type={self.loss_type!r}; allowed: {', '.join(allowed)}")
        if self.num_hard_examples < 0 or self.min_negatives_per_image < 0:
            raise ValueError("num_hard_examples and min_negatives_per_image must be >= 0")
        if self.max_negatives_per_positive < 0:
            raise ValueError("max_negatives_per_positive must be >= 0 (0: no cap)")


def hard_example_mask(
    cls_losses: jnp.ndarray,
    loc_losses: jnp.ndarray,
    boxes: jnp.ndarray,
    positive: jnp.ndarray,
    negative: jnp.ndarray,
    params: HardExampleMinerParams,
    *,
    classification_weight: float = 1.0,
    localization_weight: float = 1.0,
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Which anchors of ONE image the mined loss sums over.

    Args:
      cls_losses: ``[A]`` per-anchor classification loss, anchor weights applied.
      loc_losses: ``[A]`` per-anchor localization loss, anchor weights applied (so non-zero
        on positives only).
      boxes: ``[A, 4]`` predicted boxes (decoded box encodings) that NMS runs on.
      positive: ``[A]`` bool, anchors matched to a (non-ignored) ground truth.
      negative: ``[A]`` bool, unmatched anchors (TF ``unmatched_column_indicator``).
      params: :class:`HardExampleMinerParams`.
      classification_weight, localization_weight: the loss weights, used for the "both"
        score as TF does.

    Returns ``(mask [A] float32, num_positives [], num_negatives [])``: the mask is 1 on the
    anchors NMS selects (by descending score, IoU > ``iou_threshold`` suppresses) among the
    first ``num_hard_examples`` picks that are positives, or negatives within the cap (the
    first ``max(min_negatives_per_image, floor(max_negatives_per_positive * positives))``
    selected negatives, in selection order). Selected anchors that are neither (ignored ones,
    whose weighted loss is 0 anyway) are left out of the mask. Scores and boxes are taken
    under ``stop_gradient``: the selection is not differentiated.
    """
    num_anchors = cls_losses.shape[0]
    if params.loss_type == "classification":
        scores = cls_losses
    elif params.loss_type == "localization":
        scores = loc_losses
    else:
        scores = cls_losses * classification_weight + loc_losses * localization_weight
    scores = jax.lax.stop_gradient(scores.astype(jnp.float32))
    boxes = jax.lax.stop_gradient(boxes.astype(jnp.float32))
    picks = num_anchors if params.num_hard_examples == 0 else min(
        params.num_hard_examples, num_anchors
    )
    indices, valid = non_max_suppression(
        boxes, scores, max_output_size=picks, iou_threshold=params.iou_threshold
    )
    sel_pos = valid & jnp.take(positive.astype(bool), indices)
    sel_neg = valid & jnp.take(negative.astype(bool), indices)
    num_pos = jnp.sum(sel_pos.astype(jnp.int32))
    if params.max_negatives_per_positive > 0:
        max_neg = jnp.maximum(
            params.min_negatives_per_image,
            jnp.floor(params.max_negatives_per_positive * num_pos.astype(jnp.float32)).astype(
                jnp.int32
            ),
        )
        sel_neg = sel_neg & (jnp.cumsum(sel_neg.astype(jnp.int32)) <= max_neg)
    keep = (sel_pos | sel_neg).astype(jnp.float32)
    mask = jnp.zeros((num_anchors,), jnp.float32).at[indices].add(keep)
    return mask, num_pos.astype(jnp.float32), jnp.sum(sel_neg).astype(jnp.float32)
