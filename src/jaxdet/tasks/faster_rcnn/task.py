"""The Faster R-CNN task (C4: one stride-16 map), on the task seam with static shapes.

Train step (TF OD API ``FasterRCNNMetaArch``, ``use_static_shapes``):

1. First stage: ResNet to conv4, the RPN's objectness and box codes over the grid anchors.
   Targets (``prepare``): IoU matcher 0.7 / 0.3 against the ground truth. A random balanced
   minibatch of ``first_stage_minibatch_size`` anchors (``positive_fraction`` positives at
   most) takes part in the softmax objectness loss and, its positives, in the smooth-L1 box
   loss; each image's sums are divided by its minibatch size.
2. Proposals: decode, NMS (``first_stage_nms_iou_threshold``) to ``first_stage_max_proposals``
   boxes, clipped to the image content (``image_info``), gradients stopped.
3. Second stage: the proposals against the ground truth (IoU 0.5), a random balanced minibatch
   of ``second_stage_batch_size`` of them (``second_stage_balance_fraction`` positives), placed
   first in proposal order; crop-and-resize from the conv4 map, max pool, conv5, spatial mean,
   class logits and box codes. Softmax cross-entropy over num_classes + 1 on every sampled
   proposal, smooth L1 on the positives' own-class box; each image's sums divided by its
   number of sampled proposals.

4. Mask R-CNN (``predict_instance_masks``): the mask head on the conv5 maps of the sampled
   positives (compacted to ``floor(second_stage_batch_size * balance_fraction)`` slots, the
   most the sampler takes), own-class logits against the matched ground-truth mask cropped to
   the proposal from the batch's ``masks`` (``tasks.faster_rcnn.ops.mask_targets``), sigmoid
   cross-entropy averaged per pixel over the positives (``tasks.faster_rcnn.ops.mask_loss``).

Every loss part is summed over the images and divided by the loss normalizer, the batch size
(TF averages the per-image losses over the batch), so micro-batches of an accumulated step add
up to the whole batch. The mask loss is TF's mean over the batch's positives, times the batch
size over the normalizer (exact without accumulation; accumulated, the micro-batch means are
averaged). Predict: the proposals (as 2.), the second stage on all of them, per class NMS
(``second_stage_post_processing``), clip to the content, original-image pixels; with masks,
the final boxes are cropped again, through conv5 and the mask head (TF's third stage), and
``masks`` [B, D, mask_height, mask_width] hold each detection's own-class probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.core.coordinates import to_original_coordinates
from jaxdet.core.nms import clip_to_window
from jaxdet.core.roi_ops import (
    fpn_box_levels,
    matmul_crop_and_resize,
    multilevel_matmul_crop_and_resize,
)
from jaxdet.data.batch_layout import BatchField, BatchLayout
from jaxdet.models.task import ModelTask, model_graphdefs
from jaxdet.tasks.detector import box_batch_layout, evaluate_boxes
from jaxdet.tasks.faster_rcnn import ops as frcnn
from jaxdet.tasks.faster_rcnn.samplers import batch_balanced_sample

PyTree = Any


@dataclass(frozen=True)
class FasterRCNNParams:
    """The static settings of the two stages (TF's ``faster_rcnn`` proto field names)."""

    first_stage_nms_score_threshold: float = 0.0
    first_stage_nms_iou_threshold: float = 0.7
    first_stage_max_proposals: int = 300
    first_stage_minibatch_size: int = 256
    first_stage_positive_balance_fraction: float = 0.5
    first_stage_localization_loss_weight: float = 1.0
    first_stage_objectness_loss_weight: float = 1.0
    initial_crop_size: int = 14
    crop_method: str = "gather"
    second_stage_batch_size: int = 64
    second_stage_balance_fraction: float = 0.25
    second_stage_localization_loss_weight: float = 1.0
    second_stage_classification_loss_weight: float = 1.0
    score_threshold: float = 0.0
    iou_threshold: float = 0.6
    max_detections_per_class: int = 100
    max_total_detections: int = 100
    logit_scale: float = 1.0
    predict_instance_masks: bool = False
    mask_height: int = 15
    mask_width: int = 15
    second_stage_mask_prediction_loss_weight: float = 1.0

    def mask_slots(self) -> int:
        """The static number of sampled positives per image (the sampler takes at most
        ``floor(second_stage_batch_size * balance_fraction)``), at least 1."""
        return max(1, int(self.second_stage_batch_size * self.second_stage_balance_fraction))


@dataclass
class FasterRCNNTask(ModelTask):
    """Model + anchors + the two stages' targets, losses and post-processing.

    Attributes:
      model: a ``tasks.faster_rcnn.model.FasterRCNN``.
      anchors: ``[A, 4]`` normalized first-stage anchors (clipped to the image when TF's
        ``clip_anchors_to_image``); anchor_valid: ``[A]`` 1 for anchors inside the image, or
        None (every anchor takes part: clipped anchors).
      anchor_pixels: the same anchors in pixels, bit-equal to TF's, which both stages'
        targets are matched against (with the ground truth and the proposals in pixels, as
        TF matches); None matches ``anchors`` scaled to pixels.
      box_coder: the Faster R-CNN box coder (both stages).
      mask_shape: (Hm, Wm) of the batch's ``masks`` (the input size // ``data.mask_stride``),
        used with ``params.predict_instance_masks``.
      stride: what the input size divides by (16: C4, the conv4 map; 32: FPN).
    """

    model: nnx.Module
    anchors: np.ndarray
    box_coder: Any
    input_size: tuple[int, int]
    num_classes: int
    params: FasterRCNNParams = FasterRCNNParams()
    anchor_valid: np.ndarray | None = None
    anchor_pixels: np.ndarray | None = None
    max_boxes: int = 100
    compute_dtype: Any = jnp.float32
    seed: int = 0
    remat_targets: tuple[str, ...] = ()
    mask_shape: tuple[int, int] | None = None
    stride: int = 16
    _graphdefs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._graphdefs.update(model_graphdefs(self.model))

    def max_stride(self) -> int:
        return self.stride

    # ----------------------------------------------------------------- layout and model

    def batch_layout(self) -> BatchLayout:
        """The SSD family's batch (``tasks.detector.box_batch_layout``) plus ``image_info``
        f32[4] (orig_h, orig_w, content_h, content_w): proposals are clipped to the content,
        as TF clips them to the true image shape; with masks, ``masks`` u8[N, Hm, Wm]."""
        layout = box_batch_layout(self.input_size, self.max_boxes)
        layout["image_info"] = BatchField((4,), jnp.float32)
        if self.params.predict_instance_masks:
            layout["masks"] = BatchField((self.max_boxes, *self.mask_shape), jnp.uint8)
        return layout

    def _merge(self, params: PyTree, batch_stats: PyTree, *, train: bool) -> nnx.Module:
        return nnx.merge(self._graphdefs["train" if train else "eval"], params, batch_stats)

    def _window(self, image_info: jax.Array) -> jax.Array:
        """``[B, 4]`` normalized window of each image's content in the padded input."""
        info = image_info.astype(jnp.float32)
        zeros = jnp.zeros_like(info[:, 2])
        return jnp.stack([zeros, zeros, info[:, 2] / self.input_size[0],
                          info[:, 3] / self.input_size[1]], axis=-1)

    def _to_pixels(self, boxes: jax.Array) -> jax.Array:
        """Normalized boxes ``[..., 4]`` in pixels of the padded input (TF's
        ``to_absolute_coordinates``: one float32 product per coordinate)."""
        h, w = self.input_size
        return boxes.astype(jnp.float32) * jnp.array([h, w, h, w], jnp.float32)

    def _anchor_valid(self) -> jax.Array | None:
        return None if self.anchor_valid is None else jnp.asarray(self.anchor_valid)

    def _proposals(self, objectness: jax.Array, encodings: jax.Array,
                   image_info: jax.Array, *, train: bool) -> dict:
        """Training leaves out the anchors outside the image (``anchor_valid``, TF prunes
        them); inference uses every anchor, clipped to the image (as TF)."""
        p = self.params
        anchors = jnp.asarray(self.anchors)
        valid = self._anchor_valid() if train else None
        if not train and self.anchor_valid is not None:
            anchors = jnp.clip(anchors, 0.0, 1.0)
        return frcnn.proposals(
            jax.lax.stop_gradient(encodings), jax.lax.stop_gradient(objectness),
            anchors, self._window(image_info), self.box_coder,
            max_proposals=p.first_stage_max_proposals,
            iou_threshold=p.first_stage_nms_iou_threshold,
            score_threshold=p.first_stage_nms_score_threshold, anchor_valid=valid)

    def _box_classifier_features(self, model: nnx.Module, features: jax.Array | list,
                                 boxes: jax.Array) -> jax.Array:
        """Crops of ``boxes [B, P, 4]`` from ``features`` through conv5 -> ``[B * P, h5, w5,
        C5]`` (C4); from the FPN maps ``features`` (a list, finest first), each box from its
        level (TF's ``fpn_feature_levels``: unit level ``L - 2``, image ratio ``sqrt(H W) /
        224`` of the padded input), through the fully connected classifier -> ``[B * P, 1,
        1, fc_depth]``."""
        b, n = boxes.shape[:2]
        s = self.params.initial_crop_size
        if isinstance(features, (list, tuple)):  # FPN: each box from its own level
            levels = fpn_box_levels(boxes, len(features), len(features) - 2,
                                    math.sqrt(self.input_size[0] * self.input_size[1]) / 224.0)
            crops = multilevel_matmul_crop_and_resize(
                features, boxes.astype(features[0].dtype), levels, (s, s),
                method=self.params.crop_method)
        else:
            crops = matmul_crop_and_resize(features, boxes.astype(features.dtype), (s, s),
                                           method=self.params.crop_method)
        return model.box_classifier_features(crops.reshape(b * n, s, s, crops.shape[-1]))

    def _second_stage(self, model: nnx.Module, features: jax.Array,
                      boxes: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Crops of ``boxes [B, P, 4]`` from ``features`` -> (logits ``[B, P, K + 1]``, box
        codes ``[B, P, C', 4]``) float32, and the conv5 maps ``[B, P, h5, w5, C5]``."""
        b, n = boxes.shape[:2]
        maps = self._box_classifier_features(model, features, boxes)
        logits, codes = model.box_head(maps)
        return (logits.astype(jnp.float32).reshape(b, n, -1),
                codes.astype(jnp.float32).reshape(b, n, -1, 4),
                maps.reshape(b, n, *maps.shape[1:]))

    def _own_class_masks(self, model: nnx.Module, maps: jax.Array,
                         classes: jax.Array) -> jax.Array:
        """Mask logits ``[B, K, mh, mw]`` float32 of conv5 maps ``[B, K, h5, w5, C5]`` for
        their ``classes [B, K]`` (1-based; the one mask when class agnostic)."""
        b, k = classes.shape
        logits = model.predict_masks(maps.reshape(b * k, *maps.shape[2:]))
        logits = logits.astype(jnp.float32).reshape(b, k, *logits.shape[1:])
        return frcnn.class_masks(logits, classes)

    # ----------------------------------------------------------------- targets and loss

    def prepare(self, batch: dict) -> dict:
        """First-stage targets ``[B, A, ...]`` (``tasks.faster_rcnn.ops.rpn_targets``),
        matched in pixels."""
        anchors = (jnp.asarray(self.anchor_pixels) if self.anchor_pixels is not None
                   else self._to_pixels(jnp.asarray(self.anchors)))
        valid = self._anchor_valid()
        return jax.vmap(lambda b, v, i: frcnn.rpn_targets(anchors, b, v, i, self.box_coder,
                                                          anchor_valid=valid))(
            self._to_pixels(batch["boxes"]), batch["valid"], batch["ignore"])

    def loss_normalizer(self, prepared: dict) -> jax.Array:
        """The batch size: every part is a sum over images of per-image normalized losses."""
        return jnp.float32(prepared["weight"].shape[0])

    def loss(self, params: PyTree, batch_stats: PyTree, batch: dict,
             rng: jax.Array | None = None, *, prepared: dict | None = None,
             normalizer: jax.Array | None = None) -> tuple[jax.Array, tuple[dict, PyTree]]:
        """(total, ({first_stage_objectness_loss, first_stage_localization_loss,
        second_stage_classification_loss, second_stage_localization_loss,
        [second_stage_mask_loss], num_positives (first-stage positives in the batch),
        num_proposals, num_sampled_positives}, new batch_stats)); the random minibatches
        come from ``rng``."""
        p = self.params
        targets = self.prepare(batch) if prepared is None else prepared
        norm = self.loss_normalizer(targets) if normalizer is None else normalizer
        key = jax.random.key(self.seed) if rng is None else rng
        rpn_key, detection_key = jax.random.split(key)
        model = self._merge(params, batch_stats, train=True)
        features, objectness, encodings = model.first_stage(
            batch["images"].astype(self.compute_dtype))
        objectness = objectness.astype(jnp.float32)
        encodings = encodings.astype(jnp.float32)

        sampled = batch_balanced_sample(targets["weight"] > 0, targets["objectness"] > 0,
                                        p.first_stage_minibatch_size,
                                        p.first_stage_positive_balance_fraction, rpn_key)
        rpn_obj, rpn_loc = frcnn.rpn_losses(objectness, encodings, targets, sampled)

        props = self._proposals(objectness, encodings, batch["image_info"], train=True)
        boxes, det_targets, valid = self._sample_proposals(props, batch, detection_key)
        logits, codes, maps = self._second_stage(model, features, boxes)
        cls, loc = frcnn.detection_losses(logits, codes, det_targets, valid)

        parts = {
            "first_stage_objectness_loss": p.first_stage_objectness_loss_weight * rpn_obj / norm,
            "first_stage_localization_loss":
                p.first_stage_localization_loss_weight * rpn_loc / norm,
            "second_stage_classification_loss":
                p.second_stage_classification_loss_weight * cls / norm,
            "second_stage_localization_loss":
                p.second_stage_localization_loss_weight * loc / norm,
        }
        if p.predict_instance_masks:
            mask = self._mask_loss(model, maps, boxes, det_targets, valid, batch["masks"])
            batch_size = batch["images"].shape[0]
            parts["second_stage_mask_loss"] = (
                p.second_stage_mask_prediction_loss_weight * mask * batch_size / norm)
        total = sum(parts.values())
        parts["num_positives"] = jnp.sum(targets["box_weights"])
        parts["num_proposals"] = jnp.sum(props["valid"].astype(jnp.float32))
        parts["num_sampled_positives"] = jnp.sum(det_targets["box_weights"] * valid)
        new_stats = nnx.to_pure_dict(nnx.state(model, nnx.BatchStat))
        return total, (parts, new_stats)

    def _mask_loss(self, model: nnx.Module, maps: jax.Array, boxes: jax.Array,
                   targets: dict, valid: jax.Array, gt_masks: jax.Array) -> jax.Array:
        """TF's mask loss on the sampled positives (compacted to ``params.mask_slots()``
        per image): own-class logits of the mask head vs. the matched ground-truth mask
        cropped to the proposal."""
        p = self.params
        positive = (targets["box_weights"] * valid.astype(jnp.float32)) > 0
        index, slot_valid = jax.vmap(lambda m: frcnn.compact(m, p.mask_slots()))(positive)
        take = jax.vmap(lambda x, i: jnp.take(x, i, axis=0))
        size = (p.mask_height, p.mask_width)
        logits = self._own_class_masks(model, take(maps, index),
                                       take(targets["classes"], index))
        mask_targets = frcnn.mask_targets(gt_masks, take(boxes, index),
                                          take(targets["match"], index), size,
                                          method=p.crop_method)
        return frcnn.mask_loss(logits, mask_targets, slot_valid.astype(jnp.float32))

    def _sample_proposals(self, props: dict, batch: dict,
                          key: jax.Array) -> tuple[jax.Array, dict, jax.Array]:
        """The second-stage minibatch: ``(boxes [B, S, 4], targets [B, S, ...], valid [B, S])``
        with S = ``second_stage_batch_size``, the sampled proposals first (proposal order)."""
        p = self.params
        targets = jax.vmap(lambda pb, pv, b, c, v, i: frcnn.detection_targets(
            pb, pv, b, c, v, i, num_classes=self.num_classes, box_coder=self.box_coder))(
            self._to_pixels(props["boxes"]), props["valid"], self._to_pixels(batch["boxes"]),
            batch["classes"], batch["valid"], batch["ignore"])
        candidates = props["valid"] & (targets["weight"] > 0)
        chosen = batch_balanced_sample(candidates, targets["classes"] > 0,
                                       p.second_stage_batch_size,
                                       p.second_stage_balance_fraction, key)
        index, valid = jax.vmap(lambda m: frcnn.compact(m, p.second_stage_batch_size))(chosen)
        take = jax.vmap(lambda x, i: jnp.take(x, i, axis=0))
        boxes = take(props["boxes"], index)
        targets = {k: take(v, index) for k, v in targets.items()}
        return boxes, targets, valid

    # ----------------------------------------------------------------- inference

    def predict(self, params: PyTree, batch_stats: PyTree, images: jax.Array,
                image_info: jax.Array) -> dict:
        """Detections in original-image pixels: boxes [B, D, 4] yxyx, scores [B, D], classes
        [B, D] int32, num_detections [B] (D = ``max_total_detections``); also the first
        stage's ``proposals`` [B, P, 4] (normalized, padded input) and ``num_proposals``.
        With masks, ``masks`` [B, D, mask_height, mask_width] float32: the sigmoid of each
        detection's own-class mask logits, in box coordinates (0 past num_detections)."""
        p = self.params
        model = self._merge(params, batch_stats, train=False)
        features, objectness, encodings = model.first_stage(images.astype(self.compute_dtype))
        props = self._proposals(objectness.astype(jnp.float32), encodings.astype(jnp.float32),
                                image_info, train=False)
        logits, codes, _ = self._second_stage(model, features, props["boxes"])
        boxes = self.box_coder.decode(codes, props["boxes"][:, :, None, :])
        scores = jax.nn.softmax(logits / p.logit_scale, axis=-1)[..., 1:]
        scores = jnp.where(props["valid"][..., None], scores, -jnp.inf)
        det = frcnn.per_class_nms(boxes, scores, score_threshold=p.score_threshold,
                                  iou_threshold=p.iou_threshold,
                                  max_detections_per_class=p.max_detections_per_class,
                                  max_total_detections=p.max_total_detections)
        det = clip_to_window(det, self._window(image_info))
        if p.predict_instance_masks:
            det["masks"] = self._detection_masks(model, features, det)
        det["boxes"] = to_original_coordinates(det["boxes"], image_info, self.input_size)
        det["proposals"] = props["boxes"]
        det["num_proposals"] = jnp.sum(props["valid"], axis=1).astype(jnp.int32)
        return det

    def _detection_masks(self, model: nnx.Module, features: jax.Array, det: dict) -> jax.Array:
        """TF's third stage at inference: the final (normalized) boxes cropped again, conv5,
        the mask head, each detection's own class, sigmoid -> ``[B, D, mh, mw]``."""
        b, d = det["classes"].shape
        maps = self._box_classifier_features(model, features, det["boxes"])
        logits = self._own_class_masks(model, maps.reshape(b, d, *maps.shape[1:]),
                                       det["classes"] + 1)
        live = jnp.arange(d)[None, :] < det["num_detections"][:, None]
        return jnp.where(live[..., None, None], jax.nn.sigmoid(logits), 0.0)

    def evaluate(self, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                 loader_factory: Any, out_dir: Any, **options: Any) -> dict:
        """COCO / VOC box metrics, as the SSD family (:func:`tasks.detector.evaluate_boxes`); COCO
        mask metrics too (``coco_mask_metrics``) when the detections carry ``masks``."""
        return evaluate_boxes(self, predict, params, batch_stats, source, loader_factory,
                              out_dir, **options)


__all__ = ["FasterRCNNParams", "FasterRCNNTask"]
