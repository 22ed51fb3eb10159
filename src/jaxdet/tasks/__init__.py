"""Tasks: one folder per meta-architecture, one registry line each (see ``tasks.base``).

``build_task(config)`` dispatches on ``config.model.type``; ``fingerprint_fields(config)``
gives what fixes a checkpoint's tensors for that family; ``transforms_of`` and
``build_normalizer`` build the input pipeline's last steps as the family pads its images;
``tf_name_map`` and ``torch_detector_map`` give the family's checkpoint name maps (TF OD API
checkpoints, whole-detector torch state dicts). Nothing else in jaxdet branches on the model
type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flax import nnx
from pydantic import BaseModel

from jaxdet.config import schema as S
from jaxdet.config.families import register_model_config, unregister_model_config
from jaxdet.data import build as data_build
from jaxdet.data.normalize import PixelNormalizer
from jaxdet.data.stats import dataset_stats, format_dataset_stats
from jaxdet.interop.tfod_names import Target, UnmappedModelError
from jaxdet.interop.torch_names import TorchDetectorMap
from jaxdet.models import build as models_build
from jaxdet.tasks.base import DataPipeline, Task
from jaxdet.tasks.center_net import build as center_net
from jaxdet.tasks.center_net import tf_names as center_net_tf
from jaxdet.tasks.faster_rcnn import build as faster_rcnn
from jaxdet.tasks.faster_rcnn import tf_names as faster_rcnn_tf
from jaxdet.tasks.ssd import build as ssd
from jaxdet.tasks.ssd import summary as ssd_summary
from jaxdet.tasks.ssd import tf_names as ssd_tf
from jaxdet.tasks.ssd.torch_detectors import torch_detector_map as ssd_torch_detector_map
from jaxdet.tasks.unet3d import build as unet3d
from jaxdet.tasks.unet3d.data import volume_pipeline
from jaxdet.tasks.unet3d.predict import predict_volumes
from jaxdet.tasks.unet3d.segmenter import Segmenter


def image_pipeline() -> DataPipeline:
    """The detectors' images: ``data.build.build_source`` / ``build_train_loader`` and
    ``data.stats``."""

    def build_source(config: S.Config, workdir: Any, split: str):
        return data_build.build_source(getattr(config.data, split), workdir,
                                       num_classes=config.model.num_classes,
                                       field=f"data.{split}",
                                       keypoints=data_build.keypoint_specs(config),
                                       masks=data_build.load_masks(config))

    return DataPipeline(build_source, data_build.build_train_loader,
                        lambda source, title: format_dataset_stats(dataset_stats(source), title))


@dataclass(frozen=True)
class TaskFamily:
    """How a ``model.type`` is built: ``build(config, seed=...) -> Task``;
    ``fingerprint_fields(config) -> dict`` (JSON-able; hashed into the checkpoint
    fingerprint); ``summary(config, **options) -> dict`` and ``format_summary(dict) -> str``
    (``jaxdet summary``: parameters, FLOPs, the family's own rows); ``pads_raw_pixels``: the
    resizer's padding holds black pixels that are normalized with the image (TF's CenterNet
    resizes then normalizes) instead of zeros after normalization (TF's SSD); ``data``: a
    :class:`DataPipeline` factory (default :func:`image_pipeline`); ``predict_files``:
    ``jaxdet predict`` (default ``predict.predict_images``); ``predictor(config, task,
    variables, step=, batch_size=, evaluator=, weights=)`` (``weights``: where they came
    from, in words): what ``jaxdet.load`` returns for a family
    whose inputs are not images (default: ``app.detector.Detector``, for images);
    ``tf_name_map(model, config) -> {tf object path: (jaxdet path, transform)}``: where each
    tensor of a TF OD API checkpoint goes in the family's model (None: no TF checkpoint fits
    the family);
    ``torch_detector_map(model, state, source) -> interop.torch_names.TorchDetectorMap |
    None``: the family's map of a whole detector's torch state dict (``source`` names the
    file), None for a file it does not read (None: it reads none; a backbone alone is
    ``weights``' shared path)."""

    build: Callable[..., Task]
    fingerprint_fields: Callable[[S.Config], dict[str, Any]]
    summary: Callable[..., dict]
    format_summary: Callable[[dict], str]
    pads_raw_pixels: bool = False
    data: Callable[[], DataPipeline] = image_pipeline
    predict_files: Callable[..., Any] | None = None
    predictor: Callable[..., Any] | None = None
    tf_name_map: Callable[[nnx.Module, S.Config], dict[str, Target]] | None = None
    torch_detector_map: Callable[[nnx.Module, Mapping[str, np.ndarray], str],
                                 TorchDetectorMap | None] | None = None


def _shipped_families() -> dict[str, TaskFamily]:
    return {
        "ssd": TaskFamily(ssd.build_ssd_task, ssd.ssd_fingerprint_fields,
                          ssd_summary.model_summary, ssd_summary.format_summary,
                          tf_name_map=ssd_tf.tf_name_map,
                          torch_detector_map=ssd_torch_detector_map),
        "center_net": TaskFamily(center_net.build_center_net_task,
                                 center_net.center_net_fingerprint_fields,
                                 center_net.center_net_summary,
                                 center_net.format_center_net_summary, pads_raw_pixels=True,
                                 tf_name_map=center_net_tf.tf_name_map),
        "faster_rcnn": TaskFamily(faster_rcnn.build_faster_rcnn_task,
                                  faster_rcnn.faster_rcnn_fingerprint_fields,
                                  faster_rcnn.faster_rcnn_summary,
                                  faster_rcnn.format_faster_rcnn_summary, pads_raw_pixels=True,
                                  tf_name_map=faster_rcnn_tf.tf_name_map),
        "unet3d": TaskFamily(unet3d.build_unet3d_task, unet3d.unet3d_fingerprint_fields,
                             unet3d.unet3d_summary, unet3d.format_unet3d_summary,
                             data=volume_pipeline, predict_files=predict_volumes,
                             predictor=Segmenter),
    }


_REGISTERED: dict[str, TaskFamily] = {}


def _families() -> dict[str, TaskFamily]:
    return {**_shipped_families(), **_REGISTERED}


def register_family(family: TaskFamily, config: type[BaseModel], *,
                    data_type: str = "images") -> str:
    """Add a family defined outside jaxdet: ``config`` is its ``model:`` section (a pydantic
    model with ``type: Literal["<name>"]``, registered with ``config.families``), ``family``
    how it builds. From then on configs with that ``model.type`` validate, train, evaluate,
    predict and summarize like the shipped families'. Returns the model type.

    Raises:
      ValueError: the model type is taken."""
    name = register_model_config(config, data_type=data_type)
    _REGISTERED[name] = family
    return name


def unregister_family(name: str) -> None:
    """Undo :func:`register_family` for model type ``name`` (no-op if absent)."""
    _REGISTERED.pop(name, None)
    unregister_model_config(name)


def family(config: S.Config) -> TaskFamily:
    """The :class:`TaskFamily` of ``config.model.type``."""
    families = _families()
    kind = config.model.type
    if kind not in families:
        raise ValueError(f"model.type={kind!r} has no task; allowed: {', '.join(families)}")
    return families[kind]


def build_task(config: S.Config, *, seed: int | None = None) -> Task:
    """The task of ``config`` (``seed``: default ``train.seed``), its model's parameters drawn
    as ``train.initializers`` says where it names them."""
    seed = config.train.seed if seed is None else seed
    task = family(config).build(config, seed=seed)
    if config.train.initializers:
        models_build.apply_initializers(task.model, config.train.initializers, seed)
    return task


def fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes the checkpoint's tensors for ``config``'s family."""
    return family(config).fingerprint_fields(config)


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """``{tf object path: (jaxdet path, transform)}``: where each tensor of a TF OD API
    checkpoint goes in ``model``, built from ``config`` (its family's ``tf_name_map``).

    Raises:
      UnmappedModelError: a family without TF checkpoints (naming ``model.type``), or a model
        part without a map (the message names it)."""
    name_map = family(config).tf_name_map
    if name_map is None:
        raise UnmappedModelError(
            f"model.type={config.model.type!r} has no TF OD API checkpoint name map: its "
            "weights cannot come from a TF checkpoint; train it from scratch or from jaxdet "
            "weights")
    return name_map(model, config)


def torch_detector_map(model: nnx.Module, config: S.Config, state: Mapping[str, np.ndarray],
                       *, source: str) -> TorchDetectorMap | None:
    """The map of a whole detector's torch state dict ``state`` (the file ``source``) onto
    ``model``, built from ``config``, by its family's ``torch_detector_map``; None where the
    family has none or does not read that file."""
    detector_map = family(config).torch_detector_map
    return None if detector_map is None else detector_map(model, state, source)


def transforms_of(config: S.Config, *, training: bool, normalize: bool = True) -> list:
    """``data.build.build_transforms`` of ``config.data`` as ``config``'s family pads."""
    return data_build.build_transforms(config.data, training=training, normalize=normalize,
                                       pads_raw_pixels=family(config).pads_raw_pixels)


def build_normalizer(config: S.Config) -> PixelNormalizer | None:
    """``data.build.pixel_normalizer`` of ``config`` as its family pads (None for volumes)."""
    return data_build.pixel_normalizer(config, pads_raw_pixels=family(config).pads_raw_pixels)


__all__ = ["DataPipeline", "Task", "TaskFamily", "build_normalizer", "build_task", "family",
           "register_family", "unregister_family",
           "fingerprint_fields", "image_pipeline", "tf_name_map", "torch_detector_map",
           "transforms_of"]
