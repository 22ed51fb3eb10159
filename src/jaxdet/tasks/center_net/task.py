"""The CenterNet task (objects as points; boxes), on the same seam as the SSD family: the same
train batch (images and padded boxes), its own targets (``tasks.center_net.targets``), loss and
static-shape predict (the top ``max_detections`` heatmap peaks; no NMS).

Loss, as the TF OD API's ``CenterNetMetaArch`` for the object-center and box tasks: the
penalty-reduced focal loss summed over the heatmap, plus L1 on the size and on the offset at
each object's center pixel, each divided by the number of objects in the batch (at least 1) and
weighted (``heatmap_weight``, ``size_weight`` 0.1, ``offset_weight`` 1). Keypoint tasks
(``tasks.center_net.keypoints``) add their heatmap, offset and regression losses, each divided
by its own count as TF divides it, and group their keypoints to the detected objects.

DeepMAC (``mask_head``, ``tasks.center_net.deepmac``): the mask network on every output's
embeddings at the ground-truth boxes, against their masks cropped from the batch's ``masks``;
the mask loss (per-pixel mean sigmoid cross-entropy per box, over the boxes of the allowed
classes, divided by their count, averaged over the outputs) times ``task_loss_weight`` joins
the total. Predict adds each detection's mask from the last output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.core.coordinates import points_to_original_coordinates, to_original_coordinates
from jaxdet.data.batch_layout import BatchField, BatchLayout
from jaxdet.eval.runner import KeypointEval
from jaxdet.models.task import ModelTask, model_graphdefs, run_model
from jaxdet.tasks.center_net import targets as cn
from jaxdet.tasks.center_net.deepmac import DeepMACHead
from jaxdet.tasks.center_net.keypoints import KeypointTask
from jaxdet.tasks.detector import box_batch_layout, evaluate_boxes

PyTree = Any


@dataclass
class CenterNetTask(ModelTask):
    """Model + targets + loss + peak decoding for a CenterNet (see the module docstring).

    Attributes:
      model: a ``tasks.center_net.model.CenterNet``.
      input_size: (H, W) of every batch image; stride: the output map's stride (H / h).
      num_classes: classes of the heatmap (contiguous 0-based ids).
      max_boxes: N, the ground truth of an image padded to a static count.
      max_detections: K, the peaks kept per image (TF ``max_box_predictions``).
      keypoint_tasks: the keypoint tasks, their slots laid end to end over
        ``num_keypoints`` slots (empty: boxes only).
      mask_head: DeepMAC's mask part (None: no masks); mask_shape: (Hm, Wm) of the batch's
        ``masks`` (the input size // ``data.mask_stride``), with ``mask_head``.
    """

    model: nnx.Module
    input_size: tuple[int, int]
    stride: int
    num_classes: int
    max_boxes: int = 100
    max_detections: int = 100
    min_overlap: float = 0.7
    alpha: float = 2.0
    beta: float = 4.0
    heatmap_weight: float = 1.0
    size_weight: float = 0.1
    offset_weight: float = 1.0
    peak_kernel: int = 3
    compute_dtype: Any = jnp.float32
    seed: int = 0
    remat_targets: tuple[str, ...] = ()
    keypoint_tasks: tuple[KeypointTask, ...] = ()
    num_keypoints: int = 0
    mask_head: DeepMACHead | None = None
    mask_shape: tuple[int, int] | None = None
    _graphdefs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._graphdefs.update(model_graphdefs(self.model))

    @property
    def output_size(self) -> tuple[int, int]:
        """(h, w) of the heatmap."""
        return self.input_size[0] // self.stride, self.input_size[1] // self.stride

    # ----------------------------------------------------------------- layout and variables

    def batch_layout(self) -> BatchLayout:
        """As the SSD family's (``tasks.detector.box_batch_layout``), plus ``image_info``
        f32[4] (the heatmaps' losses count inside the content only), with keypoint tasks
        ``keypoints`` f32[N, K, 2] (normalized y, x) and ``keypoint_visibility`` i32[N, K];
        with a mask head ``masks`` u8[N, Hm, Wm]."""
        layout = box_batch_layout(self.input_size, self.max_boxes)
        layout["image_info"] = BatchField((4,), jnp.float32)
        if self.keypoint_tasks:
            n, k = self.max_boxes, self.num_keypoints
            layout["keypoints"] = BatchField((n, k, 2), jnp.float32)
            layout["keypoint_visibility"] = BatchField((n, k), jnp.int32)
        if self.mask_head is not None:
            layout["masks"] = BatchField((self.max_boxes, *self.mask_shape), jnp.uint8)
        return layout

    def apply(self, params: PyTree, batch_stats: PyTree, images: jax.Array, *, train: bool,
              rng: jax.Array | None = None,
              mask_boxes: jax.Array | None = None) -> tuple[dict, PyTree]:
        """The head outputs (f32 [B, h, w, C] / [B, h, w, 2] / [B, h, w, 2], per keypoint
        task under ``"keypoints"`` its heatmap / offset / regression maps, DeepMAC's
        embeddings) and the new batch_stats. With ``mask_boxes`` [B, N, 4] (normalized;
        DeepMAC) every output also holds ``"mask_logits"`` [B, N, S, S] of those boxes."""
        def mask_logits(model: nnx.Module, outputs: dict) -> None:
            for out in [*outputs.get("intermediate", ()), outputs]:
                out["mask_logits"] = self.mask_head.logits(model.mask_net, out, mask_boxes)

        outputs, new_stats = run_model(self._graphdefs, params, batch_stats,
                                       images.astype(self.compute_dtype), train=train, rng=rng,
                                       then=None if mask_boxes is None else mask_logits)
        return jax.tree.map(lambda v: v.astype(jnp.float32), outputs), new_stats

    # ----------------------------------------------------------------- targets and loss

    def prepare(self, batch: dict) -> dict:
        """Targets of a batch: ``heatmap`` [B, h, w, C]; per box ``pixel`` [B, N, 2] int32,
        ``size`` and ``offset`` [B, N, 2]; ``weight`` [B, N] (valid and not ignored);
        ``pixels`` [B, h, w, 1]: 1 inside each image's content (``image_info``), where the
        center and keypoint heatmaps' losses count (TF's ``valid_anchor_weights``: a
        letterboxed image's padding is no negative)."""
        valid = batch["valid"] & ~batch["ignore"]

        def one(boxes, classes, keep):
            heatmap = cn.center_heatmap_targets(boxes, classes, keep, self.output_size,
                                                self.num_classes, min_overlap=self.min_overlap)
            pixel, size, offset = cn.size_and_offset_targets(boxes, self.output_size)
            return heatmap, pixel, size, offset

        heatmap, pixel, size, offset = jax.vmap(one)(batch["boxes"], batch["classes"], valid)
        info = batch.get("image_info")  # (a hand-made batch without it: every pixel counts)
        pixels = (jnp.ones((batch["boxes"].shape[0], *self.output_size, 1), jnp.float32)
                  if info is None else cn.true_image_pixels(info, self.output_size, self.stride))
        prepared = {"heatmap": heatmap, "pixel": pixel, "size": size, "offset": offset,
                    "weight": valid.astype(jnp.float32), "pixels": pixels}
        if self.keypoint_tasks:
            prepared["keypoints"] = [{**t.targets(batch, self.output_size), "pixels": pixels}
                                     for t in self.keypoint_tasks]
        if self.mask_head is not None:
            prepared["masks"] = self.mask_head.targets(batch)
        return prepared

    def loss_normalizer(self, prepared: dict) -> jax.Array | dict:
        """max(1, the batch's number of objects); with keypoint tasks or a mask head a dict
        of it (``"objects"``), of each keypoint task's own normalizers (``"keypoints"``) and
        of the number of boxes whose masks count (``"masks"``)."""
        objects = jnp.maximum(jnp.sum(prepared["weight"]), 1.0)
        if not self.keypoint_tasks and self.mask_head is None:
            return objects
        norm = {"objects": objects}
        if self.keypoint_tasks:
            norm["keypoints"] = [KeypointTask.normalizers(t) for t in prepared["keypoints"]]
        if self.mask_head is not None:
            norm["masks"] = DeepMACHead.normalizer(prepared["masks"])
        return norm

    def loss(self, params: PyTree, batch_stats: PyTree, batch: dict,
             rng: jax.Array | None = None, *, prepared: dict | None = None,
             normalizer: jax.Array | None = None) -> tuple[jax.Array, tuple[dict, PyTree]]:
        """(total, ({heatmap_loss, size_loss, offset_loss, num_objects, per keypoint task
        ``<task>/keypoint_{heatmap,offset,regression}_loss``, with a mask head mask_loss and
        num_masks}, new batch_stats)). A model with heads on several outputs (stacked
        hourglasses) averages each loss over them, as the TF OD API does."""
        targets = self.prepare(batch) if prepared is None else prepared
        norm = self.loss_normalizer(targets) if normalizer is None else normalizer
        out, new_stats = self.apply(
            params, batch_stats, batch["images"], train=True, rng=rng,
            mask_boxes=batch["boxes"] if self.mask_head is not None else None)
        outputs = [*out.get("intermediate", ()), out]
        per_output = [self._output_losses(o, targets, norm) for o in outputs]
        parts = {k: sum(p[k] for p in per_output) / len(outputs) for k in per_output[0]}
        total = (self.heatmap_weight * parts["heatmap_loss"]
                 + self.size_weight * parts["size_loss"]
                 + self.offset_weight * parts["offset_loss"])
        for task in self.keypoint_tasks:
            for name in ("heatmap", "offset", "regression"):
                total = total + parts[f"{task.name}/keypoint_{name}_loss"]
        if self.mask_head is not None:
            total = total + self.mask_head.task_loss_weight * parts["mask_loss"]
            parts["num_masks"] = jnp.sum(targets["masks"]["weights"])
        parts["num_objects"] = jnp.sum(targets["weight"])
        return total, (parts, new_stats)

    def _output_losses(self, out: dict, targets: dict, norm: jax.Array | dict) -> dict:
        """The unweighted box losses and the weighted keypoint losses of one output's heads."""
        n = norm["objects"] if isinstance(norm, dict) else norm
        heat = jnp.sum(cn.penalty_reduced_focal_loss(out["heatmap"], targets["heatmap"],
                                                     alpha=self.alpha, beta=self.beta)
                       * targets["pixels"]) / n
        take = jax.vmap(lambda m, p: m[p[:, 0], p[:, 1]])
        w = targets["weight"][..., None]
        size = jnp.sum(jnp.abs(take(out["size"], targets["pixel"]) - targets["size"]) * w) / n
        offset = jnp.sum(
            jnp.abs(take(out["offset"], targets["pixel"]) - targets["offset"]) * w) / n
        parts = {"heatmap_loss": heat, "size_loss": size, "offset_loss": offset}
        for task, outputs, t, tn in zip(self.keypoint_tasks, out.get("keypoints", ()),
                                        targets.get("keypoints", ()),
                                        norm["keypoints"] if self.keypoint_tasks else (),
                                        strict=True):
            losses = task.losses(outputs, t, tn, alpha=self.alpha, beta=self.beta)
            for name, value in losses.items():
                parts[f"{task.name}/keypoint_{name}_loss"] = value
        if "mask_logits" in out:
            parts["mask_loss"] = self.mask_head.loss(out["mask_logits"], targets["masks"],
                                                     norm["masks"])
        return parts

    # ----------------------------------------------------------------- inference

    def predict(self, params: PyTree, batch_stats: PyTree, images: jax.Array,
                image_info: jax.Array) -> dict:
        """The ``max_detections`` highest heatmap peaks as boxes in original-image pixels:
        boxes [B, D, 4] yxyx, scores [B, D], classes [B, D] int32, num_detections [B] (every
        peak counts; scores are sigmoid probabilities, low ones included as TF returns them).

        With keypoint tasks also ``keypoints`` [B, D, K, 2] (y, x) original-image pixels and
        ``keypoint_scores`` [B, D, K]: every task groups its keypoints to every detection
        (into its slots); a detection's own keypoints are the slots of its class's group
        (``data.keypoints.KeypointLayout``), the rest are to be ignored.

        With a mask head also ``masks`` [B, D, S, S] float32: each detection's mask
        probabilities over its box (box-relative, as Mask R-CNN's), from the last output.

        As TF's postprocess, the heatmap is multiplied by :func:`true_image_mask` first."""
        out, _ = self.apply(params, batch_stats, images, train=False)
        heatmap = jax.nn.sigmoid(out["heatmap"]) * true_image_mask(out["heatmap"].shape,
                                                                    image_info)
        scores, y, x, classes = cn.top_k_peaks(heatmap, self.max_detections,
                                               kernel=self.peak_kernel)
        strided = cn.decode_boxes(y, x, out["size"], out["offset"])
        h, w = self.output_size
        boxes = strided / jnp.array([h, w, h, w], jnp.float32)
        boxes = to_original_coordinates(boxes, image_info, self.input_size)
        count = jnp.full((images.shape[0],), self.max_detections, jnp.int32)
        result = {"boxes": boxes, "scores": scores, "classes": classes, "num_detections": count}
        if self.mask_head is not None:
            model = nnx.merge(self._graphdefs["eval"], params, batch_stats)
            normalized = strided / jnp.array([h, w, h, w], jnp.float32)
            logits = self.mask_head.logits(model.mask_net, out, normalized)
            result["masks"] = jax.nn.sigmoid(logits.astype(jnp.float32))
        if self.keypoint_tasks:
            b, d = scores.shape
            points = jnp.zeros((b, d, self.num_keypoints, 2), jnp.float32)
            point_scores = jnp.zeros((b, d, self.num_keypoints), jnp.float32)
            for task, outputs in zip(self.keypoint_tasks, out["keypoints"], strict=True):
                kp, kp_scores = task.decode(outputs, y, x, strided)
                slots = jnp.asarray(task.slots)
                points = points.at[:, :, slots].set(kp)
                point_scores = point_scores.at[:, :, slots].set(kp_scores)
            points = points / jnp.array([h, w], jnp.float32)
            result["keypoints"] = points_to_original_coordinates(points, image_info,
                                                                 self.input_size)
            result["keypoint_scores"] = point_scores
        return result

    def evaluate(self, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                 loader_factory: Any, out_dir: Any, **options: Any) -> dict:
        """Boxes, scored as the SSD family's are (:func:`tasks.detector.evaluate_boxes`), and each
        keypoint task's keypoints by COCO keypoint AP with its OKS sigmas."""

        if self.keypoint_tasks:
            options["keypoint_tasks"] = [KeypointEval(t.name, t.class_name, t.oks_sigmas)
                                         for t in self.keypoint_tasks]
        return evaluate_boxes(self, predict, params, batch_stats, source, loader_factory,
                              out_dir, **options)



def true_image_mask(shape: tuple[int, ...], image_info: jax.Array) -> jax.Array:
    """f32[B, h, w, 1]: 1 where the output-map row is below the content height and the column
    below the content width (``image_info[:, 2:4]``), else 0. As TF's
    ``mask_from_true_image_shape`` this compares output-map indices with sizes in INPUT pixels,
    so it only masks where the content is smaller than the output map; checkpoints trained with
    TF give TF's detections with it."""
    b, h, w = shape[:3]
    info = jnp.asarray(image_info, jnp.float32)
    rows = jnp.arange(h, dtype=jnp.float32)[None, :] < info[:, 2:3]
    cols = jnp.arange(w, dtype=jnp.float32)[None, :] < info[:, 3:4]
    return (rows[:, :, None] & cols[:, None, :]).astype(jnp.float32)[..., None]


__all__ = ["CenterNetTask", "true_image_mask"]
