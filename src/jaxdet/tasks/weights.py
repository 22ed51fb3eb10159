"""Weights from elsewhere: TF OD API checkpoints, PyTorch files and jaxdet workdirs, into a
built model. It sits beside the registry because it asks each family for its name maps.

    report = load_weights(model, config, "zoo/checkpoint/ckpt-0", restore="detection")
    log.info(report.line())

``restore`` (TF's ``fine_tune_checkpoint_type``):

* ``full``: every tensor of the model, each of the same shape (predict / eval a zoo model);
* ``detection``: what TF2's ``restore_from_objects`` restores for this type: the feature
  extractor (an SSD's or CenterNet's backbone and FPN; a Faster / Mask R-CNN's backbone, FPN
  and box-classifier features), from any format; box predictors, RPNs, heads and mask
  networks keep their fresh initialization and are reported re-initialised;
* ``fitting``: every tensor whose shape fits; the rest (a class predictor for another
  class count) keeps its fresh initialization and is reported re-initialised (the TF2
  few-shot colab's choice: all but the class predictor);
* ``classification``: the backbone alone, from a classification checkpoint (TF:
  ``tf.train.Checkpoint(feature_extractor=backbone)``) or a detection one.

``format``: ``tf`` (a tensor bundle: ``PREFIX.index`` + data shards), ``jaxdet`` (a
workdir: its latest orbax checkpoint), ``torch`` (a ``.safetensors`` or ``.pth`` state dict:
an effdet EfficientDet, or a torchvision ResNet / timm MobileNet or EfficientNet backbone;
``interop.torch_files``) or ``auto`` (whichever ``path`` is).

Each format is read, mapped and copied in one place below this module (``interop.tf_import``,
``interop.array_import``; a workdir's arrays from ``train.workdir_variables``); what this
module adds is the family: its name maps (``Family.tf_name_map``,
``Family.torch_detector_map``) handed down. The functions take the job's resolved
``tasks.Family``, or a config for a single call.
"""

from __future__ import annotations

import os

import numpy as np
from flax import nnx

from jaxdet import tasks
from jaxdet.config import schema as S
from jaxdet.interop import tf_import
from jaxdet.interop.array_import import load_torch_weights, load_variables
from jaxdet.interop.formats import detect_format
from jaxdet.interop.tf_checkpoint import TfCheckpoint
from jaxdet.interop.tf_import import ImportReport, load_tf_checkpoint, load_tf_weights
from jaxdet.interop.tfod_names import (
    tf_unapplied,
    tf_unapplied_variables,
    to_tf,
    variables_of,
)
from jaxdet.tasks.family import Family
from jaxdet.train.workdir_variables import latest_variables

FORMATS = ("tf", "jaxdet", "torch")
RESTORE_MODES = ("full", "detection", "fitting", "classification")


def load_weights(model: nnx.Module, config: Family | S.Config, path: str | os.PathLike, *,
                 restore: str = "full", format: str = "auto") -> ImportReport:
    """Copy weights from ``path`` into ``model`` (built from ``config``, or the job's resolved
    family of it) in place; see the module docstring. Returns what was restored,
    re-initialised and left unused.

    Raises:
      FileNotFoundError / CheckpointError / ValueError: a missing or unreadable checkpoint,
        one of another architecture, or (``full``) a tensor of another shape; each names the
        file and the first tensors concerned.
    """
    family = tasks.resolve(config)
    if restore not in RESTORE_MODES:
        raise ValueError(f"restore={restore!r}; allowed: {', '.join(RESTORE_MODES)}")
    kind = detect_format(path) if format == "auto" else format
    if kind == "tf":
        return load_tf_weights(model, path, family.tf_name_map, restore=restore)
    paths = detection_paths(model) if restore == "detection" else None
    if kind == "jaxdet":
        return load_variables(model, str(path), latest_variables(path), restore=restore,
                              detection_paths=paths)
    if kind == "torch":
        return load_torch_weights(model, path, family.torch_detector_map, restore=restore,
                                  model_type=family.name, detection_paths=paths)
    raise ValueError(f"format={format!r}; allowed: auto, {', '.join(FORMATS)}")


# The modules of a jaxdet detector that TF2 counts as its feature extractor(s) (what
# ``restore: detection`` reads): the backbone (a Faster R-CNN C4's conv5 block included), the
# FPN / upsampling neck, and an FPN Faster R-CNN's fc box-classifier features.
FEATURE_EXTRACTOR_MODULES = ("backbone", "neck", "box_classifier")


