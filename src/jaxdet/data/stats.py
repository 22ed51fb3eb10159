"""What a dataset holds: images, boxes, crowd boxes, boxes per class and box sizes.

    stats = dataset_stats(source)
    print(format_dataset_stats(stats, "data.train"))

A *source* is any random-access data source (``len(source)``, ``source[i]`` -> record with
PIXEL ``boxes`` (ymin, xmin, ymax, xmax), ``classes`` and ``is_crowd``; see
``data.records``) with ``category_names``. Training logs this summary at start, and
``jaxdet summary --data`` prints it with the anchor coverage of SSD-like families.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DatasetStats:
    """Counts over a source's kept records (after the source's validation and repairs).

    ``per_class`` counts non-crowd boxes by contiguous class index; ``box_sizes`` is the
    sqrt(width * height) in original-image pixels of every non-crowd box (float64 [n]).
    """

    num_images: int
    images_without_objects: int
    num_boxes: int
    num_crowd: int
    per_class: tuple[int, ...]
    class_names: tuple[str, ...]
    box_sizes: np.ndarray

    def as_dict(self) -> dict:
        """JSON-ready: counts, per-class counts by name, box size min / median / max (px)."""
        sizes = self.box_sizes
        size = ({"min": float(sizes.min()), "median": float(np.median(sizes)),
                 "max": float(sizes.max())} if sizes.size else None)
        return {"images": self.num_images, "images_without_objects": self.images_without_objects,
                "boxes": self.num_boxes, "crowd_boxes": self.num_crowd,
                "boxes_per_class": dict(zip(self.class_names, self.per_class, strict=True)),
                "box_size_px": size}


def dataset_stats(source, class_names: Sequence[str] | None = None) -> DatasetStats:
    """Count the images and boxes of ``source`` (one pass over its records, no decoding).

    ``class_names`` defaults to ``source.category_names``; a class index beyond it is named
    ``class_<k>``.
    """
    names = list(class_names if class_names is not None
                 else getattr(source, "category_names", []) or [])
    counts = np.zeros(len(names), np.int64)
    sizes: list[np.ndarray] = []
    empty = crowd_total = 0
    for i in range(len(source)):
        record = source[i]
        crowd = np.asarray(record["is_crowd"], bool)
        classes = np.asarray(record["classes"], np.int64)[~crowd]
        boxes = np.asarray(record["boxes"], np.float64).reshape(-1, 4)[~crowd]
        crowd_total += int(crowd.sum())
        if classes.size == 0:
            empty += 1
            continue
        if classes.max() >= counts.size:
            counts = np.pad(counts, (0, int(classes.max()) + 1 - counts.size))
        np.add.at(counts, classes, 1)
        sizes.append(np.sqrt(np.clip(boxes[:, 2] - boxes[:, 0], 0, None)
                             * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)))
    names += [f"class_{k}" for k in range(len(names), counts.size)]
    box_sizes = np.concatenate(sizes) if sizes else np.zeros((0,), np.float64)
    return DatasetStats(len(source), empty, int(counts.sum()), crowd_total,
                        tuple(int(c) for c in counts), tuple(names), box_sizes)


CROWD_RULES = {
    "ignore": "ignored in training: data.crowd_boxes is ignore",
    "train": "trained on as ordinary boxes: data.crowd_boxes is train",
    "eval": "not scored: evaluation ignores detections on them, as COCO's does",
}


def crowd_rule(crowd_boxes: str, split: str) -> str:
    """What happens to a split's crowd boxes, in words: ``split`` "train" follows
    ``data.crowd_boxes`` ("ignore" / "train"); "eval" is scored by COCO's crowd rules."""
    return CROWD_RULES["eval" if split == "eval" else crowd_boxes]


def format_dataset_stats(stats: DatasetStats, title: str,
                         crowd: str = CROWD_RULES["ignore"]) -> str:
    """Two lines: totals and box sizes, then boxes per class (rarest classes flagged).
    ``crowd``: what happens to the crowd boxes, said beside their count (:func:`crowd_rule`)."""
    sizes = stats.box_sizes
    line = (f"{title}: {stats.num_images:,} images ({stats.images_without_objects:,} without "
            f"objects), {stats.num_boxes:,} boxes")
    if stats.num_crowd:
        line += f" + {stats.num_crowd:,} crowd ({crowd})"
    if sizes.size:
        line += (f"; box size sqrt(w*h) {sizes.min():.0f}-{sizes.max():.0f} px, "
                 f"median {np.median(sizes):.0f}")
    per_class = ", ".join(f"{name} {n:,}" for name, n in
                          zip(stats.class_names, stats.per_class, strict=True))
    missing = [name for name, n in zip(stats.class_names, stats.per_class, strict=True)
               if n == 0]
    lines = [line, f"  boxes per class: {per_class or 'none'}"]
    if missing and stats.num_boxes:
        lines.append(f"  no boxes at all for: {', '.join(missing)}")
    return "\n".join(lines)


__all__ = ["CROWD_RULES", "DatasetStats", "crowd_rule", "dataset_stats",
           "format_dataset_stats"]
