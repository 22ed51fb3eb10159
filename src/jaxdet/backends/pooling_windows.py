"""The strided views of a padded NHWC map at each position of a pooling window: what both
the portable pooling form (``core.portable.reduce_window_2d`` as slices) and the CPU max
pooling gradient (``backends.cpu.pooling``) are built from."""

from __future__ import annotations

import jax


def window_slices(xp: jax.Array, window: tuple[int, int], strides: tuple[int, int],
                  out_hw: tuple[int, int]) -> list[jax.Array]:
    """The strided [B, out_h, out_w, C] views of padded ``xp`` [B, H, W, C] at each offset
    (dy, dx) of a ``window`` (kh, kw) moved by ``strides`` (sh, sw), row-major: offset (dy, dx)
    at index ``dy * kw + dx``."""
    (kh, kw), (sh, sw), (out_h, out_w) = window, strides, out_hw
    b, _, _, c = xp.shape
    return [jax.lax.slice(xp, (0, dy, dx, 0),
                          (b, dy + (out_h - 1) * sh + 1, dx + (out_w - 1) * sw + 1, c),
                          (1, sh, sw, 1))
            for dy in range(kh) for dx in range(kw)]


__all__ = ["window_slices"]
