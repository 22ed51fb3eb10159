"""CenterNet's ``model`` section (``model.type: center_net``): its necks, loss,
post-processing, keypoint tasks and DeepMAC mask head (re-exported by ``schema.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import BatchNormConfig, Strict, later_field
from jaxdet.config.schema_deepmac import DeepMACMaskHeadConfig
from jaxdet.config.schema_model import BackboneConfig, FPNConfig

# tf.keras.layers.BatchNormalization()'s defaults (momentum 0.99, epsilon 1e-3): what the TF OD
# API's CenterNet necks use, whatever their backbone's batch norm.
KERAS_BATCH_NORM = BatchNormConfig(decay=0.99, epsilon=1e-3)


class CenterNetLossConfig(Strict):
    """CenterNet's loss (TF OD API ``object_center_params`` / ``object_detection_task``): the
    penalty-reduced focal loss on the center heatmap (``alpha``, ``beta``), L1 on box sizes and
    center offsets, weighted and divided by the batch's number of objects."""

    alpha: float = Field(2.0, gt=0.0)
    beta: float = Field(4.0, gt=0.0)
    heatmap_weight: float = Field(1.0, ge=0.0)
    size_weight: float = Field(0.1, ge=0.0)
    offset_weight: float = Field(1.0, ge=0.0)


class CenterNetPostProcessingConfig(Strict):
    """Peaks of the center heatmap: a pixel counts where it is the maximum of its
    ``peak_kernel`` x ``peak_kernel`` neighbourhood; the ``max_detections`` best are kept (TF
    ``max_box_predictions``); ``score_threshold`` is what ``predict`` writes and draws."""

    max_detections: int = Field(100, ge=1)
    peak_kernel: int = Field(3, ge=1)
    score_threshold: float = Field(0.1, ge=0.0)


class _OneMapNeck(Strict):
    """A CenterNet neck that upsamples from level 5 through ``filters`` to one map at level
    ``5 - len(filters)`` (each subclass declares ``filters``)."""

    @property
    def min_level(self) -> int:
        return 5 - len(self.filters)

    @property
    def max_level(self) -> int:
        return self.min_level


class CenterNetFPNConfig(_OneMapNeck):
    """The TF OD API's CenterNet ResNet-v1 FPN (``resnet_v1_50_fpn`` / ``resnet_v1_101_fpn``
    feature extractors): C5 -> 1x1 conv to ``filters[0]``, then per level 4, 3, 2 a 2x nearest
    upsampling plus a 1x1 lateral conv, and a 3x3 conv + BatchNorm + ReLU to the next width
    (all convs with bias); one map at level ``5 - len(filters)`` (2: stride 4) of
    ``filters[-1]`` channels. ``batch_norm``: the neck's own BatchNorms (TF: Keras' defaults,
    decay 0.99 and epsilon 1e-3, not the backbone's)."""

    name: Literal["center_net_fpn"]
    filters: tuple[int, ...] = (256, 128, 64)
    batch_norm: BatchNormConfig = later_field(KERAS_BATCH_NORM)


class CenterNetMobileNetV2FPNConfig(_OneMapNeck):
    """The TF OD API's CenterNet MobileNetV2-FPN (``mobilenet_v2_fpn`` feature extractor; with
    ``model.backbone.name: mobilenet_v2``, whose level 4 this neck moves to the end of the
    64-channel stage, Keras ``block_9_add``, and whose head conv it scales as TF's Keras
    MobileNetV2 does: only below multiplier 1): the ``center_net_fpn`` neck with ``filters``
    (64, 32, 24) over levels 5 (``out_relu``), 4, 3, 2; one map at level 2 (stride 4) of 24
    channels. ``use_separable_conv``: the 3x3 convs are separable (depthwise without bias +
    1x1 with bias). ``upsampling_interpolation``: ``nearest`` (repeats, shards cleanly along
    H) or ``bilinear`` (half-pixel centers, as Keras' ``UpSampling2D``). ``batch_norm``: the
    neck's own BatchNorms (TF: Keras' defaults, decay 0.99 and epsilon 1e-3)."""

    name: Literal["center_net_mobilenet_v2_fpn"]
    filters: tuple[int, ...] = (64, 32, 24)
    use_separable_conv: bool = False
    upsampling_interpolation: Literal["nearest", "bilinear"] = "nearest"
    batch_norm: BatchNormConfig = later_field(KERAS_BATCH_NORM)


