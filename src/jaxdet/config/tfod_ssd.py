"""pipeline.config ``model { ssd {...} }`` -> jaxdet's SSD family (SSD, RetinaNet,
EfficientDet).

Called by ``config/tfod.py`` (the dispatcher, whose docstring states the rule: every field
mapped, listed in ``config/tfod_fields.py``, or a clear error); :class:`Mapper` and the shared
helpers come from ``config/tfod_common.py``. Mapped: the feature extractor (ResNet / MobileNet
with an FPN or SSD feature maps, EfficientNet with a BiFPN), the box predictor, anchors,
matcher, box coder, losses (hard example miner included), post-processing and the image
resizer, with TF's defaults (its .proto files) where a field is absent.
"""

from __future__ import annotations

import math
import re
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
from jaxdet.config.tfod_params import (
    Rules,
    backbone_rules,
    head_rules,
    hyper_initializer,
    neck_rules,
)

# feature_extractor.type -> (backbone, neck); "_keras" (TF2) and TF1 names both accepted.
FEATURE_EXTRACTORS: dict[str, tuple[str, str]] = {
    "ssd_resnet50_v1_fpn": ("resnet50", "fpn"),
    "ssd_resnet101_v1_fpn": ("resnet101", "fpn"),
    "ssd_resnet152_v1_fpn": ("resnet152", "fpn"),
    "ssd_mobilenet_v1_fpn": ("mobilenet_v1", "fpn"),
    "ssd_mobilenet_v2_fpn": ("mobilenet_v2", "fpn"),
    "ssd_mobilenet_v1": ("mobilenet_v1", "ssd_feature_maps"),
    "ssd_mobilenet_v2": ("mobilenet_v2", "ssd_feature_maps"),
}
EFFICIENTDET_EXTRACTOR = re.compile(r"ssd_efficientnet-(b[0-7])_bifpn")
# TF's preprocess(): ResNets subtract the ImageNet channel means; MobileNets map to [-1, 1];
# EfficientNets take (x / 255 - ImageNet mean) / ImageNet std.
RESNET_MEAN_STD = ((123.68, 116.779, 103.939), (1.0, 1.0, 1.0))
MOBILENET_MEAN_STD = ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5))
EFFICIENTNET_MEAN_STD = ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))
BIFPN_COMBINE = {"fast_attention": "fastattn", "attention": "attn", "sum": "sum"}


