"""pipeline.config ``model { center_net {...} }`` -> jaxdet's CenterNet (``model.type:
center_net``), keypoint tasks included.

Called by ``config/tfod.py`` (the dispatcher, whose docstring states the rule: every field
mapped, listed in ``config/tfod_fields.py``, or a clear error); :class:`Mapper` and the shared
helpers come from ``config/tfod_common.py``. TF defaults come from the TF OD API's
``protos/center_net.proto`` and ``builders/model_builder.py`` (``_build_center_net_model``,
``keypoint_proto_to_params``).

* Feature extractors (:data:`EXTRACTORS`): the ResNet-v1 FPNs, ResNet-v2s, hourglasses and
  MobileNetV2-FPN, with TF's BatchNorm numbers. Their preprocessing (``channel_means``,
  ``channel_stds``, ``bgr_ordering`` and each extractor's own ``preprocess_input``) becomes
  ``data.mean`` / ``data.std`` per RGB channel; jaxdet always feeds RGB, so where TF's network
  sees BGR (the caffe-style ResNet-v1 preprocessing, or ``bgr_ordering``) a warning says so.
* Keypoint tasks read their keypoints from ``keypoint_label_map_path`` (by
  ``keypoint_class_name``); the zoo configs' placeholder path is accepted for COCO's person
  (the zoo tarballs' label map) with a warning.
* DeepMAC (``deepmac_mask_estimation``, TF's ``DeepMACMetaArch``) becomes ``model.mask_head``
  (``config/tfod_deepmac.py``); as TF's DeepMAC builds no keypoint heads, keypoint tasks
  beside it stop with one line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from jaxdet.config.keypoint_specs import COCO_PERSON_KEYPOINTS
from jaxdet.config.label_map import (
    LabelMapError,
    keypoint_spec_from_label_map,
    read_label_map_items,
)
from jaxdet.config.pbtxt import Message
from jaxdet.config.tfod_common import Mapper, image_resizer
from jaxdet.config.tfod_deepmac import map_deepmac

_RESNET_BN = {"decay": 0.99, "epsilon": 1.001e-5}  # tf.keras.applications ResNets
_HOURGLASS_BN = {"decay": 0.1, "epsilon": 1e-5}  # Keras momentum 0.1, as TF's hourglass has it
_MOBILENET_BN = {"decay": 0.9997, "epsilon": 1e-3}  # the TF OD API's Keras MobileNetV2


def _resnet_v1(depth: int) -> dict[str, Any]:
    return {"name": f"resnet{depth}", "stride_in_1x1": True, "conv_bias": True,
            "padding": "symmetric", "batch_norm": dict(_RESNET_BN)}


# TF feature_extractor.type -> (backbone, neck, preprocess_input mode): "caffe" (RGB -> BGR,
# minus the ImageNet means), "tf" (x / 127.5 - 1) or "none" (the base class's means / stds).
EXTRACTORS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "resnet_v1_50_fpn": (_resnet_v1(50), {"name": "center_net_fpn"}, "caffe"),
    "resnet_v1_101_fpn": (_resnet_v1(101), {"name": "center_net_fpn"}, "caffe"),
    "resnet_v2_50": ({"name": "resnet_v2_50", "batch_norm": dict(_RESNET_BN)},
                     {"name": "center_net_deconv"}, "tf"),
    "resnet_v2_101": ({"name": "resnet_v2_101", "batch_norm": dict(_RESNET_BN)},
                      {"name": "center_net_deconv"}, "tf"),
    **{f"hourglass_{n}": ({"name": f"hourglass_{n}", "batch_norm": dict(_HOURGLASS_BN)},
                          {"name": "identity", "level": 2}, "none")
       for n in (10, 20, 32, 52, 104)},
    "mobilenet_v2_fpn": ({"name": "mobilenet_v2", "padding": "same",
                          "batch_norm": dict(_MOBILENET_BN)},
                         {"name": "center_net_mobilenet_v2_fpn"}, "tf"),
    "mobilenet_v2_fpn_sep_conv": ({"name": "mobilenet_v2", "padding": "same",
                                   "batch_norm": dict(_MOBILENET_BN)},
                                  {"name": "center_net_mobilenet_v2_fpn",
                                   "use_separable_conv": True}, "tf"),
}
_CAFFE_MEANS_RGB = (123.68, 116.779, 103.939)  # tf.keras resnet.preprocess_input, as R, G, B
# Fields of center_net {...} that name tasks or options jaxdet's CenterNet does not have.
UNSUPPORTED_TASKS = {
    "mask_estimation_task": "CenterNet's per-class segmentation masks are not supported (DeepMAC"
                            "'s deepmac_mask_estimation instance masks are)",
    "densepose_estimation_task": "DensePose is not supported",
    "track_estimation_task": "tracking is not supported",
    "temporal_offset_task": "temporal offsets (tracking) are not supported",
    "post_processing": "jaxdet's CenterNet keeps the heatmap peaks without NMS (TF without "
                       "post_processing); remove it",
}
RANKING_MODES = ("min_distance", "score_distance_ratio")
PLACEHOLDER = re.compile(r"PATH_TO_BE+_CONFIGURED")
COCO_PERSON = "/m/01g317"  # the label-map name of COCO's person in the TF OD API's label maps
HEAD_DEPTH = 256  # TF's default PredictionHeadParams: num_filters [256], kernel_sizes [3]


@dataclass
class KeypointTaskInfo:
    """What eval_config and the input readers need of one mapped keypoint task: the class
    names a ``coco_keypoint_metrics.class_label`` may use, and TF's keypoint ids (the slots of
    each object's keypoints in the records)."""

    task: dict[str, Any]
    class_labels: set[str] = field(default_factory=set)
    ids: list[int] = field(default_factory=list)


