"""The CenterNet task (objects as points; boxes), on the same seam as the SSD family: the same
train batch (images and padded boxes), its own targets (``core.center_net``), loss and
static-shape predict (the top ``max_detections`` heatmap peaks; no NMS).

Loss, as the TF OD API's ``CenterNetMetaArch`` for the object-center and box tasks: the
penalty-reduced focal loss summed over the heatmap, plus L1 on the size and on the offset at
each object's center pixel, each divided by the number of objects in the batch (at least 1) and
weighted (``heatmap_weight``, ``size_weight`` 0.1, ``offset_weight`` 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.core import center_net as cn
from jaxdet.core.coordinates import to_original_coordinates
from jaxdet.tasks.base import (
    BatchLayout,
    ModelTask,
    box_batch_layout,
    evaluate_boxes,
    model_graphdefs,
    run_model,
)

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
    _graphdefs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._graphdefs.update(model_graphdefs(self.model))

    @property
    def output_size(self) -> tuple[int, int]:
        """(h, w) of the heatmap."""
        return self.input_size[0] // self.stride, self.input_size[1] // self.stride

    # ----------------------------------------------------------------- layout and variables

    def batch_layout(self) -> BatchLayout:
        """As the SSD family's (``tasks.base.box_batch_layout``)."""
        return box_batch_layout(self.input_size, self.max_boxes)

    def apply(self, params: PyTree, batch_stats: PyTree, images: jax.Array, *, train: bool,
              rng: jax.Array | None = None) -> tuple[dict, PyTree]:
        """The three head outputs (f32 [B, h, w, C] / [B, h, w, 2] / [B, h, w, 2]) and the new
        batch_stats."""
        outputs, new_stats = run_model(self._graphdefs, params, batch_stats,
                                       images.astype(self.compute_dtype), train=train, rng=rng)
        return {k: v.astype(jnp.float32) for k, v in outputs.items()}, new_stats

    # ----------------------------------------------------------------- targets and loss

    def prepare(self, batch: dict) -> dict:
        """Targets of a batch: ``heatmap`` [B, h, w, C]; per box ``pixel`` [B, N, 2] int32,
        ``size`` and ``offset`` [B, N, 2]; ``weight`` [B, N] (valid and not ignored)."""
        valid = batch["valid"] & ~batch["ignore"]

        def one(boxes, classes, keep):
            heatmap = cn.center_heatmap_targets(boxes, classes, keep, self.output_size,
                                                self.num_classes, min_overlap=self.min_overlap)
            pixel, size, offset = cn.size_and_offset_targets(boxes, self.output_size)
            return heatmap, pixel, size, offset

        heatmap, pixel, size, offset = jax.vmap(one)(batch["boxes"], batch["classes"], valid)
        return {"heatmap": heatmap, "pixel": pixel, "size": size, "offset": offset,
                "weight": valid.astype(jnp.float32)}

    def loss_normalizer(self, prepared: dict) -> jax.Array:
        """max(1, the batch's number of objects)."""
        return jnp.maximum(jnp.sum(prepared["weight"]), 1.0)

    def loss(self, params: PyTree, batch_stats: PyTree, batch: dict,
             rng: jax.Array | None = None, *, prepared: dict | None = None,
             normalizer: jax.Array | None = None) -> tuple[jax.Array, tuple[dict, PyTree]]:
        """(total, ({heatmap_loss, size_loss, offset_loss, num_objects}, new batch_stats))."""
        targets = self.prepare(batch) if prepared is None else prepared
        n = self.loss_normalizer(targets) if normalizer is None else normalizer
        out, new_stats = self.apply(params, batch_stats, batch["images"], train=True, rng=rng)
        heat = jnp.sum(cn.penalty_reduced_focal_loss(out["heatmap"], targets["heatmap"],
                                                     alpha=self.alpha, beta=self.beta)) / n
        take = jax.vmap(lambda m, p: m[p[:, 0], p[:, 1]])
        w = targets["weight"][..., None]
        size = jnp.sum(jnp.abs(take(out["size"], targets["pixel"]) - targets["size"]) * w) / n
        offset = jnp.sum(
            jnp.abs(take(out["offset"], targets["pixel"]) - targets["offset"]) * w) / n
        total = (self.heatmap_weight * heat + self.size_weight * size
                 + self.offset_weight * offset)
        parts = {"heatmap_loss": heat, "size_loss": size, "offset_loss": offset,
                 "num_objects": jnp.sum(targets["weight"])}
        return total, (parts, new_stats)

    # ----------------------------------------------------------------- inference

    def predict(self, params: PyTree, batch_stats: PyTree, images: jax.Array,
                image_info: jax.Array) -> dict:
        """The ``max_detections`` highest heatmap peaks as boxes in original-image pixels:
        boxes [B, K, 4] yxyx, scores [B, K], classes [B, K] int32, num_detections [B] (every
        peak counts; scores are sigmoid probabilities, low ones included as TF returns them)."""
        out, _ = self.apply(params, batch_stats, images, train=False)
        scores, y, x, classes = cn.top_k_peaks(jax.nn.sigmoid(out["heatmap"]),
                                               self.max_detections, kernel=self.peak_kernel)
        boxes = cn.decode_boxes(y, x, out["size"], out["offset"])
        h, w = self.output_size
        boxes = boxes / jnp.array([h, w, h, w], jnp.float32)
        boxes = to_original_coordinates(boxes, image_info, self.input_size)
        count = jnp.full((images.shape[0],), self.max_detections, jnp.int32)
        return {"boxes": boxes, "scores": scores, "classes": classes, "num_detections": count}

    def evaluate(self, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                 loader_factory: Any, out_dir: Any, **options: Any) -> dict:
        """Boxes, scored as the SSD family's are (:func:`tasks.base.evaluate_boxes`)."""
        return evaluate_boxes(self, predict, params, batch_stats, source, loader_factory,
                              out_dir, **options)



__all__ = ["CenterNetTask"]
