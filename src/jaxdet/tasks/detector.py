"""What the box detectors (the SSD, CenterNet and Faster R-CNN families) share: the box train
batch, the evaluation of boxes, and the image input pipeline."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jaxdet.config import schema as S
from jaxdet.data import build as data_build
from jaxdet.data.batch_layout import BatchField, BatchLayout
from jaxdet.data.stats import crowd_rule, dataset_stats, format_dataset_stats
from jaxdet.eval.runner import evaluate_and_write
from jaxdet.models.task import PyTree, Task
from jaxdet.tasks.data_pipeline import DataPipeline


def box_batch_layout(input_size: tuple[int, int], max_boxes: int) -> BatchLayout:
    """The train batch of a box detector: images f32[H, W, 3] (height split over the mesh's
    ``spatial`` axis), boxes f32[N, 4] (normalized yxyx), classes i32[N], valid and ignore
    bool[N] (N = ``max_boxes``, the padded ground truth)."""
    n = max_boxes
    return {
        "images": BatchField((*input_size, 3), jnp.float32, spatial_axis=0),
        "boxes": BatchField((n, 4), jnp.float32),
        "classes": BatchField((n,), jnp.int32),
        "valid": BatchField((n,), jnp.bool_),
        "ignore": BatchField((n,), jnp.bool_),
    }


def evaluate_boxes(task: Task, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                   loader_factory: Any, out_dir: Any, **options: Any) -> dict:
    """The detection evaluators (COCO and / or Pascal VOC box metrics, the sample grid;
    ``eval.runner.evaluate_and_write``, ``options`` as it takes them) for a task whose
    predict returns boxes, scores, classes and num_detections."""
    return evaluate_and_write(task, predict, params, batch_stats, source, loader_factory,
                              out_dir, **options)


def image_pipeline() -> DataPipeline:
    """The detectors' images: ``data.build.build_source`` / ``build_train_loader`` and
    ``data.stats``."""

    def build_source(config: S.Config, workdir: Any, split: str):
        return data_build.build_source(getattr(config.data, split), workdir,
                                       num_classes=config.model.num_classes,
                                       field=f"data.{split}",
                                       keypoints=data_build.keypoint_specs(config),
                                       masks=data_build.load_masks(config))

    def describe(config: S.Config, source, split: str) -> str:
        return format_dataset_stats(dataset_stats(source), f"data.{split}",
                                    crowd_rule(config.data.crowd_boxes, split))

    return DataPipeline(build_source, data_build.build_train_loader, describe)


__all__ = ["box_batch_layout", "evaluate_boxes", "image_pipeline"]
