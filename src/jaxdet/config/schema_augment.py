"""Config sections of the training augment ops (``data.augment``), one per op.

Names, fields and defaults are the TF Object Detection API preprocessor's (preprocessor.proto),
so a pipeline.config's ``data_augmentation_options`` map one to one; ``config/schema.py``
re-exports every class here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import Strict, later_field


class RandomHorizontalFlipConfig(Strict):
    """TF ``random_horizontal_flip``: mirrors image, boxes and keypoints left-right with
    ``probability``. ``keypoint_flip_permutation`` (one entry per keypoint slot of the model's
    keypoint tasks, laid end to end): slot ``i`` of the flipped object takes the mirrored
    keypoint of slot ``permutation[i]`` (left and right joints swap). Empty keeps every
    keypoint in its slot."""

    name: Literal["random_horizontal_flip"]
    probability: float = Field(0.5, ge=0.0, le=1.0)
    keypoint_flip_permutation: tuple[int, ...] = later_field(())

    @model_validator(mode="after")
    def _permutation(self) -> RandomHorizontalFlipConfig:
        p = self.keypoint_flip_permutation
        if p and sorted(p) != list(range(len(p))):
            raise ValueError(f"keypoint_flip_permutation {list(p)} is not a permutation of "
                             f"0..{len(p) - 1}")
        return self


class RandomScaleCropAndPadToSquareConfig(Strict):
    """TF ``random_scale_crop_and_pad_to_square``: scale jitter, then crop / pad to a square.

    The longer side is scaled to ``output_size`` * U(scale_min, scale_max), then a random
    ``output_size`` square is cut out (zero padded); ``output_size`` must equal the (square)
    resizer's size. The scaling resizes with the resizer's ``method`` (``tf_bilinear`` in a
    converted pipeline.config: what the TF OD API does).
    """

    name: Literal["random_scale_crop_and_pad_to_square"]
    output_size: int = Field(512, ge=1)
    scale_min: float = Field(0.1, gt=0.0)
    scale_max: float = Field(2.0, gt=0.0)


class SSDRandomCropConfig(Strict):
    """TF ``ssd_random_crop``: SSD's random crop, one of several operations picked at random.

    Operation i uses ``min_object_covered[i]`` and ``overlap_thresh[i]``; the defaults are TF's
    seven default operations.
    """

    name: Literal["ssd_random_crop"]
    min_object_covered: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    aspect_ratio_range: tuple[float, float] = (0.5, 2.0)
    area_range: tuple[float, float] = (0.1, 1.0)
    overlap_thresh: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    random_coef: float = Field(0.15, ge=0.0, le=1.0)


class RandomColorJitterConfig(Strict):
    name: Literal["random_color_jitter"]
    brightness: float = Field(0.125, ge=0.0)
    contrast: tuple[float, float] = (0.5, 1.5)
    saturation: tuple[float, float] = (0.5, 1.5)
    hue: float = Field(0.02, ge=0.0)
    probability: float = Field(1.0, ge=0.0, le=1.0)


def _min_le_max(cfg: Strict, lo: str, hi: str) -> None:
    if getattr(cfg, lo) > getattr(cfg, hi):
        raise ValueError(f"{lo} ({getattr(cfg, lo)}) must be <= {hi} ({getattr(cfg, hi)})")


PadColor = tuple[float, ...]  # RGB in 0..255; empty: the image's mean colour (TF)


class RandomPadImageConfig(Strict):
    """TF ``random_pad_image``: pads to a random size, the image at a random offset.

    The size lies in [min_image_*, max_image_*) (unset: the image size and twice it); the pad
    is ``pad_color`` (RGB, 0..255; empty: the image's mean colour).
    """

    name: Literal["random_pad_image"]
    min_image_height: int | None = Field(None, ge=1)
    min_image_width: int | None = Field(None, ge=1)
    max_image_height: int | None = Field(None, ge=1)
    max_image_width: int | None = Field(None, ge=1)
    pad_color: PadColor = ()

    @model_validator(mode="after")
    def _pairs(self) -> RandomPadImageConfig:
        for lo, hi in (("min_image_height", "min_image_width"),
                       ("max_image_height", "max_image_width")):
            if (getattr(self, lo) is None) != (getattr(self, hi) is None):
                raise ValueError(f"{lo} and {hi} must be both set or both unset")
        if len(self.pad_color) not in (0, 3):
            raise ValueError(f"pad_color must be empty or 3 values, got {self.pad_color}")
        return self


class RandomAbsolutePadImageConfig(Strict):
    """TF ``random_absolute_pad_image``: pads by a random number of pixels, at a random offset.

    Adds [0, max_height_padding) rows and [0, max_width_padding) columns of ``pad_color``
    (RGB, 0..255; empty: the image's mean colour).
    """

    name: Literal["random_absolute_pad_image"]
    max_height_padding: int = Field(1, ge=0)
    max_width_padding: int = Field(1, ge=0)
    pad_color: PadColor = ()

    @model_validator(mode="after")
    def _color(self) -> RandomAbsolutePadImageConfig:
        if len(self.pad_color) not in (0, 3):
            raise ValueError(f"pad_color must be empty or 3 values, got {self.pad_color}")
        return self


class RandomCropImageConfig(Strict):
    """TF ``random_crop_image``: a random crop, as ``tf.image.sample_distorted_bounding_box``.

    The crop's aspect (w/h) and area fraction lie in range and it covers ``min_object_covered``
    of some box; boxes with less than ``overlap_thresh`` of their area inside are dropped, the
    rest clipped when ``clip_boxes``. With probability ``random_coef`` the image is kept.
    """

    name: Literal["random_crop_image"]
    min_object_covered: float = Field(1.0, ge=0.0, le=1.0)
    min_aspect_ratio: float = Field(0.75, gt=0.0)
    max_aspect_ratio: float = Field(1.33, gt=0.0)
    min_area: float = Field(0.1, gt=0.0, le=1.0)
    max_area: float = Field(1.0, gt=0.0, le=1.0)
    overlap_thresh: float = Field(0.3, ge=0.0, le=1.0)
    clip_boxes: bool = True
    random_coef: float = Field(0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _ranges(self) -> RandomCropImageConfig:
        _min_le_max(self, "min_aspect_ratio", "max_aspect_ratio")
        _min_le_max(self, "min_area", "max_area")
        return self


class RandomSquareCropByScaleConfig(Strict):
    """TF ``random_square_crop_by_scale`` (CenterNet): a random square crop, zeros outside.

    The side is scale * max(H, W), scale one of ``num_scales`` values in [scale_min,
    scale_max]; the centre lies at least a border (from ``max_border``) inside the image.
    Boxes are clipped, or dropped when completely outside.
    """

    name: Literal["random_square_crop_by_scale"]
    max_border: int = Field(128, ge=1)
    scale_min: float = Field(0.6, gt=0.0)
    scale_max: float = Field(1.3, gt=0.0)
    num_scales: int = Field(8, ge=1)

    @model_validator(mode="after")
    def _ranges(self) -> RandomSquareCropByScaleConfig:
        _min_le_max(self, "scale_min", "scale_max")
        return self


class RandomAdjustBrightnessConfig(Strict):
    """TF ``random_adjust_brightness``: adds 255 * U(-max_delta, max_delta), clips."""

    name: Literal["random_adjust_brightness"]
    max_delta: float = Field(0.2, ge=0.0, le=1.0)


class RandomAdjustContrastConfig(Strict):
    """TF ``random_adjust_contrast``: per channel (x - mean) * U(min_delta, max_delta) + mean."""

    name: Literal["random_adjust_contrast"]
    min_delta: float = Field(0.8, ge=0.0)
    max_delta: float = Field(1.25, ge=0.0)

    @model_validator(mode="after")
    def _ranges(self) -> RandomAdjustContrastConfig:
        _min_le_max(self, "min_delta", "max_delta")
        return self


class RandomAdjustHueConfig(Strict):
    """TF ``random_adjust_hue``: rotates hue by U(-max_delta, max_delta) of the colour circle."""

    name: Literal["random_adjust_hue"]
    max_delta: float = Field(0.02, ge=0.0, le=1.0)


class RandomAdjustSaturationConfig(Strict):
    """TF ``random_adjust_saturation``: scales HSV saturation by U(min_delta, max_delta)."""

    name: Literal["random_adjust_saturation"]
    min_delta: float = Field(0.8, ge=0.0)
    max_delta: float = Field(1.25, ge=0.0)

    @model_validator(mode="after")
    def _ranges(self) -> RandomAdjustSaturationConfig:
        _min_le_max(self, "min_delta", "max_delta")
        return self


class RandomDistortColorConfig(Strict):
    """TF ``random_distort_color``: random brightness, saturation, hue and contrast.

    ``color_ordering`` 0: brightness (32/255), saturation (0.5-1.5), hue (0.2), contrast
    (0.5-1.5); 1: brightness, contrast, saturation, hue.
    """

    name: Literal["random_distort_color"]
    color_ordering: Literal[0, 1] = 0


class RandomBlackPatchesConfig(Strict):
    """TF ``random_black_patches``: adds black squares at random places; boxes are kept.

    ``max_black_patches`` tries, each adding with ``probability`` a square of side
    size_to_image_ratio * min(H, W).
    """

    name: Literal["random_black_patches"]
    max_black_patches: int = Field(10, ge=0)
    probability: float = Field(0.5, ge=0.0, le=1.0)
    size_to_image_ratio: float = Field(0.1, gt=0.0, le=1.0)


AugmentConfig = Annotated[
    RandomHorizontalFlipConfig
    | RandomScaleCropAndPadToSquareConfig
    | SSDRandomCropConfig
    | RandomColorJitterConfig
    | RandomPadImageConfig
    | RandomAbsolutePadImageConfig
    | RandomCropImageConfig
    | RandomSquareCropByScaleConfig
    | RandomAdjustBrightnessConfig
    | RandomAdjustContrastConfig
    | RandomAdjustHueConfig
    | RandomAdjustSaturationConfig
    | RandomDistortColorConfig
    | RandomBlackPatchesConfig,
    Field(discriminator="name"),
]
