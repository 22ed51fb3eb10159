"""3x3 stride-1 convolutions by Winograd's minimal filtering, F(4x4, 3x3), for XLA:CPU.

A 3x3 convolution computes each 4x4 block of outputs from a 6x6 block of inputs. Winograd's
algorithm (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015) maps each
6x6 input tile and each 3x3 kernel into a 6x6 transformed domain where the convolution is an
elementwise product, so the channel contraction becomes 36 matrix multiplies of [tiles, C] by
[C, O]: 36 multiply-adds per 16 outputs and channel pair instead of 144, 4x fewer. The
transforms are sums and differences over the tiles, cheap next to the matmuls once C and O are
64 or more.

The gradients use the same algorithm: the input gradient is a Winograd convolution of the
output gradient with the kernel turned 180 degrees, the kernel gradient the transposed
algorithm (36 matmuls contracting the tiles, then the kernel transform's adjoint).

On the 2-core CPU machines XLA:CPU's own convolutions already run near the fp32 peak, so the
arithmetic saved is the only lever left. Timed one convolution at a time
(``python -m benchmarks.cpu.winograd --grad``), the forward pass of RetinaNet-ResNet50's
3x3 convolutions ran 1.3-2.2x faster and forward plus gradients 1.2-2.1x. Results match the
direct convolution to within about 2e-5 of the output's largest value (F(4x4, 3x3) rounds
more than a direct sum: its transforms scale by up to 8 and 1/24); they are only used for
float32.

Every function here takes NHWC inputs and HWIO kernels, stride 1, one pixel of zero padding on
each side ("SAME" for 3x3), and returns NHWC outputs of the input's height and width.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdet.backends.cpu import kernels as cpu_kernels

# F(4, 3) in one dimension: input transform B^T [6, 6], kernel transform G [6, 3], output
# transform A^T [4, 6] (interpolation points 0, +-1, +-2 and infinity).
INPUT_TRANSFORM = np.array([
    [4, 0, -5, 0, 1, 0],
    [0, -4, -4, 1, 1, 0],
    [0, 4, -4, -1, 1, 0],
    [0, -2, -1, 2, 1, 0],
    [0, 2, -1, -2, 1, 0],
    [0, 4, 0, -5, 0, 1],
], np.float64)
KERNEL_TRANSFORM = np.array([
    [1 / 4, 0, 0],
    [-1 / 6, -1 / 6, -1 / 6],
    [-1 / 6, 1 / 6, -1 / 6],
    [1 / 24, 1 / 12, 1 / 6],
    [1 / 24, -1 / 12, 1 / 6],
    [0, 0, 1],
], np.float64)
OUTPUT_TRANSFORM = np.array([
    [1, 1, 1, 1, 1, 0],
    [0, 1, -1, 2, -2, 0],
    [0, 1, 1, 4, 4, 0],
    [0, 1, -1, 8, -8, 1],
], np.float64)
TILE = INPUT_TRANSFORM.shape[0]  # 6 inputs per tile side
OUT = OUTPUT_TRANSFORM.shape[0]  # 4 outputs per tile side


def _combine(parts: Sequence[jax.Array], coefficients: np.ndarray) -> jax.Array:
    """sum_i coefficients[i] * parts[i], skipping zeros and multiplying only where needed."""
    out = None
    for coefficient, part in zip(coefficients, parts, strict=True):
        if coefficient == 0:
            continue
        term = part if coefficient == 1 else -part if coefficient == -1 else part * float(
            coefficient)
        out = term if out is None else out + term
    return out


def transform_kernel(kernel: jax.Array) -> jax.Array:
    """G g G^T of an HWIO kernel [3, 3, C, O]: [36, C, O], tile position (i, j) at i * 6 + j.
    One small matmul: kernel-sized data, and few ops to compile."""
    weights = jnp.asarray(np.kron(KERNEL_TRANSFORM, KERNEL_TRANSFORM), kernel.dtype)  # [36, 9]
    return jnp.einsum("xt,tco->xco", weights, kernel.reshape(9, *kernel.shape[2:]))


def _transform_input(x: jax.Array) -> tuple[jax.Array, int, int]:
    """B^T d B of every 6x6 input tile of NHWC ``x`` [B, H, W, C] (zero padded by one pixel,
    tiles 4 pixels apart): ([6, 6, B, nh, nw, C], nh, nw) with nh = ceil(H / 4)."""
    _, height, width, _ = x.shape
    nh, nw = -(-height // OUT), -(-width // OUT)
    padded = jnp.pad(x, ((0, 0), (1, OUT * nh + 1 - height), (1, OUT * nw + 1 - width), (0, 0)))
    rows = [padded[:, r: r + OUT * (nh - 1) + 1: OUT] for r in range(TILE)]
    along_h = jnp.stack([_combine(rows, row) for row in INPUT_TRANSFORM])  # [6, B, nh, Wp, C]
    cols = [along_h[:, :, :, r: r + OUT * (nw - 1) + 1: OUT] for r in range(TILE)]
    return jnp.stack([_combine(cols, row) for row in INPUT_TRANSFORM], axis=1), nh, nw


def _transform_output(m: jax.Array, height: int, width: int) -> jax.Array:
    """A^T m A of the [6, 6, B, nh, nw, O] products: the NHWC output [B, height, width, O]."""
    along_h = jnp.stack([_combine([m[i] for i in range(TILE)], row) for row in OUTPUT_TRANSFORM])
    tiles = jnp.stack([_combine([along_h[:, j] for j in range(TILE)], row)
                       for row in OUTPUT_TRANSFORM], axis=1)  # [4, 4, B, nh, nw, O]
    batch, nh, nw, channels = tiles.shape[2:]
    out = tiles.transpose(2, 3, 0, 4, 1, 5).reshape(batch, OUT * nh, OUT * nw, channels)
    return out[:, :height, :width]


def _transform_output_gradient(grad: jax.Array, nh: int, nw: int) -> jax.Array:
    """The adjoint of :func:`_transform_output` for the NHWC output gradient [B, H, W, O],
    laid out channel-major for the kernel gradient's matmuls: [6, 6, O, B, nh, nw]."""
    batch, height, width, channels = grad.shape
    # Channels first: the matmuls then read each tile position's gradient as [O, tiles], the
    # contracted tiles minor, which is how XLA:CPU wants a matmul's left operand. Transposing
    # the output gradient before the transform is far cheaper than transposing the 2.25x
    # larger transformed tiles after it.
    grad = jnp.pad(jnp.transpose(grad, (3, 0, 1, 2)),
                   ((0, 0), (0, 0), (0, OUT * nh - height), (0, OUT * nw - width)))
    grad = grad.reshape(channels, batch, nh, OUT, nw, OUT)
    rows = [grad[:, :, :, p] for p in range(OUT)]  # [O, B, nh, nw, 4]
    along_h = jnp.stack([_combine(rows, OUTPUT_TRANSFORM[:, i]) for i in range(TILE)])
    cols = [along_h[..., q] for q in range(OUT)]  # [6, O, B, nh, nw]
    return jnp.stack([_combine(cols, OUTPUT_TRANSFORM[:, j]) for j in range(TILE)], axis=1)


