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

from tqdm import tqdm

from jaxdet import files
from jaxdet.backends import process
from jaxdet.config import schema as S
from jaxdet.data.decode import CorruptImageError, load_image
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.loader import resolve_worker_count
from jaxdet.data.records import Record, make_record
from jaxdet.eval.runner import SAMPLES_SCORE_THRESHOLD
from jaxdet.jobs.detector import default_score_threshold, load_detector
from jaxdet.jobs.model_source import ModelSource, as_path
from jaxdet.results.detections import Detections
from jaxdet.results.labels import summary_classes

log = logging.getLogger("jaxdet")

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
_RESERVED = {"predictions"}  # OUT/predictions.json is the summary file


@dataclass(frozen=True)
class ImageInput:
    """An image file to predict on and its output name (relative, no extension, '/'-separated)."""

    path: Path | str  # a local file, or a URL (gs://...)
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
    missing = [os.fspath(p) for p in inputs if not files.exists(p)]
    if missing:
        raise FileNotFoundError(f"input not found: {', '.join(missing)}")
    excluded = Path(exclude).resolve() if exclude is not None else None
    found: list[ImageInput] = []
    seen: set[Path | str] = set()
    used: set[str] = set()
    for given in inputs:
        if files.is_url(given):
            for url, name in _remote_images(os.fspath(given)):
                if url not in seen:
                    seen.add(url)
                    found.append(ImageInput(url, _unique_name(name, "." + url.rsplit(".")[-1],
                                                              used)))
            continue
        root = Path(given)
        if root.is_dir():
            matches = sorted((p for p in root.rglob("*") if p.is_file() and _is_image(p)),
                             key=lambda p: p.relative_to(root).as_posix())
            names = [p.relative_to(root).with_suffix("").as_posix() for p in matches]
        else:
            matches, names = [root], [root.stem]
        for path, name in zip(matches, names, strict=True):
            resolved = path.resolve()
            if resolved in seen or (excluded is not None and resolved.is_relative_to(excluded)):
                continue
            seen.add(resolved)
            found.append(ImageInput(path, _unique_name(name, path.suffix, used)))
    return found


def _remote_images(url: str) -> list[tuple[str, str]]:
    """(URL, output name) of the image files under the remote folder ``url`` (by extension,
    sorted), or of ``url`` itself when it names a file."""
    if not files.isdir(url):
        return [(url, files.basename(url).rsplit(".", 1)[0])]
    root = url.rstrip("/") + "/"
    found = [p for p in files.glob(root + "**", files_only=True)
             if Path(p).suffix.lower() in IMAGE_EXTENSIONS]
    return [(p, p[len(root):].rsplit(".", 1)[0]) for p in sorted(found)]


@dataclass(frozen=True)
class _FileSource:
    """The minimal source the eval loader needs: record i is image file i, no objects."""

    paths: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Record:
        # height/width 0: the loader takes the decoded image's size.
        return make_record(self.paths[index], image_id=index, height=0, width=0)


# --------------------------------------------------------------------------- predict


def _write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1))


def _reason(path: str) -> str:
    try:
        load_image(path)
    except CorruptImageError as e:
        return e.reason
    return "could not be read"  # readable again now; the loader's warning has the cause


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
    if score_threshold is None:
        score_threshold = default_score_threshold(config)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} exists and is not a folder")

    detector = load_detector(
        ModelSource(config, None if workdir is None else Path(workdir),
                    as_path(checkpoint)),
        step=step, checkpoint_format=checkpoint_format, batch_size=batch_size,
        data_dir=workdir or out_dir)
    source = _FileSource(tuple(str(item.path) for item in images))
    loader = make_eval_loader(
        source, detector.family.transforms(training=False, normalize=False),
        batch_size=batch_size, max_boxes=1,
        worker_count=resolve_worker_count(config.data.worker_count, training=False),
        decode=detector.decode)
    out_dir.mkdir(parents=True, exist_ok=True)

    results: list[dict] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    bar = tqdm(total=len(images), desc="predict", unit="img",
               disable=not (progress and process.draws_progress_bars()))
    try:
        for b, batch in enumerate(loader):
            output = detector.run_batch(batch["images"], batch["image_info"])
            for row in range(batch_size):
                index = b * batch_size + row
                if index >= len(images):
                    break
                item = images[index]
                bar.update(1)
                if not batch["mask"][row]:
                    skipped.append((str(item.path), _reason(str(item.path))))
                    continue
                found = Detections.from_model_output(
                    output, row, detector.labels,
                    image_size=tuple(int(v) for v in batch["image_info"][row][:2]),
                    score_threshold=score_threshold, max_detections=max_detections,
                    source=str(item.path))
                entry = found.to_dict()
                _write_json(out_dir / f"{item.name}.json", entry)
                found.draw(draw_threshold, image=load_image(item.path)).save(
                    out_dir / f"{item.name}.jpg", quality=90)
                results.append(entry)
                total += len(found)
    except RuntimeError:
        # The eval loader refuses a pass in which no image could be read; for predict that is
        # a result (every input listed as skipped in predictions.json), not a crash.
        if results or len(skipped) < len(images):
            raise
    finally:
        bar.close()

    summary = PredictSummary(len(results), total, skipped, out_dir, detector.step, results)
    _write_json(out_dir / "predictions.json", {
        "summary": summary.line(),
        "checkpoint_step": detector.step,
        "workdir": None if workdir is None else str(workdir),
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "score_threshold": score_threshold,
        "draw_threshold": draw_threshold,
        "max_detections": max_detections,
        "classes": summary_classes(detector.labels),
        "num_images": summary.num_images,
        "num_detections": summary.num_detections,
        "skipped": [{"image": p, "reason": r} for p, r in skipped],
        "images": results,
    })
    return summary


__all__ = ["IMAGE_EXTENSIONS", "ImageInput", "PredictSummary", "find_images", "predict_images"]
