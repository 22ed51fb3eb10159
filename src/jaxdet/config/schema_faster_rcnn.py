"""The ``model`` section of ``model.type: faster_rcnn`` (Faster and Mask R-CNN, C4)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import Strict, later_field
from jaxdet.config.schema_model import (
    BackboneConfig,
    BoxCoderConfig,
    FPNConfig,
    MultiscaleAnchorsConfig,
)


class GridAnchorGeneratorConfig(Strict):
    """TF OD API ``grid_anchor_generator`` (Faster R-CNN's first stage): at every cell of the
    stride-``height_stride`` map, one anchor per (aspect ratio, scale) -- aspect ratio outer,
    scale inner, TF's order -- of height ``scale / sqrt(aspect_ratio) * height`` and width
    ``scale * sqrt(aspect_ratio) * width`` pixels, centered at ``(i * height_stride +
    height_offset, j * width_stride + width_offset)`` pixels. The strides must be 16 (the
    conv4 map of the C4 network)."""

    name: Literal["grid_anchor_generator"] = "grid_anchor_generator"
    scales: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
    aspect_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    height: float = Field(256.0, gt=0.0)
    width: float = Field(256.0, gt=0.0)
    height_stride: Literal[16] = 16
    width_stride: Literal[16] = 16
    height_offset: float = 0.0
    width_offset: float = 0.0

    @model_validator(mode="after")
    def _positive(self) -> GridAnchorGeneratorConfig:
        if not self.scales or not self.aspect_ratios or min(*self.scales,
                                                             *self.aspect_ratios) <= 0:
            raise ValueError("scales and aspect_ratios must be non-empty and positive")
        return self


# tagged by name; a grid generator may leave its name out (FasterRCNNModelConfig adds it)
FirstStageAnchorsConfig = Annotated[GridAnchorGeneratorConfig | MultiscaleAnchorsConfig,
                                    Field(discriminator="name")]


class FasterRCNNPostProcessingConfig(Strict):
    """The second stage's post-processing (TF ``second_stage_post_processing``: softmax score
    converter, ``batch_non_max_suppression``): per class, greedy NMS over the proposals' boxes
    of that class (a score must exceed ``score_threshold``; IoU > ``iou_threshold``
    suppresses) keeping ``max_detections_per_class``, then the best ``max_total_detections``
    over classes, clipped to the image content. ``logit_scale`` divides the logits before the
    softmax."""

    score_threshold: float = Field(0.0, ge=0.0)
    iou_threshold: float = Field(0.6, gt=0.0, le=1.0)
    max_detections_per_class: int = Field(100, ge=1)
    max_total_detections: int = Field(100, ge=1)
    logit_scale: float = Field(1.0, gt=0.0)


class FasterRCNNModelConfig(Strict):
    """Faster R-CNN, C4 variant (``model.type: faster_rcnn``; TF OD API ``faster_rcnn`` with a
    ``faster_rcnn_resnet*_keras`` feature extractor). Field names are TF's proto fields.

    First stage: a ResNet (``backbone``: resnet18 ... resnet152; TF's Keras ResNet v1 is
    ``stride_in_1x1: true, padding: same``) up to conv4 (stride 16); grid anchors
    (``first_stage_anchor_generator``); the RPN: a ``first_stage_box_predictor_kernel_size``
    conv of ``first_stage_box_predictor_depth`` channels + ReLU6, 1x1 objectness (2-way
    softmax) and box convs, truncated-normal(``first_stage_box_predictor_stddev``)
    initialised. Training samples ``first_stage_minibatch_size`` anchors per image (IoU 0.7
    positive, < 0.3 negative; at most ``first_stage_positive_balance_fraction`` positives).
    Proposals: NMS (``first_stage_nms_iou_threshold``, scores above
    ``first_stage_nms_score_threshold``) to ``first_stage_max_proposals`` per image.

    Second stage: each proposal cropped from the conv4 map (``crop``: bilinear
    ``crop_and_resize`` to ``initial_crop_size``, TF's ``matmul_crop_and_resize``;
    ``crop_method``: its gather or matmul implementation, same values), max-pooled
    (``maxpool_kernel_size`` / ``maxpool_stride``), the ResNet's conv5 stage, spatial mean,
    then ``num_classes + 1`` class logits and box codes per class (one shared box with
    ``share_box_across_classes``). Training samples ``second_stage_batch_size`` proposals per
    image (IoU >= 0.5 positive; at most ``second_stage_balance_fraction`` positives). Both
    stages use the Faster R-CNN box coder (``box_coder.scales``, 10, 10, 5, 5).

    ``clip_anchors_to_image``: anchors are clipped to the image (TF's option); false: anchors
    reaching outside the image take no part in training and are clipped for inference (TF
    prunes them in training). Losses: softmax + smooth L1 (delta 1) per stage, each image's
    sums divided by its minibatch size, averaged over the batch, times the ``*_weight``s.

    FPN variant (``neck: {name: fpn, ...}``, TF's ``faster_rcnn_resnet*_fpn_keras``): the
    ResNet's levels ``neck.min_level`` .. 5 go through the FPN (``neck.max_level`` above 5:
    stride-2 convs), all of ``neck.depth`` channels; ``first_stage_anchor_generator`` must be
    ``multiscale`` over the same levels (``tf_layout: true`` for TF's anchor order). The RPN's
    3x3 conv (+ ReLU6) is shared by the levels, its 1x1 objectness and box convs are per level
    (TF's Keras ``ConvolutionalBoxPredictor``). Each proposal is cropped from one level (TF's
    ``fpn_feature_levels``: a 224-pixel box of a 224-pixel-equivalent input from the
    second-to-last level, a box twice as large one level up), max-pooled, flattened, and
    goes through two fully connected layers of ``box_classifier_fc_depth`` units + ReLU, with
    a BatchNorm (``backbone.batch_norm``) between them, then the box predictor.

    Mask R-CNN (``predict_instance_masks``, TF's ``mask_rcnn_box_predictor`` mask head; needs
    ``data.load_masks: true``): a head on the box classifier's conv5 map of each proposal --
    bilinear resize to ``mask_height`` x ``mask_width``, ``mask_prediction_num_conv_layers -
    1`` 3x3 convs of ``mask_prediction_conv_depth`` channels + ReLU (0: TF's automatic depth
    from the conv5 channels and the classes), a 3x3 conv to one mask per class (one with
    ``masks_are_class_agnostic``); ``convolve_then_upsample``: the convs run on the conv5 map,
    then a nearest-neighbour upsampling (``mask_height`` / ``mask_width`` must be multiples of
    the conv5 map's size) and one more conv + ReLU. Training: the sampled positive proposals'
    own-class mask logits against their matched ground-truth mask cropped to the proposal
    (bilinear, from the batch's ``masks``), sigmoid cross-entropy averaged per pixel over
    the positives, times ``second_stage_mask_prediction_loss_weight``. Predict: the head runs
    on each final detection's box; ``masks`` are its own class's sigmoid probabilities."""

    type: Literal["faster_rcnn"]
    num_classes: int = Field(ge=1)
    backbone: BackboneConfig
    first_stage_anchor_generator: FirstStageAnchorsConfig = GridAnchorGeneratorConfig()
    neck: FPNConfig | None = later_field(None)
    box_classifier_fc_depth: int = later_field(1024, ge=1)
    first_stage_box_predictor_depth: int = Field(512, ge=1)
    first_stage_box_predictor_kernel_size: int = Field(3, ge=1)
    first_stage_box_predictor_stddev: float = Field(0.01, gt=0.0)
    first_stage_nms_score_threshold: float = Field(0.0, ge=0.0)
    first_stage_nms_iou_threshold: float = Field(0.7, ge=0.0, le=1.0)
    first_stage_max_proposals: int = Field(300, ge=1)
    first_stage_minibatch_size: int = Field(256, ge=1)
    first_stage_positive_balance_fraction: float = Field(0.5, ge=0.0, le=1.0)
    first_stage_localization_loss_weight: float = Field(1.0, ge=0.0)
    first_stage_objectness_loss_weight: float = Field(1.0, ge=0.0)
    crop: Literal["crop_and_resize"] = "crop_and_resize"
    crop_method: Literal["gather", "matmul"] = "gather"
    initial_crop_size: int = Field(14, ge=1)
    maxpool_kernel_size: int = Field(2, ge=1)
    maxpool_stride: int = Field(2, ge=1)
    share_box_across_classes: bool = False
    second_stage_batch_size: int = Field(64, ge=1)
    second_stage_balance_fraction: float = Field(0.25, ge=0.0, le=1.0)
    second_stage_post_processing: FasterRCNNPostProcessingConfig = (
        FasterRCNNPostProcessingConfig())
    second_stage_localization_loss_weight: float = Field(1.0, ge=0.0)
    second_stage_classification_loss_weight: float = Field(1.0, ge=0.0)
    clip_anchors_to_image: bool = False
    box_coder: BoxCoderConfig = BoxCoderConfig()
    predict_instance_masks: bool = later_field(False)
    mask_height: int = later_field(15, ge=1)
    mask_width: int = later_field(15, ge=1)
    mask_prediction_conv_depth: int = later_field(256, ge=0)
    mask_prediction_num_conv_layers: int = later_field(2, ge=1)
    masks_are_class_agnostic: bool = later_field(False)
    convolve_then_upsample: bool = later_field(False)
    second_stage_mask_prediction_loss_weight: float = later_field(1.0, ge=0.0)

    @model_validator(mode="before")
    @classmethod
    def _grid_anchors_by_default(cls, data: Any) -> Any:
        anchors = data.get("first_stage_anchor_generator") if isinstance(data, dict) else None
        if isinstance(anchors, dict) and "name" not in anchors:
            data = {**data, "first_stage_anchor_generator": {
                **anchors, "name": "grid_anchor_generator"}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> FasterRCNNModelConfig:
        name = self.backbone.name
        irv2 = name == "inception_resnet_v2"
        if not (irv2 or name.startswith("resnet")) or name.startswith("resnet_v2"):
            raise ValueError(f"model.backbone.name={name!r}: faster_rcnn needs resnet18, "
                             "resnet34, resnet50, resnet101, resnet152 or (C4 only) "
                             "inception_resnet_v2")
        if irv2 and self.neck is not None:
            raise ValueError("model.backbone.name=inception_resnet_v2 is a C4 network: remove "
                             "model.neck")
        if self.box_coder.name != "faster_rcnn":
            raise ValueError("model.box_coder.name must be faster_rcnn for faster_rcnn")
        if self.second_stage_batch_size > self.first_stage_max_proposals:
            raise ValueError(f"second_stage_batch_size ({self.second_stage_batch_size}) must "
                             f"be <= first_stage_max_proposals ({self.first_stage_max_proposals})")
        fpn = self.neck is not None
        if fpn != isinstance(self.first_stage_anchor_generator, MultiscaleAnchorsConfig):
            raise ValueError(
                "model.first_stage_anchor_generator: the C4 faster_rcnn (no neck) takes "
                "{name: grid_anchor_generator}, the FPN one (neck: {name: fpn}) "
                "{name: multiscale} over the FPN's levels")
        if fpn:
            a, n = self.first_stage_anchor_generator, self.neck
            if (a.min_level, a.max_level) != (n.min_level, n.max_level):
                raise ValueError(
                    f"model.first_stage_anchor_generator levels {a.min_level}..{a.max_level} "
                    f"must be the neck's ({n.min_level}..{n.max_level}): one RPN head per "
                    "FPN level")
            if n.max_level < 5 or n.use_depthwise:
                raise ValueError("model.neck: faster_rcnn's FPN needs max_level >= 5 and "
                                 "use_depthwise: false (TF's faster_rcnn_resnet*_fpn_keras)")
            if self.predict_instance_masks:
                raise ValueError("model.predict_instance_masks with an FPN neck is not "
                                 "supported yet: Mask R-CNN runs on the C4 faster_rcnn")
        if self.initial_crop_size < self.maxpool_kernel_size:
            raise ValueError(f"initial_crop_size ({self.initial_crop_size}) must be >= "
                             f"maxpool_kernel_size ({self.maxpool_kernel_size})")
        return self
