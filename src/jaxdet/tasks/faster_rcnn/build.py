"""Build a Faster R-CNN task from a ``model.type: faster_rcnn`` config; its checkpoint
fingerprint and ``jaxdet summary``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.core import anchors as anchor_lib
from jaxdet.core.box_coders import FasterRcnnBoxCoder
from jaxdet.core.grid_anchors import GridAnchorGenerator
from jaxdet.core.precision import compute_dtype
from jaxdet.data import build as data_build
from jaxdet.models import build as model_build
from jaxdet.models import remat
from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.tasks.faster_rcnn.fpn_model import FasterRCNNFPN
from jaxdet.tasks.faster_rcnn.model import (
    FasterRCNN,
    MaskHead,
    box_classifier,
    mask_prediction_conv_depth,
)
from jaxdet.tasks.faster_rcnn.task import FasterRCNNParams, FasterRCNNTask

# the ResNet's levels: 2-4 the first stage, 5 (conv5) the box classifier
REMAT_TARGETS = ("backbone", "backbone.level2", "backbone.level3", "backbone.level4",
                 "backbone.level5")
FPN_REMAT_TARGETS = (*REMAT_TARGETS, "neck")


def anchor_generator(m: S.FasterRCNNModelConfig):
    """The C4 network's ``GridAnchorGenerator`` or the FPN's ``MultiscaleAnchorGenerator``."""
    a = m.first_stage_anchor_generator
    if isinstance(a, S.MultiscaleAnchorsConfig):
        return anchor_lib.MultiscaleAnchorGenerator(
            min_level=a.min_level, max_level=a.max_level, anchor_scale=a.anchor_scale,
            scales_per_octave=a.scales_per_octave, aspect_ratios=tuple(a.aspect_ratios),
            tf_layout=a.tf_layout, torchvision_layout=a.torchvision_layout)
    return GridAnchorGenerator(scales=tuple(a.scales), aspect_ratios=tuple(a.aspect_ratios),
                               base_anchor_size=(a.height, a.width),
                               anchor_stride=(a.height_stride, a.width_stride),
                               anchor_offset=(a.height_offset, a.width_offset))


class FirstStageAnchors(NamedTuple):
    """Faster R-CNN's first-stage anchors ``[A, 4]`` (ymin, xmin, ymax, xmax).

    ``normalized``: divided by the input size (decoding, proposals); ``pixels``: as TF's
    meta-architecture makes them, float32 pixels bit-equal to TF's (the targets match in
    pixels, as TF does); both clipped to the image with ``clip_anchors_to_image``.
    ``valid``: ``[A]`` 1 for anchors inside the image when not clipped (TF prunes the
    others in training), else None."""

    normalized: np.ndarray
    pixels: np.ndarray
    valid: np.ndarray | None


def build_anchors(config: S.Config) -> FirstStageAnchors:
    """The first-stage anchors of the config's input size: clipped to the image with
    ``clip_anchors_to_image``; else unclipped for training with a mask of the anchors
    inside the image (see ``FasterRCNNModelConfig``) -- the task clips none of them, so
    inference clips them (FasterRCNNTask._proposals)."""
    size = data_build.input_size(config.data)
    gen = anchor_generator(config.model)
    if config.model.neck is not None:
        anchors, pixels = gen.generate(size), gen.pixel_anchors(size)
    else:
        shape = gen.feature_map_shape(size)
        anchors, pixels = gen.generate(shape, size), gen.generate(shape, size, normalize=False)
    if config.model.clip_anchors_to_image:
        window = np.array([size[0], size[1], size[0], size[1]], np.float32)
        pixels = np.maximum(np.minimum(pixels, window), np.float32(0.0))  # TF's clip_to_window
        return FirstStageAnchors(np.clip(anchors, 0.0, 1.0), pixels, None)
    window = np.array([size[0], size[1]], np.float32)
    inside = np.all((pixels[:, :2] >= 0.0) & (pixels[:, 2:] <= window), axis=1)  # TF's prune
    return FirstStageAnchors(anchors, pixels, inside.astype(np.float32))


def anchors_per_location(m: S.FasterRCNNModelConfig) -> int:
    per_location = anchor_generator(m).num_anchors_per_location()
    return per_location[0] if isinstance(per_location, list) else per_location


def input_stride(m: S.FasterRCNNModelConfig) -> int:
    """What the input size must divide by: the conv4 stride (C4) or the ResNet's top one."""
    return 16 if m.neck is None else 32


