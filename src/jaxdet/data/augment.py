"""Training augment ops: small frozen dataclasses, ``op(sample, rng) -> sample``.

A sample holds ``"image"`` [H, W, 3] of 0..255 values, uint8 or float32: ops that move pixels
(flips, crops, pads, resizes) keep the image's dtype (a resize of a uint8 image is rounded to
whole levels; a flip or a crop is a numpy view, no copy), ops that compute new colours return
float32; ``"boxes"`` float32 [n, 4] NORMALIZED
(ymin, xmin, ymax, xmax), ``"classes"`` int32 [n], ``"is_crowd"`` bool [n], optionally
``"keypoints"`` [n, K, 2] NORMALIZED (y, x) with ``"keypoint_visibility"`` [n, K] and
``"masks"`` uint8 [n, H, W] (instance masks covering the image, see ``data.masks``), plus
passthrough keys (``"image_info"``, ``"image_id"``, ...). Image, boxes, keypoints and masks
always move together (a keypoint that leaves the image becomes unlabelled; masks are moved by
nearest-neighbour sampling and stay binary); boxes that leave a crop are clipped, and dropped
(with their classes / is_crowd) when nothing of them is left. Ops never modify their input.

Semantics follow the TF Object Detection API preprocessor (``random_horizontal_flip``,
``random_scale_crop_and_pad_to_square``, ``ssd_random_crop`` (TF's crop sampling itself),
``random_distort_color``,
and the colour jitter); the TF ops added for pipeline.config live in ``augment_crop.py`` and
``augment_color.py``. :class:`Normalize` goes last.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdet.data import resample
from jaxdet.data.augment_crop import RandomCropImage
from jaxdet.data.geometry import (
    Sample,
    filter_boxes,
    move_keypoints,
    reframe_boxes,
    set_content_size,
)
from jaxdet.data.masks import resample_masks, with_masks


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _check_range(name: str, value, lo: float = 0.0) -> None:
    if len(value) != 2 or not lo <= value[0] <= value[1]:
        raise ValueError(f"{name} must be a (min, max) pair with {lo} <= min <= max, got {value}")


@dataclasses.dataclass(frozen=True)
class TrainCrowdBoxes:
    """Clears ``is_crowd``: crowd, difficult and group-of objects train as ordinary objects
    (the TF OD API's training reads none of those flags), instead of being ignored. Goes
    first, before the ops that crop."""

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        del rng
        if "is_crowd" not in sample:
            return sample
        return {**sample, "is_crowd": np.zeros_like(np.asarray(sample["is_crowd"], bool))}


@dataclasses.dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirrors image, boxes, keypoints and masks left-right with the given probability.

    ``keypoint_flip_permutation`` (TF's): slot ``i`` of a flipped object takes the mirrored
    keypoint of slot ``permutation[i]``; empty keeps the slots. Its length must equal the
    samples' K (checked on the first sample with keypoints: a mismatch raises)."""

    probability: float = 0.5
    keypoint_flip_permutation: tuple[int, ...] = ()

    def __post_init__(self):
        _check_probability("probability", self.probability)
        p = self.keypoint_flip_permutation
        if p and sorted(p) != list(range(len(p))):
            raise ValueError(f"keypoint_flip_permutation {list(p)} is not a permutation of "
                             f"0..{len(p) - 1}")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.probability:
            return sample
        out = with_masks(move_keypoints(sample, (1.0, -1.0), (0.0, 1.0), bounds=None),
                         lambda m: np.ascontiguousarray(m[:, :, ::-1]))
        if "keypoints" in out and self.keypoint_flip_permutation:
            perm = np.asarray(self.keypoint_flip_permutation)
            k = out["keypoints"].shape[1]
            if len(perm) != k:
                raise ValueError(f"keypoint_flip_permutation has {len(perm)} entries but the "
                                 f"samples have {k} keypoint slots")
            out["keypoints"] = out["keypoints"][:, perm]
            out["keypoint_visibility"] = out["keypoint_visibility"][:, perm]
        out["image"] = sample["image"][:, ::-1]  # a view: the resize reads it in place
        b = np.asarray(sample["boxes"], np.float32).reshape(-1, 4)
        out["boxes"] = np.stack([b[:, 0], 1.0 - b[:, 3], b[:, 2], 1.0 - b[:, 1]], axis=1)
        return out


@dataclasses.dataclass(frozen=True)
class RandomScaleCropAndPadToSquare:
    """TF OD API ``random_scale_crop_and_pad_to_square`` (EfficientDet / CenterNet style).

    Resizes so the longer side is ``output_size * scale`` (scale ~ U[scale_min, scale_max]),
    takes a random ``output_size`` square crop where the image is larger, and pads at the
    bottom/right with zeros where it is smaller. Outputs ``output_size x output_size``.
    ``method``: the resize (``tf_bilinear``: TF's ``resize_images``, what the TF OD API does;
    ``bilinear``: antialiased, see ``data.resample``). Only the crop is resampled: the same
    pixels as resizing the whole image, then cropping. As TF, every box not completely
    outside the crop is kept, clipped to it; ``min_visible_fraction`` > 0 also drops those
    with less than that fraction of their area left.
    """

    output_size: int
    scale_min: float = 0.1
    scale_max: float = 2.0
    min_visible_fraction: float = 0.0
    method: str = "bilinear"

    def __post_init__(self):
        if self.output_size < 1:
            raise ValueError(f"output_size must be positive, got {self.output_size}")
        _check_range("(scale_min, scale_max)", (self.scale_min, self.scale_max), lo=1e-6)
        if self.method not in resample.METHODS:
            raise ValueError(f"method {self.method!r}; allowed: {', '.join(resample.METHODS)}")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        image = sample["image"]
        height, width = image.shape[:2]
        size = self.output_size
        scale = rng.uniform(self.scale_min, self.scale_max)
        longest = max(height, width)
        scaled_h = max(1, int(scale * size * height / longest))
        scaled_w = max(1, int(scale * size * width / longest))
        off_y = int(max(0, scaled_h - size) * rng.random())
        off_x = int(max(0, scaled_w - size) * rng.random())
        crop_h, crop_w = min(size, scaled_h - off_y), min(size, scaled_w - off_x)
        rows, cols = resample.axes(self.method, (height, width), (scaled_h, scaled_w))
        dtype = np.uint8 if image.dtype == np.uint8 else np.float32
        canvas = np.zeros((size, size, image.shape[2]), dtype)
        resample.resample(image, rows[off_y:off_y + crop_h], cols[off_x:off_x + crop_w],
                          out=canvas[:crop_h, :crop_w])
        sy, sx = height / scaled_h, width / scaled_w  # input pixels per scaled pixel
        sample = with_masks(sample, lambda m: resample_masks(m, (size, size), (sy, sx),
                                                             (off_y * sy, off_x * sx)))
        out = reframe_boxes(
            sample, src_size=(scaled_h, scaled_w), offset=(-off_y, -off_x),
            window=(0.0, 0.0, float(crop_h), float(crop_w)),
            canvas_size=(size, size), min_visible_fraction=self.min_visible_fraction,
        )
        out["image"] = canvas
        return set_content_size(out, crop_h, crop_w, (height, width))

    @property
    def output_shape(self) -> tuple[int, int]:
        return (self.output_size, self.output_size)


@dataclasses.dataclass(frozen=True)
class SSDRandomCrop:
    """SSD's random crop as the TF OD API's ``ssd_random_crop`` makes it: one of
    ``len(min_object_covered)`` operations picked uniformly, each TF's ``random_crop_image``
    (``augment_crop.RandomCropImage``: TF's own crop sampling and box pruning, boxes clipped
    to the crop) with that operation's ``min_object_covered`` and ``overlap_thresh``; with
    probability ``random_coef`` the image is kept unchanged."""

    min_object_covered: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    aspect_ratio_range: tuple[float, float] = (0.5, 2.0)
    area_range: tuple[float, float] = (0.1, 1.0)
    overlap_thresh: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    random_coef: float = 0.15
    max_attempts: int = 100

    def __post_init__(self):
        if len(self.min_object_covered) != len(self.overlap_thresh) or not self.overlap_thresh:
            raise ValueError(
                "min_object_covered and overlap_thresh must be non-empty and of equal length, "
                f"got {self.min_object_covered} and {self.overlap_thresh}"
            )
        _check_range("aspect_ratio_range", self.aspect_ratio_range, lo=1e-6)
        _check_range("area_range", self.area_range, lo=1e-6)
        if self.area_range[1] > 1.0:
            raise ValueError(f"area_range must lie in (0, 1], got {self.area_range}")
        _check_probability("random_coef", self.random_coef)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        op = int(rng.integers(len(self.min_object_covered)))
        crop = RandomCropImage(
            min_object_covered=self.min_object_covered[op],
            min_aspect_ratio=self.aspect_ratio_range[0],
            max_aspect_ratio=self.aspect_ratio_range[1],
            min_area=self.area_range[0], max_area=self.area_range[1],
            overlap_thresh=self.overlap_thresh[op], clip_boxes=True,
            random_coef=self.random_coef, max_attempts=self.max_attempts)
        return crop(sample, rng)


def _rgb_to_hsv(r: np.ndarray, g: np.ndarray, b: np.ndarray):
    """Planar float32 RGB (any scale) -> hue in [0, 1), saturation in [0, 1], value."""
    maxc = np.maximum(np.maximum(r, g), b)
    minc = np.minimum(np.minimum(r, g), b)
    delta = maxc - minc
    inv = np.divide(1.0, delta, out=np.zeros_like(delta), where=delta > 0)
    s = np.divide(delta, maxc, out=np.zeros_like(delta), where=maxc > 0)
    h = np.where(r == maxc, (g - b) * inv,
                 np.where(g == maxc, 2.0 + (b - r) * inv, 4.0 + (r - g) * inv))
    h /= 6.0
    h %= 1.0
    return h, s, maxc


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> list[np.ndarray]:
    """Inverse of :func:`_rgb_to_hsv` (the closed form f(n) = v - v s clip(min(k, 4 - k)))."""
    h6 = (h % 1.0) * 6.0
    vs = v * s
    planes = []
    for n in (5.0, 3.0, 1.0):
        k = (h6 + n) % 6.0
        k = np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)
        k *= vs
        planes.append(v - k)
    return planes


