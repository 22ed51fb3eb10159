"""Run a detector over an eval loader, score it (COCO and/or Pascal VOC metrics), draw a few
samples."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from PIL import Image
from tqdm import tqdm

from jaxdet.backends import process
from jaxdet.data.decode import CorruptImageError, load_record_image
from jaxdet.eval.coco_eval import CocoEvaluator
from jaxdet.eval.coco_keypoint_eval import CocoKeypointEvaluator
from jaxdet.eval.coco_mask_eval import CocoMaskEvaluator, mask_metrics, paste_box_masks
from jaxdet.eval.visualize import draw_detections, image_grid, resize_masks
from jaxdet.eval.voc_eval import VocEvaluator, class_ap_key, map_key
from jaxdet.models.task import Task

PyTree = Any
log = logging.getLogger("jaxdet")

SAMPLES_SCORE_THRESHOLD = 0.3  # predictions drawn in samples.png ...
SAMPLES_TOP_K = 5  # ... or the top-k when none reaches the threshold
SAMPLES_CELL_SIZE = 320
METRICS_SETS = ("coco_detection_metrics", "pascal_voc_detection_metrics", "coco_mask_metrics")



def predict_callable(task: Task, *, allow_tf32: bool = True,
                     normalizer: Callable | None = None) -> Callable:
    """``task.predict``, or with ``allow_tf32=False`` a wrapper that traces it under
    ``jax.default_matmul_precision("highest")`` (full float32 convolutions and matmuls on GPUs
    that would use TensorFloat-32). ``normalizer(images, image_info)`` (``data.normalize``)
    turns raw pixels into the network's input first. Not jitted: for ``jax.jit`` /
    ``parallel.mesh_predict``."""
    if allow_tf32 and normalizer is None:
        return task.predict

    def predict(params, batch_stats, images, image_info):
        if normalizer is not None:
            images = normalizer(images, image_info)
        if allow_tf32:
            return task.predict(params, batch_stats, images, image_info)
        with jax.default_matmul_precision("highest"):
            return task.predict(params, batch_stats, images, image_info)

    return predict


def make_predict_fn(task: Task, *, allow_tf32: bool = True,
                    compiler_options: dict[str, str] | None = None,
                    normalizer: Callable | None = None) -> Callable:
    """``predict(params, batch_stats, images, image_info) -> detections``, jitted once
    (``allow_tf32``, ``normalizer``: see :func:`predict_callable`; ``compiler_options`` go to
    ``jax.jit``, e.g. ``train.build.predict_compiler_options(config)``)."""
    return jax.jit(predict_callable(task, allow_tf32=allow_tf32, normalizer=normalizer),
                   compiler_options=compiler_options)


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
    """Feed every real (mask=True) image's detections to ``evaluator``; returns images seen.

    Detections with ``keypoints`` pass them (and ``keypoint_scores``) on; detections with
    ``masks`` (``[B, D, mh, mw]`` per-box mask probabilities, TF's ``detection_masks``) pass
    them on with ``image_sizes``, each image's original (height, width) from ``image_info``.
    """
    seen = 0
    show_bar = progress and process.draws_progress_bars()  # a log file: one line at the end
    started = time.perf_counter()
    bar = tqdm(batches, total=total_batches, desc="eval", unit="batch", disable=not show_bar,
               leave=False)
    for batch in bar:
        det = jax.device_get(predict(params, batch_stats, batch["images"], batch["image_info"]))
        keep = np.asarray(batch["mask"], bool)
        if max_images is not None:
            keep &= np.arange(len(keep)) < max_images - seen
        if keep.any():
            extra = ({"keypoints": det["keypoints"][keep],
                      "keypoint_scores": det["keypoint_scores"][keep]}
                     if "keypoints" in det else {})
            if "masks" in det:
                extra["masks"] = det["masks"][keep]
                extra["image_sizes"] = np.asarray(batch["image_info"])[keep][:, :2]
            evaluator.add_detections(
                np.asarray(batch["image_id"])[keep],
                det["boxes"][keep],
                det["scores"][keep],
                det["classes"][keep],
                det["num_detections"][keep],
                **extra,
            )
        seen += int(keep.sum())
        if max_images is not None and seen >= max_images:
            break
    if not show_bar:
        log.info("eval: detections of %d images in %.1f s", seen, time.perf_counter() - started)
    return seen


def evaluate_and_write(
    task: Task,
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
    num_visualizations: int = 0,
    metrics_set: Sequence[str] = ("coco_detection_metrics",),
    keypoint_tasks: Sequence[KeypointEval] = (),
    on_images: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> dict:
    """Detect on ``source``, write detections.json + metrics.json in ``out_dir``, return metrics.

    ``metrics_set`` (TF OD API names) picks the metrics: ``coco_detection_metrics`` (the
    12 COCO stats ``AP`` ... ``ARl`` and ``per_class_AP``) and/or
    ``pascal_voc_detection_metrics`` (``PascalBoxes_Precision/mAP@0.5IOU`` and per class
    ``PascalBoxes_PerformanceByCategory/AP@0.5IOU/<name>``, see ``eval.voc_eval``).
    With ``num_visualizations > 0`` also writes ``samples.png`` (see :func:`write_samples`)
    for the first ``num_visualizations`` images of the source, and passes the same pictures
    to ``on_images`` (:func:`side_by_side`: ``eval_side_by_side_<k>`` -> uint8 [H, W, 3],
    ground truth left, predictions right; the caller logs them to TensorBoard).

    ``keypoint_tasks`` (a keypoint model's; the source must carry the keypoint layout): each
    is scored by COCO keypoint AP (OKS with its sigmas, ``eval.coco_keypoint_eval``) into
    ``keypoints/<task>/AP`` ... ``ARl``, with ``keypoint_AP`` the mean AP of the tasks; its
    detections go to ``keypoint_detections_<task>.json``.

    ``coco_mask_metrics`` (a model whose detections carry ``masks``; the source's ground truth
    needs a ``segmentation`` per annotation) scores the masks, pasted into each original image
    and binarized at 0.5 (``eval.coco_mask_eval``), by COCO ``segm`` AP into ``segm/AP`` ...
    ``segm/ARl``, ``segm/per_class_AP`` and the headline ``mask_AP``; the masks go to
    ``mask_detections.json`` (compressed RLE). The sample grid draws masks where the records
    or the detections have them.
    """
    unknown = [m for m in metrics_set if m not in METRICS_SETS]
    if unknown or not metrics_set:
        raise ValueError(
            f"metrics_set {list(metrics_set)}: need one or more of {', '.join(METRICS_SETS)}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ground_truth = source.ground_truth()
    if max_images is not None:
        ground_truth = _first_images(ground_truth, source, max_images)
    # The COCO evaluator also keeps the detections for detections.json and writes metrics.json.
    evaluator = CocoEvaluator(ground_truth, source.category_ids, source.category_names)
    evaluators = [evaluator]
    if "pascal_voc_detection_metrics" in metrics_set:
        evaluators.append(
            VocEvaluator(ground_truth, source.category_ids, source.category_names)
        )
    n = len(source) if max_images is None else min(len(source), max_images)
    shown = [int(source[i]["image_id"]) for i in range(min(n, max(num_visualizations, 0)))]
    layout = getattr(source, "keypoint_layout", None)
    keypoint_evaluators = _keypoint_evaluators(keypoint_tasks, ground_truth, source, layout)
    mask_evaluator = (CocoMaskEvaluator(ground_truth, source.category_ids,
                                        source.category_names)
                      if "coco_mask_metrics" in metrics_set else None)
    recorder = _KeepDetections(evaluators, shown, len(source.category_ids),
                               [(e, slots) for _, e, slots in keypoint_evaluators],
                               mask_evaluator=mask_evaluator)
    seen = run_detection(
        predict,
        params,
        batch_stats,
        loader_factory(),
        recorder,
        max_images=max_images,
        total_batches=-(-n // batch_size),
        progress=progress,
    )
    if recorder.dropped:
        log.warning("%d detections of classes beyond the dataset's %d were left out of the "
                    "evaluation (the model predicts more classes than the dataset has)",
                    recorder.dropped, len(source.category_ids))
    metrics = evaluator.evaluate() if "coco_detection_metrics" in metrics_set else {}
    for other in evaluators[1:]:
        metrics.update(other.evaluate())
    task_aps = []
    for name, kp_evaluator, _ in keypoint_evaluators:
        stats = kp_evaluator.evaluate()
        metrics.update({f"keypoints/{name}/{k}": v for k, v in stats.items()})
        task_aps.append(stats["AP"])
        kp_evaluator.write_detections(out_dir / f"keypoint_detections_{name}.json")
    if task_aps:
        metrics["keypoint_AP"] = float(np.mean(task_aps))
    if mask_evaluator is not None:
        metrics.update(mask_metrics(mask_evaluator.evaluate()))
        mask_evaluator.write_detections(out_dir / "mask_detections.json")
    evaluator.results = dict(metrics)  # what write_metrics writes
    metrics["num_images"] = seen
    evaluator.write_detections(out_dir / "detections.json")
    evaluator.write_metrics(out_dir / "metrics.json", extra=extra)
    if shown:  # drawn once: samples.png, and the same panels for on_images
        rows, titles = draw_samples(source, recorder.kept, source.category_names, len(shown),
                                    keypoint_layout=layout if keypoint_evaluators else None,
                                    masks=recorder.kept_masks)
        if rows:
            save_sample_grid(out_dir / "samples.png", rows, titles)
            if on_images is not None:
                on_images(side_by_side(rows))
    return metrics


@dataclasses.dataclass(frozen=True)
class KeypointEval:
    """What the evaluator needs of a keypoint task: its ``name``, the ``class_name`` of its
    class in the dataset and the OKS ``sigmas`` of its keypoints."""

    name: str
    class_name: str
    sigmas: tuple[float, ...]


def _keypoint_evaluators(tasks: Sequence[KeypointEval], ground_truth: dict, source, layout
                         ) -> list[tuple[str, CocoKeypointEvaluator, list[int]]]:
    """(task name, its evaluator, its slots in the layout's K) per keypoint task."""
    if not tasks:
        return []
    if not layout:
        raise ValueError(f"the model has keypoint tasks but the eval data {source!r} carries no "
                         "keypoints (build its source with the model's keypoint tasks)")
    out = []
    for task in tasks:
        group = next((g for g in layout.groups if g.class_name == task.class_name), None)
        if group is None:
            raise ValueError(f"keypoint task {task.name!r}: the eval data has no keypoints of "
                             f"class {task.class_name!r}")
        evaluator = CocoKeypointEvaluator(
            ground_truth, source.category_ids[group.class_index], task.sigmas, group.names,
            class_index=group.class_index)
        out.append((task.name, evaluator, list(group.slots)))
    return out


def _kept_first(classes, num_detections, num_classes: int):
    """(order [n, D] that puts the detections of class index < ``num_classes`` first in each
    row, or None when none is left out; their count per row [n]; the number left out)."""
    classes = np.asarray(classes)
    num = np.asarray(num_detections).astype(np.int64)
    d = classes.shape[1]
    valid = np.arange(d)[None, :] < np.clip(num, 0, d)[:, None]
    keep = valid & (np.rint(classes).astype(np.int64) < num_classes)
    dropped = int((valid & ~keep).sum())
    if not dropped:
        return None, num, 0
    return np.argsort(~keep, axis=1, kind="stable"), keep.sum(axis=1), dropped


def _reorder(a, order):
    """Rows of ``a`` [n, D, ...] in ``order`` [n, D] (unchanged for order None)."""
    a = np.asarray(a)
    if order is None:
        return a
    return np.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1)


def drop_classes_from(boxes, scores, classes, num_detections, num_classes: int):
    """Leave out detections of class index >= ``num_classes`` (a model with more classes than
    the dataset, e.g. a 90-class zoo model on a 3-class dataset), keeping the rest first in
    each row. Arrays ``[n, D, 4]``, ``[n, D]``, ``[n, D]``, ``[n]``; returns the same four and
    the number left out."""
    order, num, dropped = _kept_first(classes, num_detections, num_classes)
    return (_reorder(boxes, order), _reorder(scores, order), _reorder(classes, order), num,
            dropped)


class _KeepDetections:
    """Passes detections on to the evaluators and keeps those of a few images (for drawing).
    Detections of a class the dataset does not have are left out (counted in ``dropped``).

    Keypoints (``[n, D, K, 2]`` and scores ``[n, D, K]``, K the layout's slots), when given,
    go to the ``keypoint_evaluators``: ``(evaluator, slots)`` pairs, each evaluator fed its
    task's slots.

    Masks (``[n, D, mh, mw]`` per-box probabilities, with ``image_sizes`` [n, 2], each row's
    original (height, width)), when given, are pasted into the original images
    (:func:`~jaxdet.eval.coco_mask_eval.paste_box_masks`, binarized at 0.5) for the
    ``mask_evaluator`` and the kept images (``kept_masks``: image id -> uint8 [k, H, W])."""

    def __init__(self, evaluators: Sequence, image_ids: Iterable[int], num_classes: int,
                 keypoint_evaluators: Sequence = (), *,
                 mask_evaluator: CocoMaskEvaluator | None = None):
        self.evaluators = list(evaluators)
        self.keypoint_evaluators = list(keypoint_evaluators)
        self.mask_evaluator = mask_evaluator
        self.wanted = set(image_ids)
        self.kept: dict[int, tuple[np.ndarray, ...]] = {}
        self.kept_masks: dict[int, np.ndarray] = {}
        self.num_classes = num_classes
        self.dropped = 0

    def _add_masks(self, image_ids, boxes, scores, classes, num_detections, masks,
                   image_sizes) -> None:
        masks = np.asarray(masks)
        sizes = np.asarray(image_sizes).reshape(-1, 2)
        for row, image_id in enumerate(np.asarray(image_ids).reshape(-1).tolist()):
            if image_id < 0 or (self.mask_evaluator is None and image_id not in self.wanted):
                continue
            k = int(num_detections[row])
            height, width = (int(round(float(v))) for v in sizes[row])
            normalized = np.asarray(boxes[row][:k], np.float64) / np.array([height, width] * 2)
            pasted = paste_box_masks(masks[row][:k], normalized, height, width)
            if self.mask_evaluator is not None:
                self.mask_evaluator.add_image(image_id, pasted, np.asarray(scores[row][:k]),
                                              np.asarray(classes[row][:k]))
            if image_id in self.wanted:
                self.kept_masks[image_id] = pasted

    def add_detections(self, image_ids, boxes, scores, classes, num_detections,
                       keypoints=None, keypoint_scores=None, masks=None,
                       image_sizes=None) -> None:
        if masks is None and self.mask_evaluator is not None:
            raise ValueError("metrics_set has coco_mask_metrics but the model's detections "
                             "carry no masks")
        order, num_detections, dropped = _kept_first(classes, num_detections,
                                                     self.num_classes)
        boxes, scores, classes = (_reorder(a, order) for a in (boxes, scores, classes))
        self.dropped += dropped
        for evaluator in self.evaluators:
            evaluator.add_detections(image_ids, boxes, scores, classes, num_detections)
        if keypoints is not None:
            keypoints, keypoint_scores = _reorder(keypoints, order), _reorder(keypoint_scores,
                                                                              order)
            for evaluator, slots in self.keypoint_evaluators:
                evaluator.add_detections(image_ids, boxes, scores, classes,
                                         keypoints[:, :, slots], keypoint_scores[:, :, slots],
                                         num_detections)
        if masks is not None:
            self._add_masks(image_ids, boxes, scores, classes, num_detections,
                            _reorder(masks, order), image_sizes)
        for row, image_id in enumerate(np.asarray(image_ids).reshape(-1).tolist()):
            if image_id in self.wanted:
                k = int(num_detections[row])
                kept = [np.asarray(boxes[row][:k]), np.asarray(scores[row][:k]),
                        np.asarray(classes[row][:k])]
                if keypoints is not None:
                    kept += [keypoints[row][:k], keypoint_scores[row][:k]]
                self.kept[image_id] = tuple(kept)


def _fit(image: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale an image so its longer side is ``size`` (labels are drawn at the size they are
    shown); returns (scaled image, [4] factors that map its pixel yxyx boxes alike)."""
    height, width = image.shape[:2]
    scale = size / max(height, width)
    new_h, new_w = max(1, round(height * scale)), max(1, round(width * scale))
    resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BILINEAR))
    return resized, np.array([new_h / height, new_w / width] * 2, np.float64)


def write_samples(path: str | Path, source, detections: dict[int, tuple[np.ndarray, ...]],
                  class_names: list[str], num_images: int, **options) -> Path | None:
    """Writes a PNG grid: per image, ground truth (left) next to predictions (right).
    Arguments and ``options``: :func:`draw_samples`. Returns ``path``, or None when no image
    could be drawn."""
    rows, titles = draw_samples(source, detections, class_names, num_images, **options)
    return save_sample_grid(path, rows, titles) if rows else None


def save_sample_grid(path: str | Path, rows: list[list[Image.Image]], titles: list[str]
                     ) -> Path:
    """Saves the panels of :func:`draw_samples` as one PNG grid (``samples.png``), a row per
    image with its title; cells as large as the largest panel (no empty bands for
    landscape-only sets)."""
    cell = (max(im.width for row in rows for im in row),
            max(im.height for row in rows for im in row))
    path = Path(path)
    image_grid(rows, titles, cell).save(path)
    return path


def side_by_side(rows: list[list[Image.Image]]) -> dict[str, np.ndarray]:
    """The panels of :func:`draw_samples` as TensorBoard images, the TF OD API's evaluation
    pictures: ``eval_side_by_side_<k>`` -> uint8 [H, 2 W, 3], the k-th drawn image's ground
    truth (left) joined to its predictions (right), as in ``samples.png``."""
    return {f"eval_side_by_side_{k}": np.concatenate(
        [np.asarray(panel.convert("RGB"), np.uint8) for panel in row], axis=1)
        for k, row in enumerate(rows)}


def draw_samples(
    source,
    detections: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
    class_names: list[str],
    num_images: int,
    *,
    score_threshold: float = SAMPLES_SCORE_THRESHOLD,
    top_k: int = SAMPLES_TOP_K,
    cell_size: int = SAMPLES_CELL_SIZE,
    keypoint_layout=None,
    masks: dict[int, np.ndarray] | None = None,
) -> tuple[list[list[Image.Image]], list[str]]:
    """Draws the panels of ``samples.png``: per image, ground truth (left) and predictions
    (right), both of one size.

    Args:
      source: records ``source[i]`` (image_path, image_id, pixel yxyx boxes, classes).
      detections: image_id -> (boxes [n, 4] original-pixel yxyx, scores [n], classes [n]).
      num_images: the first ``num_images`` records are drawn (unreadable images are left out).
      score_threshold / top_k: predictions with score >= threshold are drawn; when none
        reaches it, the ``top_k`` best (row title says which).
      cell_size: each image is scaled so its longer side is ``cell_size`` pixels; the grid's
        cells are as large as the largest scaled image.
      keypoint_layout: draw keypoints and skeletons too (``data.keypoints.KeypointLayout``):
        the records' labelled ones, and each detection's own group's slots (detections then
        carry ``keypoints`` [n, K, 2] and ``keypoint_scores`` [n, K] after the classes;
        keypoints scoring below ``score_threshold`` are left out).
      masks: image_id -> uint8 [n, H, W] binary masks of its detections (in the order of
        ``detections[image_id]``, in the original image's pixels), drawn translucently in
        the class colours; records carrying masks (``masks`` / ``mask_ref``) get theirs drawn
        on the ground truth.
    Returns:
      (rows: [ground truth, predictions] PIL images per drawn image, titles: one per row);
      empty when no image could be drawn.
    """
    rows, titles = [], []
    for index in range(min(num_images, len(source))):
        record = source[index]
        try:
            image = load_record_image(record)
        except CorruptImageError as e:
            log.warning("samples.png: leaving out image id %s (%s)", record["image_id"], e)
            continue
        height, width = image.shape[:2]
        ann_h, ann_w = record.get("height") or height, record.get("width") or width
        gt_boxes = np.asarray(record["boxes"], np.float64).reshape(-1, 4) * np.array(
            [height / ann_h, width / ann_w] * 2)
        empty = (np.zeros((0, 4)), np.zeros((0,)), np.zeros((0,), np.int64))
        found = detections.get(int(record["image_id"]), empty)
        boxes, scores, classes = found[:3]
        order = np.argsort(-np.asarray(scores), kind="stable")
        keep = order[np.asarray(scores)[order] >= score_threshold]
        shown = f"score >= {score_threshold:g}"
        if keep.size == 0:
            keep, shown = order[:top_k], f"top {top_k}"
        pixels, factor = _fit(image, cell_size)
        gt_boxes = gt_boxes * factor
        pred_boxes = np.asarray(boxes, np.float64).reshape(-1, 4)[keep] * factor
        gt_extra, pred_extra = _ground_truth_masks(record, pixels.shape[:2]), {}
        found_masks = (masks or {}).get(int(record["image_id"]))
        if found_masks is not None and len(found_masks) == len(scores):
            pred_extra["masks"] = resize_masks(np.asarray(found_masks)[keep], pixels.shape[:2])
        if keypoint_layout:
            point_scale = factor[:2] * np.array([height / ann_h, width / ann_w])
            if "keypoints" in record:
                gt_extra.update(keypoints=np.asarray(record["keypoints"]) * point_scale,
                             keypoint_mask=np.asarray(record["keypoint_visibility"]) > 0,
                             edges=keypoint_layout.edges)
            if len(found) > 3:
                pred_cls = np.asarray(classes)[keep]
                pred_extra.update(keypoints=np.asarray(found[3])[keep] * factor[:2],
                               keypoint_mask=keypoint_layout.slot_mask(pred_cls)
                               & (np.asarray(found[4])[keep] >= score_threshold),
                               edges=keypoint_layout.edges)
        rows.append([
            draw_detections(pixels, gt_boxes, record["classes"], None, class_names, **gt_extra),
            draw_detections(pixels, pred_boxes, np.asarray(classes)[keep],
                            np.asarray(scores)[keep], class_names, **pred_extra),
        ])
        titles.append(f"image {record['image_id']}: ground truth | predictions ({shown})")
    return rows, titles


def _ground_truth_masks(record: dict, size: tuple[int, int]) -> dict:
    """``{"masks": [n, H, W]}`` of a record that carries masks (at the drawn ``size``), for
    ``draw_detections``; ``{}`` for one without (or whose masks cannot be read: logged)."""
    if "masks" not in record and "mask_ref" not in record:
        return {}
    from jaxdet.data.masks import load_record_masks  # only sources with masks need it

    try:
        masks = load_record_masks(record)
    except (CorruptImageError, OSError, ValueError) as e:
        log.warning("samples.png: no masks drawn for image id %s (%s)", record["image_id"], e)
        return {}
    if masks is None or len(masks) != len(np.asarray(record["classes"]).reshape(-1)):
        return {}
    return {"masks": resize_masks(masks, size)}


def _first_images(ground_truth: dict, source, max_images: int) -> dict:
    """Restrict a COCO ground-truth dict to the first ``max_images`` images of the source."""
    ids = {int(source[i]["image_id"]) for i in range(min(len(source), max_images))}
    gt = dict(ground_truth)
    gt["images"] = [im for im in ground_truth["images"] if int(im["id"]) in ids]
    gt["annotations"] = [a for a in ground_truth["annotations"] if int(a["image_id"]) in ids]
    return gt


def headline_metrics(metrics: dict) -> str:
    """One line for logs: COCO AP and AP50 and/or the Pascal VOC mAP@0.5, whichever exist."""
    parts = [f"{k} {_fmt(metrics[k])}" for k in ("AP", "AP50") if k in metrics]
    if map_key() in metrics:
        parts.append(f"VOC mAP@0.5 {_fmt(metrics[map_key()])}")
    if "keypoint_AP" in metrics:
        parts.append(f"keypoint AP {_fmt(metrics['keypoint_AP'])}")
    if "mask_AP" in metrics:
        parts.append(f"mask AP {_fmt(metrics['mask_AP'])}")
    if "mean_dice" in metrics:
        parts.append(f"mean Dice {_fmt(metrics['mean_dice'])}")
    return " ".join(parts)


def format_metrics(metrics: dict) -> str:
    """A small aligned table of the headline COCO numbers and per-class AP, then the Pascal
    VOC mAP@0.5 and per-class AP when present; for segmentation, the mean Dice and Dice per
    class."""
    lines = []
    if "mean_dice" in metrics:
        cells = [f"{k.removeprefix('dice/')} {_fmt(v)}" for k, v in metrics.items()
                 if k.startswith("dice/")]
        lines.append(f"mean Dice {_fmt(metrics['mean_dice'])} over {metrics.get('num_cases')} "
                     f"volumes  per class  {', '.join(cells)}")
    keys = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100"]
    if all(k in metrics for k in keys):
        lines += ["  ".join(f"{k:>6}" for k in keys),
                  "  ".join(f"{metrics[k]:6.3f}" for k in keys)]
        per_class = metrics.get("per_class_AP") or {}
        if per_class:
            cells = [f"{name}: {_fmt(ap)}" for name, ap in per_class.items()]
            lines.append("per-class AP  " + ", ".join(cells))
    if map_key() in metrics:
        prefix = class_ap_key("")
        cells = [f"{k[len(prefix):]}: {_fmt(v)}" for k, v in metrics.items()
                 if k.startswith(prefix)]
        lines.append(f"Pascal VOC mAP@0.5  {_fmt(metrics[map_key()])}"
                     + (f"  per class  {', '.join(cells)}" if cells else ""))
    tasks = sorted({k.split("/")[1] for k in metrics if k.startswith("keypoints/")})
    for task in tasks:
        cells = [f"{k} {_fmt(metrics[f'keypoints/{task}/{k}'])}" for k in ("AP", "AP50", "AP75")
                 if f"keypoints/{task}/{k}" in metrics]
        lines.append(f"keypoints {task}: " + "  ".join(cells))
    segm = [f"{k} {_fmt(metrics[f'segm/{k}'])}" for k in ("AP", "AP50", "AP75", "APs", "APm",
                                                          "APl") if f"segm/{k}" in metrics]
    if segm:
        lines.append("segm: " + "  ".join(segm))
    return "\n".join(lines)


def _fmt(value) -> str:
    return "n/a" if value is None or value != value else f"{value:.3f}"

