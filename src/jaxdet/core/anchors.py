"""Anchor generators (numpy; static constants computed once at build time).

Both generators return float32 ``[A, 4]`` boxes ``(ymin, xmin, ymax, xmax)``, in the order
the model heads reshape to: feature level (ascending) -> y -> x -> anchor ``k`` at that
location. Within a location:

* ``MultiscaleAnchorGenerator``: scale outer, aspect ratio inner
  (``k = scale_index * len(aspect_ratios) + aspect_index``). Note: the TF OD API's
  ``GridAnchorGenerator`` meshgrid and torchvision's ``AnchorGenerator`` put the aspect ratio
  outer (``tf_layout`` / ``torchvision_layout``); the order only matters when loading head
  weights trained elsewhere.
* ``SSDAnchorGenerator``: the box-spec list order of TF OD API ``create_ssd_anchors``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from jaxdet.core.grid_anchors import tf_pixel_anchors


def _tile(grid_h: int, grid_w: int, heights, widths, stride, offset) -> np.ndarray:
    """Boxes for a ``grid_h x grid_w`` grid of centers, ``K`` sizes per center -> [h*w*K, 4].

    Center of cell ``(i, j)`` is ``(i * stride[0] + offset[0], j * stride[1] + offset[1])``.
    """
    heights = np.asarray(heights, np.float64)
    widths = np.asarray(widths, np.float64)
    yc = np.arange(grid_h, dtype=np.float64) * stride[0] + offset[0]
    xc = np.arange(grid_w, dtype=np.float64) * stride[1] + offset[1]
    yc = np.broadcast_to(yc[:, None, None], (grid_h, grid_w, heights.size))
    xc = np.broadcast_to(xc[None, :, None], (grid_h, grid_w, heights.size))
    hh = np.broadcast_to(heights[None, None, :], yc.shape)
    ww = np.broadcast_to(widths[None, None, :], yc.shape)
    boxes = np.stack([yc - 0.5 * hh, xc - 0.5 * ww, yc + 0.5 * hh, xc + 0.5 * ww], axis=-1)
    return boxes.reshape(-1, 4)


def _concat(per_level: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(per_level, axis=0).astype(np.float32)


@dataclass(frozen=True)
class MultiscaleAnchorGenerator:
    """RetinaNet / EfficientDet anchors (TF OD API ``multiscale_grid_anchor_generator``).

    Level ``l`` has stride ``2**l`` and base size ``anchor_scale * 2**l``; octave scales
    ``2**(i / scales_per_octave)``; aspect ratio ``a`` gives ``h = size * scale / sqrt(a)``,
    ``w = size * scale * sqrt(a)``. Centers at ``((i + 0.5) * stride, (j + 0.5) * stride)``
    pixels (TF places them at ``i * stride`` on an axis whose image size is not divisible by
    the stride; images here are padded to multiples of the largest stride), divided by
    ``(H, W)`` when ``normalize_coordinates``.

    ``tf_layout`` reproduces the TF OD API exactly (its checkpoints' head channels follow
    it): aspect ratio outer, scale inner within a location, and centres at ``i * stride``
    along an axis whose image size the stride does not divide.

    ``torchvision_layout`` reproduces torchvision's ``AnchorGenerator`` with RetinaNet's sizes
    (``retinanet._default_anchorgen``): per level the sizes ``int(anchor_scale * 2**l *
    2**(i / scales_per_octave))`` (truncated), aspect ratio outer and scale inner, half widths
    and heights rounded to whole pixels (in float32, half to even, as ``Tensor.round``),
    centres at ``(i * sy, j * sx)`` with the integer strides ``sy = H // h``, ``sx = W // w``
    (``2**l`` only where the image size divides by it).
    """

    min_level: int
    max_level: int
    anchor_scale: float = 4.0
    scales_per_octave: int = 2
    aspect_ratios: tuple[float, ...] = (1.0, 2.0, 0.5)
    normalize_coordinates: bool = True
    tf_layout: bool = False
    torchvision_layout: bool = False

    def __post_init__(self):
        object.__setattr__(self, "aspect_ratios", tuple(float(a) for a in self.aspect_ratios))
        if self.tf_layout and self.torchvision_layout:
            raise ValueError("tf_layout and torchvision_layout exclude each other")
        if self.max_level < self.min_level:
            raise ValueError(
                f"max_level ({self.max_level}) must be >= min_level ({self.min_level})"
            )
        if self.scales_per_octave < 1 or not self.aspect_ratios:
            raise ValueError("scales_per_octave must be >= 1 and aspect_ratios non-empty")

    @property
    def levels(self) -> list[int]:
        return list(range(self.min_level, self.max_level + 1))

    def num_anchors_per_location(self) -> list[int]:
        k = self.scales_per_octave * len(self.aspect_ratios)
        return [k] * len(self.levels)

    def feature_map_shapes(self, image_size) -> list[tuple[int, int]]:
        height, width = image_size
        return [(math.ceil(height / 2**lvl), math.ceil(width / 2**lvl)) for lvl in self.levels]

    def generate(self, image_size) -> np.ndarray:
        height, width = image_size
        scales = [2.0 ** (i / self.scales_per_octave) for i in range(self.scales_per_octave)]
        if self.tf_layout:
            specs = [(s, a) for a in self.aspect_ratios for s in scales]
        else:
            specs = [(s, a) for s in scales for a in self.aspect_ratios]
        per_level = []
        for lvl, (fh, fw) in zip(self.levels, self.feature_map_shapes(image_size), strict=True):
            if self.torchvision_layout:
                half_h, half_w = self._torchvision_half_sizes(lvl)
                strides = (height // fh, width // fw)
                per_level.append(_tile(fh, fw, 2 * half_h, 2 * half_w, strides, (0.0, 0.0)))
                continue
            stride = float(2**lvl)
            size = self.anchor_scale * stride
            heights = [size * s / math.sqrt(a) for s, a in specs]
            widths = [size * s * math.sqrt(a) for s, a in specs]
            offset = [stride / 2, stride / 2]
            if self.tf_layout:  # TF: offset 0 along an axis that the stride does not divide
                offset = [stride / 2 if n % stride == 0 else 0.0 for n in (height, width)]
            per_level.append(_tile(fh, fw, heights, widths, (stride, stride), offset))
        if self.normalize_coordinates:
            scale = np.array([height, width, height, width], np.float64)
            per_level = [boxes / scale for boxes in per_level]
        return _concat(per_level)

    def pixel_anchors(self, image_size) -> np.ndarray:
        """float32 ``[A, 4]`` anchors in pixels, in :meth:`generate`'s order. With
        ``tf_layout`` bit-equal to TF's ``MultiscaleGridAnchorGenerator(normalize_coordinates=
        False)`` (float32 arithmetic, ``core.grid_anchors.tf_pixel_anchors`` per level: Faster
        R-CNN matches in pixels, where the last bit decides ties); otherwise :meth:`generate`
        without the division."""
        if not self.tf_layout:
            return dataclasses.replace(self, normalize_coordinates=False).generate(image_size)
        height, width = image_size
        scales = [2.0 ** (i / self.scales_per_octave) for i in range(self.scales_per_octave)]
        specs = [(s, a) for a in self.aspect_ratios for s in scales]
        per_level = []
        for lvl, shape in zip(self.levels, self.feature_map_shapes(image_size), strict=True):
            stride = 2**lvl
            offset = [stride / 2 if n % stride == 0 else 0.0 for n in (height, width)]
            base = self.anchor_scale * stride
            per_level.append(tf_pixel_anchors(shape, [s for s, _ in specs],
                                              [a for _, a in specs], (base, base),
                                              (stride, stride), offset))
        return _concat(per_level)

    def _torchvision_half_sizes(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Half heights and widths of one level's anchors at a location, torchvision's
        ``AnchorGenerator.generate_anchors`` (its aspect ratio is height / width, ours width /
        height), in its order: aspect ratio outer, scale inner."""
        base = self.anchor_scale * 2**level
        sizes = np.array([int(base * 2.0 ** (i / self.scales_per_octave))
                          for i in range(self.scales_per_octave)], np.float32)
        h_ratios = np.sqrt(np.array([1.0 / a for a in self.aspect_ratios], np.float32))
        w_ratios = np.float32(1.0) / h_ratios
        half_w = np.round((w_ratios[:, None] * sizes[None, :]).reshape(-1) / np.float32(2))
        half_h = np.round((h_ratios[:, None] * sizes[None, :]).reshape(-1) / np.float32(2))
        return half_h.astype(np.float64), half_w.astype(np.float64)


