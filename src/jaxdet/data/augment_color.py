"""TF OD API photometric augment ops: ``op(sample, rng) -> sample``, boxes untouched.

Each op follows ``object_detection/core/preprocessor.py`` of the TF Object Detection API, with
the same parameter names and defaults as ``protos/preprocessor.proto``. Images are [H, W, C]
in 0..255 (see :mod:`jaxdet.data.augment`); the adjustments compute in float32 and return
float32 (a uint8 image is rounded once, when the loader sends it); black patches keep the
dtype. Like TF, only the first three (RGB) channels are changed and every adjustment clips the
result to [0, 255].

The deterministic kernels (:func:`adjust_brightness`, :func:`adjust_contrast`,
:func:`adjust_hue`, :func:`adjust_saturation`) mirror ``tf.image.adjust_*`` applied to
``image / 255`` and scaled back by 255.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdet.data.augment import _hsv_to_rgb, _rgb_to_hsv
from jaxdet.data.geometry import Sample


def _check_min_max(min_name: str, lo: float, max_name: str, hi: float) -> None:
    if not 0.0 <= lo <= hi:
        raise ValueError(f"need 0 <= {min_name} <= {max_name}, got {min_name}={lo}, "
                         f"{max_name}={hi}")


def _rgb_op(image: np.ndarray, fn) -> np.ndarray:
    """Applies ``fn`` to the RGB channels [H, W, 3] of float32 ``image``, keeps the rest."""
    image = np.asarray(image, np.float32)
    rgb = fn(image[..., :3])
    np.clip(rgb, 0.0, 255.0, out=rgb)
    if image.shape[-1] == 3:
        return rgb.astype(np.float32, copy=False)
    return np.concatenate([rgb, image[..., 3:]], axis=-1).astype(np.float32, copy=False)


def adjust_brightness(image: np.ndarray, delta: float) -> np.ndarray:
    """``image + 255 * delta``, clipped to [0, 255] ([H, W, C] -> [H, W, C]).

    TF: ``tf.image.adjust_brightness(image / 255, delta) * 255``.
    """
    return _rgb_op(image, lambda rgb: rgb + np.float32(255.0 * delta))


def adjust_contrast(image: np.ndarray, factor: float) -> np.ndarray:
    """Per channel ``(x - mean) * factor + mean`` with the mean over H and W; clipped.

    TF: ``tf.image.adjust_contrast(image / 255, factor) * 255``.
    """

    def fn(rgb: np.ndarray) -> np.ndarray:
        mean = np.array([rgb[..., c].mean(dtype=np.float64) for c in range(rgb.shape[-1])],
                        np.float32)
        out = rgb * np.float32(factor)
        out += mean * np.float32(1.0 - factor)
        return out

    return _rgb_op(image, fn)


def _hsv_op(image: np.ndarray, hue_delta: float = 0.0, sat_factor: float = 1.0) -> np.ndarray:
    def fn(rgb: np.ndarray) -> np.ndarray:
        h, s, v = _rgb_to_hsv(rgb[..., 0], rgb[..., 1], rgb[..., 2])
        if sat_factor != 1.0:
            s = np.clip(s * np.float32(sat_factor), 0.0, 1.0)
        if hue_delta != 0.0:
            h = (h + np.float32(hue_delta)) % 1.0
        return np.stack(_hsv_to_rgb(h, s, v), axis=-1)

    return _rgb_op(image, fn)


def adjust_hue(image: np.ndarray, delta: float) -> np.ndarray:
    """Rotates hue by ``delta`` (fractions of the colour circle, wrapped) in HSV space.

    TF: ``tf.image.adjust_hue(image / 255, delta) * 255``; grey pixels are unchanged.
    """
    return _hsv_op(image, hue_delta=delta)


def adjust_saturation(image: np.ndarray, factor: float) -> np.ndarray:
    """Scales HSV saturation by ``factor`` (clipped to [0, 1]); hue and value are kept.

    TF: ``tf.image.adjust_saturation(image / 255, factor) * 255``.
    """
    return _hsv_op(image, sat_factor=factor)


def _with_image(sample: Sample, image: np.ndarray) -> Sample:
    out = dict(sample)
    out["image"] = image
    return out


@dataclasses.dataclass(frozen=True)
class RandomAdjustBrightness:
    """TF ``random_adjust_brightness``: adds ``255 * U(-max_delta, max_delta)``, clips."""

    max_delta: float = 0.2

    def __post_init__(self):
        if not 0.0 <= self.max_delta <= 1.0:
            raise ValueError(f"max_delta must be in [0, 1], got {self.max_delta}")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        delta = rng.uniform(-self.max_delta, self.max_delta)
        return _with_image(sample, adjust_brightness(sample["image"], delta))


@dataclasses.dataclass(frozen=True)
class RandomAdjustContrast:
    """TF ``random_adjust_contrast``: :func:`adjust_contrast` by U(min_delta, max_delta)."""

    min_delta: float = 0.8
    max_delta: float = 1.25

    def __post_init__(self):
        _check_min_max("min_delta", self.min_delta, "max_delta", self.max_delta)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        factor = rng.uniform(self.min_delta, self.max_delta)
        return _with_image(sample, adjust_contrast(sample["image"], factor))


@dataclasses.dataclass(frozen=True)
class RandomAdjustHue:
    """TF ``random_adjust_hue``: :func:`adjust_hue` by U(-max_delta, max_delta)."""

    max_delta: float = 0.02

    def __post_init__(self):
        if not 0.0 <= self.max_delta <= 1.0:
            raise ValueError(f"max_delta must be in [0, 1] (hue units), got {self.max_delta}")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        delta = rng.uniform(-self.max_delta, self.max_delta)
        return _with_image(sample, adjust_hue(sample["image"], delta))


@dataclasses.dataclass(frozen=True)
class RandomAdjustSaturation:
    """TF ``random_adjust_saturation``: :func:`adjust_saturation` by U(min_delta, max_delta)."""

    min_delta: float = 0.8
    max_delta: float = 1.25

    def __post_init__(self):
        _check_min_max("min_delta", self.min_delta, "max_delta", self.max_delta)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        factor = rng.uniform(self.min_delta, self.max_delta)
        return _with_image(sample, adjust_saturation(sample["image"], factor))


@dataclasses.dataclass(frozen=True)
class RandomDistortColor:
    """TF ``random_distort_color``: four random adjustments in a fixed order.

    ``color_ordering`` 0: brightness (max_delta 32/255), saturation (0.5, 1.5), hue (0.2),
    contrast (0.5, 1.5); 1: brightness, contrast, saturation, hue (same ranges). Each step
    clips to [0, 255].
    """

    color_ordering: int = 0

    def __post_init__(self):
        if self.color_ordering not in (0, 1):
            raise ValueError(f"color_ordering must be 0 or 1, got {self.color_ordering}")

    def steps(self) -> tuple:
        brightness = RandomAdjustBrightness(max_delta=32.0 / 255.0)
        saturation = RandomAdjustSaturation(min_delta=0.5, max_delta=1.5)
        hue = RandomAdjustHue(max_delta=0.2)
        contrast = RandomAdjustContrast(min_delta=0.5, max_delta=1.5)
        if self.color_ordering == 0:
            return (brightness, saturation, hue, contrast)
        return (brightness, contrast, saturation, hue)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        for step in self.steps():
            sample = step(sample, rng)
        return sample


@dataclasses.dataclass(frozen=True)
class RandomBlackPatches:
    """TF ``random_black_patches``: up to ``max_black_patches`` black squares.

    Each of the ``max_black_patches`` tries adds, with ``probability``, a square of side
    ``int(size_to_image_ratio * min(H, W))`` whose top-left corner is at
    ``int(U(0, 1 - size_to_image_ratio) * (H, W))``. Pixels under it (RGB) become 0; boxes
    are kept as they are.
    """

    max_black_patches: int = 10
    probability: float = 0.5
    size_to_image_ratio: float = 0.1

    def __post_init__(self):
        if self.max_black_patches < 0:
            raise ValueError(f"max_black_patches must be >= 0, got {self.max_black_patches}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {self.probability}")
        if not 0.0 < self.size_to_image_ratio <= 1.0:
            raise ValueError(
                f"size_to_image_ratio must be in (0, 1], got {self.size_to_image_ratio}")

    def patches(self, height: int, width: int, rng: np.random.Generator) -> list[tuple]:
        """The (y0, x0, y1, x1) pixel squares one call blacks out."""
        size = int(min(height, width) * self.size_to_image_ratio)
        out = []
        for _ in range(self.max_black_patches):
            add = rng.random() <= self.probability
            ny = rng.uniform(0.0, 1.0 - self.size_to_image_ratio)
            nx = rng.uniform(0.0, 1.0 - self.size_to_image_ratio)
            if add and size > 0:
                y0, x0 = int(ny * height), int(nx * width)
                out.append((y0, x0, y0 + size, x0 + size))
        return out

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        image = np.array(sample["image"])  # a copy, in the image's dtype
        for y0, x0, y1, x1 in self.patches(image.shape[0], image.shape[1], rng):
            image[y0:y1, x0:x1, :3] = 0.0
        return _with_image(sample, image)


__all__ = [
    "RandomAdjustBrightness",
    "RandomAdjustContrast",
    "RandomAdjustHue",
    "RandomAdjustSaturation",
    "RandomBlackPatches",
    "RandomDistortColor",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
]
