"""The record a data source yields, and counting of skipped / repaired items.

A *record* is a plain dict describing one annotated image, before decoding:

    "image_path": str        path of the encoded image file
    "image_id":   int        id used by the evaluator (COCO image id)
    "height":     int        annotated image height in pixels
    "width":      int        annotated image width in pixels
    "boxes":      float32 [n, 4]  PIXEL boxes (ymin, xmin, ymax, xmax), inside the image
    "classes":    int32 [n]  contiguous 0-based class indices
    "is_crowd":   bool [n]   COCO iscrowd / VOC difficult: ignored in training and eval

and, from a source built with a keypoint layout (``data.keypoints``), ``"keypoints"`` float32
[n, K, 2] PIXEL (y, x) and ``"keypoint_visibility"`` int32 [n, K] (COCO's v); from a source
built with ``masks=True`` (``data.load_masks``), the objects' instance masks: ``"masks"`` uint8
[n, height, width] (0 / 1, one per box, in box order), or, as sources give them, ``"mask_ref"``
(their encoded form, decoded by the loader: :func:`jaxdet.data.masks.load_record_masks`).

Sources validate and repair annotations once, when they are built, and report every
dropped or repaired item through a :class:`SkipCounter` (one WARNING line naming the file and
the record, so a person can find and fix it). Loaders count unreadable images and truncated
ground truth the same way; :class:`EpochTally` holds one epoch's counts for their summary line.
"""

from __future__ import annotations

import collections
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdet.data.decode import CorruptImageError
from jaxdet.data.keypoints import KeypointLayout
from jaxdet.data.masks import coco_rle, load_record_masks

logger = logging.getLogger("jaxdet.data")

Record = dict[str, Any]

# Boxes exceeding the image by at most this many pixels are clipped without a warning.
CLIP_TOLERANCE_PX = 1.0

RECORD_KEYS = ("image_path", "image_id", "height", "width", "boxes", "classes", "is_crowd")


def make_record(
    image_path: str,
    image_id: int,
    height: int,
    width: int,
    boxes: Any = None,
    classes: Any = None,
    is_crowd: Any = None,
    keypoints: Any = None,
    keypoint_visibility: Any = None,
    masks: Any = None,
    mask_ref: Any = None,
) -> Record:
    """Builds a record with the canonical dtypes and shapes (empty annotations allowed).

    ``keypoints`` [n, K, 2] pixel (y, x) and ``keypoint_visibility`` [n, K] come together or
    not at all (see ``data.keypoints``). ``masks`` uint8 [n, height, width] or ``mask_ref``
    (one of the encoded forms of ``data.masks``, ``len(mask_ref) == n``), or neither."""
    boxes = np.zeros((0, 4), np.float32) if boxes is None else np.asarray(boxes, np.float32)
    boxes = boxes.reshape(-1, 4)
    n = boxes.shape[0]
    classes = np.zeros((n,), np.int32) if classes is None else np.asarray(classes, np.int32)
    is_crowd = np.zeros((n,), bool) if is_crowd is None else np.asarray(is_crowd, bool)
    if classes.shape != (n,) or is_crowd.shape != (n,):
        raise ValueError(
            f"record for {image_path!r}: boxes {boxes.shape}, classes {classes.shape} and "
            f"is_crowd {is_crowd.shape} disagree on the number of objects"
        )
    record = {
        "image_path": str(image_path),
        "image_id": int(image_id),
        "height": int(height),
        "width": int(width),
        "boxes": boxes,
        "classes": classes,
        "is_crowd": is_crowd,
    }
    if (keypoints is None) != (keypoint_visibility is None):
        raise ValueError(f"record for {image_path!r}: keypoints and keypoint_visibility come "
                         "together")
    if keypoints is not None:
        visibility = np.asarray(keypoint_visibility, np.int32)
        if visibility.ndim != 2 or visibility.shape[0] != n:
            raise ValueError(f"record for {image_path!r}: keypoint_visibility has shape "
                             f"{visibility.shape}, expected [{n}, K]")
        k = visibility.shape[1]
        kp = np.asarray(keypoints, np.float32).reshape(n, k, 2)
        record["keypoints"], record["keypoint_visibility"] = kp, visibility
    if masks is not None and mask_ref is not None:
        raise ValueError(f"record for {image_path!r}: give masks or mask_ref, not both")
    if masks is not None:
        masks = np.asarray(masks)
        if masks.shape != (n, int(height), int(width)):
            raise ValueError(f"record for {image_path!r}: masks have shape {masks.shape}, "
                             f"expected [{n}, {int(height)}, {int(width)}] (one per box, "
                             "at the image's size)")
        record["masks"] = (masks > 0).astype(np.uint8) if masks.dtype != np.uint8 else masks
    if mask_ref is not None:
        if len(mask_ref) != n:
            raise ValueError(f"record for {image_path!r}: {len(mask_ref)} encoded masks for "
                             f"{n} boxes")
        record["mask_ref"] = mask_ref
    return record


