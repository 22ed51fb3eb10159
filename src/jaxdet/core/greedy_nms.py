"""Greedy NMS of one candidate set with static shapes, as a loop or as one primitive.

:func:`greedy_nms` is what ``core.nms`` calls per image and class. It traces the loop
(:func:`greedy_nms_loop`) unless the exporter forms ask for ``nms_as_op``
(:mod:`jaxdet.core.portable`); then it binds ``greedy_nms_p``, a primitive with the same
values whose XLA lowering *is* the loop, so jax runs it unchanged, while an exporter can map
it onto its runtime's own NMS kernel (ONNX ``NonMaxSuppression``: ``jaxdet.export.onnx_nms``)
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


__all__ = ["greedy_nms", "greedy_nms_loop", "greedy_nms_p"]
