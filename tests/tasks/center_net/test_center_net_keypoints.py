"""CenterNet's keypoint functions equal the TF OD API's (fixture made by TensorFlow itself,
fixtures/make_center_net_keypoints_tf.py: TF got the unpadded objects, jaxdet gets them padded
to 8 rows), plus what can be checked by hand: padding rows change nothing, the sparse rows
follow TF's order, jit equals eager."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.tasks.center_net import keypoint_ops as ck

TF = np.load(Path(__file__).parent / "fixtures" / "center_net_keypoints_tf.npz")
OUT_HW = (16, 20)
TASK = dict(class_index=0, slots=(2, 0, 1), output_size=OUT_HW)
K = 3
GT = tuple(jnp.asarray(TF[f"gt_{name}"]) for name in
           ("boxes", "classes", "valid", "keypoints", "visibility"))
CONFIGS = [(0, False), (0, True), (2, False), (2, True)]


def _jit(fn, **static):
    """``fn`` jitted with its keyword arguments static; outputs as numpy."""
    jitted = jax.jit(functools.partial(fn, **static))
    return lambda *args: jax.tree.map(np.asarray, jitted(*args))


def _tag(radius, per_kp):
    return f"r{radius}_{'per' if per_kp else 'shared'}"


@functools.cache
def _heatmap_targets():
    fn = jax.jit(jax.vmap(functools.partial(ck.keypoint_heatmap_targets, std_dev=(1.0, 0.5, 2.0),
                                            **TASK)))
    return jax.tree.map(np.asarray, fn(*GT))


@functools.cache
def _offset_targets(radius, per_kp):
    fn = functools.partial(ck.keypoint_offset_targets, peak_radius=radius,
                           per_keypoint_offset=per_kp, **TASK)
    return jax.tree.map(np.asarray, jax.jit(jax.vmap(fn))(*GT[1:]))


@functools.cache
def _regression_targets(radius):
    fn = functools.partial(ck.keypoint_regression_targets, peak_radius=radius, **TASK)
    return jax.tree.map(np.asarray, jax.jit(jax.vmap(fn))(*GT))


def _split_tf_rows(prefix, tag, nn):
    """TF's concatenated rows, split per image (n_i * k * nn rows each)."""
    counts = TF["gt_num"] * K * nn
    starts = np.concatenate([[0], np.cumsum(counts)])
    return [tuple(TF[f"{prefix}_{part}_{tag}"][starts[i]:starts[i + 1]]
                  for part in ("indices", "offsets", "weights")) for i in range(len(counts))]


def test_neighbor_offsets_as_tf():
    assert ck.neighbor_offsets(0) == ((0,), (0,))
    dy, dx = ck.neighbor_offsets(1)
    assert list(zip(dy, dx, strict=True)) == [(-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)]
    assert len(ck.neighbor_offsets(2)[0]) == 13


def test_heatmap_targets_equal_tf():
    heat, num, mask = _heatmap_targets()
    np.testing.assert_allclose(heat, TF["heatmap"], atol=1e-6)
    np.testing.assert_array_equal(num, TF["num_instances"])
    np.testing.assert_array_equal(mask, TF["valid_mask"])
    # the fixture exercises what it should: 1.0 at keypoint pixels, blacked-out boxes (other
    # class, weight 0, keypoint not labelled) in some channels only
    assert heat.max() == 1.0 and num.tolist() == [[3, 2, 3], [1, 1, 1]]
    # by hand (image 0, channels = slots 2, 0, 1): object 1 (rows 5..12, columns 7..13) lacks
    # slot 0 only; object 4 (valid False: TF's zero-weight instance) blacks out its box in
    # every channel, as does object 5 (nothing labelled); padding rows (empty boxes) nothing
    assert mask[0, 11, 8].tolist() == [1, 0, 1]
    assert not mask[0, 9:16, 1:6].any() and not mask[0, 1, 15:19].any()
    # image 1: exactly the box of its class-1 object (rows 2..14, columns 2..9) is out
    assert not mask[1, 2:15, 2:10].any() and mask[1].sum() == (16 * 20 - 13 * 8) * K


