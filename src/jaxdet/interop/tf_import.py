"""Copy a TF OD API checkpoint into a jaxdet detector by a name map (no TensorFlow needed).

    report = load_tf_checkpoint(model, "checkpoint/ckpt-0", mapping)
    print(report.line())   # "restored 326 tensors, 0 re-initialised, 0 unused in the checkpoint"

The map from TF object paths to jaxdet variables is the model's family's (its
``tf_name_map``, passed in by ``tasks.weights``); every
tensor is CRC-checked, transformed to jaxdet's layout and shape-checked. A checkpoint of
another architecture stops at the first missing names (listed, with what the checkpoint has
instead); a tensor whose shape differs is an error naming it, unless it may be
re-initialised (``reinitialize``: e.g. the class predictor for a new class count).
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.interop.tf_checkpoint import VARIABLE_SUFFIX, CheckpointError, TfCheckpoint
from jaxdet.interop.tfod_names import Path, Target, tf_unapplied, to_ours
from jaxdet.interop.torch_names import variable_at

# Not model weights: the save counter, the object graph, optimizer slots and step counters.
# (model_main_tf2 saves its global step as the checkpoint's ``step``)
_BOOKKEEPING = re.compile(r"^(save_counter|_CHECKPOINTABLE_OBJECT_GRAPH|step/)"
                          r"|\.OPTIMIZER_SLOT/|^optimizer/|global_step"
                          r"|/\.ATTRIBUTES/OBJECT_CONFIG_JSON$")


@dataclass
class ImportReport:
    """What an import did: jaxdet variable paths restored and re-initialised, checkpoint keys
    left unused (bookkeeping such as the save counter not counted) and those that the TF model
    holds but never applies (``unapplied``). ``variable_names``: from a TF checkpoint, per
    jaxdet variable path the names TF gave it (:func:`tf_variable_names`), for
    ``train.freeze_variables`` regexes written against them; empty from other formats."""

    source: str
    restored: list[str] = field(default_factory=list)
    reinitialized: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    unapplied: list[str] = field(default_factory=list)
    variable_names: dict[str, list[str]] = field(default_factory=dict)

    def line(self) -> str:
        extra = (f" ({len(self.unapplied)} more that TF holds but does not apply, e.g. a "
                 "classifier's top layers)" if self.unapplied else "")
        return (f"{self.source}: restored {len(self.restored)} tensors, "
                f"{len(self.reinitialized)} re-initialised, {len(self.unused)} unused in the "
                f"checkpoint{extra}")

    def log(self, logger: logging.Logger | None = None) -> None:
        """One INFO line (:meth:`line`) on the ``jaxdet`` logger; every name at DEBUG (``-v``)."""
        logger = logger or logging.getLogger("jaxdet")
        logger.info("init weights: %s", self.line())
        for title, names in (("restored", self.restored),
                             ("re-initialised", self.reinitialized), ("unused", self.unused)):
            for name in names:
                logger.debug("init weights %s: %s", title, name)


def _closest(missing: str, available: list[str]) -> str:
    close = difflib.get_close_matches(missing, available, n=1, cutoff=0.6)
    return f" (closest in the checkpoint: {close[0]})" if close else ""


@dataclass(frozen=True)
class PlannedTensor:
    """One mapped tensor: its TF object path and checkpoint key, the jaxdet variable path and
    transform, the TF shape, the shape the transform gives, and the jaxdet variable's shape."""

    tf_path: str
    key: str
    path: Path
    transform: str
    tf_shape: tuple[int, ...]
    shape: tuple[int, ...]
    our_shape: tuple[int, ...]

    @property
    def fits(self) -> bool:
        return self.shape == self.our_shape


@dataclass
class ImportPlan:
    """What an import would do, from names and shapes alone (no tensor is read)."""

    source: str
    tensors: list[PlannedTensor]
    unused: list[str]
    unapplied: list[str]

    @property
    def mismatched(self) -> list[PlannedTensor]:
        return [t for t in self.tensors if not t.fits]


