"""The typed configuration schema: every field a jaxdet config may hold, with its default.

A config is a YAML file validated by :class:`Config`. Unknown fields are errors (see
``config/loader.py`` for the messages), and every choice is a ``Literal`` so a bad value is
reported with the allowed ones. Sections with several kinds (``neck``, ``anchors``, ``head``,
``resizer``, ``learning_rate``, data sources and augment ops) are tagged unions selected by
their ``name`` (or ``type``) field. The augment-op sections live in ``schema_augment.py`` and
are re-exported here.
"""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from jaxdet.config.schema_augment import (  # noqa: F401  (re-exported)
    AugmentConfig,
    PadColor,
    RandomAbsolutePadImageConfig,
    RandomAdjustBrightnessConfig,
    RandomAdjustContrastConfig,
    RandomAdjustHueConfig,
    RandomAdjustSaturationConfig,
    RandomBlackPatchesConfig,
    RandomColorJitterConfig,
    RandomCropImageConfig,
    RandomDistortColorConfig,
    RandomHorizontalFlipConfig,
    RandomPadImageConfig,
    RandomScaleCropAndPadToSquareConfig,
    RandomSquareCropByScaleConfig,
    SSDRandomCropConfig,
)
from jaxdet.config.schema_base import Strict

log = logging.getLogger("jaxdet.config")

# --------------------------------------------------------------------------- model


class BatchNormConfig(Strict):
    """BatchNorm hyper-parameters (TF OD API: decay, epsilon, train)."""

    decay: float = Field(0.997, gt=0.0, lt=1.0)
    epsilon: float = Field(1e-3, gt=0.0)
    frozen: bool = False


Activation = Literal["relu", "relu6", "swish", "none"]


EFFICIENTNETS = tuple(f"efficientnet_b{i}" for i in range(8))


class BackboneConfig(Strict):
    """Feature extractor. ``depth_multiplier`` scales channel widths (ResNet: the stem and
    stage widths — 1.0 is the torchvision network; MobileNets: as TF); ``min_depth`` applies
    to MobileNets only. EfficientNets take their width and depth from the variant name
    (b0..b7, the compound-scaling coefficients), so ``depth_multiplier`` must stay 1.0;
    ``drop_connect_rate`` is their stochastic depth (the last block's drop rate; earlier
    blocks scale linearly with their index), used in training only.

    ``activation`` None keeps the network's own (relu for ResNet, relu6 for MobileNets); TF OD
    API configs with ``override_base_feature_extractor_hyperparams`` use their conv_hyperparams
    activation (RELU_6) inside the backbone too. ``batch_norm`` also covers the neck (TF:
    ``feature_extractor.conv_hyperparams`` serves both).

    ``padding`` of the strided convolutions: ``symmetric`` (PyTorch, torchvision/timm weights)
    or ``same`` (TensorFlow's SAME: one more row/column at the bottom/right when the total is
    odd; TF OD API checkpoints need it). None: the network's own (symmetric for ResNets and
    MobileNets, same for EfficientNets, which support nothing else). For ResNets ``same``
    pads the stem's max pool as TF does (the strided 7x7 keeps TF's explicit padding, which
    is symmetric).

    ``stride_in_1x1`` (bottleneck ResNets): each stage strides in its first block's 1x1
    convolutions, as TF's Keras ResNet v1 (the TF OD API's SSD ResNet-FPN) does, instead of
    in the 3x3 (torchvision's "v1.5").

    ``tf_endpoints`` (EfficientNets): level 5 is the output of the first block of the last
    stage, as in the TF OD API's EfficientDet (its checkpoints need it; the stage's later
    blocks are never applied there, so they are not built), instead of the stage's end
    (automl, effdet). The same network for B0, whose last stage has one block.
    """

    name: Literal[
        "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "mobilenet_v1",
        "mobilenet_v2", *EFFICIENTNETS,
    ]
    depth_multiplier: float = Field(1.0, gt=0.0)
    min_depth: int = Field(8, ge=1)
    activation: Activation | None = None
    batch_norm: BatchNormConfig = BatchNormConfig()
    drop_connect_rate: float = Field(0.2, ge=0.0, lt=1.0)
    padding: Literal["symmetric", "same"] | None = None
    stride_in_1x1: bool = False
    tf_endpoints: bool = False

    @model_validator(mode="after")
    def _efficientnet_scaling(self) -> BackboneConfig:
        if self.name.startswith("efficientnet") and self.depth_multiplier != 1.0:
            raise ValueError(
                f"depth_multiplier must be 1.0 for {self.name}: EfficientNets scale by variant "
                f"(choose one of {', '.join(EFFICIENTNETS)})"
            )
        if self.stride_in_1x1 and self.name not in ("resnet50", "resnet101", "resnet152"):
            raise ValueError(f"stride_in_1x1 applies to bottleneck ResNets (resnet50/101/152), "
                             f"not {self.name}: set model.backbone.stride_in_1x1: false")
        if self.tf_endpoints and not self.name.startswith("efficientnet"):
            raise ValueError(f"tf_endpoints applies to EfficientNets, not {self.name}: set "
                             "model.backbone.tf_endpoints: false")
        if self.name.startswith("efficientnet") and self.padding == "symmetric":
            raise ValueError(f"padding must be 'same' (or null) for {self.name}: EfficientNets "
                             "use TensorFlow's SAME padding only")
        return self