def test_heatmap_targets_ignore_padding_rows():
    heat, num, mask = _heatmap_targets()
    n = int(TF["gt_num"][1])
    got = _jit(ck.keypoint_heatmap_targets, std_dev=(1.0, 0.5, 2.0), **TASK)(
        *(g[1, :n] for g in GT))
    for a, b in zip(got, (heat[1], num[1], mask[1]), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("radius", "per_kp"), CONFIGS)
def test_offset_targets_equal_tf_row_by_row(radius, per_kp):
    nn = len(ck.neighbor_offsets(radius)[0])
    indices, offsets, weights = _offset_targets(radius, per_kp)
    assert indices.shape == (2, 8 * K * nn, 3)
    for b, (tf_idx, tf_off, tf_w) in enumerate(_split_tf_rows("offset", _tag(radius, per_kp),
                                                              nn)):
        m = len(tf_w)
        np.testing.assert_array_equal(tf_idx[:, 0], b)
        np.testing.assert_array_equal(indices[b, :m, :2], tf_idx[:, 1:3])
        np.testing.assert_array_equal(indices[b, :m, 2],
                                      tf_idx[:, 3] if per_kp else np.zeros(m))
        np.testing.assert_allclose(offsets[b, :m], tf_off, atol=1e-5)
        np.testing.assert_array_equal(weights[b, :m], tf_w)
        assert not np.any(weights[b, m:])  # padding rows
    # object 3's keypoints on the border lose their pixel at radius 0 and most neighbours
    # at radius 2 (the third keeps 8 of 13 next to the corner)
    w3 = weights[0].reshape(8, K, nn)[3]
    assert w3.sum(axis=1).tolist() == {0: [1, 0, 0], 2: [8, 3, 3]}[radius]


@pytest.mark.parametrize("radius", [0, 2])
def test_regression_targets_equal_tf_row_by_row(radius):
    nn = len(ck.neighbor_offsets(radius)[0])
    indices, offsets, weights = _regression_targets(radius)
    for b, (tf_idx, tf_off, tf_w) in enumerate(_split_tf_rows("regression", f"r{radius}", nn)):
        m = len(tf_w)
        np.testing.assert_array_equal(tf_idx[:, 0], b)
        np.testing.assert_array_equal(indices[b, :m], tf_idx[:, 1:])
        np.testing.assert_allclose(offsets[b, :m], tf_off, atol=1e-5)
        np.testing.assert_array_equal(weights[b, :m], tf_w)
        assert not np.any(weights[b, m:])


def test_losses_equal_tf():
    heat, num, mask = _heatmap_targets()
    got = _jit(ck.keypoint_heatmap_loss)(TF["heatmap_logits"], heat, mask, num,
                                         TF["pixel_weights"])
    np.testing.assert_allclose(got, TF["heatmap_loss"], rtol=1e-5)
    for radius, per_kp in CONFIGS:
        tag = _tag(radius, per_kp)
        got = _jit(ck.keypoint_offset_loss)(TF[f"offset_pred_{tag}"],
                                            *_offset_targets(radius, per_kp))
        np.testing.assert_allclose(got, TF[f"offset_loss_{tag}"], rtol=1e-5, err_msg=tag)
    for radius in (0, 2):
        got = _jit(ck.keypoint_regression_loss)(TF["regression_pred"],
                                                *_regression_targets(radius))
        np.testing.assert_allclose(got, TF[f"regression_loss_r{radius}"], rtol=1e-5)


@pytest.mark.parametrize("name", ["shared", "per"])
def test_keypoint_candidates_equal_tf(name):
    offsets = TF["cand_offsets2" if name == "shared" else "cand_offsets6"]
    coords, scores, num = _jit(ck.keypoint_candidates, max_candidates=8, score_threshold=0.3)(
        TF["cand_heat"], offsets)
    np.testing.assert_allclose(coords, TF[f"cand_coords_{name}"], atol=1e-6)
    np.testing.assert_array_equal(scores, TF[f"cand_scores_{name}"])
    np.testing.assert_array_equal(num, TF[f"cand_num_{name}"])
    assert 0 < num.min() and num.max() < 8  # some candidates below the threshold


