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
class TaskFamily:
    """How a ``model.type`` is built: ``build(config, seed=...) -> Task``;
    ``fingerprint_fields(config) -> dict`` (JSON-able; hashed into the checkpoint
    fingerprint); ``summary(config, **options) -> dict`` and ``format_summary(dict) -> str``
    (``jaxdet summary``: parameters, FLOPs, the family's own rows); ``pads_raw_pixels``: the
    resizer's padding holds black pixels that are normalized with the image (TF's CenterNet
    resizes then normalizes) instead of zeros after normalization (TF's SSD)."""

    build: Callable[..., Task]
    fingerprint_fields: Callable[[S.Config], dict[str, Any]]
    summary: Callable[..., dict]
    format_summary: Callable[[dict], str]
    pads_raw_pixels: bool = False


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
                             unet3d.unet3d_summary, unet3d.format_unet3d_summary),
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


__all__ = ["BatchField", "BatchLayout", "Task", "TaskFamily", "build_task", "family",
           "fingerprint_fields"]
