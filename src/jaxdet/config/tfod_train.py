"""pipeline.config ``train_config``, ``*_input_reader`` and ``eval_config`` -> jaxdet fields.

Called by ``config/tfod.py`` after the model section's family mapper; :class:`Mapper` comes
from ``config/tfod_common.py``. TF defaults come from the TF OD API's .proto files
(train.proto, optimizer.proto, eval.proto, input_reader.proto, preprocessor.proto).
"""

from __future__ import annotations

import json
from typing import Any

from jaxdet.config.pbtxt import EnumValue, Message
from jaxdet.config.tfod_common import Mapper

# preprocessor step -> its fields that jaxdet maps one to one (same names, same defaults);
# fields of a step not listed here fall to the explicit table or are errors.
AUGMENT_FIELDS: dict[str, tuple[str, ...]] = {
    "random_horizontal_flip": ("probability", "keypoint_flip_permutation"),
    "random_crop_image": ("min_object_covered", "min_aspect_ratio", "max_aspect_ratio",
                          "min_area", "max_area", "overlap_thresh", "clip_boxes",
                          "random_coef"),
    "random_adjust_brightness": ("max_delta",),
    "random_adjust_contrast": ("min_delta", "max_delta"),
    "random_adjust_hue": ("max_delta",),
    "random_adjust_saturation": ("min_delta", "max_delta"),
    "random_distort_color": ("color_ordering",),
    "random_square_crop_by_scale": ("max_border", "scale_min", "scale_max", "num_scales"),
    "random_absolute_pad_image": ("max_height_padding", "max_width_padding", "pad_color"),
    "random_scale_crop_and_pad_to_square": ("output_size", "scale_min", "scale_max"),
    "random_pad_image": ("min_image_height", "min_image_width", "max_image_height",
                         "max_image_width", "pad_color"),
    "random_black_patches": ("max_black_patches", "probability", "size_to_image_ratio"),
}
# repeated fields -> the type of their entries (a list; left out when empty)
REPEATED_AUGMENT_FIELDS = {"pad_color": float, "keypoint_flip_permutation": int}
# TF's ssd_random_crop {} without operations: its seven default operations.
SSD_RANDOM_CROP_DEFAULT = {
    "min_object_covered": [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0],
    "aspect_ratio_range": [0.5, 2.0],
    "area_range": [0.1, 1.0],
    "overlap_thresh": [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0],
    "random_coef": 0.15,
}
METRICS_SETS = ("coco_detection_metrics", "pascal_voc_detection_metrics", "coco_mask_metrics")
OPTIMIZERS = ("momentum_optimizer", "rms_prop_optimizer", "adam_optimizer")
SCHEDULES = ("cosine_decay_learning_rate", "manual_step_learning_rate",
             "exponential_decay_learning_rate", "constant_learning_rate")


def _augment_op(m: Mapper, option: Message) -> dict[str, Any]:
    supported = [*AUGMENT_FIELDS, "ssd_random_crop"]
    name, step = _single(m, option, supported)
    if name == "ssd_random_crop":
        return _ssd_random_crop(m, step)
    op: dict[str, Any] = {"name": name}
    for key in AUGMENT_FIELDS[name]:
        if key in REPEATED_AUGMENT_FIELDS:
            values = step.all(key)
            if values:
                op[key] = [REPEATED_AUGMENT_FIELDS[key](v) for v in values]
        elif step.has(key):
            op[key] = step.take(key)
    return op


def _single(m: Mapper, option: Message, supported: list[str]) -> tuple[str, Message]:
    names = option.names()
    if len(names) != 1:
        raise m.error(option, None, f"must hold exactly one preprocessing step, found {names}")
    name = names[0]
    if name not in supported:
        raise m.error(option, name, f"augmentation '{name}' is not supported; jaxdet supports "
                      f"{', '.join(sorted(supported))}")
    step = option.take(name)
    if not isinstance(step, Message):
        raise m.error(option, name, "expected a message { ... }")
    return name, step


