"""COCO ``segm`` evaluation (pycocotools), RLE encoding and the host-side mask paste."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from jaxdet.eval.coco_eval import STAT_NAMES
from jaxdet.eval.coco_mask_eval import (
    CocoMaskEvaluator,
    mask_ground_truth,
    mask_metrics,
    masks_to_rle,
    paste_box_masks,
    rle_to_masks,
)

TF_FIXTURE = Path(__file__).parents[1] / "core" / "fixtures" / "mask_ops_tf.npz"


def _square(height, width, y0, x0, size):
    mask = np.zeros((height, width), np.uint8)
    mask[y0:y0 + size, x0:x0 + size] = 1
    return mask


# --------------------------------------------------------------------------- RLE


def test_masks_to_rle_round_trips_and_is_json():
    rng = np.random.default_rng(0)
    masks = (rng.uniform(size=(4, 13, 17)) > 0.6).astype(np.uint8)
    masks[1] = 0  # an empty mask
    masks[2] = 1  # a full one
    rles = masks_to_rle(masks)
    assert len(rles) == 4
    assert all(isinstance(r["counts"], str) and r["size"] == [13, 17] for r in rles)
    back = json.loads(json.dumps(rles))
    decoded = mask_utils.decode([{"size": r["size"], "counts": r["counts"].encode()}
                                 for r in back])
    np.testing.assert_array_equal(np.moveaxis(decoded, -1, 0), masks)
    np.testing.assert_array_equal(rle_to_masks(back, 13, 17), masks)
    # any nonzero value is in the mask; no masks -> no RLEs
    np.testing.assert_array_equal(rle_to_masks(masks_to_rle(masks * 7), 13, 17), masks)
    assert masks_to_rle(np.zeros((0, 5, 6), np.uint8)) == []
    assert rle_to_masks([], 5, 6).shape == (0, 5, 6)


# --------------------------------------------------------------------------- paste


def test_paste_box_masks_equals_tf():
    """The numpy paste reproduces TF's reframed masks (TF's own output, fixture of
    tests/core/test_mask_ops.py), values and the > 0.5 binarization, knife edges included
    (same float32 arithmetic as TF's CPU kernel; bit-identical here)."""
    if not TF_FIXTURE.exists():
        pytest.skip(f"{TF_FIXTURE.name} missing (make it with make_mask_ops_tf.py)")
    tf_out = dict(np.load(TF_FIXTURE))
    for case in ("small", "rcnn", "empty"):
        masks, boxes = tf_out[f"{case}_masks"], tf_out[f"{case}_boxes"]
        height, width = (int(v) for v in tf_out[f"{case}_size"])
        values = paste_box_masks(masks, boxes, height, width, threshold=None)
        np.testing.assert_allclose(values, tf_out[f"{case}_image"], atol=1e-6, err_msg=case)
        binary = paste_box_masks(masks, boxes, height, width)
        assert binary.dtype == np.uint8
        np.testing.assert_array_equal(binary, tf_out[f"{case}_binary"], err_msg=case)
    one = np.concatenate([
        paste_box_masks(tf_out["one_mask1x1"], tf_out["one_boxes"][:1], 9, 11, None),
        paste_box_masks(tf_out["one_masks"][1:], tf_out["one_boxes"][1:], 9, 11, None)])
    np.testing.assert_allclose(one, tf_out["one_image"], atol=1e-6)


def test_paste_box_masks_by_hand():
    """A mask of ones over a box fills the pixels whose centers lie in it."""
    box_px = np.array([[2.0, 3.0, 8.0, 12.0]])  # rows 2..8, cols 3..12 (centers on edges)
    out = paste_box_masks(np.ones((1, 5, 5)), box_px / [10, 15, 10, 15], 11, 16)
    # y -> y * (H - 1) / H: normalized 0.2 .. 0.8 covers pixel rows 2..8 of 11
    rows = np.arange(11) / 10
    cols = np.arange(16) / 15
    inside = ((rows > 0.2 + 1e-6) & (rows < 0.8 - 1e-6))[:, None] & (
        (cols > 0.2 + 1e-6) & (cols < 0.8 - 1e-6))[None, :]
    outside = ((rows < 0.2 - 1e-6) | (rows > 0.8 + 1e-6))[:, None] | (
        (cols < 0.2 - 1e-6) | (cols > 0.8 + 1e-6))[None, :]
    assert out[0][inside].all() and not out[0][outside].any()
    with pytest.raises(ValueError, match="box_masks"):
        paste_box_masks(np.ones((2, 5, 5)), np.zeros((1, 4)), 4, 4)


# --------------------------------------------------------------------------- evaluation


def _hand_ground_truth():
    return {
        "images": [{"id": 1, "height": 40, "width": 40}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 3, "iscrowd": 0,
                         "segmentation": masks_to_rle(_square(40, 40, 10, 10, 10)[None])[0]}],
        "categories": [{"id": 3, "name": "square"}],
    }


