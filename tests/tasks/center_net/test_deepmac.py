"""DeepMAC's pure pieces (``tasks.center_net.deepmac_ops``) on tiny hand-computed cases,
eagerly and jitted: the coordinate channels, the embedding at a box's center, the mask
network's input (crop, channel order), the ground-truth mask crops, the allowed-class filter
and the mask loss."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdet.tasks.center_net import deepmac_ops as dm


def test_coordinate_grid_runs_from_minus_one_to_one_y_then_x(run):
    grid = run(dm.coordinate_grid, size=3)
    assert grid.shape == (3, 3, 2)
    np.testing.assert_allclose(grid[..., 0], [[-1, -1, -1], [0, 0, 0], [1, 1, 1]])
    np.testing.assert_allclose(grid[..., 1], [[-1, 0, 1], [-1, 0, 1], [-1, 0, 1]])


def test_box_center_embeddings_floor_the_center_and_clip_to_the_map(run):
    # a 4x4 map whose channel 0 is the pixel index y * 4 + x and channel 1 its negative
    index = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    embedding = np.stack([index, -index], axis=-1)
    boxes = np.array([[[0.0, 0.0, 0.5, 0.5],     # center 0.25 * 4 = 1 -> (1, 1)
                       [0.5, 0.5, 1.0, 1.0],     # 0.75 * 4 = 3 -> (3, 3)
                       [1.0, 1.0, 1.0, 1.0],     # 4 -> clipped to (3, 3)
                       [0.0, 0.25, 0.2, 0.75],   # y 0.1 * 4 = 0.4 -> 0; x 0.5 * 4 = 2
                       [0.0, 0.0, 0.0, 0.0]]],   # a padded box: (0, 0)
                     np.float32)
    out = run(dm.box_center_embeddings, embedding, boxes)
    assert out.shape == (1, 5, 2)
    np.testing.assert_array_equal(out[0, :, 0], [5, 15, 15, 2, 0])
    np.testing.assert_array_equal(out[0, :, 1], [-5, -15, -15, -2, 0])


@pytest.mark.slow
def test_mask_head_inputs_are_xy_then_the_crop_then_the_tiled_center_embedding(run):
    # 3x3 pixel embedding (2 channels) and instance embedding (3 channels); a whole-map box
    # samples rows / columns 0, 1, 2: the crop is the map itself; its center is pixel (1, 1)
    pixel = np.arange(18, dtype=np.float32).reshape(1, 3, 3, 2)
    instance = np.arange(27, dtype=np.float32).reshape(1, 3, 3, 3) + 100.0
    boxes = np.array([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]]], np.float32)
    out = run(dm.mask_head_inputs, pixel, instance, boxes, mask_size=3)
    assert out.shape == (1, 2, 3, 3, 2 + 2 + 3)
    assert dm.mask_input_channels(2, 3, use_xy=True, use_instance_embedding=True) == 7
    np.testing.assert_allclose(out[0, 0, ..., :2], dm.coordinate_grid(3))
    np.testing.assert_allclose(out[0, 0, ..., 2:4], pixel[0])
    np.testing.assert_allclose(out[0, 0, ..., 4:], np.broadcast_to(instance[0, 1, 1], (3, 3, 3)))
    # the top-left quarter box: samples at 0, 0.5, 1 (of y * (3 - 1)), bilinear
    col = np.array([0.0, 0.5, 1.0])
    expected = (col[:, None] * 3 + col[None, :]) * 2  # channel 0 of the map is 2 (3 y + x)
    np.testing.assert_allclose(out[0, 1, ..., 2], expected, atol=1e-6)
    np.testing.assert_allclose(out[0, 1, ..., 4:],  # center 0.25 * 3 = 0.75 -> pixel (0, 0)
                               np.broadcast_to(instance[0, 0, 0], (3, 3, 3)))


@pytest.mark.parametrize("use_xy, use_instance, channels", [
    (False, True, 2 + 3), (True, False, 2 + 2), (False, False, 2)])
@pytest.mark.slow
def test_mask_head_inputs_leave_out_what_is_switched_off(run, use_xy, use_instance, channels):
    pixel = np.arange(18, dtype=np.float32).reshape(1, 3, 3, 2)
    instance = np.ones((1, 3, 3, 3), np.float32)
    boxes = np.array([[[0.0, 0.0, 1.0, 1.0]]], np.float32)
    out = run(dm.mask_head_inputs, pixel, instance, boxes, mask_size=3, use_xy=use_xy,
              use_instance_embedding=use_instance)
    assert out.shape[-1] == channels == dm.mask_input_channels(
        2, 3, use_xy=use_xy, use_instance_embedding=use_instance)
    first = 2 if use_xy else 0
    np.testing.assert_allclose(out[0, 0, ..., first:first + 2], pixel[0])


@pytest.mark.slow
def test_crop_instance_masks_crops_each_box_from_its_own_mask(run):
    masks = np.zeros((1, 2, 4, 4), np.uint8)
    masks[0, 0, :2, :2] = 1      # instance 0: the top-left 2x2
    masks[0, 1, :, 2:] = 1       # instance 1: the right half
    boxes = np.array([[[0.0, 0.0, 1.0, 1.0],            # samples rows / cols 0 and 3
                       [0.0, 0.0, 1 / 3, 2 / 3]]],      # rows 0, 1; cols 0, 2
                     np.float32)
    out = run(dm.crop_instance_masks, masks, boxes, mask_size=2)
    assert out.shape == (1, 2, 2, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0], [[1, 0], [0, 0]], atol=1e-6)
    np.testing.assert_allclose(out[0, 1], [[0, 1], [0, 1]], atol=1e-6)


def test_allowed_class_weights_zero_the_other_classes(run):
    classes = np.array([[0, 1, 2, 1]], np.int32)
    weights = np.array([[1.0, 1.0, 1.0, 0.0]], np.float32)  # the last box is padding
    out = run(dm.allowed_class_weights, classes, weights, allowed=(1, 2))
    np.testing.assert_array_equal(out, [[0, 1, 1, 0]])
    np.testing.assert_array_equal(run(dm.allowed_class_weights, classes, weights, allowed=()),
                                  weights)


def test_mask_loss_sum_is_the_weighted_sum_of_per_box_pixel_means(run):
    # logit 2 everywhere: a pixel with target 1 costs log(1 + e^-2) = 0.126928, target 0
    # costs 2 + log(1 + e^-2) = 2.126928; box 0 has one positive pixel of 4, box 1 none
    logits = np.full((1, 3, 2, 2), 2.0, np.float32)
    targets = np.zeros((1, 3, 2, 2), np.float32)
    targets[0, 0, 0, 0] = 1.0
    weights = np.array([[1.0, 0.5, 0.0]], np.float32)
    soft = np.log1p(np.exp(-2.0))
    box0 = (soft + 3 * (2.0 + soft)) / 4
    box1 = 2.0 + soft
    out = run(dm.mask_loss_sum, logits, targets, weights)
    np.testing.assert_allclose(out, box0 + 0.5 * box1, rtol=1e-6)
    np.testing.assert_allclose(box0, 1.626928, rtol=1e-6)
    # logits 0: ln 2 per pixel whatever the target
    zero = run(dm.mask_loss_sum, np.zeros_like(logits), targets, np.ones((1, 3), np.float32))
    np.testing.assert_allclose(zero, 3 * np.log(2.0), rtol=1e-6)
