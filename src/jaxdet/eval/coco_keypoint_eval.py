"""COCO keypoint evaluation (OKS AP) with pycocotools, for one keypoint task's category.

Usage::

    evaluator = CocoKeypointEvaluator(source.ground_truth(), category_id=1,
                                      sigmas=COCO_PERSON_SIGMAS, keypoint_names=names,
                                      class_index=0)
    for batch in ...:
        evaluator.add_detections(image_ids, boxes_px, scores, classes, keypoints_px,
                                 keypoint_scores, num_detections)
    metrics = evaluator.evaluate()      # {"AP": ..., "AP50": ..., ..., "ARl": ...}

The ground truth given to pycocotools holds only the category's annotations, each with the
task's k keypoints (``keypoint_names`` picked by name from the category's ``keypoints`` list;
a category without one is taken position by position), and OKS uses ``sigmas`` (one per
keypoint; COCO's person sigmas are ``data.keypoints.COCO_PERSON_SIGMAS``). pycocotools scores
a detection's keypoints against an annotation's labelled ones (v > 0) with

    OKS = mean_i exp(-d_i^2 / (2 s^2 (2 sigma_i)^2)),   s^2 = the annotation's area,

ignores annotations with ``num_keypoints == 0`` or ``iscrowd``, keeps the 20 best-scored
detections per image, and reports AP/AR over OKS 0.50:0.05:0.95 for all, medium and large
objects. Only the images passed to ``add_detections`` are evaluated (all when none were);
rows whose image id is negative are padding and are skipped.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools.coco import COCO

from jaxdet.eval.coco_eval import (
    SCORE_DECIMALS,
    detection_batch,
    run_cocoeval,
    write_json,
    write_metrics_json,
)

KEYPOINT_STAT_NAMES: tuple[str, ...] = (
    "AP", "AP50", "AP75", "APm", "APl", "AR", "AR50", "AR75", "ARm", "ARl",
)
KEYPOINT_DECIMALS = 2


def _category_positions(category: dict[str, Any], keypoint_names: Sequence[str] | None,
                        num_sigmas: int) -> tuple[list[int], list[str]]:
    """(positions of the task's keypoints in the category's annotations, their names).

    Raises:
      ValueError: a name the category lacks, or ``num_sigmas`` != the task's keypoint count.
    """
    label = f"category {category.get('id')} ({category.get('name')!r})"
    names = category.get("keypoints")
    if keypoint_names is None:
        if names is None:
            return list(range(num_sigmas)), [str(i) for i in range(num_sigmas)]
        keypoint_names = list(names)
    keypoint_names = [str(n) for n in keypoint_names]
    if len(keypoint_names) != num_sigmas:
        raise ValueError(
            f"{num_sigmas} OKS sigmas for the {len(keypoint_names)} keypoints of {label} "
            f"({keypoint_names}); give one sigma per keypoint")
    if names is None:
        return list(range(len(keypoint_names))), keypoint_names
    missing = [n for n in keypoint_names if n not in names]
    if missing:
        raise ValueError(f"{label} has no keypoints named {missing} (its keypoints: "
                         f"{list(names)})")
    return [list(names).index(n) for n in keypoint_names], keypoint_names


def keypoint_ground_truth(ground_truth: dict, category_id: int,
                          keypoint_names: Sequence[str] | None, num_sigmas: int) -> dict:
    """The COCO dict pycocotools evaluates one keypoint category on: every image, the
    category alone (its ``keypoints`` names and ``skeleton`` reduced to the task's), and its
    annotations with the task's k keypoints ([x, y, v] * k, in ``keypoint_names`` order),
    ``num_keypoints`` (the count of v > 0 when keypoints were picked or it is missing),
    ``iscrowd`` and ``area`` (box area) filled when absent.

    Raises:
      ValueError naming the category / annotation: the category is not in the ground truth,
      lacks a keypoint name, ``num_sigmas`` differs from the task's keypoint count, or an
      annotation's keypoints do not have 3 values per keypoint of the category.
    """
    if "images" not in ground_truth or "annotations" not in ground_truth:
        raise ValueError("ground truth must be a COCO dict with 'images' and 'annotations'")
    categories = {int(c["id"]): c for c in ground_truth.get("categories") or []}
    if category_id not in categories:
        categories[category_id] = {"id": category_id, "name": str(category_id)}
    category = categories[category_id]
    positions, names = _category_positions(category, keypoint_names, num_sigmas)
    count = len(category["keypoints"]) if category.get("keypoints") is not None else len(names)
    identity = positions == list(range(count))
    spec_index = {p: j for j, p in enumerate(positions)}
    skeleton = [[spec_index[a - 1] + 1, spec_index[b - 1] + 1]
                for a, b in category.get("skeleton") or []
                if a - 1 in spec_index and b - 1 in spec_index]
    annotations = []
    for index, ann in enumerate(ground_truth["annotations"]):
        if int(ann.get("category_id", -1)) != category_id:
            continue
        ann = copy.deepcopy(ann)  # COCOeval writes 'ignore' into the annotations
        ann.setdefault("id", index + 1)
        ann.setdefault("iscrowd", 0)
        if "area" not in ann:
            ann["area"] = float(ann["bbox"][2]) * float(ann["bbox"][3])
        points = ann.get("keypoints") or [0] * (3 * count)
        if len(points) != 3 * count:
            defined = ("has" if category.get("keypoints") is not None else
                       "has no 'keypoints' names; the task (its sigmas / keypoint_names) has")
            raise ValueError(
                f"annotation {ann['id']} (image {ann.get('image_id')}) has {len(points)} "
                f"keypoint values; category {category_id} {defined} {count} keypoints "
                "([x, y, v] each)")
        if not identity:
            triples = [points[3 * p:3 * p + 3] for p in positions]
            ann["keypoints"] = [value for t in triples for value in t]
        if not identity or "num_keypoints" not in ann:
            ann["num_keypoints"] = sum(1 for v in ann["keypoints"][2::3] if v > 0)
        annotations.append(ann)
    category = dict(category, keypoints=list(names), skeleton=skeleton)
    return {"images": list(ground_truth["images"]), "annotations": annotations,
            "categories": [category]}


class CocoKeypointEvaluator:
    """Accumulates one keypoint task's detections and scores them with pycocotools' OKS.

    Args:
      ground_truth: a COCO-format dict (a source's ``ground_truth()``) or the path of one.
      category_id: the COCO category id of the task's class.
      sigmas: the per-keypoint OKS sigmas, one per keypoint of the task.
      keypoint_names: the task's keypoints, in the order of the detections' k (picked by name
        from the category's ``keypoints``); None: the category's own list (or, without one,
        ``len(sigmas)`` keypoints position by position).
      class_index: the contiguous class index of the task's class: detections of other
        classes are left out. None: every detection added is of this category.
    """

    def __init__(self, ground_truth: dict | str | Path, category_id: int,
                 sigmas: Sequence[float], keypoint_names: Sequence[str] | None = None, *,
                 class_index: int | None = None):
        if isinstance(ground_truth, str | Path):
            with open(ground_truth) as f:
                ground_truth = json.load(f)
        self.category_id = int(category_id)
        self.sigmas = np.asarray(sigmas, np.float64).reshape(-1)
        if self.sigmas.size == 0 or (self.sigmas <= 0).any():
            raise ValueError(f"OKS sigmas must be positive, one per keypoint; got {sigmas}")
        self.class_index = class_index
        dataset = keypoint_ground_truth(ground_truth, self.category_id, keypoint_names,
                                        self.sigmas.size)
        self.keypoint_names = list(dataset["categories"][0]["keypoints"])
        self._coco_gt = COCO()
        self._coco_gt.dataset = dataset
        with contextlib.redirect_stdout(io.StringIO()):
            self._coco_gt.createIndex()
        self._gt_image_ids = set(self._coco_gt.getImgIds())
        self.reset()

    @property
    def num_keypoints(self) -> int:
        return int(self.sigmas.size)

    # ------------------------------------------------------------------ accumulate

    def reset(self) -> None:
        """Forget all added detections (the ground truth stays loaded)."""
        self._image_ids: list[int] = []
        self._seen: set[int] = set()
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self.summary_text = ""
        self.results: dict | None = None

    def add_detections(self, image_ids, boxes, scores, classes, keypoints, keypoint_scores,
                       num_detections) -> None:
        """Add a batch of detections.

        Args:
          image_ids: ``[n]`` COCO image ids (negative: padding row, skipped).
          boxes: ``[n, D, 4]`` (ymin, xmin, ymax, xmax) original-image pixels (written to
            the results for reference; pycocotools scores the keypoints only).
          scores: ``[n, D]`` detection scores (the results' ``score``).
          classes: ``[n, D]`` contiguous class indices (see ``class_index``).
          keypoints: ``[n, D, k, 2]`` (y, x) original-image pixels, the task's k keypoints.
          keypoint_scores: ``[n, D, k]`` (the results' per-keypoint third value).
          num_detections: ``[n]``; only the first ``num_detections[i]`` of row i count.
        """
        image_ids, boxes, scores, classes, num = detection_batch(
            image_ids, boxes, scores, classes, num_detections)
        n, d = scores.shape
        k = self.num_keypoints
        points = np.asarray(keypoints, np.float64)
        point_scores = np.asarray(keypoint_scores, np.float64)
        if points.shape != (n, d, k, 2) or point_scores.shape != (n, d, k):
            raise ValueError(
                f"expected keypoints [n={n}, D={d}, k={k}, 2] and keypoint_scores [{n}, {d}, "
                f"{k}], got {points.shape} and {point_scores.shape}")
        keep = image_ids >= 0
        ids = image_ids[keep].tolist()
        unknown = sorted(set(ids) - self._gt_image_ids)
        if unknown:
            raise ValueError(f"image ids not in the ground truth: {unknown[:10]}")
        repeated = sorted(set(ids) & self._seen)
        if len(set(ids)) != len(ids) or repeated:
            raise ValueError(f"image ids added twice: {repeated[:10] or ids}; mark padding "
                             "rows of an eval batch with a negative image id")
        valid = (np.arange(d)[None, :] < np.clip(num, 0, d)[:, None]) & keep[:, None]
        if self.class_index is not None:
            cls = np.rint(classes).astype(np.int64) if classes.dtype.kind == "f" else classes
            valid &= cls == self.class_index
        self._image_ids.extend(ids)
        self._seen.update(ids)
        rows = np.broadcast_to(image_ids[:, None], (n, d))[valid]
        self._chunks.append((rows, boxes[valid], scores[valid], points[valid],
                             point_scores[valid]))

    @property
    def num_images(self) -> int:
        return len(self._image_ids)

    def detections(self) -> list[dict]:
        """All detections in COCO keypoint results format: ``keypoints`` [x, y, score] * k
        pixels, ``score`` the detection's, ``bbox`` [x, y, w, h] (pycocotools replaces it by
        the keypoints' extent)."""
        out: list[dict] = []
        for rows, boxes, scores, points, point_scores in self._chunks:
            xy = np.round(points[..., ::-1], KEYPOINT_DECIMALS)
            triples = np.concatenate(
                [xy, np.round(point_scores, SCORE_DECIMALS)[..., None]], axis=-1)
            b = np.round(boxes, KEYPOINT_DECIMALS)
            bbox = np.stack([b[:, 1], b[:, 0], b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]], -1)
            for i, box, score, t in zip(rows.tolist(), bbox.tolist(),
                                        np.round(scores, SCORE_DECIMALS).tolist(),
                                        triples.reshape(len(rows), -1).tolist(), strict=True):
                out.append({"image_id": i, "category_id": self.category_id, "keypoints": t,
                            "score": score, "bbox": box})
        return out

    def write_detections(self, path: str | Path) -> Path:
        return write_json(path, self.detections())

    def write_ground_truth(self, path: str | Path) -> Path:
        """The COCO dict pycocotools evaluates (see :func:`keypoint_ground_truth`)."""
        return write_json(path, self._coco_gt.dataset)

    # ------------------------------------------------------------------ evaluate

    def evaluate(self) -> dict[str, float]:
        """Run COCOeval (keypoints) and return its 10 stats by name (-1: nothing to score,
        e.g. no medium objects)."""
        image_ids = sorted(self._image_ids) if self._image_ids else sorted(self._gt_image_ids)
        coco_eval, self.summary_text = run_cocoeval(
            self._coco_gt, self.detections(), "keypoints", image_ids, [self.category_id],
            oks_sigmas=self.sigmas)
        self.results = {name: float(v)
                        for name, v in zip(KEYPOINT_STAT_NAMES, coco_eval.stats, strict=True)}
        self._coco_eval = coco_eval
        return self.results

    def write_metrics(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write the last ``evaluate()`` result (run now if needed) as JSON."""
        results = self.results if self.results is not None else self.evaluate()
        payload: dict[str, Any] = dict(results)
        payload["num_images"] = len(self._image_ids) or len(self._gt_image_ids)
        if extra:
            payload.update(extra)
        return write_metrics_json(path, payload)


__all__ = ["CocoKeypointEvaluator", "KEYPOINT_STAT_NAMES", "keypoint_ground_truth"]
