"""``jaxdet convert-dataset``: COCO JSON / Pascal VOC / normalized-boxes JSON -> TF OD API
TFRecord or COCO, and TFRecord -> COCO.

Any jaxdet source (``CocoSource``, ``VocSource``, ``TfRecordSource``) converts: its records,
with the source's validation and repairs applied, are written out. Image bytes are copied as
they are (never re-encoded). TFRecord output uses the TF OD API feature keys (see
:mod:`jaxdet.data.tfrecord_source`) with ``label = class index + 1`` and normalized boxes;
``--label-map-out`` writes the matching label map. COCO output is ``DIR/annotations.json`` +
``DIR/images/<file name>`` with category ids ``class index + 1``.

Records with keypoints (a source built with ``keypoints=`` specs) keep them: TFRecords get
``image/object/keypoint/{y,x}`` (normalized, [n * K]), ``.../visibility`` and ``.../num``, as
the TF OD API's ``create_coco_tf_record`` writes them, and the label map each group's
``keypoints { id: <slot> label: <name> }``; COCO output gets ``keypoints`` [x, y, v] * k per
annotation and the categories' ``keypoints`` / ``skeleton``.

An image that cannot be read (or whose bytes are not an image) is skipped, named and counted.

Also here: :func:`draw_dataset_grid`, a picture of a source's images with their ground truth.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from jaxdet import files
from jaxdet.backends import process
from jaxdet.config.label_map import write_label_map
from jaxdet.data.decode import CorruptImageError, load_record_image, read_image_bytes
from jaxdet.data.masks import load_record_masks
from jaxdet.data.records import Record, coco_ground_truth
from jaxdet.data.tfrecord import TfRecordWriter, encode_example
from jaxdet.data.tfrecord_source import mask_features

logger = logging.getLogger("jaxdet.data")


@dataclass
class ConvertSummary:
    """What a conversion wrote and what it skipped ((image path, reason) each)."""

    num_images: int = 0
    num_boxes: int = 0
    outputs: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def line(self) -> str:
        where = self.outputs[0] if len(self.outputs) == 1 else (
            f"{len(self.outputs)} files ({self.outputs[0]} ...)")
        text = f"wrote {self.num_images} images, {self.num_boxes} boxes to {where}"
        return text + (f"; skipped {len(self.skipped)} unreadable images" if self.skipped else "")


def record_image_bytes(record: Record) -> bytes:
    """The encoded image bytes of a record, as stored (file, or a range of a TFRecord)."""
    ref = record.get("image_bytes_ref")
    if ref is not None:
        return read_image_bytes(ref, record["image_path"])
    path = record["image_path"]
    try:
        return files.read_bytes(path)
    except OSError as e:
        raise CorruptImageError(path, e.strerror or str(e)) from None


def image_format(data: bytes, name: str) -> str:
    """'jpeg', 'png', ... of encoded image bytes (Pillow's identification of the header).

    Raises:
      CorruptImageError: the bytes are not an image Pillow knows.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            return str(image.format or "").lower() or "unknown"
    except (OSError, ValueError) as e:
        raise CorruptImageError(name, str(e) or type(e).__name__) from None


def _file_name(record: Record) -> str:
    name = record.get("file_name") or ""
    if not name and not record.get("image_bytes_ref"):
        name = os.path.basename(record["image_path"])
    return name


def tf_example(record: Record, data: bytes, fmt: str, class_names: list[str], *,
               crowd_key: str = "image/object/is_crowd") -> bytes:
    """A serialized TF OD API ``tf.train.Example`` for a record (PIXEL boxes -> normalized;
    PIXEL (y, x) keypoints [n, K, 2] -> normalized, flattened [n * K], and instance masks ->
    ``image/object/mask`` PNGs, when it has them)."""
    height, width = int(record["height"]), int(record["width"])
    boxes = np.asarray(record["boxes"], np.float64).reshape(-1, 4)
    norm = (boxes / np.array([height, width, height, width], np.float64)).astype(np.float32)
    classes = np.asarray(record["classes"], np.int64).reshape(-1)
    names = [class_names[c] if 0 <= c < len(class_names) else str(c + 1) for c in classes]
    name = _file_name(record) or f"{record['image_id']}.{fmt}"
    features = {
        "image/height": np.array([height], np.int64),
        "image/width": np.array([width], np.int64),
        "image/filename": [name],
        "image/source_id": [str(record["image_id"])],
        "image/key/sha256": [hashlib.sha256(data).hexdigest()],
        "image/encoded": [data],
        "image/format": [fmt],
        "image/object/bbox/ymin": norm[:, 0],
        "image/object/bbox/xmin": norm[:, 1],
        "image/object/bbox/ymax": norm[:, 2],
        "image/object/bbox/xmax": norm[:, 3],
        "image/object/class/text": names,
        "image/object/class/label": classes + 1,
        crowd_key: np.asarray(record["is_crowd"], np.int64).reshape(-1),
    }
    if "keypoints" in record:
        features.update(keypoint_features(record["keypoints"], record["keypoint_visibility"],
                                          height, width))
    masks = load_record_masks(record)
    if masks is not None:  # PNG per instance, the TF OD API layout
        features.update(mask_features(masks))
    return encode_example(features)


def keypoint_features(keypoints, visibility, height: int, width: int) -> dict[str, np.ndarray]:
    """The TF OD API keypoint features of PIXEL (y, x) ``keypoints`` [n, K, 2] and COCO
    ``visibility`` [n, K]: ``image/object/keypoint/{y,x}`` normalized f32 [n * K],
    ``.../visibility`` int64 [n * K] and ``.../num`` (labelled keypoints per object) [n]."""
    yx = np.asarray(keypoints, np.float64)
    v = np.asarray(visibility, np.int64)
    return {
        "image/object/keypoint/y": (yx[..., 0] / height).astype(np.float32).reshape(-1),
        "image/object/keypoint/x": (yx[..., 1] / width).astype(np.float32).reshape(-1),
        "image/object/keypoint/visibility": v.reshape(-1),
        "image/object/keypoint/num": (v > 0).sum(axis=-1).astype(np.int64).reshape(-1),
    }


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="img", leave=False,
                disable=not (enabled and process.draws_progress_bars()))