def map_center_net(m: Mapper, cn: Message) -> tuple[dict, dict, dict]:
    """``center_net {...}`` -> (jaxdet model, data fields, extras {l2, keypoint_tasks}).

    ``extras["keypoint_tasks"]``: a :class:`KeypointTaskInfo` per keypoint task (for
    :func:`finish_keypoints`)."""
    for name, why in UNSUPPORTED_TASKS.items():
        if cn.has(name):
            raise m.error(cn, name, f"not supported: {why}")
    m.only(cn, "use_depthwise", [False], False)
    if not cn.has("num_classes"):
        raise m.error(cn, None, "num_classes is required")
    backbone, neck, data = _feature_extractor(m, m.sub(cn, "feature_extractor"))
    data["resizer"] = image_resizer(m, cn)
    heads: list[Message] = []
    center = _object_center(m, m.sub(cn, "object_center_params"), heads)
    if not cn.has("object_detection_task"):
        raise m.error(cn, None, "object_detection_task is required: jaxdet's CenterNet always "
                      "predicts boxes")
    loss = {**center["loss"], **_object_detection(m, m.sub(cn, "object_detection_task"), heads)}
    if cn.has("deepmac_mask_estimation") and cn.has("keypoint_estimation_task"):
        raise m.error(cn, "keypoint_estimation_task", "not supported beside "
                      "deepmac_mask_estimation (TF's DeepMAC builds no keypoint heads)")
    infos = _keypoint_tasks(m, cn, center["loss"], heads)
    model = {"type": "center_net", "num_classes": int(cn.take("num_classes")),
             "backbone": backbone, "neck": neck, "feature_level": 2,
             "head_depth": _head_depth(m, heads),
             "heatmap_bias_init": center["heatmap_bias_init"],
             "min_overlap": center["min_overlap"], "loss": loss,
             "post_processing": center["post_processing"]}
    if infos:
        model["keypoint_tasks"] = [info.task for info in infos]
    if cn.has("deepmac_mask_estimation"):
        model["mask_head"] = map_deepmac(m, m.sub(cn, "deepmac_mask_estimation"),
                                         model["num_classes"])
    return model, data, {"l2": 0.0, "keypoint_tasks": infos}


