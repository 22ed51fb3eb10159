"""pipeline.config ``model { faster_rcnn {...} }`` -> jaxdet's Faster R-CNN, C4 variant
(``model.type: faster_rcnn``).

Called by ``config/tfod.py`` (the dispatcher, whose docstring states the rule: every field
mapped, listed in ``config/tfod_fields.py``, or a clear error); :class:`Mapper` and the shared
helpers come from ``config/tfod_common.py``. TF defaults come from the TF OD API's
``protos/faster_rcnn.proto``, ``box_predictor.proto``, ``post_processing.proto``,
``grid_anchor_generator.proto`` and ``builders/model_builder.py``
(``_build_faster_rcnn_model``, ``_build_faster_rcnn_keras_feature_extractor``).

* Feature extractors: ``faster_rcnn_resnet{50,101,152}_keras`` (TF's ``keras_models.resnet_v1``:
  no conv biases, stride in the 1x1, BatchNorm momentum 0.997 / epsilon 1e-5, frozen unless
  ``batch_norm_trainable``, with a warning: TF's frozen BatchNorm still trains gamma / beta,
  jaxdet's does not; VGG channel means subtracted from RGB, no channel reversal), and
  ``faster_rcnn_resnet{50,101,152}_fpn_keras`` (the same ResNet, with the ``conv_hyperparams``'
  activation and BatchNorm when ``override_base_feature_extractor_hyperparams``, an FPN of
  ``fpn.min_level`` .. ``fpn.max_level`` with TF2's Keras top-down path,
  ``multiscale_anchor_generator`` anchors in TF's layout), and
  ``faster_rcnn_inception_resnet_v2_keras`` (Keras' Inception-ResNet-v2, inputs scaled to
  [-1, 1]).
* Input size: jaxdet's C4 network needs it divisible by 16, the FPN one by 32. A
  ``keep_aspect_ratio_resizer`` whose ``max_dimension`` is not (the zoo's 800x1333 GPU
  configs) is padded to the next multiple of 16 (1333 -> 1344), with a warning that says
  what changes.
* Mask R-CNN (``mask_rcnn_box_predictor { predict_instance_masks: true ... }``, with
  ``number_of_stages: 3``): the mask head's fields and loss weight; the input readers'
  ``load_instance_masks`` (PNG masks) in ``tfod_train``. R-FCN, Context R-CNN, the hard
  example miner and ``number_of_stages: 1`` stop with one line.
"""

from __future__ import annotations

import math
from typing import Any

from jaxdet.config.pbtxt import Message
from jaxdet.config.tfod_common import (
    Mapper,
    hyper_activation,
    hyper_batch_norm,
    hyper_l2_weight,
    image_resizer,
    multiscale_anchors,
)

# TF feature_extractor.type -> jaxdet backbone name (C4: conv1..conv4 + RPN, conv5 per crop)
EXTRACTORS = {f"faster_rcnn_resnet{d}_keras": f"resnet{d}" for d in (50, 101, 152)}
# the FPN variant: ResNet -> FPN, multi-level RPN and crops, fully connected box classifier
FPN_EXTRACTORS = {f"faster_rcnn_resnet{d}_fpn_keras": f"resnet{d}" for d in (50, 101, 152)}
# extractors of the TF OD API's Faster R-CNN that jaxdet lacks, and what is missing
# the Keras Inception-ResNet-v2 split at block17_20 (first stage) / mixed_7a .. conv_7b
IRV2_EXTRACTOR = "faster_rcnn_inception_resnet_v2_keras"
IRV2_BN = {"decay": 0.9997, "epsilon": 1e-3}  # keras_models/inception_resnet_v2 defaults
IRV2_MEAN_STD = ([127.5] * 3, [127.5] * 3)  # preprocess: 2 / 255 * x - 1
NOT_YET_EXTRACTORS = {
    "inception_v2": "jaxdet has no Inception-v2 backbone",
    "nas": "jaxdet has no NASNet backbone",
    "pnas": "jaxdet has no PNASNet backbone",
}
STRIDE = 16  # the conv4 stride: input sizes must divide by it
FPN_STRIDE = 32  # the ResNet's top stride: FPN input sizes must divide by it
# TF's keras_models/resnet_v1._LayersOverride defaults (the feature extractor passes no
# conv_hyperparams to it)
RESNET_BN = {"decay": 0.997, "epsilon": 1e-5}
VGG_MEANS = [123.68, 116.779, 103.939]  # FasterRCNNResnetKerasFeatureExtractor.preprocess
# faster_rcnn {...} fields that name something jaxdet's Faster R-CNN does not have
UNSUPPORTED = {
    "hard_example_miner": "the second stage's hard example miner is not supported yet; "
                          "jaxdet samples second_stage_batch_size proposals per image",
    "context_config": "Context R-CNN is not supported",
}


