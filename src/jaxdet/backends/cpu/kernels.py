"""jaxdet's own XLA:CPU kernels, as XLA FFI custom calls, for passes XLA:CPU runs slowly.

XLA:CPU turns some of a detector's gradient computations into many sweeps over memory where
one would do. The kernel gradient of a 3x3 depthwise convolution is nine reductions (each
tap's product with the output gradient, summed over the batch and the image), each reading
the activation and the output gradient again: 30% of an SSD MobileNetV2 train step on the
2-core CPU (benchmarks/LOG.md, issue 22). ``native/cpu_kernels.cc`` computes it in one pass.

The source is compiled once per machine with the system's C++ compiler (``$CXX``, ``c++`` or
``g++``) against jax's own FFI headers, tuned for the CPU it runs on (``-march=native``), into
``~/.cache/jaxdet`` (:mod:`jaxdet.backends.native_build`), then registered with
``jax.ffi.register_ffi_target``. Everything here falls back to the portable jnp code when the
kernels are not to be had: no compiler, a failed build, another backend, a computation
partitioned over a device mesh (XLA cannot split a custom call; the jnp code shards), or
``JAXDET_CPU_KERNELS=0``. The convolution kernels appear in train steps only (gradients);
``predict`` calls one, the per-class top k of NMS's candidates (XLA:CPU's TopK sorts each
class's scores one row at a time: a third of an EfficientDet-D0 batch-8 predict). None ever
appears in an exported artifact (export traces inside ``core.portable.exportable``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet.backends import native_build
from jaxdet.backends.trace import kernels_allowed, traced_on_one_device

SOURCE = Path(__file__).resolve().parent.parent / "native" / "cpu_kernels.cc"
OPT_OUT = "JAXDET_CPU_KERNELS"
DEPTHWISE_KERNEL_GRADIENT = "jaxdet_depthwise_kernel_gradient"
MATMUL_TRANSPOSED_LEFT = "jaxdet_matmul_transposed_left"
MATMUL_TRANSPOSED_LEFT_MATRIX = "jaxdet_matmul_transposed_left_matrix"
IMAGE_CONVOLUTION = "jaxdet_image_convolution"
IMAGE_CONVOLUTION_KERNEL_GRADIENT = "jaxdet_image_convolution_kernel_gradient"
WINOGRAD_INPUT_TILES = "jaxdet_winograd_input_tiles"
WINOGRAD_OUTPUT_GRADIENT_TILES = "jaxdet_winograd_output_gradient_tiles"
TOP_K = "jaxdet_top_k"
_TARGETS = (DEPTHWISE_KERNEL_GRADIENT, MATMUL_TRANSPOSED_LEFT, MATMUL_TRANSPOSED_LEFT_MATRIX,
            IMAGE_CONVOLUTION, IMAGE_CONVOLUTION_KERNEL_GRADIENT, WINOGRAD_INPUT_TILES,
            WINOGRAD_OUTPUT_GRADIENT_TILES, TOP_K)

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, bool] = {}


def library(directory: Path | None = None, source: Path = SOURCE,
            compiler: str | None = None) -> Path | None:
    """``native/cpu_kernels.cc`` built for this machine and this jax (its FFI headers), or
    None where it cannot be built (no C++ compiler, a failed build: logged at debug level)."""
    include = jax.ffi.include_dir()
    key = native_build.cpu_signature() + jax.__version__.encode() + hashlib.sha256(
        (Path(include) / "xla" / "ffi" / "api" / "ffi.h").read_bytes()).digest()
    return native_build.cached_library(
        source, "cpu_kernels",
        compiler or native_build.compiler("cpu_kernels"),
        ["-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w", f"-I{include}"],
        key=key, directory=directory)


def available() -> bool:
    """Whether the kernels are built and registered in this process (built and registered on
    the first call; False when ``JAXDET_CPU_KERNELS=0`` or they cannot be built)."""
    if os.environ.get(OPT_OUT, "1") == "0":
        return False
    with _lock:
        if "ok" not in _state:
            _state["ok"] = _register()
        return _state["ok"]


def _register() -> bool:
    import ctypes  # noqa: PLC0415

    path = library()
    if path is None:  # no C++ compiler, or a failed build: one warning per machine says so
        native_build.report_fallback("cpu_kernels")
        return False
    try:
        lib = ctypes.cdll.LoadLibrary(str(path))
        for name in _TARGETS:
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)),
                                        platform="cpu")
    except (OSError, AttributeError, ValueError) as err:
        log.info("jaxdet's CPU kernels could not be loaded from %s: %s", path, err)
        return False
    return True


def usable() -> bool:
    """Whether code being traced now may call the kernels: on the CPU backend, traced as
    ``backends.trace.Forms.NATIVE`` (not within ``trace.portable()``, ``trace.reference()`` or
    an export), not partitioned over a mesh of more than one device
    (``jax.sharding.get_abstract_mesh()``, which the models set around a sharded step), and
    available."""
    if (not kernels_allowed() or jax.default_backend() != "cpu"
            or not traced_on_one_device()):
        return False
    return available()


def _require() -> None:
    if not available():
        raise RuntimeError(f"jaxdet's CPU kernels are not available ({OPT_OUT}=0, or no C++ "
                           "compiler); check cpu_kernels.usable() before calling one")


def _window_attributes(kernel_hw, strides, padding) -> dict:
    return {"kh": np.int64(kernel_hw[0]), "kw": np.int64(kernel_hw[1]),
            "sh": np.int64(strides[0]), "sw": np.int64(strides[1]),
            "pt": np.int64(padding[0][0]), "pl": np.int64(padding[1][0])}


def _kernel_gradient(target: str, rows: int, x: jax.Array, grad: jax.Array,
                     kernel_hw: Sequence[int], strides: Sequence[int],
                     padding: Sequence[tuple[int, int]]) -> jax.Array:
    _require()
    kh, kw = (int(k) for k in kernel_hw)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((kh * kw * rows, grad.shape[-1]),
                                                         jnp.float32),
                            vmap_method="sequential")
    return call(x, grad, **_window_attributes((kh, kw), strides, padding)).reshape(
        kh, kw, rows, grad.shape[-1])


def depthwise_kernel_gradient(
    x: jax.Array,
    grad: jax.Array,
    kernel_hw: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> jax.Array:
    """The gradient [kh, kw, 1, C] of a loss with respect to the HWIO kernel of a depthwise
    convolution (no dilation) of NHWC float32 ``x`` [B, H, W, C] with explicit zero
    ``padding`` ((top, bottom), (left, right)), given the output gradient ``grad``
    [B, Ho, Wo, C]: ``sum over b, h, w of x_padded[b, h*sh + i, w*sw + j, c] * grad[b, h, w,
    c]``, in one pass. Raises RuntimeError where the kernels are not :func:`available`."""
    return _kernel_gradient(DEPTHWISE_KERNEL_GRADIENT, 1, x, grad, kernel_hw, strides, padding)


def matmul_transposed_left(x: jax.Array, grad: jax.Array) -> jax.Array:
    """``x^T @ grad`` [C, O] for float32 ``x`` [N, C] and ``grad`` [N, O] (the kernel gradient
    of a 1x1 convolution over N = B * H * W positions), or a batch of them, [X, C, O] for
    [X, N, C] and [X, N, O], reading both operands in place: no transposed copy of either.
    Raises RuntimeError where the kernels are not :func:`available`."""
    _require()
    # Matrices go to a rank-2 target: a [1, N, O] view of grad would be a second shape of the
    # same value, and XLA would compute its elementwise producer once per shape.
    target, out_shape = ((MATMUL_TRANSPOSED_LEFT, (x.shape[0], x.shape[2], grad.shape[2]))
                         if x.ndim == 3 else
                         (MATMUL_TRANSPOSED_LEFT_MATRIX, (x.shape[1], grad.shape[1])))
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(out_shape, jnp.float32),
                            vmap_method="sequential")
    return call(x, grad)


def image_convolution(
    x: jax.Array,
    kernel: jax.Array,
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> jax.Array:
    """The convolution (no dilation) of NHWC float32 ``x`` [B, H, W, C] (a few channels: an
    image) with an HWIO ``kernel`` [kh, kw, C, O] and explicit zero ``padding``: [B, Ho, Wo,
    O], each output pixel's kh * kw * C patch times the kernel."""
    _require()
    kh, kw, _, out_channels = kernel.shape
    out_h = (x.shape[1] + padding[0][0] + padding[0][1] - kh) // strides[0] + 1
    out_w = (x.shape[2] + padding[1][0] + padding[1][1] - kw) // strides[1] + 1
    call = jax.ffi.ffi_call(IMAGE_CONVOLUTION, jax.ShapeDtypeStruct(
        (x.shape[0], out_h, out_w, out_channels), jnp.float32), vmap_method="sequential")
    return call(x, kernel.reshape(-1, out_channels),
                **_window_attributes((kh, kw), strides, padding))


