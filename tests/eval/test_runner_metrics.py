"""evaluate_and_write picks COCO and/or Pascal VOC metrics by metrics_set."""

import json

import numpy as np
import pytest

from jaxdet.eval.runner import evaluate_and_write, format_metrics

MAP = "PascalBoxes_Precision/mAP@0.5IOU"


class _Source:
    category_ids = [1, 2]
    category_names = ["cat", "dog"]

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return {"image_id": i + 1}

    def ground_truth(self):
        return {
            "images": [{"id": 1, "width": 50, "height": 50}, {"id": 2, "width": 50, "height": 50}],
            "annotations": [
                {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100,
                 "iscrowd": 0},
                {"id": 2, "image_id": 2, "category_id": 1, "bbox": [20, 20, 10, 10],
                 "area": 100, "iscrowd": 0},
            ],
            "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
        }


def _predict(params, batch_stats, images, image_info):
    """Image 1: its cat found; image 2: a cat in the wrong place."""
    boxes = np.array([[[0, 0, 10, 10]], [[0, 30, 10, 40]]], np.float32)
    return {"boxes": boxes, "scores": np.array([[0.9], [0.8]], np.float32),
            "classes": np.zeros((2, 1), np.int32), "num_detections": np.array([1, 1])}


def _batches():
    yield {"images": np.zeros((2, 8, 8, 3)), "image_info": np.zeros((2, 4)),
           "mask": np.array([True, True]), "image_id": np.array([1, 2])}


def _evaluate(tmp_path, metrics_set):
    return evaluate_and_write(None, _predict, {}, {}, _Source(), _batches, tmp_path,
                              batch_size=2, progress=False, metrics_set=metrics_set)


def test_both_metric_sets(tmp_path):
    m = _evaluate(tmp_path, ("coco_detection_metrics", "pascal_voc_detection_metrics"))
    assert m["AP50"] == pytest.approx(51 / 101)  # recall 1/2 at precision 1, 101 points
    assert m[MAP] == pytest.approx(0.5)  # cat 1/2; dog has no ground truth
    assert np.isnan(m["PascalBoxes_PerformanceByCategory/AP@0.5IOU/dog"])
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written[MAP] == pytest.approx(0.5) and written["AP50"] == pytest.approx(51 / 101)
    assert written["PascalBoxes_PerformanceByCategory/AP@0.5IOU/dog"] is None
    assert written["num_images"] == 2
    text = format_metrics(m)
    assert "AP50" in text and "Pascal VOC mAP@0.5  0.500" in text and "dog: n/a" in text


def test_voc_only_and_default(tmp_path):
    m = _evaluate(tmp_path / "voc", ("pascal_voc_detection_metrics",))
    assert "AP" not in m and m[MAP] == pytest.approx(0.5)
    assert len(json.loads((tmp_path / "voc" / "detections.json").read_text())) == 2
    assert "AP50" not in format_metrics(m)
    m = evaluate_and_write(None, _predict, {}, {}, _Source(), _batches, tmp_path / "coco",
                           batch_size=2, progress=False)
    assert "AP" in m and MAP not in m
    with pytest.raises(ValueError, match="metrics_set"):
        _evaluate(tmp_path, ("oid_challenge_detection_metrics",))


def test_detections_of_classes_the_dataset_lacks_are_left_out():
    """A 90-class model on a 3-class dataset: classes >= 3 leave each row, the rest stay in
    order first."""
    from jaxdet.eval.runner import drop_classes_from

    boxes = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    scores = np.array([[0.9, 0.8, 0.7, 0.6], [0.5, 0.4, 0.3, 0.2]], np.float32)
    classes = np.array([[0, 5, 2, 1], [7, 8, 1, 0]], np.int32)
    num = np.array([4, 3])  # row 1's last slot is padding
    b, s, c, n, dropped = drop_classes_from(boxes, scores, classes, num, 3)
    assert dropped == 3 and n.tolist() == [3, 1]
    np.testing.assert_array_equal(c[0, :3], [0, 2, 1])
    np.testing.assert_allclose(s[0, :3], [0.9, 0.7, 0.6])
    np.testing.assert_array_equal(b[0, 1], boxes[0, 2])
    np.testing.assert_array_equal(c[1, :1], [1])