def _kernel_gradient(x: jax.Array, grad: jax.Array) -> jax.Array:
    """The gradient [3, 3, C, O] of a loss with respect to the kernel, from the input ``x``
    [B, H, W, C] and the output gradient ``grad`` [B, H, W, O]: the transposed algorithm, 36
    matmuls contracting the tiles, then the adjoint of the kernel transform. With jaxdet's
    CPU kernels the 36 products read both tile sets in place
    (``cpu_kernels.matmul_transposed_left``); XLA's matmuls want the output gradient's tiles
    channel-major instead."""
    out_channels = grad.shape[-1]
    weights = jnp.asarray(np.kron(KERNEL_TRANSFORM, KERNEL_TRANSFORM), grad.dtype)
    if _use_cpu_kernels(x, grad):
        grad_u = cpu_kernels.matmul_transposed_left(
            cpu_kernels.winograd_input_tiles(x),
            cpu_kernels.winograd_output_gradient_tiles(grad))  # [36, C, O]
        grad_kernel = jnp.einsum("xt,xco->tco", weights, grad_u)  # [9, C, O]
        return grad_kernel.reshape(3, 3, x.shape[-1], out_channels)
    v, nh, nw = _transform_input(x)
    grad_m = _transform_output_gradient(grad, nh, nw)
    grad_u = jnp.einsum("ijobhw,ijbhwc->ijoc", grad_m, v).reshape(TILE * TILE, *grad_m.shape[2:3],
                                                                   x.shape[-1])
    grad_kernel = jnp.einsum("xt,xoc->toc", weights, grad_u)  # [9, O, C]
    return grad_kernel.reshape(3, 3, out_channels, x.shape[-1]).transpose(0, 1, 3, 2)


