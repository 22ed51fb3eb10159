"""CPU-friendly convolutions: depthwise as shifted multiply-adds, 1x1 as a matmul.

XLA:CPU lowers grouped convolutions (``feature_group_count == channels``) to a slow generic
loop, and the backward pass of a 1x1 convolution to a slow convolution too. Measured here
(16x64x64x32 inputs): a 3x3 depthwise conv's gradient ran 2x (stride 1) to 13x (stride 2)
faster as ``kh * kw`` strided slices times per-channel weights, and a 1x1 conv's gradient 3x
faster as a reshaped matmul, and a strided 1x1 conv's weight gradient (ResNet's downsample
projection) about 10x faster as a strided slice and a matmul. The 1x1 kernel gradient picks
the operand XLA transposes (see :func:`_pointwise_bwd`): MobileNetV2 SSD's train step went
from 1.1 to 0.89 s, EfficientDet-D0's from 1.7-2.2 to 1.1 s. GPUs and TPUs have fast kernels
for all of these, so the rewrites are used on CPU only. Every path computes the same function
(a test checks values and grads).

In a train step on one device, three gradients go further, to jaxdet's own XLA:CPU kernels
(:mod:`backends.cpu.kernels`): the depthwise kernel gradient (one pass instead of one reduction
per tap), the 1x1 kernel gradient of large maps (no transposed copy of an operand), and an
image convolution's (a stem's) forward pass and kernel gradient (patches built a tile at a
time). Predict and export never see them: they sit in custom-VJP rules only.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from jaxdet.backends import trace
from jaxdet.backends.cpu import kernels as cpu_kernels
from jaxdet.backends.cpu import winograd


def _window_taps(
    x: jax.Array,
    kernel_hw: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
) -> list[jax.Array]:
    """The ``kh * kw`` strided views of NHWC ``x`` (explicitly padded) that a kh x kw window
    reads, tap (i, j) at index ``i * kw + j``, each [B, out_h, out_w, C]."""
    kh, kw = kernel_hw
    sh, sw = strides
    dh, dw = dilation
    xp = jnp.pad(x, ((0, 0), tuple(padding[0]), tuple(padding[1]), (0, 0)))
    out_h = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    out_w = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    return [lax.slice(xp, (0, i * dh, j * dw, 0),
                      (xp.shape[0], i * dh + (out_h - 1) * sh + 1,
                       j * dw + (out_w - 1) * sw + 1, xp.shape[3]), (1, sh, sw, 1))
            for i in range(kh) for j in range(kw)]


def _shifted_depthwise(
    x: jax.Array,
    kernel: jax.Array,
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
) -> jax.Array:
    """Depthwise conv of NHWC ``x`` with an HWIO kernel [kh, kw, 1, C] (explicit padding)."""
    taps = _window_taps(x, kernel.shape[:2], strides, padding, dilation)
    weights = kernel.reshape(len(taps), -1)
    out = taps[0] * weights[0]
    for tap, weight in zip(taps[1:], weights[1:], strict=True):
        out = out + tap * weight
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _depthwise_with_fast_grad(x: jax.Array, kernel: jax.Array, strides: tuple[int, int],
                              padding: tuple[tuple[int, int], ...]) -> jax.Array:
    """:func:`_shifted_depthwise` (no dilation) with a hand-written gradient.

    Autodiff of the shifted sums pads each of the ``kh * kw`` tap gradients back to the input's
    size and adds them, 9 full passes for a 3x3 kernel. Here the input gradient is itself a
    shifted-sum depthwise correlation of the output gradient with the kernel
    (:func:`_depthwise_input_gradient`, phase by phase when strided). The kernel gradient is
    each tap times the output gradient, summed. 2.2-2.8x faster than autodiff for MobileNetV2's
    depthwise layers on the 2-core CPU (``[8, 150, 150, 32]`` and ``[8, 75, 75, 144]``).
    """
    return _shifted_depthwise(x, kernel, strides, padding, (1, 1))


_NO_PADDING = ((0, 0), (0, 0))


def _phase_taps(size: int, out: int, k: int, s: int, low: int
                ) -> tuple[int, list[list[tuple[int, int]]], tuple[int, int]]:
    """For a window of ``k`` taps at stride ``s`` with ``low`` padding over ``size`` input
    positions and ``out`` output positions: the number of positions per phase, ceil(size / s);
    per phase r (input positions n = m * s + r) the taps t that reach it, each with its
    output-gradient offset (n + low - t) / s - m; and the (before, after) zero padding of the
    output gradient that keeps every such shifted run of ceil(size / s) positions in range."""
    count = -(-size // s)
    phases = [[(t, (r + low - t) // s) for t in range(k) if (r + low - t) % s == 0]
              for r in range(s)]
    offsets = [o for taps in phases for _, o in taps] or [0]
    return count, phases, (max(0, -min(offsets)), max(0, count - 1 + max(offsets) - (out - 1)))


def _depthwise_input_gradient(
    grad: jax.Array,
    kernel: jax.Array,
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    in_hw: Sequence[int],
) -> jax.Array:
    """The input gradient [B, H, W, C] (``in_hw`` = (H, W)) of a depthwise convolution with
    an HWIO ``kernel`` [kh, kw, 1, C], ``strides`` and explicit ``padding``, given the output
    gradient ``grad`` [B, Ho, Wo, C]: ``dx[n] = sum over taps t of grad[(n + pad_low - t) / s]
    * kernel[t]`` where that index is a whole number in range.

    Done phase by phase: the input rows n = m * s + r meet only the taps t with n + pad_low - t
    divisible by s, so each of the s x s phases is a shifted sum over the (edge-padded) output
    gradient itself, 1, 2 or 4 of the 9 taps of a 3x3 kernel at stride 2, and the phases are
    interleaved. At stride 1 it is one phase: the correlation of the padded gradient with the
    flipped kernel. Before, a strided layer's gradient was zero-dilated to the input's size
    first and all 9 taps summed over it: MobileNetV2 SSD's train step took 644 ms that way and
    610 ms this way (batch 8, alternating rounds in one process). Padding each tap on its own
    (no shared padded copy) was slower still, 731 ms: XLA fuses the pads but evaluates each
    one's bounds per element.
    """
    (ch, phases_h, pad_h), (cw, phases_w, pad_w) = (
        _phase_taps(in_hw[d], grad.shape[1 + d], kernel.shape[d], strides[d], padding[d][0])
        for d in range(2))
    batch, channels = grad.shape[0], grad.shape[3]
    padded = jnp.pad(grad, ((0, 0), pad_h, pad_w, (0, 0)))
    rows = []
    for taps_h in phases_h:
        row = []
        for taps_w in phases_w:
            acc = jnp.zeros((batch, ch, cw, channels), grad.dtype)
            for th, oh in taps_h:
                for tw, ow in taps_w:
                    top, left = pad_h[0] + oh, pad_w[0] + ow
                    tap = lax.slice(padded, (0, top, left, 0),
                                    (batch, top + ch, left + cw, channels))
                    acc = acc + tap * kernel[th, tw, 0]
            row.append(acc)
        rows.append(jnp.stack(row, axis=3))  # [B, ch, cw, sw, C]
    phases = jnp.stack(rows, axis=2)  # [B, ch, sh, cw, sw, C]
    full = phases.reshape(batch, ch * strides[0], cw * strides[1], channels)
    return full[:, :in_hw[0], :in_hw[1]]


def _depthwise_fwd(x, kernel, strides, padding):
    # The padded input is the residual, and the kernel gradient reads it with no padding of
    # its own: XLA then writes the (batch-normalised, activated) input once, padded, instead of
    # a second time unpadded for the backward pass (MobileNetV2 SSD's train step: 4%).
    xp = jnp.pad(x, ((0, 0), tuple(padding[0]), tuple(padding[1]), (0, 0)))
    return _shifted_depthwise(xp, kernel, strides, _NO_PADDING, (1, 1)), (xp, kernel)


def _depthwise_bwd(strides, padding, residuals, grad):
    xp, kernel = residuals
    in_hw = tuple(xp.shape[1 + d] - padding[d][0] - padding[d][1] for d in range(2))
    grad_x = _depthwise_input_gradient(grad, kernel, strides, padding, in_hw)
    if xp.dtype == jnp.float32 and grad.dtype == jnp.float32 and cpu_kernels.usable():
        # One pass over x and the gradient instead of one reduction per tap (9 for 3x3).
        grad_kernel = cpu_kernels.depthwise_kernel_gradient(xp, grad, kernel.shape[:2], strides,
                                                            _NO_PADDING)
        return grad_x, grad_kernel.astype(kernel.dtype)
    taps = _window_taps(xp, kernel.shape[:2], strides, _NO_PADDING, (1, 1))
    grad_kernel = jnp.stack([jnp.sum(tap * grad, axis=(0, 1, 2)) for tap in taps])
    return grad_x, grad_kernel.reshape(kernel.shape)


_depthwise_with_fast_grad.defvjp(_depthwise_fwd, _depthwise_bwd)


# From this many positions (B * H * W) a 1x1 kernel gradient is memory-bound and goes to
# backends.cpu.kernels.matmul_transposed_left where it can (XLA's transposed copy of one operand
# cost MobileNetV2 SSD's train step 60 ms at batch 8); smaller ones stay with XLA's matmul.
CPU_KERNEL_MIN_POSITIONS = 8192


@jax.custom_vjp
def _pointwise(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """1x1 convolution of NHWC ``x`` [B, H, W, C] with a [C, O] kernel, as an einsum.

    An einsum keeps (b, h, w) as separate dimensions: a reshape to [b*h*w, c] would merge a
    mesh-sharded height into one dimension and force an all-gather under GSPMD."""
    return jnp.einsum("bhwc,co->bhwo", x, kernel)


def _pointwise_fwd(x, kernel):
    return _pointwise(x, kernel), (x, kernel)


def _pointwise_bwd(residuals, grad):
    # The kernel gradient contracts (b, h, w) of x and of the output gradient. XLA:CPU's
    # matmuls want the left operand's contracted dimensions minor, so it transposes the left
    # operand, [B*H*W, C] -> [C, B*H*W]: a full pass over an activation. Putting the operand
    # with fewer channels on the left makes that pass the smaller of the two (in MobileNetV2's
    # 6x projections, the output gradient rather than the 6x wider input).
    x, kernel = residuals
    grad_x = jnp.einsum("bhwo,co->bhwc", grad, kernel)
    positions = x.shape[0] * x.shape[1] * x.shape[2]
    if (positions >= CPU_KERNEL_MIN_POSITIONS and x.dtype == grad.dtype == jnp.float32
            and cpu_kernels.usable()):
        # Both operands read in place, no transposed copy of either (jaxdet.backends.cpu.kernels).
        grad_kernel = cpu_kernels.matmul_transposed_left(x.reshape(positions, -1),
                                                         grad.reshape(positions, -1))
        return grad_x, grad_kernel.astype(kernel.dtype)
    # Below the kernel's threshold the transposed copy is small, and with x on the left XLA
    # gives the product to YNNPACK; with the output gradient on the left it took the
    # transposed-operand form to Eigen, which ran the SSD heads' kernel gradients (800-2,888
    # positions, 270-1,280 channels) at 20-40 G multiply-adds/s: 168 -> 90 ms of thunk time in
    # MobileNetV2 SSD's train step at batch 8.
    if x.shape[-1] <= grad.shape[-1] or positions < CPU_KERNEL_MIN_POSITIONS:
        grad_kernel = jnp.einsum("bhwc,bhwo->co", x, grad)
    else:
        grad_kernel = jnp.einsum("bhwo,bhwc->oc", grad, x).T
    return grad_x, grad_kernel


_pointwise.defvjp(_pointwise_fwd, _pointwise_bwd)


# A convolution of an image (3 channels; 4 with alpha) is a matmul of its patches: XLA:CPU's
# convolutions ran MobileNetV2's 3x3/2 stem (3 -> 32) at 7 G multiply-adds/s, its matmul of the
# 27-wide patches at ~100. Patches up to 3x3x4 wide (9x the image in memory).
STEM_MAX_CHANNELS = 4
STEM_MAX_PATCH = 36


def _patch_matmul(
    x: jax.Array,
    kernel: jax.Array,
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
) -> jax.Array:
    """Convolution of NHWC ``x`` [B, H, W, C] with an HWIO kernel [kh, kw, C, O] (explicit
    padding) as the matmul of its ``kh * kw * C``-wide patches (tap-major, channel-minor,
    the kernel's own order) with the kernel reshaped to [kh * kw * C, O]."""
    taps = _window_taps(x, kernel.shape[:2], strides, padding, dilation)
    patches = jnp.concatenate(taps, axis=-1)
    return jnp.einsum("bhwk,ko->bhwo", patches, kernel.reshape(-1, kernel.shape[-1]))


def _image_convolution_reference(x, kernel, strides, padding, small_patch):
    if small_patch:
        return _patch_matmul(x, kernel, strides, padding, (1, 1))
    return lax.conv_general_dilated(x, kernel, strides, padding,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _image_convolution(x: jax.Array, kernel: jax.Array, strides: tuple[int, int],
                       padding: tuple[tuple[int, int], ...], small_patch: bool) -> jax.Array:
    """The convolution of an image (float32, <= 4 channels, no dilation) for a train step: the
    kernel gradient of a differentiated call, and its forward pass for ``small_patch``
    kernels, run jaxdet's CPU kernels (``backends.cpu.kernels.image_convolution*``: each pixel's
    patch times the kernel, a tile of pixels at a time). Undifferentiated (predict, export) it
    is :func:`_patch_matmul` for ``small_patch`` kernels and XLA's convolution otherwise."""
    return _image_convolution_reference(x, kernel, strides, padding, small_patch)


def _image_convolution_fwd(x, kernel, strides, padding, small_patch):
    # Up to 3x3 patches the kernel beats XLA's forward pass; a ResNet's 7x7 stem is level with
    # XLA's (Eigen) convolution alone and slower inside a train step, so it keeps XLA's.
    if small_patch:
        out = cpu_kernels.image_convolution(x, kernel, strides, padding)
    else:
        out = _image_convolution_reference(x, kernel, strides, padding, small_patch)
    return out, (x, kernel)


def _image_convolution_bwd(strides, padding, small_patch, residuals, grad):
    x, kernel = residuals
    grad_kernel = cpu_kernels.image_convolution_kernel_gradient(x, grad, kernel.shape[:2],
                                                                 strides, padding)
    # The image's own gradient (rarely wanted: XLA drops it when nothing reads it).
    _, input_vjp = jax.vjp(
        lambda image: _image_convolution_reference(image, kernel, strides, padding,
                                                   small_patch), x)
    return input_vjp(grad)[0], grad_kernel


_image_convolution.defvjp(_image_convolution_fwd, _image_convolution_bwd)


def _explicit_padding(padding, in_hw, kernel_hw, strides, dilation):
    if not isinstance(padding, str):
        return [tuple(p) for p in padding]
    return lax.padtype_to_pads(
        in_hw, [(k - 1) * d + 1 for k, d in zip(kernel_hw, dilation, strict=True)], strides,
        padding,
    )


_NHWC_HWIO = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))


