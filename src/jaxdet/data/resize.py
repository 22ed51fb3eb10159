"""Resizers to a static shape (TF OD API ``fixed_shape_resizer`` / ``keep_aspect_ratio_resizer``).

Each ``resizer(sample, rng=None) -> sample`` resizes the image, normalizes the boxes to the
output canvas and records ``"image_info"`` float32 [4] = (orig_h, orig_w, content_h,
content_w): ``orig`` is the decoded image's size (kept from an incoming image_info), and
``content`` is the extent of the resized image inside the canvas (padding is bottom/right).
A uint8 image stays uint8 (the resize rounds), any other becomes float32; the resize writes
straight into the padded canvas.
A detection normalized to the canvas maps back to original pixels by
``box * canvas_size / content_size * orig_size``.

Instance masks (``"masks"`` [n, h, w], covering the image) are resampled straight onto the
static mask grid ``(canvas_h // mask_stride, canvas_w // mask_stride)``: mask pixel (i, j) is
the nearest input pixel to the centre of the canvas block it covers (``data.masks``); padding
is 0. One resampling from the augmented image to the strided grid, so full-resolution masks of
the canvas never exist (100 instances on a 1024 x 1024 canvas at stride 4: 6.6 MB, not 105 MB).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdet.data import resample
from jaxdet.data.geometry import RESIZE_METHODS, Sample, reframe_boxes, set_content_size
from jaxdet.data.masks import resample_masks, with_masks


def _check_method(method: str) -> None:
    if method not in RESIZE_METHODS:
        raise ValueError(f"resize method {method!r}; allowed: {', '.join(RESIZE_METHODS)}")


def _check_mask_stride(stride: int, height: int, width: int) -> None:
    if stride < 1 or height // stride < 1 or width // stride < 1:
        raise ValueError(f"mask_stride must be in 1..{min(height, width)} for a {height}x{width} "
                         f"canvas, got {stride}")


def _resample_to_grid(sample: Sample, canvas: tuple[int, int], content: tuple[int, int],
                      stride: int) -> Sample:
    """``sample`` with its masks (covering its image) resampled onto the strided grid of a
    canvas whose top-left ``content`` (h, w) holds the resized image."""
    height, width = sample["image"].shape[:2]
    scale = (stride * height / content[0], stride * width / content[1])
    grid = (canvas[0] // stride, canvas[1] // stride)
    return with_masks(sample, lambda m: resample_masks(m, grid, scale, (0.0, 0.0)))


@dataclasses.dataclass(frozen=True)
class FixedShapeResizer:
    """Resizes to exactly ``height x width`` (aspect ratio not kept; boxes stay normalized);
    masks go to ``(height // mask_stride, width // mask_stride)``."""

    height: int
    width: int
    method: str = "bilinear"  # a key of geometry.RESIZE_METHODS
    mask_stride: int = 1

    def __post_init__(self):
        if self.height < 1 or self.width < 1:
            raise ValueError(f"height and width must be positive, got {self.height}x{self.width}")
        _check_method(self.method)
        _check_mask_stride(self.mask_stride, self.height, self.width)

    @property
    def output_size(self) -> tuple[int, int]:
        return (self.height, self.width)

    def box_scale(self, height: int, width: int) -> tuple[float, float]:
        """(sy, sx): an original-pixel box of a height x width image times these is in the
        resized canvas's pixels (no augmentation)."""
        return self.height / height, self.width / width

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Sample:
        image = sample["image"]
        in_size = image.shape[:2]
        size = (self.height, self.width)
        out = dict(_resample_to_grid(sample, size, size, self.mask_stride))
        out["image"] = RESIZE_METHODS[self.method](image, self.height, self.width)
        out["boxes"] = np.asarray(sample["boxes"], np.float32).reshape(-1, 4)
        return set_content_size(out, self.height, self.width, in_size)


def keep_aspect_ratio_size(
    height: int, width: int, min_dimension: int, max_dimension: int
) -> tuple[int, int]:
    """TF OD API ``_compute_new_static_size``: shorter side -> min_dimension unless the
    longer side would then exceed max_dimension, in which case longer side -> max_dimension."""
    scale = min_dimension / min(height, width)
    large = (int(round(height * scale)), int(round(width * scale)))
    if max(large) <= max_dimension:
        return max(1, large[0]), max(1, large[1])
    scale = max_dimension / max(height, width)
    return max(1, int(round(height * scale))), max(1, int(round(width * scale)))


@dataclasses.dataclass(frozen=True)
class KeepAspectRatioResizer:
    """Keeps the aspect ratio; with ``pad_to_max_dimension`` pads (zeros, bottom/right) to a
    static ``max_dimension x max_dimension`` canvas and normalizes boxes to that canvas; masks
    go to the canvas's strided grid (``max_dimension // mask_stride`` square)."""

    min_dimension: int
    max_dimension: int
    pad_to_max_dimension: bool = True
    method: str = "bilinear"  # a key of geometry.RESIZE_METHODS
    mask_stride: int = 1

    def __post_init__(self):
        if not 0 < self.min_dimension <= self.max_dimension:
            raise ValueError(
                "need 0 < min_dimension <= max_dimension, got "
                f"{self.min_dimension} and {self.max_dimension}"
            )
        _check_method(self.method)
        _check_mask_stride(self.mask_stride, self.max_dimension, self.max_dimension)

    @property
    def output_size(self) -> tuple[int, int] | None:
        """The static (H, W); None when not padding (the shape then varies per image)."""
        if not self.pad_to_max_dimension:
            return None
        return (self.max_dimension, self.max_dimension)

    def box_scale(self, height: int, width: int) -> tuple[float, float]:
        """(sy, sx): an original-pixel box of a height x width image times these is in the
        resized canvas's pixels (padding is bottom/right, so no offset)."""
        new_h, new_w = keep_aspect_ratio_size(height, width, self.min_dimension,
                                              self.max_dimension)
        return new_h / height, new_w / width

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Sample:
        image = sample["image"]
        height, width = image.shape[:2]
        new_h, new_w = keep_aspect_ratio_size(height, width, self.min_dimension,
                                              self.max_dimension)
        if self.pad_to_max_dimension:
            canvas_h = canvas_w = self.max_dimension
            dtype = np.uint8 if image.dtype == np.uint8 else np.float32
            canvas = np.zeros((canvas_h, canvas_w, image.shape[2]), dtype)
            if (new_h, new_w) == image.shape[:2]:
                canvas[:new_h, :new_w] = image
            else:
                resample.resize(image, new_h, new_w, self.method,
                                out=canvas[:new_h, :new_w])
        else:
            canvas_h, canvas_w = new_h, new_w
            canvas = RESIZE_METHODS[self.method](image, new_h, new_w)
        sample = _resample_to_grid(sample, (canvas_h, canvas_w), (new_h, new_w),
                                   self.mask_stride)
        out = reframe_boxes(sample, src_size=(new_h, new_w), offset=(0, 0),
                            window=(0.0, 0.0, float(new_h), float(new_w)),
                            canvas_size=(canvas_h, canvas_w))
        out["image"] = canvas
        return set_content_size(out, new_h, new_w, (height, width))
