"""The device mesh of a config's ``parallel`` section, and the check that a task's batches split
over it.
"""

from __future__ import annotations

from typing import Any

from jax.sharding import Mesh

from jaxdet.config import schema as S
from jaxdet.parallel.mesh import check_batch_layout, check_volume_layout, make_mesh


def build_mesh(config: S.Config) -> Mesh:
    """The ``(data, spatial)`` mesh of ``config.parallel`` over all devices of all processes;
    with ``parallel.spatial_axes`` splitting more than the first spatial dimension, the mesh
    ``(data, spatial, spatial_1[, spatial_2])`` (see ``parallel.mesh``)."""
    p = config.parallel
    return make_mesh(p.data, p.spatial, spatial_axes=p.spatial_axes)


def check_mesh_layout(config: S.Config, mesh: Mesh, task: Any, *,
                      splits: tuple[str, ...] = ("train", "eval")) -> None:
    """Check that train (micro-)batches and eval batches of ``task`` (a ``models.task.Task``)
    split over ``mesh`` (clear errors naming the field): images (``task.input_size`` (H, W)) by
    ``parallel.mesh.check_batch_layout``, which also refuses a split of the image width;
    volume patches (``task.input_size`` (D, H, W)) by ``parallel.mesh.check_volume_layout``
    (every split side, and every level map that stays split, divides by its shards)."""
    stride = task.max_stride()
    t = config.train
    volume = len(task.input_size) == 3

    def check(batch_size: int, what: str) -> None:
        if volume:
            check_volume_layout(mesh, batch_size=batch_size, patch_size=tuple(task.input_size),
                                max_stride=stride, what=what)
        else:
            check_batch_layout(mesh, batch_size=batch_size, image_size=task.input_size,
                               max_stride=stride, what=what)

    if "train" in splits:
        what = "train.batch_size" if t.accumulate_steps == 1 else (
            f"train.batch_size / train.accumulate_steps = {t.batch_size} / {t.accumulate_steps}")
        check(t.batch_size // t.accumulate_steps, what)
    if "eval" in splits:
        check(config.eval.batch_size, "eval.batch_size")
