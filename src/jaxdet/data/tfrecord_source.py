"""TF OD API TFRecord detection source: ``tf.train.Example`` records, read without TensorFlow.

Feature keys (those of the TF OD API's dataset tools)::

    image/encoded, image/format, image/height, image/width, image/source_id, image/filename
    image/object/bbox/{ymin,xmin,ymax,xmax}    NORMALIZED box corners
    image/object/class/label                   label-map ids, 1-based
    image/object/class/text                    class names (used when labels are absent)
    image/object/{difficult,is_crowd,group_of} -> is_crowd (ignored in training and eval)
    image/object/weight                        0 -> is_crowd as well
    image/object/keypoint/{y,x}                NORMALIZED keypoints, [n * K] flattened
    image/object/keypoint/visibility           COCO v per keypoint, [n * K] (optional)
    image/object/mask                          instance masks: one PNG per object (TF's
                                               PNG_MASKS), or floats [n * H * W] (NUMERICAL)

Class index = label - 1 (jaxdet classes are 0-based; id 0 is TF's background). ``num_classes``
is, in order: the argument (the model's), else the label map's largest id, else the largest
label found. Class names come from the label map (index = id - 1), else ``str(id)``.

The files are read once, when the source is built: every record's CRCs are checked and every
Example decoded, but only its annotations and the byte range of its encoded image are kept
(``image_bytes_ref``; the loader reads and decodes the image when it needs it), so the source
is small and pickles cheaply into loader workers. Validation, each drop/repair one WARNING
naming the file and byte offset, counted in ``source.skips`` by reason:
  * records with a bad CRC or length (``tfrecord_*``, see :mod:`jaxdet.data.tfrecord`),
    Examples that do not decode or whose per-object lists disagree in length
    (``malformed_example``), without ``image/encoded`` (``example_without_image``), or without
    a size when the image header cannot be read either (``image_without_size``) are dropped,
  * objects whose label is < 1, beyond ``num_classes``, or whose text is not in the label map
    are dropped (``unknown_category``),
  * boxes: the same rules as the COCO source (:func:`pixel_box`): degenerate or non-finite
    boxes dropped, boxes out of the image clipped (counted when off by more than
    ``CLIP_TOLERANCE_PX``) and dropped when nothing is left inside.

``image_id`` is ``int(image/source_id)`` when that is an integer string not seen before, else
a running number above every integer id (so ids are unique).

Keypoints (``keypoints=`` specs, see :mod:`jaxdet.data.keypoints`), read as the TF OD API's
``tf_example_decoder`` does with ``num_keypoints = K``: K is the layout's (every object has
K slots, in the layout's slot order, as TF's input reader's global ``num_keypoints``). A spec's
class is looked up in the label map by ``name`` (what TF's ``keypoint_class_name`` matches,
e.g. "/m/01g317") or ``display_name`` ("person"). Without ``keypoint/visibility`` a keypoint
is visible (v = 2) unless its x is NaN (v = 0), TF's default; TF's NaN marks an unlabelled
keypoint. Every record gets ``keypoints`` f32 [n, K, 2] PIXEL (y, x) and
``keypoint_visibility`` int32 [n, K]; an object fills its class group's slots only (others
are unlabelled, as TF's keypoint task reads only its class's objects). Repairs, the object
always kept:
  * keypoint lists of another length than n * K (a visibility list, when present, too), or
    of the wrong type: the record's keypoints all unlabelled (``keypoint_count_mismatch``,
    ``malformed_keypoints``; TF would use its default visibility for a visibility list of the
    wrong length),
  * the checks of :func:`~jaxdet.data.keypoints.check_object_keypoints`
    (``keypoint_outside_image``, ``keypoint_bad_visibility``,
    ``keypoint_unlabelled_with_coordinates``).

Instance masks (``masks=True``, ``data.load_masks``), read as TF's ``tf_example_decoder`` does
(a pixel > 0 is the object): records get ``mask_ref``, decoded by the loader into ``masks``
uint8 [n, H, W] (:mod:`jaxdet.data.masks`). PNG masks stay in the file (the source keeps their
byte ranges and checks only their headers; a PNG whose pixels cannot be decoded is found by the
loader, which skips the image as unreadable); numerical masks are kept as COCO RLE. Checks:
  * a record with objects but no ``image/object/mask``, or whose mask list is not one PNG per
    object (or n x H x W floats), is dropped (``missing_mask``, ``malformed_mask``),
  * an object whose PNG header cannot be read is dropped (``malformed_mask``), one whose PNG
    is of another size than the image too (``mask_size_mismatch``),
  * a numerical mask with no pixel is kept (``empty_mask``).
:func:`mask_features` writes masks in this layout.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from jaxdet import files
from jaxdet.config.label_map import (
    LabelMapItem,
    class_names_from_label_map,
    read_label_map_items,
    text_to_id,
)
from jaxdet.data.keypoints import (
    KeypointLayout,
    KeypointSpec,
    check_object_keypoints,
    resolve_layout,
)
from jaxdet.data.masks import (
    MASK_KEY,
    MaskListError,
    PngMasks,
    RleMasks,
    encode_png,
    example_mask_items,
)
from jaxdet.data.records import (
    Record,
    SkipCounter,
    coco_ground_truth,
    make_record,
    pixel_box,
)
from jaxdet.data.tfrecord import ExampleError, decode_example_spans, iter_tfrecord

logger = logging.getLogger("jaxdet.data")

BOX_KEYS = tuple(f"image/object/bbox/{k}" for k in ("ymin", "xmin", "ymax", "xmax"))
CROWD_KEYS = ("image/object/difficult", "image/object/is_crowd", "image/object/group_of")
KEYPOINT_KEYS = tuple(f"image/object/keypoint/{k}" for k in ("y", "x", "visibility"))
RECORD_HEADER_BYTES = 12  # TFRecord: uint64 length + uint32 crc before the data


def resolve_input_paths(patterns: str | Sequence[str]) -> list[str]:
    """Files named by ``patterns`` (each a path or a glob such as ``train-?????-of-00256``),
    each pattern's matches sorted, duplicates removed.

    Raises:
      FileNotFoundError: naming a pattern that matches no file.
    """
    patterns = [patterns] if isinstance(patterns, str | os.PathLike) else list(patterns)
    if not patterns:
        raise FileNotFoundError("no TFRecord input_path given")
    found: list[str] = []
    for pattern in map(os.fspath, patterns):
        if files.has_magic(pattern):
            matches = files.glob(pattern, files_only=True)
            if not matches:
                raise FileNotFoundError(f"no TFRecord file matches {pattern!r}")
        elif files.isfile(pattern):
            matches = [pattern]
        else:
            raise FileNotFoundError(f"TFRecord file not found: {pattern}")
        found.extend(m for m in matches if m not in found)
    return found


def _image_size(data: bytes) -> tuple[int, int] | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
        return int(height), int(width)
    except (OSError, ValueError):
        return None


class _Malformed(Exception):
    pass


def mask_features(masks) -> dict[str, list[bytes]]:
    """The TF OD API feature of instance ``masks`` [n, H, W] (binary): ``image/object/mask``,
    one PNG (one channel, 0 / 1) per object, as TF's ``create_coco_tf_record`` writes it."""
    return {MASK_KEY: [encode_png(m) for m in np.asarray(masks)]}


