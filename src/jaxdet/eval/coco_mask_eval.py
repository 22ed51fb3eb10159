"""COCO instance-mask (``segm``) evaluation with pycocotools, and the host-side mask helpers
around it: pasting per-box masks into an original image, COCO RLE encoding.

Usage::

    evaluator = CocoMaskEvaluator("instances_val2017.json", category_ids=[1, 2, 3, ...])
    for each image:
        masks = paste_box_masks(box_masks, boxes_px / [h, w, h, w], h, w)  # uint8 [D, h, w]
        evaluator.add_image(image_id, masks, scores, classes)
    metrics = evaluator.evaluate()     # {"AP": ..., ..., "ARl": ..., "per_class_AP": {...}}
    mask_metrics(metrics)              # {"segm/AP": ..., ..., "mask_AP": ...}

Detections are binary masks in the original image's pixels (uint8 ``[D, H, W]``, ``H x W``
the ground-truth image's ``height x width``), stored as compressed RLE as soon as they are
added. The ground truth is a COCO dict (or JSON file) whose annotations carry a
``segmentation``: polygons, RLE (compressed, or uncompressed for crowds), or a binary
``[H, W]`` array (encoded to RLE here). pycocotools scores masks by mask IoU over IoU
0.50:0.05:0.95, small / medium / large by the annotations' ``area`` (the mask's area when
missing), 1 / 10 / 100 detections per image -- the 12 stats of the box evaluator
(:data:`~jaxdet.eval.coco_eval.STAT_NAMES`). Only the images passed to ``add_image`` /
``add_detections`` are evaluated (all when none were); rows whose image id is negative are
padding and are skipped.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils

from jaxdet.eval.coco_eval import (
    SCORE_DECIMALS,
    STAT_NAMES,
    load_coco_ground_truth,
    per_class_ap,
    run_cocoeval,
    write_json,
    write_metrics_json,
)

MASK_THRESHOLD = 0.5  # TF's eval_util / exporters: a pixel is in the mask when value > 0.5
MIN_BOX_SIZE = 1e-4  # TF floors a box's normalized height / width at this (core.mask_ops)
METRIC_PREFIX = "segm/"
HEADLINE_KEY = "mask_AP"


# --------------------------------------------------------------------------- RLE


def masks_to_rle(masks: np.ndarray) -> list[dict[str, Any]]:
    """COCO compressed RLEs of binary masks, JSON-ready.

    Args:
      masks: ``[D, H, W]`` binary masks (any dtype; nonzero is in the mask).

    Returns:
      ``D`` dicts ``{"size": [H, W], "counts": str}`` (pycocotools' compressed counts as an
      ASCII string; ``pycocotools.mask.decode`` reads them back, ``frPyObjects`` too).
    """
    masks = np.asarray(masks)
    if masks.ndim != 3:
        raise ValueError(f"masks must be [D, H, W], got shape {masks.shape}")
    if masks.shape[0] == 0:
        return []
    binary = np.asfortranarray(np.moveaxis(masks != 0, 0, -1).astype(np.uint8))
    return [{"size": [int(r["size"][0]), int(r["size"][1])],
             "counts": r["counts"].decode("ascii")} for r in mask_utils.encode(binary)]


def rle_to_masks(rles: Sequence[dict[str, Any]], height: int, width: int) -> np.ndarray:
    """Inverse of :func:`masks_to_rle`: uint8 ``[D, H, W]`` (``height x width`` when empty).
    Counts may be ``str`` or ``bytes``."""
    if len(rles) == 0:
        return np.zeros((0, height, width), np.uint8)
    objs = [{"size": list(r["size"]), "counts": r["counts"].encode("ascii")
             if isinstance(r["counts"], str) else r["counts"]} for r in rles]
    return np.ascontiguousarray(np.moveaxis(mask_utils.decode(objs), -1, 0)).astype(np.uint8)


# --------------------------------------------------------------------------- paste (host)


def _samples(start: np.ndarray, end: np.ndarray, size: int, extent: int):
    """``tf.image.crop_and_resize``'s sample positions along one axis, in float32: ``size``
    samples from ``start`` to ``end`` (normalized to ``extent`` mask pixels) -> (pos [size],
    on the mask [size])."""
    last = np.float32(extent - 1)
    if size > 1:
        step = (end - start) * last / np.float32(size - 1)
        pos = start * last + np.arange(size, dtype=np.float32) * step
    else:
        pos = np.full(1, np.float32(0.5) * (start + end) * last, np.float32)
    return pos, (pos >= 0) & (pos <= last)


def paste_box_masks(
    box_masks: np.ndarray,
    boxes: np.ndarray,
    image_height: int,
    image_width: int,
    threshold: float | None = MASK_THRESHOLD,
) -> np.ndarray:
    """Per-box masks pasted into an image of any size, on the host (numpy).

    The same values as :func:`jaxdet.core.mask_ops.reframe_box_masks_to_image_masks` (TF's
    ``reframe_box_masks_to_image_masks``: bilinear, 0 where a pixel's sample falls off the
    box mask), computed the way TF's CPU kernel computes them (float32, the same operation
    order), one box at a time over the pixels its mask covers. For evaluation and prediction,
    where every image has its own size (the jnp version has static shapes: one compile per
    size).

    Args:
      box_masks: ``[N, mh, mw]`` mask probabilities in box coordinates.
      boxes: ``[N, 4]`` normalized ``(ymin, xmin, ymax, xmax)`` of the image (TF's
        ``detection_boxes``: pixel boxes divided by ``(H, W, H, W)``).
      image_height, image_width: the output size.
      threshold: binarize ``> threshold`` to uint8 (TF: 0.5); None: return the float32
        values.

    Returns:
      ``[N, image_height, image_width]`` uint8 in ``{0, 1}``, or float32 for ``threshold``
      None.
    """
    masks = np.asarray(box_masks, np.float32)
    boxes = np.asarray(boxes, np.float32)
    if masks.ndim != 3 or boxes.shape != (masks.shape[0], 4):
        raise ValueError(f"need box_masks [N, mh, mw] and boxes [N, 4]; got {masks.shape} and "
                         f"{boxes.shape}")
    height, width = int(image_height), int(image_width)
    out = np.zeros((masks.shape[0], height, width), np.float32)
    ymin, xmin, ymax, xmax = boxes.T
    box_h = np.maximum(ymax - ymin, np.float32(MIN_BOX_SIZE))
    box_w = np.maximum(xmax - xmin, np.float32(MIN_BOX_SIZE))
    frames = np.stack([(np.float32(0) - ymin) / box_h, (np.float32(0) - xmin) / box_w,
                       (np.float32(1) - ymin) / box_h, (np.float32(1) - xmin) / box_w], -1)
    _, mh, mw = masks.shape
    for i, (mask, (y0, x0, y1, x1)) in enumerate(zip(masks, frames, strict=True)):
        pos_y, on_y = _samples(y0, y1, height, mh)
        pos_x, on_x = _samples(x0, x1, width, mw)
        rows, cols = np.nonzero(on_y)[0], np.nonzero(on_x)[0]
        if rows.size == 0 or cols.size == 0:
            continue
        py, px = pos_y[rows], pos_x[cols]
        top, left = np.floor(py).astype(np.int64), np.floor(px).astype(np.int64)
        bottom, right = np.ceil(py).astype(np.int64), np.ceil(px).astype(np.int64)
        y_lerp = (py - top.astype(np.float32))[:, None]
        x_lerp = (px - left.astype(np.float32))[None, :]
        top_left, top_right = mask[top][:, left], mask[top][:, right]
        bottom_left, bottom_right = mask[bottom][:, left], mask[bottom][:, right]
        upper = top_left + (top_right - top_left) * x_lerp
        lower = bottom_left + (bottom_right - bottom_left) * x_lerp
        out[i][np.ix_(rows, cols)] = upper + (lower - upper) * y_lerp
    if threshold is None:
        return out
    return (out > threshold).astype(np.uint8)


# --------------------------------------------------------------------------- ground truth


def mask_ground_truth(ground_truth: dict, category_ids: Sequence[int],
                      category_names: Sequence[str] | None = None) -> dict:
    """The COCO dict pycocotools evaluates masks on: a copy of ``ground_truth`` with
    ``categories`` filled when absent, and per annotation ``id`` / ``iscrowd`` defaults, a
    binary-array ``segmentation`` encoded to compressed RLE (counts str), and ``area`` /
    ``bbox`` from the mask when absent.

    Raises:
      ValueError naming the annotation: no ``segmentation``, an image without ``height`` /
      ``width``, or a mask array whose size is not its image's.
    """
    if "images" not in ground_truth or "annotations" not in ground_truth:
        raise ValueError("ground truth must be a COCO dict with 'images' and 'annotations'")
    images = {int(im["id"]): im for im in ground_truth["images"]}
    dataset = {k: v for k, v in ground_truth.items() if k != "annotations"}
    dataset = copy.deepcopy(dataset)
    if "categories" not in dataset:
        names = category_names or [str(c) for c in category_ids]
        dataset["categories"] = [{"id": int(c), "name": n}
                                 for c, n in zip(category_ids, names, strict=True)]
    annotations = []
    for index, source in enumerate(ground_truth["annotations"]):
        ann = {k: (v if k == "segmentation" else copy.deepcopy(v)) for k, v in source.items()}
        ann.setdefault("id", index + 1)
        ann.setdefault("iscrowd", 0)
        label = f"annotation {ann['id']} (image {ann.get('image_id')})"
        segm = ann.get("segmentation")
        if segm is None or (isinstance(segm, list) and len(segm) == 0):
            raise ValueError(f"{label} has no segmentation: mask evaluation needs one per "
                             "annotation")
        image = images.get(int(ann["image_id"]))
        if image is None or not image.get("height") or not image.get("width"):
            raise ValueError(f"{label}: its image needs 'height' and 'width' for mask "
                             "evaluation")
        size = (int(image["height"]), int(image["width"]))
        if isinstance(segm, np.ndarray):
            if segm.shape != size:
                raise ValueError(f"{label}: mask of shape {segm.shape}, image is {size}")
            rle = masks_to_rle(segm[None])[0]
        else:
            segm = copy.deepcopy(segm)
            rle = segm
        ann["segmentation"] = rle
        if "area" not in ann or "bbox" not in ann:
            encoded = _encoded(rle, size)
            ann.setdefault("area", float(mask_utils.area(encoded)))
            ann.setdefault("bbox", [float(v) for v in mask_utils.toBbox(encoded)])
        annotations.append(ann)
    dataset["annotations"] = annotations
    return dataset


def _encoded(segm: Any, size: tuple[int, int]) -> dict:
    """A segmentation (polygons, uncompressed or compressed RLE) as one compressed RLE with
    bytes counts, as pycocotools' mask functions take it."""
    height, width = size
    if isinstance(segm, list):  # polygons
        return mask_utils.merge(mask_utils.frPyObjects(segm, height, width))
    if isinstance(segm.get("counts"), list):  # uncompressed RLE (crowds)
        return mask_utils.frPyObjects(segm, height, width)
    counts = segm["counts"]
    return {"size": list(segm["size"]),
            "counts": counts.encode("ascii") if isinstance(counts, str) else counts}


