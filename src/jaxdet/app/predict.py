"""Run a trained workdir's detector over image files and folders; write JSON and drawn images.

    summary = predict_images(config, "runs/demo", ["photos/", "extra.png"], "out/")

For every image ``OUT/<name>.json`` and ``OUT/<name>.jpg`` (boxes drawn) are written, where
``<name>`` is the file's path relative to its input folder without the extension (a file given
directly: its stem). Names that would collide (``a.png`` and ``a.jpg``, same-named files of
two inputs, an image called ``predictions``) get ``_<ext>`` or ``_2``, ``_3`` ... appended.
``OUT/predictions.json`` collects every image plus a summary. Per image::

    {"image": "photos/cat.jpg", "width": 640, "height": 480,
     "detections": [{"bbox": [x, y, w, h], "box_xyxy": [x0, y0, x1, y1],
                     "class_id": 17, "class_name": "cat", "score": 0.91}, ...]}

Boxes are original-image PIXELS: ``bbox`` is COCO-style (xmin, ymin, width, height), the same
numbers as the ``detections.json`` of an evaluation (rounded alike); ``box_xyxy`` the corners.
``class_id`` is the dataset's category id (COCO id; 1..C for shapes and VOC), detections are
sorted by score, best first. A model with keypoint tasks adds to each detection of a class with
keypoints ``"keypoints": [x1, y1, s1, x2, y2, s2, ...]`` (COCO's results layout: original-image
pixels and each keypoint's score), in the order of its class's ``keypoints`` names listed in
predictions.json's ``classes``; the drawn image shows the keypoints scoring >= the draw
threshold and the skeleton between them. A model that predicts instance masks (detections
with ``masks``, per-box mask probabilities) adds ``"segmentation": {"size": [height, width],
"counts": "..."}`` to each detection: its mask pasted into the original image and binarized
at 0.5 (as TF's exported Mask R-CNN does), as COCO compressed RLE (``pycocotools.mask.decode``
reads it; ``eval.coco_mask_eval.rle_to_masks`` too); the drawn image shows the masks.

Images take the evaluation path: the eval loader (decode, as TF decodes JPEGs for a TF
checkpoint: ``data.build.decode_mode``; the eval-time resize of ``data.build.build_transforms``),
batches of a fixed size (the last one padded, so predict compiles once), normalization and
``task.predict`` under ``jax.jit``, boxes mapped back to the original pixels
through ``image_info``. Unreadable images are skipped, logged and counted. On one process with
several devices, each batch is split over the config's mesh (``parallel``: images over
``data``, height over ``spatial``) when it divides; otherwise (or when the config's mesh does
not fit these devices, e.g. a cluster config on a laptop) predict runs on one device and says
why.

Class names and ids come from the config's dataset (eval, else train): generated shapes and VOC
with ``class_names`` are read from the config alone; COCO (and VOC without names) by building
the source, i.e. reading its annotations; TFRecord from its label map. When none is available
or usable, a 90-class model gets COCO's names (ids 1..90, the TF model zoo's label map), a
91-class one the same names as torchvision numbers them (class = id, 0..90), any other the
names ``class_1 .. class_C`` with ids 1..C (and a warning says so).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxdet import tasks
from jaxdet.app import runs
from jaxdet.config import schema as S
from jaxdet.data import build as data_build
from jaxdet.data.coco_names import COCO_CATEGORY_NAMES
from jaxdet.data.decode import CorruptImageError, load_image
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.keypoints import resolve_layout
from jaxdet.data.loader import resolve_worker_count
from jaxdet.data.records import Record, make_record
from jaxdet.data.shapes import SHAPE_NAMES
from jaxdet.eval.coco_eval import BBOX_DECIMALS, SCORE_DECIMALS, coco_xywh
from jaxdet.eval.coco_mask_eval import masks_to_rle, paste_box_masks
from jaxdet.eval.runner import SAMPLES_SCORE_THRESHOLD, make_predict_fn, predict_callable
from jaxdet.eval.visualize import draw_detections, resize_masks
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.mesh import check_batch_layout
from jaxdet.parallel.sharding import mesh_predict, replicated
from jaxdet.train import build as train_build

log = logging.getLogger("jaxdet")

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
_RESERVED = {"predictions"}  # OUT/predictions.json is the summary file


@dataclass(frozen=True)
class ImageInput:
    """An image file to predict on and its output name (relative, no extension, '/'-separated)."""

    path: Path
    name: str


@dataclass
class PredictSummary:
    """What ``predict_images`` did."""

    num_images: int
    num_detections: int
    skipped: list[tuple[str, str]]  # (path, reason) of unreadable images
    out_dir: Path
    step: int
    images: list[dict] = field(default_factory=list, repr=False)

    def line(self) -> str:
        return (f"{self.num_images} images, {self.num_detections} detections, "
                f"{len(self.skipped)} skipped (unreadable) - checkpoint step {self.step}")


# --------------------------------------------------------------------------- inputs


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS


def _unique_name(name: str, suffix: str, used: set[str]) -> str:
    candidates = [name, f"{name}_{suffix.lower().lstrip('.')}"]
    candidates += [f"{name}_{k}" for k in range(2, len(used) + 3)]
    for candidate in candidates:
        key = candidate.lower()  # case-insensitive file systems
        if key not in used and key not in _RESERVED:
            used.add(key)
            return candidate
    raise AssertionError("unreachable: one of len(used) + 1 numbered names is free")


def find_images(
    inputs: Sequence[str | os.PathLike], *, exclude: str | os.PathLike | None = None
) -> list[ImageInput]:
    """Image files of ``inputs`` (files and/or folders, folders searched recursively).

    Files in a folder are those with an image extension (:data:`IMAGE_EXTENSIONS`, any case),
    sorted by relative path; a file given directly is taken whatever its extension. A file
    reached twice is listed once; files under ``exclude`` (the output folder) are left out.

    Raises:
      FileNotFoundError: an input does not exist (checked for all inputs first).
    """
    paths = [Path(p) for p in inputs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"input not found: {', '.join(missing)}")
    excluded = Path(exclude).resolve() if exclude is not None else None
    found: list[ImageInput] = []
    seen: set[Path] = set()
    used: set[str] = set()
    for root in paths:
        if root.is_dir():
            files = sorted((p for p in root.rglob("*") if p.is_file() and _is_image(p)),
                           key=lambda p: p.relative_to(root).as_posix())
            names = [p.relative_to(root).with_suffix("").as_posix() for p in files]
        else:
            files, names = [root], [root.stem]
        for path, name in zip(files, names, strict=True):
            resolved = path.resolve()
            if resolved in seen or (excluded is not None and resolved.is_relative_to(excluded)):
                continue
            seen.add(resolved)
            found.append(ImageInput(path, _unique_name(name, path.suffix, used)))
    return found


@dataclass(frozen=True)
class _FileSource:
    """The minimal source the eval loader needs: record i is image file i, no objects."""

    paths: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Record:
        # height/width 0: the loader takes the decoded image's size.
        return make_record(self.paths[index], image_id=index, height=0, width=0)


# --------------------------------------------------------------------------- classes


def _labels_of(dataset: S.DatasetConfig, workdir: Path) -> tuple[list[int], list[str]]:
    if isinstance(dataset, S.ShapesDataConfig):  # what data.shapes.generate_shapes writes
        return (list(range(1, dataset.num_classes + 1)),
                list(SHAPE_NAMES[:dataset.num_classes]))
    if isinstance(dataset, S.VocDataConfig) and dataset.class_names:
        return list(range(1, len(dataset.class_names) + 1)), list(dataset.class_names)
    source = data_build.build_source(dataset, workdir)
    return list(source.category_ids), list(source.category_names)


def class_labels(config: S.Config, workdir: str | Path) -> tuple[list[int], list[str]]:
    """(category ids, names) indexed by the model's class index; see the module docstring."""
    num_classes = config.model.num_classes
    for kind, dataset in (("eval", config.data.eval), ("train", config.data.train)):
        if dataset is None:
            continue
        try:
            ids, names = _labels_of(dataset, Path(workdir))
        except (OSError, ValueError) as e:
            log.warning("class names: cannot read data.%s (%s)", kind, e)
            continue
        if len(ids) == num_classes:
            return ids, names
        log.warning("class names: data.%s has %d classes but the model %d", kind, len(ids),
                    num_classes)
    if num_classes == len(COCO_CATEGORY_NAMES):
        log.info("class names: COCO's 90 (no readable dataset or label map in the config)")
        return list(range(1, num_classes + 1)), list(COCO_CATEGORY_NAMES)
    if num_classes == len(COCO_CATEGORY_NAMES) + 1:  # torchvision's numbering: class = id
        log.info("class names: COCO's ids 0..90 (no readable dataset or label map in the "
                 "config)")
        return list(range(num_classes)), ["id_0", *COCO_CATEGORY_NAMES]
    log.warning("class names unknown: calling them class_1 .. class_%d", num_classes)
    return list(range(1, num_classes + 1)), [f"class_{k}" for k in range(1, num_classes + 1)]


