"""Segmentation losses, the Dice metric and sliding-window inference against hand-computed
values (``tasks.unet3d.segmentation``), jitted and eager."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.tasks.unet3d import segmentation as seg
from random_arrays import normal


def _both(fn, *args):
    """``fn(*args)`` eager and jitted, checked equal; returns the eager result."""
    eager = fn(*args)
    np.testing.assert_allclose(jax.jit(fn)(*args), eager, rtol=1e-6, atol=1e-7)
    return np.asarray(eager)


def test_hard_dice_of_a_tiny_volume():
    # one example, D=1, H=2, W=2; label / prediction per voxel:
    #   label [[0, 1], [1, 2]]   prediction [[0, 1], [2, 2]]
    # class 0: P = T = {(0,0)} -> 1; class 1: |P & T| = 1, |P| = 1, |T| = 2 -> 2/3;
    # class 2: |P & T| = 1, |P| = 2, |T| = 1 -> 2/3; class 3 in neither -> 1.0
    labels = jnp.array([[[[0, 1], [1, 2]]]], jnp.int32)
    preds = jnp.array([[[[0, 1], [2, 2]]]], jnp.int32)
    fg = _both(lambda p, t: seg.dice_scores(p, t, 3), preds, labels)
    np.testing.assert_allclose(fg, [[2 / 3, 2 / 3]], rtol=1e-6)
    every = _both(lambda p, t: seg.dice_scores(p, t, 4, include_background=True), preds,
                  labels)
    np.testing.assert_allclose(every, [[1.0, 2 / 3, 2 / 3, 1.0]], rtol=1e-6)


def test_hard_dice_of_a_class_predicted_but_absent_is_zero():
    labels = jnp.zeros((2, 1, 1, 3), jnp.int32)
    preds = jnp.array([[[[0, 0, 1]]], [[[0, 0, 0]]]], jnp.int32)
    # example 0: class 1 predicted once, never labelled -> 0; example 1: empty both -> 1
    np.testing.assert_allclose(seg.dice_scores(preds, labels, 2), [[0.0], [1.0]])


def test_soft_dice_and_cross_entropy_by_hand():
    # two voxels, K = 2: labels [1, 0]; probabilities of class 1: 0.8 and 0.4
    p1 = np.array([0.8, 0.4])
    logits = jnp.asarray(np.log(np.stack([1 - p1, p1], -1)).reshape(1, 1, 1, 2, 2),
                         jnp.float32)
    labels = jnp.array([1, 0], jnp.int32).reshape(1, 1, 1, 2)
    s = seg.DICE_SMOOTH
    dice1 = (2 * 0.8 + s) / (1.2 + 1.0 + s)  # I = 0.8, sum p = 1.2, sum t = 1
    dice0 = (2 * 0.6 + s) / (0.8 + 1.0 + s)  # I = 0.6, sum p = 0.8, sum t = 1
    np.testing.assert_allclose(_both(seg.soft_dice_scores, logits, labels), [[dice1]],
                               rtol=1e-6)
    np.testing.assert_allclose(_both(seg.soft_dice_loss, logits, labels), [1 - dice1],
                               rtol=1e-5)
    with_bg = _both(lambda x, t: seg.soft_dice_loss(x, t, include_background=True), logits,
                    labels)
    np.testing.assert_allclose(with_bg, [1 - (dice0 + dice1) / 2], rtol=1e-5)
    ce = -(math.log(0.8) + math.log(0.6)) / 2
    np.testing.assert_allclose(_both(seg.cross_entropy_loss, logits, labels), [ce], rtol=1e-6)


def test_soft_dice_of_a_perfect_confident_prediction_is_one():
    labels = jnp.array([[[[0, 1], [2, 1]]]], jnp.int32)
    logits = 30.0 * jax.nn.one_hot(labels, 3)
    np.testing.assert_allclose(seg.soft_dice_loss(logits, labels), [0.0], atol=1e-6)
    assert float(seg.cross_entropy_loss(logits, labels)[0]) < 1e-6


def test_gaussian_map_is_symmetric_with_its_peak_at_the_centre():
    g = seg.gaussian_importance_map((5, 6, 7))
    assert g.shape == (5, 6, 7) and g.dtype == np.float32
    for axis in range(3):
        np.testing.assert_array_equal(g, np.flip(g, axis))
    assert g.max() == pytest.approx(1.0, abs=1e-6)
    assert g.min() > 0
    # even side 6: the two central voxels share the peak
    assert np.unravel_index(np.argmax(g), g.shape)[::2] == (2, 3)
    assert g[2, 2, 3] == g[2, 3, 3] == g.max()
    cube = seg.gaussian_importance_map((5, 5, 5))
    assert np.unravel_index(np.argmax(cube), cube.shape) == (2, 2, 2)
    # sigma = 0.125 * 5 = 0.625: one voxel off the centre along one axis
    assert cube[2, 2, 3] == pytest.approx(math.exp(-0.5 * (1 / 0.625) ** 2), rel=1e-6)


def test_window_starts_by_hand():
    assert seg.window_starts(10, 4, 0.5) == (0, 2, 4, 6)
    assert seg.window_starts(12, 4, 0.5) == (0, 2, 4, 6, 8)
    assert seg.window_starts(10, 4, 0.0) == (0, 3, 6)
    assert seg.window_starts(4, 4, 0.5) == (0,)
    # 128-voxel patches over a 300-voxel axis: n = ceil(172 / 64) + 1 = 4, step 172 / 3
    assert seg.window_starts(300, 128, 0.5) == (0, 57, 115, 172)
    with pytest.raises(ValueError, match="larger than the axis"):
        seg.window_starts(3, 4)


@pytest.mark.parametrize("overlap", [0.0, 0.25, 0.5, 0.75])
def test_windows_cover_the_axis_with_the_overlap(overlap):
    for size in range(8, 60, 3):
        for patch in (4, 8, 7):
            if patch > size:
                continue
            starts = seg.window_starts(size, patch, overlap)
            covered = np.zeros(size, bool)
            for s in starts:
                covered[s:s + patch] = True
            assert covered.all() and starts[0] == 0 and starts[-1] == size - patch
            gaps = np.diff(starts)
            assert (gaps <= math.ceil(patch * (1 - overlap))).all(), (size, patch, starts)


def test_positions_are_the_product_of_the_axes():
    assert seg.sliding_window_positions((6, 4, 10), (4, 4, 4), 0.5) == [
        (z, 0, x) for z in (0, 2) for x in (0, 2, 4, 6)]


@pytest.mark.parametrize("shape,batch_size", [((6, 5, 7), 1), ((6, 5, 7), 3),
                                              ((3, 5, 2), 2), ((4, 4, 4), 1)])
def test_sliding_window_of_the_identity_reproduces_the_input(shape, batch_size):
    """A predictor returning its patch as logits: every window agrees on every voxel, so the
    blend is softmax(volume) exactly where it lies (windows misplaced would not match), also
    for volumes smaller than the patch (padded, cropped back) and partial window groups."""
    volume = normal(0, (*shape, 3))

    def run(v):
        return seg.sliding_window_inference(lambda x: x, v, (4, 4, 4), batch_size=batch_size)

    out = jax.jit(run)(volume)
    assert out.shape == (*shape, 3)
    np.testing.assert_allclose(out, jax.nn.softmax(volume, axis=-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(volume), out, rtol=1e-5, atol=1e-6)


def test_blending_constant_predictions_is_constant():
    logits = jnp.array([1.0, 2.0, 3.0])

    def constant(patches):
        return jnp.broadcast_to(logits, (*patches.shape[:-1], 3)) + 0.0 * patches

    volume = jnp.zeros((9, 6, 11, 1))
    out = jax.jit(lambda v: seg.sliding_window_inference(constant, v, (4, 4, 4),
                                                         batch_size=2))(volume)
    assert out.shape == (9, 6, 11, 3)
    expected = np.broadcast_to(np.asarray(jax.nn.softmax(logits)), out.shape)
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_gaussian_weights_favour_the_window_centre():
    """Two windows over a 6-voxel axis (starts 0 and 2), predicting class 0 and class 1 with
    certainty: each voxel's probability follows the Gaussian weights of the two windows."""
    def by_position(patches):  # the first window votes class 0, the second class 1
        first = patches[:, :1, :1, :1, :1] < 0.5
        return jnp.where(first, jnp.array([20.0, 0.0]), jnp.array([0.0, 20.0])) + 0.0 * patches

    volume = jnp.zeros((6, 4, 4, 1)).at[2:].set(1.0)  # the second window starts on ones
    out = seg.sliding_window_inference(by_position, volume, (4, 4, 4), batch_size=1)
    g = seg.gaussian_importance_map((4, 4, 4))[:, 0, 0]  # both windows' weights along z
    w0 = np.concatenate([g, [0, 0]])
    w1 = np.concatenate([[0, 0], g])
    np.testing.assert_allclose(out[:, 0, 0, 1], w1 / (w0 + w1), rtol=1e-4, atol=1e-6)
