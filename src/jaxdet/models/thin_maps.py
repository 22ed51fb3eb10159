"""Keep thin feature maps whole along the image height on a spatially partitioned mesh.

On a mesh with ``spatial`` > 1 every feature map is split along its height. The deepest maps
of a detector are only a few rows high (P5 of a 64-px image: 2 rows), and there XLA's Shardy
partitioner (jax 0.10.2, XLA:CPU) miscompiles some backward passes: a ResNet basic block
(3x3/2 conv, 3x3 conv, 1x1/2 shortcut, ReLU) whose output has one row per shard of a
``2 x 2`` (data x spatial) mesh gets its first conv's gradient multiplied by the ``data`` size,
while the loss is right. The GSPMD partitioner gets it right; so does Shardy once those maps
are not split along the height. Splitting a map of a few rows saves no memory anyway, so
:func:`gather_thin_rows` constrains every map with fewer than ``MIN_ROWS_PER_SHARD`` rows per
spatial shard to be whole along its height (still split over ``data``). Layers call it on
their outputs (``models.layers``); it does nothing outside :func:`mesh_scope` or when
``spatial`` is 1. ``tests/parallel/test_thin_maps.py`` keeps the failing case.
"""

from __future__ import annotations

import contextlib

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

MIN_ROWS_PER_SHARD = 2


def mesh_scope(mesh: Mesh | None) -> contextlib.AbstractContextManager:
    """Context in which traced model code sees ``mesh`` (its abstract mesh); a no-op for None.

    Enter it inside the function being jitted, around the model call."""
    if mesh is None:
        return contextlib.nullcontext()
    return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)


def gather_thin_rows(x: jax.Array) -> jax.Array:
    """``x`` [B, H, W, C] unchanged, but whole along H when H < MIN_ROWS_PER_SHARD x spatial.

    Returns ``x`` itself when no mesh is in scope, the mesh has no ``spatial`` axis of size > 1
    or ``x`` is not a 4-d map. The batch stays split over ``data`` when it divides.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or x.ndim != 4 or "spatial" not in mesh.axis_names:
        return x
    spatial = mesh.shape["spatial"]
    if spatial == 1 or x.shape[1] >= MIN_ROWS_PER_SHARD * spatial:
        return x
    data = mesh.shape.get("data", 1)
    batch_axis = "data" if data > 1 and x.shape[0] % data == 0 else None
    return jax.lax.with_sharding_constraint(x, P(batch_axis, None, None, None))
