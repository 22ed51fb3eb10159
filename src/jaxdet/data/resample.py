"""Separable image resampling on the host: TF's bilinear resize and Pillow's antialiased bilinear.

One function, :func:`resample`, reads an image ``[H, W, C]`` (uint8 or float32, any row and
column strides: a crop or a left-right flip of a decoded image is a numpy view and costs
nothing) and writes ``[h, w, C]`` (uint8 or float32, possibly into a slice of a larger
canvas). What output pixel ``(i, j)`` reads is given by one table per axis, so a resize, a crop
of a resize and a resize of a crop are the same call with sliced tables:

* :class:`LerpAxis` (two taps, float32, TensorFlow's order of operations): made by
  :func:`tf_axis`, TF v1's ``resize_images`` (``tf.compat.v1.image.resize_bilinear``, no
  half-pixel shift, no antialiasing), what the TF Object Detection API resizes with. Bit-equal
  to TF: ``top = tl + (tr - tl) * dx``, ``bottom = bl + (br - bl) * dx``,
  ``out = top + (bottom - top) * dy``.
* :class:`TapsAxis` (k taps, float64 weights and sums): made by :func:`pil_axis`, Pillow's
  ``BILINEAR`` filter (half-pixel centres, antialiased when shrinking), computed as Pillow
  (up to version 12) resamples a float (``"F"``) image: horizontal pass first, each sum in
  double in tap order, stored as float32, then the vertical pass. (Pillow 13 filters the rows
  first in some cases; its results then differ from these by one float32 ulp.)

A uint8 result is the float32 one rounded to the nearest level (ties to even) and clamped to
[0, 255]. The work is done by a small C kernel (``backends/native/resample.c``, compiled once per
machine by ``backends.native_build``; it releases the GIL, so the loader's threads resample in
parallel); without a C compiler (or with ``JAXDET_NATIVE_RESAMPLE=0``) the same arithmetic
runs in numpy, bit for bit, 30-45 times slower (one WARNING per machine says so).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import os
import threading
from pathlib import Path

import numpy as np

from jaxdet.backends import native_build

SOURCE = Path(__file__).resolve().parent.parent / "backends" / "native" / "resample.c"
OPT_OUT = "JAXDET_NATIVE_RESAMPLE"  # "0": the numpy path
_TYPES = {np.dtype(np.uint8): 0, np.dtype(np.float32): 1}


class _Axis:
    """A per-axis table: dataclass fields of per-output-index arrays (first dimension n)."""

    def __len__(self) -> int:
        return len(getattr(self, dataclasses.fields(self)[0].name))

    def __getitem__(self, window: slice):
        """The table of outputs ``window`` (a crop of the resampled image)."""
        return type(self)(*(getattr(self, f.name)[window] for f in dataclasses.fields(self)))


@dataclasses.dataclass(frozen=True)
class LerpAxis(_Axis):
    """Two-tap interpolation along one axis: output index i reads input ``lower[i]`` and
    ``upper[i]`` (int32 [n]) and mixes them as ``a + (b - a) * weight[i]`` (float32 [n])."""

    lower: np.ndarray
    upper: np.ndarray
    weight: np.ndarray


@dataclasses.dataclass(frozen=True)
class TapsAxis(_Axis):
    """k-tap filtering along one axis: output index i sums input ``start[i] + t`` times
    ``weights[i, t]`` for ``t < count[i]`` (int32 [n], int32 [n], float64 [n, k])."""

    start: np.ndarray
    count: np.ndarray
    weights: np.ndarray


def _read_only(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


@functools.lru_cache(maxsize=4096)
def tf_axis(in_size: int, out_size: int) -> LerpAxis:
    """TF v1 bilinear along one axis: output pixel i samples the input at ``i * in / out``
    (float32), between ``floor`` of that and the next pixel (clamped to the last). Cached
    (read-only arrays): a dataset has few distinct sizes."""
    if in_size < 1 or out_size < 1:
        raise ValueError(f"cannot resize {in_size} pixels to {out_size}")
    scale = np.float32(in_size) / np.float32(out_size)
    coord = np.arange(out_size, dtype=np.float32) * scale
    lower = np.floor(coord).astype(np.int32)
    upper = np.minimum(lower + 1, in_size - 1).astype(np.int32)
    weight = (coord - lower.astype(np.float32)).astype(np.float32)
    _read_only(lower, upper, weight)
    return LerpAxis(lower, upper, weight)


@functools.lru_cache(maxsize=4096)
def pil_axis(in_size: int, out_size: int) -> TapsAxis:
    """Pillow's ``BILINEAR`` coefficients along one axis (``precompute_coeffs`` of its
    Resample.c): the triangle filter of support 1, stretched by the reduction factor when
    shrinking, centred on ``(i + 0.5) * in / out``, normalized to sum 1. Cached (read-only
    arrays)."""
    if in_size < 1 or out_size < 1:
        raise ValueError(f"cannot resize {in_size} pixels to {out_size}")
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale
    k = int(math.ceil(support)) * 2 + 1
    start = np.zeros(out_size, np.int32)
    count = np.zeros(out_size, np.int32)
    weights = np.zeros((out_size, k), np.float64)
    inv = 1.0 / filterscale
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        taps = []
        for x in range(hi - lo):
            t = abs((x + lo - center + 0.5) * inv)
            taps.append(1.0 - t if t < 1.0 else 0.0)
        total = 0.0
        for w in taps:
            total += w
        if total != 0.0:
            taps = [w / total for w in taps]
        start[i], count[i] = lo, hi - lo
        weights[i, :len(taps)] = taps
    _read_only(start, count, weights)
    return TapsAxis(start, count, weights)


# --------------------------------------------------------------------------- the kernel

_lock = threading.Lock()
_kernel: dict[str, object] = {}


def _load() -> ctypes.CDLL | None:
    if os.environ.get(OPT_OUT, "1") == "0":
        return None
    with _lock:
        if "lib" not in _kernel:
            _kernel["lib"] = _build()
        return _kernel["lib"]  # type: ignore[return-value]


def _build() -> ctypes.CDLL | None:
    path = native_build.cached_library(
        SOURCE, "resample", native_build.compiler("resample"),
        ["-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC"],
        libraries=["-lm"], key=native_build.cpu_signature())
    if path is None:  # no C compiler, or a failed build: one warning per machine says so
        native_build.report_fallback("resample")
        return None
    lib = ctypes.CDLL(str(path))
    i64, i32p, ptr = ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
    common = [ptr, ctypes.c_int, i64, i64, ctypes.c_int]
    lib.jaxdet_resample_lerp.argtypes = common + [i32p, i32p, ptr, i64, i32p, i32p, ptr, i64,
                                                  ptr, ctypes.c_int, i64, i64]
    lib.jaxdet_resample_taps.argtypes = common + [i32p, i32p, ptr, ctypes.c_int, i64,
                                                  i32p, i32p, ptr, ctypes.c_int, i64,
                                                  ptr, ctypes.c_int, i64, i64]
    lib.jaxdet_resample_lerp.restype = lib.jaxdet_resample_taps.restype = ctypes.c_int
    return lib


def native_available() -> bool:
    """Whether the C kernel is in use (built once per machine on the first call)."""
    return _load() is not None


# --------------------------------------------------------------------------- resample


def _check_image(image: np.ndarray) -> np.ndarray:
    if image.ndim != 3:
        raise ValueError(f"expected an image [H, W, C], got shape {image.shape}")
    if image.dtype not in _TYPES:
        image = image.astype(np.float32)
    if image.strides[2] != image.itemsize:  # channels must be interleaved
        image = np.ascontiguousarray(image)
    return image


def resample(image: np.ndarray, rows: LerpAxis | TapsAxis, cols: LerpAxis | TapsAxis, *,
             out: np.ndarray | None = None, dtype=None) -> np.ndarray:
    """``image`` [H, W, C] (uint8 or float32; other dtypes are read as float32) resampled by
    the axis tables to [len(rows), len(cols), C].

    ``out``: an array of that shape (uint8 or float32, e.g. a slice of a zero canvas) to write
    into and return; else a new array of ``dtype`` (default: the image's, float32 for
    non-uint8 images). Both tables must be of one kind (:class:`LerpAxis` or
    :class:`TapsAxis`)."""
    image = _check_image(np.asarray(image))
    shape = (len(rows), len(cols), image.shape[2])
    if out is None:
        out = np.empty(shape, np.dtype(dtype) if dtype is not None else image.dtype)
    elif out.shape != shape or out.dtype not in _TYPES or out.strides[2] != out.itemsize:
        raise ValueError(f"out must be uint8 or float32 {shape} with interleaved channels, got "
                         f"{out.dtype} {out.shape}")
    if out.dtype not in _TYPES:
        raise ValueError(f"the result must be uint8 or float32, not {out.dtype}")
    if shape[0] == 0 or shape[1] == 0:
        return out
    lerp = isinstance(rows, LerpAxis)
    if lerp != isinstance(cols, LerpAxis):
        raise ValueError("rows and cols must both be LerpAxis or both TapsAxis")
    lib = _load()
    if lib is None:
        values = _lerp_numpy(image, rows, cols) if lerp else _taps_numpy(image, rows, cols)
        out[...] = _to_dtype(values, out.dtype)
        return out
    src = (image.ctypes.data, _TYPES[image.dtype], image.strides[0], image.strides[1],
           image.shape[2])
    dst = (out.ctypes.data, _TYPES[out.dtype], out.strides[0], out.strides[1])
    if lerp:
        ry, rx = _lerp_arrays(rows), _lerp_arrays(cols)
        status = lib.jaxdet_resample_lerp(
            *src, ry[0].ctypes.data, ry[1].ctypes.data, ry[2].ctypes.data, shape[0],
            rx[0].ctypes.data, rx[1].ctypes.data, rx[2].ctypes.data, shape[1], *dst)
    else:
        ty, tx = _taps_arrays(rows), _taps_arrays(cols)
        status = lib.jaxdet_resample_taps(
            *src, ty[0].ctypes.data, ty[1].ctypes.data, ty[2].ctypes.data, ty[2].shape[1],
            shape[0], tx[0].ctypes.data, tx[1].ctypes.data, tx[2].ctypes.data, tx[2].shape[1],
            shape[1], *dst)
    if status != 0:
        raise MemoryError(f"resampling an image to {shape}: out of memory")
    return out


def _lerp_arrays(axis: LerpAxis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.ascontiguousarray(axis.lower, np.int32), np.ascontiguousarray(axis.upper, np.int32),
            np.ascontiguousarray(axis.weight, np.float32))


def _taps_arrays(axis: TapsAxis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.ascontiguousarray(axis.start, np.int32), np.ascontiguousarray(axis.count, np.int32),
            np.ascontiguousarray(axis.weights, np.float64))


def _to_dtype(values: np.ndarray, dtype) -> np.ndarray:
    if np.dtype(dtype) == np.uint8:
        return np.clip(np.rint(values), 0, 255).astype(np.uint8)
    return values.astype(np.float32, copy=False)


def _lerp_numpy(image: np.ndarray, rows: LerpAxis, cols: LerpAxis) -> np.ndarray:
    """The kernel's lerp in numpy (float32, the same order of operations)."""
    needed = np.union1d(rows.lower, rows.upper)
    src = image[needed].astype(np.float32)
    dx = np.asarray(cols.weight, np.float32)[None, :, None]
    left, right = src[:, cols.lower], src[:, cols.upper]
    horizontal = left + (right - left) * dx
    where = np.searchsorted(needed, rows.lower), np.searchsorted(needed, rows.upper)
    top, bottom = horizontal[where[0]], horizontal[where[1]]
    return top + (bottom - top) * np.asarray(rows.weight, np.float32)[:, None, None]


