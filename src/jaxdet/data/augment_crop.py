"""TF OD API geometric augment ops (crops and pads): ``op(sample, rng) -> sample``.

Each op follows ``object_detection/core/preprocessor.py`` of the TF Object Detection API, with
the same parameter names and defaults as ``protos/preprocessor.proto``. Samples are as in
:mod:`jaxdet.data.augment`: image [H, W, 3] in 0..255 (each op keeps its dtype, uint8 or
float32; a pad colour is rounded into a uint8 image), NORMALIZED (ymin, xmin, ymax,
xmax) boxes [n, 4], optional keypoints and instance masks [n, H, W] (cropped and padded exactly
as the image, see ``data.masks``); boxes that an op drops take their classes / is_crowd /
keypoints / masks with them. After a
crop or pad ``image_info`` holds (orig_h, orig_w, new_h, new_w): the whole new canvas counts as
image content, and the resizer brings it to the static input size later.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np

from jaxdet.data.geometry import Sample, filter_boxes, move_keypoints, set_content_size
from jaxdet.data.masks import paste_masks, with_masks


def _check_unit(name: str, value: float, *, open_low: bool = False) -> None:
    ok = (0.0 < value <= 1.0) if open_low else (0.0 <= value <= 1.0)
    if not ok:
        raise ValueError(f"{name} must be in {'(0' if open_low else '[0'}, 1], got {value}")


def _dtype(image: np.ndarray) -> type:
    """A new canvas keeps a uint8 image uint8; anything else becomes float32."""
    return np.uint8 if image.dtype == np.uint8 else np.float32


def _boxes(sample: Sample) -> np.ndarray:
    return np.asarray(sample["boxes"], np.float32).reshape(-1, 4)


def _change_frame(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Normalized boxes [n, 4] relative to ``window`` (normalized y0, x0, y1, x1) [4]."""
    y0, x0, y1, x1 = (float(v) for v in window)
    scale = np.array([y1 - y0, x1 - x0, y1 - y0, x1 - x0], np.float32)
    return ((boxes - np.array([y0, x0, y0, x0], np.float32)) / scale).astype(np.float32)


def _keypoints_to_frame(sample: Sample, window, prune: bool = True) -> Sample:
    """Keypoints relative to ``window`` (normalized y0, x0, y1, x1), as :func:`_change_frame`
    does boxes; with ``prune``, those outside the new [0, 1] frame become unlabelled."""
    y0, x0, y1, x1 = (float(v) for v in window)
    sy, sx = 1.0 / (y1 - y0), 1.0 / (x1 - x0)
    return move_keypoints(sample, (sy, sx), (-y0 * sy, -x0 * sx),
                          (0.0, 0.0, 1.0, 1.0) if prune else None)


def _inside_window(boxes: np.ndarray, window) -> np.ndarray:
    """[n] bool: the box is not completely outside ``window`` (TF
    ``prune_completely_outside_window``: touching the edge counts as outside)."""
    y0, x0, y1, x1 = window
    return ~((boxes[:, 0] >= y1) | (boxes[:, 1] >= x1) | (boxes[:, 2] <= y0)
             | (boxes[:, 3] <= x0))


# --------------------------------------------------------------------------- random crop


def _random_crop_size(
    height: int, width: int, area_range: tuple[float, float], aspect: float,
    rng: np.random.Generator,
) -> tuple[int, int] | None:
    """One (crop_h, crop_w) draw as ``tf.image.sample_distorted_bounding_box`` makes it
    (``GenerateRandomCrop``: the height uniform over the integers the area range allows,
    width = round(height * aspect)), or None when rounding leaves the constraints."""
    # round() is np.rint on a float (half to even), without numpy's per-call cost
    min_area = area_range[0] * height * width
    max_area = area_range[1] * height * width
    crop_h = round(math.sqrt(min_area / aspect))
    max_h = round(math.sqrt(max_area / aspect))
    if round(max_h * aspect) > width:
        max_h = int((width + 0.5 - 1e-7) / aspect)
        if round(max_h * aspect) > width:
            max_h -= 1
    max_h = min(max_h, height)
    crop_h = min(crop_h, max_h)
    if crop_h < max_h:
        crop_h += int(rng.integers(0, max_h - crop_h + 1))
    crop_w = round(crop_h * aspect)
    area = crop_w * crop_h
    if area < min_area:
        crop_h += 1
        crop_w = round(crop_h * aspect)
        area = crop_w * crop_h
    if area > max_area:
        crop_h -= 1
        crop_w = round(crop_h * aspect)
        area = crop_w * crop_h
    if (area < min_area or area > max_area or not 0 < crop_w <= width
            or not 0 < crop_h <= height):
        return None
    return crop_h, crop_w


