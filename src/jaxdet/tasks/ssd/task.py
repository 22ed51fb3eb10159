"""The SSD family's task (SSD, RetinaNet, EfficientDet: single-stage, anchor-based): the pure
functions that a train step and a predict step are made of.

``SSDTask`` holds constructed objects only (a Flax module, anchors, a box coder, loss and
post-processing parameters); ``tasks.ssd.build`` makes it from a config. Its methods are pure
functions of (params, batch_stats, arrays), safe to call inside ``jax.jit``. It implements
``models.task.Task``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.core.coordinates import to_original_coordinates
from jaxdet.core.nms import batched_nms, clip_to_window, convert_scores
from jaxdet.core.target_assigner import assign_targets
from jaxdet.data.batch_layout import BatchLayout
from jaxdet.models.remat import REMAT_TARGETS
from jaxdet.models.task import ModelTask, model_graphdefs, run_model
from jaxdet.tasks.detector import box_batch_layout, evaluate_boxes
from jaxdet.tasks.ssd.loss import DetectionLossParams, detection_loss, loss_normalizer
from jaxdet.tasks.ssd.model import concat_levels

PyTree = Any


@dataclass(frozen=True)
class PostProcessParams:
    """Score conversion and NMS settings (see ``core.nms``)."""

    score_converter: str = "sigmoid"
    logit_scale: float = 1.0
    score_threshold: float = 1e-8
    iou_threshold: float = 0.6
    max_detections_per_class: int = 100
    max_total_detections: int = 100
    class_agnostic: bool = False
    pre_nms_top_k: int = 1000


@dataclass(frozen=True)
class MatchingParams:
    """Matcher arguments for ``core.target_assigner.assign_targets`` (``name="bipartite"``
    ignores the argmax thresholds)."""

    matched_threshold: float = 0.5
    unmatched_threshold: float = 0.5
    negatives_lower_than_unmatched: bool = True
    force_match_for_each_row: bool = True
    name: str = "argmax"


@dataclass
class SSDTask(ModelTask):
    """Model + anchors + targets + loss + post-processing for a single-stage detector.

    Attributes:
      model: the detector module (used for its graph definitions and initial variables).
      anchors: [A, 4] normalized yxyx anchors in the head's output order.
      input_size: (H, W) of every batch image.
      num_classes: foreground classes (contiguous 0-based ids).
      seed: base of the per-step random keys of stochastic layers (``step_key``).
      max_boxes: N, the ground-truth boxes of an image padded to a static count.
    """

    model: nnx.Module
    anchors: np.ndarray
    box_coder: Any
    loss_params: DetectionLossParams
    matching: MatchingParams
    post: PostProcessParams
    input_size: tuple[int, int]
    num_classes: int
    compute_dtype: Any = jnp.float32
    seed: int = 0
    max_boxes: int = 100
    remat_targets: tuple[str, ...] = REMAT_TARGETS
    _graphdefs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._graphdefs.update(model_graphdefs(self.model))

    # ----------------------------------------------------------------- layout

    def batch_layout(self) -> BatchLayout:
        """The box detector's train batch (``tasks.detector.box_batch_layout``)."""
        return box_batch_layout(self.input_size, self.max_boxes)

    # ----------------------------------------------------------------- forward

    def apply(
        self, params: PyTree, batch_stats: PyTree, images: jax.Array, *, train: bool,
        rng: jax.Array | None = None,
    ) -> tuple[tuple[jax.Array, jax.Array], PyTree]:
        """Run the detector.

        Args:
          images: [B, H, W, 3] normalized float images.
          rng: a key for stochastic layers (training only; None: deterministic).
        Returns:
          ((class_logits [B, A, K] f32, box_encodings [B, A, 4] f32), new batch_stats).
        """
        outputs, new_stats = run_model(self._graphdefs, params, batch_stats,
                                       images.astype(self.compute_dtype), train=train, rng=rng)
        logits, encodings = concat_levels(outputs)
        return (logits.astype(jnp.float32), encodings.astype(jnp.float32)), new_stats

    # ----------------------------------------------------------------- targets and loss

    def prepare(self, batch: dict) -> dict:
        """Per-anchor targets [B, A, ...] for a batch (see ``core.target_assigner``)."""
        m = self.matching

        def one(boxes, classes, valid, ignore):
            return assign_targets(
                jnp.asarray(self.anchors),
                boxes,
                classes,
                valid,
                ignore,
                num_classes=self.num_classes,
                box_coder=self.box_coder,
                matched_threshold=m.matched_threshold,
                unmatched_threshold=m.unmatched_threshold,
                negatives_lower_than_unmatched=m.negatives_lower_than_unmatched,
                force_match_for_each_row=m.force_match_for_each_row,
                matcher=m.name,
            )

        return jax.vmap(one)(batch["boxes"], batch["classes"], batch["valid"], batch["ignore"])

    def loss_normalizer(self, prepared: dict) -> jax.Array:
        """The batch's number of positives (see ``tasks.ssd.loss.loss_normalizer``)."""
        return loss_normalizer(prepared["box_weights"], self.loss_params)

    def loss(
        self, params: PyTree, batch_stats: PyTree, batch: dict, rng: jax.Array | None = None,
        *, prepared: dict | None = None, normalizer: jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[dict, PyTree]]:
        """Training loss of a batch: (total, (components, new batch_stats)); ``rng`` drives
        stochastic layers (see :meth:`step_key`).

        ``prepared`` (:meth:`prepare` of this batch: its targets) skips the target assignment
        when the caller already has them; ``normalizer`` (f32[]) replaces the batch's own loss
        normalizer — a micro-batch of gradient accumulation is divided by the normalizer of
        the whole batch (:meth:`loss_normalizer`)."""
        targets = self.prepare(batch) if prepared is None else prepared
        (logits, encodings), new_stats = self.apply(
            params, batch_stats, batch["images"], train=True, rng=rng
        )
        total, parts = detection_loss(
            logits,
            encodings,
            targets,
            self.loss_params,
            anchors=jnp.asarray(self.anchors),
            box_coder=self.box_coder,
            normalizer=normalizer,
        )
        return total, (parts, new_stats)

    # ----------------------------------------------------------------- evaluation

    def evaluate(self, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                 loader_factory: Any, out_dir: Any, **options: Any) -> dict:
        """Detect over an eval source and score the boxes
        (:func:`tasks.detector.evaluate_boxes`)."""
        return evaluate_boxes(self, predict, params, batch_stats, source, loader_factory,
                              out_dir, **options)

    # ----------------------------------------------------------------- inference

    def predict(
        self, params: PyTree, batch_stats: PyTree, images: jax.Array, image_info: jax.Array
    ) -> dict:
        """Detections in original-image pixels.

        Args:
          images: [B, H, W, 3]; image_info: [B, 4] (orig_h, orig_w, content_h, content_w).
        Returns:
          dict boxes [B, D, 4] pixel yxyx, scores [B, D], classes [B, D] int32,
          num_detections [B] int32, with D = max_total_detections.
        """
        (logits, encodings), _ = self.apply(params, batch_stats, images, train=False)
        anchors = jnp.asarray(self.anchors)
        # As the TF OD API: NMS on the decoded boxes as they are, then clip to the image's
        # content and drop the boxes that clipping leaves empty.
        boxes = self.box_coder.decode(encodings, anchors[None])
        p = self.post
        scores = convert_scores(
            logits,
            p.score_converter,
            logit_scale=p.logit_scale,
            has_background=self.loss_params.add_background_class,
        )
        det = batched_nms(
            boxes,
            scores,
            score_threshold=p.score_threshold,
            iou_threshold=p.iou_threshold,
            max_detections_per_class=p.max_detections_per_class,
            max_total_detections=p.max_total_detections,
            class_agnostic=p.class_agnostic,
            pre_nms_top_k=p.pre_nms_top_k,
        )
        height, width = self.input_size
        info = image_info.astype(jnp.float32)
        zeros = jnp.zeros_like(info[:, 2])
        window = jnp.stack([zeros, zeros, info[:, 2] / height, info[:, 3] / width], axis=-1)
        det = clip_to_window(det, window)
        det["boxes"] = to_original_coordinates(det["boxes"], image_info, self.input_size)
        return det

    # ----------------------------------------------------------------- TF's TFLite contract

    def detection_postprocess_inputs(self, params: PyTree, batch_stats: PyTree,
                                     images: jax.Array) -> tuple[jax.Array, jax.Array]:
        """What TF's TFLite SSD file hands its ``TFLite_Detection_PostProcess`` operation.

        Args:
          images: [B, H, W, 3] normalized float images (the network's input, as TF's file
            takes them).
        Returns:
          ``(box_encodings [B, A, 4] f32`` (ty, tx, th, tw), not decoded; ``class_predictions
          [B, A, K] f32)``: every logit through the score converter, as TF's exporter passes
          ``class_predictions_with_background``: K = C + 1 with the background in column 0
          when the model has a background class, else K = C (the operation tells the two
          apart by K).
        """
        (logits, encodings), _ = self.apply(params, batch_stats, images, train=False)
        p = self.post
        return encodings, convert_scores(logits, p.score_converter, logit_scale=p.logit_scale)

    def detection_postprocess_attributes(self) -> dict:
        """The ``TFLite_Detection_PostProcess`` settings of this model: ``anchors [A, 4]`` f32
        (y_center, x_center, height, width), normalized, the box coder's ``scales``
        (y, x, h, w), ``num_classes`` (C), ``score_threshold`` and ``iou_threshold``.
        ValueError (one line) for a model the operation cannot
        decode: another box coder, clamped or unscaled codes, identity scores."""
        coder = self.box_coder
        if type(coder).__name__ != "FasterRcnnBoxCoder" or coder.scales is None or (
                coder.max_log_scale is not None):
            raise ValueError("TF's TFLite_Detection_PostProcess decodes the faster_rcnn box "
                             "coder with its four scales only; this model's box coder is "
                             f"{coder!r} (export --format tflite instead)")
        if self.post.score_converter == "identity":
            raise ValueError("TF's TFLite_Detection_PostProcess takes converted scores; this "
                             "model's score converter is identity (export --format tflite "
                             "instead)")
        ymin, xmin, ymax, xmax = np.asarray(self.anchors, np.float32).T
        h, w = ymax - ymin, xmax - xmin
        return {"anchors": np.stack([ymin + 0.5 * h, xmin + 0.5 * w, h, w], axis=-1),
                "scales": tuple(float(s) for s in coder.scales),
                "num_classes": self.num_classes,
                "score_threshold": float(self.post.score_threshold),
                "iou_threshold": float(self.post.iou_threshold)}
