"""COCO box evaluation with pycocotools, the reference every detection paper reports.

Usage::

    evaluator = CocoEvaluator("instances_val2017.json", category_ids=[1, 2, 3, ...])
    for batch in ...:
        evaluator.add_detections(image_ids, boxes_px, scores, classes, num_detections)
    metrics = evaluator.evaluate()          # {"AP": ..., ..., "per_class_AP": {...}}
    evaluator.write_detections(workdir / "detections.json")
    evaluator.write_metrics(workdir / "metrics.json", extra={"step": step})

Only the images passed to ``add_detections`` are evaluated (an image with
``num_detections == 0`` still counts, its ground truth as misses); when none were added,
every ground-truth image is. Rows whose image id is negative are padding and are skipped.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

STAT_NAMES: tuple[str, ...] = (
    "AP", "AP50", "AP75", "APs", "APm", "APl",
    "AR1", "AR10", "AR100", "ARs", "ARm", "ARl",
)
BBOX_DECIMALS = 2
SCORE_DECIMALS = 6


def write_json(path: str | Path, payload: Any) -> Path:
    """Writes ``payload`` as JSON to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f)
    return path


def coco_xywh(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pixel yxyx boxes [N, 4] -> (x, y, width, height), each [N], rounded as written to JSON."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return (np.round(b[:, 1], BBOX_DECIMALS), np.round(b[:, 0], BBOX_DECIMALS),
            np.round(b[:, 3] - b[:, 1], BBOX_DECIMALS), np.round(b[:, 2] - b[:, 0], BBOX_DECIMALS))


def _normalize_ground_truth(dataset: dict, category_ids: Sequence[int],
                            category_names: Sequence[str] | None) -> dict:
    """Fill the fields pycocotools needs but small hand-made datasets often omit."""
    if "images" not in dataset or "annotations" not in dataset:
        raise ValueError("ground truth must be a COCO dict with 'images' and 'annotations'.")
    dataset = copy.deepcopy(dataset)  # COCOeval writes 'ignore' into the annotations.
    if "categories" not in dataset:
        names = category_names or [str(c) for c in category_ids]
        dataset["categories"] = [{"id": int(c), "name": n} for c, n in zip(category_ids, names,
                                                                             strict=True)]
    for index, ann in enumerate(dataset["annotations"]):
        ann.setdefault("id", index + 1)
        ann.setdefault("iscrowd", 0)
        if "area" not in ann:
            ann["area"] = float(ann["bbox"][2]) * float(ann["bbox"][3])
    return dataset


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic | np.ndarray) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value



def load_coco_ground_truth(ground_truth: dict | str | Path, category_ids: Sequence[int],
                           category_names: Sequence[str] | None, normalize
                           ) -> tuple[list[int], list[str], COCO]:
    """(category ids, display names, indexed pycocotools COCO) of an evaluator's ground truth:
    a COCO dict or JSON path, checked and put in shape by ``normalize(dict, ids, names)``;
    names default to the ground truth's. Raises ValueError on empty or mismatched
    categories."""
    ids = [int(c) for c in category_ids]
    if not ids:
        raise ValueError("category_ids is empty: need one COCO id per model class.")
    if category_names is not None and len(category_names) != len(ids):
        raise ValueError(f"category_names has {len(category_names)} entries but category_ids "
                         f"has {len(ids)}.")
    if isinstance(ground_truth, str | Path):
        with open(ground_truth) as f:
            ground_truth = json.load(f)
    dataset = normalize(ground_truth, ids, category_names)
    coco_gt = COCO()
    coco_gt.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt.createIndex()
    gt_names = {int(c["id"]): c.get("name", str(c["id"])) for c in dataset["categories"]}
    names = (list(category_names) if category_names is not None
             else [gt_names.get(c, str(c)) for c in ids])
    return ids, names, coco_gt


def results_as_coco(coco_gt: COCO, detections: list[dict]) -> COCO:
    """The detections as pycocotools results on ``coco_gt`` (copied: ``loadRes`` edits them;
    an empty list gives an empty result set, which ``loadRes`` cannot)."""
    if detections:
        return coco_gt.loadRes(copy.deepcopy(detections))
    coco_dt = COCO()
    coco_dt.dataset = {"images": list(coco_gt.dataset["images"]),
                       "categories": copy.deepcopy(coco_gt.dataset["categories"]),
                       "annotations": []}
    coco_dt.createIndex()
    return coco_dt


