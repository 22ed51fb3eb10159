"""What the compiled train step needs in memory, checked before its first run.

XLA knows after compiling a step how much memory one run of it takes on each device: its
arguments (the train state and the batch, already in memory), its outputs and its temporaries
(activations kept for the backward pass, gradients, workspace); outputs that reuse a donated
argument's buffer need nothing more. What a run adds, its *working* memory, is checked against
what the device has free before the step runs: on a GPU the allocator's limit less what is in
use; on a CPU the memory the operating system reports available (and free swap), against the
working memory of every device of the host, which share it. A step that cannot fit is one
clear line at once, not an allocation failure inside the step or, on a CPU, a process the
operating system kills without a word.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import jax

from jaxdet.backends import device_memory

log = logging.getLogger("jaxdet.train")

REMEDY = ("lower train.batch_size (--set train.batch_size=N; the learning rate follows it with "
          "train.reference_batch_size) or the input size, or recompute parts in the backward "
          "pass (train.remat)")
_GIB = 2**30


class StepTooLarge(RuntimeError):
    """The compiled step needs more memory than the device has free."""


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """Bytes per device of one run of a compiled step (``resident``: its arguments, already
    allocated; ``working``: what a run adds), the devices it runs on, their platform, whether
    they share the host's memory (CPU devices), and the bytes free for it (None: unknown)."""

    resident: int
    working: int
    devices: int
    platform: str
    host_shared: bool
    free: int | None

    @property
    def needed(self) -> int:
        """Bytes a run adds to what ``free`` counts: every device's working memory where they
        share the host's memory; elsewhere one device's."""
        return self.working * (self.devices if self.host_shared else 1)

    def line(self) -> str:
        per = " per device" if self.devices > 1 else ""
        free = "" if self.free is None else f"; {self.free / _GIB:.1f} GiB free"
        return (f"train step: {self.working / _GIB:.2f} GiB of working memory{per} beside "
                f"{self.resident / _GIB:.2f} GiB of state and batch{free}")


def measure(step_fn: Callable, *args: Any) -> StepMemory | None:
    """Compiles ``step_fn`` (a ``jax.jit`` function) for ``args`` and reads the memory of one
    run; calling ``step_fn(*args)`` afterwards reuses that compilation. None when ``step_fn``
    is not jitted or the backend gives no analysis."""
    if not hasattr(step_fn, "lower"):
        return None
    compiled = step_fn.lower(*args).compile()
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend analyses memory
        return None
    if stats is None:
        return None
    arrays = [leaf for leaf in jax.tree.leaves(args) if isinstance(leaf, jax.Array)]
    devices = sorted(arrays[0].sharding.addressable_devices, key=lambda d: d.id) if arrays \
        else jax.local_devices()[:1]
    working = (stats.temp_size_in_bytes + stats.output_size_in_bytes
               - stats.alias_size_in_bytes)
    frees = [f for f in (device_memory.free_bytes(d) for d in devices) if f is not None]
    return StepMemory(resident=int(stats.argument_size_in_bytes), working=max(int(working), 0),
                      devices=len(devices), platform=devices[0].platform,
                      host_shared=device_memory.shares_host_memory(devices[0]),
                      free=min(frees) if frees else None)


def check(memory: StepMemory) -> None:
    """Raises :class:`StepTooLarge` (one line, with what to lower) when a run of the step
    cannot fit in what is free."""
    if memory.free is None or memory.needed <= memory.free:
        return
    where = (f"this machine has {memory.free / _GIB:.1f} GiB available (swap included)"
             if memory.host_shared
             else f"the {memory.platform.upper()} has {memory.free / _GIB:.1f} GiB free")
    raise StepTooLarge(
        f"out of memory: a run of the train step needs {memory.needed / _GIB:.1f} GiB beside "
        f"its {memory.resident / _GIB:.1f} GiB of state and batch, and {where}; {REMEDY}")


__all__ = ["REMEDY", "StepMemory", "StepTooLarge", "check", "measure"]