class TfRecordSource:
    """Random-access source over TFRecord files of TF OD API ``tf.train.Example`` records.

    Args:
      input_path: a file or glob, or a list of them (see :func:`resolve_input_paths`).
      label_map_path: optional ``StringIntLabelMap`` pbtxt: class names, and class/text ->
        label when records carry no labels.
      num_classes: the model's class count (labels beyond it are dropped and counted).
      keypoints: the keypoint groups to read (``model.keypoint_tasks``; see the module
        docstring); ``source.keypoint_layout`` is their layout (empty without).
      masks: read the instance masks (``image/object/mask``; see the module docstring).
    """

    def __init__(
        self,
        input_path: str | Sequence[str],
        label_map_path: str | os.PathLike | None = None,
        num_classes: int | None = None,
        *,
        skips: SkipCounter | None = None,
        keypoints: Sequence[KeypointSpec] = (),
        masks: bool = False,
    ):
        paths = [input_path] if isinstance(input_path, str | os.PathLike) else input_path
        self.input_path = tuple(os.fspath(p) for p in paths)
        self.files = resolve_input_paths(self.input_path)
        self.label_map_path = None if label_map_path is None else os.fspath(label_map_path)
        self.skips = skips if skips is not None else SkipCounter()
        items = read_label_map_items(self.label_map_path) if self.label_map_path else []
        self.label_map = {item.id: item.shown for item in items} or None
        self._text_ids = text_to_id(items)
        if num_classes is None and self.label_map:
            num_classes = max(self.label_map)
        if num_classes is not None and num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self._max_label = num_classes
        self._keypoint_specs = tuple(keypoints)
        self.load_masks = bool(masks)
        self._num_keypoints = sum(len(spec.names) for spec in self._keypoint_specs)
        self._label_items = items
        if num_classes is not None:  # refuse a bad keypoint class before reading the files
            self._keypoint_layout(class_names_from_label_map(self.label_map, num_classes))
        before = self.skips.as_dict()

        self._file_index: list[int] = []
        self._offsets: list[int] = []  # record offsets (its length field) in the file
        self._image_refs: list[tuple[int, int]] = []  # (file offset, length) of image bytes
        self._sizes: list[tuple[int, int]] = []
        self._names: list[str] = []
        self._source_ids: list[str] = []
        self._boxes: list[list] = []
        self._classes: list[list[int]] = []
        self._crowd: list[list[bool]] = []
        # per image, with keypoints: (object index in the Example [m], PIXEL (y, x) [m, K, 2],
        # v [m, K]) of its kept objects, before the layout's checks
        self._points: list[tuple[list[int], np.ndarray, np.ndarray]] = []
        # per kept object, with masks: (file offset, length) of its PNG, or its RLE counts
        self._masks: list[tuple[int, int] | bytes] = []
        total = sum(files.getsize(f) for f in self.files)
        # A bar only when indexing is slow (large datasets): tqdm stays hidden for 2 s.
        with tqdm(total=total, unit="B", unit_scale=True, delay=2.0, leave=False,
                  desc=f"indexing {len(self.files)} TFRecord file(s)") as bar:
            for file_index, file in enumerate(self.files):
                for offset, data in iter_tfrecord(file, self.skips):
                    self._add(file_index, file, offset, data)
                    bar.update(RECORD_HEADER_BYTES + len(data) + 4)

        largest = max((c for cs in self._classes for c in cs), default=-1) + 1
        self.num_classes = num_classes if num_classes is not None else max(largest, 1)
        self.category_ids = list(range(1, self.num_classes + 1))
        self.category_names = class_names_from_label_map(self.label_map, self.num_classes)
        self.keypoint_layout = self._keypoint_layout(self.category_names)
        self._image_ids = self._assign_image_ids()
        self._check_keypoints()
        self._pack()
        dropped = {k: n - before.get(k, 0) for k, n in self.skips.as_dict().items()
                   if n != before.get(k, 0)}
        if dropped:
            logger.warning("%s: %d images, %d boxes kept; dropped or repaired: %s",
                           self.describe(), len(self), len(self._box_array),
                           ", ".join(f"{k}: {n}" for k, n in sorted(dropped.items())))

    # ---------------------------------------------------------------- parsing

    def _add(self, file_index: int, file: str, offset: int, data: bytes) -> None:
        where = f"byte {offset}"
        try:
            spans = decode_example_spans(data)
            parsed = self._parse(spans, data, file, where)
        except ExampleError as e:
            self.skips.add("malformed_example", file, where, str(e))
            return
        except _Malformed as e:
            reason, detail = e.args
            self.skips.add(reason, file, where, detail)
            return
        (a, b), size, name, source_id, boxes, classes, crowd, points, masks = parsed
        start = offset + RECORD_HEADER_BYTES
        self._masks.extend(m if isinstance(m, bytes) else (start + m[0], m[1] - m[0])
                           for m in masks)
        self._file_index.append(file_index)
        self._offsets.append(offset)
        self._image_refs.append((offset + RECORD_HEADER_BYTES + a, b - a))
        self._sizes.append(size)
        self._names.append(name)
        self._source_ids.append(source_id)
        self._boxes.append(boxes)
        self._classes.append(classes)
        self._crowd.append(crowd)
        if self._num_keypoints:
            self._points.append(points)

    def _parse(self, spans: dict, data: bytes, file: str, where: str):
        def values(key: str, kind: str | None = None) -> list:
            found = spans.get(key)
            if found is None:
                return []
            if kind is not None and found[0] != kind and found[1]:
                raise _Malformed("malformed_example", f"{key} is a {found[0]} list, "
                                                      f"expected {kind}")
            return found[1]

        def text(key: str) -> str:
            vals = values(key, "bytes")
            return data[vals[0][0]:vals[0][1]].decode("utf-8", "replace") if vals else ""

        encoded = values("image/encoded", "bytes")
        if len(encoded) != 1:
            raise _Malformed("example_without_image", f"{len(encoded)} image/encoded values")
        a, b = encoded[0]
        heights, widths = values("image/height", "int64"), values("image/width", "int64")
        height = int(heights[0]) if heights else 0
        width = int(widths[0]) if widths else 0
        if height <= 0 or width <= 0:
            size = _image_size(data[a:b])
            if size is None:
                raise _Malformed("image_without_size",
                                 "no image/height, image/width and the image cannot be read")
            height, width = size
        name, source_id = text("image/filename"), text("image/source_id")

        corners = [values(k, "float") for k in BOX_KEYS]
        n = len(corners[0])
        labels = values("image/object/class/label", "int64")
        texts = [data[s:e].decode("utf-8", "replace")
                 for s, e in values("image/object/class/text", "bytes")]
        flags = [values(k) for k in CROWD_KEYS]
        weights = values("image/object/weight")
        lengths = {k: len(v) for k, v in zip(BOX_KEYS, corners, strict=True)}
        lengths.update({k: len(v) for k, v in zip(CROWD_KEYS, flags, strict=True) if v})
        if weights:
            lengths["image/object/weight"] = len(weights)
        if labels:
            lengths["image/object/class/label"] = len(labels)
        elif n:
            if not texts:
                raise _Malformed("malformed_example",
                                 f"{n} boxes but no image/object/class/label or class/text")
            if not self._text_ids:
                raise _Malformed("malformed_example", "objects have class/text but no "
                                 "class/label, and no label map was given to map the text")
            lengths["image/object/class/text"] = len(texts)
        if len(set(lengths.values())) > 1:
            raise _Malformed("malformed_example", "per-object lists differ in length: "
                             + ", ".join(f"{k}: {v}" for k, v in lengths.items()))

        boxes, classes, crowd, kept, masks = [], [], [], [], []
        scale = (height, width, height, width)
        points = self._read_keypoints(spans, n, height, width, file, where)
        mask_items = None
        if self.load_masks:
            try:
                mask_items = example_mask_items(*spans.get(MASK_KEY, ("bytes", [])), data, n,
                                                height, width)
            except MaskListError as e:
                raise _Malformed(*e.args) from None
        for k in range(n):
            obj = f"{where}, object {k}"
            if labels:
                label = int(labels[k])
            else:
                label = self._text_ids.get(texts[k], -1)
                if label < 0:
                    self.skips.add("unknown_category", file, obj,
                                   f"class/text {texts[k]!r} is not in {self.label_map_path}")
                    continue
            if label < 1 or (self._max_label is not None and label > self._max_label):
                limit = f"1..{self._max_label}" if self._max_label is not None else ">= 1"
                self.skips.add("unknown_category", file, obj,
                               f"label {label} outside {limit} (class index = label - 1)")
                continue
            box, reason = pixel_box([corners[j][k] * scale[j] for j in range(4)],
                                    height, width)
            if reason is not None:
                norm = [round(float(corners[j][k]), 6) for j in range(4)]
                self.skips.add(reason, file, obj,
                               f"normalized box {norm} in a {width}x{height} image")
            if box is None:
                continue
            if mask_items is not None:
                item = mask_items[k]
                if isinstance(item, tuple) and isinstance(item[0], str):
                    reason, detail, keep = item
                    self.skips.add(reason, file, obj, detail)
                    if not keep:
                        continue
                    item = keep
                masks.append(item)
            boxes.append(box)
            classes.append(label - 1)
            crowd.append(any(bool(f[k]) for f in flags if f)
                         or bool(weights and float(weights[k]) == 0.0))
            kept.append(k)
        points = None if points is None else (kept, points[0][kept], points[1][kept])
        return (a, b), (height, width), name, source_id, boxes, classes, crowd, points, masks

    # ---------------------------------------------------------------- keypoints

    def _read_keypoints(self, spans: dict, n: int, height: int, width: int, file: str,
                        where: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The keypoints of an Example's ``n`` objects, as TF's decoder reads them: (PIXEL
        (y, x) f64 [n, K, 2], v int64 [n, K]); None without keypoint specs. Lists of a wrong
        length or type are counted and give every keypoint v = 0."""
        k = self._num_keypoints
        if not k:
            return None
        unlabelled = np.zeros((n, k, 2)), np.zeros((n, k), np.int64)
        found = [spans.get(key, ("float", [])) for key in KEYPOINT_KEYS]
        for key, (kind, values), expected in zip(KEYPOINT_KEYS, found,
                                                 ("float", "float", "int64"), strict=True):
            if values and kind != expected:
                self.skips.add("malformed_keypoints", file, where,
                               f"{key} is a {kind} list, expected {expected}; keypoints "
                               "unlabelled")
                return unlabelled
        (_, ys), (_, xs), (_, vs) = found
        if len(ys) != n * k or len(xs) != n * k or (vs and len(vs) != n * k):
            self.skips.add("keypoint_count_mismatch", file, where,
                           f"{len(ys)} y, {len(xs)} x, {len(vs)} visibility keypoint values "
                           f"for {n} objects x {k} keypoints; keypoints unlabelled")
            return unlabelled
        y = np.asarray(ys, np.float64).reshape(n, k) * height
        x = np.asarray(xs, np.float64).reshape(n, k) * width
        v = (np.asarray(vs, np.int64).reshape(n, k) if vs
             else np.where(np.isnan(x), 0, 2).astype(np.int64))  # TF's default
        return np.stack([y, x], axis=-1), v

    def _keypoint_layout(self, class_names: Sequence[str]) -> KeypointLayout:
        """The layout of the keypoint specs among ``class_names`` (a spec's class may be
        named by a label map item's ``name`` or ``display_name``)."""
        if not self._keypoint_specs:
            return KeypointLayout()
        specs = [_spec_by_shown_name(spec, self._label_items, class_names)
                 for spec in self._keypoint_specs]
        where = self.describe() + (f" with label map {self.label_map_path}"
                                   if self.label_map_path else " (no label map)")
        return resolve_layout(specs, class_names, where)

    def _check_keypoints(self) -> None:
        """Keeps each object's keypoints in its class group's slots only and applies
        :func:`check_object_keypoints` there (repairs counted, naming file, byte, object)."""
        layout = self.keypoint_layout
        for i, (objects, yx, v) in enumerate(self._points):
            file = self.files[self._file_index[i]]
            height, width = self._sizes[i]
            out_yx, out_v = layout.empty(len(objects))
            for j, (k, c) in enumerate(zip(objects, self._classes[i], strict=True)):
                group = layout.group_of_class(c)
                if group is None:
                    continue
                s = slice(group.offset, group.offset + len(group.names))
                g_yx, g_v, reasons = check_object_keypoints(yx[j, s], v[j, s], height, width)
                for reason in reasons:
                    self.skips.add(reason, file, f"byte {self._offsets[i]}, object {k}",
                                   f"class {group.class_name!r} in a {width}x{height} image")
                out_yx[j, s], out_v[j, s] = g_yx, g_v
            self._points[i] = (objects, out_yx, out_v)

    def _assign_image_ids(self) -> np.ndarray:
        ids: list[int | None] = []
        seen: set[int] = set()
        for k, source_id in enumerate(self._source_ids):
            try:
                value = int(source_id)
            except ValueError:
                value = None
            if value is not None and (value in seen or not 0 <= value < 2**62):
                file = self.files[self._file_index[k]]
                self.skips.add("duplicate_source_id" if value in seen else "bad_source_id",
                               file, f"byte {self._offsets[k]}",
                               f"image/source_id {source_id!r}: given a new image id")
                value = None
            if value is not None:
                seen.add(value)
            ids.append(value)
        next_id = max(seen, default=0) + 1
        out = np.zeros(len(ids), np.int64)
        for k, value in enumerate(ids):
            if value is None:
                value, next_id = next_id, next_id + 1
            out[k] = value
        return out

    def _pack(self) -> None:
        """Per-image lists -> compact arrays (what is pickled into loader workers)."""
        counts = np.array([len(c) for c in self._classes], np.int64)
        self._box_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._box_array = np.asarray([b for bs in self._boxes for b in bs],
                                     np.float32).reshape(-1, 4)
        self._class_array = np.asarray([c for cs in self._classes for c in cs], np.int32)
        self._crowd_array = np.asarray([c for cs in self._crowd for c in cs], bool)
        k = self.keypoint_layout.num_keypoints
        self._keypoint_array = np.concatenate(
            [p[1] for p in self._points] + [np.zeros((0, k, 2))]).astype(np.float32)
        self._visibility_array = np.concatenate(
            [p[2] for p in self._points] + [np.zeros((0, k))]).astype(np.int32)
        self._mask_png = np.asarray([m if isinstance(m, tuple) else (-1, -1)
                                     for m in self._masks], np.int64).reshape(-1, 2)
        counts = [m if isinstance(m, bytes) else b"" for m in self._masks]
        self._mask_rle = b"".join(counts)
        self._mask_rle_offsets = np.concatenate(
            [[0], np.cumsum([len(c) for c in counts], dtype=np.int64)]).astype(np.int64)
        self._file_index = np.asarray(self._file_index, np.int32)
        self._offsets = np.asarray(self._offsets, np.int64)
        self._image_refs = np.asarray(self._image_refs, np.int64).reshape(-1, 2)
        self._sizes = np.asarray(self._sizes, np.int32).reshape(-1, 2)
        del self._boxes, self._classes, self._crowd, self._source_ids, self._points, self._masks
        del self._label_items

    # ---------------------------------------------------------------- API

    @property
    def image_ids(self) -> list[int]:
        return [int(i) for i in self._image_ids]

    @property
    def image_location(self) -> str:
        """Where the images are, for loader messages."""
        return "the images inside " + self.describe()

    def describe(self) -> str:
        shown = ", ".join(self.input_path[:3]) + (", ..." if len(self.input_path) > 3 else "")
        return f"TFRecord {shown} ({len(self.files)} file{'s' if len(self.files) != 1 else ''})"

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index: int) -> Record:
        """The record: ``image_path`` is ``"<file>@<record byte offset>"`` (for messages);
        ``image_bytes_ref`` = (file, byte offset, length) of the encoded image; plus
        ``file_name`` (image/filename, may be empty)."""
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} images")
        index %= len(self)
        file = self.files[int(self._file_index[index])]
        lo, hi = self._box_offsets[index], self._box_offsets[index + 1]
        with_keypoints = bool(self.keypoint_layout)
        record = make_record(
            image_path=f"{file}@{int(self._offsets[index])}",
            image_id=int(self._image_ids[index]),
            height=int(self._sizes[index, 0]),
            width=int(self._sizes[index, 1]),
            boxes=self._box_array[lo:hi].copy(),
            classes=self._class_array[lo:hi].copy(),
            is_crowd=self._crowd_array[lo:hi].copy(),
            keypoints=self._keypoint_array[lo:hi].copy() if with_keypoints else None,
            keypoint_visibility=(self._visibility_array[lo:hi].copy() if with_keypoints
                                 else None),
            mask_ref=self._mask_ref(index, file, lo, hi) if self.load_masks else None,
        )
        start, length = (int(v) for v in self._image_refs[index])
        record["image_bytes_ref"] = (file, start, length)
        record["file_name"] = self._names[index]
        return record

    def _mask_ref(self, index: int, file: str, lo: int, hi: int) -> PngMasks | RleMasks:
        height, width = (int(v) for v in self._sizes[index])
        if hi > lo and self._mask_png[lo, 0] >= 0:
            return PngMasks(height, width, file,
                            tuple((int(a), int(b)) for a, b in self._mask_png[lo:hi]))
        cuts = self._mask_rle_offsets[lo:hi + 1]
        return RleMasks(height, width, tuple(self._mask_rle[a:b]
                                             for a, b in zip(cuts[:-1], cuts[1:], strict=True)))

    def ground_truth(self) -> dict[str, Any]:
        """A COCO-format dict of the kept images and boxes (category ids = labels 1..C,
        bbox xywh in pixels, is_crowd -> iscrowd 1; keypoints as
        :func:`~jaxdet.data.records.coco_ground_truth` writes them)."""
        return coco_ground_truth((self[i] for i in range(len(self))), self.category_names,
                                 self.describe(),
                                 file_name=lambda r: r["file_name"] or r["image_path"],
                                 layout=self.keypoint_layout)

    def __repr__(self) -> str:
        return (f"TfRecordSource({self.describe()}, {len(self)} images, "
                f"{len(self._box_array)} boxes, {self.num_classes} classes)")


def _spec_by_shown_name(spec: KeypointSpec, items: Sequence[LabelMapItem],
                        class_names: Sequence[str]) -> KeypointSpec:
    """``spec`` with its class named as the source names it (the shown name of the label map
    item whose ``name``, else ``display_name``, is the spec's class; unchanged otherwise)."""
    found = ([i for i in items if i.name == spec.class_name]
             or [i for i in items if i.display_name == spec.class_name])
    if found and 1 <= found[0].id <= len(class_names):
        return dataclasses.replace(spec, class_name=class_names[found[0].id - 1])
    return spec


__all__ = ["MASK_KEY", "TfRecordSource", "mask_features", "pixel_box", "resolve_input_paths"]
