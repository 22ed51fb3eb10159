"""The one place where a config becomes objects: model, anchors, losses, optimizer, data.

Everything below takes a config section and returns plain objects (Flax modules, numpy arrays,
optax transformations, data iterators). No other module reads a config object. The data
builders (input size, transforms, sources, loaders) live in ``builders_data.py`` and are
re-exported here, so ``builders.build_source`` etc. work as before.
"""

from __future__ import annotations

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from jaxdet.builders_data import (  # noqa: F401  (re-exported: builders is the one entry point)
    COMPUTE_DTYPES,
    build_augment_op,
    build_eval_loader,
    build_normalizer,
    build_resizer,
    build_source,
    build_train_loader,
    build_transforms,
    check_class_count,
    check_data_paths,
    decode_mode,
    input_size,
    keypoint_specs,
    load_masks,
    mask_shape,
    train_batch_layout,
    transforms_of,
)
from jaxdet.config import schema as S
from jaxdet.core import anchors as anchor_lib
from jaxdet.core import box_coders
from jaxdet.core.detection_loss import DetectionLossParams
from jaxdet.core.hard_example_miner import HardExampleMinerParams
from jaxdet.models.backbones.efficientnet import EfficientNet
from jaxdet.models.backbones.hourglass import HOURGLASS_SPECS, Hourglass
from jaxdet.models.backbones.inception_resnet_v2 import InceptionResNetV2
from jaxdet.models.backbones.mobilenet import MobileNetV1, MobileNetV2
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.backbones.resnet_v2 import ResNetV2
from jaxdet.models.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.models.heads.weight_shared import WeightSharedBoxPredictor
from jaxdet.models.layers import BatchNormParams, set_batch_norm_groups
from jaxdet.models.necks.bifpn import BiFPN
from jaxdet.models.necks.center_net_deconv import CenterNetDeconv
from jaxdet.models.necks.center_net_fpn import CenterNetFPN
from jaxdet.models.necks.fpn import FPN
from jaxdet.models.necks.identity import IdentityNeck
from jaxdet.models.necks.ssd_feature_maps import SSDFeatureMaps
from jaxdet.models.remat import set_remat
from jaxdet.models.ssd import SSDDetector
from jaxdet.parallel.mesh import check_batch_layout, check_volume_layout, make_mesh
from jaxdet.tasks.base import Task
from jaxdet.tasks.ssd.task import MatchingParams, PostProcessParams
from jaxdet.train import optim
from jaxdet.train.loss_scale import LossScaleParams
from jaxdet.train.step import make_train_step
from jaxdet.xla_cpu import cpu_compiler_options

# --------------------------------------------------------------------------- model


def batch_norm_params(cfg: S.BatchNormConfig) -> BatchNormParams:
    """Momentum, epsilon and freezing of one model part's BatchNorms (``num_groups`` is set
    model-wide by :func:`build_model` from ``parallel.batch_norm_statistics``)."""
    return BatchNormParams(momentum=cfg.decay, epsilon=cfg.epsilon, frozen=cfg.frozen)