def plan_tf_import(
    model: nnx.Module,
    ckpt: TfCheckpoint,
    mapping: dict[str, Target],
    *,
    unapplied: Callable[[str], bool] = lambda tf_path: False,
) -> ImportPlan:
    """Match ``mapping`` against the checkpoint's names and shapes (the values are not read).

    Raises:
      CheckpointError: mapped names missing from the checkpoint (another architecture), listed
        with the closest names the checkpoint has.
    """
    where = str(ckpt.prefix)
    paths = ckpt.variables()
    missing = [p for p in mapping if p not in paths]
    if missing:
        shown = "; ".join(f"{m}{_closest(m, list(paths))}" for m in missing[:3])
        raise CheckpointError(
            f"{where} is not a checkpoint of this model: {len(missing)} of its {len(mapping)} "
            f"tensors are missing, e.g. {shown}")
    tensors = []
    for tf_path, (path, transform) in mapping.items():
        key = paths[tf_path]
        tf_shape = tuple(ckpt.shape(key))
        our_shape = tuple(variable_at(model, path).shape)
        try:
            shape = to_ours(transform, np.zeros(tf_shape, np.uint8), our_shape).shape
        except ValueError:  # e.g. no background column to drop: a different class count
            shape = tf_shape
        tensors.append(PlannedTensor(tf_path, key, path, transform, tf_shape, tuple(shape),
                                     our_shape))
    used = {t.key for t in tensors}
    skipped = {key for tf_path, key in paths.items() if unapplied(tf_path)}
    rest = [k for k in ckpt.keys() if k not in used and not _BOOKKEEPING.search(k)]
    return ImportPlan(where, tensors, sorted(k for k in rest if k not in skipped),
                      sorted(k for k in rest if k in skipped))


def load_tf_checkpoint(
    model: nnx.Module,
    checkpoint: TfCheckpoint | str | os.PathLike,
    mapping: dict[str, Target],
    *,
    reinitialize: Callable[[str], bool] = lambda tf_path: False,
    unapplied: Callable[[str], bool] = lambda tf_path: False,
) -> ImportReport:
    """Copy the mapped tensors of ``checkpoint`` into ``model`` in place (see the module
    docstring). ``reinitialize(tf_path)`` says whether a tensor whose shape differs keeps
    the model's own (initial) values instead of being an error. Tensors whose object path
    ``unapplied`` accepts (variables TF holds but never applies) are listed apart. Names and
    shapes are all checked before any value is read or written.

    Raises:
      CheckpointError: names missing from the checkpoint (another architecture), a shape
        mismatch, or an unreadable tensor.
    """
    ckpt = checkpoint if isinstance(checkpoint, TfCheckpoint) else TfCheckpoint(checkpoint)
    plan = plan_tf_import(model, ckpt, mapping, unapplied=unapplied)
    wrong = [t for t in plan.mismatched if not reinitialize(t.tf_path)]
    if wrong:
        first = wrong[0]
        raise CheckpointError(
            f"{plan.source}: {len(wrong)} tensors do not fit this model, e.g. {first.key} has "
            f"shape {first.tf_shape} (as jaxdet's {first.shape}) but "
            f"{'/'.join(map(str, first.path))} is {first.our_shape}")
    report = ImportReport(plan.source, unused=plan.unused, unapplied=plan.unapplied)
    for t in plan.tensors:
        name = "/".join(map(str, t.path))
        if not t.fits:
            report.reinitialized.append(name)
            continue
        variable = variable_at(model, t.path)
        variable[...] = jnp.asarray(to_ours(t.transform, ckpt.read(t.key), t.our_shape),
                                    variable.dtype)
        report.restored.append(name)
    return report