# --------------------------------------------------------------------- feature extractor


def _feature_extractor(m: Mapper, fe: Message) -> tuple[dict, dict, dict]:
    """-> (backbone, neck, data {mean, std})."""
    fe_type = str(fe.take("type", ""))
    if fe_type not in EXTRACTORS:
        raise m.error(fe, "type", f"'{fe_type}' is not supported; jaxdet supports "
                      f"{', '.join(EXTRACTORS)}")
    backbone, neck, mode = EXTRACTORS[fe_type]
    backbone, neck = {**backbone}, {**neck}
    _extractor_options(m, fe, fe_type, backbone, neck)
    mean, std, source = _preprocessing(m, fe, mode)
    if source != [0, 1, 2]:
        order = "".join("RGB"[c] for c in source)
        m.warn(f"{fe.path}: TF feeds '{fe_type}' {order} channels "
               f"({_order_reason(fe, mode)}); jaxdet feeds RGB, normalized per colour channel "
               f"as TF does (data.mean {_rounded(mean)}, data.std {_rounded(std)}): the same "
               "when training from scratch; weights taken from TF need the first "
               "convolution's input channels reversed (jaxdet's TF checkpoint import does "
               "that where it maps the extractor)")
    return backbone, neck, {"mean": mean, "std": std}


def _extractor_options(m: Mapper, fe: Message, fe_type: str, backbone: dict,
                       neck: dict) -> None:
    """depth_multiplier, use_separable_conv, upsampling_interpolation: options of the
    MobileNetV2-FPN; the other extractors ignore them in TF (a warning if one is set)."""
    if not fe_type.startswith("mobilenet_v2_fpn"):
        for name in ("depth_multiplier", "use_separable_conv", "upsampling_interpolation"):
            if fe.has(name):
                m.warn(f"{fe.path}.{name}: TF's '{fe_type}' extractor ignores it; so does "
                       "jaxdet")
                fe.take(name)
        return
    backbone["depth_multiplier"] = float(fe.take("depth_multiplier", 1.0))
    if fe.take("use_separable_conv", False):
        neck["use_separable_conv"] = True
    neck["upsampling_interpolation"] = str(
        m.only(fe, "upsampling_interpolation", ["nearest", "bilinear"], "nearest"))


def _preprocessing(m: Mapper, fe: Message, mode: str) -> tuple[list, list, list[int]]:
    """TF's preprocess as jaxdet's ``(x - mean) / std`` per RGB channel.

    Returns (mean, std, source): the network's input channel ``k`` is RGB channel
    ``source[k]`` of the image in TF. TF: optional BGR reordering, ``(x - channel_means) /
    channel_stds`` (defaults 0 and 1), then the extractor's ``preprocess_input``."""
    means = [float(v) for v in fe.all("channel_means")] or [0.0, 0.0, 0.0]
    stds = [float(v) for v in fe.all("channel_stds")] or [1.0, 1.0, 1.0]
    for name, values in (("channel_means", means), ("channel_stds", stds)):
        if len(values) != 3:
            raise m.error(fe, name, f"needs 3 values (one per channel), got {len(values)}")
    if min(stds) <= 0:
        raise m.error(fe, "channel_stds", "must be positive")
    source = [2, 1, 0] if fe.take("bgr_ordering", False) else [0, 1, 2]
    # network slot k: (x[source[k]] - a[k]) / b[k]
    a, b = means, stds
    if mode == "caffe":  # slots reversed, then the BGR ImageNet means subtracted
        bgr_means = _CAFFE_MEANS_RGB[::-1]
        source = source[::-1]
        a = [a[2 - k] + b[2 - k] * bgr_means[k] for k in range(3)]
        b = b[::-1]
    elif mode == "tf":  # x / 127.5 - 1
        a = [a[k] + 127.5 * b[k] for k in range(3)]
        b = [127.5 * b[k] for k in range(3)]
    mean, std = [0.0] * 3, [1.0] * 3
    for k in range(3):
        mean[source[k]], std[source[k]] = a[k], b[k]
    return mean, std, source


