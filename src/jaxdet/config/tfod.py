"""TF Object Detection API ``pipeline.config`` -> jaxdet config.

:func:`load_pipeline_config` reads a pipeline.config (protobuf text format, read by
``config/pbtxt.py``; no TensorFlow) and returns the jaxdet :class:`Config` that trains the same
model; :func:`convert_pipeline_config` returns the raw dict plus every message for the user,
which ``jaxdet convert-config`` writes as YAML.

This module only dispatches: it reads the file, hands the ``model`` section to the mapper of
its meta-architecture (``model { ssd {...} }``, SSD / RetinaNet / EfficientDet:
``config/tfod_ssd.py``; ``model { center_net {...} }``, CenterNet with keypoint tasks and
DeepMAC: ``config/tfod_center_net.py``; ``model { faster_rcnn {...} }``, Faster R-CNN C4 / FPN
and Mask R-CNN: ``config/tfod_faster_rcnn.py``), the rest to ``config/tfod_train.py``, and
settles every field left unread. :class:`Mapper` and the helpers the mappers share live in
``config/tfod_common.py``.

Every field of the file ends in exactly one of four places:

1. mapped onto a jaxdet field (``config/tfod_ssd.py``, ``config/tfod_center_net.py``,
   ``config/tfod_deepmac.py``, ``config/tfod_faster_rcnn.py`` and ``config/tfod_train.py``);
2. listed in ``config/tfod_fields.py`` as having the same effect in jaxdet (INFO) or as
   accepted with a difference the user is told about (WARNING);
3. an unsupported *value* of a known field (e.g. ``ignore_thresholds: true``): an error naming
   the field, its line and what jaxdet supports;
4. anything else: an error naming the unknown field and its line.

Before any of that the text goes through protobuf's own parser against the TF OD API's
messages (``config/tfod_proto.py``): a field, enum value or type TF would refuse is one line.
The parsed tree is then bound to those messages, so every field read with a default takes the
message's own default (its ``.proto`` file's), and a sparse pipeline.config means what it
means to TF.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jaxdet import files
from jaxdet.config.loader import apply_overrides, dump_config, validate
from jaxdet.config.pbtxt import Message, PbtxtError, parse_pbtxt
from jaxdet.config.schema import Config
from jaxdet.config.tfod_center_net import finish_keypoints, map_center_net
from jaxdet.config.tfod_common import Mapper, TfodConfigError
from jaxdet.config.tfod_faster_rcnn import map_faster_rcnn
from jaxdet.config.tfod_fields import lookup
from jaxdet.config.tfod_proto import bind_pipeline, check_pipeline_text
from jaxdet.config.tfod_ssd import map_ssd
from jaxdet.config.tfod_train import map_eval, map_inputs, map_train

logger = logging.getLogger("jaxdet.config")

PLACEHOLDER = "PATH_TO_BE_CONFIGURED"
NOT_YET = {
    "experimental_model": "custom TF models",
}
SUPPORTED_MODELS = ("ssd", "center_net", "faster_rcnn")


@dataclass
class Conversion:
    """The result of mapping one pipeline.config.

    ``raw``: the jaxdet config as a plain dict (validate with ``config.loader.validate``);
    ``same``: (tf field, why) for fields with the same effect in jaxdet;
    ``warnings``: messages about fields jaxdet accepts but treats differently;
    ``default_drift``: (field path, the default jaxdet's code gave, TF's default) wherever an
    unset field was read with a default that differs from the message's (TF's is used).
    """

    raw: dict[str, Any]
    same: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    default_drift: list[tuple[str, Any, Any]] = field(default_factory=list)


MODEL_MAPPERS = {"ssd": map_ssd, "center_net": map_center_net, "faster_rcnn": map_faster_rcnn}


def _model_kind(m: Mapper, root: Message) -> tuple[str, Message]:
    """The architecture (``ssd``, ``center_net`` or ``faster_rcnn``) and its message; the
    architectures jaxdet lacks stop here, in one line."""
    if not root.has("model"):
        raise TfodConfigError(f"{m.source}: no model {{ ... }} section")
    model = m.sub(root, "model")
    names = model.names()
    if len(names) != 1:
        raise m.error(model, None, f"must hold exactly one architecture, found {names}")
    kind = names[0]
    if kind not in SUPPORTED_MODELS:
        what = NOT_YET.get(kind, kind)
        raise m.error(model, kind, f"{what} is not supported yet; jaxdet supports model.ssd "
                      "(SSD / RetinaNet family), model.center_net (CenterNet) and "
                      "model.faster_rcnn (Faster R-CNN C4)")
    return kind, m.sub(model, kind)


def convert_pipeline_config(path: str | Path) -> Conversion:
    """Maps a pipeline.config file onto a raw jaxdet config dict.

    Raises:
      TfodConfigError: the file is unreadable, malformed, or uses an unsupported field,
        value or architecture (the message names the file, line and field).
    """
    path = os.fspath(path)
    name = files.basename(path)
    if not files.isfile(path):
        raise TfodConfigError(f"pipeline config {path} does not exist")
    text = files.read_text(path)
    try:
        root = parse_pbtxt(text)
    except PbtxtError as err:
        where = re.match(r"line (\d+), column (\d+): ", str(err))
        raise TfodConfigError(f"{path}:{where.group(1)}:{where.group(2)}: {str(err)[where.end():]}"
                              if where else f"{path}: {err}") from None
    check_pipeline_text(text, root, str(path))  # TF's own parse: fields, enums, types
    drift: list = []
    bind_pipeline(root, drift)  # unset fields read as TF's messages default them
    m = Mapper(str(path))
    kind, arch = _model_kind(m, root)
    model, data, extras = MODEL_MAPPERS[kind](m, arch)
    train, data_train = map_train(m, root, extras["l2"])
    if extras.get("initializers"):
        train["initializers"] = extras["initializers"]
    if extras.get("weight_decay_rules"):
        train["optimizer"]["weight_decay_rules"] = extras["weight_decay_rules"]
    data.update(data_train)
    data.update(map_inputs(m, root))
    data["jpeg_decode"] = "tf"  # the pixels the TF OD API's input pipeline decodes
    data["crowd_boxes"] = "train"  # TF's training reads no is_crowd / difficult / group_of
    if ((model.get("predict_instance_masks") or "mask_head" in model)
            and not data.get("load_masks")):
        reader = root.all("train_input_reader")[0] if root.has("train_input_reader") else root
        what = ("DeepMAC (deepmac_mask_estimation)" if "mask_head" in model
                else "Mask R-CNN (predict_instance_masks)")
        raise m.error(reader, "load_instance_masks", f"{what} trains on instance masks: set "
                      "load_instance_masks: true and mask_type: PNG_MASKS")
    if kind == "center_net":
        finish_keypoints(m, root, extras["keypoint_tasks"])
    raw = {"name": name.removesuffix(".config"),
           "description": f"converted from TF OD API {name}",
           "precision": data.pop("precision"), "model": model, "data": data,
           "train": train, "eval": map_eval(m, root)}
    conversion = Conversion(raw=raw, warnings=m.warnings, default_drift=drift)
    for field_path, line in root.unread():
        entry = lookup(field_path)
        if entry is None:
            raise TfodConfigError(f"{path}:{line}: {field_path}: a TF OD API field jaxdet "
                                  "does not support yet; remove it (the manual's 'Coming from "
                                  "the TF Object Detection API' lists what each field becomes)")
        kind, why = entry
        if kind == "same":
            conversion.same.append((field_path, why))
        else:
            conversion.warnings.append(f"{field_path}: {why}")
    return conversion


def conversion_yaml(conversion: Conversion, config: Config) -> str:
    """The native YAML of a converted config: a header that lists every TF field jaxdet
    treats differently or the same, then every field of ``config``."""
    lines = [f"# Written by `jaxdet convert-config`: {conversion.raw['description']}.",
             "# Train it with: jaxdet train --config THIS_FILE --workdir RUN"]
    if conversion.warnings:
        lines.append("#\n# TF fields jaxdet accepts with a difference:")
        lines += [f"#   {text}" for text in conversion.warnings]
    if conversion.same:
        lines.append("#\n# TF fields with the same effect in jaxdet (nothing to set):")
        lines += [f"#   {path}: {why}" for path, why in conversion.same]
    return "\n".join(lines) + "\n" + dump_config(config)


def load_pipeline_config(path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """A validated jaxdet :class:`Config` from a pipeline.config, ``--set`` overrides on top.

    Logs one WARNING per field jaxdet treats differently, one DEBUG line per field with the
    same effect (and an INFO count of them). Raises TfodConfigError / ConfigError.
    """
    conversion = convert_pipeline_config(path)
    for field_path, why in conversion.same:
        logger.debug("pipeline.config %s: same in jaxdet (%s)", field_path, why)
    if conversion.same:
        logger.info("pipeline.config: %d TF fields have the same effect in jaxdet and need no "
                    "setting (each listed with -v, and atop `jaxdet convert-config`'s YAML)",
                    len(conversion.same))
    for text in conversion.warnings:
        logger.warning("pipeline.config %s", text)
    raw = apply_overrides(conversion.raw, overrides)
    return validate(raw, source=str(path))