def map_faster_rcnn(m: Mapper, fr: Message) -> tuple[dict, dict, dict]:
    """``faster_rcnn {...}`` -> (jaxdet model, data fields {resizer, mean, std}, extras
    {l2, weight_decay_rules: TF's L2 of each part, :func:`decay_rules`})."""
    fe = m.sub(fr, "feature_extractor")
    irv2 = [str(t) for t in fe.all_quietly("type")] == [IRV2_EXTRACTOR]
    backbone, neck, fe_l2 = (_irv2_extractor(m, fe) if irv2 else _feature_extractor(m, fe))
    for name, why in UNSUPPORTED.items():
        if fr.has(name):
            raise m.error(fr, name, why)
    if not fr.has("num_classes"):
        raise m.error(fr, None, "num_classes is required")
    box_predictor, fc_l2, mask_l2 = _second_stage_box_predictor(m, fr)
    masks = box_predictor.get("predict_instance_masks", False)
    stages = int(fr.take("number_of_stages", 2))
    if stages not in (2, 3) or (stages == 3 and not masks):
        raise m.error(fr, "number_of_stages", f"{stages} is not supported; jaxdet's "
                      "faster_rcnn has 2 stages, or 3 with predict_instance_masks (Mask "
                      "R-CNN's masks on the final detections; 1, RPN only, is not supported)")
    if stages == 2 and masks:
        m.warn(f"{fr.path}.number_of_stages: 2 with masks: jaxdet predicts each final "
               "detection's mask (TF's number_of_stages: 3); TF's 2 stages take the masks of "
               "the proposals the detections came from")
    if masks:
        box_predictor["second_stage_mask_prediction_loss_weight"] = float(
            fr.take("second_stage_mask_prediction_loss_weight", 1.0))
    rpn, rpn_l2 = _first_stage_box_predictor(m, fr)
    model: dict[str, Any] = {
        "type": "faster_rcnn", "num_classes": int(fr.take("num_classes")),
        "backbone": backbone,
        "first_stage_anchor_generator": (_grid_anchors(m, fr) if neck is None
                                         else _multiscale_anchors(m, fr)),
        **({} if neck is None else {"neck": neck}),
        **rpn,
        "first_stage_nms_score_threshold": float(fr.take("first_stage_nms_score_threshold",
                                                         0.0)),
        "first_stage_nms_iou_threshold": float(fr.take("first_stage_nms_iou_threshold", 0.7)),
        "first_stage_max_proposals": int(fr.take("first_stage_max_proposals", 300)),
        "first_stage_minibatch_size": int(fr.take("first_stage_minibatch_size", 256)),
        "first_stage_positive_balance_fraction": float(
            fr.take("first_stage_positive_balance_fraction", 0.5)),
        "first_stage_localization_loss_weight": float(
            fr.take("first_stage_localization_loss_weight", 1.0)),
        "first_stage_objectness_loss_weight": float(
            fr.take("first_stage_objectness_loss_weight", 1.0)),
        "crop_method": "matmul" if fr.take("use_matmul_crop_and_resize", False) else "gather",
        **_crop(m, fr),
        **box_predictor,
        "second_stage_batch_size": int(fr.take("second_stage_batch_size", 64)),
        "second_stage_balance_fraction": float(fr.take("second_stage_balance_fraction", 0.25)),
        "second_stage_post_processing": _post_processing(m, fr),
        "second_stage_localization_loss_weight": float(
            fr.take("second_stage_localization_loss_weight", 1.0)),
        "second_stage_classification_loss_weight": float(
            fr.take("second_stage_classification_loss_weight", 1.0)),
        "clip_anchors_to_image": bool(fr.take("clip_anchors_to_image", False)),
    }
    _classification_loss(m, fr)
    if fr.has("second_stage_mask_prediction_loss_weight") and not masks:
        fr.take("second_stage_mask_prediction_loss_weight")  # TF reads it only with masks
    stride = STRIDE if neck is None else FPN_STRIDE
    mean, std = IRV2_MEAN_STD if irv2 else (list(VGG_MEANS), [1.0, 1.0, 1.0])
    data = {"resizer": _input_resizer(m, fr, image_resizer(m, fr), stride), "mean": mean,
            "std": std}
    l2, rules = decay_rules(fe_l2, rpn_l2, fc_l2, mask_l2, fpn=neck is not None)
    return model, data, {"l2": l2, "weight_decay_rules": rules}


