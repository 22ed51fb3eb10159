"""The 3D U-Net from Python: what ``jaxdet.load`` returns for a ``unet3d`` model.

    import jaxdet

    segmenter = jaxdet.load("runs/kidneys")           # a unet3d workdir, latest checkpoint
    found = segmenter.predict("case_00042.nii.gz")      # or an array [D, H, W] (+ spacing=)
    found.labels                                        # i32 [D, H, W] on the input's grid
    found.millilitres()                                 # {"kidney": 181.2, "tumor": 12.9}
    found.save("case_00042_label.nii.gz")               # lines up with the input in viewers

A volume goes through what ``jaxdet predict`` does to a volume file (``tasks.unet3d.predict``):
resampled to ``data.target_spacing``, intensities clipped and normalized as the config's data,
segmented whole by Gaussian-blended sliding windows, its argmax brought back to the input's
own grid (nearest voxel). One compile per prepared volume shape, reused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet import files
from jaxdet.config import schema as S
from jaxdet.tasks.unet3d.predict import (
    class_counts,
    class_names_of,
    labels_on_grid,
    prepare_volume_for,
    segment_function,
    stored_labels,
    volume_suffix,
)
from jaxdet.tasks.unet3d.volume_io import read_volume, volume_format, write_volume

Spacing = tuple[float, float, float]


@dataclass(frozen=True)
class Segmentation:
    """One volume's segmentation.

    Attributes:
      labels: i32 [D, H, W]: each voxel's class on the input's own grid (0: background,
        k: ``class_names[k - 1]``).
      spacing: the input's voxel size in mm along (D, H, W).
      class_names: the names of classes 1, 2, ...
      source: the file the volume was read from; None for an array.

    Example::

        found = jaxdet.load("runs/unet").predict(volume, spacing=(2.0, 1.5, 1.5))
        print(found.millilitres(), found.to_dict()["classes"])
    """

    labels: np.ndarray
    spacing: Spacing
    class_names: tuple[str, ...]
    source: str | None = None

    def voxels(self) -> dict[str, int]:
        """Voxels of each class (background left out).

        Returns:
          ``{class name: voxel count}``.

        Example::

            print(found.voxels()["tumor"])
        """
        return {n: c["voxels"] for n, c in self._counts().items()}

    def millilitres(self) -> dict[str, float]:
        """Volume of each class in millilitres (voxels x the voxel size; 1 ml = 1000 mm^3).

        Returns:
          ``{class name: ml}``, rounded to 1e-3.

        Example::

            print(found.millilitres()["kidney"])
        """
        return {n: c["ml"] for n, c in self._counts().items()}

    def _counts(self) -> dict[str, dict[str, Any]]:
        return class_counts(self.labels, self.class_names, self.spacing)

    def to_dict(self) -> dict[str, Any]:
        """What ``jaxdet predict`` lists for the volume in its ``predictions.json``.

        Returns:
          ``{"file", "shape", "spacing", "classes": {name: {"voxels", "ml"}}}`` (``file``:
          None for an array).

        Example::

            json.dumps(found.to_dict())
        """
        return {"file": self.source, "shape": list(self.labels.shape),
                "spacing": [float(s) for s in self.spacing], "classes": self._counts()}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the labels as a volume file, as ``jaxdet predict`` writes them.

        Args:
          path: ``.nii`` / ``.nii.gz`` (with the input's header and affine when the input was
            a NIfTI file, so the labels overlay it in viewers), ``.npy`` or ``.npz``.
        Returns:
          The path written.
        Raises:
          VolumeReadError: another extension (a ValueError).

        Example::

            found.save("case_00042_label.nii.gz")
        """
        volume_format(Path(path))  # an unknown extension is refused before anything is written
        like = self.source if self.source and volume_suffix(self.source) in (
            ".nii", ".nii.gz") else None
        return write_volume(path, stored_labels(self.labels, len(self.class_names) + 1),
                            self.spacing, like=like)


