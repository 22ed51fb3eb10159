"""Weights from elsewhere: TF OD API checkpoints, PyTorch files and jaxdet workdirs, into a
built model. It sits beside the registry because it asks each family for its name maps.

    report = load_weights(model, config, "zoo/checkpoint/ckpt-0", restore="detection")
    log.info(report.line())

``restore`` (TF's ``fine_tune_checkpoint_type``):

* ``full``: every tensor of the model, each of the same shape (predict / eval a zoo model);
* ``detection``: every tensor whose shape fits; the rest (a class predictor for another
  class count) keeps its fresh initialization and is reported re-initialised;
* ``classification``: the backbone alone, from a classification checkpoint (TF:
  ``tf.train.Checkpoint(feature_extractor=backbone)``) or a detection one.

``format``: ``tf`` (a tensor bundle: ``PREFIX.index`` + data shards), ``jaxdet`` (a
workdir: its latest orbax checkpoint), ``torch`` (a ``.safetensors`` or ``.pth`` state dict:
an effdet EfficientDet, or a torchvision ResNet / timm MobileNet or EfficientNet backbone;
``interop.torch_files``) or ``auto`` (whichever ``path`` is).

The name maps are the model's family's (``Family.tf_name_map``, ``Family.torch_detector_map``:
the functions take the job's resolved ``tasks.Family``, or a config for a single call);
what every family shares stays here: a backbone alone from a classification checkpoint (TF or
torch) or from a detection one, and jaxdet workdirs by variable path.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet import tasks
from jaxdet.config import schema as S
from jaxdet.config.loader import ConfigError
from jaxdet.interop import torch_names
from jaxdet.interop.formats import detect_format
from jaxdet.interop.tf_checkpoint import CheckpointError, TfCheckpoint
from jaxdet.interop.tf_import import ImportReport, load_tf_checkpoint
from jaxdet.interop.tfod_names import tf_unapplied, variables_of
from jaxdet.interop.torch_files import read_torch_weights
from jaxdet.interop.torch_names import variable_at
from jaxdet.tasks.family import Family
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.remote_workdir import readable_workdir

log = logging.getLogger("jaxdet")

FORMATS = ("tf", "jaxdet", "torch")
RESTORE_MODES = ("full", "detection", "classification")
_TF_BACKBONES = ("model/_feature_extractor/classification_backbone/",
                 "model/_feature_extractor/_base_model/",  # CenterNet's ResNet-v1 FPN
                 "model/_feature_extractor/_efficientnet/")
_TF_CLASSIFICATION_ROOT = "feature_extractor/"


def check_init_checkpoint(config: S.Config) -> None:
    """Refuse, before any work, a ``train.init_checkpoint.path`` that is still the TF OD API
    placeholder (a zoo pipeline.config's ``fine_tune_checkpoint``), naming what to set."""
    init = config.train.init_checkpoint
    if init is not None and re.search(r"PATH_TO_BE+_CONFIGURED", init.path):
        raise ConfigError(
            f"train.init_checkpoint.path is still the TF OD API placeholder {init.path!r} (from "
            "train_config.fine_tune_checkpoint); set it to the checkpoint to start from, e.g. "
            "--set train.init_checkpoint.path=/models/ssd_mobilenet_v2/checkpoint/ckpt-0, or "
            "train from scratch with --set train.init_checkpoint=null")


def _check_mode(restore: str) -> None:
    if restore not in RESTORE_MODES:
        raise ValueError(f"restore={restore!r}; allowed: {', '.join(RESTORE_MODES)}")


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
    _check_mode(restore)
    kind = detect_format(path) if format == "auto" else format
    if kind == "tf":
        return _load_tf(model, tasks.resolve(config), path, restore)
    if kind == "jaxdet":
        return _load_workdir(model, readable_workdir(path), restore)
    if kind == "torch":
        return _load_torch(model, tasks.resolve(config), os.fspath(path), restore)
    raise ValueError(f"format={format!r}; allowed: auto, {', '.join(FORMATS)}")


def _tf_mapping(model, family: Family, ckpt: TfCheckpoint, restore: str) -> dict:
    """``{tf object path: (jaxdet path, transform)}`` for ``restore`` from ``ckpt``."""
    mapping = family.tf_name_map(model)
    if restore == "classification":
        mapping = {tf: target for tf, target in mapping.items() if target[0][0] == "backbone"}
        if any(p.startswith(_TF_CLASSIFICATION_ROOT) for p in ckpt.variables()):
            # a classification checkpoint: the backbone model is the root's feature_extractor
            # (else: the backbone part of a detection checkpoint, mapped as it is)
            renamed = {}
            for tf_path, target in mapping.items():
                for prefix in _TF_BACKBONES:
                    if tf_path.startswith(prefix):
                        tf_path = _TF_CLASSIFICATION_ROOT + tf_path[len(prefix):]
                renamed[tf_path] = target
            mapping = renamed
    return mapping


def _load_tf(model, family: Family, path, restore: str) -> ImportReport:
    ckpt = TfCheckpoint(path)
    mapping = _tf_mapping(model, family, ckpt, restore)
    report = load_tf_checkpoint(
        model, ckpt, mapping, unapplied=tf_unapplied(model),
        reinitialize=(lambda tf_path: restore == "detection"))
    if restore == "classification":  # the detector's own tensors are expected to be left
        report.unused = [k for k in report.unused if not k.startswith("model/")]
    return report


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


def tf_variable_names(model: nnx.Module, config: Family | S.Config, path: str | os.PathLike, *,
                      restore: str = "full") -> dict[str, list[str]]:
    """The TF names of ``model``'s variables, from the TF checkpoint at ``path``: per jaxdet
    path (``backbone/layers/0/conv/kernel``, as ``train.freeze_variables`` sees it) the TF
    variable name the checkpoint recorded (``conv1_conv/kernel``,
    ``WeightSharedConvolutionalBoxPredictor/ClassPredictor/kernel``) and the object path
    (``model/_feature_extractor/...``). A checkpoint that holds part of the model (``restore:
    classification``) names that part only. Lets ``freeze_variables`` /
    ``update_trainable_variables`` regexes written for the TF OD API work unchanged."""
    ckpt = TfCheckpoint(path)
    keys, full_names = ckpt.variables(), ckpt.full_names()
    out: dict[str, list[str]] = {}
    for tf_path, (target, _) in _tf_mapping(model, tasks.resolve(config), ckpt, restore).items():
        key = keys.get(tf_path)
        if key is None:
            continue
        names = out.setdefault("/".join(map(str, target)), [])
        for name in (full_names.get(key), tf_path):
            if name and name not in names:
                names.append(name)
    return out


def _load_torch(model, family: Family, path: str, restore: str) -> ImportReport:
    """A PyTorch state dict. ``restore: classification``: the backbone alone, from a
    torchvision ResNet or timm MobileNet / EfficientNet classifier (its classifier keys are
    left unused) or from the backbone of a whole detector's file (``backbone.body.*`` of a
    torchvision detector, ``backbone.*`` of an effdet EfficientDet; its other keys are not
    reported unused). Otherwise a whole detector, by the map of the model's family
    (:meth:`Family.torch_detector_map`: the SSD family reads effdet EfficientDets and torchvision's
    RetinaNet)."""

    state = read_torch_weights(path)
    prefix = torch_names.backbone_prefix(state)
    if restore != "classification":
        found = family.torch_detector_map(model, state, source=str(path))
        if found is not None:
            return _copy_arrays(model, str(path), found.state, found.mapping, restore,
                                where="in the file", expected_unused=found.expected_unused)
        if prefix:
            raise CheckpointError(f"{path} holds a whole detector's state dict that "
                                  f"model.type={family.name!r} has no map for: restore "
                                  "its backbone alone with restore: classification")
        raise CheckpointError(f"{path} holds a backbone (classifier) state dict: restore it "
                              "with restore: classification")
    mapping = {prefix + k: (("backbone", *p), t) for k, (p, t) in
               torch_names.torch_state_dict_map(model.backbone).items()}
    return _copy_arrays(
        model, str(path), state, mapping, restore, where="in the file",
        expected_unused=lambda k: k.endswith("num_batches_tracked") or (
            bool(prefix) and not k.startswith(prefix)))


def _copy_arrays(model: nnx.Module, source: str, arrays: dict[str, np.ndarray],
                 mapping: dict[str, tuple[tuple, str]], restore: str, *, where: str,
                 expected_unused: Callable[[str], bool]) -> ImportReport:
    """Copy ``arrays[key]``, in jaxdet's layout by the mapping's transform (see
    ``torch_names.to_ours``), into the variable at the path ``mapping[key]`` names, for every
    key of ``mapping``. Every name and shape is checked before anything is written: a key
    missing from ``arrays`` is an error, a shape that differs is re-initialised with ``restore:
    detection`` and an error otherwise. Keys of ``arrays`` outside ``mapping`` are reported
    unused unless ``expected_unused(key)``."""
    missing = [k for k in mapping if k not in arrays]
    if missing:
        raise CheckpointError(f"{source} does not fit this model: {len(missing)} of the "
                              f"{len(mapping)} tensors it needs are not {where}, e.g. "
                              f"{', '.join(missing[:3])}")
    planned = []  # (key, variable name, variable, value in our layout)
    for key, (target, transform) in mapping.items():
        planned.append((key, "/".join(map(str, target)), variable_at(model, target),
                        torch_names.to_ours(transform, arrays[key])))
    wrong = [p for p in planned if tuple(p[3].shape) != tuple(p[2].shape)]
    if wrong and restore != "detection":
        key, name, variable, value = wrong[0]
        more = f" ({len(wrong)} tensors do not fit)" if len(wrong) > 1 else ""
        raise CheckpointError(f"{source}: {key} has shape {tuple(arrays[key].shape)} (as "
                              f"jaxdet's {tuple(value.shape)}) but {name} is "
                              f"{tuple(variable.shape)}{more}")
    report = ImportReport(source)
    for _, name, variable, value in planned:
        if tuple(value.shape) != tuple(variable.shape):
            report.reinitialized.append(name)
            continue
        variable[...] = jnp.asarray(value, variable.dtype)
        report.restored.append(name)
    report.unused = sorted(k for k in arrays if k not in mapping and not expected_unused(k))
    return report


def _workdir_variables(workdir: Path) -> dict[str, np.ndarray]:
    """``{'/'-joined path: array}`` of the params and batch statistics (EMA ones when the run
    evaluated with them) of a workdir's latest checkpoint, whatever model it holds."""
    import yaml

    checkpointer = Checkpointer(workdir / "checkpoints", read_only=True)  # another run's
    try:
        step = checkpointer.latest_intact_step()
        if step is None:
            raise FileNotFoundError(f"no intact checkpoint in {workdir / 'checkpoints'}")
        state = checkpointer.restore_raw(step)
    finally:
        checkpointer.close()
    use_ema = True
    saved_config = workdir / "config.yaml"
    if saved_config.is_file():
        use_ema = bool((yaml.safe_load(saved_config.read_text()) or {}).get("eval", {})
                       .get("use_ema", True))
    params = state["ema_params"] if use_ema and state.get("ema_params") else state["params"]
    out = {}
    for tree in (params, state["batch_stats"]):
        for key, value in _flatten(tree).items():
            out[key] = np.asarray(value)
    return out


def _flatten(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}{k}/"))
        return out
    return {prefix.rstrip("/"): tree}


def _load_workdir(model, workdir: Path, restore: str) -> ImportReport:
    """A jaxdet workdir's latest checkpoint, by variable path (no transform)."""
    mapping = {"/".join(map(str, path)): (path, "identity") for path in variables_of(model)}
    if restore == "classification":
        mapping = {k: v for k, v in mapping.items() if k.startswith("backbone/")}
    return _copy_arrays(
        model, str(workdir), _workdir_variables(workdir), mapping, restore,
        where="in its checkpoint",
        expected_unused=lambda k: restore == "classification" and not k.startswith("backbone/"))


def log_report(report: ImportReport) -> None:
    """One INFO line; every name at DEBUG (``-v``)."""
    log.info("init weights: %s", report.line())
    for title, names in (("restored", report.restored), ("re-initialised", report.reinitialized),
                         ("unused", report.unused)):
        for name in names:
            log.debug("init weights %s: %s", title, name)


__all__ = ["FORMATS", "RESTORE_MODES", "check_init_checkpoint", "load_tf_detection_checkpoint",
           "load_weights", "log_report", "tf_variable_names"]
