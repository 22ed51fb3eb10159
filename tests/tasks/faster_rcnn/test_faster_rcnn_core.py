"""Faster R-CNN's pure pieces on tiny hand-computed cases: TF's grid anchors, the first-stage
targets and losses, the proposals, the second-stage targets, minibatch compaction, own-class
box selection, losses and per-class NMS."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core.box_coders import FasterRcnnBoxCoder
from jaxdet.core.grid_anchors import GridAnchorGenerator
from jaxdet.tasks.faster_rcnn import ops as frcnn

CODER = FasterRcnnBoxCoder()


def test_grid_anchors_follow_tf_order_sizes_and_centers():
    """Aspect ratio outer, scale inner; cells row-major; centers at i * stride (offset 0)."""
    gen = GridAnchorGenerator(scales=(0.5, 1.0), aspect_ratios=(1.0, 4.0),
                              base_anchor_size=(32, 32), anchor_stride=(16, 16))
    assert gen.num_anchors_per_location() == 4 and gen.feature_map_shape((32, 48)) == (2, 3)
    pixels = gen.generate((1, 2), (32, 32), normalize=False)
    cell0 = [[-8, -8, 8, 8], [-16, -16, 16, 16],  # aspect 1: scales 0.5, 1
             [-4, -16, 4, 16], [-8, -32, 8, 32]]  # aspect 4: h = s / 2 * 32, w = s * 2 * 32
    np.testing.assert_allclose(pixels[:4], cell0)
    np.testing.assert_allclose(pixels[4:], np.array(cell0) + [0, 16, 0, 16])  # next x cell
    np.testing.assert_allclose(gen.generate((1, 2), (32, 64)), pixels / [32, 64, 32, 64],
                               rtol=1e-6)


def _rpn_case():
    anchors = jnp.array([[0, 0, .5, .5],     # IoU 1: positive
                         [0, 0, .5, 1.],     # IoU 0.5: between 0.3 and 0.7, ignored
                         [.5, .5, 1., 1.],   # IoU 0: negative
                         [0, 0, .5, .25]])   # IoU 0.5: ignored
    gt = jnp.array([[0, 0, .5, .5], [0, 0, 0, 0]])
    return anchors, gt, jnp.array([True, False]), jnp.array([False, False])


def test_rpn_targets_match_07_03_and_ignore_between():
    anchors, gt, valid, ignore = _rpn_case()
    t = frcnn.rpn_targets(anchors, gt, valid, ignore, CODER)
    assert t["objectness"].tolist() == [1, 0, 0, 0]
    assert t["weight"].tolist() == [1, 0, 1, 0]
    assert t["box_weights"].tolist() == [1, 0, 0, 0]
    np.testing.assert_allclose(t["box_targets"][0], 0.0, atol=1e-5)
    # anchors outside the image (anchor_valid 0) are never sampled
    t = frcnn.rpn_targets(anchors, gt, valid, ignore, CODER,
                          anchor_valid=jnp.array([1., 1., 0., 1.]))
    assert t["weight"].tolist() == [1, 0, 0, 0]
    # an ignore box: its matched anchor is not sampled
    t = frcnn.rpn_targets(anchors, gt, valid, jnp.array([True, False]), CODER)
    assert t["weight"].tolist() == [0, 0, 1, 0] and t["box_weights"].tolist() == [0, 0, 0, 0]


def test_rpn_losses_divide_each_image_by_its_minibatch():
    anchors, gt, valid, ignore = _rpn_case()
    t = frcnn.rpn_targets(anchors, gt, valid, ignore, CODER)
    targets = jax.tree.map(lambda x: jnp.stack([x, x]), t)
    logits = jnp.zeros((2, 4, 2))  # softmax CE log 2 everywhere
    encodings = jnp.stack([t["box_targets"] + 0.5, t["box_targets"]])  # image 0: off by 0.5
    sampled = jnp.array([[True, False, True, False], [False] * 4])
    obj, loc = frcnn.rpn_losses(logits, encodings, targets, sampled)
    # image 0: 2 sampled -> (2 log 2) / 2; image 1: nothing sampled -> 0 / 1
    np.testing.assert_allclose(obj, math.log(2.0), rtol=1e-6)
    # image 0: the positive's 4 codes off by 0.5 -> 4 * 0.125, divided by 2 sampled
    np.testing.assert_allclose(loc, 0.25, rtol=1e-6)


@pytest.mark.slow
def test_proposals_are_nms_picks_clipped_to_the_content():
    anchors = jnp.array([[0, 0, .5, .5], [0, 0, .5, .55], [.25, .5, .75, 1.]])
    logits = jnp.array([[[0., 1.], [0., 2.], [0., 0.5]]])  # anchor 1 best, 0 overlaps it
    encodings = jnp.zeros((1, 3, 4))
    window = jnp.array([[0., 0., 1., .75]])
    p = frcnn.proposals(encodings, logits, anchors, window, CODER, max_proposals=3,
                        iou_threshold=0.7)
    assert p["valid"].tolist() == [[True, True, False]]
    np.testing.assert_allclose(p["boxes"][0, :2], [[0, 0, .5, .55], [.25, .5, .75, .75]],
                               atol=1e-6)
    np.testing.assert_allclose(p["scores"][0, 0], jax.nn.sigmoid(2.0), rtol=1e-6)
    np.testing.assert_allclose(p["boxes"][0, 2], 0.0)


@pytest.mark.slow
def test_detection_targets_are_one_based_classes_with_background():
    proposals = jnp.array([[0, 0, .5, .5], [0, 0, .5, .2], [.1, .1, .4, .4]])
    gt = jnp.array([[0, 0, .5, .5], [0, 0, 0, 0]])
    t = frcnn.detection_targets(proposals, jnp.array([True, True, False]), gt,
                                jnp.array([2, 0]), jnp.array([True, False]),
                                jnp.array([False, False]), num_classes=3, box_coder=CODER)
    # IoU 1 -> class 2 + 1; IoU 0.4 < 0.5 -> background; the third is padding
    assert t["classes"].tolist() == [3, 0, 0]
    assert t["weight"].tolist() == [1, 1, 0]
    assert t["box_weights"].tolist() == [1, 0, 0]


def test_compact_keeps_index_order_and_pads():
    index, valid = frcnn.compact(jnp.array([False, True, False, True, True]), 4)
    assert index.tolist() == [1, 3, 4, 0] and valid.tolist() == [True, True, True, False]
    index, valid = frcnn.compact(jnp.array([True, False]), 3)
    assert index.tolist() == [0, 0, 0] and valid.tolist() == [True, False, False]


def test_own_class_box_and_detection_losses():
    codes = jnp.arange(24, dtype=jnp.float32).reshape(1, 2, 3, 4)
    picked = frcnn.class_box_encodings(codes, jnp.array([[2, 0]]))
    np.testing.assert_allclose(picked, [[codes[0, 0, 1], codes[0, 1, 0]]])
    np.testing.assert_allclose(frcnn.class_box_encodings(codes[:, :, :1], jnp.array([[2, 0]])),
                               codes[:, :, 0])
    targets = {"classes": jnp.array([[2, 0]]), "weight": jnp.array([[1., 1.]]),
               "box_targets": picked + jnp.array([[[1., 0, 0, 0], [0, 0, 0, 0]]]),
               "box_weights": jnp.array([[1., 0.]])}
    cls, loc = frcnn.detection_losses(jnp.zeros((1, 2, 4)), codes, targets,
                                      jnp.array([[True, True]]))
    np.testing.assert_allclose(cls, math.log(4.0), rtol=1e-6)  # (2 log 4) / 2
    np.testing.assert_allclose(loc, 0.25, rtol=1e-6)  # 0.5 * 1**2 / 2


def test_per_class_nms_uses_each_class_own_boxes():
    boxes = jnp.zeros((1, 2, 2, 4))
    boxes = boxes.at[0, 0, 0].set([0, 0, .5, .5]).at[0, 1, 0].set([0, 0, .5, .52])
    boxes = boxes.at[0, 0, 1].set([.5, .5, 1, 1]).at[0, 1, 1].set([0, 0, .2, .2])
    scores = jnp.array([[[.9, .1], [.8, .7]]])
    det = frcnn.per_class_nms(boxes, scores, score_threshold=0.0, iou_threshold=0.6,
                              max_detections_per_class=2, max_total_detections=5)
    # class 0: proposal 1's box overlaps proposal 0's (IoU 0.96) -> suppressed
    assert det["num_detections"].tolist() == [3]
    np.testing.assert_allclose(det["scores"][0], [.9, .7, .1, 0, 0], rtol=1e-6)
    assert det["classes"][0, :3].tolist() == [0, 1, 1]
    np.testing.assert_allclose(det["boxes"][0, :3], [[0, 0, .5, .5], [0, 0, .2, .2],
                                                     [.5, .5, 1, 1]])
