"""Faster R-CNN's pure functions (static shapes; TF OD API ``FasterRCNNMetaArch`` semantics):
first-stage (RPN) targets and losses, the proposals from the RPN outputs, the second-stage
minibatch, targets and losses, the second stage's per-class NMS, and Mask R-CNN's mask
targets (ground-truth masks cropped to the proposals) and mask loss.

Conventions: boxes are ``(ymin, xmin, ymax, xmax)``, normalized except where the targets are
matched: TF matches in pixels, so the task gives the target functions pixel boxes (their
codes are the same up to rounding; which anchor a small box forces is not); a batch is
``[B, ...]``;
per-image functions are vmapped by the caller or here. Losses come back as *sums over the
images of per-image normalized losses*: TF divides each image's loss by its own count (the
sampled anchors / proposals, at least 1) and averages over the batch, so the caller divides
by the batch size (the accumulation normalizer: micro-batch sums then add up exactly).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdet.core import losses
from jaxdet.core.nms import batched_nms, clip_to_window
from jaxdet.core.roi_ops import matmul_crop_and_resize
from jaxdet.core.target_assigner import assign_targets

# TF's target assigners ``create_target_assigner("FasterRCNN", "proposal" / "detection")``
RPN_MATCHED, RPN_UNMATCHED = 0.7, 0.3
DETECTION_MATCHED = 0.5


# --------------------------------------------------------------------------- first stage


def rpn_targets(anchors: jax.Array, gt_boxes: jax.Array, gt_valid: jax.Array,
                gt_ignore: jax.Array, box_coder, *, anchor_valid: jax.Array | None = None,
                matched_threshold: float = RPN_MATCHED,
                unmatched_threshold: float = RPN_UNMATCHED) -> dict:
    """One image's RPN targets over ``anchors [A, 4]`` against ``gt_boxes [N, 4]`` (one
    coordinate frame for both: pixels, as TF).

    ArgMax matcher (IoU >= 0.7 positive, < 0.3 negative, between ignored; every valid box
    forces its best anchor), as TF's ``proposal`` target assigner. Returns ``objectness [A]``
    (1 positive, 0 else), ``weight [A]`` (1 where the anchor may be sampled: negatives and
    positives, not ignored; 0 for anchors matched to an ``ignore`` box and, with
    ``anchor_valid``, outside anchors, which no box forces either), ``box_targets [A, 4]``
    (codes of the matched box), ``box_weights [A]`` (positives)."""
    t = assign_targets(anchors, gt_boxes, jnp.zeros(gt_boxes.shape[:1], jnp.int32), gt_valid,
                       gt_ignore, num_classes=1, box_coder=box_coder,
                       matched_threshold=matched_threshold,
                       unmatched_threshold=unmatched_threshold,
                       negatives_lower_than_unmatched=True, force_match_for_each_row=True,
                       matcher="argmax", anchor_valid=anchor_valid)
    weight = t["cls_weights"]
    box_weights = t["box_weights"]
    if anchor_valid is not None:
        weight = weight * anchor_valid
        box_weights = box_weights * anchor_valid
    return {"objectness": t["cls_targets"][:, 0] * weight, "weight": weight,
            "box_targets": t["box_targets"], "box_weights": box_weights}


def rpn_losses(objectness_logits: jax.Array, box_encodings: jax.Array, targets: dict,
               sampled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(objectness, localization) RPN losses of a batch, each the sum over images of the
    image's loss divided by its number of sampled anchors (at least 1), as TF's ``_loss_rpn``
    before its batch mean.

    Args:
      objectness_logits: ``[B, A, 2]`` (background, object) logits (softmax loss).
      box_encodings: ``[B, A, 4]``.
      targets: batched :func:`rpn_targets`.
      sampled: ``[B, A]`` bool, the minibatch (``tasks.faster_rcnn.samplers.balanced_sample``).
    """
    s = sampled.astype(jnp.float32)
    normalizer = jnp.maximum(jnp.sum(s, axis=1), 1.0)  # [B]
    one_hot = jax.nn.one_hot(targets["objectness"].astype(jnp.int32), 2)
    obj = losses.softmax_cross_entropy_loss(objectness_logits.astype(jnp.float32), one_hot) * s
    loc = losses.smooth_l1_loss(box_encodings.astype(jnp.float32), targets["box_targets"],
                                delta=1.0) * s * targets["box_weights"]
    return (jnp.sum(jnp.sum(obj, axis=1) / normalizer),
            jnp.sum(jnp.sum(loc, axis=1) / normalizer))