def _order_reason(fe: Message, mode: str) -> str:
    if mode == "caffe":
        return "tf.keras.applications.resnet.preprocess_input reverses the channels"
    return "bgr_ordering: true"


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 3) for v in values]


# --------------------------------------------------------------------- box tasks


def _object_center(m: Mapper, oc: Message, heads: list[Message]) -> dict[str, Any]:
    """object_center_params -> heatmap loss, bias, min_overlap and post-processing."""
    _, focal = m.choice(oc, "classification_loss", ["penalty_reduced_logistic_focal_loss"])
    loss = {"alpha": _required_float(m, focal, "alpha"),
            "beta": _required_float(m, focal, "beta"),
            "heatmap_weight": float(oc.take("object_center_loss_weight", 1.0))}
    m.only(oc, "use_labeled_classes", [False], False)
    if oc.all("keypoint_weights_for_center"):
        raise m.error(oc, "keypoint_weights_for_center", "not supported: jaxdet's object "
                      "centers are the box centers")
    _collect_head(m, oc, "center_head_params", heads)
    return {"loss": loss, "heatmap_bias_init": float(oc.take("heatmap_bias_init", -2.19)),
            "min_overlap": float(oc.take("min_box_overlap_iou", 0.7)),
            "post_processing": {
                "max_detections": int(oc.take("max_box_predictions", 100)),
                "peak_kernel": int(oc.take("peak_max_pool_kernel_size", 3))}}


def _required_float(m: Mapper, msg: Message, name: str) -> float:
    if not msg.has(name):
        raise m.error(msg, None, f"{name} is required (TF's proto gives it no default, so an "
                      "absent one is 0.0 there; the zoo configs say alpha: 2.0 beta: 4.0)")
    return float(msg.take(name))


def _object_detection(m: Mapper, od: Message, heads: list[Message]) -> dict[str, float]:
    """object_detection_task -> the size and offset loss weights (times task_loss_weight)."""
    m.choice(od, "localization_loss", ["l1_localization_loss"])
    task = float(od.take("task_loss_weight", 1.0))
    for name in ("scale_head_params", "offset_head_params"):
        _collect_head(m, od, name, heads)
    return {"size_weight": task * float(od.take("scale_loss_weight", 0.1)),
            "offset_weight": task * float(od.take("offset_loss_weight", 1.0))}


def _collect_head(m: Mapper, msg: Message, name: str, heads: list[Message]) -> None:
    if msg.has(name):
        heads.append(m.sub(msg, name))


def _head_depth(m: Mapper, heads: list[Message]) -> int:
    """Every ``*_head_params`` must be one 3x3 layer of one common width (jaxdet's
    ``head_depth``); TF's default is 256."""
    depths = set()
    for head in heads:
        filters = [int(v) for v in head.all("num_filters")] or [HEAD_DEPTH]
        kernels = [int(v) for v in head.all("kernel_sizes")] or [3]
        if len(filters) != 1 or kernels != [3]:
            raise m.error(head, None, f"num_filters {filters} / kernel_sizes {kernels} is not "
                          "supported: jaxdet's CenterNet heads have one 3x3 layer")
        depths.add(filters[0])
    if len(depths) > 1:
        raise m.error(heads[0], None, f"heads of different widths {sorted(depths)} are not "
                      "supported: jaxdet's CenterNet heads share one head_depth")
    return depths.pop() if depths else HEAD_DEPTH


# --------------------------------------------------------------------- keypoint tasks