def _feature_extractor(m: Mapper, ssd: Message, freeze_bn: bool) -> tuple[dict, dict, dict]:
    """-> (backbone, neck, extras{mean, std, l2, fe_bn})."""
    fe = m.sub(ssd, "feature_extractor")
    fe_type = str(fe.take("type", ""))
    key = fe_type.removesuffix("_keras")
    efficientdet = EFFICIENTDET_EXTRACTOR.fullmatch(key)
    if efficientdet:
        return _efficientdet_extractor(m, fe, efficientdet.group(1), freeze_bn)
    if key not in FEATURE_EXTRACTORS:
        raise m.error(fe, "type", f"'{fe_type}' is not supported; jaxdet supports "
                      f"{', '.join(sorted(FEATURE_EXTRACTORS))}, ssd_efficientnet-b0..b7_bifpn "
                      "(each also with '_keras')")
    backbone_name, neck_name = FEATURE_EXTRACTORS[key]
    hyper = m.sub(fe, "conv_hyperparams")
    activation = hyper_activation(m, hyper)
    override = bool(fe.take("override_base_feature_extractor_hyperparams", False))
    bn = hyper_batch_norm(m, hyper, freeze_bn) or {"decay": 0.999, "epsilon": 1e-3,
                                                   "frozen": freeze_bn}
    use_depthwise = bool(fe.take("use_depthwise", False))
    backbone = {
        "name": backbone_name,
        "depth_multiplier": float(fe.take("depth_multiplier", 1.0)),
        "min_depth": max(1, int(fe.take("min_depth", 16))),
        "activation": activation if override else None,
        "batch_norm": bn,
        # TF's fixed (explicit) padding equals symmetric padding for odd kernels
        "padding": "symmetric" if fe.take("use_explicit_padding", False) else "same",
    }
    if backbone_name.startswith("resnet"):  # TF's Keras ResNet v1 strides in the 1x1
        backbone["stride_in_1x1"] = True
    if backbone_name == "mobilenet_v2" and backbone["depth_multiplier"] != 1.0:
        backbone["head_scaling"] = "below_1"  # TF's Keras MobileNetV2 (its Conv_1 override)
    if fe.has("pad_to_multiple") and fe.take("pad_to_multiple") not in (1, 0):
        m.warn(f"{fe.path}.pad_to_multiple: jaxdet needs input sizes divisible by the largest "
               "feature stride and checks it when the model is built")
    # TF's feature extractors scale the layers they add by the multiplier too: depth_fn(d) =
    # max(int(d * depth_multiplier), min_depth)
    def depth_fn(depth: int) -> int:
        return max(int(depth * backbone["depth_multiplier"]), backbone["min_depth"])

    if neck_name == "fpn":
        fpn = m.sub(fe, "fpn")
        neck = {"name": "fpn", "min_level": int(fpn.take("min_level", 3)),
                "max_level": int(fpn.take("max_level", 7)),
                "depth": depth_fn(int(fpn.take("additional_layer_depth", 256))),
                "activation": activation, "use_depthwise": use_depthwise,
                "top_down": "smoothed"}  # TF2's Keras FPN
    else:
        neck = {"name": "ssd_feature_maps",
                "extra_depths": [depth_fn(d) for d in (512, 256, 256, 128)],
                "activation": activation, "use_depthwise": use_depthwise}
    mean, std = RESNET_MEAN_STD if backbone_name.startswith("resnet") else MOBILENET_MEAN_STD
    return backbone, neck, {"mean": list(mean), "std": list(std), "l2": hyper_l2_weight(m, hyper),
                            "init": hyper_initializer(m, hyper), "override": override}


def _required(m: Mapper, msg: Message, name: str) -> int:
    """A count TF's message leaves at 0 when unset (no default), which builds nothing."""
    if not msg.has(name):
        raise m.error(msg, None, f"{name} is required (TF's message has no default for it: "
                      "unset, it is 0)")
    return int(msg.take(name))


def _efficientdet_extractor(m: Mapper, fe: Message, variant: str,
                            freeze_bn: bool) -> tuple[dict, dict, dict]:
    """ssd_efficientnet-bN_bifpn(_keras) -> (EfficientNet backbone, BiFPN neck, extras)."""
    hyper = m.sub(fe, "conv_hyperparams")
    activation = hyper_activation(m, hyper)
    bn = hyper_batch_norm(m, hyper, freeze_bn) or {"decay": 0.999, "epsilon": 1e-3,
                                                   "frozen": freeze_bn}
    for name, default in (("depth_multiplier", 1.0), ("min_depth", 0), ("pad_to_multiple", 1)):
        if fe.has(name):
            m.only(fe, name, [default], default)
    override = bool(fe.take("override_base_feature_extractor_hyperparams", False))
    bifpn = m.sub(fe, "bifpn")
    combine = m.only(bifpn, "combine_method", BIFPN_COMBINE, "fast_attention")
    neck = {"name": "bifpn", "min_level": int(bifpn.take("min_level", 3)),
            "max_level": int(bifpn.take("max_level", 7)),
            "num_filters": _required(m, bifpn, "num_filters"),
            "num_iterations": _required(m, bifpn, "num_iterations"),
            "weight_method": BIFPN_COMBINE[combine], "activation": activation,
            "use_depthwise": True, "pooling": "max"}
    if bifpn.has("input_max_level"):
        m.only(bifpn, "input_max_level", [5], 5)
    backbone = {"name": f"efficientnet_{variant}", "activation": activation, "batch_norm": bn,
                "tf_endpoints": True}  # level 5 after the last stage's first block
    mean, std = EFFICIENTNET_MEAN_STD
    return backbone, neck, {"mean": list(mean), "std": list(std), "l2": hyper_l2_weight(m, hyper),
                            "init": hyper_initializer(m, hyper), "override": override}


