"""Where each tensor of a TF OD API (TF2) Faster R-CNN checkpoint goes in a jaxdet Faster
R-CNN: the C4 variant (``faster_rcnn_resnet{50,101,152}_keras``) and the FPN variant
(``faster_rcnn_resnet{50,101,152}_fpn_keras``).

The map is ``{tf object path: (jaxdet variable path, transform)}`` as for every family
(``interop.tfod_names``, whose helpers it uses); :func:`tf_name_map` is the family's
``TaskFamily.tf_name_map``. Both variants share:

* ``model/_first_stage_box_predictor_first_conv/layer_with_weights-0``: the RPN's 3x3 conv
  (FPN: one layer called on every level);
* ``model/_first_stage_box_predictor/_prediction_heads/{box_encodings,
  class_predictions_with_background}/<level>/_{box_encoder,class_predictor}_layers/0``: the
  RPN's 1x1 box and objectness convs, one pair per level (C4: level 0 only; objectness keeps
  TF's two logits, background first);
* ``model/_mask_rcnn_box_predictor/_{box,class}_prediction_head/_{box_encoder,
  class_predictor}_layers/1``: the second stage's dense box and class layers (layer 0 is a
  flatten; the class layer keeps TF's background logit, as jaxdet's softmax does).

C4: TF's ``FasterRCNNMetaArch`` splits one Keras ResNet-v1 (convolutions without bias) in two
functional models, each numbering its own weighted layers from 0:

* ``model/_feature_extractor_for_proposal_features``: the stem and stages conv2-conv4;
* ``model/_feature_extractor_for_box_classifier_features``: stage conv5.

FPN (``_ResnetFPN`` under ``model/_feature_extractor_for_proposal_features``):

* ``classification_backbone/layer_with_weights-<i>``: the whole ResNet (stages conv2-conv5);
* ``fpn_features_generator/top_layers/0``: the top level's 1x1 projection;
  ``residual_blocks/<k>/0`` and ``conv_layers/<k>/{0: 3x3 conv, 1: BN}``: the lower levels
  from the top down (k = 0 is the level below the top);
* ``coarse_feature_layers/<k>/{0: stride-2 conv, 1: BN}``: the levels above the ResNet;
* ``model/_feature_extractor_for_box_classifier_features/layer_with_weights-{0, 1, 2}``: the
  box classifier's Dense, BatchNorm and Dense (the Dense kernel's rows in Keras' Flatten
  order of NHWC crops, which is jaxdet's reshape order).

TF's ResNet preprocessing subtracts the RGB means ``[123.68, 116.779, 103.939]`` without
scaling, which is what the converted config's ``data.mean`` / ``data.std`` do: no transform
of the first kernel is needed. The Inception-ResNet-v2 backbone and Mask R-CNN's mask head
map as ``tf_names_irv2`` says.
"""

from __future__ import annotations

from flax import nnx

from jaxdet.config import schema as S
from jaxdet.interop.tfod_names import (
    Target,
    UnmappedModelError,
    bn_targets,
    conv_targets,
    keras_numbered_targets,
    resnet_layers,
)
from jaxdet.models.backbones.inception_resnet_v2 import InceptionResNetV2
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.necks.fpn import FPN
from jaxdet.tasks.faster_rcnn.tf_names_irv2 import irv2_backbone_targets, mask_head_targets

PREFIX = "model"
PROPOSAL = f"{PREFIX}/_feature_extractor_for_proposal_features"
BOX_CLASSIFIER = f"{PREFIX}/_feature_extractor_for_box_classifier_features"
RPN_HEADS = f"{PREFIX}/_first_stage_box_predictor/_prediction_heads"
BOX_PREDICTOR = f"{PREFIX}/_mask_rcnn_box_predictor"


def _fpn_targets(out: dict[str, Target], neck: nnx.Module, prefix: str) -> None:
    """The Keras FPN of ``_ResnetFPN`` at ``prefix`` (see the module docstring); jaxdet lists
    its levels ascending, TF's ``residual_blocks`` / ``conv_layers`` go from the top down."""
    gen = f"{prefix}/fpn_features_generator"
    n = len(neck.backbone_levels)
    conv_targets(out, f"{gen}/top_layers/0", ("neck", "lateral", n - 1), neck.lateral[n - 1])
    for k in range(n - 1):
        i = n - 2 - k
        conv_targets(out, f"{gen}/residual_blocks/{k}/0", ("neck", "lateral", i),
                     neck.lateral[i])
        conv_targets(out, f"{gen}/conv_layers/{k}/0", ("neck", "smoothing", i, "conv"),
                     neck.smoothing[i].conv)
        bn_targets(out, f"{gen}/conv_layers/{k}/1", ("neck", "smoothing", i, "norm"))
    for k, layer in enumerate(neck.extra):
        conv_targets(out, f"{prefix}/coarse_feature_layers/{k}/0", ("neck", "extra", k, "conv"),
                     layer.conv)
        bn_targets(out, f"{prefix}/coarse_feature_layers/{k}/1", ("neck", "extra", k, "norm"))


