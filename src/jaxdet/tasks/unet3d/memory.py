"""Per-device memory of a 3D U-Net train step, read from XLA's compiled program (nothing runs).

:func:`compiled_step_memory` lowers the train step (forward, backward, optimizer update) on
abstract arguments carrying the mesh's shardings (``jax.ShapeDtypeStruct``: no array is
allocated, so a 256^3 patch can be measured on a laptop), compiles it, and reads
``compiled.memory_analysis()``: the buffers of one device's share of the partitioned program.
The memory benchmark of the U-Net reports it.
"""

from __future__ import annotations

import time
from typing import Any

import optax
from jax.sharding import Mesh

from jaxdet.parallel.mesh import check_volume_layout, spatial_shards
from jaxdet.parallel.sharding import batch_sharding, state_sharding, with_shardings
from jaxdet.train.step import abstract_train_batch, abstract_train_state, make_train_step

GIB = 2**30


def compiled_step_memory(task: Any, tx: optax.GradientTransformation,
                         schedule: optax.Schedule, *, batch_size: int, mesh: Mesh | None,
                         ema_decay: float | None = None, loss_scale: Any = None,
                         accumulate_steps: int = 1) -> dict:
    """Per-device bytes of ``task``'s compiled train step on ``mesh``.

    Args:
      task: a ``UNet3DTask`` (any task with a 3-d ``input_size`` works).
      tx, schedule: the optimizer and its learning-rate schedule (``train.build.build_optimizer``).
      batch_size: the global batch of one step (split over the mesh's ``data`` axis).
      mesh: the device mesh (``parallel.mesh.make_mesh``); None: one device, no shardings.
      ema_decay, loss_scale, accumulate_steps: as ``train.step.make_train_step`` takes them.
    Returns:
      ``{"mesh": {axis: size}, "spatial_shards": [per spatial dimension], "argument_bytes",
      "output_bytes", "alias_bytes", "temp_bytes",
      "generated_code_bytes", "total_bytes", "peak_bytes", "compile_seconds"}``: the train
      state and batch shard (argument), the new state and metrics (output), the part of the
      output living in donated argument buffers (alias), activations, gradients and scratch
      (temp), the program itself (generated code); ``total_bytes`` = argument + output - alias +
      temp + generated code (everything live at once, XLA's upper bound), ``peak_bytes`` what
      XLA reports as the peak (None where it reports none; XLA:CPU's figure leaves the temp
      buffers out, so read ``total_bytes`` there).
    Raises:
      MeshLayoutError: the patch or batch does not split over ``mesh``
        (``parallel.mesh.check_volume_layout``).
    """
    abstract_state = abstract_train_state(task, tx, ema=ema_decay is not None,
                                          loss_scale=loss_scale)
    abstract_batch = abstract_train_batch(task, batch_size)
    kwargs = {"ema_decay": ema_decay, "loss_scale": loss_scale,
              "accumulate_steps": accumulate_steps}
    if mesh is None:
        step = make_train_step(task, tx, schedule, **kwargs)
        args = (abstract_state, abstract_batch)
        layout: dict[str, int] = {}
    else:
        check_volume_layout(mesh, batch_size=batch_size // accumulate_steps,
                            patch_size=tuple(task.input_size), max_stride=task.max_stride())
        shardings = state_sharding(mesh, abstract_state)
        batch_shardings = batch_sharding(mesh, task.batch_layout())
        step = make_train_step(task, tx, schedule, state_sharding=shardings,
                               batch_sharding=batch_shardings, **kwargs)
        args = (with_shardings(abstract_state, shardings),
                with_shardings(abstract_batch, batch_shardings))
        layout = dict(mesh.shape)
    start = time.perf_counter()
    compiled = step.lower(*args).compile()
    seconds = time.perf_counter() - start
    mem = compiled.memory_analysis()
    out = {
        "mesh": layout,
        "spatial_shards": list(spatial_shards(mesh)) if mesh is not None else [1],
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "alias_bytes": int(mem.alias_size_in_bytes),
        "temp_bytes": int(mem.temp_size_in_bytes),
        "generated_code_bytes": int(mem.generated_code_size_in_bytes),
    }
    out["total_bytes"] = (out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"]
                          + out["temp_bytes"] + out["generated_code_bytes"])
    peak = int(getattr(mem, "peak_memory_in_bytes", 0) or 0)
    out["peak_bytes"] = peak or None
    out["compile_seconds"] = seconds
    return out


__all__ = ["GIB", "compiled_step_memory"]