class CenterNetDeconvConfig(_OneMapNeck):
    """The TF OD API's CenterNet ResNet-v2 upsampling stack (``resnet_v2_50`` /
    ``resnet_v2_101`` feature extractors, with ``model.backbone.name: resnet_v2_50`` /
    ``resnet_v2_101``): from the top backbone level (5), per width in ``filters`` a 3x3 conv +
    BatchNorm + ReLU and a 3x3 stride-2 transposed conv + BatchNorm + ReLU (all with bias); one
    map at level ``5 - len(filters)`` (2: stride 4) of ``filters[-1]`` channels.
    ``batch_norm``: the neck's own BatchNorms (TF: Keras' defaults, decay 0.99 and epsilon
    1e-3, not the backbone's)."""

    name: Literal["center_net_deconv"]
    filters: tuple[int, ...] = (256, 128, 64)
    batch_norm: BatchNormConfig = later_field(KERAS_BATCH_NORM)


class IdentityNeckConfig(Strict):
    """No neck: the backbone's map at ``level`` as it is, for backbones that end in the map
    the heads read (``hourglass_104`` and the other hourglasses: level 2, stride 4)."""

    name: Literal["identity"]
    level: int = Field(2, ge=1, le=6)

    @property
    def min_level(self) -> int:
        return self.level

    @property
    def max_level(self) -> int:
        return self.level


CenterNetNeckConfig = Annotated[
    FPNConfig | CenterNetFPNConfig | CenterNetMobileNetV2FPNConfig | CenterNetDeconvConfig
    | IdentityNeckConfig,
    Field(discriminator="name"),
]


class CenterNetKeypointTaskConfig(Strict):
    """One keypoint task of a CenterNet (TF ``keypoint_estimation_task``): the keypoints of
    the class ``class_name`` (a name of the dataset's classes), in the order ``keypoints``.

    Heads: a per-keypoint heatmap (penalty-reduced focal loss; bias ``heatmap_bias_init``),
    a local offset (2 channels, or 2 per keypoint with ``per_keypoint_offset``; L1 at the
    pixels within ``offset_peak_radius`` of each keypoint) and the regression from the object
    center to each keypoint (2 per keypoint; L1 at the center pixels). A keypoint's Gaussian
    has the object's center sigma times its ``std_dev`` entry (default 1.0 each).

    Decoding (TF's grouping): the ``num_candidates`` best heatmap peaks per keypoint with a
    score >= ``candidate_score_threshold`` are candidates; each detected object takes, per
    keypoint, the candidate nearest its regressed keypoint (``candidate_ranking_mode``
    ``min_distance``) or with the best score / (distance + ``score_distance_offset``)
    (``score_distance_ratio``); one outside the object's box scaled by ``box_scale`` or
    further than ``candidate_search_scale`` x the box's longer side keeps the regressed
    keypoint, scored ``unmatched_keypoint_score``.

    Eval: COCO keypoint AP with ``oks_sigmas`` per keypoint (default 0.05 each; COCO's person
    sigmas for its 17 joints are in ``data.keypoints.COCO_PERSON_SIGMAS``). ``skeleton``: pairs
    of 0-based keypoint indices drawn as edges in pictures."""

    name: str = "keypoints"
    class_name: str
    keypoints: tuple[str, ...] = Field(min_length=1)
    skeleton: tuple[tuple[int, int], ...] = ()
    std_dev: tuple[float, ...] | None = None
    oks_sigmas: tuple[float, ...] | None = None
    heatmap_weight: float = Field(1.0, ge=0.0)
    offset_weight: float = Field(1.0, ge=0.0)
    regression_weight: float = Field(1.0, ge=0.0)
    heatmap_bias_init: float = -2.19
    offset_peak_radius: int = Field(0, ge=0)
    per_keypoint_offset: bool = False
    candidate_score_threshold: float = Field(0.1, ge=0.0)
    num_candidates: int = Field(100, ge=1)
    peak_kernel: int = Field(3, ge=1)
    unmatched_keypoint_score: float = 0.1
    box_scale: float = Field(1.2, gt=0.0)
    candidate_search_scale: float = Field(0.3, gt=0.0)
    candidate_ranking_mode: Literal["min_distance", "score_distance_ratio"] = "min_distance"
    score_distance_offset: float = Field(1e-6, gt=0.0)

    @model_validator(mode="after")
    def _per_keypoint_lengths(self) -> CenterNetKeypointTaskConfig:
        k = len(self.keypoints)
        if len(set(self.keypoints)) != k:
            raise ValueError(f"keypoint task {self.name!r}: keypoint names repeat: "
                             f"{list(self.keypoints)}")
        for field in ("std_dev", "oks_sigmas"):
            values = getattr(self, field)
            if values is not None and len(values) != k:
                raise ValueError(f"keypoint task {self.name!r}: {field} has {len(values)} "
                                 f"entries for {k} keypoints")
            if values is not None and min(values) <= 0:
                raise ValueError(f"keypoint task {self.name!r}: {field} must be positive")
        for a, b in self.skeleton:
            if not (0 <= a < k and 0 <= b < k):
                raise ValueError(f"keypoint task {self.name!r}: skeleton edge ({a}, {b}) "
                                 f"names a keypoint outside 0..{k - 1}")
        return self