def proposals(box_encodings: jax.Array, objectness_logits: jax.Array, anchors: jax.Array,
              window: jax.Array, box_coder, *, max_proposals: int, iou_threshold: float,
              score_threshold: float = 0.0, anchor_valid: jax.Array | None = None) -> dict:
    """The RPN's proposals: decode every anchor, score it by the softmax objectness, greedy
    NMS (IoU > ``iou_threshold`` suppresses; a score must be > ``score_threshold``) to at most
    ``max_proposals``, then clip to ``window [B, 4]`` (the image content) and drop boxes left
    empty, as TF's first-stage ``batch_multiclass_non_max_suppression``.

    Returns ``boxes [B, P, 4]``, ``scores [B, P]``, ``valid [B, P]`` bool (valid ones first,
    by descending score; zeros after) with ``P = max_proposals``. ``anchor_valid [A]``:
    anchors that take no part (their score is -inf)."""
    boxes = box_coder.decode(box_encodings.astype(jnp.float32), anchors[None])
    scores = jax.nn.softmax(objectness_logits.astype(jnp.float32), axis=-1)[..., 1:2]
    if anchor_valid is not None:
        scores = jnp.where(anchor_valid[None, :, None] > 0, scores, -jnp.inf)
    det = batched_nms(boxes, scores, score_threshold=score_threshold,
                      iou_threshold=iou_threshold, max_detections_per_class=max_proposals,
                      max_total_detections=max_proposals, pre_nms_top_k=anchors.shape[0])
    det = clip_to_window(det, window)
    valid = jnp.arange(max_proposals)[None, :] < det["num_detections"][:, None]
    return {"boxes": det["boxes"], "scores": det["scores"], "valid": valid}


# --------------------------------------------------------------------------- second stage


def detection_targets(proposal_boxes: jax.Array, proposal_valid: jax.Array,
                      gt_boxes: jax.Array, gt_classes: jax.Array, gt_valid: jax.Array,
                      gt_ignore: jax.Array, *, num_classes: int, box_coder,
                      matched_threshold: float = DETECTION_MATCHED) -> dict:
    """One image's second-stage targets over ``proposal_boxes [P, 4]`` against ``gt_boxes
    [N, 4]`` (one coordinate frame for both: pixels, as TF): ArgMax matcher with
    one threshold (IoU >= 0.5 positive, else background; no forced matches), as TF's
    ``detection`` target assigner. Returns ``classes [P]`` int32 (0 background, ``c + 1`` for
    class ``c``), ``weight [P]`` (valid proposals not matched to an ``ignore`` box),
    ``box_targets [P, 4]``, ``box_weights [P]`` (valid positives) and ``match [P]`` int32
    (the matched ground-truth row of each positive, 0 elsewhere: Mask R-CNN's mask
    targets)."""
    t = assign_targets(proposal_boxes, gt_boxes, gt_classes, gt_valid, gt_ignore,
                       num_classes=num_classes, box_coder=box_coder,
                       matched_threshold=matched_threshold,
                       unmatched_threshold=matched_threshold,
                       negatives_lower_than_unmatched=True, force_match_for_each_row=False,
                       matcher="argmax")
    valid = proposal_valid.astype(jnp.float32)
    positive = t["box_weights"] * valid
    classes = jnp.where(positive > 0, jnp.argmax(t["cls_targets"], axis=-1) + 1, 0)
    return {"classes": classes.astype(jnp.int32), "weight": t["cls_weights"] * valid,
            "box_targets": t["box_targets"], "box_weights": positive,
            "match": jnp.where(positive > 0, t["match"], 0).astype(jnp.int32)}