# Where TF2 keeps an optimizer's slots: the optimizer itself, or, when TF's moving average
# of the weights wraps it (the official ExponentialMovingAverage, ``use_moving_average``), its
# base optimizer (``ema_base_optimizer``) for the optimizer's own slots beside the wrapper's
# ``average`` slots
_SLOT_OWNERS = ("optimizer", "optimizer/ema_base_optimizer")


def slot_key(variable_key: str, slot: str, owner: str = "optimizer") -> str:
    """The checkpoint key of optimizer slot ``slot`` (TF2 Keras: ``momentum``; Adam ``m`` /
    ``v``; RMSprop ``rms``; the moving average's ``average``) of the variable saved under
    ``variable_key``, held by the optimizer at object path ``owner``."""
    return (variable_key.removesuffix(VARIABLE_SUFFIX)
            + f"/.OPTIMIZER_SLOT/{owner}/{slot}{VARIABLE_SUFFIX}")


def load_tf_slots(model: nnx.Module, checkpoint: TfCheckpoint | str | os.PathLike,
                  mapping: dict[str, Target], slot: str) -> int:
    """Copy each mapped variable's optimizer slot ``slot`` (:func:`slot_key`; held by the
    optimizer or, under TF's moving average, by its base optimizer) of a TF2 training
    checkpoint into ``model``'s variable in place, transformed as the variable's weights are;
    a variable without one (a batch norm's moving statistics, a frozen variable) is set to
    zeros. Returns how many slots were copied (0: the checkpoint's optimizer has no such
    slot)."""
    ckpt = checkpoint if isinstance(checkpoint, TfCheckpoint) else TfCheckpoint(checkpoint)
    keys = ckpt.variables()
    found = 0
    for tf_path, (path, transform) in mapping.items():
        variable = variable_at(model, path)
        candidates = [slot_key(keys[tf_path], slot, owner) for owner in _SLOT_OWNERS
                      ] if tf_path in keys else []
        key = next((k for k in candidates if k in ckpt.entries), None)
        if key is None:
            variable[...] = jnp.zeros(variable.shape, variable.dtype)
            continue
        variable[...] = jnp.asarray(to_ours(transform, ckpt.read(key), variable.shape),
                                    variable.dtype)
        found += 1
    return found


# Where a detection checkpoint keeps its backbone, and where a classification one does (TF:
# ``tf.train.Checkpoint(feature_extractor=backbone)``).
_TF_BACKBONES = ("model/_feature_extractor/classification_backbone/",
                 "model/_feature_extractor/_base_model/",  # CenterNet's ResNet-v1 FPN
                 "model/_feature_extractor/_efficientnet/")
_TF_CLASSIFICATION_ROOT = "feature_extractor/"
# What TF2's ``restore_from_objects(fine_tune_checkpoint_type="detection")`` restores: the
# feature extractor of an SSD or CenterNet (backbone and FPN / upsampling), both feature
# extractors of a Faster / Mask R-CNN (the backbone, its FPN, and the box classifier's conv5
# block or fc layers); never a box predictor, an RPN, a head or a mask network.
TF_DETECTION_ROOTS = ("model/_feature_extractor/",
                      "model/_feature_extractor_for_proposal_features/",
                      "model/_feature_extractor_for_box_classifier_features/")

NameMap = Callable[[nnx.Module], dict[str, Target]]


def detection_part(mapping: dict[str, Target]) -> dict[str, Target]:
    """The entries of a detector's TF name map that ``restore: detection`` reads: those
    under TF's feature extractor objects (:data:`TF_DETECTION_ROOTS`)."""
    return {tf: target for tf, target in mapping.items() if tf.startswith(TF_DETECTION_ROOTS)}