def decay_rules(fe_l2: float, rpn_l2: float, fc_l2: float, mask_l2: float | None, *,
                fpn: bool) -> tuple[float, list[dict[str, Any]]]:
    """(``train.optimizer.weight_decay``, ``weight_decay_rules``) giving each part's kernels
    TF's L2 (one weight and no rules where every part has the same): the feature
    extractor's ``conv_hyperparams`` on the ResNet and the FPN (TF's Keras ResNet C4 has no
    regularizer: 0), none on the FPN variant's fully connected box-classifier layers (TF builds
    them without one), ``first_stage_box_predictor_conv_hyperparams`` on the RPN, the box
    predictor's ``fc_hyperparams`` on it and its mask head's ``conv_hyperparams`` on the mask
    convolutions."""
    parts = [("backbone", fe_l2), *([("neck", fe_l2), ("box_classifier", 0.0)] if fpn else []),
             ("rpn", rpn_l2), ("box_predictor", fc_l2),
             *([] if mask_l2 is None else [("mask_head", mask_l2)])]
    if len({weight for _, weight in parts}) == 1:
        return parts[0][1], []
    return fe_l2 or rpn_l2 or fc_l2, [{"params": f"^{part}/.*kernel$", "weight": weight}
                                      for part, weight in parts]


# --------------------------------------------------------------------- feature extractor


def _feature_extractor(m: Mapper, fe: Message) -> tuple[dict, dict | None, float]:
    """-> (backbone, FPN neck or None, the FPN's L2 weight)."""
    fe_type = str(fe.take("type", ""))
    if fe_type not in EXTRACTORS and fe_type not in FPN_EXTRACTORS:
        key = fe_type.removeprefix("faster_rcnn_").removesuffix("_keras")
        why = next((w for k, w in NOT_YET_EXTRACTORS.items()
                    if key.endswith(k) or key == k), None)
        supported = ", ".join([*EXTRACTORS, *FPN_EXTRACTORS])
        raise m.error(fe, "type", f"'{fe_type}' is not supported yet: {why}; jaxdet supports "
                      f"{supported}" if why else f"'{fe_type}' is not supported; jaxdet "
                      f"supports {supported}")
    fpn = fe_type in FPN_EXTRACTORS
    stride = int(fe.take("first_stage_features_stride", STRIDE))
    if stride != STRIDE:
        raise m.error(fe, "first_stage_features_stride", f"{stride} is not supported; "
                      "jaxdet's (and TF's Keras) ResNet extractors have stride 16")
    if not fpn:
        for name in ("conv_hyperparams", "override_base_feature_extractor_hyperparams", "fpn"):
            if fe.has(name):  # TF's Keras ResNet C4 extractor takes none of them (a TypeError)
                raise m.error(fe, name, f"not supported: TF's '{fe_type}' takes no {name}")
    if fe.has("pad_to_multiple") and not fpn:
        m.warn(f"{fe.path}.pad_to_multiple: TF's '{fe_type}' ignores it; jaxdet needs input "
               "sizes divisible by 16 and checks it when the model is built")
        fe.take("pad_to_multiple")
    trainable = bool(fe.take("batch_norm_trainable", False))
    if not trainable:
        m.warn(f"{fe.path}.batch_norm_trainable: false -> model.backbone.batch_norm.frozen: "
               "true: the ResNet normalizes with its running statistics and never updates "
               "them, as in TF; TF still trains the BatchNorm scales and offsets (its "
               "FreezableBatchNorm keeps gamma / beta trainable), jaxdet's frozen BatchNorm "
               "holds them fixed too")
    backbone = {"name": (FPN_EXTRACTORS if fpn else EXTRACTORS)[fe_type],
                "stride_in_1x1": True, "padding": "same",
                "batch_norm": {**RESNET_BN, "frozen": not trainable}}
    if not fpn:
        return backbone, None, 0.0
    return _fpn(m, fe, backbone, trainable)


