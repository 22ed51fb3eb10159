"""The ``model`` section of the config schema: backbone, neck, anchors, head, box coder,
matcher, loss, hard example mining and post-processing, the SSD family's model (re-exported by
``schema.py``; CenterNet's in ``schema_center_net.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import BatchNormConfig, Strict, later_field

Activation = Literal["relu", "relu6", "swish", "none"]


EFFICIENTNETS = tuple(f"efficientnet_b{i}" for i in range(8))
RESNETS_V2 = ("resnet_v2_50", "resnet_v2_101")
HOURGLASSES = tuple(f"hourglass_{n}" for n in (10, 20, 32, 52, 104))


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

    ``conv_bias`` (ResNets): every convolution has a bias, as the ResNets of
    ``tf.keras.applications`` do (the TF OD API's CenterNet ResNet-v1 FPN feature extractors
    need it).

    ``head_scaling`` (MobileNetV2): whether the multiplier scales its 1280-channel head conv
    above 1 only (``above_1``: Keras applications and timm, whose weights jaxdet reads) or
    below 1 only (``below_1``: the TF OD API's Keras MobileNetV2, which a converted TF SSD at a
    multiplier other than 1 sets); None: the network's own (``above_1``; ``below_1`` in
    CenterNet's MobileNetV2-FPN).

    ``tf_endpoints`` (EfficientNets): each level's map is the TF OD API EfficientDet's fixed
    layer instead of its stage's end (automl, effdet): level 5 after the first block of the
    last stage (whose later blocks are never applied there, so not built), levels 2-4 after
    blocks 1, 1 and 2 of their stages, inside B1-B7's deeper stages. The same network for
    B0.

    The TF OD API's other CenterNet feature extractors, built as TF builds them (no
    multiplier, activation, padding or conv_bias options): ``resnet_v2_50`` /
    ``resnet_v2_101`` (``tf.keras.applications`` pre-activation ResNet-v2, levels 2-5; with
    the ``center_net_deconv`` neck; TF's BatchNorm epsilon is 1.001e-5) and ``hourglass_104``
    (two stacked hourglasses; also the single-stack ``hourglass_10/20/32/52``), which ends in
    its own stride-4 map at level 2 (read it with the ``identity`` neck; TF's BatchNorm is
    epsilon 1e-5, ``decay: 0.1``; inputs must divide by 128 for Hourglass-104). The
    MobileNetV2-FPN extractor is ``mobilenet_v2`` with the ``center_net_mobilenet_v2_fpn``
    neck, which also picks TF's levels and head width (``padding: same`` as TF).

    ``inception_resnet_v2`` (Faster / Mask R-CNN only): ``tf.keras.applications``'
    Inception-ResNet-v2 as the TF OD API's ``faster_rcnn_inception_resnet_v2_keras`` builds it
    (every padding SAME, BatchNorm without a learned scale), split at ``block17_20`` (stride
    16, 1088 channels) into the first stage and the box classifier (``mixed_7a``, the
    ``block8`` repeats, ``conv_7b``: 1536 channels); no multiplier, activation or padding
    options.
    """

    name: Literal[
        "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "mobilenet_v1",
        "mobilenet_v2", *EFFICIENTNETS, *RESNETS_V2, *HOURGLASSES, "inception_resnet_v2",
    ]
    depth_multiplier: float = Field(1.0, gt=0.0)
    min_depth: int = Field(8, ge=1)
    activation: Activation | None = None
    batch_norm: BatchNormConfig = BatchNormConfig()
    drop_connect_rate: float = Field(0.2, ge=0.0, lt=1.0)
    padding: Literal["symmetric", "same"] | None = None
    stride_in_1x1: bool = False
    tf_endpoints: bool = False
    conv_bias: bool = later_field(False)
    head_scaling: Literal["above_1", "below_1"] | None = later_field(None)

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
        if self.name in (*RESNETS_V2, *HOURGLASSES, "inception_resnet_v2"):
            fixed = {"depth_multiplier": 1.0, "activation": None, "padding": None,
                     "conv_bias": False}
            bad = [k for k, v in fixed.items() if getattr(self, k) != v]
            if bad:
                raise ValueError(f"{self.name} is the TF OD API's network as it is: leave "
                                 f"model.backbone.{bad[0]} at {fixed[bad[0]]}")
        return self