def _is_nhwc_hwio(dimension_numbers, ndim: int) -> bool:
    if ndim != 4 or dimension_numbers is None:
        return False
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return dimension_numbers == _NHWC_HWIO
    return tuple(dimension_numbers) == ("NHWC", "HWIO", "NHWC")


def conv_general_dilated(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    precision=None,
    **kwargs,
) -> jax.Array:
    """Drop-in for ``lax.conv_general_dilated`` (as ``nnx.Conv`` calls it) that routes NHWC
    convolutions on CPU: depthwise to :func:`_shifted_depthwise`, 1x1 to a matmul, an image's
    (<= 4 channels, up to 3x3) to :func:`_patch_matmul`, a large float32 3x3 stride-1 one to
    :func:`jaxdet.backends.cpu.winograd.winograd_conv3x3`; everything else goes to lax.
    """
    channels = lhs.shape[-1]
    on_cpu = jax.default_backend() == "cpu" and trace.rewrites_allowed()
    nhwc = _is_nhwc_hwio(dimension_numbers, lhs.ndim)
    pointwise = (
        on_cpu
        and nhwc
        and feature_group_count == 1
        and tuple(rhs.shape[:2]) == (1, 1)
        and (lhs_dilation is None or all(d == 1 for d in lhs_dilation))
        and (padding == "VALID" or padding == "SAME" or
             all(tuple(p) == (0, 0) for p in padding))
    )
    if pointwise:
        # A strided 1x1 conv only reads every s-th pixel (SAME adds no padding for 1x1).
        sh, sw = window_strides
        if (sh, sw) != (1, 1):
            lhs = lhs[:, ::sh, ::sw]
        out = _pointwise(lhs, rhs[0, 0].astype(lhs.dtype))
        preferred = kwargs.get("preferred_element_type")
        return out.astype(preferred) if preferred is not None else out
    stem = (
        on_cpu
        and nhwc
        and feature_group_count == 1
        and channels <= STEM_MAX_CHANNELS
        and rhs.shape[0] * rhs.shape[1] > 1
        and (rhs.shape[0] * rhs.shape[1] * channels <= STEM_MAX_PATCH
             or cpu_kernels.usable())
        and (lhs_dilation is None or all(d == 1 for d in lhs_dilation))
    )
    if stem:
        dilation = tuple(rhs_dilation or (1, 1))
        pads = _explicit_padding(padding, lhs.shape[1:3], rhs.shape[:2], window_strides,
                                 dilation)
        small_patch = rhs.shape[0] * rhs.shape[1] * channels <= STEM_MAX_PATCH
        if (dilation == (1, 1) and lhs.dtype == rhs.dtype == jnp.float32
                and cpu_kernels.usable()):
            out = _image_convolution(lhs, rhs, tuple(int(s) for s in window_strides),
                                     tuple((int(lo), int(hi)) for lo, hi in pads), small_patch)
        elif small_patch:
            out = _patch_matmul(lhs, rhs.astype(lhs.dtype), tuple(window_strides), pads,
                                dilation)
        else:
            out = lax.conv_general_dilated(lhs, rhs, window_strides, pads,
                                           rhs_dilation=dilation,
                                           dimension_numbers=dimension_numbers,
                                           precision=precision)
        preferred = kwargs.get("preferred_element_type")
        return out.astype(preferred) if preferred is not None else out
    if (
        on_cpu
        and nhwc
        and feature_group_count == 1
        and tuple(window_strides) == (1, 1)
        and (lhs_dilation is None or all(d == 1 for d in lhs_dilation))
        and (rhs_dilation is None or all(d == 1 for d in rhs_dilation))
        and rhs.dtype == lhs.dtype
        and winograd.worth_it(lhs.shape, rhs.shape, lhs.dtype)
        and [tuple(p) for p in _explicit_padding(padding, lhs.shape[1:3], rhs.shape[:2],
                                                 (1, 1), (1, 1))] == [(1, 1), (1, 1)]
    ):
        out = winograd.winograd_conv3x3(lhs, rhs)
        preferred = kwargs.get("preferred_element_type")
        return out.astype(preferred) if preferred is not None else out
    depthwise = (
        feature_group_count > 1
        and feature_group_count == channels
        and rhs.shape[-2] == 1
        and rhs.shape[-1] == channels
        and (lhs_dilation is None or all(d == 1 for d in lhs_dilation))
        and nhwc
        and on_cpu
    )
    if not depthwise:
        return lax.conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
            feature_group_count=feature_group_count, precision=precision, **kwargs,
        )
    dilation = tuple(rhs_dilation or (1, 1))
    pads = _explicit_padding(padding, lhs.shape[1:3], rhs.shape[:2], window_strides, dilation)
    if dilation == (1, 1):
        out = _depthwise_with_fast_grad(lhs, rhs.astype(lhs.dtype),
                                        tuple(int(s) for s in window_strides),
                                        tuple((int(lo), int(hi)) for lo, hi in pads))
    else:
        out = _shifted_depthwise(lhs, rhs.astype(lhs.dtype), tuple(window_strides), pads,
                                 dilation)
    preferred = kwargs.get("preferred_element_type")
    return out.astype(preferred) if preferred is not None else out
