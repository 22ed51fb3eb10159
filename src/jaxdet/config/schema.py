"""The typed configuration schema: every field a jaxdet config may hold, with its default.

A config is a YAML file validated by :class:`Config`. Unknown fields are errors (see
``config/loader.py`` for the messages), and every choice is a ``Literal`` so a bad value is
reported with the allowed ones. Sections with several kinds (``neck``, ``anchors``, ``head``,
``resizer``, ``learning_rate``, data sources and augment ops) are tagged unions selected by
their ``name`` (or ``type``) field. The model section lives in ``schema_model.py`` and the
augment ops in ``schema_augment.py``; both are re-exported here.
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
from jaxdet.config.schema_base import ResizeMethod, Strict, later_field
from jaxdet.config.schema_center_net import (  # noqa: F401  (re-exported)
    CenterNetDeconvConfig,
    CenterNetFPNConfig,
    CenterNetKeypointTaskConfig,
    CenterNetLossConfig,
    CenterNetMobileNetV2FPNConfig,
    CenterNetModelConfig,
    CenterNetPostProcessingConfig,
    IdentityNeckConfig,
)
from jaxdet.config.schema_datasets import (  # noqa: F401  (re-exported)
    CocoDataConfig,
    DatasetConfig,
    ShapesDataConfig,
    TfRecordDataConfig,
    VocDataConfig,
)
from jaxdet.config.schema_deepmac import DeepMACMaskHeadConfig  # noqa: F401  (re-exported)
from jaxdet.config.schema_faster_rcnn import (  # noqa: F401  (re-exported)
    FasterRCNNModelConfig,
    FasterRCNNPostProcessingConfig,
    GridAnchorGeneratorConfig,
)
from jaxdet.config.schema_model import (  # noqa: F401  (re-exported)
    EFFICIENTNETS,
    Activation,
    AnchorsConfig,
    BackboneConfig,
    BatchNormConfig,
    BiFPNConfig,
    BoxCoderConfig,
    ConvolutionalHeadConfig,
    FPNConfig,
    HardExampleMinerConfig,
    HeadConfig,
    LossConfig,
    MatcherConfig,
    MultiscaleAnchorsConfig,
    NeckConfig,
    PostProcessingConfig,
    SSDAnchorsConfig,
    SSDFeatureMapsConfig,
    SSDModelConfig,
    WeightSharedHeadConfig,
)
from jaxdet.config.schema_params import InitializerRule, WeightDecayRule
from jaxdet.config.schema_unet3d import UNet3DModelConfig  # noqa: F401  (re-exported)
from jaxdet.config.schema_volumes import (  # noqa: F401  (re-exported)
    GeneratedVolumesDataConfig,
    VolumeAugmentConfig,
    VolumeDataConfig,
    VolumeListDataConfig,
)

log = logging.getLogger("jaxdet.config")

# --------------------------------------------------------------------------- data



# the model section: one family per ``model.type``
AnyModelConfig = Annotated[SSDModelConfig | CenterNetModelConfig | FasterRCNNModelConfig
                           | UNet3DModelConfig, Field(discriminator="type")]

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
    """Where images come from, how they are augmented and brought to one static shape.

    ``load_masks``: read every object's instance mask (COCO ``segmentation`` polygons or RLE,
    TFRecord ``image/object/mask`` PNGs, Pascal VOC ``SegmentationObject`` PNGs, generated
    shapes' exact masks) and move it with the image through every augment op and the resizer
    (nearest neighbour: masks stay 0 / 1). Batches then hold ``masks`` uint8
    [B, max_number_of_boxes, H // mask_stride, W // mask_stride] (H x W: the input size),
    all 0 past the valid boxes. ``mask_stride``: how much coarser than the input the masks
    are kept; memory per image is max_number_of_boxes x (H / s) x (W / s) bytes, e.g. 100
    boxes at a 1024 x 1024 input: 6.6 MB at stride 4, 105 MB at stride 1.

    ``jpeg_decode``: how JPEGs decode: ``accurate`` (libjpeg-turbo's accurate IDCT, the pixels
    Pillow and OpenCV give), ``tf`` (the pixels ``tf.io.decode_jpeg`` gives, bit for bit: what
    TF OD API models trained on; a converted pipeline.config sets it) or ``auto`` (``tf`` when
    the weights come from a TF checkpoint, ``train.init_checkpoint`` or ``--checkpoint``,
    else ``accurate``).

    ``train_image_dtype``: the training batches' images as the host sends them to the
    device, before normalization (which runs on the device): ``uint8`` (a quarter of
    float32's bytes; an image resized or colour-jittered on the host is rounded to whole
    levels once) or ``float32`` (the exact values; eval and predict always use these).

    ``crowd_boxes``: training on crowd objects (COCO ``iscrowd``, VOC ``difficult``, TFRecord
    ``is_crowd`` / ``difficult`` / ``group_of`` / weight 0): ``ignore`` (anchors on them are
    neither positives nor negatives) or ``train`` (ordinary objects, as the TF OD API trains
    them; a converted pipeline.config's). Evaluation ignores them either way, as COCO's.

    ``worker_count``: who prepares the training batches: ``0``, threads of the training
    process (one per core; decoding and resampling release Python's lock); ``N``, N worker
    processes, each making whole batches; ``auto`` (the default): when training on a GPU or
    TPU with more than 4 usable cores, one process per core but two, at most 16; else threads
    (and evaluation passes use threads unless a number is given). The data are the same for
    every value.

    ``type``: ``images`` for the detectors (implied); the 3D U-Net reads ``volumes``."""

    type: Literal["images"] = "images"
    train: DatasetConfig | None = None
    eval: DatasetConfig | None = None
    resizer: ResizerConfig
    augment: tuple[AugmentConfig, ...] = ()
    mean: tuple[float, float, float] = (123.675, 116.28, 103.53)
    std: tuple[float, float, float] = (58.395, 57.12, 57.375)
    max_number_of_boxes: int = Field(100, ge=1)
    worker_count: int | Literal["auto"] = "auto"
    # masks: 100 boxes x (1024 / 4)^2 = 6.6 MB per image as uint8 (105 MB at stride 1)
    load_masks: bool = later_field(False)
    mask_stride: int = later_field(4, ge=1)
    jpeg_decode: Literal["auto", "accurate", "tf"] = later_field("auto")
    train_image_dtype: Literal["uint8", "float32"] = later_field("uint8")
    crowd_boxes: Literal["ignore", "train"] = later_field("ignore")

    @field_validator("worker_count", mode="before")
    @classmethod
    def _worker_count(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise ValueError(f"allowed: auto, 0 (threads) or a number of worker processes; "
                         f"got {value!r}")


# the data section: images for the detectors, volumes for the 3D U-Net (``type`` follows
# ``model.type`` when not given, see ``Config``)
AnyDataConfig = Annotated[DataConfig | VolumeDataConfig, Field(discriminator="type")]
DATA_TYPE_OF_MODEL = {"unet3d": "volumes"}


# --------------------------------------------------------------------------- train


class OptimizerConfig(Strict):
    """The optimizer. ``momentum``/``nesterov`` apply to momentum SGD, ``beta1``/``beta2`` to
    Adam(W), ``rmsprop_decay`` (and ``momentum``) to RMSProp; ``weight_decay`` is coupled L2
    for SGD/Adam/RMSProp and decoupled for AdamW, on every kernel (no biases or norm scales)
    unless a ``weight_decay_rules`` entry says otherwise. ``momentum_form``: ``keras`` scales
    each gradient by its step's learning rate as it enters the velocity, as TF's Keras
    optimizers (a converted pipeline.config's); ``optax`` scales the velocity by the current one."""

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
    weight_decay_rules: tuple[WeightDecayRule, ...] = ()
    momentum_form: Literal["optax", "keras"] = "optax"
    clip_gradient_norm: float | None = Field(None, gt=0.0)

    @model_validator(mode="after")
    def _momentum_needs_a_momentum_optimizer(self):
        if self.name == "sgd" and "momentum" in self.model_fields_set and self.momentum > 0:
            raise ValueError(f"momentum: {self.momentum} with name: sgd, which is plain SGD "
                             "and ignores it; use name: momentum for momentum SGD (TF's "
                             "momentum_optimizer), or drop momentum")
        return self


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
    effdet EfficientDet, a torchvision RetinaNet (``retinanet_resnet50_fpn``), or a
    torchvision ResNet / timm MobileNet or EfficientNet backbone.
    ``format``: ``auto`` tells them apart. ``restore`` (TF's ``fine_tune_checkpoint_type``):
    ``full`` (every tensor; the model must be the checkpoint's), ``detection`` (what TF2
    restores for that type: the feature extractor, i.e. backbone and FPN, plus a Faster /
    Mask R-CNN's box-classifier features; box predictors, RPN, heads and mask networks start
    fresh), ``fitting`` (every tensor whose shape fits: a class predictor for another class
    count keeps its fresh initialization; the TF2 few-shot colab's choice) or
    ``classification`` (the backbone alone, from a classification checkpoint or the
    backbone of a detection one). One line at start says what was restored, re-initialised
    and left unused (each name with ``-v``)."""

    path: str
    format: Literal["auto", "tf", "jaxdet", "torch"] = "auto"
    restore: Literal["full", "detection", "fitting", "classification"] = "detection"


RematTarget = Literal[
    "backbone", "backbone.level2", "backbone.level3", "backbone.level4", "backbone.level5",
    "neck", "head",
]


class TrainConfig(Strict):
    """Batch, steps, optimizer and schedule, checkpoints. ``ema_decay`` keeps a moving average of
    the weights (used at eval with ``eval.use_ema``); ``ema_dynamic_decay`` caps its decay
    at ``(1 + n) / (10 + n)`` early in training (TF's ``num_updates``, the EfficientDet
    recipe), where ``n`` is the update's 0-based index plus ``ema_dynamic_decay_offset``: 0
    as TF1's ``num_updates`` and tfa's ``MovingAverage`` count, 1 as TF2's
    ``ExponentialMovingAverage`` (the TF OD API's ``use_moving_average``), which counts the
    update it makes (a converted pipeline.config's). ``remat`` recomputes the listed parts
    in the backward pass instead of keeping their activations (gradient checkpointing):
    ``backbone.levelN`` = the backbone blocks ending at stride 2**N (one checkpoint per
    block), ``backbone`` = all of them, ``neck``, ``head`` (one checkpoint per level). Same
    gradients, less memory, ~1 more forward pass of those parts. ``initializers``: rules
    that draw some parameters of a freshly built model with another initializer (a converted
    TF pipeline.config's own). ``reference_batch_size``: the linear scaling rule, every
    learning rate times ``batch_size / reference_batch_size``. ``tensorboard_tags``:
    ``jaxdet`` (TensorBoard in ``WORKDIR/tensorboard``: ``train/loss``, ``eval/AP``, ...) or
    ``tf`` (the TF OD API's ``model_dir`` layout: ``WORKDIR/train`` and ``WORKDIR/eval``
    with TF's tags, ``Loss/total_loss``, ``learning_rate``,
    ``DetectionBoxes_Precision/mAP``, ..., so a TF dashboard shows the run, and the train
    step reports TF's L2 ``regularization_loss``; a converted pipeline.config's choice)."""

    batch_size: int = Field(8, ge=1)
    reference_batch_size: int | None = Field(None, ge=1)
    num_steps: int = Field(1000, ge=1)
    seed: int = 0
    optimizer: OptimizerConfig = OptimizerConfig()
    learning_rate: LearningRateConfig = CosineLearningRateConfig(
        name="cosine", learning_rate_base=0.04, warmup_learning_rate=0.013, warmup_steps=100)
    ema_decay: float | None = Field(None, gt=0.0, lt=1.0)
    ema_dynamic_decay: bool = False
    ema_dynamic_decay_offset: int = Field(0, ge=0)
    accumulate_steps: int = Field(1, ge=1)
    remat: tuple[RematTarget, ...] = ()
    loss_scale: LossScaleConfig = LossScaleConfig()
    checkpoint_every: int = Field(1000, ge=1)
    keep_checkpoints: int = Field(3, ge=1)
    eval_every: int = Field(0, ge=0)
    log_every: int = Field(10, ge=1)
    tensorboard_tags: Literal["jaxdet", "tf"] = "jaxdet"
    freeze_variables: tuple[str, ...] = ()
    update_trainable_variables: tuple[str, ...] = ()
    init_checkpoint: InitCheckpointConfig | None = None
    initializers: tuple[InitializerRule, ...] = ()

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
        """Regexes (``re.search``) over '/'-joined parameter paths, e.g. ``^backbone/``, and,
        when ``init_checkpoint`` is a TF checkpoint, over the TF variable names it recorded
        (``^BoxPredictor/ConvolutionalClassHead_``, ``conv1_bn/``) and object paths:
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
    metrics_set: tuple[Literal["coco_detection_metrics", "pascal_voc_detection_metrics",
                               "coco_mask_metrics"], ...] = ("coco_detection_metrics",)


class ParallelConfig(Strict):
    """How a step is split over devices: a mesh ``(data, spatial)`` over all devices of all
    processes. ``data`` shards the batch (-1: every device not used by ``spatial``),
    ``spatial`` shards image height (XLA exchanges the convolution halos). The batch size must
    divide by ``data`` and the image height by (largest feature stride x ``spatial``).
    ``spatial_axes``: the spatial shards per spatial dimension of the input (volumes: D, H, W;
    images: H), e.g. ``[2, 2, 2]`` for eight devices splitting a volume into octants; their
    product is ``spatial`` (set from it when ``spatial`` is 1). None: all ``spatial``
    shards on the first spatial dimension (depth, or image height). Detectors split the height
    only. ``shard_optimizer_state`` splits optimizer moments over ``data`` instead of
    replicating them. ``batch_norm_statistics``: ``global`` (over the whole batch, across
    devices) or ``per_device`` (each data shard normalizes with its own statistics)."""

    data: int = Field(-1, ge=-1)
    spatial: int = Field(1, ge=1)
    spatial_axes: tuple[Annotated[int, Field(ge=1)], ...] | None = Field(None, min_length=1,
                                                                         max_length=3)
    shard_optimizer_state: bool = False
    batch_norm_statistics: Literal["global", "per_device"] = "global"

    @model_validator(mode="before")
    @classmethod
    def _spatial_from_spatial_axes(cls, data: Any) -> Any:
        """``spatial`` left at 1: the product of ``spatial_axes``."""
        if isinstance(data, dict) and data.get("spatial_axes") and data.get("spatial", 1) == 1:
            axes = data["spatial_axes"]
            if isinstance(axes, list | tuple) and all(
                    isinstance(a, int) and not isinstance(a, bool) and a >= 1 for a in axes):
                product = 1
                for a in axes:
                    product *= a
                data = {**data, "spatial": product}
        return data

    @model_validator(mode="after")
    def _spatial_axes_multiply_to_spatial(self) -> ParallelConfig:
        if self.spatial_axes is not None:
            product = 1
            for a in self.spatial_axes:
                product *= a
            if product != self.spatial:
                raise ValueError(
                    f"parallel.spatial_axes={list(self.spatial_axes)} makes {product} spatial "
                    f"shards but parallel.spatial={self.spatial}; drop parallel.spatial (it "
                    f"follows spatial_axes) or set it to {product}")
        return self

    @field_validator("data")
    @classmethod
    def _data_not_zero(cls, v: int) -> int:
        if v == 0:
            raise ValueError("parallel.data must be -1 (all remaining devices) or >= 1")
        return v


class Config(Strict):
    """The whole run: model, data, train, eval, numeric precision and device layout.

    ``precision``: ``fp32``; ``bf16`` (bfloat16 compute, float32 parameters and optimizer
    state); ``fp16`` (float16 compute, loss scaling: ``train.loss_scale``); ``bf16_on_tpu``
    (TF's ``use_bfloat16``: bf16 to train or evaluate on a TPU, else fp32). ``allow_tf32``:
    TensorFloat-32 matmuls and convolutions on GPUs that have it (false: full float32)."""

    name: str = ""
    description: str = ""
    model: AnyModelConfig
    data: AnyDataConfig
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    precision: Literal["fp32", "bf16", "fp16", "bf16_on_tpu"] = "fp32"
    allow_tf32: bool = True
    parallel: ParallelConfig = ParallelConfig()

    @model_validator(mode="before")
    @classmethod
    def _model_type_defaults_to_ssd(cls, data: Any) -> Any:
        """``model.type`` picks the meta-architecture; a model section without one is an SSD
        (every config written before CenterNet)."""
        if isinstance(data, dict) and isinstance(data.get("model"), dict) and (
                "type" not in data["model"]):
            data = {**data, "model": {"type": "ssd", **data["model"]}}
        if isinstance(data, dict) and isinstance(data.get("data"), dict) and (
                "type" not in data["data"]):  # the model's kind of data
            model = data.get("model")
            kind = model.get("type") if isinstance(model, dict) else getattr(model, "type", "")
            data = {**data, "data": {"type": DATA_TYPE_OF_MODEL.get(kind, "images"),
                                     **data["data"]}}
        return data

    @model_validator(mode="after")
    def _data_fits_the_model(self) -> Config:
        expected = DATA_TYPE_OF_MODEL.get(self.model.type, "images")
        if self.data.type != expected:
            raise ValueError(f"data.type is {self.data.type!r} but model.type "
                             f"{self.model.type!r} reads {expected!r}; drop data.type (it "
                             "follows the model) or change model.type")
        return self

    @model_validator(mode="after")
    def _flip_permutation_covers_the_keypoints(self) -> Config:
        """Each ``keypoint_flip_permutation`` has one entry per keypoint slot of the model's
        keypoint tasks (refused here, before any data is read)."""
        tasks = getattr(self.model, "keypoint_tasks", ())
        k = sum(len(t.keypoints) for t in tasks)
        for i, op in enumerate(self.data.augment):
            p = getattr(op, "keypoint_flip_permutation", ())
            if p and len(p) != k:
                has = (f"the model's keypoint tasks have {k} keypoints in all" if k
                       else "the model has no keypoint tasks")
                raise ValueError(
                    f"data.augment[{i}].keypoint_flip_permutation has {len(p)} entries but "
                    f"{has}; give one entry per keypoint (or none)")
        return self