def test_keypoint_candidates_pad_small_maps_as_tf():
    coords, scores, num = _jit(ck.keypoint_candidates, max_candidates=6, score_threshold=0.3,
                               kernel=1)(TF["tiny_heat"], TF["tiny_offsets"])
    np.testing.assert_allclose(coords, TF["tiny_coords"], atol=1e-6)
    np.testing.assert_array_equal(scores, TF["tiny_scores"])
    np.testing.assert_array_equal(num, TF["tiny_num"])


def test_regressed_keypoints_equal_tf():
    centers = TF["centers"]
    got = _jit(ck.regressed_keypoints_at_centers)(TF["regression_map"], centers[..., 0],
                                                  centers[..., 1])
    np.testing.assert_allclose(got, TF["regressed"], atol=1e-6)


@pytest.mark.parametrize("mode", ["min_distance", "score_distance_ratio"])
@pytest.mark.parametrize("with_boxes", [True, False])
def test_refine_keypoints_equal_tf(mode, with_boxes):
    tag = f"{mode}_{'boxes' if with_boxes else 'noboxes'}"
    kps, scores = _jit(ck.refine_keypoints, ranking_mode=mode, score_threshold=0.3)(
        TF["regressed"], TF["cand_coords_per"], TF["cand_scores_per"], TF["cand_num_per"],
        TF["det_boxes"] if with_boxes else None)
    np.testing.assert_allclose(kps, TF[f"refined_{tag}"], atol=1e-6)
    np.testing.assert_allclose(scores, TF[f"refined_scores_{tag}"], atol=1e-7)
    snapped = np.asarray(scores) != np.float32(0.1)
    if with_boxes:  # some keypoints snap, some keep their regression
        assert 0 < snapped.mean() < 1
    else:  # without boxes only a score below the threshold keeps the regression
        assert snapped.all()


def test_ranking_modes_differ_somewhere():
    a = TF["refined_min_distance_noboxes"]
    b = TF["refined_score_distance_ratio_noboxes"]
    assert not np.array_equal(a, b)


@pytest.mark.slow
def test_jit_equals_eager():
    """Every function, op by op and under one jit (targets of one image, the rest batched)."""
    def everything(gt, heat_map, offsets6, regression, centers, boxes):
        heat, num, mask = ck.keypoint_heatmap_targets(*gt, std_dev=(1.0, 0.5, 2.0), **TASK)
        off = ck.keypoint_offset_targets(*gt[1:], peak_radius=2, per_keypoint_offset=True,
                                         **TASK)
        reg = ck.keypoint_regression_targets(*gt, peak_radius=2, **TASK)
        batch = functools.partial(jax.tree.map, lambda a: a[None])
        losses = (ck.keypoint_heatmap_loss(*batch((heat - 0.5, heat, mask, num))),
                  ck.keypoint_offset_loss(jnp.full((1, *OUT_HW, 2 * K), 0.5), *batch(off)),
                  ck.keypoint_regression_loss(jnp.zeros((1, *OUT_HW, 2 * K)), *batch(reg)))
        cands = ck.keypoint_candidates(heat_map, offsets6, max_candidates=8,
                                       score_threshold=0.3)
        regressed = ck.regressed_keypoints_at_centers(regression, centers[..., 0],
                                                      centers[..., 1])
        refined = ck.refine_keypoints(regressed, *cands, boxes,
                                      ranking_mode="score_distance_ratio", score_threshold=0.3)
        return heat, num, mask, off, reg, losses, cands, regressed, refined

    args = (tuple(g[0] for g in GT), *(jnp.asarray(TF[name]) for name in (
        "cand_heat", "cand_offsets6", "regression_map", "centers", "det_boxes")))
    jitted = jax.tree.map(np.asarray, jax.jit(everything)(*args))
    eager = jax.tree.map(np.asarray, everything(*args))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                 jitted, eager)
    np.testing.assert_array_equal(jitted[0], _heatmap_targets()[0][0])
