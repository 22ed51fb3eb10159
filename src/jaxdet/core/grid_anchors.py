"""The TF OD API's ``GridAnchorGenerator`` (Faster R-CNN's first-stage anchors), in numpy.

One feature map; at each cell ``(i, j)`` the anchors of every (aspect ratio, scale) pair, in
TF's order: aspect ratio outer, scale inner (``ops.meshgrid(scales, aspect_ratios)``), cells
row-major (y, then x). Anchor ``(s, a)`` has height ``s / sqrt(a) * base_h`` and width
``s * sqrt(a) * base_w`` pixels, centered at ``(i * stride_y + offset_y, j * stride_x +
offset_x)`` pixels (TF's default offset 0: the first center is the image corner).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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
        ``(H, W)`` when ``normalize`` (else pixels, as TF returns them)."""
        specs = [(s, a) for a in self.aspect_ratios for s in self.scales]
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
        boxes = boxes.reshape(-1, 4)
        if normalize:
            h, w = image_size
            boxes = boxes / np.array([h, w, h, w], np.float64)
        return boxes.astype(np.float32)


__all__ = ["GridAnchorGenerator"]