def _keypoint_tasks(m: Mapper, cn: Message, center_loss: dict,
                    heads: list[Message]) -> list[KeypointTaskInfo]:
    tasks = cn.all("keypoint_estimation_task")
    path = cn.take("keypoint_label_map_path")
    if not tasks:
        return []
    infos = [_keypoint_task(m, cn, kp, path, center_loss, heads) for kp in tasks]
    ids = [i for info in infos for i in info.ids]
    if ids != list(range(len(ids))):
        raise m.error(cn, "keypoint_label_map_path", f"the keypoint ids of the tasks' classes, "
                      f"in task order, are {ids}: jaxdet reads each object's keypoints as the "
                      f"tasks' keypoints laid end to end (slots 0..{len(ids) - 1}); number the "
                      "label map's keypoints that way")
    return infos


def _keypoint_task(m: Mapper, cn: Message, kp: Message, path: str | None, center_loss: dict,
                   heads: list[Message]) -> KeypointTaskInfo:
    """One keypoint_estimation_task -> a jaxdet keypoint task (and what eval needs)."""
    if not kp.has("keypoint_class_name"):
        raise m.error(kp, None, "keypoint_class_name is required")
    tf_class = str(kp.take("keypoint_class_name"))
    stds = _keypoint_std(m, kp)
    info = _keypoint_names(m, cn, kp, path, tf_class, stds)
    names = info.task["keypoints"]
    unknown = sorted(set(stds) - set(names))
    if unknown:
        raise m.error(kp, "keypoint_label_to_std", f"keys {unknown} are not keypoints of "
                      f"keypoint_class_name \"{tf_class}\" ({', '.join(names)})")
    weight = float(kp.take("task_loss_weight", 1.0))
    _keypoint_loss(m, kp, center_loss)
    for name in ("heatmap_head_params", "offset_head_params", "regress_head_params"):
        _collect_head(m, kp, name, heads)
    for name in ("predict_depth", "clip_out_of_frame_keypoints", "rescore_instances",
                 "argmax_postprocessing"):
        m.only(kp, name, [False], False)
    info.task.update({
        "name": str(kp.take("task_name", "keypoints")) or "keypoints",
        "std_dev": [stds.get(n, 1.0) for n in names],  # TF: KEYPOINT_STD_DEV_DEFAULT 1.0
        "heatmap_weight": weight * float(kp.take("keypoint_heatmap_loss_weight", 1.0)),
        "offset_weight": weight * float(kp.take("keypoint_offset_loss_weight", 1.0)),
        "regression_weight": weight * float(kp.take("keypoint_regression_loss_weight", 1.0)),
        "heatmap_bias_init": float(kp.take("heatmap_bias_init", -2.19)),
        "offset_peak_radius": int(kp.take("offset_peak_radius", 0)),
        "per_keypoint_offset": bool(kp.take("per_keypoint_offset", False)),
        "candidate_score_threshold": float(kp.take("keypoint_candidate_score_threshold", 0.1)),
        "num_candidates": int(kp.take("num_candidates_per_keypoint", 100)),
        "peak_kernel": int(kp.take("peak_max_pool_kernel_size", 3)),
        "unmatched_keypoint_score": float(kp.take("unmatched_keypoint_score", 0.1)),
        "box_scale": float(kp.take("box_scale", 1.2)),
        "candidate_search_scale": float(kp.take("candidate_search_scale", 0.3)),
        "candidate_ranking_mode": str(m.only(kp, "candidate_ranking_mode", RANKING_MODES,
                                             "min_distance")),
        "score_distance_offset": float(kp.take("score_distance_offset", 1.0)),
    })
    return info


