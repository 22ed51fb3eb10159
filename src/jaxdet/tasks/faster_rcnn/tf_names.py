"""Where each tensor of a TF OD API (TF2) Faster R-CNN checkpoint goes in a jaxdet Faster
R-CNN (the C4 variant: ``faster_rcnn_resnet{50,101,152}_keras``).

The map is ``{tf object path: (jaxdet variable path, transform)}`` as for every family
(``interop.tfod_names``, whose helpers it uses); :func:`tf_name_map` is the family's
``TaskFamily.tf_name_map``. TF's ``FasterRCNNMetaArch`` splits one Keras
ResNet-v1 (convolutions without bias) in two functional models, each numbering its own
weighted layers from 0:

* ``model/_feature_extractor_for_proposal_features``: the stem and stages conv2-conv4;
* ``model/_feature_extractor_for_box_classifier_features``: stage conv5;
* ``model/_first_stage_box_predictor_first_conv/layer_with_weights-0``: the RPN's 3x3 conv;
* ``model/_first_stage_box_predictor/_prediction_heads/{box_encodings,
  class_predictions_with_background}/0/_{box_encoder,class_predictor}_layers/0``: the RPN's
  1x1 box and objectness convs (objectness keeps TF's two logits, background first);
* ``model/_mask_rcnn_box_predictor/_{box,class}_prediction_head/_{box_encoder,
  class_predictor}_layers/1``: the second stage's dense box and class layers (layer 0 is a
  flatten; the class layer keeps TF's background logit, as jaxdet's softmax does).

TF's ResNet preprocessing subtracts the RGB means ``[123.68, 116.779, 103.939]`` without
scaling, which is what the converted config's ``data.mean`` / ``data.std`` do: no transform
of the first kernel is needed. The FPN and Inception-ResNet-v2 (Mask R-CNN) variants have no
map yet: their models raise :class:`tfod_names.UnmappedModelError` naming the part.
"""

from __future__ import annotations

from flax import nnx

from jaxdet.config import schema as S
from jaxdet.interop.tfod_names import (
    Target,
    UnmappedModelError,
    conv_targets,
    keras_numbered_targets,
    resnet_layers,
)
from jaxdet.models.backbones.resnet import ResNet

PREFIX = "model"
RPN_HEADS = f"{PREFIX}/_first_stage_box_predictor/_prediction_heads"
BOX_PREDICTOR = f"{PREFIX}/_mask_rcnn_box_predictor"


def faster_rcnn_detector_map(model: nnx.Module) -> dict[str, Target]:
    """``{tf object path: (jaxdet path, transform)}`` for a C4 Faster R-CNN built from a TF OD
    API pipeline.config (see the module docstring).

    Raises:
      UnmappedModelError: the FPN variant, a mask head or a backbone other than ResNet-v1."""
    if getattr(model, "neck", None) is not None:
        raise UnmappedModelError("no TF checkpoint map yet for the FPN Faster R-CNN "
                                 "(faster_rcnn_resnet*_fpn_keras)")
    if not isinstance(model.backbone, ResNet):
        raise UnmappedModelError(f"no TF checkpoint map yet for a Faster R-CNN with "
                                 f"{type(model.backbone).__name__}")
    if getattr(model, "mask_head", None) is not None:
        raise UnmappedModelError("no TF checkpoint map yet for the Mask R-CNN mask head")
    layers = resnet_layers(model.backbone, ("backbone",))
    proposal = [(path, m) for path, m in layers if path[1] != "layer4"]
    conv5 = [(path, m) for path, m in layers if path[1] == "layer4"]
    out: dict[str, Target] = {}
    keras_numbered_targets(out, f"{PREFIX}/_feature_extractor_for_proposal_features", proposal)
    keras_numbered_targets(out, f"{PREFIX}/_feature_extractor_for_box_classifier_features", conv5)
    conv_targets(out, f"{PREFIX}/_first_stage_box_predictor_first_conv/layer_with_weights-0",
                 ("rpn", "conv"), model.rpn.conv)
    conv_targets(out, f"{RPN_HEADS}/box_encodings/0/_box_encoder_layers/0", ("rpn", "box"),
                 model.rpn.box)
    conv_targets(out, f"{RPN_HEADS}/class_predictions_with_background/0/_class_predictor_layers/0",
                 ("rpn", "objectness"), model.rpn.objectness)
    for tf_head, layer, ours in (("_box_prediction_head", "_box_encoder_layers", "box"),
                                 ("_class_prediction_head", "_class_predictor_layers", "cls")):
        for leaf in ("kernel", "bias"):
            out[f"{BOX_PREDICTOR}/{tf_head}/{layer}/1/{leaf}"] = (
                ("box_predictor", ours, leaf), "identity")
    return out


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """Faster R-CNN's ``TaskFamily.tf_name_map``: :func:`faster_rcnn_detector_map` of
    ``model`` (``config`` adds nothing to it)."""
    return faster_rcnn_detector_map(model)


__all__ = ["faster_rcnn_detector_map", "tf_name_map"]