class SkipCounter:
    """Counts skipped or repaired items by reason and logs one WARNING line for each.

    To keep a bad dataset from flooding the log, at most ``max_logged_per_reason`` lines are
    written per reason; one further line says that the rest are counted but not shown.
    The counter lives in one process: a loader reports skips from its main process.
    """

    def __init__(self, max_logged_per_reason: int = 20, log: logging.Logger | None = None):
        self.max_logged_per_reason = max_logged_per_reason
        self.counts: collections.Counter[str] = collections.Counter()
        self._logged: collections.Counter[str] = collections.Counter()
        self._seen: set[tuple[str, str]] = set()
        self._log = log or logger

    def add(self, reason: str, file: str, record: Any = None, detail: str = "") -> None:
        """Counts one item for ``reason``; ``file`` and ``record`` name where it came from.

        The same (reason, file, record) is logged only the first time (a corrupt image seen
        again in the next epoch is counted, not logged again).
        """
        self.counts[reason] += 1
        key = (reason, f"{file}|{record}")
        if key in self._seen:
            return
        self._seen.add(key)
        self._logged[reason] += 1
        count = self._logged[reason]
        if count <= self.max_logged_per_reason:
            where = str(file) if record is None else f"{file} [{record}]"
            message = f"{reason}: {where}" + (f": {detail}" if detail else "")
            self._log.warning(message)
            if count == self.max_logged_per_reason:
                self._log.warning(
                    "%s: further occurrences are counted but not logged", reason
                )

    def __getitem__(self, reason: str) -> int:
        return self.counts[reason]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)

    def summary(self) -> str:
        if not self.counts:
            return "nothing skipped"
        return ", ".join(f"{reason}: {n}" for reason, n in sorted(self.counts.items()))

    def __repr__(self) -> str:
        return f"SkipCounter({self.as_dict()})"


class EpochTally:
    """Counts by reason of one epoch of a record stream (stream index // num_records), for a
    loader's one-line summary: ``start`` fixes the epoch, ``add`` counts items of that epoch
    only, ``done`` is True once, when the stream has moved past the epoch's last index."""

    def __init__(self, num_records: int):
        self.num_records = num_records
        self.epoch: int | None = None
        self.counts: collections.Counter[str] = collections.Counter()
        self.reported = False

    def start(self, stream_index: int) -> None:
        if self.epoch is None:
            self.epoch = stream_index // self.num_records

    def add(self, stream_index: int, reason: str, n: int = 1) -> None:
        if stream_index // self.num_records == self.epoch:
            self.counts[reason] += n

    def done(self, next_index: int) -> bool:
        """True once, when every stream index of the epoch lies before ``next_index``."""
        if self.reported or self.epoch is None:
            return False
        self.reported = next_index >= (self.epoch + 1) * self.num_records
        return self.reported


