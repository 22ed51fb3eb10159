"""Batch detection loss for anchor-based detectors (SSD / RetinaNet / EfficientDet)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp

from jaxdet.core import losses
from jaxdet.tasks.ssd.hard_example_miner import HardExampleMinerParams, hard_example_mask

CLASSIFICATION_LOSSES = ("sigmoid_focal", "weighted_sigmoid", "bootstrapped_sigmoid", "softmax")
LOCALIZATION_LOSSES = ("smooth_l1", "l1", "l2", "giou")


@dataclass(frozen=True)
class DetectionLossParams:
    """Static loss settings (hashable, safe as a ``jax.jit`` static argument).

    ``alpha`` / ``gamma``: focal loss; ``bootstrap_alpha`` / ``hard_bootstrap``: bootstrapped
    sigmoid; ``logit_scale``: softmax; ``hard_example_miner``: mine hard examples (see
    ``tasks.ssd.hard_example_miner``) instead of summing over all anchors.
    """

    classification: Literal[
        "sigmoid_focal", "weighted_sigmoid", "bootstrapped_sigmoid", "softmax"
    ] = "sigmoid_focal"
    alpha: float | None = 0.25
    gamma: float = 2.0
    localization: Literal["smooth_l1", "l1", "l2", "giou"] = "smooth_l1"
    delta: float = 1.0
    classification_weight: float = 1.0
    localization_weight: float = 1.0
    add_background_class: bool = False
    normalize_by_num_matches: bool = True
    normalize_loc_loss_by_codesize: bool = False
    logit_scale: float = 1.0
    bootstrap_alpha: float = 0.5
    hard_bootstrap: bool = False
    hard_example_miner: HardExampleMinerParams | None = None

    def __post_init__(self):
        if self.classification not in CLASSIFICATION_LOSSES:
            raise ValueError(
                f"classification={self.classification!r}; allowed: "
                f"{', '.join(CLASSIFICATION_LOSSES)}"
            )
        if self.localization not in LOCALIZATION_LOSSES:
            raise ValueError(
                f"localization={self.localization!r}; allowed: {', '.join(LOCALIZATION_LOSSES)}"
            )


def loss_normalizer(box_weights: jnp.ndarray, params: DetectionLossParams) -> jnp.ndarray:
    """f32[]: what :func:`detection_loss` divides by for a batch whose targets have
    ``box_weights`` ``[B, A]``: ``max(1, sum(box_weights))`` (the positives) with
    ``normalize_by_num_matches``, else ``B``."""
    if params.normalize_by_num_matches:
        return jnp.maximum(jnp.sum(box_weights.astype(jnp.float32)), 1.0)
    return jnp.float32(box_weights.shape[0])


def detection_loss(
    class_logits: jnp.ndarray,
    box_encodings: jnp.ndarray,
    targets: dict,
    params: DetectionLossParams,
    *,
    anchors: jnp.ndarray | None = None,
    box_coder=None,
    normalizer: jnp.ndarray | float | None = None,
):
    """Weighted classification + localization loss over a batch.

    Args:
      class_logits: ``[B, A, K]``; ``K = num_classes + 1`` with ``add_background_class``
        (column 0 = background, target ``1 - sum(one-hot)``), else ``K = num_classes``.
      box_encodings: ``[B, A, code_size]`` predicted codes.
      targets: batched :func:`assign_targets` outputs (``cls_targets`` ``[B, A, C]``,
        ``cls_weights``, ``box_targets``, ``box_weights``).
      params: :class:`DetectionLossParams`.
      anchors, box_coder: needed for ``localization='giou'`` (both predictions and
        targets are decoded to boxes) and for hard example mining (NMS over the predicted
        boxes).
      normalizer: a scalar that replaces the batch's own normalizer (both parts are divided
        by it). Gradient accumulation passes the normalizer of the WHOLE batch here, so the
        losses of its micro-batches add up to the loss of the whole batch.

    Returns ``(total, {"classification_loss", "localization_loss", "num_positives"})``: the
    two parts already multiplied by their weights and divided by the normalizer
    (``max(1, positives in the batch)`` with ``normalize_by_num_matches``, else ``B``), so
    ``total`` is their sum. Computed in float32 whatever the input dtype.

    With ``params.hard_example_miner`` the weighted per-anchor losses are summed over the
    mined anchors only (``targets["match"]`` -1 marks the negatives) and the parts also hold
    ``mined_positives`` / ``mined_negatives`` (batch totals); the normalizer stays the number
    of positives in the whole batch, as in TF's SSD.
    ``params.logit_scale`` divides the logits of the softmax loss only (TF
    ``WeightedSoftmaxClassificationLoss``); the sigmoid losses see the raw logits.
    """
    class_logits = class_logits.astype(jnp.float32)
    box_encodings = box_encodings.astype(jnp.float32)
    cls_targets = targets["cls_targets"].astype(jnp.float32)
    cls_weights = targets["cls_weights"].astype(jnp.float32)
    box_targets = targets["box_targets"].astype(jnp.float32)
    box_weights = targets["box_weights"].astype(jnp.float32)

    if params.add_background_class:
        background = 1.0 - jnp.sum(cls_targets, axis=-1, keepdims=True)
        cls_targets = jnp.concatenate([background, cls_targets], axis=-1)
    if cls_targets.shape[-1] != class_logits.shape[-1]:
        raise ValueError(
            f"class_logits have {class_logits.shape[-1]} columns but the targets give "
            f"{cls_targets.shape[-1]} (add_background_class={params.add_background_class})"
        )

    if params.classification == "softmax":
        cls_loss = losses.softmax_cross_entropy_loss(
            class_logits, cls_targets, logit_scale=params.logit_scale
        )
    else:
        # As in TF, logit_scale belongs to the softmax loss only; sigmoid losses use raw logits.
        if params.classification == "sigmoid_focal":
            per_entry = losses.sigmoid_focal_loss(
                class_logits, cls_targets, alpha=params.alpha, gamma=params.gamma
            )
        elif params.classification == "bootstrapped_sigmoid":
            per_entry = losses.bootstrapped_sigmoid_loss(
                class_logits, cls_targets, alpha=params.bootstrap_alpha,
                hard=params.hard_bootstrap,
            )
        else:
            per_entry = losses.weighted_sigmoid_loss(class_logits, cls_targets)
        cls_loss = jnp.sum(per_entry, axis=-1)  # [B, A]

    positive = box_weights > 0
    if params.localization == "smooth_l1":
        loc_loss = losses.smooth_l1_loss(box_encodings, box_targets, delta=params.delta)
    elif params.localization == "l1":
        loc_loss = losses.l1_loss(box_encodings, box_targets)
    elif params.localization == "l2":
        loc_loss = losses.l2_loss(box_encodings, box_targets)
    else:
        if anchors is None or box_coder is None:
            raise ValueError("localization='giou' needs anchors= and box_coder=")
        anchors = jnp.asarray(anchors, jnp.float32)
        # Zero the codes of non-positives before decoding: their (unused) boxes stay finite,
        # so no NaN reaches the gradient through exp().
        pred_codes = jnp.where(positive[..., None], box_encodings, 0.0)
        pred_boxes = box_coder.decode(pred_codes, anchors)
        target_boxes = box_coder.decode(box_targets, anchors)
        loc_loss = losses.giou_loss(pred_boxes, target_boxes)

    num_positives = jnp.sum(box_weights)
    if normalizer is None:
        normalizer = loss_normalizer(box_weights, params)
    normalizer = jnp.asarray(normalizer, jnp.float32)

    cls_loss = cls_loss * cls_weights  # [B, A], anchor weights applied
    loc_loss = loc_loss * box_weights
    extra = {}
    miner = params.hard_example_miner
    if miner is not None:
        if anchors is None or box_coder is None or "match" not in targets:
            raise ValueError("hard example mining needs anchors=, box_coder= and targets['match']")
        anchors = jnp.asarray(anchors, jnp.float32)
        pred_boxes = box_coder.decode(jax.lax.stop_gradient(box_encodings), anchors)
        mask, mined_pos, mined_neg = jax.vmap(
            lambda cls_i, loc_i, boxes_i, pos_i, neg_i: hard_example_mask(
                cls_i, loc_i, boxes_i, pos_i, neg_i, miner,
                classification_weight=params.classification_weight,
                localization_weight=params.localization_weight,
            )
        )(cls_loss, loc_loss, pred_boxes, positive, jnp.asarray(targets["match"]) == -1)
        cls_loss, loc_loss = cls_loss * mask, loc_loss * mask
        extra = {"mined_positives": jnp.sum(mined_pos), "mined_negatives": jnp.sum(mined_neg)}

    classification_loss = params.classification_weight * jnp.sum(cls_loss) / normalizer
    loc_normalizer = normalizer
    if params.normalize_loc_loss_by_codesize and params.localization != "giou":
        loc_normalizer = normalizer * box_encodings.shape[-1]  # TF: divide by the code size
    localization_loss = params.localization_weight * jnp.sum(loc_loss) / loc_normalizer
    total = classification_loss + localization_loss
    return total, {
        "classification_loss": classification_loss,
        "localization_loss": localization_loss,
        "num_positives": num_positives,
        **extra,
    }
