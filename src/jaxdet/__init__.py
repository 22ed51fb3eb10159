"""jaxdet: object detection on JAX/XLA.

    import jaxdet
    detector = jaxdet.load("runs/demo")
    found = detector.predict(image)

The Python API (:mod:`jaxdet.api`: ``load``, ``fit``, ``fine_tune``, ``Detector`` with ``predict``,
``evaluate`` and ``export``, ``Detections``, the 3D U-Net's ``Segmenter`` and
``Segmentation``, and the errors they raise) is importable from
here; it loads on first use, so ``import jaxdet`` alone stays light.

The package, its layers top to bottom: ``api`` (this API); ``cli`` (the ``jaxdet`` command),
``jobs`` (train, evaluate, predict, export, fine-tune on a config: what the command and the API
run), ``results`` (detections and labels); ``export`` (serving artifacts); ``tasks`` (one
folder per model family, and the registry); ``eval``, ``train``, ``parallel`` (evaluators; the
train step, loop and checkpoints; meshes and sharding); ``models``, ``data``, ``config``,
``interop`` (network parts; the input pipeline; the config schema; other frameworks' files);
``core`` (pure array ops); ``backends``, ``files``, ``samples`` (the machine's forms of ops;
the file layer; the photos that ship with jaxdet).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_API = ("CheckpointError", "ConfigError", "CorruptImageError", "Detection", "Detections",
        "Detector",
        "ExportError", "Labels", "Segmentation", "Segmenter", "TrainResult", "VolumeReadError",
        "WorkdirMismatch", "ZooDownloadError", "download_zoo_model", "fine_tune", "fit", "load",
        "sample_data", "watch_and_evaluate")

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ loads them
    from jaxdet.api import (  # noqa: F401
        CheckpointError,
        ConfigError,
        CorruptImageError,
        Detection,
        Detections,
        Detector,
        ExportError,
        Labels,
        Segmentation,
        Segmenter,
        TrainResult,
        VolumeReadError,
        WorkdirMismatch,
        ZooDownloadError,
        download_zoo_model,
        fine_tune,
        fit,
        load,
        sample_data,
        watch_and_evaluate,
    )


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("jaxdet.api"), name)
    raise AttributeError(f"module 'jaxdet' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


__all__ = ["__version__", *_API]