def _use_cpu_kernels(*arrays: jax.Array) -> bool:
    return all(a.dtype == jnp.float32 for a in arrays) and cpu_kernels.usable()


def _winograd_forward(x: jax.Array, kernel: jax.Array, *, tiles_in_c: bool = False
                      ) -> jax.Array:
    """The Winograd convolution; ``tiles_in_c``: the input transform by jaxdet's CPU kernel
    (one pass; a train step's custom-VJP rules only, never predict or export)."""
    if tiles_in_c:
        batch, height, width, channels = x.shape
        v = cpu_kernels.winograd_input_tiles(x).reshape(
            TILE, TILE, batch, -(-height // OUT), -(-width // OUT), channels)
    else:
        v, _, _ = _transform_input(x)
    u = transform_kernel(kernel).reshape(TILE, TILE, *kernel.shape[2:])
    # (b, h, w) stay separate dimensions: merging them would gather a mesh-sharded height.
    m = jnp.einsum("ijbhwc,ijco->ijbhwo", v, u)
    return _transform_output(m, x.shape[1], x.shape[2])


def _direct(x: jax.Array, kernel: jax.Array) -> jax.Array:
    return lax.conv_general_dilated(x, kernel, (1, 1), ((1, 1), (1, 1)),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


@jax.custom_vjp
def winograd_conv3x3(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """3x3 convolution (cross-correlation, as ``lax.conv_general_dilated``) of NHWC ``x``
    [B, H, W, C] with an HWIO ``kernel`` [3, 3, C, O], stride 1, padding 1: [B, H, W, O]."""
    return _winograd_forward(x, kernel)


def _fwd(x, kernel):
    return _winograd_forward(x, kernel, tiles_in_c=_use_cpu_kernels(x)), (x, kernel)


def _bwd(residuals, grad):
    x, kernel = residuals
    # The input gradient is the same kind of convolution: of the output gradient with the
    # kernel turned 180 degrees and its channel axes swapped.
    grad_x = _winograd_forward(grad, jnp.flip(kernel, (0, 1)).transpose(0, 1, 3, 2),
                               tiles_in_c=_use_cpu_kernels(grad))
    return grad_x, _kernel_gradient(x, grad)


winograd_conv3x3.defvjp(_fwd, _bwd)

# Where the transforms pay for themselves (``benchmarks/cpu/winograd.py`` on CPU-2): both
# channel counts at least this, and at least this many 4x4 output tiles in the batch.
MIN_CHANNELS = 64
MIN_TILES = 50


def _tiles(x_shape: Sequence[int]) -> int:
    batch, height, width, _ = x_shape
    return batch * -(-height // OUT) * -(-width // OUT)


def worth_it(x_shape: Sequence[int], kernel_shape: Sequence[int], dtype) -> bool:
    """Whether a float32 3x3 convolution of NHWC ``x_shape`` with HWIO ``kernel_shape`` is
    large enough for :func:`winograd_conv3x3` to beat the direct convolution on CPU. False for
    symbolic shapes and where the environment sets ``JAXDET_WINOGRAD=0``."""
    if os.environ.get("JAXDET_WINOGRAD", "1") == "0":
        return False
    if not all(isinstance(d, int) for d in (*x_shape, *kernel_shape)):
        return False  # symbolic (exported) dimensions: keep XLA's convolution
    return (jnp.dtype(dtype) == jnp.float32 and tuple(kernel_shape[:2]) == (3, 3)
            and min(x_shape[3], kernel_shape[3]) >= MIN_CHANNELS
            and _tiles(x_shape) >= MIN_TILES)