def _keypoint_std(m: Mapper, kp: Message) -> dict[str, float]:
    """keypoint_label_to_std (a map: ``{ key: .. value: .. }`` entries) -> {label: std}."""
    out: dict[str, float] = {}
    for entry in kp.all("keypoint_label_to_std"):
        if not isinstance(entry, Message) or not entry.has("key"):
            raise m.error(kp, "keypoint_label_to_std", "each entry needs key: and value:")
        out[str(entry.take("key"))] = float(entry.take("value", 0.0))
    bad = sorted(k for k, v in out.items() if v <= 0)
    if bad:
        raise m.error(kp, "keypoint_label_to_std", f"values must be positive (keys {bad})")
    return out


def _keypoint_loss(m: Mapper, kp: Message, center_loss: dict) -> None:
    """The task's loss: the penalty-reduced focal loss with the object center's alpha and
    beta (jaxdet's keypoint heatmaps share model.loss.alpha/beta), L1 for offsets."""
    loss = m.sub(kp, "loss")
    _, focal = m.choice(loss, "classification_loss", ["penalty_reduced_logistic_focal_loss"])
    for name in ("alpha", "beta"):
        value = _required_float(m, focal, name)
        if value != center_loss[name]:
            raise m.error(focal, name, f"{value} differs from object_center_params' "
                          f"{center_loss[name]}: jaxdet's keypoint heatmaps share the center "
                          "heatmap's focal loss (model.loss.alpha/beta)")
    m.choice(loss, "localization_loss", ["l1_localization_loss"])


def _keypoint_names(m: Mapper, cn: Message, kp: Message, path: str | None, tf_class: str,
                    stds: dict[str, float]) -> KeypointTaskInfo:
    """The class and its keypoints, from the label map at ``path`` (or, for the zoo's
    placeholder and COCO's person, COCO's 17 keypoints)."""
    if path is None or not str(path) or PLACEHOLDER.search(str(path)):
        return _placeholder_keypoints(m, cn, tf_class, stds, path)
    path = _label_map_path(str(path), m.source)
    try:
        spec = keypoint_spec_from_label_map(path, tf_class)
    except LabelMapError as err:
        raise m.error(cn, "keypoint_label_map_path",
                      f"keypoint_class_name \"{tf_class}\": {err}") from None
    items = read_label_map_items(path)  # the item the spec came from: by name, else display
    item = next((i for i in items if i.name == tf_class), None) or next(
        i for i in items if i.display_name == tf_class)
    task = {"class_name": spec.class_name, "keypoints": list(spec.names)}
    labels = {tf_class, spec.class_name} | ({item.display_name} if item.display_name else set())
    return KeypointTaskInfo(task, labels, sorted(i for i, _ in item.keypoints))


