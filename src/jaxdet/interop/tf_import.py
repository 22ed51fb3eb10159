"""Copy a TF OD API checkpoint into a jaxdet detector by a name map (no TensorFlow needed).

    report = load_tf_checkpoint(model, "checkpoint/ckpt-0", mapping)
    print(report.line())   # "restored 326 tensors, 0 re-initialised, 0 unused in the checkpoint"

The map from TF object paths to jaxdet variables is the model's family's
(``tasks.tf_name_map``; ``weights.load_tf_detection_checkpoint`` asks for it); every
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
import numpy as np
from flax import nnx

from jaxdet.interop.tf_checkpoint import CheckpointError, TfCheckpoint
from jaxdet.interop.tfod_names import Path, Target, to_ours
from jaxdet.interop.torch_names import variable_at

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


__all__ = ["ImportPlan", "ImportReport", "PlannedTensor", "load_tf_checkpoint", "plan_tf_import",
           "variable_at"]
