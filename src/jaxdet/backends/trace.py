"""What the code being traced is for: the one switch between jaxdet's own fast forms and
portable ones, and whether the trace runs on one device.

Backend-specific forms are picked at trace time, at three levels (the strictest in effect
wins when blocks nest):

* ``NATIVE`` (the default): CPU rewrites of convolutions (shifted multiply-adds, matmuls,
  Winograd) and jaxdet's XLA FFI kernels, which exist only in this process;
* ``PORTABLE`` (:func:`portable`; ``core.portable.exportable`` enters it): the rewrites, which
  are plain jnp, but no FFI kernel: what an exported artifact may hold, and the A/B baseline
  of the kernels' benchmarks;
* ``REFERENCE`` (:func:`reference`): every convolution as ``lax.conv_general_dilated``, e.g. to
  count a model's multiply-adds from its jaxpr or to hand ONNX a plain Conv.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator

import jax


class Forms(enum.IntEnum):
    """How far from jaxdet's own fast forms the code traced must stay (higher: stricter)."""

    NATIVE = 0
    PORTABLE = 1
    REFERENCE = 2


_FORMS: contextvars.ContextVar[Forms] = contextvars.ContextVar("jaxdet_trace_forms",
                                                              default=Forms.NATIVE)


@contextlib.contextmanager
def traced_as(forms: Forms) -> Iterator[None]:
    """Within the block, code is traced at least as strictly as ``forms``."""
    token = _FORMS.set(max(_FORMS.get(), forms))
    try:
        yield
    finally:
        _FORMS.reset(token)


def portable() -> contextlib.AbstractContextManager[None]:
    """No FFI kernel in the code traced within the block (``Forms.PORTABLE``)."""
    return traced_as(Forms.PORTABLE)


def reference() -> contextlib.AbstractContextManager[None]:
    """Plain ``lax`` convolutions in the code traced within the block (``Forms.REFERENCE``)."""
    return traced_as(Forms.REFERENCE)


def kernels_allowed() -> bool:
    """Whether the code being traced may call jaxdet's FFI kernels (``Forms.NATIVE``)."""
    return _FORMS.get() == Forms.NATIVE


def rewrites_allowed() -> bool:
    """Whether the code being traced may take the CPU rewrites of convolutions (not
    ``Forms.REFERENCE``)."""
    return _FORMS.get() < Forms.REFERENCE


def traced_on_one_device() -> bool:
    """Whether the code being traced runs on one device: no mesh of more than one device is in
    scope (``jax.sharding.get_abstract_mesh()``, which ``models.thin_maps.mesh_scope`` sets
    around a sharded step). CPU-only rewrites check it: a partitioned step keeps the code that
    GSPMD has been shown to split exactly."""
    mesh = jax.sharding.get_abstract_mesh()
    return mesh.empty or mesh.size == 1


__all__ = ["Forms", "kernels_allowed", "portable", "reference", "rewrites_allowed",
           "traced_as", "traced_on_one_device"]
