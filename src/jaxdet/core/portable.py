"""Ops with a second, exporter-friendly formulation of the same values, picked at trace time.

Training and jaxdet's own predict trace the fast XLA form. Within :func:`exportable` (what
``jaxdet export`` traces in) they trace forms the target converter lowers:

* :func:`reduce_window_2d` (max / sum pooling over H, W of NHWC maps): the reduction of the
  window's strided slices of the padded input; an NHWC ``reduce_window`` becomes an ONNX
  MaxPool that ONNX Runtime refuses (``pooling_as_slices``);
* :func:`take_row` (one row of a matrix by a traced index, e.g. NMS's best box): a one-hot
  sum instead of a gather, which jax2onnx mis-lowers inside a batched loop (``row_as_sum``);
* greedy NMS (``core.greedy_nms``): one primitive an exporter maps onto its runtime's NMS
  kernel, instead of a data-dependent loop (``nms_as_op``);
* multi-class NMS of a batch (``core.nms.batched_nms``): one loop per image instead of one
  vmapped loop, whose row update becomes a scatter that TFLite runs as a copy of every
  score at every step (``nms_per_image``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp

from jaxdet.backends import dispatch, trace
from jaxdet.backends.pooling_windows import window_slices


@dataclasses.dataclass(frozen=True)
class Forms:
    """Which exporter forms to trace (all False: the XLA forms)."""

    pooling_as_slices: bool = False
    row_as_sum: bool = False
    nms_as_op: bool = False
    nms_per_image: bool = False


_XLA_FORMS = Forms()
_FORMS: contextvars.ContextVar[Forms] = contextvars.ContextVar("jaxdet_exportable",
                                                            default=_XLA_FORMS)  # noqa: B039

Padding = str | Sequence[tuple[int, int]]


@contextlib.contextmanager
def exportable(*, pooling_as_slices: bool = True, row_as_sum: bool = True,
               nms_as_op: bool = True, nms_per_image: bool = False) -> Iterator[None]:
    """Within the block, the ops trace the chosen exporter forms (the defaults are ONNX's:
    pooling as slices, rows as one-hot sums, NMS as one primitive) and the code is traced as
    ``backends.trace.Forms.PORTABLE`` (even with every form off: the code traced is for an
    artifact, so no jaxdet CPU kernel, which only this process has, may appear in it)."""
    token = _FORMS.set(Forms(pooling_as_slices, row_as_sum, nms_as_op, nms_per_image))
    try:
        with trace.portable():
            yield
    finally:
        _FORMS.reset(token)


def forms() -> Forms:
    """The exporter forms in effect (all off outside :func:`exportable`)."""
    return _FORMS.get()


def fresh_trace(fn: Callable) -> Callable:
    """``fn`` as a new function object, so ``jax.jit`` traces it again instead of reusing a
    trace cached under other forms: jax keys its trace cache on the function, not on the
    forms (or ``backends.trace``'s), which are read while tracing."""
    return lambda *args, **kwargs: fn(*args, **kwargs)


def take_row(matrix: jax.Array, index: jax.Array) -> jax.Array:
    """``matrix[index]`` of a [k, n] matrix and a scalar int index -> [n] (exact either way)."""
    if not _FORMS.get().row_as_sum:
        return matrix[index]
    hit = jnp.arange(matrix.shape[0]) == index
    return jnp.sum(jnp.where(hit[:, None], matrix, 0.0), axis=0)


def _pads(size: int, window: int, stride: int, padding: str) -> tuple[int, int]:
    if padding == "VALID":
        return 0, 0
    if padding != "SAME":
        raise ValueError(f"padding {padding!r}: expected 'SAME', 'VALID' or explicit pairs")
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


def reduce_window_2d(x: jax.Array, init: float, op: Callable, window: tuple[int, int],
                     strides: tuple[int, int], padding: Padding) -> jax.Array:
    """``op``-reduction over ``window`` (kh, kw) windows of ``x`` [B, H, W, C] with ``strides``
    (sh, sw), padded with ``init`` per ``padding`` ("SAME", "VALID" or ((top, bottom), (left,
    right))); ``op`` is ``jax.lax.max`` or ``jax.lax.add``. Returns [B, H', W', C]."""
    (kh, kw), (sh, sw) = window, strides
    if isinstance(padding, str):
        pad_h = _pads(x.shape[1], kh, sh, padding)
        pad_w = _pads(x.shape[2], kw, sw, padding)
    else:
        pad_h, pad_w = (tuple(p) for p in padding)
    if not _FORMS.get().pooling_as_slices:
        if op is jax.lax.max:
            return dispatch.max_pool_2d(x, init, (kh, kw), (sh, sw), (pad_h, pad_w))
        return jax.lax.reduce_window(x, init, op, (1, kh, kw, 1), (1, sh, sw, 1),
                                     ((0, 0), pad_h, pad_w, (0, 0)))
    xp = jnp.pad(x, ((0, 0), pad_h, pad_w, (0, 0)), constant_values=init)
    _, h, w, _ = xp.shape
    out_h, out_w = (h - kh) // sh + 1, (w - kw) // sw + 1
    result = None
    for part in window_slices(xp, (kh, kw), (sh, sw), (out_h, out_w)):
        result = part if result is None else op(result, part)
    return result


__all__ = ["Forms", "exportable", "forms", "fresh_trace", "reduce_window_2d", "take_row"]