@dataclasses.dataclass(frozen=True)
class RandomColorJitter:
    """TF OD API ``random_distort_color`` (ordering 0): brightness, saturation, hue, contrast.

    brightness: max delta as a fraction of 255; contrast / saturation: factor ranges;
    hue: max rotation as a fraction of the colour circle. Values stay in 0..255.
    Applied with ``probability``; boxes are untouched.
    """

    brightness: float = 0.125
    contrast: tuple[float, float] = (0.5, 1.5)
    saturation: tuple[float, float] = (0.5, 1.5)
    hue: float = 0.02
    probability: float = 1.0

    def __post_init__(self):
        if self.brightness < 0 or self.hue < 0 or self.hue > 0.5:
            raise ValueError(f"need brightness >= 0 and 0 <= hue <= 0.5, got {self}")
        _check_range("contrast", self.contrast)
        _check_range("saturation", self.saturation)
        _check_probability("probability", self.probability)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.probability:
            return sample
        image = np.asarray(sample["image"], np.float32)
        delta = rng.uniform(-self.brightness, self.brightness) * 255.0
        sat = rng.uniform(*self.saturation)
        hue = rng.uniform(-self.hue, self.hue)
        con = rng.uniform(*self.contrast)
        planes = [image[..., c] + np.float32(delta) for c in range(image.shape[-1])]
        for p in planes:
            np.clip(p, 0.0, 255.0, out=p)
        if hue != 0.0 or sat != 1.0:
            h, s, v = _rgb_to_hsv(*planes)
            s *= sat
            np.clip(s, 0.0, 1.0, out=s)
            h += hue
            planes = _hsv_to_rgb(h, s, v)
        for p in planes:
            mean = p.mean(dtype=np.float64)
            p -= mean
            p *= con
            p += mean
            np.clip(p, 0.0, 255.0, out=p)
        image = np.stack(planes, axis=-1)
        out = dict(sample)
        out["image"] = image.astype(np.float32)
        return out