def shard_paths(out: str | os.PathLike, shards: int) -> list[str]:
    """``out`` itself for one shard, else TF's ``out-00000-of-0000N`` names."""
    out = os.fspath(out)
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return [out] if shards == 1 else [f"{out}-{i:05d}-of-{shards:05d}" for i in range(shards)]


def source_to_tfrecord(source, out: str | os.PathLike, *, shards: int = 1,
                       label_map_out: str | os.PathLike | None = None,
                       crowd_key: str = "image/object/is_crowd",
                       progress: bool = True) -> ConvertSummary:
    """Writes every record of ``source`` as a tf.train.Example; record k goes to shard
    k mod ``shards``. ``crowd_key``: the feature that holds is_crowd (VOC: difficult)."""
    summary = ConvertSummary(outputs=shard_paths(out, shards))
    files.makedirs(files.parent(summary.outputs[0]) or ".")
    names = list(source.category_names)
    writers = [TfRecordWriter(p) for p in summary.outputs]
    try:
        for record, data, fmt in _readable(source, summary, "to TFRecord", progress):
            example = tf_example(record, data, fmt, names, crowd_key=crowd_key)
            writers[summary.num_images % shards].write(example)
            summary.num_images += 1
            summary.num_boxes += len(record["boxes"])
    finally:
        for writer in writers:
            writer.close()
    if label_map_out is not None:
        write_label_map(label_map_out, names, _label_map_keypoints(source))
    return summary


def _label_map_keypoints(source) -> dict[int, list[tuple[int, str]]]:
    """{label map id: [(slot, keypoint name), ...]} of a source's keypoint layout (TF's
    keypoint ids are the slots of ``num_keypoints``)."""
    layout = getattr(source, "keypoint_layout", None)
    return {g.class_index + 1: [(g.offset + j, n) for j, n in enumerate(g.names)]
            for g in (layout.groups if layout else ())}


