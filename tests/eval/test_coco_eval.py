"""CocoEvaluator against pycocotools run directly on the same files."""

import json

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from jaxdet.eval.coco_eval import STAT_NAMES, CocoEvaluator

CATEGORY_IDS = [1, 3, 7, 9]  # contiguous class k -> COCO id; "fish" (9) has no ground truth
CATEGORY_NAMES = ["cat", "dog", "bird", "fish"]


def _ann(ann_id, image_id, cat, bbox, iscrowd=0):
    return {"id": ann_id, "image_id": image_id, "category_id": cat, "bbox": bbox,
            "area": float(bbox[2] * bbox[3]), "iscrowd": iscrowd}


def _ground_truth():
    images = [
        {"id": 1, "height": 200, "width": 200, "file_name": "1.jpg"},
        {"id": 2, "height": 300, "width": 400, "file_name": "2.jpg"},
        {"id": 3, "height": 480, "width": 640, "file_name": "3.jpg"},
        {"id": 4, "height": 100, "width": 100, "file_name": "4.jpg"},  # no objects
    ]
    annotations = [
        _ann(1, 1, 1, [10, 10, 20, 20]),  # small
        _ann(2, 1, 3, [50, 50, 60, 60]),  # medium
        _ann(3, 1, 1, [100, 100, 80, 80], iscrowd=1),  # crowd
        _ann(4, 2, 3, [0, 0, 150, 120]),  # large
        _ann(5, 2, 7, [200, 100, 40, 30]),  # medium
        _ann(6, 2, 7, [300, 200, 10, 8]),  # small, never detected
        _ann(7, 3, 1, [100, 100, 200, 200]),  # large
        _ann(8, 3, 1, [350, 50, 50, 40]),  # medium
        _ann(9, 3, 3, [10, 300, 25, 25]),  # small
    ]
    categories = [{"id": c, "name": n} for c, n in zip(CATEGORY_IDS, CATEGORY_NAMES, strict=True)]
    return {"images": images, "annotations": annotations, "categories": categories}


# (image_id, [(ymin, xmin, ymax, xmax, score, class_index), ...]) in pixels
DETECTIONS = [
    (1, [(11, 10, 31, 29, 0.9, 0), (50, 52, 110, 108, 0.8, 1), (105, 105, 170, 175, 0.7, 0),
         (150, 10, 180, 40, 0.3, 0)]),
    (2, [(2, 0, 118, 148, 0.95, 1), (100, 201, 130, 239, 0.6, 2), (50, 50, 70, 80, 0.4, 2),
         (10, 10, 50, 50, 0.2, 3)]),
    (3, [(100, 100, 300, 300, 0.85, 0), (48, 352, 92, 398, 0.5, 0), (300, 10, 325, 35, 0.65, 1),
         (0, 0, 30, 30, 0.1, 0), (60.123, 355.456, 88.789, 395.004, 0.45, 0)]),
    (4, [(10, 10, 40, 40, 0.55, 0)]),
]


def _batch(entries, d=5, pad_rows=0):
    n = len(entries) + pad_rows
    ids = np.full([n], -1, np.int64)
    boxes = np.zeros([n, d, 4], np.float32)
    scores = np.zeros([n, d], np.float32)
    classes = np.zeros([n, d], np.float32)
    num = np.zeros([n], np.int32)
    for i, (image_id, dets) in enumerate(entries):
        ids[i] = image_id
        num[i] = len(dets)
        for j, (y0, x0, y1, x1, s, c) in enumerate(dets):
            boxes[i, j] = (y0, x0, y1, x1)
            scores[i, j] = s
            classes[i, j] = c
        # garbage beyond num_detections must be ignored
        boxes[i, len(dets):] = (1, 1, 5, 5)
        scores[i, len(dets):] = 0.99
        classes[i, len(dets):] = 99
    return ids, boxes, scores, classes, num


@pytest.fixture
def files(tmp_path):
    gt_path = tmp_path / "gt.json"
    gt_path.write_text(json.dumps(_ground_truth()))
    evaluator = CocoEvaluator(gt_path, CATEGORY_IDS, CATEGORY_NAMES)
    evaluator.add_detections(*_batch(DETECTIONS[:2]))
    evaluator.add_detections(*_batch(DETECTIONS[2:], pad_rows=2))  # padded last batch
    det_path = evaluator.write_detections(tmp_path / "detections.json")
    return evaluator, gt_path, det_path


def _direct(gt_path, det_path, cat_ids=None):
    gt = COCO(str(gt_path))
    dt = gt.loadRes(str(det_path))
    coco_eval = COCOeval(gt, dt, "bbox")
    if cat_ids is not None:
        coco_eval.params.catIds = cat_ids
    coco_eval.evaluate()
    coco_eval.accumulate()
    coco_eval.summarize()
    return coco_eval.stats