def sample_distorted_bounding_box(
    height: int,
    width: int,
    boxes: np.ndarray,
    *,
    min_object_covered: float,
    aspect_ratio_range: tuple[float, float],
    area_range: tuple[float, float],
    max_attempts: int,
    rng: np.random.Generator,
) -> tuple[int, int, int, int]:
    """A random crop (y0, x0, y1, x1) in pixels, as ``tf.image.sample_distorted_bounding_box``.

    ``boxes`` [n, 4] normalized (clipped to [0, 1]) become integer pixel rectangles; a crop is
    accepted when it covers at least ``min_object_covered`` of the area of at least one box
    of area >= 1 px (the whole image stands in for the boxes when there are none). Aspect
    ratio (w / h) is U(aspect_ratio_range); the area fraction lies in ``area_range``. After
    ``max_attempts`` failures the whole image is returned.
    """
    if len(boxes):
        b = np.clip(boxes, 0.0, 1.0) * np.array([height, width, height, width], np.float32)
        rects = b.astype(np.int64).tolist()  # TF: static_cast<int32>, truncation
    else:
        rects = [[0, 0, height, width]]
    # boxes of area >= 1 px, as plain ints: a few boxes are faster in Python than in numpy
    big = [(r, (r[2] - r[0]) * (r[3] - r[1])) for r in rects]
    big = [(r, a) for r, a in big if a >= 1]
    for _ in range(max_attempts):
        aspect = rng.uniform(*aspect_ratio_range)
        size = _random_crop_size(height, width, area_range, aspect, rng)
        if size is None:
            continue
        crop_h, crop_w = size
        y0 = int(rng.integers(0, height - crop_h)) if crop_h < height else 0
        x0 = int(rng.integers(0, width - crop_w)) if crop_w < width else 0
        y1, x1 = y0 + crop_h, x0 + crop_w
        for (r0, c0, r1, c1), area in big:
            ih = max(min(r1, y1) - max(r0, y0), 0)
            iw = max(min(c1, x1) - max(c0, x0), 0)
            if ih * iw / area >= min_object_covered:
                return y0, x0, y1, x1
    return 0, 0, height, width


@dataclasses.dataclass(frozen=True)
class RandomCropImage:
    """TF ``random_crop_image``: a crop from :func:`sample_distorted_bounding_box`.

    With probability ``random_coef`` the sample is returned unchanged. Otherwise (up to 100
    attempts, else the whole image) a crop with aspect ratio (w / h) in
    [min_aspect_ratio, max_aspect_ratio] and area fraction in [min_area, max_area] that covers
    at least ``min_object_covered`` of some box is cut out. Boxes completely outside the crop,
    or with less than ``overlap_thresh`` of their area inside it, are dropped; the rest move to
    the crop's frame and are clipped to it when ``clip_boxes``.
    """

    min_object_covered: float = 1.0
    min_aspect_ratio: float = 0.75
    max_aspect_ratio: float = 1.33
    min_area: float = 0.1
    max_area: float = 1.0
    overlap_thresh: float = 0.3
    clip_boxes: bool = True
    random_coef: float = 0.0
    max_attempts: int = 100

    def __post_init__(self):
        _check_unit("min_object_covered", self.min_object_covered)
        if not 0.0 < self.min_aspect_ratio <= self.max_aspect_ratio:
            raise ValueError(
                "need 0 < min_aspect_ratio <= max_aspect_ratio, got "
                f"{self.min_aspect_ratio} and {self.max_aspect_ratio}")
        if not 0.0 < self.min_area <= self.max_area <= 1.0:
            raise ValueError(
                f"need 0 < min_area <= max_area <= 1, got {self.min_area} and {self.max_area}")
        _check_unit("overlap_thresh", self.overlap_thresh)
        _check_unit("random_coef", self.random_coef)
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if self.random_coef >= sys.float_info.min and rng.random() <= self.random_coef:
            return sample
        image = sample["image"]
        height, width = image.shape[:2]
        boxes = _boxes(sample)
        y0, x0, y1, x1 = sample_distorted_bounding_box(
            height, width, boxes, min_object_covered=self.min_object_covered,
            aspect_ratio_range=(self.min_aspect_ratio, self.max_aspect_ratio),
            area_range=(self.min_area, self.max_area), max_attempts=self.max_attempts,
            rng=rng,
        )
        window = np.array([y0 / height, x0 / width, y1 / height, x1 / width], np.float32)
        keep = _inside_window(boxes, window)
        # TF prune_non_overlapping_boxes: intersection / box area >= overlap_thresh
        ih = np.minimum(boxes[:, 2], window[2]) - np.maximum(boxes[:, 0], window[0])
        iw = np.minimum(boxes[:, 3], window[3]) - np.maximum(boxes[:, 1], window[1])
        inter = np.clip(ih, 0, None) * np.clip(iw, 0, None)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        # 0/0 = nan: dropped, as in TF (inter <= area, so area 0 means 0/0)
        ratio = np.divide(inter, area, out=np.full(inter.shape, np.nan, np.float32),
                          where=area != 0)
        keep &= ratio >= self.overlap_thresh
        new = _change_frame(boxes, window)
        if self.clip_boxes:
            new = np.clip(new, 0.0, 1.0)
        out = with_masks(_keypoints_to_frame(sample, window),
                         lambda m: m[:, y0:y1, x0:x1].copy())
        out["boxes"] = new
        out = filter_boxes(out, keep)
        out["image"] = image[y0:y1, x0:x1]  # a view: the resize reads it in place
        return set_content_size(out, y1 - y0, x1 - x0, (height, width))


