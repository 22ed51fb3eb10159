"""Build the SSD family (SSD, RetinaNet, EfficientDet) from a config: the detector module,
anchors, box coder, loss, matching and post-processing parameters, and the task."""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import nnx

from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.core import anchors as anchor_lib
from jaxdet.core import box_coders
from jaxdet.core.precision import compute_dtype
from jaxdet.data.build import input_size
from jaxdet.models.abstract import model_rngs
from jaxdet.models.build import (
    apply_batch_norm_statistics,
    batch_norm_params,
    build_backbone,
    build_neck,
)
from jaxdet.models.remat import set_remat
from jaxdet.tasks.ssd.bifpn import BiFPN
from jaxdet.tasks.ssd.hard_example_miner import HardExampleMinerParams
from jaxdet.tasks.ssd.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.tasks.ssd.heads.weight_shared import WeightSharedBoxPredictor
from jaxdet.tasks.ssd.loss import DetectionLossParams
from jaxdet.tasks.ssd.model import SSDDetector
from jaxdet.tasks.ssd.ssd_feature_maps import SSDFeatureMaps
from jaxdet.tasks.ssd.task import MatchingParams, PostProcessParams, SSDTask


def build_ssd_neck(cfg: S.SSDModelConfig, in_channels: dict[int, int], *, dtype,
                   rngs: nnx.Rngs) -> nnx.Module:
    """The neck of ``cfg.neck``: BiFPN (EfficientDet), SSD feature maps (extra layers on the
    backbone's last two levels), or a shared neck (``models.build.build_neck``: the FPN)."""
    n = cfg.neck
    bn = batch_norm_params(cfg.backbone.batch_norm)
    if isinstance(n, S.BiFPNConfig):
        return BiFPN(  # checks that min_level is a backbone level
            in_channels,
            n.min_level,
            n.max_level,
            n.num_filters,
            n.num_iterations,
            weight_method=n.weight_method,
            activation_name=n.activation,
            separable=n.use_depthwise,
            pooling=n.pooling,
            batch_norm=bn,
            dtype=dtype,
            rngs=rngs,
        )
    if isinstance(n, S.SSDFeatureMapsConfig):
        return SSDFeatureMaps(
            in_channels,
            source_levels=(4, 5),
            extra_depths=tuple(n.extra_depths),
            batch_norm=bn,
            activation=n.activation,
            use_depthwise=n.use_depthwise,
            dtype=dtype,
            rngs=rngs,
        )
    return build_neck(cfg, in_channels, dtype=dtype, rngs=rngs)


def build_anchor_generator(cfg: S.SSDModelConfig):
    a = cfg.anchors
    if isinstance(a, S.MultiscaleAnchorsConfig):
        return anchor_lib.MultiscaleAnchorGenerator(
            min_level=a.min_level,
            max_level=a.max_level,
            anchor_scale=a.anchor_scale,
            scales_per_octave=a.scales_per_octave,
            aspect_ratios=tuple(a.aspect_ratios),
            tf_layout=a.tf_layout,
            torchvision_layout=a.torchvision_layout,
        )
    return anchor_lib.SSDAnchorGenerator(
        num_layers=a.num_layers,
        min_scale=a.min_scale,
        max_scale=a.max_scale,
        aspect_ratios=tuple(a.aspect_ratios),
        interpolated_scale_aspect_ratio=a.interpolated_scale_aspect_ratio,
        base_anchor_size=tuple(a.base_anchor_size),
        reduce_boxes_in_lowest_layer=a.reduce_boxes_in_lowest_layer,
    )


def num_class_outputs(cfg: S.SSDModelConfig) -> int:
    """Class logits per anchor: num_classes, plus one background slot if configured."""
    return cfg.num_classes + int(cfg.add_background_class)


def _check_anchor_levels(cfg: S.SSDModelConfig, levels: list[int]) -> None:
    a = cfg.anchors
    if isinstance(a, S.MultiscaleAnchorsConfig):
        if list(range(a.min_level, a.max_level + 1)) != levels:
            raise ValueError(
                f"model.anchors levels {a.min_level}..{a.max_level} must equal the neck's "
                f"feature levels {levels[0]}..{levels[-1]}"
            )
    elif a.num_layers != len(levels):
        raise ValueError(
            f"model.anchors.num_layers ({a.num_layers}) must equal the number of feature maps "
            f"the neck produces ({len(levels)})"
        )


def build_head(cfg: S.SSDModelConfig, neck_channels: dict[int, int], *, dtype, rngs: nnx.Rngs):
    """The box predictor over the neck's levels (``neck_channels``: {level: channels})."""
    h = cfg.head
    levels = sorted(neck_channels)
    neck_depths = [neck_channels[level] for level in levels]
    _check_anchor_levels(cfg, levels)
    per_location = build_anchor_generator(cfg).num_anchors_per_location()
    bn = batch_norm_params(cfg.backbone.batch_norm)
    if isinstance(h, S.WeightSharedHeadConfig):
        bn = batch_norm_params(h.batch_norm)
        if len(set(neck_depths)) != 1 or len(set(per_location)) != 1:
            raise ValueError(
                "model.head.name=weight_shared needs the same depth and anchors per location on "
                f"every level (got depths {neck_depths}, anchors {per_location})"
            )
        return WeightSharedBoxPredictor(
            neck_depths[0],
            num_class_outputs(cfg),
            per_location[0],
            levels,
            depth=h.depth,
            num_layers_before_predictor=h.num_layers_before_predictor,
            kernel_size=h.kernel_size,
            norm=h.norm,
            batch_norm=bn,
            share_norm_across_levels=h.share_norm_across_levels,
            share_prediction_tower=h.share_prediction_tower,
            prior_probability=h.prior_probability,
            activation=h.activation,
            use_depthwise=h.use_depthwise,
            use_bias=h.use_bias,
            dtype=dtype,
            rngs=rngs,
        )
    return ConvolutionalBoxPredictor(
        neck_depths,
        num_class_outputs(cfg),
        per_location,
        kernel_size=h.kernel_size,
        num_layers_before_predictor=h.num_layers_before_predictor,
        depth=h.depth,
        batch_norm=bn,
        use_dropout=h.use_dropout,
        dropout_keep_prob=h.dropout_keep_prob,
        class_prediction_bias_init=h.class_prediction_bias_init,
        dtype=dtype,
        rngs=rngs,
    )


