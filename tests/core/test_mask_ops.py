"""Pasting per-box masks into the image equals the TF OD API's
``ops.reframe_box_masks_to_image_masks`` (fixture made by TensorFlow itself,
fixtures/make_mask_ops_tf.py; skipped when it is missing), eagerly and jitted, with both
``roi_ops`` back-ends; plus hand cases.

Equal means: within 2e-5, except at "knife edges", image pixels whose sample lands on the box
mask's first / last row or column up to float rounding, where the backend's rounding decides
whether the pixel is on the mask (its edge value) or off (0); there the two may disagree on
that and only on that (a handful of pixels in these fixtures, which put box edges on pixel
centers on purpose)."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core import mask_ops

FIXTURE = Path(__file__).parent / "fixtures" / "mask_ops_tf.npz"
ATOL = 2e-5
CASES = ["small", "rcnn", "one", "empty"]


@pytest.fixture(scope="module")
def tf_out():
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE.name} missing (make it with fixtures/make_mask_ops_tf.py)")
    return dict(np.load(FIXTURE))


def _inputs(tf_out, case):
    masks, boxes = tf_out[f"{case}_masks"], tf_out[f"{case}_boxes"]
    height, width = (int(v) for v in tf_out[f"{case}_size"])
    if case == "one":  # a 1x1 mask and a 1x4 mask: two calls
        return [(tf_out["one_mask1x1"], boxes[:1]), (masks[1:], boxes[1:])], height, width
    return [(masks, boxes)], height, width


def _knife_edges(masks: np.ndarray, boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """[N, H, W] bool: pixels whose sample lies on the box mask's first / last row or column up
    to float32 rounding (an image pixel center on a box edge), where TF's own rounding decides
    whether it is on the mask (value: the mask's edge) or off (0)."""
    b = boxes.astype(np.float64)
    h = np.maximum(b[:, 2] - b[:, 0], 1e-4)
    w = np.maximum(b[:, 3] - b[:, 1], 1e-4)
    out = []
    for lo, extent_box, size, m in ((b[:, 0], h, height, masks.shape[1]),
                                    (b[:, 1], w, width, masks.shape[2])):
        last = m - 1
        u = np.arange(size) / max(size - 1, 1) if size > 1 else np.full(1, 0.5)
        pos = (u[None, :] - lo[:, None]) / extent_box[:, None] * last
        tol = 1e-5 * (np.abs(lo / extent_box * last)[:, None] + np.abs(pos)) + 1e-4
        edge = (np.abs(pos) < tol) | (np.abs(pos - last) < tol)
        out.append(edge & (last > 0))  # a one-pixel mask: every sample is exactly on it
    return out[0][:, :, None] | out[1][:, None, :]


def _reframe(masks, boxes, height, width, method, jit):
    fn = functools.partial(mask_ops.reframe_box_masks_to_image_masks, image_height=height,
                           image_width=width, method=method)
    return np.asarray((jax.jit(fn) if jit else fn)(jnp.asarray(masks), jnp.asarray(boxes)))


@pytest.mark.parametrize(("case", "method", "jit"),
                         [(c, m, True) for c in CASES for m in ("matmul", "gather")]
                         + [("small", "matmul", False), ("rcnn", "gather", False)])
@pytest.mark.slow
def test_reframe_equals_tf(tf_out, case, method, jit):
    parts, height, width = _inputs(tf_out, case)
    got, edges = [], []
    for masks, boxes in parts:
        got.append(_reframe(masks, boxes, height, width, method, jit))
        edges.append(_knife_edges(masks, boxes, height, width))
    got, edges = np.concatenate(got), np.concatenate(edges)
    want = tf_out[f"{case}_image"]
    assert got.shape == want.shape == (len(want), height, width) and got.dtype == np.float32
    diff = np.abs(got - want)
    np.testing.assert_allclose(got[~edges], want[~edges], atol=ATOL, err_msg=case)
    # on a knife edge the two may only disagree about on / off: one of them is 0
    off = diff[edges] > ATOL
    assert np.all((got[edges][off] == 0) | (want[edges][off] == 0)), case
    assert off.sum() <= 25, (case, off.sum())
    binary = np.asarray(mask_ops.threshold_masks(jnp.asarray(got)))
    agree = binary == tf_out[f"{case}_binary"]
    assert agree[~edges].all() and binary.dtype == np.uint8


def test_image_corners_in_box_frame_by_hand():
    boxes = jnp.array([[0.25, 0.5, 0.75, 1.0], [0.5, 0.2, 0.5, 0.2]], jnp.float32)
    got = np.asarray(mask_ops.image_corners_in_box_frame(boxes))
    np.testing.assert_allclose(got[0], [-0.5, -1.0, 1.5, 1.0])
    np.testing.assert_allclose(got[1], [-5000.0, -2000.0, 5000.0, 8000.0], rtol=1e-5)


@pytest.mark.slow
def test_constant_mask_fills_its_box():
    """A mask of ones pastes to 1 on the image pixels whose centers lie inside the box (the
    first / last mask rows on the box's edges) and 0 elsewhere; uint8 masks are cast."""
    height, width = 11, 21
    boxes = jnp.array([[0.2, 0.25, 0.6, 0.75]], jnp.float32)  # rows 2..6, cols 5..15 (+ edge)
    got = np.asarray(mask_ops.reframe_box_masks_to_image_masks(
        jnp.ones((1, 4, 6), jnp.uint8), boxes, height, width))
    rows = np.arange(height) / (height - 1)
    cols = np.arange(width) / (width - 1)
    inside = ((rows >= 0.2 + 1e-6) & (rows <= 0.6 - 1e-6))[:, None] & (
        (cols >= 0.25 + 1e-6) & (cols <= 0.75 - 1e-6))[None, :]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[0][inside], 1.0, atol=1e-6)
    edge = ((np.abs(rows - 0.2) < 1e-6) | (np.abs(rows - 0.6) < 1e-6))[:, None] | (
        (np.abs(cols - 0.25) < 1e-6) | (np.abs(cols - 0.75) < 1e-6))[None, :]
    np.testing.assert_array_equal(got[0][~inside & ~edge], 0.0)
    assert np.all((got[0][edge] == 0) | (np.abs(got[0][edge] - 1) < 1e-6))