def _ssd_random_crop(m: Mapper, step: Message) -> dict[str, Any]:
    ops = step.all("operations")
    if not ops:
        return {"name": "ssd_random_crop", **SSD_RANDOM_CROP_DEFAULT}
    covered, overlap, coefs, aspect, area = [], [], set(), set(), set()
    for op in ops:
        covered.append(float(op.take("min_object_covered", 0.0)))
        overlap.append(float(op.take("overlap_thresh", 0.0)))
        coefs.add(float(op.take("random_coef", 0.0)))
        aspect.add((float(op.take("min_aspect_ratio", 0.5)),
                    float(op.take("max_aspect_ratio", 2.0))))
        area.add((float(op.take("min_area", 0.1)), float(op.take("max_area", 1.0))))
        if op.has("clip_boxes"):
            m.only(op, "clip_boxes", [True], True)
    for what, values in (("random_coef", coefs), ("aspect ratio range", aspect),
                         ("area range", area)):
        if len(values) != 1:
            raise m.error(step, "operations", f"operations with different {what}s are not "
                          "supported: jaxdet's ssd_random_crop shares one across operations")
    return {"name": "ssd_random_crop", "min_object_covered": covered,
            "aspect_ratio_range": list(aspect.pop()), "area_range": list(area.pop()),
            "overlap_thresh": overlap, "random_coef": coefs.pop()}


def _learning_rate(m: Mapper, opt: Message) -> dict[str, Any]:
    kind, lr = m.choice(opt, "learning_rate", SCHEDULES)
    if kind == "cosine_decay_learning_rate":
        return {"name": "cosine", "learning_rate_base": float(lr.take("learning_rate_base", 2e-3)),
                "total_steps": int(lr.take("total_steps", 4_000_000)),
                "warmup_learning_rate": float(lr.take("warmup_learning_rate", 2e-4)),
                "warmup_steps": int(lr.take("warmup_steps", 10_000)),
                "hold_base_rate_steps": int(lr.take("hold_base_rate_steps", 0))}
    if kind == "manual_step_learning_rate":
        schedule = lr.all("schedule")
        return {"name": "manual_step",
                "boundaries": [int(s.take("step", 0)) for s in schedule],
                "rates": [float(lr.take("initial_learning_rate", 2e-3))]
                + [float(s.take("learning_rate", 2e-3)) for s in schedule],
                "warmup": bool(lr.take("warmup", False))}
    if kind == "exponential_decay_learning_rate":
        return {"name": "exponential",
                "initial_learning_rate": float(lr.take("initial_learning_rate", 2e-3)),
                "decay_steps": int(lr.take("decay_steps", 4_000_000)),
                "decay_factor": float(lr.take("decay_factor", 0.95)),
                "staircase": bool(lr.take("staircase", True)),
                "burnin_learning_rate": float(lr.take("burnin_learning_rate", 0.0)),
                "burnin_steps": int(lr.take("burnin_steps", 0)),
                "min_learning_rate": float(lr.take("min_learning_rate", 0.0))}
    return {"name": "constant", "learning_rate": float(lr.take("learning_rate", 2e-3))}


def _optimizer(m: Mapper, tc: Message, l2: float) -> tuple[dict, dict, float | None]:
    """-> (jaxdet optimizer, learning_rate, ema_decay or None)."""
    wrapper = m.sub(tc, "optimizer")
    kind, opt = _optimizer_kind(m, wrapper)
    out: dict[str, Any] = {"weight_decay": l2}
    if kind != "adam_optimizer":  # TF2's Keras SGD / RMSprop: the rate inside the velocity
        out["momentum_form"] = "keras"
    if kind == "momentum_optimizer":
        out.update(name="momentum", momentum=float(opt.take("momentum_optimizer_value", 0.9)))
    elif kind == "rms_prop_optimizer":
        out.update(name="rmsprop", momentum=float(opt.take("momentum_optimizer_value", 0.9)),
                   rmsprop_decay=float(opt.take("decay", 0.9)),
                   epsilon=float(opt.take("epsilon", 1.0)))
    else:
        out.update(name="adam", epsilon=float(opt.take("epsilon", 1e-8)))
    clip = float(tc.take("gradient_clipping_by_norm", 0.0))
    out["clip_gradient_norm"] = clip if clip > 0 else None
    ema = None
    if wrapper.take("use_moving_average", True):
        ema = float(wrapper.take("moving_average_decay", 0.9999))
    return out, _learning_rate(m, opt), ema