def restore_mapping(mapping: dict[str, Target], ckpt: TfCheckpoint,
                    restore: str) -> dict[str, Target]:
    """The part of a detector's name map ``mapping`` that ``restore`` reads from ``ckpt``:
    all of it (``full``, ``fitting``), the feature extractors' tensors (``detection``, as
    TF2), or (``classification``) the backbone's tensors, renamed to where a classification
    checkpoint keeps them when ``ckpt`` is one."""
    if restore == "detection":
        return detection_part(mapping)
    if restore != "classification":
        return mapping
    mapping = {tf: target for tf, target in mapping.items() if target[0][0] == "backbone"}
    if not any(p.startswith(_TF_CLASSIFICATION_ROOT) for p in ckpt.variables()):
        return mapping  # the backbone part of a detection checkpoint, mapped as it is
    renamed = {}
    for tf_path, target in mapping.items():
        for prefix in _TF_BACKBONES:
            if tf_path.startswith(prefix):
                tf_path = _TF_CLASSIFICATION_ROOT + tf_path[len(prefix):]
        renamed[tf_path] = target
    return renamed


def load_tf_weights(model: nnx.Module, path: str | os.PathLike, name_map: NameMap, *,
                    restore: str) -> ImportReport:
    """Copy the TF checkpoint at ``path`` into ``model`` in place, by the map
    ``name_map(model)`` gives (the model's family's), as ``restore`` says
    (``tasks.weights.load_weights``): ``detection`` reads the feature extractors alone (the
    rest keeps its initial values and is reported re-initialised; the checkpoint's other
    tensors are not reported unused), ``fitting`` re-initialises tensors of another shape,
    ``classification`` reads the backbone alone (the detector's own tensors are then not
    reported unused)."""
    ckpt = TfCheckpoint(path)
    whole = name_map(model)
    mapping = restore_mapping(whole, ckpt, restore)
    report = load_tf_checkpoint(model, ckpt, mapping, unapplied=tf_unapplied(model),
                                reinitialize=lambda tf_path: restore == "fitting")
    if restore == "classification":
        report.unused = [k for k in report.unused if not k.startswith("model/")]
    if restore == "detection":
        left = {tf: target for tf, target in whole.items() if tf not in mapping}
        keys = ckpt.variables()
        report.reinitialized += sorted("/".join(map(str, path)) for path, _ in left.values())
        left_keys = {keys[tf] for tf in left if tf in keys}
        report.unused = [k for k in report.unused if k not in left_keys]
    # the names of every variable the checkpoint holds: regexes may select a part not restored
    report.variable_names = _variable_names(ckpt, mapping if restore == "classification"
                                            else whole)
    return report


def tf_variable_names(model: nnx.Module, path: str | os.PathLike, name_map: NameMap, *,
                      restore: str = "full") -> dict[str, list[str]]:
    """Per jaxdet variable path of ``model`` (``backbone/layers/0/conv/kernel``) the names the
    TF checkpoint at ``path`` gives it: the variable name it recorded (``conv1_conv/kernel``)
    and the object path (``model/_feature_extractor/...``); with ``restore: classification``
    only the backbone's (a classification checkpoint holds nothing else)."""
    ckpt = TfCheckpoint(path)
    mapping = name_map(model)
    if restore == "classification":
        mapping = restore_mapping(mapping, ckpt, restore)
    return _variable_names(ckpt, mapping)


def _variable_names(ckpt: TfCheckpoint, mapping: dict[str, Target]) -> dict[str, list[str]]:
    keys, full_names = ckpt.variables(), ckpt.full_names()
    out: dict[str, list[str]] = {}
    for tf_path, (target, _) in mapping.items():
        key = keys.get(tf_path)
        if key is None:
            continue
        names = out.setdefault("/".join(map(str, target)), [])
        for name in (full_names.get(key), tf_path):
            if name and name not in names:
                names.append(name)
    return out


__all__ = ["TF_DETECTION_ROOTS", "ImportPlan", "ImportReport", "NameMap", "PlannedTensor",
           "detection_part", "load_tf_checkpoint", "load_tf_slots", "load_tf_weights",
           "plan_tf_import", "restore_mapping", "slot_key", "tf_variable_names", "variable_at"]
