"""Random test inputs drawn on the host with numpy.

``jax.random.normal`` compiles a threefry program for every new shape (0.2-0.7 s each on a
2-core CPU; about a hundred shapes in the suite), which a cold compilation cache pays again;
numpy draws them in microseconds. Import as ``from random_arrays import normal`` (the suite's
root folder is on ``sys.path`` through its ``conftest.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

Seed = int | Sequence[int]


def normal(seed: Seed, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """Standard normal values of ``shape`` (float32 unless ``dtype``), the same for the same
    ``seed`` (an int, or a tuple of ints such as ``(seed, index)`` for one of several arrays)."""
    values = np.random.default_rng(seed).standard_normal(tuple(shape), dtype=np.float32)
    return jnp.asarray(values, dtype=dtype)


def uniform(seed: Seed, shape: Sequence[int], low: float = 0.0, high: float = 1.0) -> jax.Array:
    """float32 values uniform in [low, high) of ``shape``, the same for the same ``seed``."""
    values = np.random.default_rng(seed).uniform(low, high, tuple(shape)).astype(np.float32)
    return jnp.asarray(values)


def seeds(seed: int, count: int) -> list[tuple[int, int]]:
    """``count`` distinct seeds derived from ``seed`` (in place of ``jax.random.split``)."""
    return [(seed, i) for i in range(count)]


def jpeg_bytes(height: int, width: int, seed: Seed, quality: int = 90) -> bytes:
    """A JPEG file's bytes: random RGB pixels of ``height`` x ``width``, the same for the same
    ``seed``."""
    import io

    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()