# --------------------------------------------------------------------------- predict


def _detections_json(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
                     ids: list[int], names: list[str], keypoints: np.ndarray | None = None,
                     keypoint_scores: np.ndarray | None = None, layout=None,
                     masks: np.ndarray | None = None) -> list[dict]:
    """Rows of (pixel yxyx box, score, class index) -> JSON detections (rounded like COCO);
    with ``keypoints`` [n, K, 2] pixel (y, x), ``keypoint_scores`` [n, K] and the
    ``layout``, each detection of a class with keypoints gets its group's (x, y, score);
    with ``masks`` (uint8 [n, H, W] binary, original-image pixels) each gets its
    ``segmentation`` (COCO compressed RLE, counts a str)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    x0, y0, w, h = coco_xywh(b)
    x1, y1 = np.round(b[:, 3], BBOX_DECIMALS), np.round(b[:, 2], BBOX_DECIMALS)
    s = np.round(np.asarray(scores, np.float64), SCORE_DECIMALS)
    rles = masks_to_rle(masks) if masks is not None else None
    out = []
    for i, k in enumerate(np.asarray(classes).astype(np.int64).tolist()):
        out.append({
            "bbox": [float(x0[i]), float(y0[i]), float(w[i]), float(h[i])],
            "box_xyxy": [float(x0[i]), float(y0[i]), float(x1[i]), float(y1[i])],
            "class_id": int(ids[k]),
            "class_name": names[k],
            "score": float(s[i]),
        })
        group = layout.group_of_class(k) if (layout and keypoints is not None) else None
        if group is not None:
            out[-1]["keypoints"] = [
                round(float(v), BBOX_DECIMALS if j % 3 < 2 else SCORE_DECIMALS)
                for slot in group.slots
                for j, v in enumerate((keypoints[i, slot, 1], keypoints[i, slot, 0],
                                       keypoint_scores[i, slot]))]
        if rles is not None:
            out[-1]["segmentation"] = rles[i]
    return out


def _class_entry(index: int, category_id: int, name: str, layout) -> dict:
    """predictions.json's entry of a class: id, name, and its keypoint names and skeleton
    (0-based pairs) when it has keypoints."""
    entry = {"id": category_id, "name": name}
    group = layout.group_of_class(index) if layout else None
    if group is not None:
        entry["keypoints"] = list(group.names)
        entry["skeleton"] = [list(e) for e in group.skeleton]
    return entry


def keypoint_layout(config: S.Config, names: list[str]):
    """The layout of the model's keypoint tasks over the classes ``names`` (None without
    keypoint tasks, or, with a warning, when a task's class is not among ``names``)."""
    specs = data_build.keypoint_specs(config)
    if not specs:
        return None
    try:
        return resolve_layout(specs, names, "the model's classes")
    except ValueError as e:
        log.warning("keypoints are left out of the predictions: %s", e)
        return None