class FPNConfig(Strict):
    """Feature pyramid over backbone levels; levels above the backbone by strided convs.

    ``top_down``: what each level passes down: ``merged`` (its 1x1 projection plus the
    upsampled map above, before the 3x3 smoothing: the FPN paper, torchvision, TF1 slim) or
    ``smoothed`` (its smoothed output: the TF2 Keras FPN of the TF OD API, whose checkpoints
    need it)."""

    name: Literal["fpn"]
    min_level: int = Field(3, ge=2, le=9)
    max_level: int = Field(7, ge=2, le=9)
    depth: int = Field(256, ge=1)
    activation: Activation = "relu6"
    use_depthwise: bool = False
    top_down: Literal["merged", "smoothed"] = "merged"

    @model_validator(mode="after")
    def _levels_ordered(self) -> FPNConfig:
        if self.min_level > self.max_level:
            raise ValueError(f"min_level ({self.min_level}) > max_level ({self.max_level})")
        return self


class SSDFeatureMapsConfig(Strict):
    """Classic SSD: backbone levels 4 and 5 plus extra 1x1 / 3x3-stride-2 layers."""

    name: Literal["ssd_feature_maps"]
    extra_depths: tuple[int, ...] = (512, 256, 256, 128)
    activation: Activation = "relu6"
    use_depthwise: bool = False


class BiFPNConfig(Strict):
    """EfficientDet's weighted bidirectional FPN: ``num_iterations`` cells of top-down plus
    bottom-up fusion over ``min_level..max_level`` (levels above the backbone come from 1x1
    conv + BN + stride-2 pooling). ``weight_method``: ``fastattn`` (ReLU weights normalized by
    their sum, the paper's fast normalized fusion), ``attn`` (softmax weights) or ``sum``
    (unweighted; EfficientDet D6-D7x). Every node is activation -> separable (or plain, with
    ``use_depthwise: false``) 3x3 conv -> BN."""

    name: Literal["bifpn"]
    min_level: int = Field(3, ge=2, le=9)
    max_level: int = Field(7, ge=2, le=9)
    num_filters: int = Field(64, ge=1)
    num_iterations: int = Field(3, ge=1)
    weight_method: Literal["fastattn", "attn", "sum"] = "fastattn"
    activation: Activation = "swish"
    use_depthwise: bool = True
    pooling: Literal["max", "avg"] = "max"

    @model_validator(mode="after")
    def _levels_ordered(self) -> BiFPNConfig:
        if self.min_level >= self.max_level:
            raise ValueError(f"min_level ({self.min_level}) must be < max_level ({self.max_level})")
        return self


NeckConfig = Annotated[
    FPNConfig | SSDFeatureMapsConfig | BiFPNConfig, Field(discriminator="name")
]


class MultiscaleAnchorsConfig(Strict):
    """RetinaNet anchors: per level, size anchor_scale * 2**level, scales per octave x ratios.

    Within a location the anchors go scale outer, aspect ratio inner, centred at
    ``(i + 0.5) * stride`` (as effdet/torchvision weights expect). ``tf_layout: true`` is the
    TF OD API's layout, which its checkpoints need: aspect ratio outer, scale inner, and
    centres at ``i * stride`` on an axis whose image size the level's stride does not divide."""

    name: Literal["multiscale"]
    min_level: int = Field(3, ge=2, le=9)
    max_level: int = Field(7, ge=2, le=9)
    anchor_scale: float = Field(4.0, gt=0.0)
    scales_per_octave: int = Field(2, ge=1)
    aspect_ratios: tuple[float, ...] = (1.0, 2.0, 0.5)
    tf_layout: bool = False