def _taps_pass(image: np.ndarray, axis: TapsAxis, along: int) -> np.ndarray:
    """One k-tap pass of ``image`` (float64) along axis ``along`` (0 rows, 1 columns):
    float64 sums in tap order, returned as float32."""
    size = image.shape[along]
    shape = list(image.shape)
    shape[along] = len(axis)
    total = np.zeros(shape, np.float64)
    for t in range(axis.weights.shape[1]):
        index = np.minimum(axis.start + t, size - 1)
        weight = np.where(t < axis.count, axis.weights[:, t], 0.0)
        if along == 0:
            total += image[index] * weight[:, None, None]
        else:
            total += image[:, index] * weight[None, :, None]
    return total.astype(np.float32)


def _taps_numpy(image: np.ndarray, rows: TapsAxis, cols: TapsAxis) -> np.ndarray:
    """The kernel's k-tap filter in numpy: the horizontal pass, then the vertical one (float64
    sums in tap order, float32 in between)."""
    horizontal = _taps_pass(image.astype(np.float64), cols, 1)
    return _taps_pass(horizontal.astype(np.float64), rows, 0)


# --------------------------------------------------------------------------- resize

METHODS = ("bilinear", "tf_bilinear")


def axes(method: str, in_size: tuple[int, int], out_size: tuple[int, int]
         ) -> tuple[LerpAxis | TapsAxis, LerpAxis | TapsAxis]:
    """(rows, cols) tables of resizing ``in_size`` (h, w) to ``out_size`` with ``method``
    (``bilinear``: Pillow's; ``tf_bilinear``: TF v1's)."""
    if method == "tf_bilinear":
        return tf_axis(in_size[0], out_size[0]), tf_axis(in_size[1], out_size[1])
    if method == "bilinear":
        return pil_axis(in_size[0], out_size[0]), pil_axis(in_size[1], out_size[1])
    raise ValueError(f"resize method {method!r}; allowed: {', '.join(METHODS)}")


def resize(image: np.ndarray, height: int, width: int, method: str, *,
           out: np.ndarray | None = None) -> np.ndarray:
    """``image`` [H, W, C] resized to [height, width, C] with ``method`` (see :func:`axes`),
    as uint8 for a uint8 image (rounded) and float32 otherwise, or written into ``out``.
    A resize to the same size returns the image's own values (exactly, for both methods)."""
    image = np.asarray(image)
    if height < 1 or width < 1:
        raise ValueError(f"cannot resize to {height}x{width}")
    if image.shape[:2] == (height, width) and out is None:
        return image if image.dtype in _TYPES else image.astype(np.float32)
    rows, cols = axes(method, image.shape[:2], (height, width))
    return resample(image, rows, cols, out=out)


__all__ = ["METHODS", "LerpAxis", "TapsAxis", "axes", "native_available", "pil_axis",
           "resample", "resize", "tf_axis"]