def _readable(source, summary: ConvertSummary, desc: str, progress: bool):
    """Yields ``(record, encoded image bytes, format)`` for each record of ``source`` whose
    image can be read (a progress bar runs); others are logged and listed in ``summary``."""
    with _progress(len(source), desc, progress) as bar:
        for index in range(len(source)):
            record = source[index]
            bar.update()
            try:
                data = record_image_bytes(record)
                fmt = image_format(data, record["image_path"])
            except CorruptImageError as e:
                logger.warning("skipped %s: %s", e.path, e.reason)
                summary.skipped.append((e.path, e.reason))
                continue
            yield record, data, fmt


def source_to_coco(source, out_dir: str | os.PathLike, *, progress: bool = True
                   ) -> ConvertSummary:
    """Writes ``out_dir/annotations.json`` (category id = class index + 1) and the images,
    as stored, to ``out_dir/images/``; ``out_dir`` is a local folder or a URL
    (``gs://bucket/coco``). File names come from the records (made unique)."""
    out_dir = os.fspath(out_dir)
    image_dir = files.join(out_dir, "images")
    files.makedirs(image_dir)
    summary = ConvertSummary(outputs=[files.join(out_dir, "annotations.json")])
    kept: list[Record] = []
    used: set[str] = set()
    for record, data, fmt in _readable(source, summary, "to COCO", progress):
        name = os.path.basename(_file_name(record)) or f"{record['image_id']}.{fmt}"
        if name in used:
            name = f"{record['image_id']}_{name}"
        used.add(name)
        files.write_bytes(files.join(image_dir, name), data)
        kept.append(dict(record, file_name=name))
        summary.num_images += 1
        summary.num_boxes += len(record["boxes"])
    coco = coco_ground_truth(kept, source.category_names,
                             f"converted by jaxdet from {_describe(source)}",
                             file_name=lambda r: r["file_name"],
                             layout=getattr(source, "keypoint_layout", None))
    files.write_text(summary.outputs[0], json.dumps(coco))
    return summary


def _describe(source) -> str:
    if callable(getattr(source, "describe", None)):
        return source.describe()
    return str(getattr(source, "annotation_file", None) or getattr(source, "annotation_dir", "")
               or type(source).__name__)


def draw_dataset_grid(source, out_png: str | os.PathLike, max_images: int = 10, *,
                      columns: int = 5, cell_size: int = 256) -> str | None:
    """A PNG grid of the first ``max_images`` images of ``source`` with their ground-truth
    boxes and class names drawn (``columns`` per row, each scaled to ``cell_size``).
    Unreadable images are left out; returns where it wrote the PNG (local or a URL), None
    when none could be drawn."""
    from jaxdet.eval.visualize import draw_detections, image_grid

    drawn, ids = [], []
    for index in range(min(max_images, len(source))):
        record = source[index]
        try:
            image = load_record_image(record)
        except CorruptImageError as e:
            logger.warning("dataset grid: leaving out %s (%s)", e.path, e.reason)
            continue
        height, width = image.shape[:2]
        # fit to the cell first, so labels are drawn at the size they are shown
        fit = cell_size / max(height, width)
        new_h, new_w = max(1, round(height * fit)), max(1, round(width * fit))
        image = np.asarray(Image.fromarray(image).resize((new_w, new_h),
                                                         Image.Resampling.BILINEAR))
        scale = np.array([new_h / (record["height"] or height),
                          new_w / (record["width"] or width)] * 2)
        boxes = np.asarray(record["boxes"], np.float64).reshape(-1, 4) * scale
        drawn.append(draw_detections(image, boxes, record["classes"], None,
                                     list(source.category_names)))
        ids.append(str(record.get("file_name") or record["image_id"]))
    if not drawn:
        return None
    rows = [drawn[i:i + columns] for i in range(0, len(drawn), columns)]
    titles = [", ".join(ids[i:i + columns]) for i in range(0, len(ids), columns)]
    out_png = os.fspath(out_png)
    files.makedirs(files.parent(out_png) or ".")
    with files.open_file(out_png, "wb") as f:
        image_grid(rows, titles, cell_size).save(f, format="PNG")
    return out_png