def _box_predictor(m: Mapper, ssd: Message, freeze_bn: bool, rules: Rules) -> tuple[dict, float]:
    """-> (jaxdet head, its L2 weight); its kernels' TF initializers and L2 go to ``rules``."""
    kind, bp = m.choice(ssd, "box_predictor", ["weight_shared_convolutional_box_predictor",
                                               "convolutional_box_predictor"])
    hyper = m.sub(bp, "conv_hyperparams")
    head_rules(rules, kind, bp, hyper_initializer(m, hyper), hyper_l2_weight(m, hyper))
    m.only(bp, "box_code_size", [4], 4)
    bias_init = float(bp.take("class_prediction_bias_init", 0.0))
    if kind == "convolutional_box_predictor":
        m.only(bp, "apply_sigmoid_to_scores", [False], False)
        m.only(bp, "use_depthwise", [False], False)
        min_depth, max_depth = int(bp.take("min_depth", 0)), int(bp.take("max_depth", 0))
        if min_depth != max_depth:
            raise m.error(bp, "min_depth", f"min_depth ({min_depth}) != max_depth "
                          f"({max_depth}) is not supported: jaxdet's layers have one depth")
        head = {"name": "convolutional", "kernel_size": int(bp.take("kernel_size", 1)),
                "num_layers_before_predictor": int(bp.take("num_layers_before_predictor", 0)),
                "depth": max_depth, "use_dropout": bool(bp.take("use_dropout", True)),
                "dropout_keep_prob": float(bp.take("dropout_keep_probability", 0.8)),
                "class_prediction_bias_init": bias_init}
        hyper_activation(m, hyper)  # applies to layers before the predictor: jaxdet's default relu6
        hyper_batch_norm(m, hyper, freeze_bn)
        return head, hyper_l2_weight(m, hyper)
    m.only(bp, "use_dropout", [False], False)
    if bp.has("dropout_keep_probability"):
        bp.take("dropout_keep_probability")  # unused without use_dropout
    bn = hyper_batch_norm(m, hyper, freeze_bn)
    head = {
        "name": "weight_shared",
        "depth": int(bp.take("depth", 0)),
        "num_layers_before_predictor": int(bp.take("num_layers_before_predictor", 0)),
        "kernel_size": int(bp.take("kernel_size", 3)),
        "norm": "batch_norm" if bn is not None else "none",
        "share_norm_across_levels": False,
        "prior_probability": 1.0 / (1.0 + math.exp(-bias_init)),
        "activation": hyper_activation(m, hyper),
        "use_depthwise": bool(bp.take("use_depthwise", False)),
        "share_prediction_tower": bool(bp.take("share_prediction_tower", False)),
        "use_bias": bool(hyper.take("force_use_bias", False)),
    }
    if bn is not None:
        head["batch_norm"] = bn
    if bp.has("apply_batch_norm") and not bp.take("apply_batch_norm"):
        head["norm"] = "none"
    return head, hyper_l2_weight(m, hyper)


def _anchors(m: Mapper, ssd: Message) -> dict:
    kind, ag = m.choice(ssd, "anchor_generator", ["multiscale_anchor_generator",
                                                  "ssd_anchor_generator"])
    if kind == "multiscale_anchor_generator":
        return multiscale_anchors(ag)
    for unsupported in ("scales", "height_stride", "width_stride", "height_offset",
                        "width_offset"):
        if ag.has(unsupported):
            raise m.error(ag, unsupported, "not supported: jaxdet derives anchor scales from "
                          "min_scale/max_scale and strides from the feature maps")
    ratios = [float(a) for a in ag.all("aspect_ratios")]
    return {"name": "ssd", "num_layers": int(ag.take("num_layers", 6)),
            "min_scale": float(ag.take("min_scale", 0.2)),
            "max_scale": float(ag.take("max_scale", 0.95)),
            "aspect_ratios": ratios or [1.0, 2.0, 0.5, 3.0, 0.3333],
            "interpolated_scale_aspect_ratio": float(
                ag.take("interpolated_scale_aspect_ratio", 1.0)),
            "reduce_boxes_in_lowest_layer": bool(ag.take("reduce_boxes_in_lowest_layer", True)),
            "base_anchor_size": [float(ag.take("base_anchor_height", 1.0)),
                                 float(ag.take("base_anchor_width", 1.0))]}