def detection_paths(model: nnx.Module) -> frozenset[str]:
    """The '/'-joined variable paths of ``model`` that ``restore: detection`` reads from a
    jaxdet workdir or a PyTorch file: those of :data:`FEATURE_EXTRACTOR_MODULES`, the parts
    TF's name maps put under TF's feature extractor objects (from a TF checkpoint the TF
    names decide: ``interop.tf_import.detection_part``)."""
    return frozenset("/".join(map(str, path)) for path in variables_of(model)
                     if str(path[0]) in FEATURE_EXTRACTOR_MODULES)


def load_tf_detection_checkpoint(model: nnx.Module, config: Family | S.Config,
                                 checkpoint: TfCheckpoint | str | os.PathLike,
                                 **kwargs) -> ImportReport:
    """``interop.tf_import.load_tf_checkpoint`` with the TF name map of the detector ``config``
    builds (:meth:`Family.tf_name_map`; ``config``: the config or its resolved family);
    ``kwargs``: ``reinitialize``.

    Raises:
      UnmappedModelError: a family or model part without a map (the message names it).
      CheckpointError: as ``load_tf_checkpoint``."""
    mapping = tasks.resolve(config).tf_name_map(model)
    return load_tf_checkpoint(model, checkpoint, mapping, unapplied=tf_unapplied(model),
                              **kwargs)


def load_tf_optimizer_slot(model: nnx.Module, config: Family | S.Config,
                           path: str | os.PathLike, slot: str) -> int:
    """Copy optimizer slot ``slot`` of the TF2 training checkpoint at ``path`` into ``model``
    (built from ``config``) by its family's TF name map (``interop.tf_import.load_tf_slots``):
    the model's parameters then hold the slot (zeros where TF keeps none). Returns how many
    slots were found."""
    family = tasks.resolve(config)
    return tf_import.load_tf_slots(model, path, family.tf_name_map(model), slot)


def tf_variables(model: nnx.Module, config: Family | S.Config,
                 tf_shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """``model``'s variables as a TF OD API checkpoint holds them: ``{TF object path: array
    in TF's layout}`` by its family's TF name map (``interop.tfod_names.to_tf``), and the
    variables TF holds but never applies as placeholders of TF's shapes (an EfficientNet's
    classifier top: ``interop.tfod_names.tf_unapplied_variables``), for
    ``interop.tf_checkpoint_writer``. ``tf_shapes`` (object path -> shape, e.g. from a TF
    checkpoint of the same model) where TF's shape is not jaxdet's (a background logit jaxdet
    leaves out, a reshaped weight)."""
    family = tasks.resolve(config)
    shapes = dict(tf_shapes or {})
    background = bool(getattr(family.config.model, "tf_background_logit", False))
    out = {}
    for tf_path, (path, transform) in family.tf_name_map(model).items():
        value = np.asarray(tf_import.variable_at(model, path)[...])
        if transform == "drop_background" and background and tf_path not in shapes:
            anchors = value.shape[-1] // family.config.model.num_classes  # TF: 1 + C each
            shapes[tf_path] = (*value.shape[:-1], value.shape[-1] + anchors)
        try:
            out[tf_path] = to_tf(transform, value, shapes.get(tf_path))
        except ValueError as err:
            raise ValueError(f"{tf_path}: {err} (TF shapes it differently from jaxdet; a "
                             "model holding it cannot be written as a TF checkpoint yet)") from None
    return {**out, **tf_unapplied_variables(model)}


def tf_variable_names(model: nnx.Module, config: Family | S.Config, path: str | os.PathLike, *,
                      restore: str = "full") -> dict[str, list[str]]:
    """The TF names of ``model``'s variables, from the TF checkpoint at ``path``: per jaxdet
    path (``backbone/layers/0/conv/kernel``, as ``train.freeze_variables`` sees it) the TF
    variable name the checkpoint recorded (``conv1_conv/kernel``,
    ``WeightSharedConvolutionalBoxPredictor/ClassPredictor/kernel``) and the object path
    (``model/_feature_extractor/...``). A checkpoint that holds part of the model (``restore:
    classification``) names that part only. Lets ``freeze_variables`` /
    ``update_trainable_variables`` regexes written for the TF OD API work unchanged."""
    return tf_import.tf_variable_names(model, path, tasks.resolve(config).tf_name_map,
                                       restore=restore)


__all__ = ["FEATURE_EXTRACTOR_MODULES", "FORMATS", "RESTORE_MODES", "detection_paths",
           "load_tf_detection_checkpoint", "load_tf_optimizer_slot", "load_weights",
           "tf_variable_names", "tf_variables"]
