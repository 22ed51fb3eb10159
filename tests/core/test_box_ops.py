import jax
import numpy as np

from jaxdet.core import box_ops

# Two unit boxes overlapping by half, one disjoint, one degenerate (zero area).
B1 = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 2.0]], np.float32)
B2 = np.array([[0.0, 0.5, 1.0, 1.5], [5.0, 5.0, 6.0, 6.0], [0.5, 0.5, 0.5, 0.5]], np.float32)


def test_area(run):
    np.testing.assert_allclose(run(box_ops.area, B1), [1.0, 4.0])
    np.testing.assert_allclose(run(box_ops.area, B2[None]), [[1.0, 1.0, 0.0]])


def test_intersection_iou_ioa(run):
    inter = run(box_ops.intersection, B1, B2)
    np.testing.assert_allclose(inter, [[0.5, 0.0, 0.0], [1.0, 0.0, 0.0]])
    iou = run(box_ops.iou, B1, B2)
    # 0.5 / (1 + 1 - 0.5) and 1 / (4 + 1 - 1); degenerate column: 0 / 4 and 0 / 1 -> 0.
    np.testing.assert_allclose(iou, [[1 / 3, 0.0, 0.0], [0.25, 0.0, 0.0]], rtol=1e-6)
    ioa = run(box_ops.ioa, B1, B2)
    # intersection / area(b2); area(b2) = 0 for the degenerate box -> 0, not NaN.
    np.testing.assert_allclose(ioa, [[0.5, 0.0, 0.0], [1.0, 0.0, 0.0]])


def test_iou_zero_union_is_zero(run):
    z = np.zeros((1, 4), np.float32)
    np.testing.assert_array_equal(run(box_ops.iou, z, z), [[0.0]])


def test_elementwise_iou_and_giou(run):
    a = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]], np.float32)
    b = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.5, 1.0, 1.5], [0.0, 2.0, 1.0, 3.0]], np.float32)
    np.testing.assert_allclose(run(box_ops.elementwise_iou, a, b), [1.0, 1 / 3, 0.0], rtol=1e-6)
    # giou: identical -> 1; half overlap: enclosing 1.5 = union -> 1/3;
    # disjoint with a gap: enclosing 3, union 2 -> 0 - 1/3.
    np.testing.assert_allclose(run(box_ops.giou, a, b), [1.0, 1 / 3, -1 / 3], rtol=1e-6)
    z = np.zeros((4,), np.float32)
    assert float(run(box_ops.giou, z, z)) == 0.0


def test_giou_gradient_finite_for_degenerate_boxes():
    z = np.zeros((2, 4), np.float32)
    g = jax.jit(jax.grad(lambda x: box_ops.giou(x, z).sum()))(z)
    assert np.all(np.isfinite(np.asarray(g)))


def test_center_size_round_trip(run):
    yc, xc, h, w = run(box_ops.to_center_size, B1)
    np.testing.assert_allclose(yc, [0.5, 1.0])
    np.testing.assert_allclose(xc, [0.5, 1.0])
    np.testing.assert_allclose(h, [1.0, 2.0])
    np.testing.assert_allclose(w, [1.0, 2.0])
    np.testing.assert_allclose(run(box_ops.from_center_size, yc, xc, h, w), B1)


def test_yxyx_to_xywh(run):
    boxes = np.array([[1.0, 2.0, 4.0, 7.0]], np.float32)
    np.testing.assert_allclose(run(box_ops.yxyx_to_xywh, boxes), [[2.0, 1.0, 5.0, 3.0]])


def test_clip_to_window(run):
    window = np.array([0.0, 0.0, 1.0, 1.0], np.float32)
    boxes = np.array([[-0.5, 0.2, 0.5, 1.5], [2.0, 2.0, 3.0, 3.0]], np.float32)
    out = run(box_ops.clip_to_window, boxes, window)
    np.testing.assert_allclose(out, [[0.0, 0.2, 0.5, 1.0], [1.0, 1.0, 1.0, 1.0]])
