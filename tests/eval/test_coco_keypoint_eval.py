"""CocoKeypointEvaluator: a hand-computed OKS, and equality with pycocotools run directly."""

import contextlib
import io
import json
import math

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from jaxdet.data.keypoints import COCO_PERSON_KEYPOINTS, COCO_PERSON_SIGMAS
from jaxdet.eval.coco_keypoint_eval import (
    KEYPOINT_STAT_NAMES,
    CocoKeypointEvaluator,
    keypoint_ground_truth,
)

THRESHOLDS = np.linspace(0.5, 0.95, 10)


def _one_person(area=4000.0):
    """One image, one person with 3 keypoints: a (v=2), b (v=1), c (v=0, ignored)."""
    keypoints = [30, 40, 2, 50, 40, 1, 0, 0, 0]  # [x, y, v] * 3
    return {
        "images": [{"id": 1, "height": 100, "width": 100, "file_name": "1.png"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [20, 20, 50, 80],
                         "area": area, "iscrowd": 0, "keypoints": keypoints,
                         "num_keypoints": 2}],
        "categories": [{"id": 1, "name": "person", "keypoints": ["a", "b", "c"],
                        "skeleton": [[1, 2], [2, 3]]}],
    }


def _add(evaluator, image_id, points_yx, score=0.9, cls=0):
    """One detection (keypoints [k, 2] pixel (y, x)) for ``image_id``."""
    points = np.asarray(points_yx, np.float64)[None, None]
    k = points.shape[2]
    evaluator.add_detections([image_id], [[[10, 10, 90, 90]]], [[score]], [[cls]], points,
                             np.full((1, 1, k), 0.5), [1])


def test_hand_computed_oks_gives_the_ap_of_its_thresholds():
    sigmas = (0.05, 0.1, 0.07)
    area = 4000.0  # medium (32^2 .. 96^2)
    evaluator = CocoKeypointEvaluator(_one_person(area), 1, sigmas, ["a", "b", "c"])
    # a exact; b 12 px off in x; c (unlabelled in the ground truth) far away: not scored
    _add(evaluator, 1, [[40, 30], [40, 62], [0, 99]])
    # OKS = mean over labelled keypoints of exp(-d^2 / (2 s^2 (2 sigma)^2)), s^2 = area
    e_b = 12.0**2 / (2 * area * (2 * 0.1) ** 2)  # = 0.45
    oks = (1.0 + math.exp(-e_b)) / 2  # = 0.8188
    assert oks == pytest.approx(0.81881, abs=1e-5)
    stats = evaluator.evaluate()
    assert list(stats) == list(KEYPOINT_STAT_NAMES)
    assert evaluator._coco_eval.ious[(1, 1)][0, 0] == pytest.approx(oks, abs=1e-12)
    hit = float(np.mean(THRESHOLDS <= oks))  # 7 of the 10 thresholds: 0.50 .. 0.80
    assert hit == pytest.approx(0.7)
    assert stats["AP"] == pytest.approx(hit) and stats["AR"] == pytest.approx(hit)
    for name in ("AP50", "AP75", "AR50", "AR75"):
        assert stats[name] == pytest.approx(1.0), name
    assert stats["APm"] == pytest.approx(hit) and stats["ARm"] == pytest.approx(hit)
    assert stats["APl"] == stats["ARl"] == -1.0  # no large person
    assert "Average Precision" in evaluator.summary_text


def test_detections_of_other_classes_and_padding_rows_are_left_out():
    evaluator = CocoKeypointEvaluator(_one_person(), 1, (0.05, 0.1, 0.07), class_index=0)
    points = np.array([[[[40, 30], [40, 50], [0, 0]]] * 2, [[[0, 0]] * 3] * 2], np.float64)
    # row 0: the person (class 0) and a better-scored class-1 detection elsewhere; row 1: pad
    evaluator.add_detections([1, -1], np.zeros((2, 2, 4)), [[0.5, 0.9], [0.9, 0.9]],
                             [[0, 1], [0, 0]], points, np.ones((2, 2, 3)), [2, 2])
    detections = evaluator.detections()
    assert len(detections) == 1
    assert detections[0]["keypoints"] == [30.0, 40.0, 1.0, 50.0, 40.0, 1.0, 0.0, 0.0, 1.0]
    assert detections[0]["score"] == 0.5 and detections[0]["category_id"] == 1
    assert evaluator.evaluate()["AP"] == pytest.approx(1.0)


