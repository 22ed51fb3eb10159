"""Mask R-CNN's pure pieces on hand-computed cases: the mask targets (the matched ground-truth
mask cropped to the proposal), the mask loss (TF's per-pixel mean over the positives), the
own-class mask, TF's automatic head depth, the align-corners resize and the head's shapes."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.tasks.faster_rcnn import ops as frcnn
from jaxdet.tasks.faster_rcnn.model import (
    MaskHead,
    mask_prediction_conv_depth,
    resize_bilinear_align_corners,
)


def _square_masks(size: int = 16) -> np.ndarray:
    """Two ground-truth masks [1, 2, size, size]: row 0 empty, row 1 an 8x8 square at rows
    4..11, columns 8..15 (the image's right edge)."""
    masks = np.zeros((1, 2, size, size), np.uint8)
    masks[0, 1, 4:12, 8:16] = 1
    return masks


@pytest.mark.parametrize("method", ["gather", "matmul"])
@pytest.mark.slow
def test_mask_target_of_a_proposal_over_the_squares_left_half_is_half_ones(method):
    """Normalized y maps to the row y * (16 - 1): a proposal over rows 4..11 and columns
    4..11 covers 4 background columns and the square's left half, so its 8x8 target (one
    sample per pixel) is 0 in its left 4 columns and 1 in its right 4; the proposal that is
    the square is all ones; a proposal matched to the empty mask is all zeros."""
    boxes = jnp.array([[[4 / 15, 4 / 15, 11 / 15, 11 / 15],
                        [4 / 15, 8 / 15, 11 / 15, 1.0],
                        [4 / 15, 8 / 15, 11 / 15, 1.0]]])
    match = jnp.array([[1, 1, 0]])
    t = np.asarray(frcnn.mask_targets(jnp.asarray(_square_masks()), boxes, match, (8, 8),
                                      method=method))
    assert t.shape == (1, 3, 8, 8) and t.dtype == np.float32
    expected = np.zeros((8, 8), np.float32)
    expected[:, 4:] = 1.0
    np.testing.assert_allclose(t[0, 0], expected, atol=1e-5)
    assert abs(t[0, 0].mean() - 0.5) < 1e-5
    np.testing.assert_allclose(t[0, 1], np.ones((8, 8)), atol=1e-5)
    np.testing.assert_allclose(t[0, 2], np.zeros((8, 8)), atol=1e-6)


@pytest.mark.slow
def test_mask_targets_at_a_coarser_stride_use_the_same_normalized_box():
    """The batch keeps masks at H / mask_stride: the 16x16 square mask at stride 2 (8x8,
    square at rows 2..5, columns 4..7) and a 4x4 crop of the proposal over the left half
    (rows 2..5, columns 2..5 at that grid: normalized 2/7 .. 5/7) is again half ones."""
    coarse = _square_masks()[:, :, ::2, ::2]
    boxes = jnp.array([[[2 / 7, 2 / 7, 5 / 7, 5 / 7]]])
    t = np.asarray(frcnn.mask_targets(jnp.asarray(coarse), boxes, jnp.array([[1]]), (4, 4)))
    expected = np.zeros((4, 4), np.float32)
    expected[:, 2:] = 1.0
    np.testing.assert_allclose(t[0, 0], expected, atol=1e-5)


@pytest.mark.slow
def test_mask_loss_is_the_per_pixel_mean_over_the_positives():
    """Two positives of 1x2 pixels and one padding slot, targets (1, 0): box 0 has logits
    (ln 3, -ln 3), sigmoids (3/4, 1/4): -log(3/4) twice; box 1 logits (ln 3, ln 3):
    -log(3/4) - log(1/4); the padding slot (weight 0, huge logits) adds nothing; divided by
    2 boxes x 2 pixels."""
    ln3 = math.log(3)
    logits = jnp.array([[[[ln3, -ln3]], [[ln3, ln3]], [[50.0, -50.0]]]])
    targets = jnp.array([[[[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 1.0]]]])
    weights = jnp.array([[1.0, 1.0, 0.0]])
    expected = (3 * math.log(4 / 3) + math.log(4)) / 4
    np.testing.assert_allclose(frcnn.mask_loss(logits, targets, weights), expected, rtol=1e-6)
    # no positives: 0, not 0 / 0
    assert float(frcnn.mask_loss(logits, targets, jnp.zeros((1, 3)))) == 0.0
    # the gradient, (sigmoid - target) / 4, reaches only the weighted boxes' logits
    g = jax.grad(lambda x: frcnn.mask_loss(x, targets, weights))(logits)
    np.testing.assert_allclose(g[0, :2, 0], [[-1 / 16, 1 / 16], [-1 / 16, 3 / 16]], atol=1e-7)
    assert np.all(np.asarray(g[0, 2]) == 0)


def test_class_masks_pick_each_boxs_own_class_or_the_agnostic_mask():
    masks = jnp.arange(2 * 3 * 2 * 2, dtype=jnp.float32).reshape(1, 2, 3, 2, 2)
    own = frcnn.class_masks(masks, jnp.array([[3, 1]]))  # 1-based classes
    np.testing.assert_array_equal(own[0, 0], masks[0, 0, 2])
    np.testing.assert_array_equal(own[0, 1], masks[0, 1, 0])
    agnostic = frcnn.class_masks(masks[:, :, :1], jnp.array([[3, 1]]))
    np.testing.assert_array_equal(agnostic, masks[:, :, 0])


def test_tf_automatic_mask_depth_and_align_corners_resize():
    """TF's ``_get_mask_predictor_conv_depth``: 2048 channels, 90 classes -> 2^round((2 * 11 +
    3 * log2 90) / 5) = 2^8; the resize keeps the corners and puts midpoints between."""
    assert mask_prediction_conv_depth(2048, 90) == 256
    assert mask_prediction_conv_depth(1024, 1) == 16  # 2^round(20 / 5)
    x = jnp.array([[0.0, 2.0], [4.0, 6.0]])[None, :, :, None]
    y = resize_bilinear_align_corners(x, (3, 3))[0, :, :, 0]
    np.testing.assert_allclose(y, [[0, 1, 2], [2, 3, 4], [4, 5, 6]], atol=1e-6)


@pytest.mark.parametrize("convolve_then_upsample", [False, True])
@pytest.mark.slow
def test_mask_head_shapes(convolve_then_upsample):
    head = MaskHead(8, 3, mask_height=8, mask_width=12, depth=4, num_conv_layers=3,
                    convolve_then_upsample=convolve_then_upsample, upsample=(2, 3),
                    rngs=nnx.Rngs(0))
    out = head(jnp.ones((5, 4, 4, 8)))
    assert out.shape == (5, 3, 8, 12)
    agnostic = MaskHead(8, 3, mask_height=8, mask_width=8, depth=4, num_conv_layers=1,
                        class_agnostic=True, rngs=nnx.Rngs(0))
    assert agnostic(jnp.ones((5, 4, 4, 8))).shape == (5, 1, 8, 8)