class CenterNetModelConfig(Strict):
    """CenterNet (objects as points, ``model.type: center_net``): backbone -> neck (an FPN, or
    the TF OD API's ``center_net_fpn``) read at ``feature_level`` (stride
    ``2**feature_level``, 4 for level 2) -> three heads (3x3 conv of ``head_depth`` + ReLU +
    1x1): the per-class center heatmap (bias ``heatmap_bias_init``), box size and center
    offset. Targets: a Gaussian per box whose radius keeps IoU >= ``min_overlap``
    (``tasks.center_net.targets``). ``mask_head``: DeepMAC instance masks (TF
    ``DeepMACMetaArch``)."""

    type: Literal["center_net"]
    num_classes: int = Field(ge=1)
    backbone: BackboneConfig
    neck: CenterNetNeckConfig
    feature_level: int = Field(2, ge=1, le=6)
    head_depth: int = Field(256, ge=1)
    heatmap_bias_init: float = -2.19
    min_overlap: float = Field(0.7, gt=0.0, lt=1.0)
    loss: CenterNetLossConfig = CenterNetLossConfig()
    post_processing: CenterNetPostProcessingConfig = CenterNetPostProcessingConfig()
    keypoint_tasks: tuple[CenterNetKeypointTaskConfig, ...] = later_field(())
    mask_head: DeepMACMaskHeadConfig | None = later_field(None)

    @model_validator(mode="after")
    def _distinct_keypoint_tasks(self) -> CenterNetModelConfig:
        names = [t.name for t in self.keypoint_tasks]
        classes = [t.class_name for t in self.keypoint_tasks]
        if len(set(names)) != len(names) or len(set(classes)) != len(classes):
            raise ValueError("model.keypoint_tasks: each task needs its own name and class "
                             f"(names {names}, classes {classes})")
        return self

    @model_validator(mode="after")
    def _level_in_the_pyramid(self) -> CenterNetModelConfig:
        if not self.neck.min_level <= self.feature_level <= self.neck.max_level:
            raise ValueError(
                f"feature_level {self.feature_level} is outside the FPN's levels "
                f"{self.neck.min_level}..{self.neck.max_level}: set model.neck.min_level <= "
                f"{self.feature_level}")
        return self
