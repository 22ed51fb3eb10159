"""Pascal VOC box metrics: per-class AP at IoU 0.5 (TF OD API ``pascal_voc_detection_metrics``).

Semantics of the TF OD API's ``PascalDetectionEvaluator`` (``utils/object_detection_evaluation.py``,
``utils/per_image_evaluation.py``, ``utils/metrics.py``):

* per image and class, detections with an empty box are dropped, the rest sorted by
  descending score; each detection looks at the ground truth box it overlaps most (difficult
  ones included). IoU >= 0.5 with a non-difficult box not yet taken: true positive (the box
  is taken); with a taken box: false positive; with a difficult box: the detection is
  ignored (neither). IoU < 0.5: false positive. A detection never falls back to its
  second-best box (as the VOC devkit);
* per class, all images' detections sorted by score; precision and recall cumulated;
  AP = area under the monotone (non-increasing) envelope of the precision/recall curve at
  every recall change (VOC 2010+ "all points", not the 11-point VOC 2007 rule);
* a class without non-difficult ground truth has AP NaN and is left out of the mean.

COCO ``iscrowd`` annotations count as difficult (``VocSource`` writes VOC difficult objects
as ``iscrowd``). Keys: ``PascalBoxes_Precision/mAP@0.5IOU`` and
``PascalBoxes_PerformanceByCategory/AP@0.5IOU/<class name>``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxdet.eval.coco_eval import detection_batch

METRIC_PREFIX = "PascalBoxes"


def map_key(iou_threshold: float = 0.5) -> str:
    """The mean-AP key, e.g. ``PascalBoxes_Precision/mAP@0.5IOU``."""
    return f"{METRIC_PREFIX}_Precision/mAP@{iou_threshold}IOU"


def class_ap_key(name: str, iou_threshold: float = 0.5) -> str:
    """A per-class key, e.g. ``PascalBoxes_PerformanceByCategory/AP@0.5IOU/dog``."""
    return f"{METRIC_PREFIX}_PerformanceByCategory/AP@{iou_threshold}IOU/{name}"


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of yxyx boxes ``a[N, 4]`` x ``b[M, 4]`` -> ``[N, M]`` (no +1 pixel convention)."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    h = np.maximum(0.0, np.minimum(a[:, None, 2], b[None, :, 2])
                   - np.maximum(a[:, None, 0], b[None, :, 0]))
    w = np.maximum(0.0, np.minimum(a[:, None, 3], b[None, :, 3])
                   - np.maximum(a[:, None, 1], b[None, :, 1]))
    inter = h * w
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match_detections(
    det_boxes: np.ndarray,
    det_scores: np.ndarray,
    gt_boxes: np.ndarray,
    gt_difficult: np.ndarray,
    iou_threshold: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """TP/FP labels of one image's detections of one class -> ``(scores[K], is_tp[K])``.

    Detections matched to a difficult box are left out (K <= number of detections); the
    rest come back sorted by descending score. See the module docstring for the rule.
    """
    det_boxes = np.asarray(det_boxes, np.float64).reshape(-1, 4)
    det_scores = np.asarray(det_scores, np.float64).reshape(-1)
    order = np.argsort(det_scores)[::-1]  # TF np_box_list_ops.sort_by_field
    det_boxes, det_scores = det_boxes[order], det_scores[order]
    gt_boxes = np.asarray(gt_boxes, np.float64).reshape(-1, 4)
    gt_difficult = np.asarray(gt_difficult, bool).reshape(-1)
    num_det = det_scores.shape[0]
    if num_det == 0 or gt_boxes.shape[0] == 0:
        return det_scores, np.zeros(num_det, bool)
    iou = pairwise_iou(det_boxes, gt_boxes)
    best = np.argmax(iou, axis=1)
    taken = np.zeros(gt_boxes.shape[0], bool)
    is_tp = np.zeros(num_det, bool)
    ignored = np.zeros(num_det, bool)
    for i in range(num_det):
        g = best[i]
        if iou[i, g] < iou_threshold:
            continue
        if gt_difficult[g]:
            ignored[i] = True
        elif not taken[g]:
            is_tp[i] = taken[g] = True
    return det_scores[~ignored], is_tp[~ignored]


def precision_recall(
    scores: np.ndarray, is_tp: np.ndarray, num_gt: int
) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative precision and recall over detections sorted by descending score (TF
    ``metrics.compute_precision_recall``; ties in TF's order, ``argsort(scores)[::-1]``)."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    is_tp = np.asarray(is_tp, np.float64).reshape(-1)
    if num_gt <= 0:
        raise ValueError("precision_recall needs num_gt > 0")
    order = np.argsort(scores)[::-1]
    tp = np.cumsum(is_tp[order])
    fp = np.cumsum(1.0 - is_tp[order])
    return tp / (tp + fp), tp / num_gt


def average_precision(precision: np.ndarray, recall: np.ndarray) -> float:
    """Area under the monotone precision envelope (TF ``metrics.compute_average_precision``,
    VOC 2010+): no detections -> 0."""
    precision = np.asarray(precision, np.float64)
    recall = np.asarray(recall, np.float64)
    if precision.size == 0:
        return 0.0
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.where(r[1:] != r[:-1])[0] + 1
    return float(np.sum((r[steps] - r[steps - 1]) * p[steps]))


class VocEvaluator:
    """Accumulates detections for a COCO-format ground truth and scores them as Pascal VOC.

    Same interface as :class:`jaxdet.eval.coco_eval.CocoEvaluator`: ``add_detections`` with
    original-pixel yxyx boxes and contiguous classes, then ``evaluate()``. Only the images
    passed to ``add_detections`` are evaluated (all ground-truth images when none were).
    """

    def __init__(
        self,
        ground_truth: dict | str | Path,
        category_ids: Sequence[int],
        category_names: Sequence[str] | None = None,
        matching_iou_threshold: float = 0.5,
    ):
        self.category_ids = [int(c) for c in category_ids]
        if not self.category_ids:
            raise ValueError("category_ids is empty: need one COCO id per model class.")
        if isinstance(ground_truth, str | Path):
            with open(ground_truth) as f:
                ground_truth = json.load(f)
        if "images" not in ground_truth or "annotations" not in ground_truth:
            raise ValueError("ground truth must be a COCO dict with 'images' and 'annotations'.")
        gt_names = {int(c["id"]): c.get("name", str(c["id"]))
                    for c in ground_truth.get("categories", [])}
        if category_names is not None and len(category_names) != len(self.category_ids):
            raise ValueError(
                f"category_names has {len(category_names)} entries but category_ids has "
                f"{len(self.category_ids)}."
            )
        self.category_names = (list(category_names) if category_names is not None
                               else [gt_names.get(c, str(c)) for c in self.category_ids])
        self.iou_threshold = float(matching_iou_threshold)
        contiguous = {c: k for k, c in enumerate(self.category_ids)}
        per_image: dict[int, list] = {int(im["id"]): [] for im in ground_truth["images"]}
        for ann in ground_truth["annotations"]:
            k = contiguous.get(int(ann["category_id"]))
            image_id = int(ann["image_id"])
            if k is None or image_id not in per_image:
                continue
            x, y, w, h = (float(v) for v in ann["bbox"])
            difficult = bool(ann.get("iscrowd", 0)) or bool(ann.get("difficult", 0))
            per_image[image_id].append((y, x, y + h, x + w, k, difficult))
        self._gt = {
            image_id: (np.array([r[:4] for r in rows], np.float64).reshape(-1, 4),
                       np.array([r[4] for r in rows], np.int64),
                       np.array([r[5] for r in rows], bool))
            for image_id, rows in per_image.items()
        }
        self.reset()

    def reset(self) -> None:
        """Forget all added detections (the ground truth stays loaded)."""
        num = len(self.category_ids)
        self._image_ids: list[int] = []
        self._seen: set[int] = set()
        self._scores: list[list[np.ndarray]] = [[] for _ in range(num)]
        self._is_tp: list[list[np.ndarray]] = [[] for _ in range(num)]
        self.results: dict | None = None

    def add_detections(self, image_ids, boxes, scores, classes, num_detections) -> None:
        """Add a batch: ``image_ids [n]`` (negative: padding, skipped), ``boxes [n, D, 4]``
        original-pixel yxyx, ``scores``/``classes [n, D]``, ``num_detections [n]``."""
        image_ids, boxes, scores, classes, num = detection_batch(
            image_ids, boxes, scores, classes, num_detections)
        classes = np.rint(classes).astype(np.int64)
        d = boxes.shape[1]
        for row, image_id in enumerate(image_ids.tolist()):
            if image_id < 0:
                continue
            if image_id not in self._gt:
                raise ValueError(f"image id {image_id} is not in the ground truth.")
            if image_id in self._seen:
                raise ValueError(f"image id {image_id} added twice.")
            self._image_ids.append(image_id)
            self._seen.add(image_id)
            k = int(np.clip(num[row], 0, d))
            b, s, c = boxes[row, :k], scores[row, :k], classes[row, :k]
            if ((c < 0) | (c >= len(self.category_ids))).any():
                raise ValueError(f"detection classes must lie in [0, {len(self.category_ids)}).")
            keep = (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3])  # TF drops empty boxes
            b, s, c = b[keep], s[keep], c[keep]
            gt_boxes, gt_classes, gt_difficult = self._gt[image_id]
            for cls in np.unique(c).tolist():
                g = gt_classes == cls
                sc, tp = match_detections(b[c == cls], s[c == cls], gt_boxes[g],
                                          gt_difficult[g], self.iou_threshold)
                self._scores[cls].append(sc)
                self._is_tp[cls].append(tp)
        self.results = None

    def evaluate(self) -> dict[str, float]:
        """``{mAP key: mean AP, per-class key: AP}``; NaN for classes without ground truth."""
        image_ids = self._image_ids or list(self._gt)
        num_gt = np.zeros(len(self.category_ids), np.int64)
        for image_id in image_ids:
            _, gt_classes, gt_difficult = self._gt[image_id]
            num_gt += np.bincount(gt_classes[~gt_difficult], minlength=len(num_gt))
        ap = np.full(len(self.category_ids), np.nan)
        for k in range(len(self.category_ids)):
            if num_gt[k] == 0:
                continue
            scores = np.concatenate(self._scores[k]) if self._scores[k] else np.zeros(0)
            is_tp = np.concatenate(self._is_tp[k]) if self._is_tp[k] else np.zeros(0, bool)
            ap[k] = average_precision(*precision_recall(scores, is_tp, int(num_gt[k])))
        finite = ap[~np.isnan(ap)]
        results = {map_key(self.iou_threshold): float(finite.mean()) if finite.size else
                   float("nan")}
        for name, value in zip(self.category_names, ap.tolist(), strict=True):
            results[class_ap_key(name, self.iou_threshold)] = float(value)
        self.results = results
        return results


__all__ = [
    "VocEvaluator",
    "average_precision",
    "class_ap_key",
    "map_key",
    "match_detections",
    "pairwise_iou",
    "precision_recall",
]
