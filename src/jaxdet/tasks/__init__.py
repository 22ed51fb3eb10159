"""Tasks: one folder per meta-architecture, one registry line each.

``resolve(config)`` looks ``config.model.type`` up once and returns a ``Family``: the
family's builders bound to the config (the task, the input pipeline's last steps as the family
pads its images, the checkpoint fingerprint, the TF OD API and torch checkpoint name maps). A
job resolves its config once and passes the ``Family`` down; nothing else in jaxdet branches
on the model type. ``build_task(config)`` and the other module functions do the same for one
call (tests, notebooks).

Modules: ``family`` (``TaskFamily``, the registry's record; ``Family``, a resolved one),
``data_pipeline`` (``DataPipeline``), ``detector`` (what the box detectors share: the box
batch, box evaluation, the image pipeline), ``weights`` (weights from TF, torch and jaxdet
checkpoints into a family's model); one folder per family: ``ssd`` (SSD, RetinaNet,
EfficientDet), ``center_net``, ``faster_rcnn`` (Faster and Mask R-CNN), ``unet3d``.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
from pydantic import BaseModel

from jaxdet.config import schema as S
from jaxdet.config.families import register_model_config, unregister_model_config
from jaxdet.data.normalize import PixelNormalizer
from jaxdet.interop.tfod_names import Target
from jaxdet.models.task import Task
from jaxdet.tasks.center_net import build as center_net
from jaxdet.tasks.center_net import tf_names as center_net_tf
from jaxdet.tasks.data_pipeline import DataPipeline
from jaxdet.tasks.detector import image_pipeline
from jaxdet.tasks.family import Family, TaskFamily
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


def resolve(config: S.Config | Family) -> Family:
    """``config``'s :class:`Family`: its ``model.type`` looked up once, for a whole job (a
    ``Family`` is returned as it is, so a function may take either).

    Raises:
      ValueError: no family has that ``model.type`` (naming the ones there are)."""
    return config if isinstance(config, Family) else Family(config, family(config))


def build_task(config: S.Config, *, seed: int | None = None) -> Task:
    """``resolve(config).build_task(seed=seed)``: the task of ``config`` (``seed``: default
    ``train.seed``)."""
    return resolve(config).build_task(seed=seed)


def fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes the checkpoint's tensors for ``config``'s family."""
    return resolve(config).fingerprint_fields()


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """``resolve(config).tf_name_map(model)`` (:meth:`Family.tf_name_map`)."""
    return resolve(config).tf_name_map(model)


def transforms_of(config: S.Config, *, training: bool, normalize: bool = True) -> list:
    """``resolve(config).transforms(...)`` (:meth:`Family.transforms`)."""
    return resolve(config).transforms(training=training, normalize=normalize)


def build_normalizer(config: S.Config) -> PixelNormalizer | None:
    """``resolve(config).normalizer()`` (:meth:`Family.normalizer`)."""
    return resolve(config).normalizer()


__all__ = ["DataPipeline", "Family", "Task", "TaskFamily", "build_normalizer", "build_task",
           "family", "resolve",
           "register_family", "unregister_family",
           "fingerprint_fields", "image_pipeline", "tf_name_map",
           "transforms_of"]