def _irv2_extractor(m: Mapper, fe: Message) -> tuple[dict, None, float]:
    """faster_rcnn_inception_resnet_v2_keras -> (the backbone, no neck, no L2): TF builds the
    Keras network with its own BatchNorm (momentum 0.9997, epsilon 1e-3, no scale) and no
    conv_hyperparams; frozen unless ``batch_norm_trainable``."""
    fe.take("type")
    stride = int(fe.take("first_stage_features_stride", STRIDE))
    if stride != STRIDE:
        raise m.error(fe, "first_stage_features_stride", f"{stride} is not supported; jaxdet's "
                      "Inception-ResNet-v2 has stride 16 (8 would dilate its block17 repeats)")
    for name in ("conv_hyperparams", "override_base_feature_extractor_hyperparams", "fpn"):
        if fe.has(name):
            raise m.error(fe, name, f"not supported: TF's '{IRV2_EXTRACTOR}' takes no {name}")
    if fe.has("pad_to_multiple"):
        fe.take("pad_to_multiple")
    trainable = bool(fe.take("batch_norm_trainable", False))
    if not trainable:
        m.warn(f"{fe.path}.batch_norm_trainable: false -> model.backbone.batch_norm.frozen: "
               "true (TF's frozen BatchNorm still trains its offsets; jaxdet's holds them)")
    return ({"name": "inception_resnet_v2", "batch_norm": {**IRV2_BN, "frozen": not trainable}},
            None, 0.0)


def _fpn(m: Mapper, fe: Message, backbone: dict,
         trainable: bool) -> tuple[dict, dict, float]:
    """The FPN extractor's conv_hyperparams, fpn levels and pad_to_multiple -> (backbone with
    the hyperparams' activation and BatchNorm when ``override_base_feature_extractor_
    hyperparams``, neck, L2 weight)."""
    hyper = m.sub(fe, "conv_hyperparams")
    activation = hyper_activation(m, hyper)
    bn = hyper_batch_norm(m, hyper, not trainable) or {"decay": 0.999, "epsilon": 1e-3,
                                                       "frozen": not trainable}
    if bool(fe.take("override_base_feature_extractor_hyperparams", False)):
        backbone = {**backbone, "activation": activation, "batch_norm": bn}
    pad = int(fe.take("pad_to_multiple", 32))
    if pad not in (0, 1, FPN_STRIDE):
        m.warn(f"{fe.path}.pad_to_multiple: {pad}: jaxdet's input sizes divide by "
               f"{FPN_STRIDE}, the ResNet's top stride, and are checked when the model is built")
    levels = m.sub(fe, "fpn")
    neck = {"name": "fpn", "min_level": int(levels.take("min_level", 3)),
            "max_level": int(levels.take("max_level", 7)),
            "depth": int(levels.take("additional_layer_depth", 256)),
            "activation": activation, "top_down": "smoothed"}  # TF2's Keras FPN
    return backbone, neck, hyper_l2_weight(m, hyper)


