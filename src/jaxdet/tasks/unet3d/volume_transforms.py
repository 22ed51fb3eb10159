"""Preprocessing and augmentation of 3D volumes (numpy / scipy, host side).

Shapes: image f32[D, H, W, C] (channels last), label i32[D, H, W] (class per voxel, 0 =
background); spacing is the voxel size (mm) along (D, H, W). Random functions take a
``np.random.Generator`` and draw a fixed sequence of numbers from it, so the same generator
state gives the same result.

The defaults follow the MLPerf 3D U-Net (KiTS19) reference: resample to (1.6, 1.2, 1.2) mm,
clip to (-79, 304), normalize (x - 101) / 76.9, balanced crop (foreground oversampling 0.4),
flips (p 0.33 per axis), brightness x [0.7, 1.3] (p 0.1) and Gaussian noise (std up to 0.1,
p 0.1). Rotation / scaling (:func:`random_rotate_scale`) is off in :class:`PatchAugment`
by default, as in MLPerf.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

Spacing = tuple[float, float, float]


# ----------------------------------------------------------------------------- preprocessing


def _resample(array: np.ndarray, new_shape: tuple[int, int, int], order: int) -> np.ndarray:
    """array [D, H, W] -> new_shape, voxel centres aligned (the volume's extent is kept)."""
    old = np.asarray(array.shape, np.float64)
    step = old / np.asarray(new_shape, np.float64)  # input voxels per output voxel
    # output voxel o (centre o + 0.5) samples input coordinate (o + 0.5) * step - 0.5
    offset = 0.5 * step - 0.5
    return ndimage.affine_transform(array, step, offset=offset, output_shape=new_shape,
                                    order=order, mode="nearest", prefilter=False)


def resample_to_spacing(image: np.ndarray, label: np.ndarray | None, spacing: Sequence[float],
                        target_spacing: Sequence[float]
                        ) -> tuple[np.ndarray, np.ndarray | None, Spacing]:
    """Resample a volume to ``target_spacing``.

    Args:
      image: f32[D, H, W, C] (or [D, H, W]); trilinear (order 1) per channel.
      label: i32[D, H, W] or None; nearest neighbour.
      spacing, target_spacing: voxel sizes along (D, H, W).
    Returns:
      (image f32[D', H', W', C], label i32[D', H', W'] or None, new spacing) with
      D' = round(D * spacing_d / target_d) (at least 1), etc.; the new spacing is
      spacing * D / D' (the physical extent is kept exactly, so it can differ from the
      target by the rounding). Voxel centres are aligned: a block of labels keeps its extent
      in mm. Equal spacings return the inputs unchanged.
    """
    spacing = tuple(float(s) for s in spacing)
    target = tuple(float(s) for s in target_spacing)
    if np.allclose(spacing, target, rtol=1e-6, atol=0.0):
        return image, label, spacing  # type: ignore[return-value]
    shape = image.shape[:3]
    new_shape = tuple(max(1, int(round(n * s / t))) for n, s, t in zip(shape, spacing, target,
                                                                        strict=True))
    new_spacing = tuple(s * n / m for s, n, m in zip(spacing, shape, new_shape, strict=True))
    if new_shape == shape:
        return image, label, new_spacing  # type: ignore[return-value]
    src = np.asarray(image, np.float32)
    if src.ndim == 3:
        out = _resample(src, new_shape, 1)
    else:
        out = np.stack([_resample(np.ascontiguousarray(src[..., c]), new_shape, 1)
                        for c in range(src.shape[-1])], axis=-1)
    new_label = None if label is None else _resample(np.asarray(label, np.int32), new_shape, 0)
    return out.astype(np.float32, copy=False), new_label, new_spacing  # type: ignore[return-value]


def clip_and_normalize(image: np.ndarray, *, clip: tuple[float, float] | None = None,
                       mean: float | None = None, std: float | None = None) -> np.ndarray:
    """f32[D, H, W, C] -> f32[D, H, W, C]: clipped to ``clip`` = (lo, hi) (if given), then
    (x - mean) / std. A ``mean`` / ``std`` left None is the clipped volume's own, per channel
    (a per-volume z-score when both are None; a constant channel gets std 1)."""
    x = np.asarray(image, np.float32)
    if clip is not None:
        lo, hi = clip
        if lo > hi:
            raise ValueError(f"clip range must have lo <= hi, got {clip}")
        x = np.clip(x, lo, hi)
    axes = tuple(range(min(3, x.ndim)))
    m = np.float32(mean) if mean is not None else x.mean(axis=axes, keepdims=True,
                                                          dtype=np.float64).astype(np.float32)
    if std is not None:
        if std <= 0:
            raise ValueError(f"std must be > 0, got {std}")
        s = np.float32(std)
    else:
        s = np.sqrt(np.mean(np.square(x - m, dtype=np.float64), axis=axes, keepdims=True))
        s = np.where(s > 1e-8, s, 1.0).astype(np.float32)
    return ((x - m) / s).astype(np.float32, copy=False)


def prepare_volume(image: np.ndarray, label: np.ndarray | None, spacing: Sequence[float], *,
                   target_spacing: Sequence[float] | None = None,
                   clip: tuple[float, float] | None = None, mean: float | None = None,
                   std: float | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """A volume as the network reads it: ``image`` f32[D, H, W, C] with voxel size
    ``spacing`` resampled to ``target_spacing`` (if given; ``label`` i32[D, H, W] too,
    nearest), then clipped and normalized (:func:`clip_and_normalize`). Returns (image
    f32[D', H', W', C] contiguous, label or None)."""
    if target_spacing is not None:
        image, label, _ = resample_to_spacing(image, label, spacing, target_spacing)
    image = clip_and_normalize(image, clip=clip, mean=mean, std=std)
    return np.ascontiguousarray(image, np.float32), label


# ----------------------------------------------------------------------------- patches


def foreground_voxels(label: np.ndarray) -> dict[int, np.ndarray]:
    """i32[D, H, W] -> {class k > 0 present: int64[n_k] flat indices of its voxels}, classes
    ascending. Precompute it once per cached volume for :func:`sample_patch`."""
    flat = np.asarray(label).reshape(-1)
    idx = np.flatnonzero(flat > 0)
    if idx.size == 0:
        return {}
    values = flat[idx]
    order = np.argsort(values, kind="stable")
    values, idx = values[order], idx[order]
    classes, starts = np.unique(values, return_index=True)
    bounds = [*starts[1:], len(values)]
    return {int(k): idx[s:e] for k, s, e in zip(classes, starts, bounds, strict=True)}


def _pad_to(image: np.ndarray, label: np.ndarray, patch: tuple[int, int, int]
            ) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int]]:
    """Pad (centred) to at least ``patch`` per axis: image with its minimum, label with 0.
    Returns the padded arrays and the padding added before each axis."""
    shape = image.shape[:3]
    before = tuple(max(0, p - s) // 2 for s, p in zip(shape, patch, strict=True))
    if not any(p > s for s, p in zip(shape, patch, strict=True)):
        return image, label, (0, 0, 0)
    widths = [(b, max(0, p - s) - b) for s, p, b in zip(shape, patch, before, strict=True)]
    fill = float(image.min()) if image.size else 0.0
    image = np.pad(image, widths + [(0, 0)] * (image.ndim - 3), constant_values=fill)
    label = np.pad(label, widths, constant_values=0)
    return image, label, before  # type: ignore[return-value]


def sample_patch(image: np.ndarray, label: np.ndarray, patch_size: Sequence[int],
                 rng: np.random.Generator, *, foreground_probability: float = 0.4,
                 foreground: Mapping[int, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """A random patch of ``patch_size`` (balanced crop).

    Args:
      image: f32[D, H, W, C]; label: i32[D, H, W].
      patch_size: (pD, pH, pW).
      rng: random numbers (one draw decides foreground vs uniform, then the position).
      foreground_probability: with this probability the patch is placed around a foreground
        voxel (label > 0): a class present in the volume is picked uniformly, then one of its
        voxels, then the patch is centred on it up to a random offset of a quarter patch per
        axis, clamped inside the volume; the voxel is always inside the patch. A volume with
        no foreground falls back to a uniform position.
      foreground: :func:`foreground_voxels` of ``label`` if already computed (saves a pass).
    Returns:
      (image f32[pD, pH, pW, C], label i32[pD, pH, pW]) (copies). A volume smaller than the
      patch on a side is first padded there (centred) with the image's minimum / label 0.
    """
    patch = tuple(int(p) for p in patch_size)
    if len(patch) != 3 or min(patch) < 1:
        raise ValueError(f"patch_size must be 3 positive ints, got {patch_size}")
    if image.shape[:3] != label.shape:
        raise ValueError(f"image {image.shape} and label {label.shape} differ in (D, H, W)")
    wants_fg = rng.random() < foreground_probability
    image, label, before = _pad_to(image, label, patch)
    shape = image.shape[:3]
    fg: Mapping[int, np.ndarray] = {}
    if wants_fg:
        if foreground is None or any(before):  # given indices are of the unpadded volume
            fg = foreground_voxels(label)
        else:
            fg = {k: v for k, v in foreground.items() if len(v)}
    if fg:
        classes = sorted(fg)
        voxels = fg[classes[int(rng.integers(len(classes)))]]
        centre = np.unravel_index(int(voxels[int(rng.integers(len(voxels)))]), shape)
        start = []
        for c, p, s in zip(centre, patch, shape, strict=True):
            jitter = p // 4
            offset = int(rng.integers(-jitter, jitter + 1))
            start.append(min(max(int(c) - p // 2 + offset, 0), s - p))
    else:
        start = [int(rng.integers(0, s - p + 1)) for s, p in zip(shape, patch, strict=True)]
    sl = tuple(slice(b, b + p) for b, p in zip(start, patch, strict=True))
    return (np.array(image[sl], np.float32, copy=True),
            np.array(label[sl], np.int32, copy=True))


# ----------------------------------------------------------------------------- augmentation


def random_flip(image: np.ndarray, label: np.ndarray, rng: np.random.Generator, *,
                probability: float = 0.33) -> tuple[np.ndarray, np.ndarray]:
    """Flip image f32[D, H, W, C] and label i32[D, H, W] together along each of D, H, W with
    ``probability`` each (three draws). Returns contiguous arrays of the same shapes."""
    for axis in range(3):
        if rng.random() < probability:
            image = np.flip(image, axis=axis)
            label = np.flip(label, axis=axis)
    return np.ascontiguousarray(image), np.ascontiguousarray(label)


def rotate_scale(image: np.ndarray, label: np.ndarray, *, axis: int, degrees: float,
                 scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Rotate by ``degrees`` about ``axis`` (0 = D, 1 = H, 2 = W) and scale by ``scale``
    (> 1 enlarges the content), both about the volume's centre.

    A voxel of content at p moves to c + scale * R (p - c), c the centre ((n - 1) / 2), R the
    rotation by ``degrees`` in the plane of the two other axes (a, b), a < b: from a towards
    b (90 degrees about D takes the H axis onto the W axis). Image f32[D, H, W, C] is
    interpolated linearly with edge voxels extended, label i32[D, H, W] by nearest neighbour
    (its values stay a subset of the input's). Same shapes out. Angles are in voxel space.
    """
    if axis not in (0, 1, 2):
        raise ValueError(f"axis must be 0, 1 or 2, got {axis}")
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    a, b = (i for i in range(3) if i != axis)
    theta = math.radians(degrees)
    cos, sin = math.cos(theta), math.sin(theta)
    rot = np.eye(3)
    rot[a, a], rot[a, b], rot[b, a], rot[b, b] = cos, -sin, sin, cos
    # output o samples input p = c + R^T (o - c) / scale
    matrix = rot.T / scale
    centre = (np.asarray(label.shape, np.float64) - 1.0) / 2.0
    offset = centre - matrix @ centre

    def move(x: np.ndarray, order: int) -> np.ndarray:
        return ndimage.affine_transform(x, matrix, offset=offset, order=order, mode="nearest",
                                        prefilter=False)

    src = np.asarray(image, np.float32)
    if src.ndim == 3:
        out = move(src, 1)
    else:
        out = np.stack([move(np.ascontiguousarray(src[..., c]), 1)
                        for c in range(src.shape[-1])], axis=-1)
    return out, move(np.asarray(label, np.int32), 0)


def random_rotate_scale(image: np.ndarray, label: np.ndarray, rng: np.random.Generator, *,
                        max_degrees: float = 15.0, scale_range: tuple[float, float] = (1.0, 1.0),
                        probability: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """With ``probability``: :func:`rotate_scale` about a random axis (of D, H, W) by an angle
    uniform in [-max_degrees, max_degrees] and a scale uniform in ``scale_range``. Image
    f32[D, H, W, C] and label i32[D, H, W] move together; shapes are kept."""
    if rng.random() >= probability:
        return image, label
    axis = int(rng.integers(3))
    degrees = float(rng.uniform(-max_degrees, max_degrees))
    scale = float(rng.uniform(*scale_range))
    return rotate_scale(image, label, axis=axis, degrees=degrees, scale=scale)


def random_brightness(image: np.ndarray, rng: np.random.Generator, *,
                      scale_range: tuple[float, float] = (0.7, 1.3),
                      probability: float = 0.1) -> np.ndarray:
    """With ``probability``, f32[D, H, W, C] times a factor uniform in ``scale_range``."""
    if rng.random() >= probability:
        return image
    return (image * np.float32(rng.uniform(*scale_range))).astype(np.float32, copy=False)


def random_noise(image: np.ndarray, rng: np.random.Generator, *, max_std: float = 0.1,
                 probability: float = 0.1) -> np.ndarray:
    """With ``probability``, f32[D, H, W, C] plus Gaussian noise of a standard deviation
    uniform in [0, max_std]."""
    if rng.random() >= probability:
        return image
    std = float(rng.uniform(0.0, max_std))
    noise = rng.normal(0.0, std, size=image.shape).astype(np.float32)
    return (image + noise).astype(np.float32, copy=False)


@dataclass(frozen=True)
class PatchAugment:
    """Balanced patch sampling plus augmentation of the patch (MLPerf 3D U-Net defaults).

    Calling it: ``(image f32[D, H, W, C], label i32[D, H, W], patch_size, rng)`` ->
    ``(image f32[pD, pH, pW, C], label i32[pD, pH, pW])``: :func:`sample_patch`, then on the
    patch only (so the cost does not grow with the volume) :func:`random_rotate_scale`,
    :func:`random_flip`, :func:`random_brightness`, :func:`random_noise`, in that order.
    """

    foreground_probability: float = 0.4
    flip_probability: float = 0.33
    rotate_degrees: float = 0.0
    scale_range: tuple[float, float] = (1.0, 1.0)
    rotate_probability: float = 0.0
    brightness_range: tuple[float, float] = (0.7, 1.3)
    brightness_probability: float = 0.1
    noise_std: float = 0.1
    noise_probability: float = 0.1

    def __post_init__(self) -> None:
        for name in ("foreground_probability", "flip_probability", "rotate_probability",
                     "brightness_probability", "noise_probability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PatchAugment.{name} must be in [0, 1], got {value}")
        for name in ("scale_range", "brightness_range"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise ValueError(f"PatchAugment.{name} must be (lo, hi) with 0 < lo <= hi, "
                                 f"got {(lo, hi)}")
        if self.rotate_degrees < 0 or self.noise_std < 0:
            raise ValueError("PatchAugment.rotate_degrees and noise_std must be >= 0")

    def __call__(self, image: np.ndarray, label: np.ndarray, patch_size: Sequence[int],
                 rng: np.random.Generator, *,
                 foreground: Mapping[int, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        image, label = sample_patch(image, label, patch_size, rng,
                                    foreground_probability=self.foreground_probability,
                                    foreground=foreground)
        image, label = random_rotate_scale(image, label, rng, max_degrees=self.rotate_degrees,
                                           scale_range=self.scale_range,
                                           probability=self.rotate_probability)
        image, label = random_flip(image, label, rng, probability=self.flip_probability)
        image = random_brightness(image, rng, scale_range=self.brightness_range,
                                  probability=self.brightness_probability)
        image = random_noise(image, rng, max_std=self.noise_std,
                             probability=self.noise_probability)
        return np.asarray(image, np.float32), np.asarray(label, np.int32)


__all__ = ["PatchAugment", "Spacing", "clip_and_normalize", "foreground_voxels",
           "prepare_volume", "random_brightness", "random_flip", "random_noise",
           "random_rotate_scale", "resample_to_spacing", "rotate_scale", "sample_patch"]