def test_hand_computed_iou():
    """Prediction = the 10x10 ground-truth square shifted 2 px right: IoU 80 / 120 = 2/3,
    a hit at IoU 0.50 .. 0.65 (4 of the 10 thresholds) and a miss above. The object is small
    (area 100 < 32^2)."""
    evaluator = CocoMaskEvaluator(_hand_ground_truth(), [3])
    pred = _square(40, 40, 10, 12, 10)[None]
    evaluator.add_image(1, pred, [0.9], [0])
    stats = evaluator.evaluate()
    assert stats["AP50"] == pytest.approx(1.0) and stats["AP75"] == pytest.approx(0.0)
    assert stats["AP"] == pytest.approx(0.4) and stats["APs"] == pytest.approx(0.4)
    assert stats["APm"] == -1 and stats["APl"] == -1
    assert stats["AR1"] == pytest.approx(0.4) and stats["AR100"] == pytest.approx(0.4)
    assert stats["per_class_AP"] == {"square": pytest.approx(0.4)}
    named = mask_metrics(stats)
    assert named["segm/AP"] == named["mask_AP"] == stats["AP"]
    assert set(named) == {f"segm/{k}" for k in (*STAT_NAMES, "per_class_AP")} | {"mask_AP"}
    # the box of this prediction would match exactly as well; as a mask it does not
    evaluator.reset()
    evaluator.add_image(1, _square(40, 40, 10, 10, 10)[None], [0.9], [0])
    assert evaluator.evaluate()["AP"] == pytest.approx(1.0)
    # no detections at all: nothing found
    evaluator.reset()
    evaluator.add_image(1, np.zeros((0, 40, 40), np.uint8), [], [])
    assert evaluator.evaluate()["AP"] == pytest.approx(0.0)


