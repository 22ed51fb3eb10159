"""COCO JSON detection source: records with pixel yxyx boxes and contiguous class indices
(``class_index="contiguous"``: the file's categories in id order) or TF label-map indices
(``"id_minus_one"``: index = category id - 1, unused ids kept as classes ``id_<n>``; how TF
OD API models, e.g. the COCO-trained zoo, number COCO's 90 ids) or torchvision's (``"id"``:
index = category id, ids 0 .. max, unused ones kept as ``id_<n>``).

Annotations are validated once, when the source is built:
  * boxes with w <= 0 or h <= 0 (or non-finite) are dropped and counted,
  * boxes sticking out of the image are clipped (counted when off by more than a pixel),
    and dropped when nothing is left inside,
  * annotations with an unknown category id or image id are dropped and counted,
  * image entries without id / file_name, with a repeated id, or without a size when the file
    cannot be opened either, are dropped and counted,
  * images without annotations are kept (all-negative images).
Every drop/repair logs one WARNING naming the annotation file and the annotation / image id;
``source.skips`` holds the counts by reason, and one summary line follows the parse.
Unreadable image files are found later, by the loaders (skipped and counted there).

Keypoints (``keypoints=`` specs, see :mod:`jaxdet.data.keypoints`): the specs are resolved
against the category names (``source.keypoint_layout``) and every record gets ``keypoints``
f32 [n, K, 2] PIXEL (y, x) and ``keypoint_visibility`` int32 [n, K]. An annotation's
``keypoints`` are COCO's flat ``[x, y, v] * k`` in the order of its category's ``keypoints``
names; the spec's names pick theirs from that list (a spec name the category lacks is a
ValueError; a category without a ``keypoints`` list is taken position by position). An object
fills its class group's slots only; objects of other classes, and annotations without
``keypoints``, have every slot unlabelled. Repairs (object always kept, counted as above):
  * a keypoint list of another length than 3 x the category's names, or holding
    non-numbers: all the object's keypoints unlabelled (``keypoint_count_mismatch``,
    ``malformed_keypoints``),
  * a labelled keypoint outside the image or not finite: unlabelled (``keypoint_outside_image``),
    one with ``v`` outside 0..2: unlabelled (``keypoint_bad_visibility``), an unlabelled one
    with coordinates: coordinates zeroed (``keypoint_unlabelled_with_coordinates``).

Instance masks (``masks=True``, ``data.load_masks``): every kept annotation's ``segmentation``
(polygons, or RLE uncompressed or compressed) is checked and encoded once, when the source is
built, with :func:`jaxdet.data.masks.coco_segmentation` (pycocotools' rasterization, what
COCO's mask evaluation uses), and records get ``mask_ref`` (:class:`~jaxdet.data.masks.RleMasks`,
decoded by the loader into ``masks`` uint8 [n, H, W]). Crowd annotations (``iscrowd`` 1) keep
their mask as they keep their box (``is_crowd``: ignored in training and evaluation). A file in
which no annotation has a ``segmentation`` is refused (ValueError naming it). Per annotation:
  * no segmentation, or an empty list: dropped (``missing_mask``),
  * polygons with fewer than 3 points (or an odd number of coordinates): left out, and the
    annotation dropped when none is left (``degenerate_polygon``),
  * not a polygon list / RLE, non-finite coordinates, RLE run lengths that are negative,
    undecodable or do not add up to h x w: dropped (``malformed_mask``),
  * an RLE whose ``size`` is not the image's: dropped (``mask_size_mismatch``),
  * a mask with no pixel: kept with its empty mask (``empty_mask``),
  * a self-intersecting polygon: filled as pycocotools fills it (even-odd), not counted.

The source holds only compact numpy arrays, so it pickles cheaply into loader workers;
:meth:`CocoSource.ground_truth` re-reads the JSON for the evaluator and leaves out exactly the
image entries and annotations dropped here, gives the boxes clipped here (by more than
``CLIP_TOLERANCE_PX``) their clipped extent and the polygons repaired here their kept
polygons, so training and evaluation see the same objects.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet import files
from jaxdet.data.keypoints import (
    KeypointLayout,
    KeypointSpec,
    check_object_keypoints,
    resolve_layout,
)
from jaxdet.data.masks import RleMasks, coco_segmentation
from jaxdet.data.records import Record, SkipCounter, make_record, pixel_box

logger = logging.getLogger("jaxdet.data")



def _image_size_from_file(path: str) -> tuple[int, int] | None:
    from PIL import Image

    try:
        with files.open_file(path, "rb", block_size=1 << 16) as f, Image.open(f) as image:
            width, height = image.size
        return int(height), int(width)
    except (OSError, ValueError):
        return None


def _category_keypoints(category: dict[str, Any] | None, spec: KeypointSpec, file: str
                        ) -> tuple[tuple[int, ...], int, tuple[tuple[int, int], ...]]:
    """Where the spec's keypoints sit in a category's annotations.

    Returns:
      (positions, count, skeleton): ``positions[j]`` is the index of ``spec.names[j]`` in the
      category's ``keypoints`` names, ``count`` the number of keypoints its annotations hold
      (3 x count numbers), ``skeleton`` the category's 1-based COCO ``skeleton`` as 0-based
      pairs of spec indices (edges between keypoints the spec leaves out are dropped). A
      category without a ``keypoints`` list: positions 0 .. k-1, count k, no skeleton.
    Raises:
      ValueError naming the file, the category and the names, when the category lacks one
      of the spec's names or its ``keypoints`` / ``skeleton`` are malformed.
    """
    names = None if category is None else category.get("keypoints")
    if names is None:
        return tuple(range(len(spec.names))), len(spec.names), ()
    label = f"category {category.get('id')} ({category.get('name')!r})"
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{file}: {label}: 'keypoints' must be a list of keypoint names, "
                         f"got {names!r:.120}")
    missing = [n for n in spec.names if n not in names]
    if missing:
        raise ValueError(
            f"{file}: {label} has no keypoints named {missing} (its keypoints: {names}); "
            f"model.keypoint_tasks[].keypoints must be names of the category's keypoints")
    positions = tuple(names.index(n) for n in spec.names)
    spec_index = {p: j for j, p in enumerate(positions)}
    skeleton = []
    for edge in category.get("skeleton") or []:
        try:
            a, b = (int(v) - 1 for v in edge)
        except (TypeError, ValueError):
            raise ValueError(f"{file}: {label}: skeleton edge {edge!r} is not a pair of "
                             "1-based keypoint numbers") from None
        if a in spec_index and b in spec_index:
            skeleton.append((spec_index[a], spec_index[b]))
    return positions, len(names), tuple(skeleton)


class CocoSource:
    """Random-access source over a COCO-format detection annotation file.

    ``keypoints``: the keypoint groups to read (``model.keypoint_tasks``; see the module
    docstring); ``source.keypoint_layout`` is their layout (empty without). ``masks``: read
    the instance masks (``segmentation``; see the module docstring).
    """

    def __init__(
        self,
        annotation_file: str | os.PathLike,
        image_dir: str | os.PathLike,
        *,
        skips: SkipCounter | None = None,
        class_index: str = "contiguous",
        keypoints: Sequence[KeypointSpec] = (),
        masks: bool = False,
    ):
        if class_index not in ("contiguous", "id_minus_one", "id"):
            raise ValueError(f"class_index={class_index!r}; allowed: contiguous, id_minus_one, id")
        self.class_index = class_index
        self.annotation_file = str(annotation_file)
        self.image_dir = str(image_dir)
        self.skips = skips if skips is not None else SkipCounter()
        self._keypoint_specs = tuple(keypoints)
        self.load_masks = bool(masks)
        data = _load_json(self.annotation_file)
        if not files.isdir(self.image_dir):
            raise FileNotFoundError(
                f"image folder not found: {self.image_dir} (images of {self.annotation_file})"
            )
        before = self.skips.as_dict()
        self._parse(data)
        dropped = {k: n - before.get(k, 0) for k, n in self.skips.as_dict().items()
                   if n != before.get(k, 0)}
        if dropped:
            logger.warning("%s: %d images, %d boxes kept; dropped or repaired: %s",
                           self.annotation_file, len(self), len(self._boxes),
                           ", ".join(f"{k}: {n}" for k, n in sorted(dropped.items())))

    # ---------------------------------------------------------------- parsing

    def _parse(self, data: dict[str, Any]) -> None:
        file = self.annotation_file
        for key in ("images", "categories"):
            if not isinstance(data.get(key), list):
                raise ValueError(f"{file}: COCO annotation file has no {key!r} list")
        try:
            categories = sorted(data["categories"], key=lambda c: int(c["id"]))
            self.category_ids = [int(c["id"]) for c in categories]
            self.category_names = [str(c.get("name", c["id"])) for c in categories]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{file}: malformed 'categories' entry ({e!r})") from None
        if len(set(self.category_ids)) != len(self.category_ids):
            raise ValueError(f"{file}: duplicate category ids {self.category_ids}")
        if self.class_index != "contiguous":  # ids first..max, gaps kept (TF: 1, torchvision: 0)
            first = 1 if self.class_index == "id_minus_one" else 0
            if min(self.category_ids, default=first) < first:
                raise ValueError(f"{file}: class_index {self.class_index} needs category ids >= "
                                 f"{first}, got {min(self.category_ids)}")
            named = dict(zip(self.category_ids, self.category_names, strict=True))
            top = max(self.category_ids, default=0)
            self.category_ids = list(range(first, top + 1))
            self.category_names = [named.get(i, f"id_{i}") for i in self.category_ids]
        cat_index = {cid: i for i, cid in enumerate(self.category_ids)}
        self._resolve_keypoints({int(c["id"]): c for c in categories})

        ids, paths, heights, widths = [], [], [], []
        seen: set[int] = set()
        duplicated = _duplicate_image_ids(data["images"])  # every entry of such an id dropped
        # positions in data["images"] / data["annotations"] dropped here (for ground_truth())
        self._dropped_images: list[int] = []
        self._dropped_annotations: list[int] = []
        self._clipped_annotations: dict[int, list[float]] = {}  # position -> clipped xywh
        # position -> (repaired COCO keypoints [x, y, v] * count, num_keypoints)
        self._repaired_keypoints: dict[int, tuple[list[float], int]] = {}
        self._repaired_segmentation: dict[int, list] = {}  # position -> polygons kept
        for position, entry in enumerate(data["images"]):
            try:
                image_id = int(entry["id"])
                file_name = str(entry["file_name"])
            except (KeyError, TypeError, ValueError):
                self.skips.add("malformed_image_entry", file, f"image {entry!r:.80}")
                self._dropped_images.append(position)
                continue
            if image_id in duplicated:
                self.skips.add("duplicate_image_id", file, f"image id {image_id}",
                               f"{', '.join(duplicated[image_id])} have this id: all of them "
                               "and their annotations are left out (which boxes belong to "
                               "which file is unknown)")
                self._dropped_images.append(position)
                continue
            path = files.join(self.image_dir, file_name)
            try:
                height, width = int(entry["height"]), int(entry["width"])
            except (KeyError, TypeError, ValueError):
                height = width = 0
            if height <= 0 or width <= 0:
                size = _image_size_from_file(path)
                if size is None:
                    self.skips.add(
                        "image_without_size", file, f"image id {image_id}",
                        f"no height/width and {path} cannot be opened",
                    )
                    self._dropped_images.append(position)
                    continue
                height, width = size
            seen.add(image_id)
            ids.append(image_id)
            paths.append(file_name)
            heights.append(height)
            widths.append(width)
        self._image_ids = np.asarray(ids, np.int64)
        self._file_names = paths
        self._heights = np.asarray(heights, np.int32)
        self._widths = np.asarray(widths, np.int32)
        row_of = {image_id: row for row, image_id in enumerate(ids)}

        rows, classes, crowd, boxes, points, visible, rles = [], [], [], [], [], [], []
        annotations = data.get("annotations") or []
        if not isinstance(annotations, list):
            raise ValueError(f"{file}: 'annotations' must be a list")
        if self.load_masks and annotations and not any(
                isinstance(a, dict) and a.get("segmentation") is not None for a in annotations):
            raise ValueError(
                f"{file}: no annotation has a 'segmentation' (an instance mask), but instance "
                "masks were asked for (data.load_masks); use a file with masks or set "
                "data.load_masks false")
        ann_ids_seen: set[int] = set()
        for position, ann in enumerate(annotations):
            ann_id = ann.get("id", f"#{position}") if isinstance(ann, dict) else f"#{position}"
            where = f"annotation id {ann_id}"
            self._dropped_annotations.append(position)  # popped again when the box is kept
            try:
                row = row_of.get(int(ann["image_id"]))
                category = int(ann["category_id"])
                x, y, w, h = (float(v) for v in ann["bbox"])
            except (KeyError, TypeError, ValueError):
                self.skips.add("malformed_annotation", file, where)
                continue
            if row is None:
                if int(ann["image_id"]) in duplicated:
                    self.skips.add("annotation_of_duplicate_image_id", file, where,
                                   f"image id {ann['image_id']}")
                else:
                    self.skips.add("annotation_for_unknown_image", file, where,
                                   f"image id {ann['image_id']}")
                continue
            if isinstance(ann_id, int):
                if ann_id in ann_ids_seen:  # kept: the box itself is fine, the file is not
                    self.skips.add("duplicate_annotation_id", file, where,
                                   "another annotation has this id; both boxes are kept")
                ann_ids_seen.add(ann_id)
            image_where = f"image id {ann['image_id']}, {where}"
            if category not in cat_index:
                self.skips.add("unknown_category", file, image_where, f"category id {category}")
                continue
            height, width = int(self._heights[row]), int(self._widths[row])
            box, problem = pixel_box((y, x, y + h, x + w), height, width)
            if problem == "degenerate_box":
                self.skips.add("degenerate_box", file, image_where, f"bbox {[x, y, w, h]}")
                continue
            if problem == "box_outside_image":
                self.skips.add("box_outside_image", file, image_where,
                               f"bbox {[x, y, w, h]} in a {width}x{height} image")
                continue
            if self.load_masks:
                seg = coco_segmentation(ann.get("segmentation"), height, width)
                if seg.reason is not None:
                    self.skips.add(seg.reason, file, image_where, seg.detail)
                if seg.counts is None:
                    continue
                if seg.polygons is not None:
                    self._repaired_segmentation[position] = seg.polygons
                rles.append(seg.counts)
            cy0, cx0, cy1, cx1 = box
            if problem == "box_clipped":
                self.skips.add("box_clipped", file, image_where,
                               f"bbox {[x, y, w, h]} clipped to a {width}x{height} image")
                self._clipped_annotations[position] = [cx0, cy0, cx1 - cx0, cy1 - cy0]
            self._dropped_annotations.pop()
            rows.append(row)
            classes.append(cat_index[category])
            crowd.append(bool(ann.get("iscrowd", 0)))
            boxes.append((cy0, cx0, cy1, cx1))
            if self.keypoint_layout:
                yx, v = self._object_keypoints(ann, position, cat_index[category], height,
                                               width, image_where)
                points.append(yx)
                visible.append(v)

        rows_arr = np.asarray(rows, np.int64)
        order = np.argsort(rows_arr, kind="stable")
        self._boxes = np.asarray(boxes, np.float32).reshape(-1, 4)[order]
        self._classes = np.asarray(classes, np.int32)[order]
        self._crowd = np.asarray(crowd, bool)[order]
        k, n_boxes = self.keypoint_layout.num_keypoints, len(boxes)
        self._keypoints = np.zeros((n_boxes, k, 2), np.float32)
        self._keypoint_visibility = np.zeros((n_boxes, k), np.int32)
        if k and n_boxes:
            self._keypoints = np.stack(points).astype(np.float32)[order]
            self._keypoint_visibility = np.stack(visible).astype(np.int32)[order]
        counts = [rles[i] for i in order] if self.load_masks else []
        self._mask_counts = b"".join(counts)
        self._mask_offsets = np.concatenate(
            [[0], np.cumsum([len(c) for c in counts], dtype=np.int64)]).astype(np.int64)
        sorted_rows = rows_arr[order]
        n = len(ids)
        self._offsets = np.searchsorted(sorted_rows, np.arange(n + 1)).astype(np.int64)

    def _resolve_keypoints(self, categories: dict[int, dict[str, Any]]) -> None:
        """Sets ``keypoint_layout`` and, per class with a group, where its keypoints sit in
        the annotations (``_keypoint_positions``: class index -> (positions, count))."""
        self._keypoint_positions: dict[int, tuple[tuple[int, ...], int]] = {}
        if not self._keypoint_specs:
            self.keypoint_layout = KeypointLayout()
            return
        file = self.annotation_file
        layout = resolve_layout(self._keypoint_specs, self.category_names, file)
        groups = []
        for group, spec in zip(layout.groups, self._keypoint_specs, strict=True):
            category = categories.get(self.category_ids[group.class_index])
            positions, count, skeleton = _category_keypoints(category, spec, file)
            self._keypoint_positions[group.class_index] = (positions, count)
            groups.append((group.class_index, group.class_name, group.names,
                           spec.skeleton or skeleton))
        self.keypoint_layout = KeypointLayout.from_groups(groups)

    def _object_keypoints(self, ann: dict[str, Any], position: int, class_index: int,
                          height: int, width: int, where: str) -> tuple[np.ndarray, np.ndarray]:
        """One kept annotation's keypoints in the layout's slots: (f32 [K, 2] PIXEL (y, x),
        int32 [K] v). Repairs are counted (see the module docstring) and remembered for
        :meth:`ground_truth`."""
        layout, file = self.keypoint_layout, self.annotation_file
        yx, v = layout.empty(1)
        yx, v = yx[0], v[0]
        group = layout.group_of_class(class_index)
        raw = ann.get("keypoints")
        if group is None or raw is None:
            return yx, v
        positions, count = self._keypoint_positions[class_index]
        category = f"class {group.class_name!r}"
        try:
            values = np.asarray([float(x) for x in raw], np.float64)
        except (TypeError, ValueError):
            self.skips.add("malformed_keypoints", file, where,
                           f"{category}: keypoints {raw!r:.80} are not numbers; all unlabelled")
            self._repaired_keypoints[position] = ([0] * (3 * count), 0)
            return yx, v
        if values.shape != (3 * count,):
            self.skips.add("keypoint_count_mismatch", file, where,
                           f"{category}: {values.size} keypoint values, expected 3 x {count} "
                           "([x, y, v] per keypoint of the category); all unlabelled")
            self._repaired_keypoints[position] = ([0] * (3 * count), 0)
            return yx, v
        triples = values.reshape(count, 3)
        picked = triples[list(positions)]
        raw_v = picked[:, 2]
        # a non-integer v is refused like one outside 0..2
        integral = np.isfinite(raw_v) & (raw_v == np.round(raw_v))
        v_in = np.where(integral, raw_v, -1).astype(np.int64)
        yx_g, v_g, reasons = check_object_keypoints(picked[:, [1, 0]], v_in, height, width)
        if reasons:
            changed = [f"{group.names[j]} {picked[j].tolist()}" for j in range(len(positions))
                       if v_g[j] != raw_v[j] or not np.array_equal(yx_g[j], picked[j, [1, 0]])]
            detail = f"{category}: keypoints [x, y, v] " + ", ".join(changed)
            for reason in reasons:
                self.skips.add(reason, file, where, detail)
            triples[list(positions)] = np.stack([yx_g[:, 1], yx_g[:, 0], v_g], axis=1)
            flat = [float(x) for x in triples[:, :2].reshape(-1)]
            repaired = []
            for j in range(count):
                repaired += [flat[2 * j], flat[2 * j + 1], int(triples[j, 2])]
            self._repaired_keypoints[position] = (repaired, int((triples[:, 2] > 0).sum()))
        yx[group.offset:group.offset + len(positions)] = yx_g
        v[group.offset:group.offset + len(positions)] = v_g
        return yx, v

    # ---------------------------------------------------------------- API

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)

    @property
    def image_ids(self) -> list[int]:
        return [int(i) for i in self._image_ids]

    def __len__(self) -> int:
        return len(self._file_names)

    def __getitem__(self, index: int) -> Record:
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} images")
        index %= len(self)
        lo, hi = self._offsets[index], self._offsets[index + 1]
        with_keypoints = bool(self.keypoint_layout)
        height, width = int(self._heights[index]), int(self._widths[index])
        mask_ref = None
        if self.load_masks:
            cuts = self._mask_offsets[lo:hi + 1]
            mask_ref = RleMasks(height, width, tuple(
                self._mask_counts[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)))
        return make_record(
            image_path=files.join(self.image_dir, self._file_names[index]),
            image_id=int(self._image_ids[index]),
            height=height,
            width=width,
            boxes=self._boxes[lo:hi].copy(),
            classes=self._classes[lo:hi].copy(),
            is_crowd=self._crowd[lo:hi].copy(),
            keypoints=self._keypoints[lo:hi].copy() if with_keypoints else None,
            keypoint_visibility=(self._keypoint_visibility[lo:hi].copy() if with_keypoints
                                 else None),
            mask_ref=mask_ref,
        )

    def ground_truth(self) -> dict[str, Any]:
        """The COCO annotation dict of the file, with this source's repairs applied.

        Image entries and annotations dropped while parsing (see the module docstring) are
        left out and boxes clipped by more than ``CLIP_TOLERANCE_PX`` get their clipped
        ``bbox``; annotations whose keypoints were repaired get the repaired ``keypoints``
        (COCO order, [x, y, v] * k) and ``num_keypoints``, those whose degenerate polygons
        were left out (with masks) the polygons kept as ``segmentation``. Everything else is as
        stored in the file (what pycocotools evaluates: categories keep their ``keypoints``
        names and ``skeleton``, annotations their ``keypoints``, ``num_keypoints`` and
        ``segmentation``). On a clean file this is the file's dict unchanged.
        """
        data = _load_json(self.annotation_file)
        if not (self._dropped_images or self._dropped_annotations or self._clipped_annotations
                or self._repaired_keypoints or self._repaired_segmentation):
            return data
        out = dict(data)
        drop = set(self._dropped_images)
        out["images"] = [e for i, e in enumerate(data["images"]) if i not in drop]
        drop = set(self._dropped_annotations)
        annotations = []
        for i, ann in enumerate(data.get("annotations") or []):
            if i in drop:
                continue
            if i in self._clipped_annotations:
                ann = dict(ann, bbox=self._clipped_annotations[i])
            if i in self._repaired_keypoints:
                points, num = self._repaired_keypoints[i]
                ann = dict(ann, keypoints=points, num_keypoints=num)
            if i in self._repaired_segmentation:
                ann = dict(ann, segmentation=self._repaired_segmentation[i])
            annotations.append(ann)
        out["annotations"] = annotations
        return out

    def __repr__(self) -> str:
        return (
            f"CocoSource({Path(self.annotation_file).name!r}, {len(self)} images, "
            f"{len(self._boxes)} boxes, {self.num_classes} classes)"
        )


def _duplicate_image_ids(images: list) -> dict[int, list[str]]:
    """``{image id: its entries' file names}`` for the ids that several image entries have."""
    names: dict[int, list[str]] = {}
    for entry in images:
        try:
            image_id = int(entry["id"])
        except (KeyError, TypeError, ValueError):
            continue
        names.setdefault(image_id, []).append(str(entry.get("file_name")))
    return {i: n for i, n in names.items() if len(n) > 1}


def _load_json(path: str) -> dict[str, Any]:
    try:
        data = json.loads(files.read_bytes(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"COCO annotation file not found: {path}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return data