class SSDAnchorsConfig(Strict):
    """SSD anchors: scales linear from min_scale to max_scale over num_layers feature maps."""

    name: Literal["ssd"]
    num_layers: int = Field(6, ge=1)
    min_scale: float = Field(0.2, gt=0.0)
    max_scale: float = Field(0.95, gt=0.0)
    aspect_ratios: tuple[float, ...] = (1.0, 2.0, 0.5, 3.0, 0.3333)
    interpolated_scale_aspect_ratio: float = 1.0
    reduce_boxes_in_lowest_layer: bool = True
    base_anchor_size: tuple[float, float] = (1.0, 1.0)


AnchorsConfig = Annotated[
    MultiscaleAnchorsConfig | SSDAnchorsConfig, Field(discriminator="name")
]


class WeightSharedHeadConfig(Strict):
    """RetinaNet box predictor: class and box towers shared across levels.

    ``share_prediction_tower`` uses one tower for both the class and the box predictions (TF
    FPN-lite); ``batch_norm`` is the tower's BatchNorm (TF: ``box_predictor.conv_hyperparams``).
    ``use_bias`` gives the tower convs a bias even with a norm (TF ``force_use_bias``;
    EfficientDet's heads have one).
    """

    name: Literal["weight_shared"]
    depth: int = Field(256, ge=1)
    num_layers_before_predictor: int = Field(4, ge=0)
    kernel_size: int = Field(3, ge=1)
    norm: Literal["batch_norm", "group_norm", "none"] = "batch_norm"
    share_norm_across_levels: bool = False
    prior_probability: float = Field(0.01, gt=0.0, lt=1.0)
    activation: Activation = "relu6"
    use_depthwise: bool = False
    share_prediction_tower: bool = False
    use_bias: bool = False
    batch_norm: BatchNormConfig = BatchNormConfig()


class ConvolutionalHeadConfig(Strict):
    """Plain SSD predictor: one conv per feature map."""

    name: Literal["convolutional"]
    kernel_size: int = Field(1, ge=1)
    num_layers_before_predictor: int = Field(0, ge=0)
    depth: int = Field(0, ge=0)
    use_dropout: bool = False
    dropout_keep_prob: float = Field(0.8, gt=0.0, le=1.0)
    class_prediction_bias_init: float = 0.0


HeadConfig = Annotated[
    WeightSharedHeadConfig | ConvolutionalHeadConfig, Field(discriminator="name")
]


class BoxCoderConfig(Strict):
    """How box regression targets are encoded relative to anchors."""

    name: Literal["faster_rcnn", "mean_stddev"] = "faster_rcnn"
    scales: tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)
    stddev: float = Field(0.01, gt=0.0)


class MatcherConfig(Strict):
    """Matcher on IoU between anchors and ground truth: ``argmax`` (thresholds below) or
    ``bipartite`` (TF greedy bipartite: one anchor per ground truth; thresholds unused)."""

    name: Literal["argmax", "bipartite"] = "argmax"
    matched_threshold: float = Field(0.5, ge=0.0, le=1.0)
    unmatched_threshold: float = Field(0.5, ge=0.0, le=1.0)
    negatives_lower_than_unmatched: bool = True
    force_match_for_each_row: bool = True

    @model_validator(mode="after")
    def _thresholds_ordered(self) -> MatcherConfig:
        if self.unmatched_threshold > self.matched_threshold:
            raise ValueError(
                f"unmatched_threshold ({self.unmatched_threshold}) must be <= "
                f"matched_threshold ({self.matched_threshold})"
            )
        return self


