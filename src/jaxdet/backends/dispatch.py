"""The ops with backend-specific forms, by name: the one module model, core and job code
imports for them. Each picks its form at trace time (``backends.trace``): on one CPU device
jaxdet's rewrites and FFI kernels (``backends.cpu``), elsewhere (GPU, TPU, a mesh, an export)
the XLA op.

* :func:`conv_general_dilated`: ``lax.conv_general_dilated`` as ``nnx.Conv`` calls it
  (depthwise, 1x1, image and Winograd 3x3 rewrites on CPU);
* :func:`batch_statistics` / :func:`normalize_with_batch_statistics`: training-mode batch norm
  with a backward pass of fewer memory passes (what ``models.layers.BatchNorm`` takes on CPU);
* :func:`top_k_per_class`: NMS's per-class top k;
* :func:`compiler_options`: XLA:CPU compile options for a jitted step or predict.

What a process sets up before jax starts (the allocator) is ``backends.process``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet.backends.cpu import kernels as cpu_kernels
from jaxdet.backends.cpu.batch_norm import batch_statistics, normalize_with_batch_statistics
from jaxdet.backends.cpu.compile_options import cpu_compiler_options as compiler_options
from jaxdet.backends.cpu.conv2d import conv_general_dilated


def top_k_per_class(scores: jnp.ndarray, k: int) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Each class's ``k`` best anchors of ``scores [B, A, C]`` (float32, 1 <= k <= A):
    ``values [B, C, k]`` descending and their anchor ``indices [B, C, k]`` int32, ties at the
    lower anchor first: ``lax.top_k`` of the scores transposed to [B, C, A]. On one CPU device
    (outside an export) jaxdet's kernel reads the scores in place instead
    (``cpu_kernels.top_k_along_axis``; XLA:CPU's TopK sorts the rows one by one)."""
    if cpu_kernels.usable():
        return _kernel_top_k(scores, k)
    return jax.lax.top_k(jnp.swapaxes(scores, 1, 2), k)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _kernel_top_k(scores, k):
    return cpu_kernels.top_k_along_axis(scores, k)


@_kernel_top_k.defjvp
def _kernel_top_k_jvp(k, primals, tangents):
    """As ``lax.top_k``'s: each kept value's tangent is its score's; indices have none."""
    values, indices = _kernel_top_k(primals[0], k)
    value_tangents = jnp.take_along_axis(jnp.swapaxes(tangents[0], 1, 2), indices, axis=2)
    return (values, indices), (value_tangents, np.zeros(indices.shape, jax.dtypes.float0))


__all__ = ["batch_statistics", "compiler_options", "conv_general_dilated",
           "normalize_with_batch_statistics", "top_k_per_class"]
