"""The device mesh of a run: axes ``("data", "spatial")`` over the devices of all processes.

``data`` splits the batch, ``spatial`` splits image height (and so every feature map's height:
XLA's SPMD partitioner adds the halo exchanges convolutions need). The layout is checked here,
before anything compiles, so a batch or image size that cannot be split is one clear error.

A volume (or image) may be split along more than one spatial dimension
(``parallel.spatial_axes``, e.g. ``[2, 2, 2]``): the mesh then has one axis per split
dimension, ``SPATIAL_AXES = ("spatial", "spatial_1", "spatial_2")`` for the first (depth of a
volume, height of an image), second and third spatial dimension, up to the last one split:
``[2, 2, 2]`` -> axes ``("data", "spatial", "spatial_1", "spatial_2")``, ``[2, 2]`` ->
``("data", "spatial", "spatial_1")``, ``[1, 2, 2]`` -> ``spatial`` of size 1. A split of the
first dimension only keeps the mesh ``("data", "spatial")``, so ``mesh.shape["spatial"]``
always counts the first dimension's shards.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from jaxdet.models.thin_maps import MIN_ROWS_PER_SHARD

DATA, SPATIAL = "data", "spatial"
AXES = (DATA, SPATIAL)
# the mesh axis of each spatial dimension of the input (first, second, third)
SPATIAL_AXES = (SPATIAL, "spatial_1", "spatial_2")

log = logging.getLogger("jaxdet")


class MeshLayoutError(ValueError):
    """The requested mesh does not fit the devices, the batch or the image size."""


def resolve_mesh_shape(data: int, spatial: int, num_devices: int) -> tuple[int, int]:
    """``(data, spatial)`` with ``data=-1`` replaced by ``num_devices // spatial``.

    Raises:
      MeshLayoutError: the devices do not split into ``spatial`` groups, or the mesh asks for
        more devices than there are.
    """
    if spatial < 1 or data == 0 or data < -1:
        raise MeshLayoutError(
            f"parallel.data={data}, parallel.spatial={spatial}: data must be -1 or >= 1 and "
            "spatial >= 1"
        )
    if data == -1:
        if num_devices % spatial:
            raise MeshLayoutError(
                f"parallel.spatial={spatial} does not divide the {num_devices} devices; choose "
                f"a divisor of {num_devices} or set parallel.data explicitly"
            )
        data = num_devices // spatial
    if data * spatial > num_devices:
        raise MeshLayoutError(
            f"parallel.data={data} x parallel.spatial={spatial} = {data * spatial} devices, but "
            f"only {num_devices} are visible ({jax.default_backend()}); on a CPU, emulate more "
            "with XLA_FLAGS=--xla_force_host_platform_device_count=N"
        )
    return data, spatial


def normalize_spatial_axes(spatial: int, spatial_axes: Sequence[int] | None) -> tuple[int, ...]:
    """Shards per spatial dimension: ``spatial_axes`` without trailing 1s (``(spatial,)`` when
    None), checked against ``spatial`` (1 means "the product").

    Raises:
      MeshLayoutError: more than three dimensions, a size < 1, or a product other than
        ``spatial``.
    """
    if spatial_axes is None:
        return (spatial,)
    axes = tuple(int(a) for a in spatial_axes)
    if not 1 <= len(axes) <= len(SPATIAL_AXES) or min(axes) < 1:
        raise MeshLayoutError(f"parallel.spatial_axes={list(axes)}: one to three sizes >= 1 "
                              "(shards of depth, height, width), e.g. [2, 2, 2]")
    if spatial not in (1, math.prod(axes)):
        raise MeshLayoutError(f"parallel.spatial_axes={list(axes)} makes {math.prod(axes)} "
                              f"spatial shards but parallel.spatial={spatial}")
    while len(axes) > 1 and axes[-1] == 1:
        axes = axes[:-1]
    return axes


def spatial_shards(mesh: Mesh) -> tuple[int, ...]:
    """Shards of each spatial dimension on ``mesh``: ``(mesh.shape["spatial"],)`` on a
    ``(data, spatial)`` mesh, one size per ``SPATIAL_AXES`` axis the mesh has otherwise."""
    return tuple(mesh.shape[a] for a in SPATIAL_AXES if a in mesh.axis_names) or (1,)


def make_mesh(data: int = -1, spatial: int = 1, devices: Sequence | None = None, *,
              spatial_axes: Sequence[int] | None = None) -> Mesh:
    """A ``(data, spatial)`` mesh, or ``(data, spatial, spatial_1[, spatial_2])`` when
    ``spatial_axes`` splits more than the first spatial dimension.

    Args:
      data, spatial: mesh axis sizes (``data=-1``: every device ``spatial`` leaves).
      devices: the devices to use (default: ``jax.devices()``, every process's). A mesh smaller
        than the device list uses its first ``data * spatial`` devices (one process only).
      spatial_axes: shards per spatial dimension (``parallel.spatial_axes``; product
        ``spatial``, or ``spatial`` left at 1); None: ``spatial`` on the first dimension.
    Returns:
      a ``jax.sharding.Mesh`` of automatic (GSPMD) axes ``("data", "spatial", ...)``.
    """
    devices = list(jax.devices() if devices is None else devices)
    split = normalize_spatial_axes(spatial, spatial_axes)
    data, spatial = resolve_mesh_shape(data, math.prod(split), len(devices))
    shape = (data, *split)
    axes = (DATA, *SPATIAL_AXES[:len(split)])
    named = " x ".join(map(str, shape))
    used = data * spatial
    if used < len(devices):
        if jax.process_count() > 1:
            raise MeshLayoutError(
                f"a {named} mesh uses {used} of the {len(devices)} devices of "
                f"{jax.process_count()} processes; with several processes the mesh must use "
                "every device (parallel.data=-1)"
            )
        log.warning("mesh %s uses %d of the %d devices", named, used, len(devices))
    auto = (AxisType.Auto,) * len(axes)
    if used == len(jax.devices()) and devices == list(jax.devices()):
        # jax.make_mesh orders devices by the physical topology (ICI rings, NVLink islands)
        return jax.make_mesh(shape, axes, axis_types=auto)
    grid = np.asarray(devices[:used], dtype=object).reshape(shape)
    return Mesh(grid, axes, axis_types=auto)


def _check_batch_splits(mesh: Mesh, batch_size: int, what: str) -> None:
    data = mesh.shape[DATA]
    if batch_size % data:
        raise MeshLayoutError(
            f"{what}={batch_size} does not divide over parallel.data={data} devices; use a "
            f"multiple of {data} (e.g. {data * max(1, batch_size // data)})"
        )


def check_batch_layout(
    mesh: Mesh,
    *,
    batch_size: int,
    image_size: tuple[int, int],
    max_stride: int,
    what: str = "train.batch_size",
) -> None:
    """Check that a batch of images splits evenly over the mesh.

    Args:
      batch_size: the batch one compiled step sees (a micro-batch when accumulating).
      image_size: (H, W) of the batch images.
      max_stride: the largest stride of the backbone's feature maps (e.g. 32 for ResNet C5);
        every feature map down to it must split into equal row blocks.
    Raises:
      MeshLayoutError naming the field to change; also when the mesh splits the image width
      (``parallel.spatial_axes`` of two sizes > 1): the detectors split the height only.
    """
    _check_batch_splits(mesh, batch_size, what)
    shards = spatial_shards(mesh)
    if len(shards) > 1:
        raise MeshLayoutError(
            f"parallel.spatial_axes={list(shards)} splits the image width, but detectors "
            f"split the image height only; use parallel.spatial_axes=[{math.prod(shards)}] "
            f"(or parallel.spatial={math.prod(shards)})")
    spatial = shards[0]
    height = image_size[0]
    block = max_stride * spatial
    if spatial > 1 and height % block:
        raise MeshLayoutError(
            f"image height {height} does not divide by largest feature stride {max_stride} x "
            f"parallel.spatial={spatial} = {block}; resize to a multiple of {block} (e.g. "
            f"{block * max(1, round(height / block))}) or use fewer spatial shards"
        )


def split_levels(side: int, shards: int, max_stride: int) -> list[bool]:
    """Which levels' maps stay split along one side: level ``l`` (side ``side / 2**l``, for
    ``2**l`` up to ``max_stride``) is split over ``shards`` when it has at least
    ``MIN_ROWS_PER_SHARD`` rows per shard, else it is gathered whole (``thin_maps``)."""
    levels = max_stride.bit_length()  # max_stride = 2 ** (levels - 1)
    return [shards > 1 and side // 2**lv >= MIN_ROWS_PER_SHARD * shards
            for lv in range(levels)]


def check_volume_layout(
    mesh: Mesh,
    *,
    batch_size: int,
    patch_size: tuple[int, int, int],
    max_stride: int,
    what: str = "train.batch_size",
) -> None:
    """Check that a batch of volume patches [B, D, H, W, C] splits evenly over the mesh.

    The rule, per spatial dimension split over ``s`` shards (``parallel.spatial_axes``): the
    patch side must divide by ``s``, and so must the side of every level's map that stays split
    (``side / 2**l`` for the levels down to the bottleneck, ``2**l <= max_stride``, that have
    at least ``MIN_ROWS_PER_SHARD`` rows per shard); maps thinner than that are gathered whole
    along that side on purpose (``tasks.unet3d.model``: too thin to be worth splitting, and
    where XLA's partitioner has miscompiled, see ``thin_maps``). A side that is a multiple of
    ``s x max_stride`` always passes.

    Args:
      batch_size: the batch one compiled step sees (a micro-batch when accumulating).
      patch_size: (D, H, W) of the patches.
      max_stride: the U-Net's deepest downsampling (2 ** (levels - 1)).
    Raises:
      MeshLayoutError naming the field to change and a valid choice.
    """
    _check_batch_splits(mesh, batch_size, what)
    shards = spatial_shards(mesh)
    names = ("depth", "height", "width")
    for dim, s in enumerate(shards):
        side = patch_size[dim]
        if s == 1:
            continue
        block = s * max_stride
        advice = (f"use a patch {names[dim]} that is a multiple of {s} x {max_stride} = "
                  f"{block} (e.g. {block * max(1, round(side / block))}) or fewer shards on it")
        where = f"model.patch_size={list(patch_size)}: the {names[dim]} {side}"
        field = (f"parallel.spatial={s}" if len(shards) == 1
                 else f"parallel.spatial_axes={list(shards)}")
        if side % s:
            raise MeshLayoutError(f"{where} does not divide over {s} shards ({field}); "
                                  f"{advice}")
        for lv, split in enumerate(split_levels(side, s, max_stride)):
            if split and (side // 2**lv) % s:
                raise MeshLayoutError(
                    f"{where} splits over {s} shards ({field}), but its level-{lv} map "
                    f"({names[dim]} {side // 2**lv}, stride {2**lv}) does not; {advice}")


def gather_thin_sides(x: jax.Array) -> jax.Array:
    """``x`` [B, S_1, ..., S_n, C] unchanged, but whole along each spatial side ``S_i`` that has
    fewer than ``MIN_ROWS_PER_SHARD`` rows per shard of its mesh axis (``SPATIAL_AXES[i - 1]``).

    The n-d form of ``thin_maps.gather_thin_rows`` (see there for why) for maps split along
    several sides (a volume's D, H, W): the rule :func:`split_levels` and
    :func:`check_volume_layout` assume. Sides thick enough stay split over their axis, the batch
    over ``data`` when it divides. Returns ``x`` itself when no mesh is in scope
    (``thin_maps.mesh_scope``) or no side is thin.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or SPATIAL not in mesh.axis_names or x.ndim < 3:
        return x
    sides = []
    for i, n in enumerate(x.shape[1:-1]):
        name = SPATIAL_AXES[i] if i < len(SPATIAL_AXES) else None
        s = mesh.shape[name] if name in mesh.axis_names else 1
        sides.append((name if s > 1 else None, s > 1 and n < MIN_ROWS_PER_SHARD * s))
    if not any(thin for _, thin in sides):
        return x
    data = mesh.shape.get(DATA, 1)
    batch_axis = DATA if data > 1 and x.shape[0] % data == 0 else None
    spec = P(batch_axis, *(None if thin else name for name, thin in sides), None)
    return jax.lax.with_sharding_constraint(x, spec)

__all__ = ["AXES", "DATA", "SPATIAL", "SPATIAL_AXES", "MeshLayoutError", "check_batch_layout",
           "check_volume_layout", "gather_thin_sides", "make_mesh", "normalize_spatial_axes",
           "resolve_mesh_shape", "spatial_shards", "split_levels"]