def test_matches_pycocotools(files, capsys):
    evaluator, gt_path, det_path = files
    results = evaluator.evaluate()
    assert capsys.readouterr().out == ""  # pycocotools' prints are silenced...
    assert "Average Precision" in evaluator.summary_text  # ...but kept
    expected = _direct(gt_path, det_path)
    assert list(results)[:12] == list(STAT_NAMES)
    np.testing.assert_allclose([results[k] for k in STAT_NAMES], expected, rtol=0, atol=1e-12)
    assert 0.3 < results["AP"] < 0.9  # a non-trivial case
    for cid, name in zip(CATEGORY_IDS, CATEGORY_NAMES, strict=True):
        ap = _direct(gt_path, det_path, cat_ids=[cid])[0]
        if ap < 0:  # no ground truth for this category
            assert results["per_class_AP"][name] is None
        else:
            assert results["per_class_AP"][name] == pytest.approx(ap, abs=1e-12)
    assert results["per_class_AP"]["fish"] is None
    assert results["per_class_AP"]["cat"] is not None


def test_detections_round_trip(files):
    evaluator, _, det_path = files
    dets = evaluator.detections()
    assert json.loads(det_path.read_text()) == dets
    assert len(dets) == sum(len(d) for _, d in DETECTIONS)
    # (ymin, xmin, ymax, xmax) = (11, 10, 31, 29) -> [x, y, w, h] = [10, 11, 19, 20]
    assert dets[0] == {"image_id": 1, "category_id": 1, "bbox": [10.0, 11.0, 19.0, 20.0],
                       "score": pytest.approx(0.9, abs=1e-6)}
    # class index 1 -> COCO id 3; (2, 0, 118, 148) -> [0, 2, 148, 116]
    assert dets[4]["category_id"] == 3 and dets[4]["bbox"] == [0.0, 2.0, 148.0, 116.0]
    # fractional box, rounded to 0.01 px: (60.123, 355.456, 88.789, 395.004)
    frac = [d for d in dets if d["score"] == pytest.approx(0.45)][0]
    assert frac["bbox"] == pytest.approx([355.46, 60.12, 39.55, 28.67], abs=1e-9)
    assert {d["image_id"] for d in dets} == {1, 2, 3, 4}


def test_write_metrics(files, tmp_path):
    evaluator, _, _ = files
    path = evaluator.write_metrics(tmp_path / "out" / "metrics.json", extra={"step": 123})
    metrics = json.loads(path.read_text())
    assert metrics["step"] == 123
    assert metrics["num_images"] == 4
    assert set(STAT_NAMES) <= set(metrics)
    assert metrics["per_class_AP"]["fish"] is None
    assert metrics["AP"] == pytest.approx(evaluator.results["AP"])


def test_zero_detections():
    evaluator = CocoEvaluator(_ground_truth(), CATEGORY_IDS)
    evaluator.add_detections(*_batch([(i, []) for i in (1, 2, 3, 4)]))
    results = evaluator.evaluate()
    assert evaluator.detections() == []
    assert all(results[k] == 0.0 for k in STAT_NAMES)
    assert results["per_class_AP"] == {"cat": 0.0, "dog": 0.0, "bird": 0.0, "fish": None}
    # nothing added at all: every ground-truth image counts, all misses
    results = CocoEvaluator(_ground_truth(), CATEGORY_IDS).evaluate()
    assert all(results[k] == 0.0 for k in STAT_NAMES)


def test_subset_of_images_is_evaluated():
    """Only added images count: image 1 alone, detected perfectly (crowd ignored)."""
    evaluator = CocoEvaluator(_ground_truth(), CATEGORY_IDS)
    evaluator.add_detections(*_batch([(1, [(10, 10, 30, 30, 0.9, 0), (50, 50, 110, 110, 0.8, 1)])]))
    assert evaluator.evaluate()["AP"] == pytest.approx(1.0)


def test_bad_input_names_the_problem():
    evaluator = CocoEvaluator(_ground_truth(), CATEGORY_IDS)
    with pytest.raises(ValueError, match="not in the ground truth"):
        evaluator.add_detections(*_batch([(42, [])]))
    evaluator.add_detections(*_batch([(1, [])]))
    with pytest.raises(ValueError, match="added twice"):
        evaluator.add_detections(*_batch([(1, [])]))
    with pytest.raises(ValueError, match="classes must lie"):
        evaluator.add_detections(*_batch([(2, [(0, 0, 5, 5, 0.5, 4)])]))
    with pytest.raises(ValueError, match="category_names"):
        CocoEvaluator(_ground_truth(), CATEGORY_IDS, ["a"])