def preprocess_images(config: S.Config, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decoded RGB images ``[B, h, w, 3]`` (uint8 or 0..255 floats) through the eval transforms
    as ``jaxdet predict`` runs them on the host: (network input f32 [B, H, W, 3], image_info
    f32 [B, 4])."""
    samples = []
    for image in images:
        sample = {"image": np.asarray(image, np.float32), "boxes": np.zeros((0, 4), np.float32),
                  "classes": np.zeros((0,), np.int32),
                  "image_info": np.array([*image.shape[:2], *image.shape[:2]], np.float32)}
        for op in tasks.transforms_of(config, training=False):
            sample = op(sample)
        samples.append(sample)
    return (np.stack([s["image"] for s in samples]),
            np.stack([s["image_info"] for s in samples]))


def _select(det: dict, row: int, score_threshold: float, max_detections: int | None):
    """One image's valid detections with score >= threshold, best first, at most max: boxes,
    scores, classes, keypoints / keypoint scores and per-box masks (None for a model
    without)."""
    n = int(det["num_detections"][row])
    scores = np.asarray(det["scores"][row][:n])
    order = np.argsort(-scores, kind="stable")
    order = order[scores[order] >= score_threshold]
    if max_detections is not None:
        order = order[:max_detections]
    if "keypoints" in det:
        points = (np.asarray(det["keypoints"][row])[order],
                  np.asarray(det["keypoint_scores"][row])[order])
    else:
        points = (None, None)
    box_masks = np.asarray(det["masks"][row])[order] if "masks" in det else None
    return (np.asarray(det["boxes"][row])[order], scores[order],
            np.asarray(det["classes"][row])[order], *points, box_masks)


def image_masks(boxes: np.ndarray, box_masks: np.ndarray | None, height: int,
                width: int) -> np.ndarray | None:
    """Per-box masks ``[n, mh, mw]`` of detections with pixel yxyx ``boxes`` [n, 4] pasted
    into their ``height x width`` original image and binarized at 0.5 (TF's exported
    ``detection_masks``): uint8 [n, H, W]; None for None."""
    if box_masks is None:
        return None
    normalized = np.asarray(boxes, np.float64).reshape(-1, 4) / np.array([height, width] * 2)
    return paste_box_masks(box_masks, normalized, height, width)


def _write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1))


def _reason(path: str) -> str:
    try:
        load_image(path)
    except CorruptImageError as e:
        return e.reason
    return "could not be read"  # readable again now; the loader's warning has the cause


def _predictor(config: S.Config, task, variables: tuple, batch_size: int) -> tuple:
    """``(predict, variables)``: predict jitted over the config's mesh with the variables
    replicated on it, or on one device (see the module docstring)."""
    options = train_build.predict_compiler_options(config)
    normalizer = tasks.build_normalizer(config)
    single = make_predict_fn(task, allow_tf32=config.allow_tf32, compiler_options=options,
                             normalizer=normalizer), variables
    if jax.process_count() > 1 or jax.device_count() == 1:
        return single
    try:
        mesh = parallel_build.build_mesh(config)
        if mesh.size == 1:
            return single
        check_batch_layout(mesh, batch_size=batch_size, image_size=task.input_size,
                           max_stride=task.max_stride(),
                           what="the predict batch size (--batch-size)")
    except ValueError as e:  # MeshLayoutError included
        log.info("predict runs on one device: %s", e)
        return single
    predict = mesh_predict(predict_callable(task, allow_tf32=config.allow_tf32,
                                            normalizer=normalizer), mesh,
                           compiler_options=options)
    log.info("predict splits each batch of %d over a (data=%d, spatial=%d) mesh", batch_size,
             mesh.shape["data"], mesh.shape["spatial"])
    return predict, jax.device_put(variables, replicated(mesh))


def predict_images(
    config: S.Config,
    workdir: str | Path,
    inputs: Sequence[str | os.PathLike],
    out_dir: str | Path,
    *,
    score_threshold: float | None = None,
    max_detections: int | None = None,
    batch_size: int | None = None,
    step: int | None = None,
    progress: bool = True,
    draw_threshold: float = SAMPLES_SCORE_THRESHOLD,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_format: str = "auto",
) -> PredictSummary:
    """Detect objects in image files/folders with ``workdir``'s checkpoint; write the results.

    Args:
      config: the run's config (fingerprint-checked against the checkpoint).
      inputs: image files and/or folders (searched recursively, see :func:`find_images`).
      out_dir: where the JSON files and drawn images go (created).
      score_threshold: keep detections with score >= this (default: the config's
        ``model.post_processing.score_threshold``).
      max_detections: keep at most this many per image (default: all the model returns).
      draw_threshold: the drawn ``<name>.jpg`` shows the kept detections with score >= this
        (default 0.3, as the eval sample grid); the JSON keeps every kept detection.
      batch_size: images per predict call (default ``eval.batch_size``); fixed, the last
        batch is padded.
      step: checkpoint step (default: the latest).
      checkpoint: instead of ``workdir``'s own checkpoint, a TF OD API checkpoint (a zoo
        model's ``checkpoint/ckpt-0``) or another workdir, imported in full; ``workdir`` may
        then be None.
    Returns:
      A :class:`PredictSummary` (its ``images`` holds what predictions.json lists);
      ``num_images`` is 0 when no input could be read.
    Raises:
      FileNotFoundError: an input path does not exist, or there is no checkpoint.
      ValueError: no images were found, or a bad argument.
    """
    out_dir = Path(out_dir)
    images = find_images(inputs, exclude=out_dir)
    if not images:
        raise ValueError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) found in "
                         f"{', '.join(str(p) for p in inputs) or 'no inputs'}")
    batch_size = config.eval.batch_size if batch_size is None else int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_detections is not None and max_detections < 0:
        raise ValueError(f"max_detections must be >= 0, got {max_detections}")
    if score_threshold is None:  # the model's own (Faster R-CNN: its second stage's)
        post = getattr(config.model, "post_processing", None) or getattr(
            config.model, "second_stage_post_processing", None)
        score_threshold = post.score_threshold if post is not None else 0.0
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a folder")

    task, state, step = runs.load_for_inference(config, workdir, step=step,
                                                checkpoint=checkpoint,
                                                checkpoint_format=checkpoint_format)
    ids, names = class_labels(config, workdir or out_dir)
    layout = keypoint_layout(config, names)
    predict, (params, batch_stats) = _predictor(
        config, task, runs.inference_variables(config, state), batch_size)
    source = _FileSource(tuple(str(item.path) for item in images))
    loader = make_eval_loader(
        source, tasks.transforms_of(config, training=False, normalize=False),
        batch_size=batch_size, max_boxes=1,
        worker_count=resolve_worker_count(config.data.worker_count, training=False),
        decode=data_build.decode_mode(config, runs.weights_format(checkpoint, checkpoint_format)))
    out_dir.mkdir(parents=True, exist_ok=True)

    results: list[dict] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    bar = tqdm(total=len(images), desc="predict", unit="img", disable=not progress)
    try:
        for b, batch in enumerate(loader):
            det = jax.device_get(predict(params, batch_stats, batch["images"],
                                         batch["image_info"]))
            for row in range(batch_size):
                index = b * batch_size + row
                if index >= len(images):
                    break
                item = images[index]
                bar.update(1)
                if not batch["mask"][row]:
                    skipped.append((str(item.path), _reason(str(item.path))))
                    continue
                boxes, scores, classes, points, point_scores, box_masks = _select(
                    det, row, score_threshold, max_detections)
                height, width = (int(v) for v in batch["image_info"][row][:2])
                masks = image_masks(boxes, box_masks, height, width)
                entry = {"image": str(item.path), "width": width, "height": height,
                         "detections": _detections_json(boxes, scores, classes, ids, names,
                                                        points, point_scores, layout, masks)}
                _write_json(out_dir / f"{item.name}.json", entry)
                shown = scores >= draw_threshold
                drawn_points = {}
                if layout and points is not None:
                    drawn_points = {
                        "keypoints": points[shown], "edges": layout.edges,
                        "keypoint_mask": layout.slot_mask(classes[shown])
                        & (point_scores[shown] >= draw_threshold)}
                pixels = load_image(item.path)
                if masks is not None:
                    drawn_points["masks"] = resize_masks(masks[shown], pixels.shape[:2])
                drawn = draw_detections(pixels, boxes[shown], classes[shown],
                                        scores[shown], names, **drawn_points)
                drawn.save(out_dir / f"{item.name}.jpg", quality=90)
                results.append(entry)
                total += len(boxes)
    except RuntimeError:
        # The eval loader refuses a pass in which no image could be read; for predict that is
        # a result (every input listed as skipped in predictions.json), not a crash.
        if results or len(skipped) < len(images):
            raise
    finally:
        bar.close()

    summary = PredictSummary(len(results), total, skipped, out_dir, step, results)
    _write_json(out_dir / "predictions.json", {
        "summary": summary.line(),
        "checkpoint_step": step,
        "workdir": None if workdir is None else str(workdir),
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "score_threshold": score_threshold,
        "draw_threshold": draw_threshold,
        "max_detections": max_detections,
        "classes": [_class_entry(k, i, n, layout)
                    for k, (i, n) in enumerate(zip(ids, names, strict=True))],
        "num_images": summary.num_images,
        "num_detections": summary.num_detections,
        "skipped": [{"image": p, "reason": r} for p, r in skipped],
        "images": results,
    })
    return summary


__all__ = ["IMAGE_EXTENSIONS", "ImageInput", "PredictSummary", "class_labels", "find_images",
           "predict_images"]
