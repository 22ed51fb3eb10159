"""``core.portable``'s exporter forms compute the XLA forms' values exactly: pooling as
slices, rows as one-hot sums, greedy NMS as one primitive (and
that primitive as ONNX ``NonMaxSuppression`` in ONNX Runtime); the valid-first order of
``clip_to_window`` is a stable partition; ``fresh_trace`` makes jax trace again under the
forms in effect instead of reusing a cached trace."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core import nms, portable
from jaxdet.core.greedy_nms import greedy_nms, greedy_nms_loop
from jaxdet.core.nms import _valid_first_order


def _boxes(rng, shape):
    centre = rng.uniform(0, 1, (*shape, 2))
    size = rng.uniform(0.02, 0.4, (*shape, 2))
    return np.concatenate([centre - size / 2, centre + size / 2], -1).astype(np.float32)


@pytest.mark.parametrize("op, init", [(jax.lax.max, -np.inf), (jax.lax.add, 0.0)])
@pytest.mark.parametrize("window, strides, padding", [
    ((3, 3), (1, 1), "SAME"), ((3, 3), (2, 2), "SAME"), ((2, 2), (2, 2), "VALID"),
    ((3, 3), (2, 2), ((1, 0), (0, 1)))])
def test_pooling_as_slices_equals_reduce_window(op, init, window, strides, padding):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 9, 8, 3)), jnp.float32)
    want = portable.reduce_window_2d(x, init, op, window, strides, padding)
    with portable.exportable():
        got = portable.reduce_window_2d(x, init, op, window, strides, padding)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("window, strides, padding", [
    ((3, 3), (2, 2), ((1, 1), (1, 1))), ((3, 3), (2, 2), "SAME"), ((2, 2), (2, 2), "VALID"),
    ((3, 3), (1, 1), "SAME"), ((3, 2), (2, 3), ((1, 0), (0, 1)))])
def test_max_pool_gradient_is_select_and_scatters(window, strides, padding):
    """The CPU max pool's hand-written gradient sends each output's gradient to its window's
    first maximum, as autodiff's select_and_scatter does: ties (values rounded to halves)
    included, sizes that the stride does not divide, jitted and eager."""
    x = np.random.default_rng(0).normal(size=(2, 9, 11, 3))
    x = jnp.asarray(np.round(x * 2) / 2, jnp.float32)
    pads = [portable._pads(n, k, s, padding) for n, k, s in zip(
        x.shape[1:3], window, strides, strict=True)] if isinstance(padding, str) else padding

    def ref(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, *window, 1),
                                     (1, *strides, 1), ((0, 0), *pads, (0, 0)))

    def ours(x):
        return portable.reduce_window_2d(x, -float("inf"), jax.lax.max, window, strides,
                                         padding)

    grad = jnp.asarray(np.random.default_rng(1).normal(size=ref(x).shape), jnp.float32)
    want = jax.vjp(ref, x)[1](grad)[0]
    for fn in (ours, jax.jit(ours)):
        value, vjp = jax.vjp(fn, x)
        np.testing.assert_array_equal(value, ref(x))
        np.testing.assert_allclose(vjp(grad)[0], want, rtol=1e-6, atol=1e-6)


def test_row_as_sum_equals_indexing():
    matrix = jnp.asarray(np.random.default_rng(1).normal(size=(7, 4)), jnp.float32)
    with portable.exportable():
        rows = [portable.take_row(matrix, jnp.int32(i)) for i in range(7)]
    np.testing.assert_array_equal(np.stack(rows), matrix)


def test_valid_first_order_is_a_stable_partition():
    valid = np.random.default_rng(2).random((4, 30)) < 0.6
    got = np.asarray(_valid_first_order(jnp.asarray(valid)))
    np.testing.assert_array_equal(got, np.argsort(~valid, axis=1, kind="stable"))


def test_nms_primitive_equals_the_loop_jitted_and_vmapped():
    rng = np.random.default_rng(3)
    boxes = jnp.asarray(_boxes(rng, (2, 3, 50)))
    scores = jnp.asarray(rng.random((2, 3, 50)), jnp.float32)
    kw = dict(score_threshold=0.2, iou_threshold=0.4, max_picks=12)
    loop = jax.vmap(jax.vmap(lambda b, s: greedy_nms_loop(b, s, **kw)))
    with portable.exportable():
        op = jax.jit(jax.vmap(jax.vmap(lambda b, s: greedy_nms(b, s, **kw))))
        jaxpr = str(jax.make_jaxpr(op)(boxes, scores))
        got = op(boxes, scores)
    assert "jaxdet_greedy_nms" in jaxpr and "while" not in jaxpr
    for g, w in zip(got, loop(boxes, scores), strict=True):
        np.testing.assert_array_equal(g, w)


def test_fresh_trace_traces_again_under_the_forms_in_effect():
    x = jnp.zeros((1, 8, 8, 2))

    def fn(x):
        return portable.reduce_window_2d(x, -jnp.inf, jax.lax.max, (3, 3), (2, 2), "SAME")

    jax.jit(fn)(x)  # cached: a reduce_window
    with portable.exportable():
        cached = str(jax.make_jaxpr(jax.jit(fn))(x))
        fresh = str(jax.make_jaxpr(jax.jit(portable.fresh_trace(fn)))(x))
    assert "reduce_window" in cached  # why fresh_trace exists
    assert "reduce_window" not in fresh and "slice" in fresh


@pytest.mark.skipif(importlib.util.find_spec("jax2onnx") is None
                    or importlib.util.find_spec("onnxruntime") is None,
                    reason="ONNX export needs `make install-export`")
def test_onnx_non_max_suppression_equals_batched_nms():
    """The NMS primitive lowered to ONNX ``NonMaxSuppression`` and run in ONNX Runtime gives
    ``batched_nms``'s detections exactly, 40 classes, tied scores included (ONNX Runtime's
    kernel breaks ties in heap order: the lowering gives it distinct ranks)."""
    import onnxruntime as ort
    from jax2onnx import to_onnx

    from jaxdet.export import onnx_nms  # noqa: F401 - registers the lowering

    rng = np.random.default_rng(4)
    boxes = _boxes(rng, (2, 400))
    scores = (rng.random((2, 400, 40)) ** 4).astype(np.float32)
    scores[0, :6, 0] = 0.5  # ties
    scores[1, :, 3] = 0.25  # a whole class tied: which 30 of 400 are picked is the tie order
    kw = dict(score_threshold=1e-3, iou_threshold=0.5, max_detections_per_class=30,
              max_total_detections=60, pre_nms_top_k=200)

    def fn(b, s):
        return nms.batched_nms(b, s, **kw)

    want = jax.jit(fn)(boxes, scores)
    with portable.exportable():
        model = to_onnx(portable.fresh_trace(fn), [jax.ShapeDtypeStruct(boxes.shape, np.float32),
                                                   jax.ShapeDtypeStruct(scores.shape, np.float32)],
                        input_names=["b", "s"], return_mode="proto")
    assert "NonMaxSuppression" in {n.op_type for n in model.graph.node}
    assert "Loop" not in {n.op_type for n in model.graph.node}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"b": boxes, "s": scores})
    for name, value in zip(sorted(want), got, strict=True):  # outputs in sorted-key order
        np.testing.assert_array_equal(value, want[name], err_msg=name)
