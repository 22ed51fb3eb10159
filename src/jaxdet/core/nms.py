"""Score conversion and static-shape, batched, multi-class greedy NMS."""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp

from jaxdet.backends.dispatch import top_k_per_class
from jaxdet.core import portable
from jaxdet.core.greedy_nms import greedy_nms, greedy_nms_over_classes


def convert_scores(
    logits: jnp.ndarray,
    converter: Literal["identity", "sigmoid", "softmax"],
    logit_scale: float = 1.0,
    has_background: bool = False,
) -> jnp.ndarray:
    """Logits ``[..., K]`` -> scores ``[..., C]``: divide by ``logit_scale``, convert, and
    drop column 0 (background) after conversion when ``has_background``."""
    x = logits.astype(jnp.float32) / logit_scale
    if converter == "identity":
        scores = x
    elif converter == "sigmoid":
        scores = jax.nn.sigmoid(x)
    elif converter == "softmax":
        scores = jax.nn.softmax(x, axis=-1)
    else:
        raise ValueError(f"converter={converter!r}; allowed: identity, sigmoid, softmax")
    return scores[..., 1:] if has_background else scores


def non_max_suppression(
    boxes: jnp.ndarray,
    scores: jnp.ndarray,
    *,
    max_output_size: int,
    iou_threshold: float,
    score_threshold: float = -float("inf"),
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Greedy single-class NMS over all of ``boxes[k, 4]``, ``scores[k]`` (as
    ``tf.image.non_max_suppression``).

    Returns ``(indices[max_output_size] int32, valid[max_output_size] bool)`` in selection
    order (descending score). A candidate needs a score > ``score_threshold`` (the default
    takes every finite score; NaN never); IoU > ``iou_threshold`` with a pick suppresses it.
    Invalid slots hold index 0.
    """
    return greedy_nms(
        boxes.astype(jnp.float32),
        scores.astype(jnp.float32),
        score_threshold=score_threshold,
        iou_threshold=iou_threshold,
        max_picks=int(max_output_size),
    )


def _nms_one_set(boxes, scores, *, top_k, score_threshold, iou_threshold, max_picks):
    """Top-k candidates, then greedy NMS -> ``(boxes[P, 4], scores[P], index[P])``.

    ``index`` points into the original ``A`` axis; invalid picks have box 0, score -inf.
    """
    top_scores, top_idx = jax.lax.top_k(scores, top_k)
    top_boxes = jnp.take(boxes, top_idx, axis=0)
    picks, valid = greedy_nms(
        top_boxes,
        top_scores,
        score_threshold=score_threshold,
        iou_threshold=iou_threshold,
        max_picks=max_picks,
    )
    out_scores = jnp.where(valid, jnp.take(top_scores, picks), -jnp.inf)
    out_boxes = jnp.where(valid[:, None], jnp.take(top_boxes, picks, axis=0), 0.0)
    return out_boxes, out_scores, jnp.take(top_idx, picks)


def top_k_mask(scores: jnp.ndarray, k: int) -> jnp.ndarray:
    """Which entries of ``scores [..., A]`` (float32) ``lax.top_k(scores, k)`` picks along the
    last axis, as a bool mask of the same shape (ties at the k-th value: lower index first).

    The k-th largest value is found by bisection over the floats' order-preserving uint32 keys
    (32 counting passes, no sort), then ties at it are filled in index order.
    """
    bits = jax.lax.bitcast_convert_type(scores.astype(jnp.float32), jnp.uint32)
    keys = jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(0x80000000))

    def halve(_, bounds):  # invariant: at least k keys >= lo; the k-th key is <= hi
        lo, hi = bounds
        gap = hi - lo
        mid = lo + (gap >> 1) + (gap & 1)
        enough = jnp.sum(keys >= mid[..., None], axis=-1) >= k
        return jnp.where(enough, mid, lo), jnp.where(enough, hi, mid - 1)

    batch = scores.shape[:-1]
    kth, _ = jax.lax.fori_loop(0, 32, halve, (jnp.zeros(batch, jnp.uint32),
                                              jnp.full(batch, 0xFFFFFFFF, jnp.uint32)))
    above = keys > kth[..., None]
    ties = keys == kth[..., None]
    room = k - jnp.sum(above, axis=-1, keepdims=True)
    return above | (ties & (jnp.cumsum(ties, axis=-1) <= room))


def batched_nms(
    boxes: jnp.ndarray,
    scores: jnp.ndarray,
    *,
    score_threshold: float,
    iou_threshold: float,
    max_detections_per_class: int,
    max_total_detections: int,
    class_agnostic: bool = False,
    pre_nms_top_k: int = 1000,
) -> dict[str, jnp.ndarray]:
    """Per-class greedy NMS with static shapes.

    Args:
      boxes: ``[B, A, 4]`` decoded boxes (shared by all classes), or ``[B, A, C, 4]``: each
        class's own box (Faster R-CNN's second stage; not with ``class_agnostic``).
      scores: ``[B, A, C]`` per-class scores (background already dropped).

    Per image and class: the top ``min(A, pre_nms_top_k)`` candidates by score (with ties, the
    lower anchor first, as ``lax.top_k``), greedy NMS
    (at most ``max_detections_per_class`` picks; a score must be > ``score_threshold``;
    IoU > ``iou_threshold`` suppresses); then all classes merged and the best
    ``D = max_total_detections`` kept. ``class_agnostic``: one NMS per image on the max
    score over classes (at most ``D`` picks), class = its argmax.

    Returns ``boxes[B, D, 4]``, ``scores[B, D]``, ``classes[B, D]`` int32 (0-based),
    ``num_detections[B]`` int32; sorted by descending score, zeros past ``num_detections``.
    """
    boxes = boxes.astype(jnp.float32)
    scores = scores.astype(jnp.float32)
    _, num_anchors, num_classes = scores.shape
    top_k = min(num_anchors, pre_nms_top_k)
    d = max_total_detections
    nms_kwargs = dict(top_k=top_k, score_threshold=score_threshold, iou_threshold=iou_threshold)

    if class_agnostic:
        if boxes.ndim != 3:
            raise ValueError("class_agnostic NMS needs boxes shared by the classes [B, A, 4]")
        picks = min(d, top_k)
        best_classes = jnp.argmax(scores, axis=-1).astype(jnp.int32)  # [B, A]
        cand_boxes, cand_scores, cand_idx = jax.vmap(
            lambda b, s: _nms_one_set(b, s, max_picks=picks, **nms_kwargs)
        )(boxes, jnp.max(scores, axis=-1))
        cand_classes = jnp.take_along_axis(best_classes, cand_idx, axis=1)
    else:
        limits = dict(score_threshold=score_threshold, iou_threshold=iou_threshold)
        class_boxes = boxes[:, None] if boxes.ndim == 3 else jnp.swapaxes(boxes, 1, 2)
        masked = 2 * top_k >= num_anchors and portable.forms() == portable.Forms()
        if not portable.forms().nms_as_op and (top_k == num_anchors or masked):
            # The candidates are most anchors: NMS over every anchor with the ones outside the
            # top-k masked (a k-th-value search, ~8x faster on XLA:CPU than top_k's sort and
            # gather; XLA only, exported graphs keep top_k); shared boxes stay shared
            class_scores = jnp.swapaxes(scores, 1, 2)
            if top_k < num_anchors:
                class_scores = jnp.where(top_k_mask(class_scores, top_k), class_scores, -jnp.inf)
            picks, valid = _over_classes(class_boxes[:, 0] if boxes.ndim == 3 else class_boxes,
                                         class_scores, d=d,
                                         max_per_class=max_detections_per_class, **limits)
            anchor, cls = picks % num_anchors, picks // num_anchors
            flat_boxes = (boxes if boxes.ndim == 3 else
                          boxes.reshape(-1, num_anchors * num_classes, 4))
            box_index = anchor if boxes.ndim == 3 else anchor * num_classes + cls
            return _detections(
                jnp.take_along_axis(flat_boxes, box_index[..., None], axis=1),
                jnp.take_along_axis(scores.reshape(-1, num_anchors * num_classes),
                                    anchor * num_classes + cls, axis=1), cls, valid)
        top_scores, top_idx = top_k_per_class(scores, top_k)  # [B, C, k]
        top_boxes = jnp.take_along_axis(class_boxes, top_idx[..., None], axis=2)
        if not portable.forms().nms_as_op:
            picks, valid = _over_classes(top_boxes, top_scores, d=d,
                                         max_per_class=max_detections_per_class, **limits)
            return _detections(
                jnp.take_along_axis(top_boxes.reshape(-1, num_classes * top_k, 4),
                                    picks[..., None], axis=1),
                jnp.take_along_axis(top_scores.reshape(-1, num_classes * top_k), picks, axis=1),
                picks // top_k, valid)
        # An exporter's NMS kernel runs per class (ONNX NonMaxSuppression); merge after.
        per_class = min(max_detections_per_class, top_k)
        picks, valid = greedy_nms(top_boxes, top_scores, max_picks=per_class, **limits)
        batch = boxes.shape[0]
        cand_boxes = jnp.take_along_axis(top_boxes, picks[..., None], axis=2)
        cand_boxes = cand_boxes.reshape(batch, num_classes * per_class, 4)
        cand_scores = jnp.where(valid, jnp.take_along_axis(top_scores, picks, axis=2), -jnp.inf)
        cand_scores = cand_scores.reshape(batch, num_classes * per_class)
        cand_classes = jnp.broadcast_to(
            jnp.repeat(jnp.arange(num_classes, dtype=jnp.int32), per_class)[None],
            cand_scores.shape,
        )

    # Merge: keep the best D candidates (padding with invalid entries when fewer exist).
    num_cand = cand_scores.shape[1]
    if num_cand < d:
        pad = d - num_cand
        cand_scores = jnp.pad(cand_scores, ((0, 0), (0, pad)), constant_values=-jnp.inf)
        cand_boxes = jnp.pad(cand_boxes, ((0, 0), (0, pad), (0, 0)))
        cand_classes = jnp.pad(cand_classes, ((0, 0), (0, pad)))
    top_scores, top_idx = jax.lax.top_k(cand_scores, d)
    return _detections(jnp.take_along_axis(cand_boxes, top_idx[..., None], axis=1), top_scores,
                       jnp.take_along_axis(cand_classes, top_idx, axis=1),
                       top_scores > -jnp.inf)


def _over_classes(boxes, scores, *, d, **kwargs):
    """:func:`greedy_nms_over_classes` per image of ``boxes [B, ..., 4]``, ``scores [B, C, k]``.

    The images are not vmapped: under a vmap the loop's row update becomes a scatter, which
    XLA:CPU and TFLite run as a copy of all B x C x k scores per step (MobileNet SSD at batch
    8: about half of the predict call). So on a CPU XLA runs the images one after another
    (``lax.map``). On a GPU the vmap stays: there each turn of the loop hands its condition
    back to the host, so B images in turn cost B times the turns (Faster R-CNN's proposals at
    batch 8: the device idle a third of the train step), and a scatter costs little. One image,
    and each image under the ``nms_per_image`` exporter form, is traced on its own. Other
    exporter forms keep the vmap."""
    nms = functools.partial(greedy_nms_over_classes, max_total=d, **kwargs)
    if scores.shape[0] == 1 or portable.forms().nms_per_image:
        per_image = [nms(boxes[i], scores[i]) for i in range(scores.shape[0])]
        return tuple(jnp.stack(parts) for parts in zip(*per_image, strict=True))
    if portable.forms() == portable.Forms():
        return jax.lax.platform_dependent(
            boxes, scores, cpu=lambda b, s: jax.lax.map(lambda args: nms(*args), (b, s)),
            default=jax.vmap(nms))
    return jax.vmap(nms)(boxes, scores)


def _detections(boxes, scores, classes, valid) -> dict[str, jnp.ndarray]:
    """``boxes [B, D, 4]``, ``scores``, ``classes``, ``valid [B, D]`` (valid first, by score)
    -> :func:`batched_nms`'s dict, zeros in the invalid slots."""
    return {
        "boxes": jnp.where(valid[..., None], boxes, 0.0),
        "scores": jnp.where(valid, scores, 0.0),
        "classes": jnp.where(valid, classes, 0).astype(jnp.int32),
        "num_detections": jnp.sum(valid, axis=1).astype(jnp.int32),
    }