def _random_persons(rng, num_images=5):
    """Persons with 17 COCO keypoints (random visibility, some with none labelled, one
    crowd) plus dogs without keypoints, and detections: noisy copies of most persons, false
    positives, and dogs' detections (another class)."""
    images, annotations, detections = [], [], []
    for image_id in range(1, num_images + 1):
        height, width = 480, 640
        images.append({"id": image_id, "height": height, "width": width,
                       "file_name": f"{image_id}.jpg"})
        for _ in range(rng.integers(1, 5)):
            w, h = rng.uniform(20, 300), rng.uniform(40, 400)
            x0, y0 = rng.uniform(0, width - w), rng.uniform(0, height - h)
            xs, ys = rng.uniform(x0, x0 + w, 17), rng.uniform(y0, y0 + h, 17)
            v = rng.choice([0, 1, 2], 17, p=[0.3, 0.2, 0.5])
            if rng.random() < 0.1:
                v[:] = 0
            xs, ys = np.where(v > 0, xs, 0), np.where(v > 0, ys, 0)
            kp = np.stack([np.round(xs, 1), np.round(ys, 1), v], 1).reshape(-1).tolist()
            annotations.append({
                "id": len(annotations) + 1, "image_id": image_id, "category_id": 1,
                "bbox": [x0, y0, w, h], "area": w * h * rng.uniform(0.4, 0.8),
                "iscrowd": int(rng.random() < 0.05), "keypoints": kp,
                "num_keypoints": int((v > 0).sum())})
            if rng.random() < 0.85:  # detected, with noise scaled to the person
                noise = rng.normal(0, rng.uniform(0.01, 0.15) * math.sqrt(w * h), (17, 2))
                yx = np.stack([ys, xs], 1) + noise
                detections.append((image_id, [y0, x0, y0 + h, x0 + w], rng.random(), 0, yx))
        annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                            "category_id": 2, "bbox": [5, 5, 50, 40], "area": 2000.0,
                            "iscrowd": 0})
        for _ in range(rng.integers(0, 4)):  # false positives
            yx = np.stack([rng.uniform(0, height, 17), rng.uniform(0, width, 17)], 1)
            detections.append((image_id, [0, 0, 100, 100], rng.random(), 0, yx))
        detections.append((image_id, [5, 5, 45, 55], 0.99, 1,
                           np.tile([[25.0, 30.0]], (17, 1))))  # a dog: left out
    categories = [{"id": 1, "name": "person", "keypoints": list(COCO_PERSON_KEYPOINTS),
                   "skeleton": [[16, 14], [14, 12], [6, 7]]},
                  {"id": 2, "name": "dog"}]
    ground_truth = {"images": images, "annotations": annotations, "categories": categories}
    return ground_truth, detections


def _pycocotools_stats(gt_file, dt_file, sigmas, category_id=1):
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_file))
        coco_dt = coco_gt.loadRes(str(dt_file))
        coco_eval = COCOeval(coco_gt, coco_dt, iouType="keypoints")
        coco_eval.params.kpt_oks_sigmas = np.array(sigmas)
        coco_eval.params.catIds = [category_id]
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return coco_eval.stats


def _evaluate(ground_truth, detections, sigmas, names=None, slots=None):
    evaluator = CocoKeypointEvaluator(ground_truth, 1, sigmas, names, class_index=0)
    slots = list(range(17)) if slots is None else slots
    for image_id in sorted({d[0] for d in detections}):
        mine = [d for d in detections if d[0] == image_id]
        points = np.stack([d[4][slots] for d in mine])[None]
        evaluator.add_detections([image_id], [[d[1] for d in mine]], [[d[2] for d in mine]],
                                 [[d[3] for d in mine]], points,
                                 np.full(points.shape[:-1], 0.7), [len(mine)])
    return evaluator


