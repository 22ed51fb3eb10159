"""Tasks: one folder per meta-architecture, one registry line each (see ``tasks.base``).

``build_task(config)`` dispatches on ``config.model.type``; ``fingerprint_fields(config)``
gives what fixes a checkpoint's tensors for that family. Nothing else in jaxdet branches on the
model type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxdet.config import schema as S
from jaxdet.tasks.base import BatchField, BatchLayout, Task


@dataclass(frozen=True)
class DataPipeline:
    """How a family's data reaches the train step (``runs`` calls these; the detectors share
    :func:`image_pipeline`): ``build_source(config, workdir, split) -> source`` (``split``:
    "train" / "eval", ``config.data.<split>``); ``build_train_loader(config, source, *,
    layout) -> loader`` (an infinite iterator of host batches with ``get_state`` /
    ``set_state``, checked against the task's batch ``layout``); ``describe(source, title)
    -> str`` (one INFO summary of a dataset)."""

    build_source: Callable[..., Any]
    build_train_loader: Callable[..., Any]
    describe: Callable[[Any, str], str]


def image_pipeline() -> DataPipeline:
    """The detectors' images: ``builders.build_source`` / ``build_train_loader`` and
    ``data.stats``."""
    from jaxdet import builders
    from jaxdet.data.stats import dataset_stats, format_dataset_stats

    def build_source(config: S.Config, workdir: Any, split: str):
        return builders.build_source(getattr(config.data, split), workdir,
                                     num_classes=config.model.num_classes,
                                     field=f"data.{split}",
                                     keypoints=builders.keypoint_specs(config),
                                     masks=builders.load_masks(config))

    return DataPipeline(build_source, builders.build_train_loader,
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
    ``jaxdet predict`` (default ``predict.predict_images``)."""

    build: Callable[..., Task]
    fingerprint_fields: Callable[[S.Config], dict[str, Any]]
    summary: Callable[..., dict]
    format_summary: Callable[[dict], str]
    pads_raw_pixels: bool = False
    data: Callable[[], DataPipeline] = image_pipeline
    predict_files: Callable[..., Any] | None = None


def _families() -> dict[str, TaskFamily]:
    from jaxdet import summary
    from jaxdet.tasks import ssd
    from jaxdet.tasks.center_net import build as center_net
    from jaxdet.tasks.faster_rcnn import build as faster_rcnn
    from jaxdet.tasks.unet3d import build as unet3d

    return {
        "ssd": TaskFamily(ssd.build_ssd_task, ssd.ssd_fingerprint_fields,
                          summary.model_summary, summary.format_summary),
        "center_net": TaskFamily(center_net.build_center_net_task,
                                 center_net.center_net_fingerprint_fields,
                                 center_net.center_net_summary,
                                 center_net.format_center_net_summary, pads_raw_pixels=True),
        "faster_rcnn": TaskFamily(faster_rcnn.build_faster_rcnn_task,
                                  faster_rcnn.faster_rcnn_fingerprint_fields,
                                  faster_rcnn.faster_rcnn_summary,
                                  faster_rcnn.format_faster_rcnn_summary, pads_raw_pixels=True),
        "unet3d": TaskFamily(unet3d.build_unet3d_task, unet3d.unet3d_fingerprint_fields,
                             unet3d.unet3d_summary, unet3d.format_unet3d_summary,
                             data=unet3d.volume_pipeline, predict_files=unet3d.predict_volumes),
    }


def family(config: S.Config) -> TaskFamily:
    """The :class:`TaskFamily` of ``config.model.type``."""
    families = _families()
    kind = config.model.type
    if kind not in families:
        raise ValueError(f"model.type={kind!r} has no task; allowed: {', '.join(families)}")
    return families[kind]


def build_task(config: S.Config, *, seed: int | None = None) -> Task:
    """The task of ``config`` (``seed``: default ``train.seed``)."""
    return family(config).build(config, seed=config.train.seed if seed is None else seed)


def fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes the checkpoint's tensors for ``config``'s family."""
    return family(config).fingerprint_fields(config)


__all__ = ["BatchField", "BatchLayout", "DataPipeline", "Task", "TaskFamily", "build_task",
           "family", "fingerprint_fields", "image_pipeline"]