def _label_map_path(path: str, pipeline_config: str) -> str:
    """``path`` as TF reads it (from the working directory); a relative path that is not there
    but lies beside the pipeline.config is taken from there."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    beside = os.path.join(os.path.dirname(os.path.abspath(pipeline_config)), path)
    return beside if os.path.exists(beside) else path


def _placeholder_keypoints(m: Mapper, cn: Message, tf_class: str, stds: dict[str, float],
                           path: str | None) -> KeypointTaskInfo:
    shown = "not set" if not path else f"the placeholder {str(path)!r}"
    if tf_class == COCO_PERSON and set(stds) == set(COCO_PERSON_KEYPOINTS):
        m.warn(f"{cn.path}.keypoint_label_map_path is {shown}: keypoint_class_name "
               f"\"{COCO_PERSON}\" with COCO's 17 person keypoints in keypoint_label_to_std "
               "reads them in COCO's order (nose, left_eye, ..., right_ankle; ids 0..16, as "
               "the zoo tarballs' label_map.txt lists them)")
        task = {"class_name": tf_class, "keypoints": list(COCO_PERSON_KEYPOINTS)}
        return KeypointTaskInfo(task, {tf_class, "person"}, list(range(17)))
    raise m.error(cn, "keypoint_label_map_path",
                  f"is {shown}: jaxdet reads the keypoints of keypoint_class_name "
                  f"\"{tf_class}\" from it; set it to the label map that defines them")


# --------------------------------------------------------------------- readers and eval


def finish_keypoints(m: Mapper, root: Message, infos: list[KeypointTaskInfo]) -> None:
    """What lives outside ``model``: the input readers' ``num_keypoints`` (checked),
    ``eval_config``'s ``coco_keypoint_metrics`` (-> each task's ``oks_sigmas``) and
    ``keypoint_edge`` (-> each task's ``skeleton``). No-op for a model without keypoint
    tasks (those fields then stay in the explicit table). Updates the tasks' dicts (the
    model's) in place."""
    if not infos:
        return
    total = sum(len(info.task["keypoints"]) for info in infos)
    for reader_name in ("train_input_reader", "eval_input_reader"):
        for reader in root.all(reader_name):
            if reader.has("num_keypoints") and int(reader.take("num_keypoints")) != total:
                raise m.error(reader, "num_keypoints", f"{reader.take('num_keypoints')} != the "
                              f"{total} keypoints of the keypoint tasks")
    ec = m.sub(root, "eval_config")
    for metric in ec.all("parameterized_metric"):
        _keypoint_metric(m, metric, infos)
    _skeletons(m, ec, infos)


def _keypoint_metric(m: Mapper, metric: Message, infos: list[KeypointTaskInfo]) -> None:
    coco = _metric_choice(m, metric)
    label = str(coco.take("class_label", ""))
    info = next((i for i in infos if label in i.class_labels), None)
    sigmas: dict[str, float] = {}
    for entry in coco.all("keypoint_label_to_sigmas"):
        if not isinstance(entry, Message) or not entry.has("key"):
            raise m.error(coco, "keypoint_label_to_sigmas", "each entry needs key: and value:")
        sigmas[str(entry.take("key"))] = float(entry.take("value", 0.0))
    if info is None:
        m.warn(f"{coco.path}.class_label: '{label}' is no keypoint task's class "
               f"({', '.join(sorted(set().union(*(i.class_labels for i in infos))))}): TF "
               "evaluates no keypoints for it; jaxdet ignores it too")
        return
    names = info.task["keypoints"]
    if not sigmas:
        return  # TF and jaxdet: 0.05 for every keypoint
    missing, extra = [n for n in names if n not in sigmas], sorted(set(sigmas) - set(names))
    if missing or extra:
        raise m.error(coco, "keypoint_label_to_sigmas", f"must give one sigma per keypoint of "
                      f"'{label}': missing {missing}, unknown {extra}")
    info.task["oks_sigmas"] = [sigmas[n] for n in names]


def _metric_choice(m: Mapper, metric: Message) -> Message:
    """parameterized_metric is itself the oneof wrapper (coco_keypoint_metrics only)."""
    names = metric.names()
    if names != ["coco_keypoint_metrics"]:
        raise m.error(metric, names[0] if names else None,
                      "only coco_keypoint_metrics is supported")
    return m.sub(metric, "coco_keypoint_metrics")


def _skeletons(m: Mapper, ec: Message, infos: list[KeypointTaskInfo]) -> None:
    """eval_config.keypoint_edge (global keypoint ids) -> each task's skeleton (its own
    0-based keypoint indices); an edge across tasks is left out, with a warning."""
    offsets, offset = [], 0
    for info in infos:
        offsets.append(offset)
        offset += len(info.task["keypoints"])
    for edge in ec.all("keypoint_edge"):
        start, end = int(edge.take("start", 0)), int(edge.take("end", 0))
        for info, first in zip(infos, offsets, strict=True):
            k = len(info.task["keypoints"])
            if first <= start < first + k and first <= end < first + k:
                info.task.setdefault("skeleton", []).append([start - first, end - first])
                break
        else:
            m.warn(f"{ec.path}.keypoint_edge ({start}, {end}) joins no keypoint task's "
                   "keypoints; not drawn")
