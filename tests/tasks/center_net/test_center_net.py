"""CenterNet's pure functions equal the TF OD API's (fixture made by TensorFlow itself,
fixtures/make_center_net_tf_fixture.py), plus what can be checked by hand: static padding, the
loss at a known point, peaks on plateaus."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.tasks.center_net import targets as cn

TF = np.load(Path(__file__).parent / "fixtures" / "center_net_tf.npz")


def test_max_distance_for_overlap_equals_tf():
    got = cn.max_distance_for_overlap(TF["sizes"][:, 0], TF["sizes"][:, 1], 0.7)
    np.testing.assert_allclose(got, TF["max_distance"], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_center_heatmap_equals_tf_and_ignores_padding():
    boxes, classes = jnp.asarray(TF["boxes"]), jnp.asarray(TF["classes"])
    valid = jnp.ones(len(boxes), bool)
    got = jax.jit(lambda b, c, v: cn.center_heatmap_targets(b, c, v, (16, 20), 3))(
        boxes, classes, valid)
    np.testing.assert_allclose(got, TF["heatmap"], atol=1e-6)
    assert float(got.max()) == 1.0
    # three padding rows (any values) change nothing
    padded = jnp.concatenate([boxes, jnp.full((3, 4), 0.5)])
    got_padded = cn.center_heatmap_targets(
        padded, jnp.concatenate([classes, jnp.zeros(3, jnp.int32)]),
        jnp.concatenate([valid, jnp.zeros(3, bool)]), (16, 20), 3)
    np.testing.assert_array_equal(got_padded, got)
    empty = cn.center_heatmap_targets(padded, jnp.zeros(10, jnp.int32), jnp.zeros(10, bool),
                                      (16, 20), 3)
    assert not np.any(np.asarray(empty))


def test_size_and_offset_targets_equal_tf():
    pixels, sizes, offsets = cn.size_and_offset_targets(jnp.asarray(TF["boxes"]), (16, 20))
    np.testing.assert_array_equal(pixels, TF["target_pixels"])
    np.testing.assert_allclose(sizes, TF["target_sizes"], atol=1e-5)
    np.testing.assert_allclose(offsets, TF["target_offsets"], atol=1e-5)
    # by hand: box 0 is rows 1.6..6.4, cols 2..6 of the 16x20 map: center (4.0, 4.0)
    assert pixels[0].tolist() == [4, 4]
    np.testing.assert_allclose(sizes[0], [4.8, 4.0], atol=1e-5)


def test_penalty_reduced_focal_loss_equals_tf_and_by_hand():
    got = cn.penalty_reduced_focal_loss(TF["loss_logits"], TF["heatmap"].reshape(1, -1, 3))
    np.testing.assert_allclose(got, TF["loss"], rtol=1e-5, atol=1e-6)
    # a positive pixel at logit 0 (p = 0.5): -(0.5)^2 log 0.5; a negative one with target
    # 0.5: -(0.5)^4 (0.5)^2 log 0.5
    one = cn.penalty_reduced_focal_loss(jnp.zeros(2), jnp.array([1.0, 0.5]))
    np.testing.assert_allclose(one, [0.25 * np.log(2), 0.0625 * 0.25 * np.log(2)], rtol=1e-6)


@pytest.mark.slow
def test_top_k_peaks_and_decoded_boxes_equal_tf():
    scores, y, x, c = jax.jit(lambda m: cn.top_k_peaks(m, 25))(jnp.asarray(TF["peak_map"]))
    np.testing.assert_allclose(scores, TF["peak_scores"], atol=1e-7)
    np.testing.assert_array_equal(y, TF["peak_y"])
    np.testing.assert_array_equal(x, TF["peak_x"])
    np.testing.assert_array_equal(c, TF["peak_class"])
    # by hand: a 2x2 plateau is four peaks (ties in flat-index order); a pixel next to a
    # higher one is not a peak
    heat = np.zeros((1, 6, 6, 2), np.float32)
    heat[0, 1:3, 1:3, 0] = 0.5
    heat[0, 4, 4, 1], heat[0, 4, 5, 1] = 0.9, 0.7
    scores1, y1, x1, c1 = cn.top_k_peaks(jnp.asarray(heat), 6)
    np.testing.assert_allclose(scores1[0], [0.9, 0.5, 0.5, 0.5, 0.5, 0.0])
    assert list(zip(y1[0].tolist()[:5], x1[0].tolist()[:5], c1[0].tolist()[:5],
                    strict=True)) == [
        (4, 4, 1), (1, 1, 0), (1, 2, 0), (2, 1, 0), (2, 2, 0)]
    boxes = cn.decode_boxes(y, x, jnp.asarray(TF["size_map"]), jnp.asarray(TF["offset_map"]))
    np.testing.assert_allclose(boxes, TF["decoded"], atol=1e-5)
