"""Pascal VOC XML detection source.

Reads one XML file per image (``filename``, ``size``, ``object/name``, ``object/bndbox`` with
1-based inclusive pixel corners, ``object/difficult``). Boxes become continuous pixel
coordinates (xmin - 1, ymin - 1, xmax, ymax) as in detectron2; ``difficult`` objects become
``is_crowd`` (ignored in training and evaluation). :meth:`VocSource.ground_truth` builds a
COCO dict (category ids 1..C, difficult -> iscrowd 1) so the COCO evaluator serves VOC too.

Validation, once, when the source is built (each drop/repair is one WARNING naming the XML file
and the object, counted in ``source.skips`` by reason; one summary line follows):
  * unreadable or malformed XML files, and files with no ``<size>`` whose image cannot be
    opened either, are dropped,
  * objects with a non-numeric or non-finite ``bndbox``, or with xmax < xmin or ymax < ymin
    after the 1-based conversion (``xmin == xmax`` is a 1-pixel box in VOC, not an empty one),
    are dropped; boxes sticking out of the image are clipped (counted when off by more than a
    pixel) and dropped when nothing is left inside,
  * objects whose name is not in the class list are dropped,
  * images without objects are kept (all-negative images).
Unreadable image files are found later, by the loaders (skipped and counted there).

Instance masks (``masks=True``, ``data.load_masks``) come from the ``SegmentationObject`` PNGs
(``mask_dir``, by default the ``SegmentationObject`` folder beside ``annotation_dir``), one per
image, named as the image with ``.png``: a palette image whose pixel value k is the k-th
``<object>`` of the XML file (1-based, counting every object, also those dropped here), 0 the
background and 255 the object borders ("void": background in the masks). Records get
``mask_ref`` (:class:`~jaxdet.data.masks.InstancePngMasks`), decoded by the loader into
``masks`` uint8 [n, H, W]. Only some VOC images have instance masks (use the segmentation
image set, ``ImageSets/Segmentation/train.txt``). The PNGs are read once here; each problem
drops the image (its objects cannot all have masks), one WARNING naming the XML file:
  * no PNG (``missing_mask``), a PNG that cannot be decoded or is not a palette / grey image
    (``malformed_mask``), a PNG of another size than the image (``mask_size_mismatch``);
an object without a pixel in its PNG is kept with an empty mask (``empty_mask``).
"""

from __future__ import annotations

import logging
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet import files
from jaxdet.data.decode import CorruptImageError
from jaxdet.data.masks import InstancePngMasks, read_instance_png
from jaxdet.data.records import (
    Record,
    SkipCounter,
    coco_ground_truth,
    make_record,
    pixel_box,
)

logger = logging.getLogger("jaxdet.data")

VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)


def _text(node: ET.Element | None, tag: str, default: str | None = None) -> str | None:
    child = node.find(tag) if node is not None else None
    if child is None or child.text is None:
        return default
    return child.text.strip()