def build_faster_rcnn(config: S.Config, *, seed: int) -> FasterRCNN | FasterRCNNFPN:
    """The network: the shared ResNet builder, the RPN and the box predictor (C4), or the
    ResNet, the FPN neck (the SSD family's builder), the multi-level RPN and the fully
    connected box classifier (``model.neck``)."""
    m = config.model
    dtype = compute_dtype(config.precision)
    rngs = model_rngs(seed)
    backbone = model_build.build_backbone(m, dtype=dtype, rngs=rngs)
    rpn = dict(anchors_per_location=anchors_per_location(m),
               rpn_depth=m.first_stage_box_predictor_depth,
               rpn_kernel_size=m.first_stage_box_predictor_kernel_size,
               rpn_stddev=m.first_stage_box_predictor_stddev,
               share_box_across_classes=m.share_box_across_classes,
               maxpool_kernel_size=m.maxpool_kernel_size, maxpool_stride=m.maxpool_stride)
    if m.neck is not None:
        neck = model_build.build_neck(m, backbone.out_channels, dtype=dtype, rngs=rngs)
        model = FasterRCNNFPN(backbone, neck, num_classes=m.num_classes,
                              crop_size=m.initial_crop_size, fc_depth=m.box_classifier_fc_depth,
                              batch_norm_params=model_build.batch_norm_params(m.backbone.batch_norm),
                              dtype=dtype, rngs=rngs, **rpn)
        allowed = FPN_REMAT_TARGETS
    else:
        mask_head = (build_mask_head(m, backbone, dtype=dtype, rngs=rngs)
                     if m.predict_instance_masks else None)
        model = FasterRCNN(backbone, num_classes=m.num_classes, mask_head=mask_head,
                           dtype=dtype, rngs=rngs, **rpn)
        allowed = REMAT_TARGETS
    targets = tuple(config.train.remat)
    unknown = [t for t in targets if t not in allowed]
    if unknown:
        raise ValueError(f"train.remat={list(targets)}: faster_rcnn can recompute "
                         f"{', '.join(allowed)}; not {', '.join(unknown)}")
    if targets:
        remat.set_remat(model, targets)
    model_build.apply_batch_norm_statistics(model, config)
    return model


def box_classifier_modules(backbone: Any) -> list:
    """The modules of :func:`box_classifier` (whose parameters the summary counts)."""
    if hasattr(backbone, "conv_7b"):
        return [*backbone.blocks_by_level()[5], backbone.conv_7b]
    return backbone.blocks_by_level()[5]


def box_classifier_map_shape(m: S.FasterRCNNModelConfig, backbone: Any) -> tuple[int, ...]:
    """``(h5, w5, C5)``: the conv5 map of one max-pooled crop (traced abstractly)."""
    pooled = (m.initial_crop_size - m.maxpool_kernel_size) // m.maxpool_stride + 1
    graphdef, state = nnx.split(backbone)
    crop = jax.ShapeDtypeStruct((1, pooled, pooled, backbone.out_channels[4]), jnp.float32)
    out = jax.eval_shape(lambda st, x: box_classifier(nnx.merge(graphdef, st), x), state, crop)
    return tuple(out.shape[1:])