def build_model(config: S.Config, *, seed: int = 0) -> SSDDetector:
    """The detector module (params float32, compute in ``config.precision``).

    ``parallel.batch_norm_statistics=per_device``: every BatchNorm takes its training
    statistics per group of ``parallel.data`` (resolved over all devices) rows, i.e. per data
    shard; ``global``: over the whole batch. ``train.remat`` marks the parts recomputed in
    the backward pass (``jaxdet.models.remat``).
    """
    dtype = compute_dtype(config.precision)
    rngs = model_rngs(seed)
    backbone = build_backbone(config.model, dtype=dtype, rngs=rngs)
    neck = build_ssd_neck(config.model, dict(backbone.out_channels), dtype=dtype, rngs=rngs)
    head = build_head(config.model, dict(neck.out_channels), dtype=dtype, rngs=rngs)
    model = SSDDetector(backbone, neck, head)
    apply_batch_norm_statistics(model, config)
    if config.train.remat:
        set_remat(model, config.train.remat)
    return model


def build_anchors(config: S.Config, model: SSDDetector) -> np.ndarray:
    """Anchors [A, 4] (normalized yxyx) in the order the head flattens its outputs."""
    size = input_size(config.data)
    generator = build_anchor_generator(config.model)
    if isinstance(generator, anchor_lib.MultiscaleAnchorGenerator):
        anchors = generator.generate(size)
    else:
        anchors = generator.generate(model.feature_shapes(size), size)
    return np.asarray(anchors, np.float32)


def build_box_coder(cfg: S.SSDModelConfig):
    c = cfg.box_coder
    if c.name == "faster_rcnn":
        return box_coders.FasterRcnnBoxCoder(scales=tuple(c.scales),
                                             max_log_scale=c.max_log_scale)
    return box_coders.MeanStddevBoxCoder(stddev=c.stddev)


def build_loss_params(cfg: S.SSDModelConfig) -> DetectionLossParams:
    loss = cfg.loss
    if loss.classification == "softmax" and not cfg.add_background_class:
        raise ValueError(
            "model.loss.classification=softmax needs model.add_background_class=true (the "
            "softmax needs a background column for the unmatched anchors)"
        )
    miner = cfg.hard_example_miner
    return DetectionLossParams(
        classification=loss.classification,
        alpha=loss.alpha,
        gamma=loss.gamma,
        localization=loss.localization,
        delta=loss.delta,
        classification_weight=loss.classification_weight,
        localization_weight=loss.localization_weight,
        add_background_class=cfg.add_background_class,
        normalize_by_num_matches=loss.normalize_by_num_matches,
        normalize_loc_loss_by_codesize=loss.normalize_loc_loss_by_codesize,
        logit_scale=loss.logit_scale,
        bootstrap_alpha=loss.bootstrap_alpha,
        hard_bootstrap=loss.hard_bootstrap,
        hard_example_miner=None if miner is None else HardExampleMinerParams(
            **miner.model_dump()
        ),
    )


def build_matching_params(cfg: S.SSDModelConfig) -> MatchingParams:
    m = cfg.matcher
    return MatchingParams(
        m.matched_threshold,
        m.unmatched_threshold,
        m.negatives_lower_than_unmatched,
        m.force_match_for_each_row,
        m.name,
    )


def build_post_process_params(cfg: S.SSDModelConfig) -> PostProcessParams:
    return PostProcessParams(**cfg.post_processing.model_dump())


def build_ssd_task(config: S.Config, *, seed: int) -> SSDTask:
    """Model, anchors, targets, loss and post-processing for ``config``."""
    model = build_model(config, seed=seed)
    return SSDTask(
        model=model,
        anchors=build_anchors(config, model),
        box_coder=build_box_coder(config.model),
        loss_params=build_loss_params(config.model),
        matching=build_matching_params(config.model),
        post=build_post_process_params(config.model),
        input_size=input_size(config.data),
        num_classes=config.model.num_classes,
        compute_dtype=compute_dtype(config.precision),
        seed=seed,
        max_boxes=config.data.max_number_of_boxes,
    )


def ssd_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes an SSD checkpoint's tensors: the network, classes, anchors and input size
    (loss, matcher and post-processing are left out on purpose: a trained checkpoint may be
    evaluated with another score threshold, or fine-tuned with another loss)."""
    dumped = fingerprint_dump(config.model)
    return {
        "model": {k: dumped[k] for k in ("type", "num_classes", "add_background_class",
                                         "backbone", "neck", "anchors", "head") if k in dumped},
        "input_size": list(input_size(config.data)),
    }
