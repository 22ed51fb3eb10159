"""``greedy_nms_p`` in ONNX: the ``NonMaxSuppression`` operator, padded back to static picks.

Importing this module registers the lowering with jax2onnx (``export_onnx`` does). Each set
of the primitive's leading axes (an image x class in ``core.nms.batched_nms``) becomes one
"batch" of ``NonMaxSuppression`` with one class, so every set keeps its own boxes:

    boxes [*L, k, 4] -> [N, k, 4];  scores [*L, k] -> [N, k]            (N = prod(L))
    sorted by score (TopK, ties to the lower index); ranks k, k-1, ... (0 if <= threshold)
    selected [M, 3] = NonMaxSuppression(sorted boxes, ranks, P, iou, 0.5)  (set, 0, position)
    slot of row r = r - (rows of earlier sets)   (rows come grouped by set, in pick order)
    indices [N, P] = order[ScatterND(zeros, (set, slot), position)];  valid = slot < picks

ONNX Runtime's kernel suppresses IoU > the IoU threshold (computed in the loop's order of
float operations) and picks in descending score: :func:`greedy_nms_loop`'s rule. It breaks
ties of equal scores in heap order, which is why it is given distinct ranks instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from jax2onnx.plugins._ir_shapes import _ensure_value_metadata, _stamp_type_and_shape
from jax2onnx.plugins.plugin_system import PrimitiveLeafPlugin, register_primitive

from jaxdet.core.greedy_nms import greedy_nms_p

_I64, _F32, _BOOL, _I32 = (ir.DataType.INT64, ir.DataType.FLOAT, ir.DataType.BOOL,
                           ir.DataType.INT32)


@register_primitive(jaxpr_primitive=greedy_nms_p.name, jax_doc="jaxdet.core.greedy_nms",
                    onnx=[{"component": "NonMaxSuppression",
                           "doc": "https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html"}],
                    since="jaxdet", context="primitives.jaxdet", component="greedy_nms",
                    testcases=[])
class GreedyNmsPlugin(PrimitiveLeafPlugin):
    """Lowers ``jaxdet_greedy_nms`` to ONNX ``NonMaxSuppression`` (see the module doc)."""

    def lower(self, ctx: Any, eqn: Any) -> None:
        p = eqn.params
        boxes_var, scores_var = eqn.invars
        indices_var, valid_var = eqn.outvars
        lead = tuple(scores_var.aval.shape[:-1])
        k, picks = scores_var.aval.shape[-1], int(p["max_picks"])
        n = int(np.prod(lead, dtype=np.int64))
        # the selected count's symbolic dim, one per NMS node: ONNX Runtime treats equal
        # dim names as equal sizes (and two NMS nodes select different numbers of boxes)
        m = ctx.fresh_name("nms_selected")

        made: dict[int, Any] = {}

        def op(name: str, *inputs, dtype, shape, _index: int | None = None,
               **attrs) -> ir.Value:
            """One ONNX node (``_index``: that output of a two-output node, made once)."""
            if _index is None:
                out = getattr(ctx.builder, name)(*inputs, **attrs,
                                                  _outputs=[ctx.fresh_name(f"nms_{name}")])
            else:
                key = id(inputs[0])
                if key not in made:
                    made[key] = getattr(ctx.builder, name)(
                        *inputs, **attrs, _outputs=[ctx.fresh_name(f"nms_{name}_{i}")
                                                    for i in range(2)])
                out = made[key][_index]
            out.type = ir.TensorType(dtype)
            _stamp_type_and_shape(out, shape)
            _ensure_value_metadata(ctx, out)
            return out

        def const(value, dtype) -> ir.Value:
            return ctx.bind_const_for_var(object(), np.asarray(value, dtype=dtype))

        boxes = ctx.get_value_for_var(boxes_var, name_hint=ctx.fresh_name("nms_boxes"))
        scores = ctx.get_value_for_var(scores_var, name_hint=ctx.fresh_name("nms_scores"))
        boxes = op("Reshape", boxes, const([n, k, 4], np.int64), dtype=_F32, shape=(n, k, 4))
        scores = op("Reshape", scores, const([n, k], np.int64), dtype=_F32, shape=(n, k))
        # ONNX Runtime pops equal scores in heap order; the loop takes the lower index. So NMS
        # sees the candidates sorted (TopK: ties to the lower index) with distinct rank scores
        # k, k-1, ... (0 below the threshold), and picks map back through the sort.
        ordered, order = (op("TopK", scores, const([k], np.int64), axis=1, largest=1,
                             sorted=1, dtype=d, shape=(n, k), _index=i)
                          for i, d in ((0, _F32), (1, _I64)))
        boxes = op("GatherND", boxes, op("Unsqueeze", order, const([2], np.int64), dtype=_I64,
                                          shape=(n, k, 1)),
                   batch_dims=1, dtype=_F32, shape=(n, k, 4))
        above = op("Greater", ordered, const([p["score_threshold"]], np.float32), dtype=_BOOL,
                   shape=(n, k))
        ranks = op("Where", above, const(np.arange(k, 0, -1, dtype=np.float32)[None], np.float32),
                   const([0.0], np.float32), dtype=_F32, shape=(n, k))
        ranks = op("Reshape", ranks, const([n, 1, k], np.int64), dtype=_F32, shape=(n, 1, k))
        selected = op("NonMaxSuppression", boxes, ranks, const([picks], np.int64),
                      const([p["iou_threshold"]], np.float32), const([0.5], np.float32),
                      center_point_box=0, dtype=_I64, shape=(m, 3))
        sets = op("Gather", selected, const(0, np.int64), axis=1, dtype=_I64, shape=(m,))
        box = op("Gather", selected, const(2, np.int64), axis=1, dtype=_I64, shape=(m,))
        rows = op("Shape", selected, start=0, end=1, dtype=_I64, shape=(1,))
        ones = op("Expand", const(1, np.int64), rows, dtype=_I64, shape=(m,))
        counts = op("ScatterElements", const(np.zeros(n), np.int64), sets, ones, axis=0,
                    reduction="add", dtype=_I64, shape=(n,))
        first = op("CumSum", counts, const(0, np.int64), exclusive=1, dtype=_I64, shape=(n,))
        row = op("Range", const(0, np.int64), op("Squeeze", rows, dtype=_I64, shape=()),
                 const(1, np.int64), dtype=_I64, shape=(m,))
        slot = op("Sub", row, op("Gather", first, sets, axis=0, dtype=_I64, shape=(m,)),
                  dtype=_I64, shape=(m,))
        where = op("Concat", op("Unsqueeze", sets, const([1], np.int64), dtype=_I64,
                                shape=(m, 1)),
                   op("Unsqueeze", slot, const([1], np.int64), dtype=_I64, shape=(m, 1)),
                   axis=1, dtype=_I64, shape=(m, 2))
        picked = op("ScatterND", const(np.zeros((n, picks)), np.int64), where, box,
                    dtype=_I64, shape=(n, picks))  # positions in the sorted order
        valid = op("Less", const(np.arange(picks)[None, :], np.int64),
                   op("Unsqueeze", counts, const([1], np.int64), dtype=_I64, shape=(n, 1)),
                   dtype=_BOOL, shape=(n, picks))
        picked = op("Where", valid, op("GatherElements", order, picked, axis=1, dtype=_I64,
                                       shape=(n, picks)),
                    const([0], np.int64), dtype=_I64, shape=(n, picks))
        indices = op("Cast", op("Reshape", picked, const([*lead, picks], np.int64),
                                dtype=_I64, shape=(*lead, picks)),
                     to=int(_I32.value), dtype=_I32, shape=(*lead, picks))
        valid = op("Reshape", valid, const([*lead, picks], np.int64), dtype=_BOOL,
                   shape=(*lead, picks))
        ctx.bind_value_for_var(indices_var, indices)
        ctx.bind_value_for_var(valid_var, valid)


__all__ = ["GreedyNmsPlugin"]