def build_backbone(cfg: S.ModelConfig, *, dtype, rngs: nnx.Rngs) -> nnx.Module:
    b = cfg.backbone
    bn = batch_norm_params(b.batch_norm)
    if b.name.startswith("resnet_v2_"):
        return ResNetV2(int(b.name.removeprefix("resnet_v2_")), batch_norm=bn, dtype=dtype,
                        rngs=rngs)
    if b.name.startswith("hourglass"):
        return Hourglass(HOURGLASS_SPECS[b.name], batch_norm=bn, dtype=dtype, rngs=rngs)
    if b.name == "inception_resnet_v2":
        if cfg.type != "faster_rcnn":
            raise ValueError("model.backbone.name=inception_resnet_v2 is Faster / Mask R-CNN's "
                             f"split network; model.type {cfg.type} needs another backbone")
        return InceptionResNetV2(batch_norm=bn, dtype=dtype, rngs=rngs)
    if b.name.startswith("resnet"):
        return ResNet(
            int(b.name.removeprefix("resnet")),
            batch_norm=bn,
            width_multiplier=b.depth_multiplier,
            activation_name=b.activation or "relu",
            padding=b.padding or "symmetric",
            stride_in_1x1=b.stride_in_1x1,
            conv_bias=b.conv_bias,
            dtype=dtype,
            rngs=rngs,
        )
    if b.name.startswith("efficientnet"):
        return EfficientNet(
            b.name.removeprefix("efficientnet_"),
            batch_norm=bn,
            drop_connect_rate=b.drop_connect_rate,
            activation_name=b.activation or "swish",
            last_stage_blocks=1 if b.tf_endpoints else None,
            dtype=dtype,
            rngs=rngs,
        )
    if b.activation not in (None, "relu6"):
        raise ValueError(
            f"model.backbone.activation={b.activation} is not supported for {b.name} "
            "(MobileNets use relu6)"
        )
    padding = b.padding or "symmetric"
    if b.name == "mobilenet_v1":
        return MobileNetV1(
            b.depth_multiplier, b.min_depth, batch_norm=bn, padding=padding, dtype=dtype,
            rngs=rngs
        )
    # TF's classic SSD reads the 576-channel expansion output of block 15 as its stride-16 map;
    # its CenterNet MobileNetV2-FPN the end of the 64-channel stage, and scales the head conv
    # only below multiplier 1 (the TF OD API's Keras MobileNetV2).
    from_expansion = isinstance(cfg.neck, S.SSDFeatureMapsConfig)
    center_net_fpn = isinstance(cfg.neck, S.CenterNetMobileNetV2FPNConfig)
    return MobileNetV2(
        b.depth_multiplier,
        b.min_depth,
        level4_from_expansion=from_expansion,
        batch_norm=bn,
        level4_stage=3 if center_net_fpn else 4,
        head_scaling="below_1" if center_net_fpn else "above_1",
        padding=padding,
        dtype=dtype,
        rngs=rngs,
    )


def build_neck(cfg: S.ModelConfig, in_channels: dict[int, int], *, dtype, rngs: nnx.Rngs):
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
    # the CenterNet necks have their own batch norm (TF: Keras' defaults)
    if isinstance(n, S.CenterNetFPNConfig):
        return CenterNetFPN(in_channels, tuple(n.filters), batch_norm=batch_norm_params(
            n.batch_norm), dtype=dtype, rngs=rngs)
    if isinstance(n, S.CenterNetMobileNetV2FPNConfig):
        return CenterNetFPN(in_channels, tuple(n.filters),
                            batch_norm=batch_norm_params(n.batch_norm),
                            separable=n.use_separable_conv,
                            interpolation=n.upsampling_interpolation, dtype=dtype, rngs=rngs)
    if isinstance(n, S.CenterNetDeconvConfig):
        return CenterNetDeconv(in_channels, tuple(n.filters),
                               batch_norm=batch_norm_params(n.batch_norm), dtype=dtype,
                               rngs=rngs)
    if isinstance(n, S.IdentityNeckConfig):
        return IdentityNeck(in_channels, n.level)
    if isinstance(n, S.FPNConfig):
        return FPN(
            in_channels,
            n.min_level,
            n.max_level,
            n.depth,
            batch_norm=bn if n.norm == "batch_norm" else None,
            activation=n.activation,
            use_depthwise=n.use_depthwise,
            top_down=n.top_down,
            smooth_top=n.smooth_top,
            extra_input_activation=n.extra_input_activation,
            padding=n.padding,
            dtype=dtype,
            rngs=rngs,
        )
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


def build_anchor_generator(cfg: S.ModelConfig):
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


def num_class_outputs(cfg: S.ModelConfig) -> int:
    """Class logits per anchor: num_classes, plus one background slot if configured."""
    return cfg.num_classes + int(cfg.add_background_class)


def _check_anchor_levels(cfg: S.ModelConfig, levels: list[int]) -> None:
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


def build_head(cfg: S.ModelConfig, neck_channels: dict[int, int], *, dtype, rngs: nnx.Rngs):
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
    dtype = COMPUTE_DTYPES[config.precision]
    rngs = nnx.Rngs(seed)
    backbone = build_backbone(config.model, dtype=dtype, rngs=rngs)
    neck = build_neck(config.model, dict(backbone.out_channels), dtype=dtype, rngs=rngs)
    head = build_head(config.model, dict(neck.out_channels), dtype=dtype, rngs=rngs)
    model = SSDDetector(backbone, neck, head)
    apply_batch_norm_statistics(model, config)
    if config.train.remat:
        set_remat(model, config.train.remat)
    return model