class LossConfig(Strict):
    """Classification and localization losses and their weights.

    ``normalize_loc_loss_by_codesize`` divides the localization loss by the box code size (4),
    as TF OD API's option of that name does. ``alpha``/``gamma``: sigmoid_focal;
    ``bootstrap_alpha``/``hard_bootstrap``: bootstrapped_sigmoid (TF alpha / hard_bootstrap);
    ``logit_scale``: softmax (needs ``model.add_background_class``).
    """

    classification: Literal[
        "sigmoid_focal", "weighted_sigmoid", "bootstrapped_sigmoid", "softmax"
    ] = "sigmoid_focal"
    alpha: float | None = 0.25
    gamma: float = Field(2.0, ge=0.0)
    bootstrap_alpha: float = Field(0.5, ge=0.0, le=1.0)
    hard_bootstrap: bool = False
    logit_scale: float = Field(1.0, gt=0.0)
    localization: Literal["smooth_l1", "l1", "l2", "giou"] = "smooth_l1"
    delta: float = Field(1.0, gt=0.0)
    classification_weight: float = Field(1.0, ge=0.0)
    localization_weight: float = Field(1.0, ge=0.0)
    normalize_by_num_matches: bool = True
    normalize_loc_loss_by_codesize: bool = False


class HardExampleMinerConfig(Strict):
    """TF OD API ``HardExampleMiner``: per image, NMS (``iou_threshold``) over the predicted
    boxes scored by their loss keeps the ``num_hard_examples`` hardest anchors (0: all that
    NMS leaves), then at most ``max(min_negatives_per_image, max_negatives_per_positive *
    positives)`` of their negatives (``max_negatives_per_positive`` 0: no cap)."""

    num_hard_examples: int = Field(64, ge=0)
    iou_threshold: float = Field(0.7, gt=0.0, le=1.0)
    loss_type: Literal["both", "classification", "localization"] = "both"
    max_negatives_per_positive: float = Field(0, ge=0.0)
    min_negatives_per_image: int = Field(0, ge=0)


class PostProcessingConfig(Strict):
    """Score conversion and static-shape non-max suppression."""

    score_converter: Literal["sigmoid", "softmax", "identity"] = "sigmoid"
    logit_scale: float = Field(1.0, gt=0.0)
    score_threshold: float = Field(1e-8, ge=0.0)
    iou_threshold: float = Field(0.6, gt=0.0, le=1.0)
    max_detections_per_class: int = Field(100, ge=1)
    max_total_detections: int = Field(100, ge=1)
    class_agnostic: bool = False
    pre_nms_top_k: int = Field(1000, ge=1)


class ModelConfig(Strict):
    """A single-stage detector: backbone -> neck -> box predictor over anchors."""

    type: Literal["ssd"] = "ssd"
    num_classes: int = Field(ge=1)
    add_background_class: bool = False
    backbone: BackboneConfig
    neck: NeckConfig
    anchors: AnchorsConfig
    head: HeadConfig
    box_coder: BoxCoderConfig = BoxCoderConfig()
    matcher: MatcherConfig = MatcherConfig()
    loss: LossConfig = LossConfig()
    hard_example_miner: HardExampleMinerConfig | None = None
    post_processing: PostProcessingConfig = PostProcessingConfig()


# --------------------------------------------------------------------------- data


class CocoDataConfig(Strict):
    """A COCO instances JSON file and the folder its ``file_name`` entries are relative to.
    ``class_index``: ``contiguous`` (the file's categories in id order are classes 0, 1, ...)
    or ``id_minus_one`` (class = category id - 1, gaps kept: how TF OD API models number
    COCO, so a 90-class zoo model evaluates on COCO's own JSON)."""

    type: Literal["coco"]
    annotation_file: str
    image_dir: str
    class_index: Literal["contiguous", "id_minus_one"] = "contiguous"


class VocDataConfig(Strict):
    """Pascal VOC: a folder of XML annotations and a folder of images."""

    type: Literal["voc"]
    annotation_dir: str
    image_dir: str
    class_names: tuple[str, ...] | None = None


class ShapesDataConfig(Strict):
    """Generated shapes (written as COCO JSON under ``output_dir``, reused when present)."""

    type: Literal["shapes"]
    output_dir: str = "data/shapes_train"
    num_images: int = Field(512, ge=1)
    seed: int = 0
    image_size: tuple[int, int] = (128, 128)
    num_classes: int = Field(3, ge=1)
    max_objects: int = Field(6, ge=1)
    min_size_frac: float = Field(0.08, gt=0.0, le=1.0)
    max_size_frac: float = Field(0.6, gt=0.0, le=1.0)