# --------------------------------------------------------------------------- square crop


def crop_border(max_border: int, size: int) -> int:
    """TF ``_get_crop_border``: ``max_border // 2**k`` with the least k >= 0 for which it
    is below ``size / 2`` (at least 1 when max_border >= 1)."""
    i = math.ceil(math.log2(2.0 * max_border / size))
    divisor = int(min(max(2.0 ** i, 1.0), float(max_border)))
    return max_border // divisor


@dataclasses.dataclass(frozen=True)
class RandomSquareCropByScale:
    """TF ``random_square_crop_by_scale`` (CenterNet): a square crop, zero-padded outside.

    The side is ``int(scale * max(H, W))`` with ``scale`` drawn from ``num_scales`` values
    evenly spaced over [scale_min, scale_max]. Its centre is a random integer pixel at least
    ``crop_border(max_border, H)`` (resp. W) from the image edges. Parts outside the image are
    zeros; boxes completely outside the crop are dropped, the rest clipped to it. As in TF the
    last image row and column are never copied (they are zeros in the output).
    """

    max_border: int = 128
    scale_min: float = 0.6
    scale_max: float = 1.3
    num_scales: int = 8

    def __post_init__(self):
        if self.max_border < 1:
            raise ValueError(f"max_border must be >= 1, got {self.max_border}")
        if not 0.0 < self.scale_min <= self.scale_max:
            raise ValueError(f"need 0 < scale_min <= scale_max, got {self.scale_min} and "
                             f"{self.scale_max}")
        if self.num_scales < 1:
            raise ValueError(f"num_scales must be >= 1, got {self.num_scales}")

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        image = sample["image"]
        height, width = image.shape[:2]
        scales = np.linspace(self.scale_min, self.scale_max, self.num_scales, dtype=np.float32)
        scale = scales[int(rng.integers(0, self.num_scales))]
        size = max(1, int(scale * np.float32(max(height, width))))
        h_border, w_border = crop_border(self.max_border, height), crop_border(self.max_border,
                                                                               width)
        yc = int(rng.integers(h_border, height - h_border + 1))
        xc = int(rng.integers(w_border, width - w_border + 1))
        half = size // 2
        crop_y0, crop_x0 = yc - half, xc - half
        y0, x0 = max(crop_y0, 0), max(crop_x0, 0)
        y1, x1 = min(yc + half, height - 1), min(xc + half, width - 1)
        canvas = np.zeros((size, size, image.shape[2]), _dtype(image))
        if y1 > y0 and x1 > x0:
            canvas[y0 - crop_y0:y1 - crop_y0, x0 - crop_x0:x1 - crop_x0] = image[y0:y1, x0:x1]
        window = np.array([crop_y0 / height, crop_x0 / width, (crop_y0 + size) / height,
                           (crop_x0 + size) / width], np.float32)
        new = _change_frame(_boxes(sample), window)
        keep = _inside_window(new, (0.0, 0.0, 1.0, 1.0))
        out = with_masks(_keypoints_to_frame(sample, window), lambda m: paste_masks(
            m, (size, size), (y0, x0, y1, x1), (y0 - crop_y0, x0 - crop_x0)))
        out["boxes"] = np.clip(new, 0.0, 1.0)
        out = filter_boxes(out, keep)
        out["image"] = canvas
        return set_content_size(out, size, size, (height, width))


# --------------------------------------------------------------------------- pads


def _check_pad_color(pad_color: tuple[float, ...]) -> None:
    if len(pad_color) not in (0, 3):
        raise ValueError(f"pad_color must be empty (the image mean) or 3 values (RGB, 0..255), "
                         f"got {pad_color}")