def apply_batch_norm_statistics(model: nnx.Module, config: S.Config) -> None:
    """``parallel.batch_norm_statistics=per_device``: every BatchNorm of ``model`` takes its
    training statistics per group of ``parallel.data`` rows (per data shard)."""
    p = config.parallel
    if p.batch_norm_statistics == "per_device":
        # the mesh's data axis size; not checked against the devices here (a model built for
        # predict or export elsewhere never uses it), build_mesh checks it for training
        groups = p.data if p.data > 0 else max(1, jax.device_count() // p.spatial)
        set_batch_norm_groups(model, groups)


def build_anchors(config: S.Config, model: SSDDetector) -> np.ndarray:
    """Anchors [A, 4] (normalized yxyx) in the order the head flattens its outputs."""
    size = input_size(config.data)
    generator = build_anchor_generator(config.model)
    if isinstance(generator, anchor_lib.MultiscaleAnchorGenerator):
        anchors = generator.generate(size)
    else:
        anchors = generator.generate(model.feature_shapes(size), size)
    return np.asarray(anchors, np.float32)


def build_box_coder(cfg: S.ModelConfig):
    c = cfg.box_coder
    if c.name == "faster_rcnn":
        return box_coders.FasterRcnnBoxCoder(scales=tuple(c.scales),
                                             max_log_scale=c.max_log_scale)
    return box_coders.MeanStddevBoxCoder(stddev=c.stddev)


def build_loss_params(cfg: S.ModelConfig) -> DetectionLossParams:
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


def build_matching_params(cfg: S.ModelConfig) -> MatchingParams:
    m = cfg.matcher
    return MatchingParams(
        m.matched_threshold,
        m.unmatched_threshold,
        m.negatives_lower_than_unmatched,
        m.force_match_for_each_row,
        m.name,
    )


def build_post_process_params(cfg: S.ModelConfig) -> PostProcessParams:
    return PostProcessParams(**cfg.post_processing.model_dump())


def build_task(config: S.Config, *, seed: int | None = None) -> Task:
    """The task of ``config``, by its ``model.type`` (see ``jaxdet.tasks``)."""
    from jaxdet import tasks

    return tasks.build_task(config, seed=seed)


# --------------------------------------------------------------------------- devices


def build_mesh(config: S.Config) -> Mesh:
    """The ``(data, spatial)`` mesh of ``config.parallel`` over all devices of all processes;
    with ``parallel.spatial_axes`` splitting more than the first spatial dimension, the mesh
    ``(data, spatial, spatial_1[, spatial_2])`` (see ``parallel.mesh``)."""
    p = config.parallel
    return make_mesh(p.data, p.spatial, spatial_axes=p.spatial_axes)


def check_mesh_layout(config: S.Config, mesh: Mesh, task: Task, *,
                      splits: tuple[str, ...] = ("train", "eval")) -> None:
    """Check that train (micro-)batches and eval batches split over ``mesh`` (clear errors
    naming the field): images (``task.input_size`` (H, W)) by
    ``parallel.mesh.check_batch_layout``, which also refuses a split of the image width;
    volume patches (``task.input_size`` (D, H, W)) by ``parallel.mesh.check_volume_layout``
    (every split side, and every level map that stays split, divides by its shards)."""
    stride = task.max_stride()
    t = config.train
    volume = len(task.input_size) == 3

    def check(batch_size: int, what: str) -> None:
        if volume:
            check_volume_layout(mesh, batch_size=batch_size, patch_size=tuple(task.input_size),
                                max_stride=stride, what=what)
        else:
            check_batch_layout(mesh, batch_size=batch_size, image_size=task.input_size,
                               max_stride=stride, what=what)

    if "train" in splits:
        what = "train.batch_size" if t.accumulate_steps == 1 else (
            f"train.batch_size / train.accumulate_steps = {t.batch_size} / {t.accumulate_steps}")
        check(t.batch_size // t.accumulate_steps, what)
    if "eval" in splits:
        check(config.eval.batch_size, "eval.batch_size")


# --------------------------------------------------------------------------- optimizer


def build_schedule(cfg: S.TrainConfig) -> optax.Schedule:
    lr = cfg.learning_rate
    if isinstance(lr, S.CosineLearningRateConfig):
        return optim.cosine_decay_with_warmup(
            lr.learning_rate_base,
            lr.total_steps or cfg.num_steps,
            warmup_learning_rate=lr.warmup_learning_rate,
            warmup_steps=lr.warmup_steps,
            hold_base_rate_steps=lr.hold_base_rate_steps,
        )
    if isinstance(lr, S.ManualStepLearningRateConfig):
        return optim.manual_stepping(list(lr.boundaries), list(lr.rates), warmup=lr.warmup)
    if isinstance(lr, S.ExponentialLearningRateConfig):
        return optim.exponential_decay(
            lr.initial_learning_rate,
            lr.decay_steps,
            lr.decay_factor,
            staircase=lr.staircase,
            burnin_learning_rate=lr.burnin_learning_rate,
            burnin_steps=lr.burnin_steps,
            min_learning_rate=lr.min_learning_rate,
        )
    return optim.constant(lr.learning_rate)


def build_optimizer(
    cfg: S.TrainConfig, variable_names: dict[str, list[str]] | None = None,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optimizer and learning-rate schedule of ``train``. ``variable_names``: other names
    of the parameters (``{path: [name, ...]}``, e.g. TF variable names from
    ``weights.tf_variable_names``) that ``freeze_variables`` regexes may match."""
    o = cfg.optimizer
    schedule = build_schedule(cfg)
    tx = optim.make_optimizer(
        o.name,
        schedule,
        momentum=o.momentum,
        nesterov=o.nesterov,
        beta1=o.beta1,
        beta2=o.beta2,
        epsilon=o.epsilon,
        rmsprop_decay=o.rmsprop_decay,
        weight_decay=o.weight_decay,
        clip_gradient_norm=o.clip_gradient_norm,
        freeze_variables=tuple(cfg.freeze_variables),
        update_trainable_variables=tuple(cfg.update_trainable_variables),
        variable_names=variable_names,
    )
    return tx, schedule


def build_loss_scale(config: S.Config) -> LossScaleParams | None:
    """Dynamic loss-scaling settings for ``precision: fp16`` (``train.loss_scale``); None for
    fp32 / bf16, which need none."""
    if config.precision != "fp16":
        return None
    return LossScaleParams(**config.train.loss_scale.model_dump())


def predict_compiler_options(config: S.Config) -> dict[str, str] | None:
    """``compiler_options`` for jitting ``task.predict`` of ``config``: on CPU, Eigen
    convolutions for a detector with a ResNet backbone (``resnet*``, ``resnet_v2_*``), where
    they were faster than YNNPACK's; None for every other model (see ``jaxdet.xla_cpu``)."""
    backbone = getattr(getattr(config.model, "backbone", None), "name", "") or ""
    return cpu_compiler_options(
        eigen_convolutions=config.data.type == "images" and backbone.startswith("resnet"))


def build_train_step(
    config: S.Config,
    task: Task,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    *,
    state_sharding=None,
    batch_sharding=None,
    raw_pixels: bool = False,
):
    """The jitted ``step(state, batch) -> (state, metrics)`` of ``config``: EMA,
    ``train.accumulate_steps``, fp16 loss scaling and ``allow_tf32`` (see
    ``train.step.make_train_step``; its state comes from ``init_train_state(...,
    loss_scale=build_loss_scale(config))``). On CPU, a detector's step runs its convolutions
    with Eigen (``jaxdet.xla_cpu``).

    ``raw_pixels``: the batches come from :func:`build_train_loader` (raw ``images`` and
    ``image_info``, :func:`train_batch_layout`), and the step normalizes them first
    (:func:`build_normalizer`); else they hold the network's input already."""
    normalizer = build_normalizer(config) if raw_pixels else None
    return make_train_step(
        task,
        tx,
        schedule,
        ema_decay=config.train.ema_decay,
        ema_dynamic_decay=config.train.ema_dynamic_decay,
        accumulate_steps=config.train.accumulate_steps,
        loss_scale=build_loss_scale(config),
        allow_tf32=config.allow_tf32,
        state_sharding=state_sharding,
        batch_sharding=batch_sharding,
        compiler_options=cpu_compiler_options(eigen_convolutions=config.data.type == "images"),
        normalizer=None if normalizer is None else normalizer.normalize_batch,
    )