def _feature_extractor_targets(out: dict[str, Target], model: nnx.Module) -> None:
    """The backbone (and FPN, and FPN box classifier) entries of either variant."""
    if isinstance(model.backbone, InceptionResNetV2):  # C4, split as tf_names_irv2 says
        irv2_backbone_targets(out, model.backbone)
        return
    layers = resnet_layers(model.backbone, ("backbone",))
    if model.neck is None:  # C4: conv2-conv4 | conv5 (the box classifier)
        proposal = [(path, m) for path, m in layers if path[1] != "layer4"]
        conv5 = [(path, m) for path, m in layers if path[1] == "layer4"]
        keras_numbered_targets(out, PROPOSAL, proposal)
        keras_numbered_targets(out, BOX_CLASSIFIER, conv5)
        return
    keras_numbered_targets(out, f"{PROPOSAL}/classification_backbone", layers)
    _fpn_targets(out, model.neck, PROPOSAL)
    for i, name in ((0, "fc1"), (2, "fc2")):  # Dense layers: [in, out] kernels as jaxdet's
        for leaf in ("kernel", "bias"):
            out[f"{BOX_CLASSIFIER}/layer_with_weights-{i}/{leaf}"] = (
                ("box_classifier", name, leaf), "identity")
    bn_targets(out, f"{BOX_CLASSIFIER}/layer_with_weights-1", ("box_classifier", "bn"))


def _rpn_targets(out: dict[str, Target], rpn: nnx.Module) -> None:
    """The RPN's shared 3x3 conv and its 1x1 objectness and box convs (one pair per level)."""
    conv_targets(out, f"{PREFIX}/_first_stage_box_predictor_first_conv/layer_with_weights-0",
                 ("rpn", "conv"), rpn.conv)
    multi = isinstance(rpn.box, nnx.List)
    boxes = list(rpn.box) if multi else [rpn.box]
    objectness = list(rpn.objectness) if multi else [rpn.objectness]
    for level, (box, obj) in enumerate(zip(boxes, objectness, strict=True)):
        at = (level,) if multi else ()
        conv_targets(out, f"{RPN_HEADS}/box_encodings/{level}/_box_encoder_layers/0",
                     ("rpn", "box", *at), box)
        conv_targets(out, f"{RPN_HEADS}/class_predictions_with_background/{level}/"
                     "_class_predictor_layers/0", ("rpn", "objectness", *at), obj)


def faster_rcnn_detector_map(model: nnx.Module) -> dict[str, Target]:
    """``{tf object path: (jaxdet path, transform)}`` for a C4 or FPN Faster R-CNN built from
    a TF OD API pipeline.config (see the module docstring).

    Raises:
      UnmappedModelError: a backbone other than ResNet-v1 or Inception-ResNet-v2."""
    if not isinstance(model.backbone, (ResNet, InceptionResNetV2)):
        raise UnmappedModelError(f"no TF checkpoint map yet for a Faster R-CNN with "
                                 f"{type(model.backbone).__name__}")
    neck = getattr(model, "neck", None)
    if neck is not None and not isinstance(neck, FPN):
        raise UnmappedModelError(f"no TF checkpoint map yet for a Faster R-CNN with "
                                 f"{type(neck).__name__}")
    out: dict[str, Target] = {}
    _feature_extractor_targets(out, model)
    _rpn_targets(out, model.rpn)
    for tf_head, layer, ours in (("_box_prediction_head", "_box_encoder_layers", "box"),
                                 ("_class_prediction_head", "_class_predictor_layers", "cls")):
        for leaf in ("kernel", "bias"):
            out[f"{BOX_PREDICTOR}/{tf_head}/{layer}/1/{leaf}"] = (
                ("box_predictor", ours, leaf), "identity")
    if getattr(model, "mask_head", None) is not None:  # Mask R-CNN
        mask_head_targets(out, model.mask_head)
    return out


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """Faster R-CNN's ``TaskFamily.tf_name_map``: :func:`faster_rcnn_detector_map` of
    ``model`` (``config`` adds nothing to it)."""
    return faster_rcnn_detector_map(model)


__all__ = ["faster_rcnn_detector_map", "tf_name_map"]
