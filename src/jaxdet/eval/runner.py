"""Run a detector over an eval loader and score it with the COCO evaluator."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxdet.eval.coco_eval import CocoEvaluator
from jaxdet.train.task import DetectionTask

PyTree = Any


def make_predict_fn(task: DetectionTask) -> Callable:
    """``predict(params, batch_stats, images, image_info) -> detections``, jitted once."""
    return jax.jit(task.predict)


def run_detection(
    predict: Callable,
    params: PyTree,
    batch_stats: PyTree,
    batches: Iterable[dict],
    evaluator: CocoEvaluator,
    *,
    max_images: int | None = None,
    total_batches: int | None = None,
    progress: bool = True,
) -> int:
    """Feed every real (mask=True) image's detections to ``evaluator``; returns images seen."""
    seen = 0
    bar = tqdm(batches, total=total_batches, desc="eval", unit="batch", disable=not progress,
               leave=False)
    for batch in bar:
        det = jax.device_get(predict(params, batch_stats, batch["images"], batch["image_info"]))
        keep = np.asarray(batch["mask"], bool)
        if max_images is not None:
            keep &= np.arange(len(keep)) < max_images - seen
        if keep.any():
            evaluator.add_detections(
                np.asarray(batch["image_id"])[keep],
                det["boxes"][keep],
                det["scores"][keep],
                det["classes"][keep],
                det["num_detections"][keep],
            )
        seen += int(keep.sum())
        if max_images is not None and seen >= max_images:
            break
    return seen


def evaluate_and_write(
    task: DetectionTask,
    predict: Callable,
    params: PyTree,
    batch_stats: PyTree,
    source,
    loader_factory: Callable[[], Iterable[dict]],
    out_dir: str | Path,
    *,
    batch_size: int,
    max_images: int | None = None,
    extra: dict | None = None,
    progress: bool = True,
) -> dict:
    """Detect on ``source``, write detections.json + metrics.json in ``out_dir``, return metrics."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ground_truth = source.ground_truth()
    if max_images is not None:
        ground_truth = _first_images(ground_truth, source, max_images)
    evaluator = CocoEvaluator(ground_truth, source.category_ids, source.category_names)
    n = len(source) if max_images is None else min(len(source), max_images)
    seen = run_detection(
        predict,
        params,
        batch_stats,
        loader_factory(),
        evaluator,
        max_images=max_images,
        total_batches=-(-n // batch_size),
        progress=progress,
    )
    metrics = evaluator.evaluate()
    metrics["num_images"] = seen
    evaluator.write_detections(out_dir / "detections.json")
    evaluator.write_metrics(out_dir / "metrics.json", extra=extra)
    return metrics


def _first_images(ground_truth: dict, source, max_images: int) -> dict:
    """Restrict a COCO ground-truth dict to the first ``max_images`` images of the source."""
    ids = {int(source[i]["image_id"]) for i in range(min(len(source), max_images))}
    gt = dict(ground_truth)
    gt["images"] = [im for im in ground_truth["images"] if int(im["id"]) in ids]
    gt["annotations"] = [a for a in ground_truth["annotations"] if int(a["image_id"]) in ids]
    return gt


def format_metrics(metrics: dict) -> str:
    """A small aligned table of the headline COCO numbers and per-class AP."""
    keys = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100"]
    lines = ["  ".join(f"{k:>6}" for k in keys), "  ".join(f"{metrics[k]:6.3f}" for k in keys)]
    per_class = metrics.get("per_class_AP") or {}
    if per_class:
        cells = [
            f"{name}: {'n/a' if ap is None else f'{ap:.3f}'}" for name, ap in per_class.items()
        ]
        lines.append("per-class AP  " + ", ".join(cells))
    return "\n".join(lines)