def _matcher(m: Mapper, ssd: Message) -> dict:
    kind, mt = m.choice(ssd, "matcher", ["argmax_matcher", "bipartite_matcher"])
    if kind == "bipartite_matcher":
        return {"name": "bipartite"}
    m.only(mt, "ignore_thresholds", [False], False)
    return {"name": "argmax",
            "matched_threshold": float(mt.take("matched_threshold", 0.5)),
            "unmatched_threshold": float(mt.take("unmatched_threshold", 0.5)),
            "negatives_lower_than_unmatched": bool(
                mt.take("negatives_lower_than_unmatched", True)),
            "force_match_for_each_row": bool(mt.take("force_match_for_each_row", False))}


def _box_coder(m: Mapper, ssd: Message) -> dict:
    kind, bc = m.choice(ssd, "box_coder", ["faster_rcnn_box_coder", "mean_stddev_box_coder"])
    if kind == "mean_stddev_box_coder":
        return {"name": "mean_stddev", "stddev": float(bc.take("stddev", 0.01))}
    return {"name": "faster_rcnn",
            "scales": [float(bc.take(k, d)) for k, d in (("y_scale", 10.0), ("x_scale", 10.0),
                                                         ("height_scale", 5.0),
                                                         ("width_scale", 5.0))]}


def _loss(m: Mapper, ssd: Message) -> tuple[dict, dict | None]:
    """-> (jaxdet loss, hard_example_miner or None)."""
    loss = m.sub(ssd, "loss")
    kind, cls = m.choice(loss, "classification_loss", [
        "weighted_sigmoid_focal", "weighted_sigmoid", "weighted_softmax", "bootstrapped_sigmoid"])
    out: dict[str, Any] = {}
    if kind == "weighted_sigmoid_focal":
        out.update(classification="sigmoid_focal", gamma=float(cls.take("gamma", 2.0)),
                   alpha=float(cls.take("alpha")) if cls.has("alpha") else None)
    elif kind == "weighted_sigmoid":
        out.update(classification="weighted_sigmoid")
    elif kind == "weighted_softmax":
        out.update(classification="softmax", logit_scale=float(cls.take("logit_scale", 1.0)))
    else:
        out.update(classification="bootstrapped_sigmoid",
                   bootstrap_alpha=float(cls.take("alpha", 0.5)),
                   hard_bootstrap=bool(cls.take("hard_bootstrap", False)))
    kind, loc = m.choice(loss, "localization_loss",
                         ["weighted_smooth_l1", "weighted_l2", "weighted_giou"])
    if kind == "weighted_smooth_l1":
        out.update(localization="smooth_l1", delta=float(loc.take("delta", 1.0)))
    else:
        out["localization"] = {"weighted_l2": "l2", "weighted_giou": "giou"}[kind]
    out.update(classification_weight=float(loss.take("classification_weight", 1.0)),
               localization_weight=float(loss.take("localization_weight", 1.0)))
    m.only(loss, "expected_loss_weights", ["NONE"], "NONE")
    miner = None
    if loss.has("hard_example_miner"):
        hem = m.sub(loss, "hard_example_miner")
        loss_type = m.only(hem, "loss_type", ["BOTH", "CLASSIFICATION", "LOCALIZATION"], "BOTH")
        miner = {"num_hard_examples": int(hem.take("num_hard_examples", 64)),
                 "iou_threshold": float(hem.take("iou_threshold", 0.7)),
                 "loss_type": loss_type.lower(),
                 "max_negatives_per_positive": int(hem.take("max_negatives_per_positive", 0)),
                 "min_negatives_per_image": int(hem.take("min_negatives_per_image", 0))}
    return out, miner


