"""A one-class dataset given as normalized boxes per image file, the layout of the TF2 few-shot
("rubber ducky") example: ``{"images": {"a.jpg": [[ymin, xmin, ymax, xmax], ...], ...}}``
with coordinates in [0, 1], next to a folder of the images.

    source = BoxesJsonSource("ducky/boxes.json", "ducky/train", class_name="rubber ducky")

Images are listed in the file's order (image id = position + 1). Each image's size is read
from its header; boxes are validated and clipped as every source does (``records.pixel_box``),
every drop or repair logged with the file and the image.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from jaxdet.data.coco import _image_size_from_file
from jaxdet.data.records import Record, SkipCounter, coco_ground_truth, make_record, pixel_box

logger = logging.getLogger("jaxdet.data")


class BoxesJsonSource:
    """Random-access source over a normalized-boxes JSON file (see the module docstring)."""

    def __init__(self, boxes_file: str | os.PathLike, image_dir: str | os.PathLike, *,
                 class_name: str = "object", skips: SkipCounter | None = None):
        self.boxes_file, self.image_dir = str(boxes_file), str(image_dir)
        self.skips = skips if skips is not None else SkipCounter()
        self.category_ids, self.category_names = [1], [class_name]
        try:
            data = json.loads(Path(boxes_file).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"boxes file not found: {boxes_file}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{boxes_file}: not valid JSON ({e})") from None
        images = data.get("images") if isinstance(data, dict) else None
        if not isinstance(images, dict):
            raise ValueError(f"{boxes_file}: expected {{\"images\": {{file name: [[ymin, xmin, "
                             "ymax, xmax], ...]}}}} with normalized coordinates")
        if not os.path.isdir(self.image_dir):
            raise FileNotFoundError(f"image folder not found: {self.image_dir}")
        self._records: list[Record] = []
        for position, (name, boxes) in enumerate(images.items()):
            record = self._parse(position + 1, str(name), boxes)
            if record is not None:
                self._records.append(record)
        if not self._records:
            raise ValueError(f"{boxes_file}: no usable image (see the warnings above)")

    def _parse(self, image_id: int, name: str, boxes: Any) -> Record | None:
        path = os.path.join(self.image_dir, name)
        size = _image_size_from_file(path)
        if size is None:
            self.skips.add("unreadable_image", self.boxes_file, name, f"{path} cannot be opened")
            return None
        height, width = size
        kept = []
        for k, box in enumerate(boxes if isinstance(boxes, list) else []):
            try:
                y0, x0, y1, x1 = (float(v) for v in box)
            except (TypeError, ValueError):
                self.skips.add("malformed_box", self.boxes_file, f"{name} box {k}", repr(box))
                continue
            pixel, problem = pixel_box((y0 * height, x0 * width, y1 * height, x1 * width),
                                       height, width)
            if pixel is None:
                self.skips.add(problem, self.boxes_file, f"{name} box {k}", repr(box))
                continue
            if problem:
                self.skips.add(problem, self.boxes_file, f"{name} box {k}", repr(box))
            kept.append(pixel)
        return make_record(path, image_id, height, width, boxes=kept or None,
                           classes=[0] * len(kept) or None)

    @property
    def num_classes(self) -> int:
        return 1

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> Record:
        record = self._records[int(index)]
        return {k: (v.copy() if hasattr(v, "copy") else v) for k, v in record.items()}

    def ground_truth(self) -> dict[str, Any]:
        """A COCO-format dict of the images and boxes (category id 1)."""
        return coco_ground_truth(self._records, self.category_names, self.boxes_file)

    def __repr__(self) -> str:
        return f"BoxesJsonSource({self.boxes_file!r}, {len(self)} images)"


__all__ = ["BoxesJsonSource"]