def compact(mask: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    """The indices of ``mask [N]``'s True entries in index order, padded to ``size``:
    ``(indices [size] int32, valid [size] bool)`` (TF's static ``boolean_mask``; padding
    slots hold index 0 and are not valid)."""
    order = jnp.argsort(~mask.astype(bool), stable=True)
    if size > mask.shape[0]:
        order = jnp.pad(order, (0, size - mask.shape[0]))
    count = jnp.sum(mask.astype(jnp.int32))
    valid = jnp.arange(size) < count
    return jnp.where(valid, order[:size], 0).astype(jnp.int32), valid


def class_box_encodings(box_encodings: jax.Array, classes: jax.Array) -> jax.Array:
    """``box_encodings [..., C', 4]`` -> ``[..., 4]``: the box of each proposal's own class
    (``classes`` 1-based, 0 background reads class 1's box, to be weighted 0), or the one
    shared box when ``C' == 1``."""
    if box_encodings.shape[-2] == 1:
        return box_encodings[..., 0, :]
    index = jnp.clip(classes - 1, 0, box_encodings.shape[-2] - 1)
    return jnp.take_along_axis(box_encodings, index[..., None, None], axis=-2)[..., 0, :]


def detection_losses(class_logits: jax.Array, box_encodings: jax.Array, targets: dict,
                     valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(classification, localization) second-stage losses of a batch, each the sum over
    images of the image's loss divided by its number of valid (sampled) proposals, at least
    1 -- TF's ``_loss_box_classifier`` before its division by the batch size.

    Args:
      class_logits: ``[B, P, num_classes + 1]`` (softmax cross-entropy, column 0 background).
      box_encodings: ``[B, P, C', 4]`` (``C'`` = num_classes, or 1 when shared).
      targets: batched :func:`detection_targets`; valid: ``[B, P]`` bool.
    """
    v = valid.astype(jnp.float32)
    normalizer = jnp.maximum(jnp.sum(v, axis=1), 1.0)
    one_hot = jax.nn.one_hot(targets["classes"], class_logits.shape[-1])
    cls = losses.softmax_cross_entropy_loss(class_logits.astype(jnp.float32), one_hot)
    cls = cls * targets["weight"] * v
    pred = class_box_encodings(box_encodings.astype(jnp.float32), targets["classes"])
    loc = losses.smooth_l1_loss(pred, targets["box_targets"], delta=1.0)
    loc = loc * targets["box_weights"] * v
    return (jnp.sum(jnp.sum(cls, axis=1) / normalizer),
            jnp.sum(jnp.sum(loc, axis=1) / normalizer))


def class_masks(masks: jax.Array, classes: jax.Array) -> jax.Array:
    """``masks [..., C', h, w]`` -> ``[..., h, w]``: the mask of each box's own class
    (``classes`` 1-based as :func:`class_box_encodings`; 0 reads class 1's mask), or the one
    class-agnostic mask when ``C' == 1``."""
    if masks.shape[-3] == 1:
        return masks[..., 0, :, :]
    index = jnp.clip(classes - 1, 0, masks.shape[-3] - 1)
    return jnp.take_along_axis(masks, index[..., None, None, None], axis=-3)[..., 0, :, :]


def mask_targets(gt_masks: jax.Array, boxes: jax.Array, match: jax.Array,
                 mask_size: tuple[int, int], *, method: str = "gather") -> jax.Array:
    """Mask R-CNN's targets: each box's matched ground-truth mask cropped to the box and
    resized to ``mask_size`` (bilinear ``crop_and_resize``, TF's ``_crop_and_resize_fn`` on
    the groundtruth masks), gradients stopped.

    Args:
      gt_masks: ``[B, N, Hm, Wm]`` (0 / 1, any dtype) on the padded input's grid at any
        stride: a normalized box crops it as it crops the image.
      boxes: ``[B, K, 4]`` normalized (the proposals); match: ``[B, K]`` int, the ground-truth
        row of each box (any row where the box takes no part: weight its loss 0).
    Returns:
      ``[B, K, mask_size[0], mask_size[1]]`` float32 in [0, 1].
    """
    b, k = match.shape
    hm, wm = gt_masks.shape[2:]
    index = jnp.clip(match, 0, gt_masks.shape[1] - 1)
    chosen = jnp.take_along_axis(gt_masks, index[:, :, None, None], axis=1)  # [B, K, Hm, Wm]
    crops = matmul_crop_and_resize(chosen.reshape(b * k, hm, wm, 1).astype(jnp.float32),
                                   boxes.reshape(b * k, 1, 4).astype(jnp.float32),
                                   tuple(mask_size), method=method)
    return jax.lax.stop_gradient(crops.reshape(b, k, *mask_size))


def mask_loss(mask_logits: jax.Array, targets: jax.Array, weights: jax.Array) -> jax.Array:
    """Mask R-CNN's mask loss, as TF's ``_loss_box_classifier``: sigmoid cross-entropy of
    ``mask_logits [B, K, h, w]`` (each box's own-class logits) against ``targets`` (same
    shape, in [0, 1]), weighted by ``weights [B, K]`` (the positive proposals), summed and
    divided by ``max(sum(weights) * h * w, 1)``: the mean per pixel over the positives of the
    whole batch."""
    h, w = mask_logits.shape[-2:]
    ce = losses.weighted_sigmoid_loss(mask_logits.astype(jnp.float32), targets)
    total = jnp.sum(ce * weights[..., None, None])
    return total / jnp.maximum(jnp.sum(weights) * h * w, 1.0)


def per_class_nms(boxes: jax.Array, scores: jax.Array, *, score_threshold: float,
                  iou_threshold: float, max_detections_per_class: int,
                  max_total_detections: int) -> dict:
    """``core.nms.batched_nms`` for boxes of their own class: ``boxes [B, P, C', 4]`` (``C'``
    = C per-class boxes, or 1 shared), ``scores [B, P, C]`` -> the :func:`batched_nms`
    dict. Per class: greedy NMS over all P candidates; then the best ``max_total_detections``
    over classes."""
    boxes = boxes[:, :, 0] if boxes.shape[2] == 1 else boxes
    return batched_nms(boxes, scores, score_threshold=score_threshold,
                       iou_threshold=iou_threshold,
                       max_detections_per_class=max_detections_per_class,
                       max_total_detections=max_total_detections, pre_nms_top_k=scores.shape[1])


__all__ = ["class_box_encodings", "class_masks", "compact", "detection_losses",
           "detection_targets", "mask_loss", "mask_targets", "per_class_nms", "proposals",
           "rpn_losses", "rpn_targets"]
