"""Greedy NMS of one candidate set with static shapes, as a loop or as one primitive.

:func:`greedy_nms` is what ``core.nms`` calls per image and class. It traces the loop
(:func:`greedy_nms_loop`) unless the exporter forms ask for ``nms_as_op``
(:mod:`jaxdet.core.portable`); then it binds ``greedy_nms_p``, a primitive with the same
values whose XLA lowering *is* the loop, so jax runs it unchanged, while an exporter can map
it onto its runtime's own NMS kernel (ONNX ``NonMaxSuppression``)
instead of a data-dependent loop of small ops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from jaxdet.core import box_ops, portable
from jaxdet.core.portable import take_row


def greedy_nms_loop(boxes: jax.Array, scores: jax.Array, *, score_threshold: float,
                    iou_threshold: float, max_picks: int) -> tuple[jax.Array, jax.Array]:
    """Greedy NMS on one set of candidates ``boxes[k, 4]`` (ymin, xmin, ymax, xmax), ``scores[k]``.

    Returns ``(indices[max_picks] int32, valid[max_picks] bool)``. Each pick is the best
    remaining candidate with score > ``score_threshold`` (the first of equal scores);
    candidates with IoU > ``iou_threshold`` against it are then removed. One ``[k]`` IoU row
    per pick (no k x k matrix); stops early once nothing is left. Invalid slots hold 0.
    """
    k = scores.shape[0]
    remaining = jnp.where(scores > score_threshold, scores, -jnp.inf)
    positions = jnp.arange(k)
    slots = jnp.arange(max_picks)

    def cond(state):
        n, remaining, _ = state
        return (n < max_picks) & jnp.any(remaining > -jnp.inf)

    def body(state):
        n, remaining, indices = state
        best = jnp.argmax(remaining)
        overlap = box_ops.elementwise_iou(take_row(boxes, best)[None, :], boxes)
        suppress = (overlap > iou_threshold) | (positions == best)
        remaining = jnp.where(suppress, -jnp.inf, remaining)
        # a select, not a scatter: exporters (ONNX) lower it everywhere
        indices = jnp.where(slots == n, best.astype(jnp.int32), indices)
        return n + 1, remaining, indices

    init = (jnp.int32(0), remaining, jnp.zeros((max_picks,), jnp.int32))
    picked, _, indices = jax.lax.while_loop(cond, body, init)
    valid = slots < picked  # picks fill the slots in order
    return indices, valid


greedy_nms_p = Primitive("jaxdet_greedy_nms")
greedy_nms_p.multiple_results = True


def _loop_over_sets(boxes, scores, *, score_threshold, iou_threshold, max_picks):
    """The primitive's values: :func:`greedy_nms_loop` per set of ``boxes [*L, k, 4]``,
    ``scores [*L, k]`` -> ``indices, valid [*L, max_picks]``."""
    lead = scores.shape[:-1]
    fn = lambda b, s: greedy_nms_loop(b, s, score_threshold=score_threshold,  # noqa: E731
                                      iou_threshold=iou_threshold, max_picks=max_picks)
    for _ in lead:
        fn = jax.vmap(fn)
    return list(fn(boxes, scores))


def _abstract(boxes, scores, *, score_threshold, iou_threshold, max_picks):
    lead = scores.shape[:-1]
    return [jax.core.ShapedArray((*lead, max_picks), np.int32),
            jax.core.ShapedArray((*lead, max_picks), np.bool_)]


def _batch(args, dims, **params):
    """vmap: the mapped axis becomes one more leading set axis (None: not mapped)."""
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    boxes, scores = (jnp.moveaxis(x, d, 0) if d is not None
                     else jnp.broadcast_to(x, (size, *x.shape))
                     for x, d in zip(args, dims, strict=True))
    return greedy_nms_p.bind(boxes, scores, **params), (0, 0)


greedy_nms_p.def_impl(_loop_over_sets)
greedy_nms_p.def_abstract_eval(_abstract)
batching.primitive_batchers[greedy_nms_p] = _batch
mlir.register_lowering(greedy_nms_p, mlir.lower_fun(_loop_over_sets, multiple_results=True))


def greedy_nms(boxes: jax.Array, scores: jax.Array, *, score_threshold: float,
               iou_threshold: float, max_picks: int) -> tuple[jax.Array, jax.Array]:
    """:func:`greedy_nms_loop`'s values, traced as the loop or (``nms_as_op`` exporter form)
    as ``greedy_nms_p``."""
    params = dict(score_threshold=float(score_threshold), iou_threshold=float(iou_threshold),
                  max_picks=int(max_picks))
    if not portable.forms().nms_as_op:
        return greedy_nms_loop(boxes, scores, **params)
    indices, valid = greedy_nms_p.bind(boxes, scores, **params)
    return indices, valid


def greedy_nms_over_classes(boxes: jax.Array, scores: jax.Array, *, score_threshold: float,
                            iou_threshold: float, max_per_class: int,
                            max_total: int) -> tuple[jax.Array, jax.Array]:
    """Per-class greedy NMS of one image, merged by score, as one loop over the best picks.

    Args:
      boxes: ``[C, k, 4]`` (ymin, xmin, ymax, xmax) candidates of each class, or ``[k, 4]``
        shared by all classes.
      scores: ``[C, k]``.
    Returns:
      ``(picks[max_total] int32, valid[max_total] bool)``: flat indices into ``C * k``
      (class ``pick // k``, candidate ``pick % k``) by descending score; invalid slots hold 0.

    The values are those of :func:`greedy_nms_loop` run on each class (at most
    ``max_per_class`` picks) followed by a stable merge of all classes' picks by score (equal
    scores: lower class first, then pick order), cut to ``max_total``. One loop step picks
    the best remaining candidate of *any* class and suppresses within its class only, so the
    loop runs at most ``max_total`` steps, each with one ``[k]`` IoU row and one select over
    ``[C, k]``; running each class's loop instead computes ``C`` IoU rows per step.
    """
    num_classes, k = scores.shape
    remaining = jnp.where(scores > score_threshold, scores, -jnp.inf)
    classes = jnp.arange(num_classes)
    positions = jnp.arange(k)
    slots = jnp.arange(max_total)

    def cond(state):
        n, _, best_of_class, _, _ = state
        return (n < max_total) & jnp.any(best_of_class > -jnp.inf)

    def body(state):
        # Each class's best remaining score is kept, so a step scans C + k scores, not C * k.
        n, remaining, best_of_class, counts, picks = state
        cls = jnp.argmax(best_of_class).astype(jnp.int32)  # first class of equal scores
        row_scores = take_row(remaining, cls)
        pos = jnp.argmax(row_scores).astype(jnp.int32)
        row = (boxes if boxes.ndim == 2
               else take_row(boxes.reshape(num_classes, k * 4), cls).reshape(k, 4))
        overlap = box_ops.elementwise_iou(take_row(row, pos)[None, :], row)
        count = jnp.sum(jnp.where(classes == cls, counts, 0)) + 1
        suppress = (overlap > iou_threshold) | (positions == pos) | (count >= max_per_class)
        row_scores = jnp.where(suppress, -jnp.inf, row_scores)
        remaining = jax.lax.dynamic_update_slice(remaining, row_scores[None, :], (cls, 0))
        best_of_class = jnp.where(classes == cls, jnp.max(row_scores), best_of_class)
        counts = jnp.where(classes == cls, count, counts)
        picks = jnp.where(slots == n, cls * k + pos, picks)
        return n + 1, remaining, best_of_class, counts, picks

    init = (jnp.int32(0), remaining, jnp.max(remaining, axis=1),
            jnp.zeros((num_classes,), jnp.int32), jnp.zeros((max_total,), jnp.int32))
    picked, _, _, _, picks = jax.lax.while_loop(cond, body, init)
    return picks, slots < picked


__all__ = ["greedy_nms", "greedy_nms_loop", "greedy_nms_over_classes", "greedy_nms_p"]