def _optimizer_kind(m: Mapper, wrapper: Message) -> tuple[str, Message]:
    kinds = [n for n in wrapper.names() if n not in ("use_moving_average",
                                                      "moving_average_decay")]
    if len(kinds) != 1:
        raise m.error(wrapper, None, f"must hold exactly one optimizer, found {kinds}")
    if kinds[0] not in OPTIMIZERS:
        raise m.error(wrapper, kinds[0], f"not supported; jaxdet supports {', '.join(OPTIMIZERS)}")
    opt = wrapper.take(kinds[0])
    if not isinstance(opt, Message):
        raise m.error(wrapper, kinds[0], "expected a message { ... }")
    return kinds[0], opt


def map_train(m: Mapper, root: Message, l2: float) -> tuple[dict, dict]:
    """train_config -> (jaxdet train section, data fields: augment, max boxes, precision)."""
    tc = m.sub(root, "train_config")
    optimizer, learning_rate, ema = _optimizer(m, tc, l2)
    num_steps = int(tc.take("num_steps", 0))
    if num_steps <= 0:
        raise m.error(tc, "num_steps", "must be set to a positive number of steps (TF's 0 "
                      "means forever; jaxdet needs a length)")
    if learning_rate.get("name") == "cosine" and learning_rate["total_steps"] < num_steps:
        m.warn(f"{tc.path}: cosine total_steps ({learning_rate['total_steps']}) < num_steps "
               f"({num_steps}): the learning rate is 0 for the last steps, as in TF")
    train: dict[str, Any] = {"batch_size": int(tc.take("batch_size", 32)),
                             "num_steps": num_steps, "optimizer": optimizer,
                             "learning_rate": learning_rate, "ema_decay": ema,
                             "tensorboard_tags": "tf"}  # TF's dashboards read the run
    if ema is not None:  # TF2's ExponentialMovingAverage: warmed up, counting its own update
        train.update(ema_dynamic_decay=True, ema_dynamic_decay_offset=1)
    for name in ("freeze_variables", "update_trainable_variables"):
        patterns = [str(v) for v in tc.all(name)]
        if patterns:  # TF1's model_main.py applied them; model_lib_v2 trains every variable
            m.warn(f"{tc.path}.{name}: TF2's model_main_tf2.py ignores it and trains every "
                   "variable, and so does jaxdet; to apply it, --set "
                   f"'train.{name}={json.dumps(patterns)}'")
    init = _fine_tune_checkpoint(m, tc)
    if init is not None:
        train["init_checkpoint"] = init
    if tc.take("merge_multiple_label_boxes", False):
        raise m.error(tc, "merge_multiple_label_boxes", "not supported; remove it")
    augment = [_augment_op(m, option) for option in tc.all("data_augmentation_options")]
    data = {"augment": augment,
            "max_number_of_boxes": int(tc.take("max_number_of_boxes", 100)),
            "precision": "bf16_on_tpu" if tc.take("use_bfloat16", False) else "fp32"}
    return train, data


FINE_TUNE_TYPES = {"detection": "detection", "classification": "classification",
                   "full": "full"}


