"""What a train batch holds, per example: its fields' shapes, dtypes and mesh-split axes.

A task declares its ``BatchLayout`` (``Task.batch_layout``); the loaders' batches, the train
step and the sharding rules follow it, and :func:`check_batch` names the first field a batch
gets wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np


@dataclass(frozen=True)
class BatchField:
    """One field of a train batch, per example: its ``shape`` (without the batch dimension),
    ``dtype``, and ``spatial_axis``, the axis of ``shape`` split over the mesh's ``spatial``
    axis (None: not split; the batch dimension always goes over ``data``), or a tuple of axes,
    one per spatial dimension in order: the first over ``spatial``, the second over
    ``spatial_1``, the third over ``spatial_2`` (``parallel.mesh.SPATIAL_AXES``; an axis the
    mesh lacks leaves its dimension whole). E.g. a volume f32[D, H, W, C]: ``(0, 1, 2)``."""

    shape: tuple[int, ...]
    dtype: Any
    spatial_axis: int | tuple[int, ...] | None = None

    @property
    def spatial_axes(self) -> tuple[int, ...]:
        """``spatial_axis`` as a tuple (empty: not split)."""
        if self.spatial_axis is None:
            return ()
        if isinstance(self.spatial_axis, int):
            return (self.spatial_axis,)
        return tuple(self.spatial_axis)


BatchLayout = dict[str, BatchField]


def abstract_batch(layout: BatchLayout, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes and dtypes of a batch of ``batch_size`` examples with ``layout``."""
    return {name: jax.ShapeDtypeStruct((batch_size, *f.shape), f.dtype)
            for name, f in layout.items()}


def check_batch(layout: BatchLayout, batch: dict, *, where: str) -> None:
    """Raise ValueError naming the first field of ``layout`` that ``batch`` lacks or holds with
    another per-example shape or dtype."""
    for name, f in layout.items():
        if name not in batch:
            raise ValueError(f"{where}: the batch has no {name!r} (the task reads "
                             f"{', '.join(layout)})")
        value = np.asarray(batch[name]) if not hasattr(batch[name], "shape") else batch[name]
        if tuple(value.shape[1:]) != tuple(f.shape) or np.dtype(value.dtype) != np.dtype(f.dtype):
            raise ValueError(f"{where}: batch field {name!r} is {np.dtype(value.dtype)}"
                             f"{list(value.shape[1:])} per example; the task expects "
                             f"{np.dtype(f.dtype)}{list(f.shape)}")


__all__ = ["BatchField", "BatchLayout", "abstract_batch", "check_batch"]
