"""Pascal VOC metrics (TF pascal_voc_detection_metrics) by hand, and against pycocotools."""

import math

import numpy as np
import pytest

from jaxdet.eval import voc_eval
from jaxdet.eval.coco_eval import CocoEvaluator
from jaxdet.eval.voc_eval import VocEvaluator, average_precision, match_detections

MAP = "PascalBoxes_Precision/mAP@0.5IOU"


def _ap(name):
    return f"PascalBoxes_PerformanceByCategory/AP@0.5IOU/{name}"


def _gt(annotations, num_images=1):
    """COCO dict: images 1.., categories 1 'cat', 2 'dog', 3 'bird'; boxes as pixel yxyx."""
    anns = []
    for i, (image_id, cat, (y0, x0, y1, x1), crowd) in enumerate(annotations):
        anns.append({"id": i + 1, "image_id": image_id, "category_id": cat,
                     "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                     "iscrowd": crowd})
    return {
        "images": [{"id": i + 1, "width": 100, "height": 100} for i in range(num_images)],
        "annotations": anns,
        "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"},
                       {"id": 3, "name": "bird"}],
    }


G1, G2, G3 = (0, 0, 10, 10), (20, 20, 30, 30), (40, 40, 50, 50)
FAR = (60, 60, 70, 70)


def _add(evaluator, image_id, dets):
    """dets: [(class, score, box)]."""
    d = max(len(dets), 1)
    boxes, scores, classes = np.zeros((1, d, 4)), np.zeros((1, d)), np.zeros((1, d), int)
    for j, (c, s, b) in enumerate(dets):
        boxes[0, j], scores[0, j], classes[0, j] = b, s, c
    evaluator.add_detections([image_id], boxes, scores, classes, [len(dets)])


# Two cats; detections TP (0.9), FP (0.8), TP (0.7): precision 1, 1/2, 2/3 at recall
# 1/2, 1/2, 1 -> VOC AP = 1/2 * 1 + 1/2 * 2/3 = 5/6.
DETS = [(0, 0.9, G1), (0, 0.8, FAR), (0, 0.7, G2)]


def test_ap_by_hand():
    ev = VocEvaluator(_gt([(1, 1, G1, 0), (1, 1, G2, 0)]), [1, 2, 3])
    _add(ev, 1, DETS)
    m = ev.evaluate()
    assert m[_ap("cat")] == pytest.approx(5 / 6)
    assert math.isnan(m[_ap("dog")]) and math.isnan(m[_ap("bird")])  # no ground truth
    assert m[MAP] == pytest.approx(5 / 6)  # classes without ground truth left out


def test_difficult_ground_truth_is_ignored():
    # A detection on the difficult cat counts neither way; the difficult cat is no miss.
    ev = VocEvaluator(_gt([(1, 1, G1, 0), (1, 1, G2, 0), (1, 1, G3, 1)]), [1, 2, 3])
    _add(ev, 1, [*DETS, (0, 0.85, G3)])
    assert ev.evaluate()[_ap("cat")] == pytest.approx(5 / 6)
    scores, tp = match_detections(np.array([G3, G1]), np.array([0.5, 0.6]),
                                  np.array([G1, G3]), np.array([False, True]))
    np.testing.assert_array_equal(scores, [0.6])
    np.testing.assert_array_equal(tp, [True])


def test_duplicates_missed_classes_and_images_without_detections():
    gt = _gt([(1, 1, G1, 0), (2, 2, G1, 0), (2, 1, G2, 0)], num_images=2)
    ev = VocEvaluator(gt, [1, 2, 3])
    # image 1: the cat twice (second is a duplicate -> FP, even though it is its only box),
    # a bird where there is none (FP, but birds have no ground truth -> NaN).
    _add(ev, 1, [(0, 0.9, G1), (0, 0.95, (0, 0, 10, 9)), (2, 0.5, G1)])
    _add(ev, 2, [])  # image 2's dog and cat are missed
    m = ev.evaluate()
    # cats: 0.95 TP (IoU 0.9), 0.9 FP; 2 cats -> precision 1, 1/2 at recall 1/2 -> AP 1/2
    assert m[_ap("cat")] == pytest.approx(0.5)
    assert m[_ap("dog")] == 0.0
    assert math.isnan(m[_ap("bird")])
    assert m[MAP] == pytest.approx(0.25)


def test_only_added_images_count_and_padding_rows_skip():
    ev = VocEvaluator(_gt([(1, 1, G1, 0), (2, 1, G2, 0)], num_images=2), [1, 2, 3])
    boxes = np.array([[G1], [G2]], float)
    ev.add_detections([1, -1], boxes, [[0.9], [0.9]], [[0], [0]], [1, 1])
    assert ev.evaluate()[_ap("cat")] == 1.0  # image 2 not evaluated: its cat is no miss
    with pytest.raises(ValueError, match="twice"):
        _add(ev, 1, DETS)
    with pytest.raises(ValueError, match="not in the ground truth"):
        _add(ev, 7, DETS)


def test_average_precision_envelope():
    # precision is made monotone from the right before integrating
    assert average_precision([1.0, 0.5, 2 / 3, 0.75], [0.25, 0.25, 0.5, 0.75]) == pytest.approx(
        0.25 * 1 + 0.25 * 0.75 + 0.25 * 0.75)
    assert average_precision([], []) == 0.0


def test_cross_check_with_pycocotools():
    """Same TP/FP in both; COCO AP50 samples the same envelope at 101 recall points.

    Envelope: 1 on recall [0, 1/2], 2/3 on (1/2, 1]. VOC integrates it exactly: 5/6. COCO
    averages it at r = 0, 0.01, ..., 1: 51 points at 1 and 50 at 2/3 -> 253/303 = 0.83498.
    When every detection is a TP (envelope 1 everywhere) both give 1.
    """
    gt = _gt([(1, 1, G1, 0), (1, 1, G2, 0)])
    coco, voc = CocoEvaluator(gt, [1, 2, 3]), VocEvaluator(gt, [1, 2, 3])
    for ev in (coco, voc):
        _add(ev, 1, DETS)
    assert voc.evaluate()[MAP] == pytest.approx(5 / 6)
    assert coco.evaluate()["AP50"] == pytest.approx(253 / 303)

    coco, voc = CocoEvaluator(gt, [1, 2, 3]), VocEvaluator(gt, [1, 2, 3])
    for ev in (coco, voc):
        _add(ev, 1, [DETS[0], DETS[2]])
    assert voc.evaluate()[MAP] == pytest.approx(1.0)
    assert coco.evaluate()["AP50"] == pytest.approx(1.0)


def test_keys_match_tf():
    assert voc_eval.map_key() == MAP
    assert voc_eval.class_ap_key("dog") == _ap("dog")