def _input_resizer(m: Mapper, fr: Message, resizer: dict, stride: int) -> dict:
    """The input size must divide by ``stride`` (16 C4, 32 FPN): a keep-aspect-ratio
    resizer's square is padded up to the next multiple (its ``max_dimension``); a fixed shape
    that does not divide stops."""
    if resizer["name"] == "fixed_shape":
        h, w = resizer["height"], resizer["width"]
        if h % stride or w % stride:
            raise m.error(fr, "image_resizer", f"fixed_shape_resizer {h}x{w} is not supported: "
                          f"faster_rcnn needs an input size divisible by {stride}")
        return resizer
    size = resizer["max_dimension"]
    padded = -(-size // stride) * stride
    if padded != size:
        m.warn(f"{fr.path}.image_resizer.keep_aspect_ratio_resizer.max_dimension: {size} -> "
               f"{padded} (faster_rcnn needs an input size divisible by {stride}; TF pads to "
               f"{size}x{size}, jaxdet to {padded}x{padded}): an image whose longer side "
               f"limits its scale (aspect ratio above {size / resizer['min_dimension']:.3f}) is "
               f"resized to {padded} instead of {size} pixels ({padded / size - 1:.2%} larger); "
               "any other is resized as in TF and only padded more")
        resizer = {**resizer, "max_dimension": padded}
    return resizer


# --------------------------------------------------------------------- first stage


def _grid_anchors(m: Mapper, fr: Message) -> dict[str, Any]:
    _, ag = m.choice(fr, "first_stage_anchor_generator", ["grid_anchor_generator"])
    out: dict[str, Any] = {}
    for name in ("scales", "aspect_ratios"):  # TF's builder passes them as given: none, no
        out[name] = [float(v) for v in ag.all(name)]  # anchors
        if not out[name]:
            raise m.error(ag, None, f"{name} is required (TF builds no anchors without)")
    out.update(height=float(ag.take("height", 256)), width=float(ag.take("width", 256)))
    for name in ("height_stride", "width_stride"):
        out[name] = int(m.only(ag, name, [STRIDE], STRIDE))
    for name in ("height_offset", "width_offset"):
        out[name] = float(ag.take(name, 0))
    return out


def _multiscale_anchors(m: Mapper, fr: Message) -> dict[str, Any]:
    """first_stage_anchor_generator { multiscale_anchor_generator } -> jaxdet's multiscale
    anchors (``config.tfod_common.multiscale_anchors``)."""
    _, ag = m.choice(fr, "first_stage_anchor_generator", ["multiscale_anchor_generator"])
    return multiscale_anchors(ag)


def _first_stage_box_predictor(m: Mapper, fr: Message) -> tuple[dict, float]:
    """The RPN: kernel size and depth, its conv hyperparams -> stddev (and the L2 weight).

    TF's Keras RPN conv is always followed by ReLU6 (the hyperparams' activation is not
    applied); a batch_norm there would add one, which jaxdet's RPN does not have."""
    hyper = m.sub(fr, "first_stage_box_predictor_conv_hyperparams")
    m.only(hyper, "op", ["CONV"], "CONV")
    if hyper.has("batch_norm") or hyper.has("group_norm") or hyper.has("sync_batch_norm"):
        name = next(n for n in ("batch_norm", "group_norm", "sync_batch_norm") if hyper.has(n))
        raise m.error(hyper, name, "not supported: jaxdet's RPN conv has no normalization")
    if hyper.has("activation"):
        value = hyper.take("activation")
        m.warn(f"{hyper.path}.activation: {value}: TF's Keras RPN ignores it (ReLU6 after "
               "its conv); so does jaxdet")
    stddev = _truncated_normal_stddev(m, hyper)
    return {"first_stage_box_predictor_depth": int(fr.take("first_stage_box_predictor_depth",
                                                           512)),
            "first_stage_box_predictor_kernel_size": int(
                fr.take("first_stage_box_predictor_kernel_size", 3)),
            "first_stage_box_predictor_stddev": stddev}, hyper_l2_weight(m, hyper)


def _truncated_normal_stddev(m: Mapper, hyper: Message) -> float:
    """initializer { truncated_normal_initializer { mean: 0 stddev: s } } -> s. TF's
    Hyperparams default (no initializer) is that with stddev 1.0."""
    if not hyper.has("initializer"):
        return 1.0
    _, init = m.choice(hyper, "initializer", ["truncated_normal_initializer"])
    m.only(init, "mean", [0.0], 0.0)
    return float(init.take("stddev", 1.0))


def _crop(m: Mapper, fr: Message) -> dict[str, int]:
    """initial_crop_size, maxpool_kernel_size, maxpool_stride: no proto defaults (0 in TF,
    which fails there), so each is required."""
    out = {}
    for name in ("initial_crop_size", "maxpool_kernel_size", "maxpool_stride"):
        if not fr.has(name):
            raise m.error(fr, None, f"{name} is required (TF's proto gives it no default)")
        out[name] = int(fr.take(name))
    return out


# --------------------------------------------------------------------- second stage


def _second_stage_box_predictor(m: Mapper, fr: Message) -> tuple[dict, float, float | None]:
    """mask_rcnn_box_predictor -> (share_box_across_classes and the mask head's fields, the L2
    weight of its fc_hyperparams, its mask head's or None without masks). Keypoints stop here;
    dropout is not supported."""
    _, bp = m.choice(fr, "second_stage_box_predictor", ["mask_rcnn_box_predictor"])
    masks, mask_l2 = (_mask_head(m, bp) if bp.take("predict_instance_masks", False)
                      else ({}, None))
    m.only(bp, "predict_keypoints", [False], False)
    m.only(bp, "use_dropout", [False], False)
    if bp.has("dropout_keep_probability"):
        bp.take("dropout_keep_probability")  # unused without use_dropout
    m.only(bp, "box_code_size", [4], 4)
    hyper = m.sub(bp, "fc_hyperparams")
    m.only(hyper, "op", ["FC"], "FC")
    if hyper.has("batch_norm"):
        raise m.error(hyper, "batch_norm", "not supported: jaxdet's box predictor has no "
                      "normalization")
    if hyper.has("initializer"):
        _, init = m.choice(hyper, "initializer", ["variance_scaling_initializer"])
        ok = (float(init.take("factor", 2.0)), bool(init.take("uniform", False)),
              str(init.take("mode", "FAN_IN"))) == (1.0, True, "FAN_AVG")
        if not ok:
            m.warn(f"{init.path}: jaxdet initializes the box predictor Glorot-uniform "
                   "(factor 1.0, uniform, FAN_AVG)")
    return ({"share_box_across_classes": bool(bp.take("share_box_across_classes", False)),
             **masks}, hyper_l2_weight(m, hyper), mask_l2)


def _mask_head(m: Mapper, bp: Message) -> tuple[dict[str, Any], float]:
    """mask_rcnn_box_predictor's mask fields (``predict_instance_masks: true``) -> (jaxdet's
    mask head, the L2 weight of its conv_hyperparams); those: convolutions without
    normalization, truncated-normal (stddev 0.01) kernels."""
    out = {"predict_instance_masks": True,
           "mask_height": int(bp.take("mask_height", 15)),
           "mask_width": int(bp.take("mask_width", 15)),
           "mask_prediction_conv_depth": int(bp.take("mask_prediction_conv_depth", 256)),
           "mask_prediction_num_conv_layers": int(
               bp.take("mask_prediction_num_conv_layers", 2)),
           "masks_are_class_agnostic": bool(bp.take("masks_are_class_agnostic", False)),
           "convolve_then_upsample": bool(bp.take("convolve_then_upsample", False))}
    l2 = 0.0
    if bp.has("conv_hyperparams"):
        hyper = m.sub(bp, "conv_hyperparams")
        m.only(hyper, "op", ["CONV"], "CONV")
        for norm in ("batch_norm", "group_norm", "sync_batch_norm"):
            if hyper.has(norm):
                raise m.error(hyper, norm, "not supported: jaxdet's mask head convolutions "
                              "have no normalization")
        if hyper.has("activation"):
            m.only(hyper, "activation", ["RELU"], "RELU")
        l2 = hyper_l2_weight(m, hyper)
        stddev = _truncated_normal_stddev(m, hyper)
        if not math.isclose(stddev, 0.01):
            m.warn(f"{hyper.path}: jaxdet initializes the mask head truncated-normal with "
                   f"stddev 0.01, not {stddev}")
    return out, l2


def _post_processing(m: Mapper, fr: Message) -> dict[str, Any]:
    """second_stage_post_processing: batch_non_max_suppression + score_converter SOFTMAX
    (required: TF's default IDENTITY would score raw logits; jaxdet always softmaxes)."""
    pp = m.sub(fr, "second_stage_post_processing")
    if not pp.has("score_converter"):
        raise m.error(pp, None, "score_converter is required: jaxdet's Faster R-CNN scores "
                      "with SOFTMAX (TF's default IDENTITY scores raw logits)")
    m.only(pp, "score_converter", ["SOFTMAX"], "SOFTMAX")
    if pp.has("calibration_config"):
        raise m.error(pp, "calibration_config", "not supported")
    nms = m.sub(pp, "batch_non_max_suppression")
    if float(nms.take("soft_nms_sigma", 0.0)) != 0.0:
        raise m.error(nms, "soft_nms_sigma", "soft-NMS is not supported; remove it")
    m.only(nms, "use_class_agnostic_nms", [False], False)
    m.only(nms, "max_classes_per_detection", [1], 1)
    return {"score_threshold": float(nms.take("score_threshold", 0.0)),
            "iou_threshold": float(nms.take("iou_threshold", 0.6)),
            "max_detections_per_class": int(nms.take("max_detections_per_class", 100)),
            "max_total_detections": int(nms.take("max_total_detections", 100)),
            "logit_scale": float(pp.take("logit_scale", 1.0))}


def _classification_loss(m: Mapper, fr: Message) -> None:
    """second_stage_classification_loss: absent or weighted_softmax with logit_scale 1 (TF's
    default, jaxdet's loss)."""
    if not fr.has("second_stage_classification_loss"):
        return
    _, loss = m.choice(fr, "second_stage_classification_loss", ["weighted_softmax"])
    m.only(loss, "logit_scale", [1.0], 1.0)
