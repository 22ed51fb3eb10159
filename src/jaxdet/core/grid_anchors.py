"""The TF OD API's ``GridAnchorGenerator`` (Faster R-CNN's first-stage anchors), in numpy.

One feature map; at each cell ``(i, j)`` the anchors of every (aspect ratio, scale) pair, in
TF's order: aspect ratio outer, scale inner (``ops.meshgrid(scales, aspect_ratios)``), cells
row-major (y, then x). Anchor ``(s, a)`` has height ``s / sqrt(a) * base_h`` and width
``s * sqrt(a) * base_w`` pixels, centered at ``(i * stride_y + offset_y, j * stride_x +
offset_x)`` pixels (TF's default offset 0: the first center is the image corner).

Normalized anchors are computed in float64 and rounded once; pixel anchors
(:func:`tf_pixel_anchors`) repeat TF's float32 arithmetic step by step, because Faster
R-CNN matches in pixels and a box smaller than the anchors ties several of them: which
anchor TF forces then depends on the last bit of each anchor's corners.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def tf_pixel_anchors(grid_shape: tuple[int, int], scales, aspect_ratios,
                     base_anchor_size: tuple[float, float], anchor_stride: tuple[float, float],
                     anchor_offset: tuple[float, float]) -> np.ndarray:
    """float32 ``[h * w * K, 4]`` pixel anchors ``(ymin, xmin, ymax, xmax)`` of one grid, as
    TF's ``grid_anchor_generator.tile_anchors`` computes them in float32: ``heights = scales
    / sqrt(aspect_ratios) * base_h``, ``widths = scales * sqrt(aspect_ratios) * base_w``,
    centers ``range(n) * stride + offset``, corners ``center -/+ 0.5 * size``. ``scales`` and
    ``aspect_ratios`` pair up one anchor each (``K`` of them, in the location's order)."""
    f32 = np.float32
    scales = np.asarray(scales, f32)
    ratio_sqrts = np.sqrt(np.asarray(aspect_ratios, f32))
    heights = scales / ratio_sqrts * f32(base_anchor_size[0])
    widths = scales * ratio_sqrts * f32(base_anchor_size[1])
    gh, gw = grid_shape
    yc = np.arange(gh).astype(f32) * f32(anchor_stride[0]) + f32(anchor_offset[0])
    xc = np.arange(gw).astype(f32) * f32(anchor_stride[1]) + f32(anchor_offset[1])
    shape = (gh, gw, scales.size)
    yc = np.broadcast_to(yc[:, None, None], shape)
    xc = np.broadcast_to(xc[None, :, None], shape)
    hh = np.broadcast_to(heights, shape) * f32(0.5)
    ww = np.broadcast_to(widths, shape) * f32(0.5)
    return np.stack([yc - hh, xc - ww, yc + hh, xc + ww], -1).reshape(-1, 4).astype(f32)


@dataclass(frozen=True)
class GridAnchorGenerator:
    """TF ``grid_anchor_generator`` (proto defaults: scales 0.5, 1, 2; aspect ratios 0.5, 1,
    2; base 256 x 256; stride 16; offset 0)."""

    scales: tuple[float, ...] = (0.5, 1.0, 2.0)
    aspect_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    base_anchor_size: tuple[float, float] = (256.0, 256.0)
    anchor_stride: tuple[int, int] = (16, 16)
    anchor_offset: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self):
        if not self.scales or not self.aspect_ratios:
            raise ValueError("scales and aspect_ratios must be non-empty")
        if min(self.anchor_stride) <= 0 or min(self.base_anchor_size) <= 0:
            raise ValueError("anchor_stride and base_anchor_size must be positive")

    def num_anchors_per_location(self) -> int:
        return len(self.scales) * len(self.aspect_ratios)

    def feature_map_shape(self, image_size: tuple[int, int]) -> tuple[int, int]:
        """(h, w) of the map at the anchor stride (``ceil(H / stride)``, SAME convolutions)."""
        return (math.ceil(image_size[0] / self.anchor_stride[0]),
                math.ceil(image_size[1] / self.anchor_stride[1]))

    def generate(self, feature_map_shape: tuple[int, int], image_size: tuple[int, int], *,
                 normalize: bool = True) -> np.ndarray:
        """float32 ``[h * w * K, 4]`` anchors (ymin, xmin, ymax, xmax), divided by the image
        ``(H, W)`` when ``normalize``, else pixels bit-equal to TF's."""
        specs = [(s, a) for a in self.aspect_ratios for s in self.scales]
        if not normalize:
            return tf_pixel_anchors(feature_map_shape, [s for s, _ in specs],
                                    [a for _, a in specs], self.base_anchor_size,
                                    self.anchor_stride, self.anchor_offset)
        heights = np.array([s / math.sqrt(a) * self.base_anchor_size[0] for s, a in specs])
        widths = np.array([s * math.sqrt(a) * self.base_anchor_size[1] for s, a in specs])
        gh, gw = feature_map_shape
        yc = np.arange(gh, dtype=np.float64) * self.anchor_stride[0] + self.anchor_offset[0]
        xc = np.arange(gw, dtype=np.float64) * self.anchor_stride[1] + self.anchor_offset[1]
        yc = np.broadcast_to(yc[:, None, None], (gh, gw, len(specs)))
        xc = np.broadcast_to(xc[None, :, None], (gh, gw, len(specs)))
        hh = np.broadcast_to(heights, yc.shape)
        ww = np.broadcast_to(widths, yc.shape)
        boxes = np.stack([yc - 0.5 * hh, xc - 0.5 * ww, yc + 0.5 * hh, xc + 0.5 * ww], -1)
        h, w = image_size
        boxes = boxes.reshape(-1, 4) / np.array([h, w, h, w], np.float64)
        return boxes.astype(np.float32)


__all__ = ["GridAnchorGenerator", "tf_pixel_anchors"]