class Segmenter:
    """A trained 3D U-Net ready to segment volumes: what :func:`jaxdet.load` returns for a
    ``unet3d`` model (a workdir, or a config with ``workdir=`` / ``checkpoint=``).

    Attributes:
      config: the model's :class:`~jaxdet.config.schema.Config`.
      step: the checkpoint's step (0 for fresh weights).
      class_names: the names of classes 1, 2, ... (0 is the background).
      weights: where the weights came from, in words (``workdir runs/unet step 600``,
        ``checkpoint ...``, ``untrained (fresh initialization)``).

    Example::

        segmenter = jaxdet.load("runs/unet")
        found = segmenter.predict("case.nii.gz")
        found.save("case_label.nii.gz")
    """

    def __init__(self, config: S.Config, task: Any, variables: tuple[Any, Any], *,
                 step: int | str, batch_size: int | None = None,
                 evaluator: Callable[..., dict] | None = None, weights: str | None = None):
        self.config = config
        self.task = task
        self.variables = variables
        self.step = step
        self.weights = weights if weights is not None else f"step {step}"
        self.class_names = class_names_of(task)
        self._segment = segment_function(task, variables, batch_size)
        self._evaluator = evaluator

    def predict(self, volumes: Any, *, spacing: Sequence[float] | None = None
                ) -> Segmentation | list[Segmentation]:
        """Segment one volume or a list of them.

        Args:
          volumes: a volume array [D, H, W] or [D, H, W, C] (any real dtype; C =
            ``model.in_channels``), a volume file (``.nii``, ``.nii.gz``, ``.npy``, ``.npz``;
            local or a URL such as ``gs://bucket/ct.nii.gz``), or a list of them.
          spacing: the voxel size in mm along (D, H, W) of arrays and of files that store
            none (``.npy``); default (1, 1, 1), as ``jaxdet predict`` reads a ``.npy``.
        Returns:
          A :class:`Segmentation`, or a list of them for a list.
        Raises:
          ValueError: an array that is not [D, H, W] or [D, H, W, C] with the model's channels.
          VolumeReadError: a file that cannot be read (named, with why).
          FileNotFoundError: a file that does not exist.

        Example::

            found = segmenter.predict(np.load("ct.npy"), spacing=(2.5, 0.8, 0.8))
            print(found.labels.shape, found.millilitres())
        """
        if isinstance(volumes, (list, tuple)):
            return [self._one(v, spacing) for v in volumes]
        return self._one(volumes, spacing)

    def _one(self, volume: Any, spacing: Sequence[float] | None) -> Segmentation:
        source = None
        if isinstance(volume, (str, os.PathLike)):
            source = str(volume)
            if not files.exists(source):
                raise FileNotFoundError(f"{source} does not exist")
            image, found = read_volume(source, spacing=spacing, dtype=np.float32)
        else:
            image = np.asarray(volume)
            if image.dtype.kind not in "biuf":
                raise ValueError(f"a volume must hold real numbers, got dtype {image.dtype}")
            found = tuple(float(s) for s in (spacing or (1.0, 1.0, 1.0)))
            if len(found) != 3:
                raise ValueError(f"spacing is (d, h, w) in mm, got {spacing!r}")
        shape = tuple(image.shape[:3])
        prepared = prepare_volume_for(self.config, image, found, self.task.in_channels,
                                      name=source or "the array")
        labels = labels_on_grid(self._segment, prepared, shape)
        return Segmentation(labels, tuple(float(s) for s in found),  # type: ignore[arg-type]
                            self.class_names, source)

    def evaluate(self, out_dir: str | os.PathLike | None = None, *, overwrite: bool = False,
                 progress: bool = True) -> dict:
        """Score the config's ``data.eval`` volumes (per-class Dice), as ``jaxdet eval`` does:
        metrics and a sample picture go to ``out_dir`` (default ``WORKDIR/eval/step_N``).

        Args:
          out_dir: where the results go.
          overwrite: replace ``eval/step_N`` when it already holds an evaluation.
          progress: show a progress bar.
        Returns:
          The metrics (``mean_dice``, ``dice/<class>``), with ``out_dir`` and ``step``.
        Raises:
          ValueError: the config has no ``data.eval``, or fresh weights and no ``out_dir``.

        Example::

            print(jaxdet.load("runs/unet").evaluate()["mean_dice"])
        """
        if self._evaluator is None:
            raise ValueError("this segmenter was built without its data: load it with "
                             "jaxdet.load to evaluate")
        return self._evaluator(out_dir, overwrite=overwrite, progress=progress)

    def __repr__(self) -> str:
        return (f"Segmenter({self.config.name!r}, classes={list(self.class_names)}, "
                f"weights: {self.weights})")


__all__ = ["Segmentation", "Segmenter"]
