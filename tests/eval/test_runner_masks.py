"""evaluate_and_write with ``coco_mask_metrics``: per-box masks from predict are pasted into
each original image, scored by COCO segm AP (``segm/...``, ``mask_AP``) and drawn in the
sample grid, next to the records' own masks."""

import json

import numpy as np
import pytest
from PIL import Image

from jaxdet.eval import runner
from jaxdet.eval.coco_mask_eval import masks_to_rle, rle_to_masks
from jaxdet.eval.runner import evaluate_and_write, write_samples


def _square(y0, x0, size, shape=(40, 40)):
    mask = np.zeros(shape, np.uint8)
    mask[y0:y0 + size, x0:x0 + size] = 1
    return mask


class _Source:
    category_ids = [1, 2]
    category_names = ["cat", "dog"]

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return {"image_id": i + 1}

    def ground_truth(self):
        def ann(i, image_id, corner):
            return {"id": i, "image_id": image_id, "category_id": 1, "iscrowd": 0,
                    "segmentation": masks_to_rle(_square(corner, corner, 10)[None])[0],
                    "area": 100.0, "bbox": [corner, corner, 10, 10]}

        return {
            "images": [{"id": 1, "width": 40, "height": 40}, {"id": 2, "width": 40, "height": 40}],
            "annotations": [ann(1, 1, 10), ann(2, 2, 20)],
            "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
        }


def _predict(params, batch_stats, images, image_info):
    """Image 1: its cat's box with a full mask (pasted: exactly the ground-truth square);
    image 2: a cat in the wrong place. A third slot of class 5 (not in the dataset) is left
    out."""
    boxes = np.array([[[10, 10, 20, 20], [0, 0, 5, 5]], [[0, 30, 10, 40], [0, 0, 5, 5]]],
                     np.float32)
    return {"boxes": boxes, "scores": np.array([[0.9, 0.95], [0.8, 0.95]], np.float32),
            "classes": np.array([[0, 5], [0, 5]], np.int32), "num_detections": np.array([2, 2]),
            "masks": np.ones((2, 2, 7, 7), np.float32)}


def _batches():
    yield {"images": np.zeros((2, 8, 8, 3)), "image_info": np.full((2, 4), 40.0),
           "mask": np.array([True, True]), "image_id": np.array([1, 2])}


def test_mask_metrics_pasted_scored_and_written(tmp_path):
    m = evaluate_and_write(None, _predict, {}, {}, _Source(), _batches, tmp_path,
                           batch_size=2, progress=False,
                           metrics_set=("coco_detection_metrics", "coco_mask_metrics"))
    # image 1 found at every IoU, image 2 missed: recall 1/2 at precision 1, 101 points
    assert m["segm/AP50"] == pytest.approx(51 / 101) and m["segm/AP"] == pytest.approx(51 / 101)
    assert m["mask_AP"] == m["segm/AP"] and m["segm/per_class_AP"]["cat"] == m["segm/AP"]
    assert m["AP50"] == pytest.approx(51 / 101)  # the box metrics are still there
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["mask_AP"] == pytest.approx(51 / 101) and "segm/ARl" in written
    dets = json.loads((tmp_path / "mask_detections.json").read_text())
    assert [d["image_id"] for d in dets] == [1, 2] and all(d["category_id"] == 1 for d in dets)
    pasted = rle_to_masks([dets[0]["segmentation"]], 40, 40)[0]
    np.testing.assert_array_equal(pasted, _square(10, 10, 10))
    assert "mask AP 0.505" in runner.headline_metrics(m)
    assert "segm: AP 0.505" in runner.format_metrics(m)


def test_mask_metrics_need_masks(tmp_path):
    def no_masks(*args):
        det = _predict(*args)
        del det["masks"]
        return det

    with pytest.raises(ValueError, match="carry no masks"):
        evaluate_and_write(None, no_masks, {}, {}, _Source(), _batches, tmp_path,
                           batch_size=2, progress=False, metrics_set=("coco_mask_metrics",))


def test_sample_grid_draws_record_and_detection_masks(tmp_path, monkeypatch):
    """The ground-truth cell gets the record's masks, the predictions cell the kept
    detections' masks, both resampled to the drawn size."""
    image_path = tmp_path / "a.png"
    Image.fromarray(np.full((40, 60, 3), 90, np.uint8)).save(image_path)
    record = {"image_id": 3, "image_path": str(image_path), "height": 40, "width": 60,
              "boxes": np.array([[10, 10, 20, 30]], np.float32), "classes": np.array([1]),
              "masks": _square(10, 10, 10, (40, 60))[None]}

    class Source:
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return record

    calls = []
    real = runner.draw_detections

    def spy(pixels, boxes, classes, scores, names, **kwargs):
        calls.append(kwargs)
        return real(pixels, boxes, classes, scores, names, **kwargs)

    monkeypatch.setattr(runner, "draw_detections", spy)
    detections = {3: (np.array([[0, 0, 20, 20], [20, 30, 40, 60]], np.float32),
                      np.array([0.2, 0.9]), np.array([0, 1]))}
    pred_masks = np.stack([_square(0, 0, 20, (40, 60)), _square(20, 30, 20, (40, 60))])
    path = write_samples(tmp_path / "s.png", Source(), detections, ["cat", "dog"], 1,
                         cell_size=120, masks={3: pred_masks})
    assert path.exists()
    gt, pred = calls
    assert gt["masks"].shape == (1, 80, 120)  # 40 x 60 drawn at 80 x 120
    np.testing.assert_array_equal(gt["masks"][0], np.kron(_square(10, 10, 10, (40, 60)),
                                                          np.ones((2, 2), np.uint8)))
    # only the detection scoring >= 0.3 is drawn, with its own mask
    assert pred["masks"].shape == (1, 80, 120)
    np.testing.assert_array_equal(pred["masks"][0], np.kron(pred_masks[1],
                                                            np.ones((2, 2), np.uint8)))