def _fine_tune_checkpoint(m: Mapper, tc: Message) -> dict | None:
    """``fine_tune_checkpoint`` (+ ``_type``, ``_version``) -> ``train.init_checkpoint``; an
    empty one, as TF reads it, starts from the initializers."""
    path = str(tc.take("fine_tune_checkpoint", ""))
    if not path:
        for name in ("fine_tune_checkpoint_type", "fine_tune_checkpoint_version",
                     "load_all_detection_checkpoint_vars", "from_detection_checkpoint"):
            tc.take(name)
        return None
    # TF (config_util.update_fine_tune_checkpoint_type): an empty type is "detection" with the
    # deprecated from_detection_checkpoint, else "classification"
    legacy = "detection" if tc.take("from_detection_checkpoint", False) else "classification"
    kind = str(tc.take("fine_tune_checkpoint_type", "")) or legacy
    if kind not in FINE_TUNE_TYPES:
        raise m.error(tc, "fine_tune_checkpoint_type", f"{kind!r} is not supported; jaxdet "
                      f"supports {', '.join(map(repr, FINE_TUNE_TYPES))}")
    if not tc.has("fine_tune_checkpoint_version"):
        raise m.error(tc, "fine_tune_checkpoint", "fine_tune_checkpoint_version is unset, which "
                      "TF reads as V1, a checkpoint TF2's training refuses as jaxdet does; set "
                      "fine_tune_checkpoint_version: V2")
    m.only(tc, "fine_tune_checkpoint_version", ["V2"], "V1")
    if tc.take("load_all_detection_checkpoint_vars", False):
        m.warn(f"{tc.path}.load_all_detection_checkpoint_vars: jaxdet restores the tensors "
               "that fit (train.init_checkpoint.restore)")
    return {"path": path, "format": "tf", "restore": FINE_TUNE_TYPES[kind]}


def _reader(m: Mapper, root: Message, name: str) -> dict | None:
    if not root.has(name):
        return None
    readers = root.all(name)
    if len(readers) > 1:
        m.warn(f"{name}: {len(readers)} readers given; jaxdet uses the first")
    reader = readers[0]
    tfr = _tf_record_reader(m, reader)
    paths = [str(p) for p in tfr.all("input_path")]
    if not paths:
        raise m.error(tfr, None, "input_path is required")
    out: dict[str, Any] = {"type": "tfrecord", "input_path": paths}
    if reader.has("label_map_path"):
        out["label_map_path"] = str(reader.take("label_map_path"))
    if reader.has("sample_1_of_n_examples"):  # TF's Dataset.shard(n, 0) on the records
        out["sample_1_of_n_examples"] = int(reader.take("sample_1_of_n_examples"))
    if reader.take("load_instance_masks", False):
        # TF's default mask_type is NUMERICAL_MASKS; its own dataset tools write PNG_MASKS
        m.only(reader, "mask_type", [EnumValue("PNG_MASKS")], EnumValue("NUMERICAL_MASKS"))
        out["load_masks"] = True
    elif reader.has("mask_type"):
        reader.take("mask_type")  # read by TF only with load_instance_masks
    return out


def _tf_record_reader(m: Mapper, reader: Message) -> Message:
    others = [n for n in reader.names() if n.endswith("_input_reader")
              and n != "tf_record_input_reader"]
    if others:
        raise m.error(reader, others[0], "not supported; jaxdet reads tf_record_input_reader")
    if not reader.has("tf_record_input_reader"):
        raise m.error(reader, None, "tf_record_input_reader { input_path: ... } is required")
    return m.sub(reader, "tf_record_input_reader")


def map_inputs(m: Mapper, root: Message) -> dict[str, Any]:
    """train_input_reader / eval_input_reader -> data.train / data.eval (TFRecord sources);
    ``data.load_masks`` when a reader loads instance masks (``load_instance_masks``, PNG)."""
    out: dict[str, Any] = {}
    for tf_name, ours in (("train_input_reader", "train"), ("eval_input_reader", "eval")):
        reader = _reader(m, root, tf_name)
        if reader is not None:
            if reader.pop("load_masks", False):  # jaxdet's is one data-wide switch
                out["load_masks"] = True
            out[ours] = reader
    return out


def map_eval(m: Mapper, root: Message) -> dict[str, Any]:
    """eval_config -> jaxdet eval section."""
    ec = m.sub(root, "eval_config")
    metrics = [str(v) for v in ec.all("metrics_set")] or ["coco_detection_metrics"]
    for name in metrics:
        if name not in METRICS_SETS:
            raise m.error(ec, "metrics_set", f"'{name}' is not supported; jaxdet computes "
                          f"{' and '.join(METRICS_SETS)}")
    out: dict[str, Any] = {"use_ema": bool(ec.take("use_moving_averages", False)),
                           "metrics_set": list(dict.fromkeys(metrics))}
    if ec.has("num_visualizations"):
        out["num_visualizations"] = int(ec.take("num_visualizations"))
    if ec.has("num_examples"):
        out["max_images"] = int(ec.take("num_examples"))
    return out