def pixel_box(
    box: Sequence[float], height: int, width: int
) -> tuple[tuple[float, float, float, float] | None, str | None]:
    """Validates one PIXEL (ymin, xmin, ymax, xmax) box inside a height x width image, with
    the rules every source applies.

    Returns:
      (clipped box or None, reason or None): reason "degenerate_box" (non-finite or empty:
      dropped), "box_outside_image" (nothing inside: dropped), "box_clipped" (kept, clipped by
      more than ``CLIP_TOLERANCE_PX``), or None (kept; clipped silently within tolerance).
    """
    y0, x0, y1, x1 = (float(v) for v in box)
    if not all(math.isfinite(v) for v in (y0, x0, y1, x1)) or y1 <= y0 or x1 <= x0:
        return None, "degenerate_box"
    cy0, cx0 = min(max(y0, 0.0), height), min(max(x0, 0.0), width)
    cy1, cx1 = min(max(y1, 0.0), height), min(max(x1, 0.0), width)
    if cy1 <= cy0 or cx1 <= cx0:
        return None, "box_outside_image"
    off = max(abs(cy0 - y0), abs(cx0 - x0), abs(cy1 - y1), abs(cx1 - x1))
    return (cy0, cx0, cy1, cx1), ("box_clipped" if off > CLIP_TOLERANCE_PX else None)


def coco_ground_truth(records, category_names: Sequence[str], description: str,
                      file_name=lambda r: os.path.basename(r["image_path"]),
                      layout: KeypointLayout | None = None) -> dict[str, Any]:
    """A COCO-format dict of ``records``: category ids 1..C (class index + 1), bbox xywh in
    pixels, is_crowd -> iscrowd 1; ``file_name(record)`` gives each image's file name.

    With a keypoint ``layout`` (records carrying ``keypoints`` [n, K, 2] pixel (y, x) and
    ``keypoint_visibility`` [n, K]), every annotation of a class with a group gets COCO's
    ``keypoints`` [x, y, v] * k (the group's slots, in its order) and ``num_keypoints`` (the
    count of v > 0), and the group's category its ``keypoints`` names and ``skeleton``
    (1-based pairs, as COCO writes them). A record without keypoints counts as unlabelled.

    Records with instance masks (``masks`` or ``mask_ref``) give their annotations a COCO
    ``segmentation`` (compressed RLE); those of an image whose masks cannot be read get none
    (the loaders skip that image, so it is not scored)."""

    layout = layout or None
    images, annotations = [], []
    for r in records:
        images.append({"id": r["image_id"], "file_name": file_name(r),
                       "height": r["height"], "width": r["width"]})
        try:
            masks = load_record_masks(r)
        except CorruptImageError:
            masks = None
        for i, (box, c, crowd) in enumerate(zip(r["boxes"], r["classes"], r["is_crowd"],
                                                strict=True)):
            y0, x0, y1, x1 = (float(v) for v in box)
            ann = {
                "id": len(annotations) + 1, "image_id": r["image_id"],
                "category_id": int(c) + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                "area": (x1 - x0) * (y1 - y0), "iscrowd": int(crowd),
            }
            group = layout.group_of_class(int(c)) if layout else None
            if group is not None:
                ann.update(_coco_keypoints(r, i, group.slots))
            if masks is not None:
                ann["segmentation"] = coco_rle(masks[i])
            annotations.append(ann)
    categories = [{"id": i + 1, "name": n} for i, n in enumerate(category_names)]
    for group in layout.groups if layout else ():
        if group.class_index < len(categories):
            categories[group.class_index].update(
                keypoints=list(group.names),
                skeleton=[[a + 1, b + 1] for a, b in group.skeleton])
    return {"info": {"description": description}, "licenses": [],
            "images": images, "annotations": annotations, "categories": categories}


def _coco_keypoints(record: Record, i: int, slots: range) -> dict[str, Any]:
    """``{"keypoints": [x, y, v] * k, "num_keypoints"}`` of object ``i`` of a record, from
    its PIXEL (y, x) keypoints in ``slots`` (all unlabelled when the record has none)."""
    if "keypoints" not in record:
        return {"keypoints": [0, 0, 0] * len(slots), "num_keypoints": 0}
    yx = np.asarray(record["keypoints"][i], np.float64)[slots.start:slots.stop]
    v = np.asarray(record["keypoint_visibility"][i], np.int64)[slots.start:slots.stop]
    flat: list[float | int] = []
    for (y, x), vis in zip(yx.tolist(), v.tolist(), strict=True):
        flat += [x, y, int(vis)] if vis > 0 else [0, 0, 0]
    return {"keypoints": flat, "num_keypoints": int((v > 0).sum())}