def test_equals_pycocotools_on_the_same_files(tmp_path):
    ground_truth, detections = _random_persons(np.random.default_rng(0))
    evaluator = _evaluate(ground_truth, detections, COCO_PERSON_SIGMAS,
                          list(COCO_PERSON_KEYPOINTS))
    stats = evaluator.evaluate()
    gt_file = tmp_path / "gt.json"
    gt_file.write_text(json.dumps(ground_truth))
    dt_file = evaluator.write_detections(tmp_path / "dt.json")
    expected = _pycocotools_stats(gt_file, dt_file, COCO_PERSON_SIGMAS)
    assert [stats[n] for n in KEYPOINT_STAT_NAMES] == expected.tolist()
    assert 0.0 < stats["AP"] < 1.0 and stats["APm"] >= 0 and stats["APl"] >= 0
    assert len(json.loads(dt_file.read_text())) == len([d for d in detections if d[3] == 0])


def test_a_subset_of_keypoints_equals_pycocotools_on_the_reduced_files(tmp_path):
    """keypoint_names pick (and reorder) the category's keypoints by name."""
    ground_truth, detections = _random_persons(np.random.default_rng(1))
    names = ["left_hip", "nose", "right_knee", "left_wrist"]
    slots = [COCO_PERSON_KEYPOINTS.index(n) for n in names]
    sigmas = [COCO_PERSON_SIGMAS[s] for s in slots]
    evaluator = _evaluate(ground_truth, detections, sigmas, names, slots)
    stats = evaluator.evaluate()
    reduced = json.loads(json.dumps(ground_truth))
    for ann in reduced["annotations"]:
        if "keypoints" in ann:
            kp = ann["keypoints"]
            ann["keypoints"] = [v for s in slots for v in kp[3 * s:3 * s + 3]]
            ann["num_keypoints"] = sum(v > 0 for v in ann["keypoints"][2::3])
    gt_file = tmp_path / "gt.json"
    gt_file.write_text(json.dumps(reduced))
    dt_file = evaluator.write_detections(tmp_path / "dt.json")
    assert [stats[n] for n in KEYPOINT_STAT_NAMES] == _pycocotools_stats(
        gt_file, dt_file, sigmas).tolist()
    category = json.loads(evaluator.write_ground_truth(tmp_path / "kp_gt.json").read_text())[
        "categories"]
    assert category == [{"id": 1, "name": "person", "keypoints": names,
                         "skeleton": []}]


def test_sigmas_must_match_the_keypoints():
    with pytest.raises(ValueError, match=r"2 OKS sigmas for the 3 keypoints of category 1 "
                                         r"\('person'\)"):
        CocoKeypointEvaluator(_one_person(), 1, (0.05, 0.1))
    with pytest.raises(ValueError, match=r"4 OKS sigmas for the 3 keypoints"):
        CocoKeypointEvaluator(_one_person(), 1, (0.05,) * 4, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"has no keypoints named \['elbow'\]"):
        CocoKeypointEvaluator(_one_person(), 1, (0.05,) * 2, ["a", "elbow"])
    with pytest.raises(ValueError, match=r"sigmas must be positive"):
        CocoKeypointEvaluator(_one_person(), 1, (0.05, 0.0, 0.1))
    evaluator = CocoKeypointEvaluator(_one_person(), 1, (0.05, 0.1, 0.07))
    with pytest.raises(ValueError, match=r"keypoints \[n=1, D=1, k=3, 2\]"):
        _add(evaluator, 1, [[1, 2], [3, 4]])


def test_ground_truth_without_keypoint_names_and_of_the_wrong_length():
    gt = _one_person()
    del gt["categories"][0]["keypoints"]
    reduced = keypoint_ground_truth(gt, 1, None, 3)  # taken position by position
    assert reduced["annotations"][0]["keypoints"] == gt["annotations"][0]["keypoints"]
    with pytest.raises(ValueError, match=r"annotation 1 \(image 1\) has 9 keypoint values; "
                                         r"category 1 has no 'keypoints' names; the task "
                                         r".* has 2 keypoints"):
        keypoint_ground_truth(gt, 1, None, 2)


def test_no_detections_scores_zero():
    evaluator = CocoKeypointEvaluator(_one_person(), 1, (0.05, 0.1, 0.07))
    assert evaluator.evaluate()["AP"] == 0.0