def mask_metrics(stats: dict[str, Any]) -> dict[str, Any]:
    """An evaluator's result named for a metrics dict next to the box metrics: every key
    prefixed ``segm/`` (``segm/AP`` ... ``segm/ARl``, ``segm/per_class_AP``) and the headline
    ``mask_AP`` (= ``segm/AP``)."""
    out = {f"{METRIC_PREFIX}{k}": v for k, v in stats.items()}
    out[HEADLINE_KEY] = stats["AP"]
    return out


# --------------------------------------------------------------------------- evaluator


class CocoMaskEvaluator:
    """Accumulates instance-mask detections and scores them with pycocotools' ``segm``.

    Args:
      ground_truth: a COCO-format dict whose annotations carry ``segmentation`` (see
        :func:`mask_ground_truth`), or the path of a COCO JSON file.
      category_ids: ``category_ids[k]`` is the COCO category id of contiguous class ``k``.
      category_names: display names for ``per_class_AP``; defaults to the ground truth's.
    """

    def __init__(self, ground_truth: dict | str | Path, category_ids: Sequence[int],
                 category_names: Sequence[str] | None = None):
        self.category_ids, self.category_names, self._coco_gt = load_coco_ground_truth(
            ground_truth, category_ids, category_names, mask_ground_truth)
        self._sizes = {int(im["id"]): (int(im["height"]), int(im["width"]))
                       for im in self._coco_gt.dataset["images"]
                       if im.get("height") and im.get("width")}
        self._gt_image_ids = set(self._coco_gt.getImgIds())
        self.reset()

    # ------------------------------------------------------------------ accumulate

    def reset(self) -> None:
        """Forget all added detections (the ground truth stays loaded)."""
        self._image_ids: list[int] = []
        self._seen: set[int] = set()
        self._detections: list[dict] = []
        self.summary_text = ""
        self.results: dict | None = None

    def add_image(self, image_id: int, masks: np.ndarray, scores: np.ndarray,
                  classes: np.ndarray) -> None:
        """Add one image's detections.

        Args:
          image_id: its COCO image id (negative: padding, ignored).
          masks: uint8 ``[D, H, W]`` binary masks in the original image's pixels (``H x W``
            = the ground-truth image's ``height x width``).
          scores: ``[D]``; classes: ``[D]`` contiguous class indices
            (``0 .. len(category_ids) - 1``).
        """
        image_id = int(image_id)
        if image_id < 0:
            return
        masks = np.asarray(masks)
        scores = np.asarray(scores, np.float64).reshape(-1)
        classes = np.asarray(classes)
        classes = (np.rint(classes) if classes.dtype.kind == "f" else classes).astype(
            np.int64).reshape(-1)
        if image_id not in self._gt_image_ids:
            raise ValueError(f"image id not in the ground truth: {image_id}")
        if image_id in self._seen:
            raise ValueError(f"image id added twice: {image_id}; mark padding rows of an eval "
                             "batch with a negative image id")
        size = self._sizes.get(image_id)
        if masks.ndim != 3 or scores.shape[0] != masks.shape[0] or (
                classes.shape[0] != masks.shape[0]):
            raise ValueError(f"image {image_id}: expected masks [D, H, W], scores [D] and "
                             f"classes [D]; got {masks.shape}, {scores.shape}, {classes.shape}")
        if size is not None and tuple(masks.shape[1:]) != size:
            raise ValueError(f"image {image_id}: masks are {tuple(masks.shape[1:])} (H, W) but "
                             f"the ground-truth image is {size}; paste them into the original "
                             "image (paste_box_masks)")
        bad = (classes < 0) | (classes >= len(self.category_ids))
        if bad.any():
            raise ValueError(f"detection classes must lie in [0, {len(self.category_ids)}); "
                             f"got {sorted(set(classes[bad].tolist()))[:10]}")
        self._image_ids.append(image_id)
        self._seen.add(image_id)
        cats = np.asarray(self.category_ids, np.int64)[classes]
        for rle, score, cat in zip(masks_to_rle(masks), np.round(scores, SCORE_DECIMALS).tolist(),
                                   cats.tolist(), strict=True):
            self._detections.append({"image_id": image_id, "category_id": int(cat),
                                     "segmentation": rle, "score": float(score)})

    def add_detections(self, image_ids, boxes, scores, classes, num_detections,
                       masks: Sequence[np.ndarray]) -> None:
        """Add a batch, as the box evaluators take it, with the masks per row.

        Args:
          image_ids: ``[n]`` (negative: padding row, skipped).
          boxes: ``[n, D, 4]`` (unused: pycocotools takes the box of each mask).
          scores, classes: ``[n, D]``; num_detections: ``[n]``, only the first
            ``num_detections[i]`` of row i count.
          masks: ``n`` uint8 arrays ``[>= num_detections[i], H_i, W_i]``, each row's masks in
            its own original image's pixels.
        """
        del boxes
        image_ids = np.asarray(image_ids).astype(np.int64).reshape(-1)
        scores, classes = np.asarray(scores), np.asarray(classes)
        num = np.asarray(num_detections).astype(np.int64).reshape(-1)
        if len(masks) != image_ids.shape[0]:
            raise ValueError(f"{image_ids.shape[0]} images but {len(masks)} mask arrays")
        for row, image_id in enumerate(image_ids.tolist()):
            if image_id < 0:
                continue
            k = int(np.clip(num[row], 0, scores.shape[1]))
            self.add_image(image_id, np.asarray(masks[row])[:k], scores[row, :k],
                           classes[row, :k])

    @property
    def num_images(self) -> int:
        return len(self._image_ids)

    def detections(self) -> list[dict]:
        """All detections in COCO ``segm`` results format (``segmentation`` a compressed RLE
        with str counts; no ``bbox``: pycocotools computes it and the area from the mask)."""
        return [dict(d, segmentation=dict(d["segmentation"])) for d in self._detections]

    def write_detections(self, path: str | Path) -> Path:
        return write_json(path, self.detections())

    def write_ground_truth(self, path: str | Path) -> Path:
        """The COCO dict pycocotools evaluates (see :func:`mask_ground_truth`)."""
        return write_json(path, self._coco_gt.dataset)

    # ------------------------------------------------------------------ evaluate

    def evaluate(self) -> dict[str, Any]:
        """Run COCOeval (segm) and return its 12 stats by name plus ``per_class_AP`` (-1: not
        scorable, e.g. no small objects; a class without ground truth: None)."""
        image_ids = sorted(self._image_ids) if self._image_ids else sorted(self._gt_image_ids)
        coco_eval, self.summary_text = run_cocoeval(
            self._coco_gt, self.detections(), "segm", image_ids, sorted(set(self.category_ids)))
        results: dict[str, Any] = {name: float(v)
                                   for name, v in zip(STAT_NAMES, coco_eval.stats, strict=True)}
        results["per_class_AP"] = per_class_ap(coco_eval, self.category_ids,
                                               self.category_names)
        self.results = results
        self._coco_eval = coco_eval
        return results

    def write_metrics(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write the last ``evaluate()`` result (run now if needed), named as
        :func:`mask_metrics` names it, as JSON."""
        results = self.results if self.results is not None else self.evaluate()
        payload: dict[str, Any] = mask_metrics(results)
        payload["num_images"] = len(self._image_ids) or len(self._gt_image_ids)
        if extra:
            payload.update(extra)
        return write_metrics_json(path, payload)


__all__ = ["CocoMaskEvaluator", "MASK_THRESHOLD", "mask_ground_truth", "mask_metrics",
           "masks_to_rle", "paste_box_masks", "rle_to_masks"]