# --------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``convert-dataset`` options."""
    p.add_argument("--from", dest="source_format", required=True,
                   choices=("coco", "voc", "tfrecord", "boxes-json"),
                   help="boxes-json: one class given as normalized [ymin, xmin, ymax, xmax] "
                        "boxes per image file ({\"images\": {\"a.jpg\": [[...]]}}), the TF2 "
                        "few-shot example's layout")
    p.add_argument("--to", dest="target_format", required=True, choices=("tfrecord", "coco"),
                   help="tfrecord (tf.train.Example with the TF OD API's feature keys, and a "
                        "label map) or coco (an annotations JSON and an images folder)")
    p.add_argument("--annotations", help="coco / boxes-json: the JSON file; voc: the folder "
                   "of XML files")
    p.add_argument("--class-name", default="object", help="boxes-json: the class's name")
    p.add_argument("--images", help="coco / voc: the image folder")
    p.add_argument("--input", action="append", default=[], metavar="FILE_OR_GLOB",
                   help="tfrecord: input files or globs (repeatable; quote globs)")
    p.add_argument("--label-map", default=None, help="tfrecord input: label map pbtxt")
    p.add_argument("--out", required=True,
                   help="tfrecord: the output file (prefix with --shards); coco: a folder")
    p.add_argument("--shards", type=int, default=1, help="tfrecord output: number of files")
    p.add_argument("--label-map-out", default=None, help="tfrecord output: write a label map")
    p.add_argument("--preview", default=None, metavar="PNG",
                   help="also draw the first images with their boxes into this PNG")
    p.add_argument("--masks", action="store_true",
                   help="coco / voc / tfrecord input: carry the instance masks (COCO "
                        "polygons or RLE, VOC SegmentationObject PNGs, TFRecord PNGs) into "
                        "the output (TFRecord image/object/mask PNGs, COCO RLE)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (a log file gets none anyway)")


def open_source(args: argparse.Namespace):
    """The source the options name (FileNotFoundError / ValueError name what is missing)."""
    kind = args.source_format
    if kind == "tfrecord":
        if not args.input:
            raise ValueError("--from tfrecord needs --input FILE_OR_GLOB")
        from jaxdet.data.tfrecord_source import TfRecordSource

        return TfRecordSource(args.input, args.label_map, masks=args.masks)
    if not args.annotations or not args.images:
        raise ValueError(f"--from {kind} needs --annotations and --images")
    if kind == "coco":
        from jaxdet.data.coco import CocoSource

        return CocoSource(args.annotations, args.images, masks=args.masks)
    if kind == "boxes-json":
        from jaxdet.data.boxes_json import BoxesJsonSource

        if args.masks:
            raise ValueError("--masks: boxes-json annotations have no masks")
        return BoxesJsonSource(args.annotations, args.images, class_name=args.class_name)
    from jaxdet.data.voc import VocSource

    return VocSource(args.annotations, args.images, masks=args.masks)


def run(args: argparse.Namespace) -> int:
    """Runs ``jaxdet convert-dataset``; prints the summary; 1 when nothing was written."""
    if args.target_format != "tfrecord" and (args.shards != 1 or args.label_map_out):
        raise ValueError("--shards and --label-map-out only apply to --to tfrecord")
    source = open_source(args)
    progress = not args.no_progress
    if args.target_format == "tfrecord":
        crowd_key = "image/object/difficult" if args.source_format == "voc" else (
            "image/object/is_crowd")
        summary = source_to_tfrecord(source, args.out, shards=args.shards,
                                     label_map_out=args.label_map_out, crowd_key=crowd_key,
                                     progress=progress)
    else:
        summary = source_to_coco(source, args.out, progress=progress)
    skips = getattr(source, "skips", None)
    print(summary.line() + (f" ({len(source.category_names)} classes)"))
    if skips is not None and skips.total:
        print(f"  dropped or repaired while reading the input: {skips.summary()}")
    for path, reason in summary.skipped:
        print(f"  skipped {path}: {reason}")
    if args.label_map_out:
        print(f"  label map: {args.label_map_out}")
    if args.preview:
        out = draw_dataset_grid(source, args.preview)
        print(f"  preview: {out}" if out else "  preview: no image could be drawn")
    return 0 if summary.num_images else 1


__all__ = ["ConvertSummary", "add_arguments", "draw_dataset_grid", "image_format",
           "keypoint_features", "open_source", "record_image_bytes", "run", "shard_paths",
           "source_to_coco", "source_to_tfrecord", "tf_example"]
