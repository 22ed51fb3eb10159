"""The device mesh of a run: axes ``("data", "spatial")`` over the devices of all processes.

``data`` splits the batch, ``spatial`` splits image height (and so every feature map's height:
XLA's SPMD partitioner adds the halo exchanges convolutions need). The layout is checked here,
before anything compiles, so a batch or image size that cannot be split is one clear error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

DATA, SPATIAL = "data", "spatial"
AXES = (DATA, SPATIAL)

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


def make_mesh(data: int = -1, spatial: int = 1, devices: Sequence | None = None) -> Mesh:
    """A ``(data, spatial)`` mesh.

    Args:
      data, spatial: mesh axis sizes (``data=-1``: every device ``spatial`` leaves).
      devices: the devices to use (default: ``jax.devices()``, every process's). A mesh smaller
        than the device list uses its first ``data * spatial`` devices (one process only).
    Returns:
      a ``jax.sharding.Mesh`` with axes ``("data", "spatial")`` of automatic (GSPMD) type.
    """
    devices = list(jax.devices() if devices is None else devices)
    data, spatial = resolve_mesh_shape(data, spatial, len(devices))
    used = data * spatial
    if used < len(devices):
        if jax.process_count() > 1:
            raise MeshLayoutError(
                f"a {data} x {spatial} mesh uses {used} of the {len(devices)} devices of "
                f"{jax.process_count()} processes; with several processes the mesh must use "
                "every device (parallel.data=-1)"
            )
        log.warning("mesh %d x %d uses %d of the %d devices", data, spatial, used, len(devices))
    if used == len(jax.devices()) and devices == list(jax.devices()):
        # jax.make_mesh orders devices by the physical topology (ICI rings, NVLink islands)
        return jax.make_mesh((data, spatial), AXES, axis_types=(AxisType.Auto,) * 2)
    grid = np.asarray(devices[:used], dtype=object).reshape(data, spatial)
    return Mesh(grid, AXES, axis_types=(AxisType.Auto,) * 2)


def check_batch_layout(
    mesh: Mesh,
    *,
    batch_size: int,
    image_size: tuple[int, int],
    max_stride: int,
    what: str = "train.batch_size",
) -> None:
    """Check that a batch splits evenly over the mesh.

    Args:
      batch_size: the batch one compiled step sees (a micro-batch when accumulating).
      image_size: (H, W) of the batch images.
      max_stride: the largest stride of the backbone's feature maps (e.g. 32 for ResNet C5);
        every feature map down to it must split into equal row blocks.
    Raises:
      MeshLayoutError naming the field to change.
    """
    data, spatial = mesh.shape[DATA], mesh.shape[SPATIAL]
    if batch_size % data:
        raise MeshLayoutError(
            f"{what}={batch_size} does not divide over parallel.data={data} devices; use a "
            f"multiple of {data} (e.g. {data * max(1, batch_size // data)})"
        )
    height = image_size[0]
    block = max_stride * spatial
    if spatial > 1 and height % block:
        raise MeshLayoutError(
            f"image height {height} does not divide by largest feature stride {max_stride} x "
            f"parallel.spatial={spatial} = {block}; resize to a multiple of {block} (e.g. "
            f"{block * max(1, round(height / block))}) or use fewer spatial shards"
        )