def build_mask_head(m: S.FasterRCNNModelConfig, backbone: Any, *, dtype,
                    rngs: nnx.Rngs) -> MaskHead:
    """Mask R-CNN's head on the conv5 maps (``predict_instance_masks``): the depth (0: TF's
    automatic one) and, with ``convolve_then_upsample``, the integer upsampling factors from
    the conv5 map to the mask size (refused when the mask size is not a multiple)."""
    h5, w5, c5 = box_classifier_map_shape(m, backbone)
    depth = m.mask_prediction_conv_depth or mask_prediction_conv_depth(c5, m.num_classes)
    upsample = (1, 1)
    if m.convolve_then_upsample:
        if m.mask_height % h5 or m.mask_width % w5:
            raise ValueError(
                f"model.convolve_then_upsample: mask_height x mask_width ({m.mask_height}x"
                f"{m.mask_width}) must be multiples of the conv5 map of a crop ({h5}x{w5}, "
                f"from initial_crop_size {m.initial_crop_size})")
        upsample = (m.mask_height // h5, m.mask_width // w5)
    return MaskHead(c5, m.num_classes, mask_height=m.mask_height, mask_width=m.mask_width,
                    depth=depth, num_conv_layers=m.mask_prediction_num_conv_layers,
                    class_agnostic=m.masks_are_class_agnostic,
                    convolve_then_upsample=m.convolve_then_upsample, upsample=upsample,
                    dtype=dtype, rngs=rngs)


def params_of(m: S.FasterRCNNModelConfig) -> FasterRCNNParams:
    post = m.second_stage_post_processing
    return FasterRCNNParams(
        first_stage_nms_score_threshold=m.first_stage_nms_score_threshold,
        first_stage_nms_iou_threshold=m.first_stage_nms_iou_threshold,
        first_stage_max_proposals=m.first_stage_max_proposals,
        first_stage_minibatch_size=m.first_stage_minibatch_size,
        first_stage_positive_balance_fraction=m.first_stage_positive_balance_fraction,
        first_stage_localization_loss_weight=m.first_stage_localization_loss_weight,
        first_stage_objectness_loss_weight=m.first_stage_objectness_loss_weight,
        initial_crop_size=m.initial_crop_size, crop_method=m.crop_method,
        second_stage_batch_size=m.second_stage_batch_size,
        second_stage_balance_fraction=m.second_stage_balance_fraction,
        second_stage_localization_loss_weight=m.second_stage_localization_loss_weight,
        second_stage_classification_loss_weight=m.second_stage_classification_loss_weight,
        score_threshold=post.score_threshold, iou_threshold=post.iou_threshold,
        max_detections_per_class=post.max_detections_per_class,
        max_total_detections=post.max_total_detections, logit_scale=post.logit_scale,
        predict_instance_masks=m.predict_instance_masks, mask_height=m.mask_height,
        mask_width=m.mask_width,
        second_stage_mask_prediction_loss_weight=m.second_stage_mask_prediction_loss_weight)


def build_faster_rcnn_task(config: S.Config, *, seed: int) -> FasterRCNNTask:
    """The network (:func:`build_faster_rcnn`), anchors and the two stages' settings."""
    m = config.model
    size = data_build.input_size(config.data)
    if m.predict_instance_masks and not config.data.load_masks:
        raise ValueError("model.predict_instance_masks: true needs data.load_masks: true "
                         "(the mask loss reads the ground-truth instance masks)")
    stride = input_stride(m)
    if size[0] % stride or size[1] % stride:
        what = "the conv4 stride" if m.neck is None else "the ResNet's top stride, FPN"
        raise ValueError(f"faster_rcnn needs an input size divisible by {stride} ({what}); "
                         f"got {size[0]}x{size[1]}")
    anchors = build_anchors(config)
    c = m.box_coder
    return FasterRCNNTask(
        model=build_faster_rcnn(config, seed=seed), anchors=anchors.normalized,
        anchor_pixels=anchors.pixels,
        box_coder=FasterRcnnBoxCoder(scales=tuple(c.scales), max_log_scale=c.max_log_scale),
        input_size=size, num_classes=m.num_classes, params=params_of(m),
        anchor_valid=anchors.valid, max_boxes=config.data.max_number_of_boxes,
        compute_dtype=compute_dtype(config.precision), seed=seed,
        remat_targets=REMAT_TARGETS if m.neck is None else FPN_REMAT_TARGETS,
        stride=stride,
        mask_shape=data_build.mask_shape(config) if m.predict_instance_masks else None)


def faster_rcnn_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes the tensors: the backbone, classes, anchors per location (the RPN's
    width), the RPN's depth and kernel, the shared or per-class box, the mask head (when it
    differs from the defaults), and the input size."""
    dumped = fingerprint_dump(config.model)
    keep = ("type", "num_classes", "backbone", "first_stage_anchor_generator",
            "first_stage_box_predictor_depth", "first_stage_box_predictor_kernel_size",
            "share_box_across_classes", "predict_instance_masks",
            "mask_prediction_conv_depth", "mask_prediction_num_conv_layers",
            "masks_are_class_agnostic", "convolve_then_upsample", "neck",
            "box_classifier_fc_depth")
    return {"model": {k: dumped[k] for k in keep if k in dumped},
            "input_size": list(data_build.input_size(config.data))}


def faster_rcnn_summary(config: S.Config, **_: Any) -> dict:
    """``jaxdet summary`` for Faster R-CNN: parameters per part (built abstractly: no weights
    are computed), anchors and the two stages' static sizes."""
    model = abstract_build(lambda: build_faster_rcnn(config, seed=0))

    def count(module) -> int:
        return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, nnx.Param)))

    m = config.model
    height, width = data_build.input_size(config.data)
    gen = anchor_generator(m)
    k = anchors_per_location(m)
    if m.neck is not None:
        shapes = gen.feature_map_shapes((height, width))
        parameters = {"backbone": count(model.backbone), "fpn": count(model.neck),
                      "rpn": count(model.rpn), "box_classifier": count(model.box_classifier),
                      "box_predictor": count(model.box_predictor)}
        anchors = {"feature_maps": [list(s) for s in shapes], "per_location": k,
                   "total": sum(h * w * k for h, w in shapes)}
    else:
        conv5 = sum(count(b) for b in box_classifier_modules(model.backbone))
        h, w = gen.feature_map_shape((height, width))
        parameters = {"first_stage_features": count(model.backbone) - conv5,
                      "rpn": count(model.rpn), "box_classifier": conv5,
                      "box_predictor": count(model.box_predictor)}
        if model.mask_head is not None:
            parameters["mask_head"] = count(model.mask_head)
        anchors = {"feature_map": [h, w], "per_location": k, "total": h * w * k}
    return {
        "name": config.name, "type": "faster_rcnn", "input_size": [height, width],
        "variant": "C4" if m.neck is None else "FPN",
        "num_classes": m.num_classes,
        "parameters": {**parameters, "total": count(model)},
        "anchors": anchors,
        "outputs": {"max_proposals": m.first_stage_max_proposals,
                    "crop": [m.initial_crop_size, m.initial_crop_size],
                    "second_stage_batch_size": m.second_stage_batch_size,
                    "max_detections": m.second_stage_post_processing.max_total_detections,
                    **({"masks": [m.mask_height, m.mask_width]}
                       if m.predict_instance_masks else {})},
    }


def format_faster_rcnn_summary(d: dict) -> str:
    p, a, o = d["parameters"], d["anchors"], d["outputs"]
    parts = ", ".join(f"{name.replace('_', ' ')} {value:,}" for name, value in p.items()
                      if name != "total")
    grid = (f"{a['feature_map'][0]}x{a['feature_map'][1]}" if "feature_map" in a
            else " + ".join(f"{h}x{w}" for h, w in a["feature_maps"]))
    return "\n".join([
        f"{d['name'] or 'config'}: Faster R-CNN ({d['variant']}), {d['num_classes']} classes, "
        f"input {d['input_size'][0]}x{d['input_size'][1]}",
        f"parameters: {p['total']:,} ({parts})",
        f"anchors: {a['total']:,} ({grid} x {a['per_location']}); {o['max_proposals']} "
        f"proposals per image, crops {o['crop'][0]}x{o['crop'][1]}, "
        f"{o['second_stage_batch_size']} sampled in training; at most "
        f"{o['max_detections']} detections"
        + (f", masks {o['masks'][0]}x{o['masks'][1]}" if "masks" in o else ""),
    ])
