"""Few-shot fine-tuning from images and boxes in memory: the TF2 "rubber ducky" recipe.

A pretrained detector (a workdir, a TF2 zoo model, a pipeline.config with its checkpoint)
learns new classes from a handful of annotated images: its weights are restored with
``restore: fitting`` (everything but the class predictor, which starts fresh for the new class
count, as the colab restores it), the backbone and neck are frozen, and the rest trains a few
hundred steps.

The images and boxes are written into the workdir as a COCO dataset
(``WORKDIR/fine_tune_data/``: the files as given, arrays as PNG, and ``annotations.json``), so
the run is an ordinary workdir run: it resumes, evaluates and predicts like any other.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from jaxdet.config.loader import apply_overrides, override_list, validate
from jaxdet.config.schema import Config
from jaxdet.data.decode import load_image
from jaxdet.data.pixels import display_pixels, rgb_pixels
from jaxdet.jobs.model_source import ModelSource
from jaxdet.jobs.runs import WorkdirMismatch

BOX_FORMATS = ("xyxy", "normalized_yxyx")
DATA_FOLDER = "fine_tune_data"
FROZEN = ("^backbone/", "^neck/")


def _pixel_xyxy(boxes, box_format: str, height: int, width: int, what: str) -> np.ndarray:
    """``boxes`` of one image as float64 [n, 4] pixel (x0, y0, x1, y1); ValueError naming
    ``what`` for a wrong shape, a box with no area, or normalized values outside 0..1."""
    b = np.asarray(boxes, np.float64)
    if b.size == 0:
        return np.zeros((0, 4), np.float64)
    if b.ndim != 2 or b.shape[1] != 4:
        raise ValueError(f"{what}: boxes of shape {tuple(b.shape)}; expected [n, 4]")
    if not np.all(np.isfinite(b)):
        raise ValueError(f"{what}: boxes hold NaN or infinite values")
    if box_format == "normalized_yxyx":
        if b.min() < 0 or b.max() > 1:
            raise ValueError(f"{what}: normalized boxes with values {b.min():g}..{b.max():g}; "
                             "expected 0..1 (pixel boxes: box_format='xyxy')")
        b = b[:, [1, 0, 3, 2]] * [width, height, width, height]
    bad = np.nonzero((b[:, 2] <= b[:, 0]) | (b[:, 3] <= b[:, 1]))[0]
    if bad.size:
        order = "(x0, y0, x1, y1)" if box_format == "xyxy" else "(ymin, xmin, ymax, xmax)"
        raise ValueError(f"{what}: box {int(bad[0])} has no area (as pixels "
                         f"{b[bad[0]].round(2).tolist()}); expected {order} with max > min")
    return b


def write_dataset(images: Sequence, boxes: Sequence, folder: str | os.PathLike, *,
                  class_names: Sequence[str], classes: Sequence | None = None,
                  box_format: str = "xyxy") -> Path:
    """Write images and their boxes as a COCO dataset; returns ``annotations.json``'s path.

    Args:
      images: arrays (RGB [H, W, 3] uint8 or 0..255 floats), PIL images or image file paths.
      boxes: per image, [n, 4] boxes: pixel (x0, y0, x1, y1) (``box_format="xyxy"``, the
        layout of ``Detections.boxes``) or normalized (ymin, xmin, ymax, xmax)
        (``"normalized_yxyx"``, the TF few-shot colab's).
      folder: created; ``images/`` and ``annotations.json`` go in it.
      class_names: the classes, in class-index order (category ids 1..C).
      classes: per image, [n] class indices 0..C-1 (default: all 0).
    Raises:
      ValueError / TypeError: lengths that disagree, a box or class that does not fit (the
        message names the image), an image that is not one (as ``Detector.predict``).
    """
    if box_format not in BOX_FORMATS:
        raise ValueError(f"box_format {box_format!r}; allowed: {', '.join(BOX_FORMATS)}")
    if not class_names:
        raise ValueError("class_names is empty: name the classes to learn")
    if len(images) != len(boxes) or (classes is not None and len(classes) != len(images)):
        raise ValueError(f"{len(images)} images, {len(boxes)} box lists"
                         + (f" and {len(classes)} class lists" if classes is not None else "")
                         + ": one per image")
    if not images:
        raise ValueError("no images to fine-tune on")
    folder = Path(folder)
    image_dir = folder / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    coco = {"images": [], "annotations": [],
            "categories": [{"id": k + 1, "name": str(n)} for k, n in enumerate(class_names)]}
    for i, image in enumerate(images):
        what = f"image {i} of {len(images)}"
        if isinstance(image, (str, os.PathLike)):
            pixels = load_image(image)
            name = f"{i + 1:06d}{Path(image).suffix.lower() or '.jpg'}"
            shutil.copyfile(image, image_dir / name)  # the file's own bytes, decoded as given
        else:
            pixels = display_pixels(rgb_pixels(image, what))
            name = f"{i + 1:06d}.png"
            Image.fromarray(pixels).save(image_dir / name)
        height, width = pixels.shape[:2]
        coco["images"].append({"id": i + 1, "file_name": name, "height": height, "width": width})
        xyxy = _pixel_xyxy(boxes[i], box_format, height, width, what)
        labels = (np.zeros(len(xyxy), np.int64) if classes is None
                  else np.asarray(classes[i], np.int64).reshape(-1))
        if labels.shape != (len(xyxy),) or (labels.size and (
                labels.min() < 0 or labels.max() >= len(class_names))):
            raise ValueError(f"{what}: classes {labels.tolist()} for {len(xyxy)} boxes; "
                             f"expected one class index 0..{len(class_names) - 1} per box")
        for (x0, y0, x1, y1), k in zip(xyxy.tolist(), labels.tolist(), strict=True):
            coco["annotations"].append({
                "id": len(coco["annotations"]) + 1, "image_id": i + 1, "category_id": k + 1,
                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                "iscrowd": 0})
    path = folder / "annotations.json"
    path.write_text(json.dumps(coco, indent=1))
    return path


def fine_tune_config(source: ModelSource, annotations: Path, *, num_classes: int,
                     steps: int, batch_size: int, freeze: Iterable[str],
                     overrides: Iterable[str] = ()) -> Config:
    """``source``'s config made a few-shot run: ``num_classes`` classes, the COCO dataset
    ``annotations`` (its ``images/`` beside it) to train on and no evaluation set,
    ``steps`` steps of ``batch_size``, its weights restored with ``restore: fitting``,
    ``freeze`` regexes frozen; ``overrides`` on top.

    Raises:
      ValueError: ``source`` names no weights to start from."""
    if source.checkpoint is not None:
        start = str(source.checkpoint)
    elif source.workdir is not None:
        start = str(source.workdir)
    else:
        raise ValueError("fine-tuning starts from trained weights: give a workdir, a TF2 zoo "
                         "model folder, or a config with checkpoint=...")
    raw = source.config.model_dump(mode="json")
    raw["model"]["num_classes"] = int(num_classes)
    raw["data"]["train"] = {"type": "coco", "annotation_file": str(annotations.absolute()),
                            "image_dir": str((annotations.parent / "images").absolute())}
    raw["data"]["eval"] = None
    raw["train"].update(init_checkpoint={"path": start, "restore": "fitting"},
                        freeze_variables=list(freeze), num_steps=int(steps),
                        batch_size=int(batch_size))
    return validate(apply_overrides(raw, overrides), source="the fine-tuning config")


def prepare_fine_tune(source: ModelSource, images: Sequence, boxes: Sequence,
                      workdir: str | os.PathLike, *, class_names: Sequence[str],
                      classes: Sequence | None = None, box_format: str = "xyxy",
                      steps: int = 200, batch_size: int = 4, freeze: Iterable[str] = FROZEN,
                      overrides: Iterable[str] = ()) -> Config:
    """Write the dataset into ``workdir`` and return the run's config (see the module
    docstring). A workdir that already holds a fine-tuning run keeps its data: the images
    and boxes must be the same (then the run resumes).

    Raises:
      WorkdirMismatch: the workdir holds a fine-tuning run on other images or boxes.
      TypeError: ``overrides`` given as one str (before anything is written)."""
    overrides = override_list(overrides)
    workdir = Path(workdir)
    data = workdir / DATA_FOLDER
    staging = workdir / f".{DATA_FOLDER}.new"
    shutil.rmtree(staging, ignore_errors=True)
    annotations = write_dataset(images, boxes, staging, class_names=class_names,
                                classes=classes, box_format=box_format)
    if (data / "annotations.json").is_file():
        same = (data / "annotations.json").read_text() == annotations.read_text() and all(
            (data / "images" / p.name).read_bytes() == p.read_bytes()
            for p in (staging / "images").iterdir())
        shutil.rmtree(staging)
        if not same:
            raise WorkdirMismatch(f"{workdir} holds a fine-tuning run on other images or boxes "
                                  f"({data}); fine-tune into a new workdir")
    else:
        staging.rename(data)
    return fine_tune_config(source, data / "annotations.json", num_classes=len(class_names),
                            steps=steps, batch_size=batch_size, freeze=freeze,
                            overrides=overrides)


__all__ = ["BOX_FORMATS", "FROZEN", "fine_tune_config", "prepare_fine_tune", "write_dataset"]