@dataclass(frozen=True)
class SSDAnchorGenerator:
    """SSD anchors (TF OD API ``create_ssd_anchors`` + ``MultipleGridAnchorGenerator``).

    Output is normalized. Scales are linear from ``min_scale`` to ``max_scale`` over
    ``num_layers`` (or the explicit ``scales``), with 1.0 appended for interpolation.
    Layer 0 with ``reduce_boxes_in_lowest_layer`` uses ``[(0.1, 1.0), (s0, 2.0), (s0, 0.5)]``;
    every other layer uses ``(s_i, a)`` for each aspect ratio, plus
    ``(sqrt(s_i * s_{i+1}), interpolated_scale_aspect_ratio)`` if that ratio is > 0.
    Grid centers at ``((i + 0.5) / h, (j + 0.5) / w)``; the base anchor size is scaled by
    ``(min(H, W) / H, min(H, W) / W)`` so anchors stay square in pixels on non-square images.
    """

    num_layers: int = 6
    min_scale: float = 0.2
    max_scale: float = 0.95
    scales: tuple[float, ...] = ()
    aspect_ratios: tuple[float, ...] = (1.0, 2.0, 0.5, 3.0, 1.0 / 3.0)
    interpolated_scale_aspect_ratio: float = 1.0
    base_anchor_size: tuple[float, float] = (1.0, 1.0)
    reduce_boxes_in_lowest_layer: bool = True

    def __post_init__(self):
        object.__setattr__(self, "scales", tuple(float(s) for s in self.scales))
        object.__setattr__(self, "aspect_ratios", tuple(float(a) for a in self.aspect_ratios))
        object.__setattr__(self, "base_anchor_size", tuple(float(b) for b in self.base_anchor_size))
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.scales and len(self.scales) != self.num_layers:
            raise ValueError(
                f"scales has {len(self.scales)} entries but num_layers is {self.num_layers}"
            )

    def layer_scales(self) -> list[float]:
        """Per-layer scales with 1.0 appended (length ``num_layers + 1``)."""
        if self.scales:
            return list(self.scales) + [1.0]
        if self.num_layers == 1:
            return [self.min_scale, 1.0]
        step = (self.max_scale - self.min_scale) / (self.num_layers - 1)
        return [self.min_scale + step * i for i in range(self.num_layers)] + [1.0]

    def box_specs(self) -> list[list[tuple[float, float]]]:
        """Per layer, the ``(scale, aspect_ratio)`` of each anchor at a location."""
        scales = self.layer_scales()
        specs = []
        for layer in range(self.num_layers):
            scale, scale_next = scales[layer], scales[layer + 1]
            if layer == 0 and self.reduce_boxes_in_lowest_layer:
                layer_specs = [(0.1, 1.0), (scale, 2.0), (scale, 0.5)]
            else:
                layer_specs = [(scale, a) for a in self.aspect_ratios]
                if self.interpolated_scale_aspect_ratio > 0.0:
                    layer_specs.append(
                        (math.sqrt(scale * scale_next), self.interpolated_scale_aspect_ratio)
                    )
            specs.append(layer_specs)
        return specs

    def num_anchors_per_location(self) -> list[int]:
        return [len(s) for s in self.box_specs()]

    def generate(self, feature_map_shapes, image_size) -> np.ndarray:
        feature_map_shapes = [tuple(int(d) for d in s) for s in feature_map_shapes]
        if len(feature_map_shapes) != self.num_layers:
            raise ValueError(
                f"got {len(feature_map_shapes)} feature map shapes for num_layers={self.num_layers}"
            )
        height, width = image_size
        min_dim = float(min(height, width))
        base_h = self.base_anchor_size[0] * min_dim / height
        base_w = self.base_anchor_size[1] * min_dim / width
        per_level = []
        for (fh, fw), specs in zip(feature_map_shapes, self.box_specs(), strict=True):
            heights = [s / math.sqrt(a) * base_h for s, a in specs]
            widths = [s * math.sqrt(a) * base_w for s, a in specs]
            stride = (1.0 / fh, 1.0 / fw)
            offset = (0.5 / fh, 0.5 / fw)
            per_level.append(_tile(fh, fw, heights, widths, stride, offset))
        return _concat(per_level)