def test_threshold_is_strict():
    masks = jnp.array([[0.2, 0.5, 0.50001, 1.0]])
    np.testing.assert_array_equal(np.asarray(mask_ops.threshold_masks(masks)), [[0, 0, 1, 1]])
    np.testing.assert_array_equal(np.asarray(mask_ops.threshold_masks(masks, 0.1)),
                                  [[1, 1, 1, 1]])


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="box_masks"):
        mask_ops.reframe_box_masks_to_image_masks(jnp.zeros((2, 3, 3)), jnp.zeros((3, 4)), 5, 5)
    with pytest.raises(ValueError, match="positive"):
        mask_ops.reframe_box_masks_to_image_masks(jnp.zeros((1, 3, 3)), jnp.zeros((1, 4)), 0, 5)


def test_vmap_over_a_batch_of_images(tf_out):
    """[B, N, mh, mw] masks of a batch of images, one compile: each image as alone."""
    masks, boxes = tf_out["rcnn_masks"], tf_out["rcnn_boxes"]
    batch_masks = jnp.asarray(np.stack([masks, masks[::-1]]))
    batch_boxes = jnp.asarray(np.stack([boxes, boxes[::-1]]))
    fn = jax.jit(jax.vmap(functools.partial(mask_ops.reframe_box_masks_to_image_masks,
                                            image_height=48, image_width=64)))
    got = np.asarray(fn(batch_masks, batch_boxes))
    assert got.shape == (2, 5, 48, 64)
    np.testing.assert_allclose(got[0], tf_out["rcnn_image"], atol=ATOL)
    np.testing.assert_allclose(got[1], tf_out["rcnn_image"][::-1], atol=ATOL)