def scale_and_offset(mean, std) -> tuple[np.ndarray, np.ndarray]:
    """float32 (1 / std, -mean / std) per channel (computed in float64): normalization as one
    multiply-add, ``(2 / 255) * x - 1`` for TF's MobileNets (mean = std = 127.5) exactly."""
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    return (1.0 / std).astype(np.float32), (-mean / std).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Normalize:
    """(image - mean) / std per channel, as ``image * (1 / std) + (-mean / std)`` in float32
    (:func:`scale_and_offset`: the device normalizes the same way); the last op
    (after the resizer). The resizer's padding
    (outside the content size of ``image_info``) is 0 after normalization, as the TF OD API's
    SSD family pads its normalized images; with ``zero_padding=False`` it is normalized like
    the image (black pixels: ``-mean / std``), as TF's CenterNet resizes, then normalizes."""

    mean: tuple[float, float, float] = (123.675, 116.28, 103.53)
    std: tuple[float, float, float] = (58.395, 57.12, 57.375)
    zero_padding: bool = True

    def __post_init__(self):
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std must be positive, got {self.std}")

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Sample:
        out = dict(sample)
        image = np.asarray(sample["image"], np.float32)
        scale, offset = scale_and_offset(self.mean, self.std)
        normalized = (image * scale + offset).astype(np.float32)
        info = sample.get("image_info")
        if info is not None and self.zero_padding:
            content_h, content_w = int(round(float(info[2]))), int(round(float(info[3])))
            normalized[content_h:] = 0.0
            normalized[:, content_w:] = 0.0
        out["image"] = normalized
        return out


__all__ = [
    "Normalize",
    "RandomColorJitter",
    "RandomHorizontalFlip",
    "RandomScaleCropAndPadToSquare",
    "SSDRandomCrop",
    "filter_boxes",
    "scale_and_offset",
]