def pad_image(
    sample: Sample,
    min_size: tuple[int, int],
    max_size: tuple[int, int],
    pad_color: tuple[float, ...],
    rng: np.random.Generator,
) -> Sample:
    """TF ``random_pad_image`` core: a canvas of random size in [min_size, max_size) per side
    (each raised to at least the image size; max_size itself when max <= min), the image at a
    random offset in [0, canvas - image), the rest filled with ``pad_color`` (empty: the
    image's mean colour). Boxes move with the image; none are dropped."""
    image = np.asarray(sample["image"])
    height, width = image.shape[:2]
    max_h, max_w = max(max_size[0], height), max(max_size[1], width)
    min_h, min_w = max(min_size[0], height), max(min_size[1], width)
    new_h = int(rng.integers(min_h, max_h)) if max_h > min_h else max_h
    new_w = int(rng.integers(min_w, max_w)) if max_w > min_w else max_w
    off_y = int(rng.integers(0, new_h - height)) if new_h > height else 0
    off_x = int(rng.integers(0, new_w - width)) if new_w > width else 0
    color = (np.asarray(pad_color, np.float32) if len(pad_color)
             else image.mean(axis=(0, 1), dtype=np.float64).astype(np.float32))
    dtype = _dtype(image)
    canvas = np.empty((new_h, new_w, image.shape[2]), dtype)
    canvas[...] = np.clip(np.rint(color), 0, 255) if dtype == np.uint8 else color
    canvas[off_y:off_y + height, off_x:off_x + width] = image
    window = np.array([-off_y / height, -off_x / width, (new_h - off_y) / height,
                       (new_w - off_x) / width], np.float32)
    out = with_masks(_keypoints_to_frame(sample, window, prune=False), lambda m: paste_masks(
        m, (new_h, new_w), (0, 0, height, width), (off_y, off_x)))
    out["boxes"] = _change_frame(_boxes(sample), window)
    out["image"] = canvas
    return set_content_size(out, new_h, new_w, (height, width))


@dataclasses.dataclass(frozen=True)
class RandomPadImage:
    """TF ``random_pad_image``: pads to a random size, the image at a random place.

    The padded height is a random integer in [min_image_height, max_image_height) (defaults:
    the image height and twice it; both raised to at least the image height), likewise the
    width. ``pad_color`` is RGB in 0..255; empty pads with the image's mean colour.
    """

    min_image_height: int | None = None
    min_image_width: int | None = None
    max_image_height: int | None = None
    max_image_width: int | None = None
    pad_color: tuple[float, ...] = ()

    def __post_init__(self):
        for lo, hi in (("min_image_height", "min_image_width"),
                       ("max_image_height", "max_image_width")):
            a, b = getattr(self, lo), getattr(self, hi)
            if (a is None) != (b is None):
                raise ValueError(f"{lo} and {hi} must be both set or both unset, got {a} "
                                 f"and {b}")
            if a is not None and (a < 1 or b < 1):
                raise ValueError(f"{lo} and {hi} must be >= 1, got {a} and {b}")
        _check_pad_color(self.pad_color)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        height, width = sample["image"].shape[:2]
        min_size = ((height, width) if self.min_image_height is None
                    else (self.min_image_height, self.min_image_width))
        max_size = ((2 * height, 2 * width) if self.max_image_height is None
                    else (self.max_image_height, self.max_image_width))
        return pad_image(sample, min_size, max_size, self.pad_color, rng)


@dataclasses.dataclass(frozen=True)
class RandomAbsolutePadImage:
    """TF ``random_absolute_pad_image``: adds U{0 .. max_height_padding - 1} rows and
    U{0 .. max_width_padding - 1} columns of padding, the image at a random offset.

    ``pad_color`` is RGB in 0..255; empty pads with the image's mean colour.
    """

    max_height_padding: int = 1
    max_width_padding: int = 1
    pad_color: tuple[float, ...] = ()

    def __post_init__(self):
        if self.max_height_padding < 0 or self.max_width_padding < 0:
            raise ValueError("max_height_padding and max_width_padding must be >= 0, got "
                             f"{self.max_height_padding} and {self.max_width_padding}")
        _check_pad_color(self.pad_color)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        height, width = sample["image"].shape[:2]
        max_size = (height + self.max_height_padding, width + self.max_width_padding)
        return pad_image(sample, (height, width), max_size, self.pad_color, rng)


__all__ = [
    "RandomAbsolutePadImage",
    "RandomCropImage",
    "RandomPadImage",
    "RandomSquareCropByScale",
    "crop_border",
    "pad_image",
    "sample_distorted_bounding_box",
]