class TfRecordDataConfig(Strict):
    """TF OD API TFRecord files of tf.train.Example (``input_path``: files or globs such as
    ``train-?????-of-00256.tfrecord``; one string or a list). Class index = label - 1; names
    from ``label_map_path`` (a StringIntLabelMap pbtxt) when given."""

    type: Literal["tfrecord"]
    input_path: tuple[str, ...] = Field(min_length=1)
    label_map_path: str | None = None

    @field_validator("input_path", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return (value,) if isinstance(value, str) else value


DatasetConfig = Annotated[
    CocoDataConfig | VocDataConfig | ShapesDataConfig | TfRecordDataConfig,
    Field(discriminator="type"),
]


ResizeMethod = Literal["bilinear", "tf_bilinear"]


class FixedShapeResizerConfig(Strict):
    """Resize every image to ``height`` x ``width`` (aspect ratio not kept). ``method``:
    ``bilinear`` (antialiased when shrinking, half-pixel centres) or ``tf_bilinear`` (the TF
    OD API's ``tf.compat.v1`` resize: no antialiasing, pixel i samples the input at
    ``i * in / out``; what TF OD API checkpoints were trained on)."""

    name: Literal["fixed_shape"]
    height: int = Field(ge=1)
    width: int = Field(ge=1)
    method: ResizeMethod = "bilinear"


class KeepAspectRatioResizerConfig(Strict):
    """Scale the shorter side to ``min_dimension`` unless the longer one would exceed
    ``max_dimension`` (then the longer side to it), and pad bottom/right to a
    ``max_dimension`` square. ``method`` as for ``fixed_shape``."""

    name: Literal["keep_aspect_ratio"]
    min_dimension: int = Field(ge=1)
    max_dimension: int = Field(ge=1)
    pad_to_max_dimension: bool = True
    method: ResizeMethod = "bilinear"


ResizerConfig = Annotated[
    FixedShapeResizerConfig | KeepAspectRatioResizerConfig, Field(discriminator="name")
]


class DataConfig(Strict):
    """Where images come from, how they are augmented and brought to one static shape."""

    train: DatasetConfig | None = None
    eval: DatasetConfig | None = None
    resizer: ResizerConfig
    augment: tuple[AugmentConfig, ...] = ()
    mean: tuple[float, float, float] = (123.675, 116.28, 103.53)
    std: tuple[float, float, float] = (58.395, 57.12, 57.375)
    max_number_of_boxes: int = Field(100, ge=1)
    worker_count: int = Field(0, ge=0)


# --------------------------------------------------------------------------- train


class OptimizerConfig(Strict):
    """The optimizer. ``momentum``/``nesterov`` apply to momentum SGD, ``beta1``/``beta2`` to
    Adam(W), ``rmsprop_decay`` (and ``momentum``) to RMSProp; ``weight_decay`` is coupled L2
    for SGD/Adam/RMSProp and decoupled for AdamW."""

    # A base config's optimizer is replaced, not merged, when a derived config names another.
    TAG_SELECTS_KIND: ClassVar[bool] = True

    name: Literal["momentum", "sgd", "adam", "adamw", "rmsprop"] = "momentum"
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    nesterov: bool = False
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)
    epsilon: float = Field(1e-8, gt=0.0)
    rmsprop_decay: float = Field(0.9, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    clip_gradient_norm: float | None = Field(None, gt=0.0)


class CosineLearningRateConfig(Strict):
    """Cosine decay with linear warmup; ``total_steps`` defaults to ``train.num_steps``."""

    name: Literal["cosine"]
    learning_rate_base: float = Field(gt=0.0)
    total_steps: int | None = Field(None, ge=1)
    warmup_learning_rate: float = Field(0.0, ge=0.0)
    warmup_steps: int = Field(0, ge=0)
    hold_base_rate_steps: int = Field(0, ge=0)


class ManualStepLearningRateConfig(Strict):
    name: Literal["manual_step"]
    boundaries: tuple[int, ...]
    rates: tuple[float, ...]
    warmup: bool = False

    @model_validator(mode="after")
    def _lengths(self) -> ManualStepLearningRateConfig:
        if len(self.rates) != len(self.boundaries) + 1:
            raise ValueError(
                f"rates needs len(boundaries) + 1 = {len(self.boundaries) + 1} values, "
                f"got {len(self.rates)}"
            )
        return self


class ExponentialLearningRateConfig(Strict):
    name: Literal["exponential"]
    initial_learning_rate: float = Field(gt=0.0)
    decay_steps: int = Field(ge=1)
    decay_factor: float = Field(gt=0.0)
    staircase: bool = True
    burnin_learning_rate: float = Field(0.0, ge=0.0)
    burnin_steps: int = Field(0, ge=0)
    min_learning_rate: float = Field(0.0, ge=0.0)


class ConstantLearningRateConfig(Strict):
    name: Literal["constant"]
    learning_rate: float = Field(gt=0.0)


LearningRateConfig = Annotated[
    CosineLearningRateConfig
    | ManualStepLearningRateConfig
    | ExponentialLearningRateConfig
    | ConstantLearningRateConfig,
    Field(discriminator="name"),
]


class LossScaleConfig(Strict):
    """Dynamic loss scaling, used only with ``precision: fp16``: the loss is multiplied by
    ``scale`` before differentiation and the gradients divided by it; a step whose gradients are
    not finite is skipped and the scale divided by ``factor``; after ``growth_interval``
    finite steps in a row it is multiplied by ``factor``."""

    initial_scale: float = Field(2.0**15, gt=0.0)
    growth_interval: int = Field(2000, ge=1)
    factor: float = Field(2.0, gt=1.0)
    min_scale: float = Field(1.0, gt=0.0)


class InitCheckpointConfig(Strict):
    """Weights to start training from (used only when the workdir has no checkpoint yet).

    ``path``: a TF OD API checkpoint (``checkpoint/ckpt-0``: its prefix, ``.index`` or
    folder), a jaxdet workdir (its latest checkpoint) or a PyTorch state dict
    (``.safetensors``, or ``.pth`` read by an installed torch with ``weights_only=True``): an
    effdet EfficientDet, or a torchvision ResNet / timm MobileNet or EfficientNet backbone.
    ``format``: ``auto`` tells them apart. ``restore`` (TF's ``fine_tune_checkpoint_type``):
    ``full`` (every tensor; the model must be the checkpoint's), ``detection`` (every tensor
    whose shape fits: a class predictor for another class count keeps its fresh
    initialization) or
    ``classification`` (the backbone alone, from a classification checkpoint or the
    backbone of a detection one). One line at start says what was restored, re-initialised
    and left unused (each name with ``-v``)."""

    path: str
    format: Literal["auto", "tf", "jaxdet", "torch"] = "auto"
    restore: Literal["full", "detection", "classification"] = "detection"


RematTarget = Literal[
    "backbone", "backbone.level2", "backbone.level3", "backbone.level4", "backbone.level5",
    "neck", "head",
]


class TrainConfig(Strict):
    """Batch, steps, optimizer and schedule, checkpoints. ``ema_decay`` keeps a moving average
    of the weights (used at eval with ``eval.use_ema``); ``ema_dynamic_decay`` caps its decay
    at ``(1 + step) / (10 + step)`` early in training (TF's ``num_updates``, the EfficientDet
    recipe). ``remat`` recomputes the listed parts in the backward pass instead of keeping
    their activations (gradient checkpointing): ``backbone.levelN`` = the backbone blocks
    ending at stride 2**N (one checkpoint per block), ``backbone`` = all of them, ``neck``,
    ``head`` (one checkpoint per level). Same gradients, less memory, ~1 more forward pass of
    those parts."""

    batch_size: int = Field(8, ge=1)
    num_steps: int = Field(1000, ge=1)
    seed: int = 0
    optimizer: OptimizerConfig = OptimizerConfig()
    learning_rate: LearningRateConfig = CosineLearningRateConfig(
        name="cosine", learning_rate_base=0.04, warmup_learning_rate=0.013, warmup_steps=100
    )
    ema_decay: float | None = Field(None, gt=0.0, lt=1.0)
    ema_dynamic_decay: bool = False
    accumulate_steps: int = Field(1, ge=1)
    remat: tuple[RematTarget, ...] = ()
    loss_scale: LossScaleConfig = LossScaleConfig()
    checkpoint_every: int = Field(1000, ge=1)
    keep_checkpoints: int = Field(3, ge=1)
    eval_every: int = Field(0, ge=0)
    log_every: int = Field(10, ge=1)
    freeze_variables: tuple[str, ...] = ()
    update_trainable_variables: tuple[str, ...] = ()
    init_checkpoint: InitCheckpointConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _schedule_fits_the_run(cls, data: Any) -> Any:
        """A cosine warm-up longer than the schedule (``--set train.num_steps=80`` on a config
        with 100 warm-up steps) is shortened to a tenth of the schedule, with a warning; a
        schedule longer than the run is only warned about."""
        if not isinstance(data, dict):
            return data
        lr = data.get("learning_rate", cls.model_fields["learning_rate"].default)
        lr = lr.model_dump() if isinstance(lr, BaseModel) else lr
        if not isinstance(lr, dict) or lr.get("name") != "cosine":
            return data
        try:
            num_steps = int(data.get("num_steps", cls.model_fields["num_steps"].default))
            total = int(lr.get("total_steps") or num_steps)
            warmup = int(lr.get("warmup_steps", 0))
        except (TypeError, ValueError):
            return data  # field validation reports it
        which = ("train.learning_rate.total_steps" if lr.get("total_steps")
                 else "train.num_steps")
        if warmup > total:
            shortened = total // 10
            log.warning(
                "train.learning_rate.warmup_steps (%d) is longer than the schedule's %d steps "
                "(%s): warm-up shortened to %d steps, a tenth of it. Set "
                "train.learning_rate.warmup_steps to choose another length.",
                warmup, total, which, shortened)
            data = {**data, "learning_rate": {**lr, "warmup_steps": shortened}}
        elif lr.get("total_steps") and total > num_steps > 0:
            log.warning(
                "train.learning_rate.total_steps (%d) > train.num_steps (%d): the run stops "
                "before the cosine schedule has decayed. Set train.learning_rate.total_steps=%d "
                "(or null, to follow train.num_steps) unless that is what you want.",
                total, num_steps, num_steps)
        return data

    @model_validator(mode="after")
    def _accumulation_divides_batch(self) -> TrainConfig:
        if self.batch_size % self.accumulate_steps:
            raise ValueError(
                f"train.batch_size={self.batch_size} does not divide into "
                f"train.accumulate_steps={self.accumulate_steps} micro-batches; choose a "
                "batch size that is a multiple of accumulate_steps"
            )
        return self

    @field_validator("freeze_variables", "update_trainable_variables")
    @classmethod
    def _regexes_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        """Regexes (``re.search``) over '/'-joined parameter paths, e.g. ``^backbone/``:
        ``freeze_variables`` are not updated; when ``update_trainable_variables`` is set,
        only the parameters it matches are (TF OD API train_config fields)."""
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{pattern!r} is not a valid regular expression ({e})") from None
        return patterns


class EvalConfig(Strict):
    batch_size: int = Field(8, ge=1)
    max_images: int | None = Field(None, ge=1)
    use_ema: bool = True
    num_visualizations: int = Field(8, ge=0)
    metrics_set: tuple[Literal["coco_detection_metrics", "pascal_voc_detection_metrics"], ...] = (
        "coco_detection_metrics",
    )


class ParallelConfig(Strict):
    """How a step is split over devices: a mesh ``(data, spatial)`` over all devices of all
    processes. ``data`` shards the batch (-1: every device not used by ``spatial``),
    ``spatial`` shards image height (XLA exchanges the convolution halos). The batch size must
    divide by ``data`` and the image height by (largest feature stride x ``spatial``).
    ``shard_optimizer_state`` splits optimizer moments over ``data`` instead of replicating
    them. ``batch_norm_statistics``: ``global`` (over the whole batch, across devices) or
    ``per_device`` (each data shard normalizes with its own statistics)."""

    data: int = Field(-1, ge=-1)
    spatial: int = Field(1, ge=1)
    shard_optimizer_state: bool = False
    batch_norm_statistics: Literal["global", "per_device"] = "global"

    @field_validator("data")
    @classmethod
    def _data_not_zero(cls, v: int) -> int:
        if v == 0:
            raise ValueError("parallel.data must be -1 (all remaining devices) or >= 1")
        return v


class Config(Strict):
    """The whole run: model, data, train, eval, numeric precision and device layout.

    ``precision``: ``fp32``; ``bf16`` (bfloat16 compute, float32 parameters and optimizer
    state); ``fp16`` (float16 compute with dynamic loss scaling, see ``train.loss_scale``).
    ``allow_tf32``: let float32 matmuls and convolutions use TensorFloat-32 on GPUs that have it
    (false: full float32, ``jax_default_matmul_precision=highest``)."""

    name: str = ""
    description: str = ""
    model: ModelConfig
    data: DataConfig
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    allow_tf32: bool = True
    parallel: ParallelConfig = ParallelConfig()
