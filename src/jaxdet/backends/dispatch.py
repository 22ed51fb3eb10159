"""The ops with backend-specific forms, by name: the one module model, core and job code
imports for them. Each picks its form at trace time (``backends.trace``): on one CPU device
jaxdet's rewrites and FFI kernels (``backends.cpu``), elsewhere (GPU, TPU, a mesh, an export)
the XLA op.

* :func:`conv_general_dilated`: ``lax.conv_general_dilated`` as ``nnx.Conv`` calls it
  (depthwise, 1x1, image and Winograd 3x3 rewrites on CPU);
* :func:`batch_statistics` / :func:`normalize_with_batch_statistics`: training-mode batch norm
  with a backward pass of fewer memory passes (what ``models.layers.BatchNorm`` takes on CPU);
* :func:`max_pool_2d`: max pooling (its gradient written out on CPU);
* :func:`top_k_per_class`: NMS's per-class top k;
* :data:`CONV3D_LOWERINGS` / :func:`default_conv3d_lowering`: 3D convolution as XLA's or as
  one 2D convolution over stacked depth taps (the fast one on XLA:CPU);
* :func:`compiler_options`: XLA:CPU compile options for a jitted step or predict;
* :func:`on_cpu`: whether jax computes on the host CPU (no GPU or TPU), for defaults that
  depend on it (the loader's worker processes, the allocator hint);
* :func:`kernels_available`: whether jaxdet's CPU kernels are built and registered in this
  process, and :func:`winograd_conv3x3`, the Winograd form of a 3x3 convolution at any shape
  (what :func:`conv_general_dilated` takes for wide ones on CPU): for the benchmarks that
  time each form against the one it replaces.

What a process sets up before jax starts (the allocator) is ``backends.process``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet.backends import trace
from jaxdet.backends.cpu import kernels as cpu_kernels
from jaxdet.backends.cpu import pooling as cpu_pooling
from jaxdet.backends.cpu.batch_norm import batch_statistics, normalize_with_batch_statistics
from jaxdet.backends.cpu.compile_options import cpu_compiler_options as compiler_options
from jaxdet.backends.cpu.conv2d import conv_general_dilated
from jaxdet.backends.cpu.conv3d import depth_stacked_conv
from jaxdet.backends.cpu.winograd import winograd_conv3x3

CONV3D_LOWERINGS = {"native": jax.lax.conv_general_dilated, "depth_stacked": depth_stacked_conv}


def on_cpu() -> bool:
    """Whether jax's default backend is the host CPU (no GPU or TPU in use)."""
    return jax.default_backend() == "cpu"


def kernels_available() -> bool:
    """Whether jaxdet's CPU kernels (XLA FFI) are built and registered in this process (built
    on the first call); False where ``JAXDET_CPU_KERNELS=0`` or they cannot be built. Code
    traced on one CPU device, outside ``trace.portable()``, calls them when this is True."""
    return cpu_kernels.available()


def default_conv3d_lowering() -> str:
    """The faster key of :data:`CONV3D_LOWERINGS` on this backend: ``depth_stacked`` on CPU
    (XLA:CPU's 3D convolution is a generic loop nest, about 10x slower than its 2D one),
    ``native`` on GPU and TPU (cuDNN, the TPU's convolution units)."""
    return "depth_stacked" if on_cpu() else "native"


def has_batch_norm_form(dtype) -> bool:
    """Whether training-mode batch norm of ``dtype`` inputs (features last, whole-batch
    statistics) has a backend form: :func:`batch_statistics` /
    :func:`normalize_with_batch_statistics`, the same values as flax's with fewer passes over
    memory in the backward pass: float32 on CPU. GPUs and TPUs keep flax's."""
    return dtype == jnp.float32 and on_cpu()


def max_pool_2d(x: jax.Array, init: float, window: tuple[int, int], strides: tuple[int, int],
                pads: tuple[tuple[int, int], tuple[int, int]]) -> jax.Array:
    """Max pooling of ``x`` [B, H, W, C] over ``window`` (kh, kw) windows moved by ``strides``
    (sh, sw), padded with ``init`` by ``pads`` ((top, bottom), (left, right)): XLA's
    ``reduce_window``; on one CPU device with its gradient written out
    (``backends.cpu.pooling``; autodiff's ``select_and_scatter`` is a scatter there)."""
    if on_cpu() and trace.traced_on_one_device():
        return cpu_pooling.max_pool_2d(x, init, window, strides, pads)
    return jax.lax.reduce_window(x, init, jax.lax.max, (1, *window, 1), (1, *strides, 1),
                                 ((0, 0), *pads, (0, 0)))


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


__all__ = ["CONV3D_LOWERINGS", "batch_statistics", "compiler_options", "conv_general_dilated",
           "default_conv3d_lowering", "has_batch_norm_form", "kernels_available", "max_pool_2d",
           "normalize_with_batch_statistics", "on_cpu", "top_k_per_class", "winograd_conv3x3"]