class VocSource:
    """Random-access source over a folder of Pascal VOC XML annotations.

    Args:
      annotation_dir: folder of ``*.xml`` files (VOC ``Annotations/``).
      image_dir: folder holding the images named by ``<filename>`` (VOC ``JPEGImages/``).
      class_names: ordered class list (index = contiguous class). ``None``: the 20 standard VOC
        classes when every name found belongs to them, else the sorted names found.
        Objects whose name is not in the list are dropped and counted.
      image_set: optional file listing the image ids to use, one per line (VOC
        ``ImageSets/Main/train.txt``); by default every XML file, sorted by name.
      masks: read the instance masks (see the module docstring) from ``mask_dir`` (default:
        ``SegmentationObject`` beside ``annotation_dir``).
    """

    def __init__(
        self,
        annotation_dir: str | os.PathLike,
        image_dir: str | os.PathLike,
        class_names: list[str] | None = None,
        *,
        image_set: str | os.PathLike | None = None,
        skips: SkipCounter | None = None,
        masks: bool = False,
        mask_dir: str | os.PathLike | None = None,
    ):
        self.annotation_dir = str(annotation_dir)
        self.image_dir = str(image_dir)
        self.skips = skips if skips is not None else SkipCounter()
        if not files.isdir(self.annotation_dir):
            raise FileNotFoundError(f"VOC annotation folder not found: {self.annotation_dir}")
        if not files.isdir(self.image_dir):
            raise FileNotFoundError(f"VOC image folder not found: {self.image_dir}")
        self.load_masks = bool(masks)
        self.mask_dir = None
        if self.load_masks:
            self.mask_dir = str(mask_dir) if mask_dir is not None else files.join(
                files.parent(self.annotation_dir), "SegmentationObject")
            if not files.isdir(self.mask_dir):
                raise FileNotFoundError(
                    f"VOC instance mask folder not found: {self.mask_dir} (instance masks were "
                    "asked for: data.load_masks; set the dataset's mask_dir to the "
                    "SegmentationObject folder)")
        before = self.skips.as_dict()
        if image_set is not None:
            lines = files.read_text(image_set).splitlines()
            stems = [line.split()[0] for line in lines if line.strip()]
            xml_files = [files.join(self.annotation_dir, s + ".xml") for s in stems]
        else:
            xml_files = files.glob(files.join(self.annotation_dir, "*.xml"), files_only=True)
        parsed = [p for p in (self._parse_file(f) for f in xml_files) if p is not None]

        if class_names is None:
            found = sorted({name for p in parsed for name, *_ in p["objects"]})
            if set(found) <= set(VOC_CLASSES):
                class_names = list(VOC_CLASSES)
            else:
                class_names = found
                logger.info("VOC classes taken from %s: %s", self.annotation_dir, found)
        self.category_names = [str(c) for c in class_names]
        if len(set(self.category_names)) != len(self.category_names):
            raise ValueError(f"class_names has duplicates: {self.category_names}")
        self.category_ids = list(range(1, len(self.category_names) + 1))
        index_of = {name: i for i, name in enumerate(self.category_names)}

        self._records: list[Record] = []
        for image_id, p in enumerate(parsed, start=1):
            boxes, classes, crowd, ids = [], [], [], []
            for name, box, difficult, k in p["objects"]:
                if name not in index_of:
                    self.skips.add("unknown_category", p["xml"], f"object {k}", f"name {name!r}")
                    continue
                boxes.append(box)
                classes.append(index_of[name])
                crowd.append(difficult)
                ids.append(k + 1)
            mask_ref = (InstancePngMasks(p["height"], p["width"], p["mask_path"], tuple(ids))
                        if self.load_masks else None)
            self._records.append(
                make_record(p["image_path"], image_id, p["height"], p["width"],
                            boxes, classes, crowd, mask_ref=mask_ref)
            )
        dropped = {k: n - before.get(k, 0) for k, n in self.skips.as_dict().items()
                   if n != before.get(k, 0)}
        if dropped:
            logger.warning("%s: %d images, %d boxes kept; dropped or repaired: %s",
                           self.annotation_dir, len(self._records),
                           sum(len(r["boxes"]) for r in self._records),
                           ", ".join(f"{k}: {n}" for k, n in sorted(dropped.items())))

    def _parse_file(self, xml_file: str) -> dict[str, Any] | None:
        try:
            root = ET.fromstring(files.read_bytes(xml_file))
        except FileNotFoundError:
            self.skips.add("missing_annotation_file", xml_file)
            return None
        except ET.ParseError as e:
            self.skips.add("malformed_xml", xml_file, detail=str(e))
            return None
        filename = _text(root, "filename") or (Path(xml_file).stem + ".jpg")
        image_path = files.join(self.image_dir, filename)
        size = root.find("size")
        try:
            height, width = int(float(_text(size, "height", "0"))), int(
                float(_text(size, "width", "0"))
            )
        except ValueError:
            height = width = 0
        if height <= 0 or width <= 0:
            from PIL import Image

            try:
                with files.open_file(image_path, "rb", block_size=1 << 16) as f, \
                        Image.open(f) as image:
                    width, height = image.size
            except (OSError, ValueError):
                self.skips.add("image_without_size", xml_file,
                               detail=f"no <size> and {image_path} cannot be opened")
                return None
        objects = []
        for k, obj in enumerate(root.findall("object")):
            name = _text(obj, "name")
            bndbox = obj.find("bndbox")
            try:
                xmin, ymin, xmax, ymax = (
                    float(_text(bndbox, tag)) for tag in ("xmin", "ymin", "xmax", "ymax")
                )
                difficult = bool(int(float(_text(obj, "difficult", "0") or 0)))
            except (TypeError, ValueError):
                self.skips.add("malformed_object", xml_file, f"object {k}")
                continue
            if name is None:
                self.skips.add("malformed_object", xml_file, f"object {k}", "no <name>")
                continue
            c, problem = pixel_box((ymin - 1.0, xmin - 1.0, ymax, xmax), height, width)
            if problem == "degenerate_box":
                self.skips.add("degenerate_box", xml_file, f"object {k} ({name})",
                               f"bndbox {[xmin, ymin, xmax, ymax]}")
                continue
            if problem == "box_outside_image":
                self.skips.add("box_outside_image", xml_file, f"object {k} ({name})")
                continue
            if problem == "box_clipped":
                self.skips.add("box_clipped", xml_file, f"object {k} ({name})")
            objects.append((name, c, difficult, k))
        mask_path = None
        if self.load_masks:
            mask_path = self._check_masks(xml_file, filename, objects, height, width)
            if mask_path is None:
                return None
        return {"xml": xml_file, "image_path": image_path, "height": height, "width": width,
                "objects": objects, "mask_path": mask_path}

    def _check_masks(self, xml_file: str, filename: str, objects: list, height: int,
                     width: int) -> str | None:
        """The image's SegmentationObject PNG, or None (counted) when the image must go."""
        path = files.join(self.mask_dir, Path(filename).stem + ".png")
        if not files.isfile(path):
            self.skips.add("missing_mask", xml_file, detail=f"no instance mask file {path}; "
                           "images without one are left out when masks are loaded")
            return None
        try:
            labels = read_instance_png(path)
        except CorruptImageError as e:
            self.skips.add("malformed_mask", xml_file, detail=f"{path}: {e.reason}")
            return None
        if labels.shape != (height, width):
            self.skips.add("mask_size_mismatch", xml_file,
                           detail=f"{path} is {labels.shape[1]}x{labels.shape[0]}, the image "
                                  f"{width}x{height} (w x h)")
            return None
        pixels = np.bincount(labels.ravel().astype(np.int64), minlength=256)
        for name, _, _, k in objects:
            if k + 1 >= len(pixels) or pixels[k + 1] == 0:
                self.skips.add("empty_mask", xml_file, f"object {k} ({name})",
                               f"no pixel of value {k + 1} in {path}; kept with an empty mask")
        return path

    # ---------------------------------------------------------------- API

    @property
    def num_classes(self) -> int:
        return len(self.category_names)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> Record:
        record = self._records[int(index)]
        return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in record.items()}

    def ground_truth(self) -> dict[str, Any]:
        """A COCO-format dict (ids 1..C, bbox xywh, difficult -> iscrowd 1)."""
        return coco_ground_truth(self._records, self.category_names,
                                 f"VOC {self.annotation_dir}")

    def __repr__(self) -> str:
        return f"VocSource({self.annotation_dir!r}, {len(self)} images, {self.num_classes} classes)"