def image_convolution_kernel_gradient(
    x: jax.Array,
    grad: jax.Array,
    kernel_hw: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> jax.Array:
    """The gradient [kh, kw, C, O] with respect to the kernel of :func:`image_convolution`,
    given its output gradient ``grad`` [B, Ho, Wo, O]."""
    return _kernel_gradient(IMAGE_CONVOLUTION_KERNEL_GRADIENT, x.shape[-1], x, grad,
                            kernel_hw, strides, padding)


def _winograd_tiles(target: str, x: jax.Array) -> jax.Array:
    _require()
    batch, height, width, channels = x.shape
    tiles = batch * -(-height // 4) * -(-width // 4)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((36, tiles, channels), jnp.float32),
                            vmap_method="sequential")
    return call(x)


def winograd_input_tiles(x: jax.Array) -> jax.Array:
    """Winograd F(4x4, 3x3)'s input transform ``B^T d B`` of every 6x6 tile of NHWC float32
    ``x`` [B, H, W, C] (one pixel of zero padding, tiles 4 pixels apart, nh = ceil(H / 4) by
    nw = ceil(W / 4) per image): [36, B * nh * nw, C], tile position (i, j) at i * 6 + j
    (``jaxdet.backends.cpu.winograd._transform_input`` in one pass)."""
    return _winograd_tiles(WINOGRAD_INPUT_TILES, x)


def winograd_output_gradient_tiles(grad: jax.Array) -> jax.Array:
    """The adjoint of Winograd F(4x4, 3x3)'s output transform for the NHWC float32 output
    gradient ``grad`` [B, H, W, O]: ``A g A^T`` of every 4x4 block (zero beyond the image),
    [36, B * nh * nw, O] (``jaxdet.backends.cpu.winograd._output_gradient_tiles`` in one pass)."""
    return _winograd_tiles(WINOGRAD_OUTPUT_GRADIENT_TILES, grad)


def top_k_along_axis(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The ``k`` largest entries of each row ``x[o, :, i]`` of float32 ``x`` [outer, n, inner]
    (1 <= k <= n), read in place: ``values`` [outer, inner, k] float32 and their positions
    ``indices`` [outer, inner, k] int32, descending, ties at the lower position first;
    ``lax.top_k(jnp.swapaxes(x, 1, 2), k)`` without the transposed copy or the row sorts
    (floats in their total order, NaN above +inf)."""
    _require()
    outer, n, inner = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"top k of rows of {n}: k={k} must be in 1..{n}")
    call = jax.ffi.ffi_call(TOP_K, (jax.ShapeDtypeStruct((outer, inner, k), jnp.float32),
                                    jax.ShapeDtypeStruct((outer, inner, k), jnp.int32)),
                            vmap_method="sequential")
    return call(x.astype(jnp.float32))