def run_cocoeval(coco_gt: COCO, detections: list[dict], iou_type: str, image_ids: list,
                 category_ids: list, *, oks_sigmas: np.ndarray | None = None
                 ) -> tuple[COCOeval, str]:
    """pycocotools' COCOeval (``bbox``, ``segm`` or ``keypoints``) of ``detections`` on the
    given images and categories, pycocotools' printing kept out of the log: (the evaluated
    COCOeval, its ``summarize()`` text)."""
    log, summary = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(log):
        coco_eval = COCOeval(coco_gt, results_as_coco(coco_gt, detections), iouType=iou_type)
        if oks_sigmas is not None:
            coco_eval.params.kpt_oks_sigmas = oks_sigmas.copy()
        coco_eval.params.imgIds = image_ids
        coco_eval.params.catIds = category_ids
        coco_eval.evaluate()
        coco_eval.accumulate()
    with contextlib.redirect_stdout(summary):
        coco_eval.summarize()
    return coco_eval, summary.getvalue()


def per_class_ap(coco_eval: COCOeval, category_ids: Sequence[int],
                 category_names: Sequence[str]) -> dict[str, float | None]:
    """AP (IoU .50:.95, all areas, 100 detections) per class name; None: no ground truth."""
    precision = coco_eval.eval["precision"]  # [T, R, K, A, M]
    area_all = coco_eval.params.areaRngLbl.index("all")
    cat_ids = list(coco_eval.params.catIds)
    out: dict[str, float | None] = {}
    for cid, name in zip(category_ids, category_names, strict=True):
        p = precision[:, :, cat_ids.index(cid), area_all, -1]
        p = p[p > -1]
        out[name] = float(np.mean(p)) if p.size else None
    return out


