"""``jaxdet predict`` for the 3D U-Net: label volumes for image volumes.

Inputs are volume files (``.nii``, ``.nii.gz``, ``.npy``, ``.npz``), folders of them (searched
recursively) or dataset listings (``.json`` / ``.csv``, their images). Each volume is read
(``tasks.unet3d.volume_io.read_volume``), preprocessed as the config's eval data (resampled to
``data.target_spacing``, intensities clipped and normalized), segmented whole by Gaussian-blended
sliding windows (``UNet3DTask.segment_volume``), and its argmax brought back to the input's own
grid (nearest voxel), then written in the input's format and spacing as
``OUT/<name>_label.<ext>`` (a NIfTI keeps the input's affine and header, so it overlays the
image in any viewer). ``OUT/predictions.json`` lists every volume: its file, shape, spacing,
the voxels and millilitres of each class, and the files that could not be read, with why.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet import files
from jaxdet.config import schema as S
from jaxdet.tasks.unet3d.volume_dataset import VolumeDataset
from jaxdet.tasks.unet3d.volume_io import VolumeReadError, read_header, read_listing, write_volume
from jaxdet.tasks.unet3d.volume_transforms import prepare_volume

log = logging.getLogger("jaxdet")

VOLUME_SUFFIXES = (".nii.gz", ".nii", ".npy", ".npz")


def volume_suffix(path: str | Path) -> str | None:
    """``.nii.gz``, ``.nii``, ``.npy`` or ``.npz`` when ``path`` names a volume, else None."""
    name = str(path).lower()
    return next((s for s in VOLUME_SUFFIXES if name.endswith(s)), None)


def collect_volumes(inputs: list[str | Path]) -> list[str]:
    """The volume files named by ``inputs`` (files, folders searched recursively, listings'
    images; local or in a store such as ``gs://bucket/scans``), in order, each once. Raises
    FileNotFoundError for an input that does not exist and ValueError when nothing is left."""
    found: list[str] = []
    for item in (str(i) for i in inputs):
        if files.isdir(item):
            found += [p for p in files.glob(files.join(item, "**"), files_only=True)
                      if volume_suffix(p)]
        elif not files.exists(item):
            raise FileNotFoundError(f"{item} does not exist")
        elif volume_suffix(item):
            found.append(item)
        elif item.lower().endswith((".json", ".csv", ".txt")):
            found += [r["image"] for r in read_listing(item)]
        else:
            raise ValueError(f"{item}: not a volume ({', '.join(VOLUME_SUFFIXES)}), a folder "
                             "or a listing (.json / .csv)")
    unique = list(dict.fromkeys(found))
    if not unique:
        raise ValueError(f"no volume files in {', '.join(map(str, inputs))}")
    return unique


def nearest_resize(labels: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """i32[d, h, w] -> i32[shape]: each output voxel takes the label of the input voxel whose
    centre is nearest (the inverse of a resampling to another spacing)."""
    index = [np.minimum(((np.arange(n) + 0.5) * m / n).astype(np.int64), m - 1)
             for n, m in zip(shape, labels.shape, strict=True)]
    return labels[np.ix_(*index)]


def prepare_volume_for(config: S.Config, image: np.ndarray, spacing: Sequence[float],
                       in_channels: int, *, name: str = "the volume") -> np.ndarray:
    """An image volume [D, H, W] or [D, H, W, C] with voxel size ``spacing`` as the network
    of ``config`` reads it: f32[D', H', W', C], resampled, clipped and normalized as its eval
    data (``tasks.unet3d.volume_transforms.prepare_volume``). Raises ValueError naming ``name`` for
    another rank or another channel count than ``in_channels``."""
    image = np.asarray(image, np.float32)
    if image.ndim == 3:
        image = image[..., None]
    if image.ndim != 4 or image.shape[3] != in_channels:
        raise ValueError(f"{name}: expected a volume [D, H, W] or [D, H, W, {in_channels}], got "
                         f"shape {tuple(image.shape)}")
    d = config.data
    return prepare_volume(image, None, spacing, target_spacing=d.target_spacing,
                          clip=d.intensity_clip, mean=d.intensity_mean, std=d.intensity_std)[0]


def segment_function(task: Any, variables: tuple[Any, Any], batch_size: int | None = None
                     ) -> Callable[[jax.Array], jax.Array]:
    """The jitted ``f32[D, H, W, C] -> i32[D, H, W]``: the argmax of ``task``'s (a
    ``UNet3DTask``) sliding-window segmentation with inference ``variables`` (params,
    batch_stats), ``batch_size`` windows per network call (default
    ``model.sliding_window.batch_size``); compiled once per volume shape."""
    params, batch_stats = variables
    return jax.jit(lambda volume: jnp.argmax(task.segment_volume(
        params, batch_stats, volume, batch_size=batch_size), axis=-1).astype(jnp.int32))


def labels_on_grid(segment: Callable[[jax.Array], jax.Array], prepared: np.ndarray,
                   shape: tuple[int, ...]) -> np.ndarray:
    """The labels of a prepared volume (:func:`prepare_volume_for`) by ``segment``
    (:func:`segment_function`), brought back to the input's grid ``shape`` (D, H, W)
    by :func:`nearest_resize`: i32[shape]."""
    labels = np.asarray(segment(jnp.asarray(prepared)))
    return labels if labels.shape == tuple(shape) else nearest_resize(labels, tuple(shape))


def class_counts(labels: np.ndarray, names: Sequence[str], spacing: Sequence[float]
                 ) -> dict[str, dict[str, Any]]:
    """``{name of class k: {"voxels", "ml"}}`` for classes 1..len(names) of ``labels``
    (i32[D, H, W]) with voxel size ``spacing`` (mm; 1 ml = 1000 mm^3, rounded to 1e-3)."""
    voxel_ml = float(np.prod(spacing)) / 1000.0
    counts = np.bincount(np.asarray(labels).ravel(), minlength=len(names) + 1)
    return {n: {"voxels": int(c), "ml": round(float(c) * voxel_ml, 3)}
            for n, c in zip(names, counts[1:len(names) + 1], strict=True)}


def stored_labels(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Labels as a label file stores them: uint8 (int16 from 256 classes)."""
    return labels.astype(np.uint8 if num_classes < 256 else np.int16)


def class_names_of(task: Any) -> tuple[str, ...]:
    """The names of classes 1..K-1 of ``task`` (``class_<k>`` where it has none)."""
    return tuple(task.class_names or (f"class_{k}" for k in range(1, task.num_classes)))


def _unlabelled_volumes(config: S.Config, paths: list[str], in_channels: int
                        ) -> tuple[VolumeDataset | None, list[tuple[str, str]]]:
    """The images of ``paths`` as a ``VolumeDataset`` without labels, preprocessed as the
    config's data (resampling, clipping, normalization; None when no header is usable), and
    the (file, reason) of those whose headers could not be used. Nothing is cached: each
    volume is read once."""
    d = config.data
    try:
        dataset = VolumeDataset(
            [{"image": str(p), "label": None} for p in paths],
            num_classes=config.model.num_classes,
            target_spacing=d.target_spacing, clip=d.intensity_clip, mean=d.intensity_mean,
            std=d.intensity_std, in_channels=in_channels, cache=False, require_labels=False)
    except ValueError as e:  # no usable volume at all: each named with the reason
        return None, [(str(p), str(e)) for p in paths]
    return dataset, list(dataset.skipped)


@dataclass
class VolumePredictSummary:
    """What :func:`predict_volumes` did."""

    num_volumes: int
    skipped: list[tuple[str, str]]
    out_dir: Path
    step: int | str
    volumes: list[dict] = field(default_factory=list, repr=False)

    @property
    def num_images(self) -> int:  # the CLI's name for "inputs predicted"
        return self.num_volumes

    def line(self) -> str:
        return (f"{self.num_volumes} volumes, {len(self.skipped)} skipped (unreadable) - "
                f"checkpoint step {self.step}")

    def written(self) -> str:
        return f"wrote {self.out_dir}/<name>_label.<ext> and predictions.json"


def _output_name(path: str, used: set[str]) -> str:
    base = files.basename(path)
    suffix = volume_suffix(base) or os.path.splitext(base)[1]
    stem = base[: len(base) - len(suffix)]
    name, k = f"{stem}_label", 2
    while name in used:
        name, k = f"{stem}_label_{k}", k + 1
    used.add(name)
    return name + suffix


def predict_volumes(config: S.Config, task: Any, variables: tuple[Any, Any], inputs: list[str],
                    out_dir: str | Path, *, step: int | str,
                    batch_size: int | None = None, **_: Any) -> VolumePredictSummary:
    """Segment every volume of ``inputs`` with ``task`` (a ``UNet3DTask``) and its inference
    ``variables`` (params, batch_stats) of checkpoint ``step``, written to ``out_dir``; see
    the module docstring. ``batch_size``: sliding windows per network call (default
    ``model.sliding_window.batch_size``). Detection options (score thresholds) are ignored.
    Returns the summary."""
    paths = collect_volumes(inputs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    segment = segment_function(task, variables, batch_size)
    names = class_names_of(task)
    dataset, skipped = _unlabelled_volumes(config, paths, task.in_channels)
    used: set[str] = set()
    records = []
    for i in range(len(dataset) if dataset is not None else 0):
        path, spacing = dataset.image_path(i), dataset.spacing(i)
        try:
            image, _ = dataset[i]  # resampled and normalized as the eval data
        except VolumeReadError as e:
            log.warning("skipped %s: %s", path, e)
            skipped.append((str(path), str(e)))
            continue
        shape = read_header(path)[0][:3]
        labels = labels_on_grid(segment, image, shape)
        target = out / _output_name(path, used)
        write_volume(target, stored_labels(labels, task.num_classes), spacing, like=path)
        records.append({
            "file": str(path), "labels": str(target), "shape": list(shape),
            "spacing": [float(s) for s in spacing],
            "classes": class_counts(labels, names, spacing),
        })
    (out / "predictions.json").write_text(json.dumps(
        {"step": step if isinstance(step, int) else str(step), "volumes": records,
         "skipped": [{"file": f, "reason": r} for f, r in skipped]}, indent=1))
    return VolumePredictSummary(len(records), skipped, out, step, records)


__all__ = ["VolumePredictSummary", "class_counts", "class_names_of", "collect_volumes",
           "labels_on_grid", "nearest_resize", "predict_volumes", "prepare_volume_for",
           "segment_function", "stored_labels", "volume_suffix"]