class FPNConfig(Strict):
    """Feature pyramid over backbone levels; levels above the backbone by strided convs.

    ``top_down``: what each level passes down: ``merged`` (its 1x1 projection plus the
    upsampled map above, before the 3x3 smoothing: the FPN paper, torchvision, TF1 slim) or
    ``smoothed`` (its smoothed output: the TF2 Keras FPN of the TF OD API, whose checkpoints
    need it).

    The other fields default to the TF OD API's FPN; torchvision's (``retinanet_resnet50_fpn``)
    is ``norm: none``, ``activation: none``, ``smooth_top: true``, ``extra_input_activation:
    relu``, ``padding: symmetric``. ``norm``: ``batch_norm`` after every 3x3 conv (smoothing
    and extra levels), or ``none`` (those convs get a bias instead). ``smooth_top``: the top
    backbone level's 1x1 projection goes through a 3x3 conv too, as every other level's
    (torchvision; TF outputs the projection as it is). ``extra_input_activation``: applied to
    each extra level before the next extra level's stride-2 conv takes it, not to the level's
    own output (torchvision: P7 = conv(relu(P6)), P6 output without activation); the first
    extra level takes the top FPN output as it is. ``padding`` of the stride-2 extra convs:
    ``same`` (TF: bottom/right only, on an even input) or ``symmetric`` (PyTorch: one row and
    column on every side).
    """

    name: Literal["fpn"]
    min_level: int = Field(3, ge=2, le=9)
    max_level: int = Field(7, ge=2, le=9)
    depth: int = Field(256, ge=1)
    activation: Activation = "relu6"
    use_depthwise: bool = False
    top_down: Literal["merged", "smoothed"] = "merged"
    norm: Literal["batch_norm", "none"] = later_field("batch_norm")
    smooth_top: bool = later_field(False)
    extra_input_activation: Activation = later_field("none")
    padding: Literal["same", "symmetric"] = later_field("same")

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

    ``aspect_ratios`` are width / height. Within a location the anchors go scale outer,
    aspect ratio inner, centred at ``(i + 0.5) * stride`` (as effdet weights expect).
    ``tf_layout: true`` is the TF OD API's layout, which its checkpoints need: aspect ratio
    outer, scale inner, and centres at ``i * stride`` on an axis whose image size the level's
    stride does not divide. ``torchvision_layout: true`` is torchvision's ``AnchorGenerator``
    (``retinanet_resnet50_fpn`` weights need it): aspect ratio outer, scale inner; sizes
    truncated to whole pixels (``int(anchor_scale * 2**level * 2**(i / scales_per_octave))``)
    and half widths / heights rounded to whole pixels; centres at ``i * stride`` with the
    stride ``image size // feature map size`` (not ``2**level`` where the image size does
    not divide by it: P6/P7 of most inputs)."""

    name: Literal["multiscale"]
    min_level: int = Field(3, ge=2, le=9)
    max_level: int = Field(7, ge=2, le=9)
    anchor_scale: float = Field(4.0, gt=0.0)
    scales_per_octave: int = Field(2, ge=1)
    aspect_ratios: tuple[float, ...] = (1.0, 2.0, 0.5)
    tf_layout: bool = False
    torchvision_layout: bool = later_field(False)

    @model_validator(mode="after")
    def _one_layout(self) -> MultiscaleAnchorsConfig:
        if self.tf_layout and self.torchvision_layout:
            raise ValueError("tf_layout and torchvision_layout exclude each other: set one of "
                             "model.anchors.tf_layout / torchvision_layout to false")
        return self


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
    """How box regression targets are encoded relative to anchors. ``max_log_scale``
    (``faster_rcnn``): decoding clamps the log height and width ratios (after ``scales``) to
    at most this before ``exp``, as torchvision does with ``log(1000 / 16)`` = 4.1352;
    null: no clamp (TF)."""

    name: Literal["faster_rcnn", "mean_stddev"] = "faster_rcnn"
    scales: tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)
    stddev: float = Field(0.01, gt=0.0)
    max_log_scale: float | None = None


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


class SSDModelConfig(Strict):
    """A single-stage detector: backbone -> neck -> box predictor over anchors.

    ``tf_background_logit``: the TF OD API's model of this config predicts a background logit
    per anchor that jaxdet's leaves out (a sigmoid SSD with TF's ``add_background_class`` and
    ``encode_background_as_zeros``: TF drops that column from its scores); a run written as a
    TF checkpoint gets it back, as zeros. A converted pipeline.config sets it."""

    type: Literal["ssd"] = "ssd"
    num_classes: int = Field(ge=1)
    add_background_class: bool = False
    tf_background_logit: bool = later_field(False)
    backbone: BackboneConfig
    neck: NeckConfig
    anchors: AnchorsConfig
    head: HeadConfig
    box_coder: BoxCoderConfig = BoxCoderConfig()
    matcher: MatcherConfig = MatcherConfig()
    loss: LossConfig = LossConfig()
    hard_example_miner: HardExampleMinerConfig | None = None
    post_processing: PostProcessingConfig = PostProcessingConfig()
