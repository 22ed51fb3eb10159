import functools
import math

import jax
import numpy as np
import pytest

from jaxdet.core.box_coders import FasterRcnnBoxCoder
from jaxdet.core.target_assigner import assign_targets

ANCHORS = np.array(
    [
        [0.0, 0.0, 1.0, 1.0],  # IoU 1 with gt 0 -> positive
        [0.0, 0.0, 1.0, 0.5],  # IoU 0.5 with gt 0 -> positive (threshold is inclusive)
        [2.0, 2.0, 3.0, 3.0],  # matches the ignore (crowd) gt 1 -> no weight
        [5.0, 5.0, 6.0, 6.0],  # overlaps nothing -> negative
        [0.0, 0.0, 1.0, 0.45],  # IoU 0.45 with gt 0 -> ignored band
    ],
    np.float32,
)
GT_BOXES = np.array([[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [5.0, 5.0, 6.0, 6.0]], np.float32)
GT_CLASSES = np.array([2, 0, 1], np.int32)
GT_VALID = np.array([True, True, False])  # row 2 is padding (would match anchor 3)
GT_IGNORE = np.array([False, True, False])
KW = dict(
    num_classes=3,
    box_coder=FasterRcnnBoxCoder(),
    matched_threshold=0.5,
    unmatched_threshold=0.4,
)


def test_assign_targets_hand_computed(run):
    out = run(assign_targets, ANCHORS, GT_BOXES, GT_CLASSES, GT_VALID, GT_IGNORE, **KW)
    np.testing.assert_array_equal(out["match"], [0, 0, 1, -1, -2])
    np.testing.assert_array_equal(
        out["cls_targets"], [[0, 0, 1], [0, 0, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]]
    )
    np.testing.assert_array_equal(out["cls_weights"], [1, 1, 0, 1, 0])
    np.testing.assert_array_equal(out["box_weights"], [1, 1, 0, 0, 0])
    assert out["cls_targets"].dtype == out["cls_weights"].dtype == np.float32
    # Anchor 1: x center 0.25 -> 0.5 over width 0.5 (x10), width 0.5 -> 1 (log 2, x5).
    expected_boxes = np.zeros((5, 4), np.float32)
    expected_boxes[1] = [0.0, 5.0, 0.0, 5.0 * math.log(2.0)]
    np.testing.assert_allclose(out["box_targets"], expected_boxes, atol=1e-5)
    assert float(out["num_positives"]) == 2.0


def test_no_valid_ground_truth_all_negative(run):
    out = run(assign_targets, ANCHORS, GT_BOXES, GT_CLASSES, np.zeros(3, bool), GT_IGNORE, **KW)
    np.testing.assert_array_equal(out["match"], [-1] * 5)
    np.testing.assert_array_equal(out["cls_weights"], [1] * 5)
    assert not out["cls_targets"].any() and not out["box_targets"].any()
    assert float(out["num_positives"]) == 0.0


_single = jax.jit(functools.partial(assign_targets, **KW))  # the per-image reference


def _batched(anchors, boxes, classes, valid, ignore):
    fn = functools.partial(assign_targets, **KW)
    return jax.vmap(fn, in_axes=(None, 0, 0, 0, 0))(anchors, boxes, classes, valid, ignore)


@pytest.mark.slow
def test_vmap_matches_per_image_loop(run):
    rng = np.random.default_rng(0)
    yx = rng.uniform(0.0, 5.0, (2, 3, 2)).astype(np.float32)
    hw = rng.uniform(0.5, 2.0, (2, 3, 2)).astype(np.float32)
    boxes = np.concatenate([yx, yx + hw], axis=-1)
    boxes[0, 0] = ANCHORS[0]
    classes = rng.integers(0, 3, (2, 3)).astype(np.int32)
    valid = np.array([[True, True, False], [True, False, False]])
    ignore = np.array([[False, True, False], [False, False, False]])
    batched = run(_batched, ANCHORS, boxes, classes, valid, ignore)
    for i in range(2):
        single = _single(ANCHORS, boxes[i], classes[i], valid[i], ignore[i])
        for key, value in single.items():
            np.testing.assert_allclose(batched[key][i], np.asarray(value), atol=1e-6, err_msg=key)
    assert batched["cls_targets"].shape == (2, 5, 3)
    assert batched["num_positives"].shape == (2,)