def write_metrics_json(path: str | Path, payload: dict) -> Path:
    """``payload`` as indented JSON (non-finite floats as null), parent folders made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(_json_safe(payload), f, indent=2)
    return path


def detection_batch(image_ids, boxes, scores, classes, num_detections) -> tuple[np.ndarray, ...]:
    """Checks and converts one batch of detections for an evaluator's ``add_detections``.

    Returns ``(image_ids int64 [n], boxes float64 [n, D, 4], scores float64 [n, D],
    classes [n, D] as given, num_detections int64 [n])``; raises ValueError naming the shapes
    when they disagree.
    """
    image_ids = np.asarray(image_ids).astype(np.int64).reshape(-1)
    boxes = np.asarray(boxes, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    classes = np.asarray(classes)
    num = np.asarray(num_detections).astype(np.int64).reshape(-1)
    n = image_ids.shape[0]
    if boxes.ndim != 3 or boxes.shape[0] != n or boxes.shape[2] != 4:
        raise ValueError(f"boxes must be [n={n}, D, 4], got shape {boxes.shape}.")
    d = boxes.shape[1]
    if scores.shape != (n, d) or classes.shape != (n, d) or num.shape != (n,):
        raise ValueError(
            f"expected scores/classes [n={n}, D={d}] and num_detections [{n}], got "
            f"{scores.shape}, {classes.shape}, {num.shape}."
        )
    return image_ids, boxes, scores, classes, num

class CocoEvaluator:
    """Accumulates detections for a COCO ground truth and scores them with pycocotools.

    Args:
      ground_truth: a COCO-format dict, or the path of a COCO JSON file.
      category_ids: ``category_ids[k]`` is the COCO category id of contiguous class ``k``
        (what the model predicts). Evaluation runs over these categories.
      category_names: display names for ``per_class_AP``; defaults to the ground truth's.
    """

    def __init__(self, ground_truth: dict | str | Path, category_ids: Sequence[int],
                 category_names: Sequence[str] | None = None):
        self.category_ids, self.category_names, self._coco_gt = load_coco_ground_truth(
            ground_truth, category_ids, category_names, _normalize_ground_truth)
        self._gt_image_ids = set(self._coco_gt.getImgIds())
        self._image_ids: list[int] = []
        self._seen: set[int] = set()
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self.summary_text = ""
        self.results: dict | None = None

    # ------------------------------------------------------------------ accumulate

    def reset(self) -> None:
        """Forget all added detections (the ground truth stays loaded)."""
        self._image_ids, self._seen, self._chunks = [], set(), []
        self.summary_text, self.results = "", None

    def add_detections(self, image_ids, boxes, scores, classes, num_detections) -> None:
        """Add a batch of detections.

        Args:
          image_ids: ``[n]`` COCO image ids (negative: padding row, skipped).
          boxes: ``[n, D, 4]`` (ymin, xmin, ymax, xmax) in original-image pixels.
          scores: ``[n, D]``.
          classes: ``[n, D]`` contiguous class indices (``0 .. len(category_ids)-1``).
          num_detections: ``[n]``; only the first ``num_detections[i]`` of row i count.
        """
        image_ids, boxes, scores, classes, num = detection_batch(
            image_ids, boxes, scores, classes, num_detections)
        d = boxes.shape[1]
        keep_rows = image_ids >= 0
        image_ids, boxes, scores, classes, num = (
            a[keep_rows] for a in (image_ids, boxes, scores, classes, num)
        )
        unknown = sorted(set(image_ids.tolist()) - self._gt_image_ids)
        if unknown:
            raise ValueError(f"image ids not in the ground truth: {unknown[:10]}.")
        repeated = sorted(set(image_ids.tolist()) & self._seen)
        if len(set(image_ids.tolist())) != len(image_ids) or repeated:
            raise ValueError(
                f"image ids added twice: {repeated[:10] or image_ids.tolist()}; mark padding "
                "rows of an eval batch with a negative image id."
            )
        if classes.dtype.kind == "f":
            classes = np.rint(classes)
        classes = classes.astype(np.int64)
        valid = np.arange(d)[None, :] < np.clip(num, 0, d)[:, None]
        bad = valid & ((classes < 0) | (classes >= len(self.category_ids)))
        if bad.any():
            raise ValueError(
                f"detection classes must lie in [0, {len(self.category_ids)}); got "
                f"{sorted(set(classes[bad].tolist()))[:10]}."
            )
        self._image_ids.extend(image_ids.tolist())
        self._seen.update(image_ids.tolist())
        rows = np.broadcast_to(image_ids[:, None], (image_ids.shape[0], d))[valid]
        b = boxes[valid]
        cats = np.asarray(self.category_ids, dtype=np.int64)[classes[valid]]
        self._chunks.append((rows, b, scores[valid], cats))

    @property
    def num_images(self) -> int:
        return len(self._image_ids)

    def detections(self) -> list[dict]:
        """All detections in COCO results format (bbox = [x, y, width, height] pixels)."""
        out: list[dict] = []
        for rows, b, scores, cats in self._chunks:
            x, y, w, h = coco_xywh(b)
            s = np.round(scores, SCORE_DECIMALS)
            for i, xx, yy, ww, hh, ss, c in zip(rows.tolist(), x.tolist(), y.tolist(),
                                                 w.tolist(), h.tolist(), s.tolist(),
                                                 cats.tolist(), strict=True):
                out.append({"image_id": i, "category_id": c, "bbox": [xx, yy, ww, hh],
                            "score": ss})
        return out

    def write_detections(self, path: str | Path) -> Path:
        return write_json(path, self.detections())

    # ------------------------------------------------------------------ evaluate

    def evaluate(self) -> dict:
        """Run COCOeval (bbox) and return the 12 summary stats plus ``per_class_AP``."""
        image_ids = sorted(self._image_ids) if self._image_ids else sorted(self._gt_image_ids)
        coco_eval, self.summary_text = run_cocoeval(
            self._coco_gt, self.detections(), "bbox", image_ids, sorted(set(self.category_ids)))
        results: dict[str, Any] = {
            name: float(v) for name, v in zip(STAT_NAMES, coco_eval.stats, strict=True)
        }
        results["per_class_AP"] = per_class_ap(coco_eval, self.category_ids,
                                               self.category_names)
        self.results = results
        self._coco_eval = coco_eval
        return results

    def write_metrics(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write ``metrics.json``: the last ``evaluate()`` result (run now if needed)."""
        results = self.results if self.results is not None else self.evaluate()
        payload = dict(results)
        payload["num_images"] = len(self._image_ids) or len(self._gt_image_ids)
        if extra:
            payload.update(extra)
        return write_metrics_json(path, payload)


__all__ = ["CocoEvaluator", "STAT_NAMES", "load_coco_ground_truth", "per_class_ap",
           "results_as_coco", "run_cocoeval", "write_metrics_json"]
