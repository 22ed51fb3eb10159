"""Per-detection masks in predict's JSON: pasted into the original image, binarized at 0.5,
written as COCO RLE (no model needed: a fake detections dict)."""

import json

import numpy as np
from pycocotools import mask as mask_utils

from jaxdet.results.detections import Detections
from jaxdet.results.labels import Labels

LABELS = Labels((1, 2), ("a", "b"))


def _det(with_masks=True):
    det = {"boxes": np.array([[[0, 0, 5, 5], [10, 20, 30, 40], [2, 2, 3, 3]]], np.float32),
           "scores": np.array([[0.4, 0.9, 0.1]], np.float32),
           "classes": np.array([[1, 0, 1]], np.int32), "num_detections": np.array([3])}
    if with_masks:
        box_masks = np.zeros((1, 3, 5, 5), np.float32)
        box_masks[0, 0] = 0.2  # below 0.5 everywhere: an empty mask
        box_masks[0, 1] = 0.9  # the whole box
        det["masks"] = box_masks
    return det


def test_masks_become_rle_segmentations():
    height, width = 41, 61  # boxes normalized by (H, W); pixel centers j / (W - 1) -> 20 px
    found = Detections.from_model_output(_det(), 0, LABELS, image_size=(height, width),
                                         score_threshold=0.2)
    assert found.scores.tolist() == [np.float32(0.9), np.float32(0.4)]  # best first, 0.1 dropped
    masks = found.masks
    assert masks.shape == (2, height, width) and masks.dtype == np.uint8
    out = json.loads(found.to_json())["detections"]
    seg = out[0]["segmentation"]
    assert seg["size"] == [height, width] and isinstance(seg["counts"], str)
    decoded = mask_utils.decode({"size": seg["size"], "counts": seg["counts"].encode()})
    np.testing.assert_array_equal(decoded, masks[0])
    # a full mask covers the pixels whose centers lie inside the box (rows 10..29 of 41 at
    # y -> y (H - 1) / H, cols 20..39 of 61), nothing else
    rows, cols = np.nonzero(decoded)
    assert rows.min() == 10 and rows.max() == 29 and cols.min() == 20 and cols.max() == 39
    assert decoded.sum() == 20 * 20
    assert mask_utils.decode({"size": out[1]["segmentation"]["size"],
                              "counts": out[1]["segmentation"]["counts"].encode()}).sum() == 0
    assert out[0]["class_id"] == 1 and out[1]["class_id"] == 2


def test_no_masks_no_segmentation():
    found = Detections.from_model_output(_det(False), 0, LABELS, image_size=(10, 10),
                                         score_threshold=0.0, max_detections=2)
    assert found.masks is None
    out = found.to_dict()["detections"]
    assert len(out) == 2 and all("segmentation" not in d for d in out)