def _random_case(rng):
    """3 images of different sizes, 2 categories; ground truth as polygons, compressed RLE
    and a crowd (uncompressed RLE); detections = shifted, holed ground truth plus false
    positives."""
    images = [{"id": 5, "height": 48, "width": 64}, {"id": 7, "height": 60, "width": 40},
              {"id": 9, "height": 240, "width": 200}]
    annotations, detections = [], {}
    ann_id = 1
    for image in images:
        h, w = image["height"], image["width"]
        masks, scores, classes = [], [], []
        for k in range(5 if image["id"] == 9 else 4):
            y0, x0 = rng.integers(0, h // 2), rng.integers(0, w // 2)
            sy, sx = rng.integers(12, h // 2 + 2), rng.integers(12, w // 2 + 2)
            if k == 4:  # a large object (area > 96^2)
                y0, x0, sy, sx = 110, 90, 120, 100
            cat = int(rng.integers(0, 2))
            gt = np.zeros((h, w), np.uint8)
            gt[y0:y0 + sy, x0:x0 + sx] = 1
            if k == 0:  # a polygon (a triangle inside the rectangle)
                poly = [float(x0), float(y0), float(x0 + sx), float(y0), float(x0),
                        float(y0 + sy)]
                segm = [poly]
                gt = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(segm, h, w)))
            elif k == 3 and image["id"] == 9:  # a crowd region, uncompressed RLE
                segm = mask_utils.encode(np.asfortranarray(gt))
                segm = {"size": [h, w], "counts": _uncompressed(gt)}
            else:
                segm = masks_to_rle(gt[None])[0]
            annotations.append({"id": ann_id, "image_id": image["id"], "category_id": cat + 1,
                                "segmentation": segm, "iscrowd": int(k == 3 and image["id"] == 9),
                                "area": float(gt.sum()),
                                "bbox": [float(v) for v in mask_utils.toBbox(
                                    mask_utils.encode(np.asfortranarray(gt)))]})
            ann_id += 1
            noisy = np.roll(gt, tuple(rng.integers(-1, 2, 2)), axis=(0, 1))
            flip = (rng.uniform(size=gt.shape) < 0.1) & (gt > 0)
            noisy[flip] = 0
            masks.append(noisy)
            scores.append(float(rng.uniform(0.3, 1.0)))
            classes.append(cat if rng.uniform() > 0.1 else 1 - cat)
        for _ in range(2):  # false positives
            fp = np.zeros((h, w), np.uint8)
            y0, x0 = rng.integers(0, h - 5), rng.integers(0, w - 5)
            fp[y0:y0 + 5, x0:x0 + 8] = 1
            masks.append(fp)
            scores.append(float(rng.uniform(0.0, 0.6)))
            classes.append(int(rng.integers(0, 2)))
        detections[image["id"]] = (np.stack(masks), np.array(scores), np.array(classes))
    gt = {"images": images, "annotations": annotations,
          "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    return gt, detections


def _uncompressed(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE (column-major run lengths, starting with zeros)."""
    flat = np.asarray(mask, np.uint8).flatten(order="F")
    counts, value, run = [], 0, 0
    for v in flat.tolist():
        if v == value:
            run += 1
        else:
            counts.append(run)
            value, run = v, 1
    counts.append(run)
    return counts


def _pycocotools_stats(gt_path: Path, res_path: Path) -> np.ndarray:
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_path))
        coco_dt = coco_gt.loadRes(str(res_path))
        coco_eval = COCOeval(coco_gt, coco_dt, iouType="segm")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return coco_eval.stats


def test_all_stats_equal_pycocotools_on_the_json_files(tmp_path):
    rng = np.random.default_rng(3)
    gt, detections = _random_case(rng)
    gt_path = tmp_path / "gt.json"
    gt_path.write_text(json.dumps(gt))
    evaluator = CocoMaskEvaluator(gt_path, [1, 2])
    for image_id, (masks, scores, classes) in detections.items():
        evaluator.add_image(image_id, masks, scores, classes)
    stats = evaluator.evaluate()
    res_path = evaluator.write_detections(tmp_path / "segm.json")
    written = json.loads(res_path.read_text())
    assert len(written) == 19 and "bbox" not in written[0]
    want = _pycocotools_stats(gt_path, res_path)
    got = np.array([stats[name] for name in STAT_NAMES])
    np.testing.assert_array_equal(got, want)
    assert 0.1 < stats["AP"] < 0.9  # a case with something to score, of every size
    assert min(stats["APs"], stats["APm"], stats["APl"]) > 0
    metrics = json.loads(evaluator.write_metrics(tmp_path / "m.json", {"step": 3}).read_text())
    assert metrics["segm/AP"] == metrics["mask_AP"] == stats["AP"] and metrics["step"] == 3
    assert metrics["num_images"] == 3


def test_binary_array_ground_truth_equals_rle(tmp_path):
    """Ground-truth masks given as arrays score like the same masks given as RLE; area and
    bbox come from the mask when absent."""
    rng = np.random.default_rng(4)
    gt, detections = _random_case(rng)
    as_arrays = json.loads(json.dumps(gt))
    sizes = {im["id"]: (im["height"], im["width"]) for im in gt["images"]}
    for ann in as_arrays["annotations"]:
        h, w = sizes[ann["image_id"]]
        if ann["iscrowd"]:
            continue
        encoded = gt["annotations"][ann["id"] - 1]["segmentation"]
        if isinstance(encoded, list):
            rle = mask_utils.merge(mask_utils.frPyObjects(encoded, h, w))
        else:
            rle = {"size": encoded["size"], "counts": encoded["counts"].encode()}
        ann["segmentation"] = mask_utils.decode(rle)
        del ann["area"], ann["bbox"]
    results = []
    for dataset in (gt, as_arrays):
        evaluator = CocoMaskEvaluator(dataset, [1, 2])
        for image_id, (masks, scores, classes) in detections.items():
            evaluator.add_image(image_id, masks, scores, classes)
        results.append(evaluator.evaluate())
    for name in STAT_NAMES:
        assert results[0][name] == pytest.approx(results[1][name], abs=1e-12), name
    normalized = mask_ground_truth(as_arrays, [1, 2])
    first = normalized["annotations"][1]
    assert isinstance(first["segmentation"]["counts"], str)
    assert first["area"] == gt["annotations"][1]["area"]
    assert first["bbox"] == gt["annotations"][1]["bbox"]
    json.dumps(normalized)  # JSON-ready


def test_batches_with_padding_and_only_added_images(tmp_path):
    """add_detections takes the box evaluators' batch layout plus one mask array per row;
    padding rows (negative ids) and slots past num_detections are skipped; only added images
    are scored."""
    rng = np.random.default_rng(5)
    gt, detections = _random_case(rng)
    masks, scores, classes = detections[7]
    d = len(scores)
    evaluator = CocoMaskEvaluator(gt, [1, 2])
    evaluator.add_detections(
        np.array([7, -1]), np.zeros((2, d + 2, 4)),
        np.stack([np.r_[scores, 0.99, 0.99], np.zeros(d + 2)]),
        np.stack([np.r_[classes, 0, 0], np.zeros(d + 2)]), np.array([d, 0]),
        masks=[np.concatenate([masks, np.ones((2, *masks.shape[1:]), np.uint8)]),
               np.zeros((d + 2, 1, 1), np.uint8)])
    assert evaluator.num_images == 1 and len(evaluator.detections()) == d
    batched = evaluator.evaluate()
    single = CocoMaskEvaluator(gt, [1, 2])
    single.add_image(7, masks, scores, classes)
    assert batched == single.evaluate()
    only_7 = {**gt, "images": [im for im in gt["images"] if im["id"] == 7],
              "annotations": [a for a in gt["annotations"] if a["image_id"] == 7]}
    alone = CocoMaskEvaluator(only_7, [1, 2])
    alone.add_image(7, masks, scores, classes)
    assert alone.evaluate()["AP"] == batched["AP"]


def test_errors_name_the_problem():
    evaluator = CocoMaskEvaluator(_hand_ground_truth(), [3])
    with pytest.raises(ValueError, match="paste them"):
        evaluator.add_image(1, np.zeros((1, 30, 40), np.uint8), [0.5], [0])
    with pytest.raises(ValueError, match="not in the ground truth"):
        evaluator.add_image(2, np.zeros((1, 40, 40), np.uint8), [0.5], [0])
    with pytest.raises(ValueError, match="classes"):
        evaluator.add_image(1, np.zeros((1, 40, 40), np.uint8), [0.5], [1])
    evaluator.add_image(1, np.zeros((1, 40, 40), np.uint8), [0.5], [0])
    with pytest.raises(ValueError, match="twice"):
        evaluator.add_image(1, np.zeros((1, 40, 40), np.uint8), [0.5], [0])
    no_masks = _hand_ground_truth()
    del no_masks["annotations"][0]["segmentation"]
    no_masks["annotations"][0]["bbox"] = [10, 10, 10, 10]
    with pytest.raises(ValueError, match="no segmentation"):
        CocoMaskEvaluator(no_masks, [3])
