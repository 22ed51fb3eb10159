"""What the code being traced is for: the switch between jaxdet's own process and a portable
artifact, and whether the trace runs on one device.

Backend-specific forms (the CPU's FFI kernels, which exist only in this process) are picked
at trace time; inside :func:`exporting_scope` (``core.portable.exportable`` enters it) every
op traces its portable form, so an exported artifact runs anywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax

_EXPORTING: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxdet_exporting",
                                                                  default=False)


@contextlib.contextmanager
def exporting_scope() -> Iterator[None]:
    """Within the block, :func:`exporting` is True: the code traced is for an artifact."""
    token = _EXPORTING.set(True)
    try:
        yield
    finally:
        _EXPORTING.reset(token)


def exporting() -> bool:
    """Whether the code being traced is for an exported artifact (inside
    :func:`exporting_scope`): no op may take a form only this process can run."""
    return _EXPORTING.get()


def traced_on_one_device() -> bool:
    """Whether the code being traced runs on one device: no mesh of more than one device is in
    scope (``jax.sharding.get_abstract_mesh()``, which ``models.thin_maps.mesh_scope`` sets
    around a sharded step). CPU-only rewrites check it: a partitioned step keeps the code that
    GSPMD has been shown to split exactly."""
    mesh = jax.sharding.get_abstract_mesh()
    return mesh.empty or mesh.size == 1


__all__ = ["exporting", "exporting_scope", "traced_on_one_device"]
