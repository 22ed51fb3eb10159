"""The 3D U-Net segmentation task (``model.type: unet3d``) on the task seam.

Train batch (per example): ``images`` f32[D, H, W, C] (a patch of ``input_size`` voxels,
depth split over the mesh's ``spatial`` axis) and ``labels`` i32[D, H, W] (class per voxel,
0 = background). Loss (``loss_name``, ``tasks.unet3d.segmentation``):

* ``dice_ce``: ``dice_weight`` x soft Dice loss + ``ce_weight`` x cross-entropy, both computed
  per example and summed over the batch, then divided by the batch size
  (:meth:`UNet3DTask.loss_normalizer`): per-example Dice makes the loss a sum over examples, so
  gradient accumulation over micro-batches equals the whole-batch step (exactly, up to float
  summation order, for a model without BatchNorm, such as the MLPerf network).
* ``adaptive_dice``: the TPU reference's ``adaptive_dice32``, one Dice per class over the whole
  batch, times (examples in the batch) / normalizer: the loss itself when the step sees the
  whole batch. Accumulated over k micro-batches it would be the mean of the k micro-batch
  losses, which is not the whole batch's loss (the Dice sums do not split), so the builder
  refuses ``train.accumulate_steps > 1`` with it; the task's arithmetic stays defined for
  direct callers.

A model with BatchNorm (the TPU reference's network) updates its running statistics in
training (:meth:`UNet3DTask.apply` returns them, ``models.task.run_model``) and normalizes with
them in eval mode (predict, sliding windows, evaluate).

Inference: :meth:`UNet3DTask.predict` on a batch of patches; :meth:`UNet3DTask.segment_volume`
over a whole volume by Gaussian-blended sliding windows; :meth:`UNet3DTask.evaluate`: per-class
Dice of whole volumes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.backends import process
from jaxdet.data.batch_layout import BatchField, BatchLayout
from jaxdet.models.task import ModelTask, model_graphdefs, run_model
from jaxdet.tasks.unet3d import segmentation as seg
from jaxdet.tasks.unet3d.pictures import cases_png, png_pixels
from jaxdet.tasks.unet3d.volume_io import VolumeReadError

PyTree = Any
LOSS_NAMES = ("dice_ce", "adaptive_dice")


@dataclass
class UNet3DTask(ModelTask):
    """Model + loss + patch and whole-volume predictions of a 3D U-Net.

    Attributes:
      model: a ``tasks.unet3d.model.UNet3D`` or a
        ``tasks.unet3d.tpu_reference.TPUReferenceUNet3D``.
      input_size: (D, H, W) of every training patch (also the sliding window's patch).
      num_classes: K, background included.
      in_channels: C of the input volumes.
      loss_name: ``dice_ce`` or ``adaptive_dice`` (the module docstring).
      dice_weight, ce_weight: weights of the two losses of ``dice_ce``; include_background:
        whether class 0 counts in its Dice loss.
      overlap, sigma_scale, window_batch_size: the sliding window's (``tasks.unet3d.segmentation``).
    """

    model: nnx.Module
    input_size: tuple[int, int, int]
    num_classes: int
    in_channels: int = 1
    loss_name: str = "dice_ce"
    dice_weight: float = 1.0
    ce_weight: float = 1.0
    include_background: bool = False
    overlap: float = 0.5
    sigma_scale: float = 0.125
    window_batch_size: int = 1
    class_names: tuple[str, ...] = ()
    compute_dtype: Any = jnp.float32
    seed: int = 0
    remat_targets: tuple[str, ...] = ()
    _graphdefs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.loss_name not in LOSS_NAMES:
            raise ValueError(f"loss_name {self.loss_name!r}; allowed: {', '.join(LOSS_NAMES)}")
        self._graphdefs.update(model_graphdefs(self.model))

    def max_stride(self) -> int:
        """2 ** (levels - 1): patch sides (and their spatial shards) must divide by it."""
        return self.model.max_stride

    def batch_layout(self) -> BatchLayout:
        """``images`` f32[D, H, W, C] and ``labels`` i32[D, H, W]: depth over the mesh's
        ``spatial`` axis, height and width over ``spatial_1`` and ``spatial_2`` where the mesh
        has them (``parallel.spatial_axes``; a ``(data, spatial)`` mesh splits depth only)."""
        return {
            "images": BatchField((*self.input_size, self.in_channels), jnp.float32,
                                 spatial_axis=(0, 1, 2)),
            "labels": BatchField(tuple(self.input_size), jnp.int32, spatial_axis=(0, 1, 2)),
        }

    def apply(self, params: PyTree, batch_stats: PyTree, images: jax.Array, *, train: bool,
              rng: jax.Array | None = None) -> tuple[jax.Array, PyTree]:
        """(f32[B, D, H, W, K] logits, batch_stats): in training the BatchNorm statistics
        updated by this batch (``models.task.run_model``; empty for a model without BatchNorm),
        in eval mode those given (used, not updated)."""
        logits, new_stats = run_model(self._graphdefs, params, batch_stats,
                                      images.astype(self.compute_dtype), train=train, rng=rng)
        return logits.astype(jnp.float32), new_stats

    # ----------------------------------------------------------------- loss

    def prepare(self, batch: dict) -> dict:
        """``{"examples": f32[B]}`` of ones: the loss needs no targets beyond the labels; the
        count makes the whole-batch normalizer."""
        return {"examples": jnp.ones(batch["labels"].shape[:1], jnp.float32)}

    def loss_normalizer(self, prepared: dict) -> jax.Array:
        """f32[]: the number of examples in the whole batch."""
        return jnp.sum(prepared["examples"])

    def loss(self, params: PyTree, batch_stats: PyTree, batch: dict,
             rng: jax.Array | None = None, *, prepared: dict | None = None,
             normalizer: jax.Array | None = None) -> tuple[jax.Array, tuple[dict, PyTree]]:
        """(total, (parts, new batch_stats)). ``dice_ce``: parts {dice_loss, ce_loss}, each
        summed over the batch's examples and divided by ``normalizer`` (the whole batch's
        size), total = ``dice_weight * dice_loss + ce_weight * ce_loss``. ``adaptive_dice``:
        parts {adaptive_dice_loss} = total = ``adaptive_dice_loss(batch) * B / normalizer``
        (B: the examples of ``batch``; exactly the batch's loss without accumulation)."""
        if normalizer is None:
            normalizer = self.loss_normalizer(self.prepare(batch) if prepared is None
                                              else prepared)
        logits, new_stats = self.apply(params, batch_stats, batch["images"], train=True,
                                       rng=rng)
        labels = batch["labels"]
        if self.loss_name == "adaptive_dice":
            loss = seg.adaptive_dice_loss(logits, labels) * labels.shape[0] / normalizer
            return loss, ({"adaptive_dice_loss": loss}, new_stats)
        dice = jnp.sum(seg.soft_dice_loss(logits, labels,
                                          include_background=self.include_background))
        ce = jnp.sum(seg.cross_entropy_loss(logits, labels))
        parts = {"dice_loss": dice / normalizer, "ce_loss": ce / normalizer}
        total = self.dice_weight * parts["dice_loss"] + self.ce_weight * parts["ce_loss"]
        return total, (parts, new_stats)

    # ----------------------------------------------------------------- inference

    def predict(self, params: PyTree, batch_stats: PyTree, images: jax.Array,
                image_info: jax.Array | None = None) -> dict:
        """A batch of patches f32[B, D, H, W, C] (sides divisible by :meth:`max_stride`) ->
        ``probabilities`` f32[B, D, H, W, K] (softmax) and ``labels`` i32[B, D, H, W]
        (argmax). ``image_info`` is not used (kept for the seam's signature)."""
        del image_info
        logits, _ = self.apply(params, batch_stats, images, train=False)
        probs = jax.nn.softmax(logits, axis=-1)
        return {"probabilities": probs, "labels": jnp.argmax(probs, axis=-1).astype(jnp.int32)}

    def segment_volume(self, params: PyTree, batch_stats: PyTree, volume: jax.Array, *,
                       batch_size: int | None = None) -> jax.Array:
        """f32[D, H, W, K] blended probabilities of a whole volume [D, H, W, C] (any static
        size; ``tasks.unet3d.segmentation.sliding_window_inference`` with the task's patch, overlap
        and Gaussian; ``batch_size`` windows at a time, default ``window_batch_size``)."""

        def predict_patch(patches: jax.Array) -> jax.Array:
            return self.apply(params, batch_stats, patches, train=False)[0]

        return seg.sliding_window_inference(
            predict_patch, volume, self.input_size, overlap=self.overlap,
            sigma_scale=self.sigma_scale,
            batch_size=self.window_batch_size if batch_size is None else batch_size)

    def evaluate(self, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                 loader_factory: Any = None, out_dir: Any = None, *,
                 max_images: int | None = None, progress: bool = False,
                 num_visualizations: int = 0, extra: dict | None = None,
                 on_images: Any = None, **options: Any) -> dict:
        """Per-class Dice of whole volumes.

        Each case of ``source`` (a sequence of (image f32[D, H, W, C], label i32[D, H, W]),
        e.g. ``tasks.unet3d.data.build_volume_source``; the first ``max_images``) is segmented
        by :meth:`segment_volume` (one compile per volume shape) and its argmax scored with
        ``tasks.unet3d.segmentation.dice_scores`` (background left out, 1.0 for a class absent from
        both). Returns ``{"dice/<name>": mean over cases of that class, "mean_dice": mean
        over cases of each case's mean, "per_case": [{"name", "dice": {...}}], "num_cases",
        **extra}``; with ``out_dir`` also ``metrics.json`` and, for the first
        ``num_visualizations`` cases, ``samples.png`` (orthogonal slices of image, label and
        prediction, ``pictures.cases_png``), whose pixels (uint8 [H, W, 3]) also go to
        ``on_images({"eval_samples": pixels})`` when given (the caller logs them to
        TensorBoard). ``predict``, ``loader_factory`` and the other options of the detectors'
        evaluation are not used (the seam's signature is kept)."""
        del predict, loader_factory, options
        from tqdm import tqdm

        names = self.class_names or tuple(f"class_{k}" for k in range(1, self.num_classes))
        segment = jax.jit(lambda volume: jnp.argmax(
            self.segment_volume(params, batch_stats, volume), axis=-1).astype(jnp.int32))
        count = len(source) if max_images is None else min(len(source), max_images)
        per_case, drawn = [], []
        skipped = []
        show_bar = progress and process.draws_progress_bars()  # a log file: no redraws
        for i in tqdm(range(count), desc="eval", unit="volume", disable=not show_bar,
                      leave=False):
            try:
                image, label = source[i]
            except VolumeReadError as e:  # named and counted, the others still scored
                skipped.append({"file": str(e.path), "reason": str(e)})
                continue
            prediction = np.asarray(segment(jnp.asarray(image, jnp.float32)))
            scores = np.asarray(seg.dice_scores(prediction[None], jnp.asarray(label)[None],
                                                self.num_classes))[0]
            name = source.name(i) if hasattr(source, "name") else f"volume_{i}"
            per_case.append({"name": name,
                             "dice": {n: float(v) for n, v in zip(names, scores, strict=True)}})
            if len(drawn) < num_visualizations:
                drawn.append((name, np.asarray(image), np.asarray(label), prediction,
                              per_case[-1]["dice"]))
        if not per_case:
            reasons = "; ".join(f"{c['file']}: {c['reason']}" for c in skipped[:3])
            raise ValueError("unet3d evaluation: no volume could be read"
                             + (f" ({reasons})" if reasons else ""))
        table = np.asarray([[c["dice"][n] for n in names] for c in per_case])  # [cases, K-1]
        metrics: dict[str, Any] = {f"dice/{n}": float(v)
                                   for n, v in zip(names, table.mean(axis=0), strict=True)}
        metrics["mean_dice"] = float(table.mean(axis=1).mean())
        metrics["num_cases"] = len(per_case)
        if skipped:
            metrics["skipped_cases"] = skipped
        metrics.update(extra or {})
        metrics["per_case"] = per_case
        if out_dir is not None:
            path = Path(out_dir)
            path.mkdir(parents=True, exist_ok=True)
            (path / "metrics.json").write_text(json.dumps(metrics, indent=1))
            if drawn:
                picture = cases_png(drawn, class_names=names)
                (path / "samples.png").write_bytes(picture)
                if on_images is not None:
                    on_images({"eval_samples": png_pixels(picture)})
        return metrics

__all__ = ["LOSS_NAMES", "UNet3DTask"]