def _post_processing(m: Mapper, ssd: Message) -> dict:
    pp = m.sub(ssd, "post_processing")
    nms = m.sub(pp, "batch_non_max_suppression")
    if float(nms.take("soft_nms_sigma", 0.0)) != 0.0:
        raise m.error(nms, "soft_nms_sigma", "soft-NMS is not supported; remove it")
    converter = m.only(pp, "score_converter", ["SIGMOID", "SOFTMAX", "IDENTITY"], "IDENTITY")
    return {"score_converter": converter.lower(),
            "logit_scale": float(pp.take("logit_scale", 1.0)),
            "score_threshold": float(nms.take("score_threshold", 0.0)),
            "iou_threshold": float(nms.take("iou_threshold", 0.6)),
            "max_detections_per_class": int(nms.take("max_detections_per_class", 100)),
            "max_total_detections": int(nms.take("max_total_detections", 100)),
            "class_agnostic": bool(nms.take("use_class_agnostic_nms", False)),
            "pre_nms_top_k": 1000}


def map_ssd(m: Mapper, ssd: Message) -> tuple[dict, dict, dict]:
    """``model { ssd {...} }`` -> (jaxdet model, data fields, extras {l2, initializers,
    weight_decay_rules}: TF's own initializer and L2 of each layer, ``config/tfod_params.py``)."""
    freeze_bn = bool(ssd.take("freeze_batchnorm", False))
    backbone, neck, fe = _feature_extractor(m, ssd, freeze_bn)
    rules = Rules()
    backbone_rules(rules, backbone["name"], fe["override"], fe["init"], fe["l2"])
    neck_rules(rules, neck["name"], bool(neck.get("use_depthwise")), fe["init"], fe["l2"])
    head, head_l2 = _box_predictor(m, ssd, freeze_bn, rules)
    loss, miner = _loss(m, ssd)
    loss["normalize_by_num_matches"] = bool(ssd.take("normalize_loss_by_num_matches", True))
    loss["normalize_loc_loss_by_codesize"] = bool(ssd.take("normalize_loc_loss_by_codesize",
                                                           False))
    softmax = loss["classification"] == "softmax"
    add_background = bool(ssd.take("add_background_class", True))
    zeros = bool(ssd.take("encode_background_as_zeros", False))
    for unsupported in ("use_confidences_as_targets",
                        "use_expected_classification_loss_under_sampling"):
        if ssd.take(unsupported, False):
            raise m.error(ssd, unsupported, "not supported; remove it or set it to false")
    ssd.take("implicit_example_weight", 1.0)  # TF reads it only with confidences as targets
    if not ssd.has("num_classes"):
        raise m.error(ssd, None, "num_classes is required")
    _similarity(m, ssd)
    jax_model = {
        "num_classes": int(ssd.take("num_classes")),
        # TF with encode_background_as_zeros predicts no background logit for sigmoid losses;
        # a softmax needs the background slot.
        "add_background_class": softmax or (add_background and not zeros),
        # ... which TF's class predictor still holds (the way back to TF restores it)
        "tf_background_logit": not softmax and add_background and zeros,
        "backbone": backbone, "neck": neck, "anchors": _anchors(m, ssd), "head": head,
        "box_coder": _box_coder(m, ssd), "matcher": _matcher(m, ssd), "loss": loss,
        "post_processing": _post_processing(m, ssd),
    }
    if miner is not None:
        jax_model["hard_example_miner"] = miner
    data = {"resizer": image_resizer(m, ssd), "mean": fe["mean"], "std": fe["std"]}
    return jax_model, data, {"l2": fe["l2"] or head_l2, "initializers": rules.init,
                             "weight_decay_rules": rules.decay}


def _similarity(m: Mapper, ssd: Message) -> None:
    if ssd.has("similarity_calculator"):
        m.choice(ssd, "similarity_calculator", ["iou_similarity"])
