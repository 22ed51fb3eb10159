"""Sharding rules: how the train state and a batch lie on a ``(data, spatial)`` mesh.

* a batch field [B, ...] (the task's ``batch_layout``): B over ``data``, and the axis the
  layout names (images: H) over ``spatial``; a layout naming several (volumes: D, H, W) puts
  them over ``spatial``, ``spatial_1``, ``spatial_2`` where the mesh has those axes
  (``parallel.spatial_axes``, see ``parallel.mesh``);
* parameters, batch statistics, moving averages, the step: replicated;
* optimizer state: replicated, or (``shard_optimizer_state``) each moment split over ``data``
  along its first dimension that divides evenly (a ZeRO-1 layout: XLA reduce-scatters the
  gradients into it and all-gathers the updates).

Nothing here computes: these are declarations that ``jax.jit`` and XLA's partitioner follow.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdet.data.batch_layout import BatchField, BatchLayout
from jaxdet.models.thin_maps import mesh_scope
from jaxdet.parallel.mesh import DATA, SPATIAL, SPATIAL_AXES

PyTree = Any


def replicated(mesh: Mesh) -> NamedSharding:
    """A full copy on every device."""
    return NamedSharding(mesh, P())


def field_spec(field: BatchField, mesh: Mesh | None = None) -> P:
    """The partition spec of a batch field [B, ...]: its batch dimension over ``data``, its
    ``spatial_axis`` (if any) over ``spatial``; with several spatial axes, the k-th over
    ``SPATIAL_AXES[k]`` (``spatial``, ``spatial_1``, ``spatial_2``) where ``mesh`` has that
    axis (without ``mesh``: a ``(data, spatial)`` mesh, only the first is split)."""
    names = mesh.axis_names if mesh is not None else (DATA, SPATIAL)
    by_dim = {dim: SPATIAL_AXES[k] for k, dim in enumerate(field.spatial_axes)
              if k < len(SPATIAL_AXES) and SPATIAL_AXES[k] in names}
    return P(DATA, *(by_dim.get(i) for i in range(len(field.shape))))


def batch_sharding(mesh: Mesh, layout: BatchLayout) -> dict:
    """Shardings of the fields of a task's batch layout (``task.batch_layout()``)."""
    return {k: NamedSharding(mesh, field_spec(f, mesh)) for k, f in layout.items()}


def _split_over_data(mesh: Mesh, leaf) -> NamedSharding:
    size = mesh.shape[DATA]
    shape = getattr(leaf, "shape", ())
    for axis, dim in enumerate(shape):
        if dim % size == 0 and dim >= size:
            spec = [None] * len(shape)
            spec[axis] = DATA
            return NamedSharding(mesh, P(*spec))
    return replicated(mesh)


def state_sharding(mesh: Mesh, abstract_state: dict, *, shard_optimizer_state: bool = False):
    """Shardings for a train state (see ``train.step``), leaf by leaf.

    Args:
      abstract_state: the state or its ``jax.eval_shape``.
      shard_optimizer_state: split optimizer moments over ``data`` (others stay replicated).
    """
    rep = replicated(mesh)
    out = {k: jax.tree.map(lambda _: rep, v) for k, v in abstract_state.items()}
    if shard_optimizer_state and mesh.shape[DATA] > 1:
        out["opt_state"] = jax.tree.map(lambda x: _split_over_data(mesh, x),
                                        abstract_state["opt_state"])
    return out


def place(tree: PyTree, shardings: PyTree) -> PyTree:
    """Put a tree of arrays on the mesh; every process passes the same full values (e.g. a
    freshly initialized state), and each device receives its slice."""

    def one(x, sharding):
        host = np.asarray(jax.device_get(x))
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(one, tree, shardings)


def local_copy(tree: PyTree) -> PyTree:
    """This process's own copy of replicated arrays, as single-device arrays (to run a
    computation on one process, e.g. evaluation, without the others)."""
    return jax.tree.map(lambda x: x.addressable_data(0) if isinstance(x, jax.Array) else x, tree)


def with_shardings(abstract: PyTree, shardings: PyTree) -> PyTree:
    """``jax.ShapeDtypeStruct`` leaves carrying ``shardings`` (e.g. to restore a checkpoint
    straight onto the mesh)."""
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings)


def mesh_predict(predict_fn, mesh: Mesh, compiler_options: dict[str, str] | None = None):
    """Jit ``predict_fn(params, batch_stats, images [B,H,W,3], image_info [B,4])`` over the mesh:
    variables replicated, images split over (data, spatial), outputs replicated.
    ``compiler_options`` go to ``jax.jit``."""
    rep = replicated(mesh)

    def predict_in_mesh(*args):
        with mesh_scope(mesh):
            return predict_fn(*args)

    return jax.jit(predict_in_mesh, in_shardings=(
        # images [B, H, W, C] as a train batch's: B over data, H over spatial
        rep, rep, NamedSharding(mesh, P(DATA, SPATIAL, None, None)),
        NamedSharding(mesh, P(DATA, None)),
    ), out_shardings=rep, compiler_options=compiler_options)


def place_batch(batch: dict, shardings: dict) -> dict:
    """Make global arrays from this process's part of a batch.

    With one process ``batch`` is the whole batch; with several, each passes its own rows (the
    loader reads only this process's share of every global batch) and the global batch is
    their concatenation in process order. Fields without a sharding are dropped.
    """
    return {
        k: jax.make_array_from_process_local_data(s, np.asarray(batch[k]))
        for k, s in shardings.items()
    }