def _valid_first_order(valid: jnp.ndarray) -> jnp.ndarray:
    """int32 [B, D]: the permutation putting the ``valid [B, D]`` entries first, each group in
    its own order (a stable partition). Counted with cumulative sums, not sorted: TFLite has no
    sort op."""
    v = valid.astype(jnp.int32)
    before_valid = jnp.cumsum(v, axis=1) - v  # valid entries before each one
    before_invalid = jnp.cumsum(1 - v, axis=1) - (1 - v)
    rank = jnp.where(valid, before_valid, jnp.sum(v, axis=1, keepdims=True) + before_invalid)
    slots = jnp.arange(valid.shape[1], dtype=jnp.int32)
    return jnp.argmax(rank[:, None, :] == slots[None, :, None], axis=2).astype(jnp.int32)


def clip_to_window(detections: dict[str, jnp.ndarray], window: jnp.ndarray) -> dict:
    """TF OD API's post-NMS clipping: clip each detection box to ``window`` and drop the boxes
    left with zero area (they move behind the valid ones; the order stays by score).

    Args:
      detections: :func:`batched_nms` output (``boxes [B, D, 4]`` normalized yxyx, ``scores``,
        ``classes``, ``num_detections``).
      window: ``[B, 4]`` (ymin, xmin, ymax, xmax) in the same frame: the image's content in the
        padded input.
    Returns:
      The same dict layout.
    """
    boxes = detections["boxes"]
    low = jnp.tile(window[:, None, :2], (1, 1, 2))  # (ymin, xmin, ymin, xmin)
    high = jnp.tile(window[:, None, 2:], (1, 1, 2))  # (ymax, xmax, ymax, xmax)
    clipped = jnp.clip(boxes, low, high)
    d = boxes.shape[1]
    valid = jnp.arange(d)[None, :] < detections["num_detections"][:, None]
    area = (clipped[..., 2] - clipped[..., 0]) * (clipped[..., 3] - clipped[..., 1])
    valid = valid & (area > 0)
    order = _valid_first_order(valid)
    take = lambda x: jnp.take_along_axis(x, order if x.ndim == 2 else order[..., None], axis=1)  # noqa: E731
    valid = take(valid.astype(jnp.int32)) > 0  # gathered as ints: ONNX Runtime has no bool Where
    return {
        "boxes": jnp.where(valid[..., None], take(clipped), 0.0),
        "scores": jnp.where(valid, take(detections["scores"]), 0.0),
        "classes": jnp.where(valid, take(detections["classes"]), 0).astype(jnp.int32),
        "num_detections": jnp.sum(valid, axis=1).astype(jnp.int32),
    }
