"""Copy a TF OD API checkpoint into a jaxdet detector (no TensorFlow needed).

    report = load_tf_detection_checkpoint(model, config, "checkpoint/ckpt-0")
    print(report.line())   # "restored 326 tensors, 0 re-initialised, 0 unused in the checkpoint"

The map from TF object paths to jaxdet variables comes from ``interop.tfod_names``; every
tensor is CRC-checked, transformed to jaxdet's layout and shape-checked. A checkpoint of
another architecture stops at the first missing names (listed, with what the checkpoint has
instead); a tensor whose shape differs is an error naming it, unless it may be
re-initialised (``reinitialize``: e.g. the class predictor for a new class count).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import jax.numpy as jnp
from flax import nnx

from jaxdet.config import schema as S
from jaxdet.interop.tf_checkpoint import CheckpointError, TfCheckpoint
from jaxdet.interop.tfod_names import (
    Path,
    Target,
    ssd_detector_map,
    tf_unapplied,
    to_ours,
)

# Not model weights: the save counter, the object graph, optimizer slots and step counters.
_BOOKKEEPING = re.compile(r"^(save_counter|_CHECKPOINTABLE_OBJECT_GRAPH)|\.OPTIMIZER_SLOT/"
                          r"|^optimizer/|global_step|/\.ATTRIBUTES/OBJECT_CONFIG_JSON$")


@dataclass
class ImportReport:
    """What an import did: jaxdet variable paths restored and re-initialised, checkpoint keys
    left unused (bookkeeping such as the save counter not counted) and those that the TF model
    holds but never applies (``unapplied``)."""

    source: str
    restored: list[str] = field(default_factory=list)
    reinitialized: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    unapplied: list[str] = field(default_factory=list)

    def line(self) -> str:
        extra = (f" ({len(self.unapplied)} more that TF holds but does not apply, e.g. a "
                 "classifier's top layers)" if self.unapplied else "")
        return (f"{self.source}: restored {len(self.restored)} tensors, "
                f"{len(self.reinitialized)} re-initialised, {len(self.unused)} unused in the "
                f"checkpoint{extra}")


def _variable_at(model: nnx.Module, path: Path) -> nnx.Variable:
    obj = model
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj


def _closest(missing: str, available: list[str]) -> str:
    close = difflib.get_close_matches(missing, available, n=1, cutoff=0.6)
    return f" (closest in the checkpoint: {close[0]})" if close else ""


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
    ``unapplied`` accepts (variables TF holds but never applies) are listed apart.

    Raises:
      CheckpointError: names missing from the checkpoint (another architecture), a shape
        mismatch, or an unreadable tensor.
    """
    ckpt = checkpoint if isinstance(checkpoint, TfCheckpoint) else TfCheckpoint(checkpoint)
    where = str(ckpt.prefix)
    paths = ckpt.variables()
    missing = [p for p in mapping if p not in paths]
    if missing:
        shown = "; ".join(f"{m}{_closest(m, list(paths))}" for m in missing[:3])
        raise CheckpointError(
            f"{where} is not a checkpoint of this model: {len(missing)} of its {len(mapping)} "
            f"tensors are missing, e.g. {shown}")
    report = ImportReport(where)
    used = set()
    for tf_path, (path, transform) in mapping.items():
        key = paths[tf_path]
        used.add(key)
        variable = _variable_at(model, path)
        value = to_ours(transform, ckpt.read(key), tuple(variable.shape))
        name = "/".join(map(str, path))
        if tuple(value.shape) != tuple(variable.shape):
            if reinitialize(tf_path):
                report.reinitialized.append(name)
                continue
            raise CheckpointError(
                f"{where}: {key} has shape {tuple(ckpt.shape(key))} (as jaxdet's "
                f"{tuple(value.shape)}) but {name} is {tuple(variable.shape)}")
        variable[...] = jnp.asarray(value, variable.dtype)
        report.restored.append(name)
    skipped = {key for tf_path, key in paths.items() if unapplied(tf_path)}
    rest = [k for k in ckpt.keys() if k not in used and not _BOOKKEEPING.search(k)]
    report.unapplied = sorted(k for k in rest if k in skipped)
    report.unused = sorted(k for k in rest if k not in skipped)
    return report


def load_tf_detection_checkpoint(model: nnx.Module, config: S.Config,
                                 checkpoint: TfCheckpoint | str | os.PathLike,
                                 **kwargs) -> ImportReport:
    """:func:`load_tf_checkpoint` with the map of the detector ``config`` builds."""
    mapping = ssd_detector_map(model, add_background_class=config.model.add_background_class)
    return load_tf_checkpoint(model, checkpoint, mapping, unapplied=tf_unapplied(model),
                              **kwargs)


__all__ = ["ImportReport", "load_tf_checkpoint", "load_tf_detection_checkpoint"]
