"""Max pooling whose gradient is written out for XLA:CPU (what ``backends.dispatch.max_pool_2d``
takes on one CPU device)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdet.backends.pooling_windows import window_slices


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4))
def max_pool_2d(x: jax.Array, init: float, window, strides, pads) -> jax.Array:
    """Max pooling of NHWC ``x`` (XLA's ``reduce_window``) whose gradient is written out for
    XLA:CPU. Autodiff's ``select_and_scatter`` runs there as index tensors and a scatter: 110
    ms of RetinaNet-ResNet50's train step for its stem's 3x3/2 pool of f32[2, 320, 320, 64].
    (One device only: split over a mesh, this gradient did not come out as the one-device run's,
    while XLA's select_and_scatter does.)
    Here: the index of each window's first maximum (the window position
    ``select_and_scatter`` picks, ties to the earliest in row-major order), then each output's
    gradient added back at that position, one strided pad per window position."""
    return jax.lax.reduce_window(x, init, jax.lax.max, (1, *window, 1), (1, *strides, 1),
                                 ((0, 0), *pads, (0, 0)))


def _max_pool_2d_fwd(x, init, window, strides, pads):
    y = max_pool_2d(x, init, window, strides, pads)
    return y, (x, y)


def _max_pool_2d_bwd(init, window, strides, pads, residuals, grad):
    x, y = residuals
    (pt, pb), (pl, pr) = pads
    xp = jnp.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=init)
    taps = window_slices(xp, window, strides, y.shape[1:3])
    first = jnp.full(y.shape, len(taps), jnp.int32)  # the window's first maximum
    for index in reversed(range(len(taps))):
        first = jnp.where(taps[index] == y, index, first)
    (kh, kw), (sh, sw) = window, strides
    out_h, out_w = y.shape[1:3]
    # Padded input row r = h * sh + dy takes window position (dy, dx) of output (h, w): split
    # the rows and columns by their remainder mod the stride, and each of the sh * sw planes is
    # a sum of whole-pixel shifts of the outputs' gradients (no interior padding), then the
    # planes are interleaved back.
    plane_h, plane_w = -(-xp.shape[1] // sh), -(-xp.shape[2] // sw)
    zero = jnp.zeros((), grad.dtype)
    rows = []
    for p in range(sh):
        cols = []
        for q in range(sw):
            plane = jnp.zeros((y.shape[0], plane_h, plane_w, y.shape[3]), grad.dtype)
            for dy in range(p, kh, sh):
                for dx in range(q, kw, sw):
                    part = jnp.where(first == dy * kw + dx, grad, zero)
                    plane = plane + jnp.pad(part, (
                        (0, 0), (dy // sh, plane_h - out_h - dy // sh),
                        (dx // sw, plane_w - out_w - dx // sw), (0, 0)))
            cols.append(plane)
        rows.append(jnp.stack(cols, axis=3))
    grad_xp = jnp.stack(rows, axis=2).reshape(y.shape[0], plane_h * sh, plane_w * sw,
                                              y.shape[3])
    return (grad_xp[:, pt:pt + x.shape[1], pl:pl + x.shape[2]],)


max_pool_2d.defvjp(_max_pool_2d_fwd, _max_pool_2d_bwd)


__all__ = ["max_pool_2d"]
