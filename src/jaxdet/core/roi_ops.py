"""Static-shape crop-and-resize and RoI Align for two-stage detectors (Faster / Mask R-CNN).

The same values as the TF OD API's ``object_detection/utils/spatial_transform_ops``
(``matmul_crop_and_resize``, ``multilevel_matmul_crop_and_resize``, ``multilevel_roi_align``)
and the FPN level assignment of ``utils/ops.fpn_feature_levels`` that its Faster R-CNN meta
architecture uses. Pure ``jnp``: every shape is static (``B`` images, ``N`` boxes per image,
the crop size), so the functions run eagerly, under ``jax.jit`` and ``jax.vmap``, and are
differentiable w.r.t. the features (and the boxes, through the bilinear weights).

Coordinate conventions (TF's):

* boxes are ``(ymin, xmin, ymax, xmax)`` in **normalized** coordinates, ``[B, N, 4]``;
  ``y`` maps to the feature row ``y * (H_l - 1)`` of the box's level ``l`` (``x`` likewise):
  feature pixels are points, ``0`` is the first row's center and ``1`` the last one's.
  ``ymin > ymax`` (flipped boxes), zero-size boxes and coordinates outside ``[0, 1]`` are
  allowed.
* bilinear sampling at ``(y, x)`` blends the four neighbours ``floor(y), floor(y) + 1`` x
  ``floor(x), floor(x) + 1``; a neighbour outside its level's ``H_l x W_l`` map contributes
  ``extrapolation_value`` (with its bilinear weight) instead of a feature value. So a sample
  half a pixel outside the map is half feature, half ``extrapolation_value`` -- unlike
  ``tf.image.crop_and_resize``, which gives ``extrapolation_value`` for any sample outside
  ``[0, H - 1]``; both agree for samples inside the map. (TF's upper neighbour is
  ``floor(y + 1)``, a row too far when ``y`` is an ulp below an integer and ``y + 1`` rounds
  up; that one-pixel jump is not reproduced.)
* multi-level inputs are a list of ``[B, H_l, W_l, C]`` maps (any sizes, same ``C``) and a
  per-box level index ``box_levels[B, N]`` in ``[0, L)``; a box only reads its own level.

Two back-ends, same values: ``"gather"`` (default) gathers the ``4 * S_y * S_x`` neighbours of
each box from the flattened levels (memory ``B N 4 S_y S_x C``, like TF's implementation; its
gradient is a scatter-add) and ``"matmul"`` contracts one-hot bilinear weight matrices with
each level (``[S, H_l]`` and ``[S, W_l]`` per box; flops ``~B N S H_l W_l C`` per level,
no gathers -- for small maps or gather-averse accelerators).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import jax
import jax.numpy as jnp

Method = Literal["gather", "matmul"]


def _grid_1d(start: jnp.ndarray, end: jnp.ndarray, size: int, align_endpoints: bool):
    """``size`` sample positions between ``start[B, N]`` and ``end[B, N]`` -> ``[B, N, size]``.

    ``align_endpoints``: the first / last samples sit on ``start`` / ``end`` (one sample: the
    middle); otherwise the samples are the centers of ``size`` equal cells.
    """
    start, end = start[..., None], end[..., None]
    length = end - start
    if align_endpoints:
        rel = jnp.linspace(0.0, 1.0, size, dtype=start.dtype)
        offset = 0.0 if size > 1 else length / 2
    else:
        rel = jnp.linspace(0.0, 1.0, size + 1, dtype=start.dtype)[:-1]
        offset = length / (2 * size)
    return start + offset + rel * length


def _level_shapes(features: Sequence[jnp.ndarray]) -> list[tuple[int, int]]:
    if len(features) == 0:
        raise ValueError("features must hold at least one level")
    channels = {f.shape[-1] for f in features}
    batches = {f.shape[0] for f in features}
    if any(f.ndim != 4 for f in features) or len(channels) != 1 or len(batches) != 1:
        raise ValueError(
            "features must be [B, H_l, W_l, C] maps with the same B and C; got shapes "
            f"{[tuple(f.shape) for f in features]}")
    return [(int(f.shape[1]), int(f.shape[2])) for f in features]


def _sample_neighbours(boxes, box_levels, shapes, size_y, size_x, align_corners):
    """Sample positions and their bilinear neighbours, in each box's level pixel frame.

    Returns ``(y0, y1, wy0, wy1, vy0, vy1)`` each ``[B, N, size_y]`` and the same six for x
    (``[B, N, size_x]``): integer neighbour rows ``y0 = floor(y)``, ``y1 = y0 + 1``, their
    float weights ``1 - ly`` / ``ly`` with ``ly = y - y0``, and whether each lies on the map.
    """
    hw = jnp.asarray(shapes, boxes.dtype)[box_levels]  # [B, N, 2] true level sizes
    scale = jnp.concatenate([hw - 1.0, hw - 1.0], axis=-1)
    ymin, xmin, ymax, xmax = jnp.moveaxis(boxes * scale, -1, 0)
    out = []
    for start, end, size, extent in ((ymin, ymax, size_y, hw[..., 0]),
                                      (xmin, xmax, size_x, hw[..., 1])):
        pos = _grid_1d(start, end, size, align_corners)
        lo_f = jnp.floor(pos)
        # TF takes floor(pos + 1), which is lo + 2 when pos is an ulp below an integer and
        # pos + 1 rounds up (e.g. 0.99999994 -> 2): a one-pixel jump. lo + 1 is the true
        # bilinear neighbour; elsewhere the two agree.
        hi_f = lo_f + 1.0
        frac = pos - lo_f
        lim = extent[..., None]
        out.append((lo_f.astype(jnp.int32), hi_f.astype(jnp.int32), 1.0 - frac, frac,
                    (lo_f >= 0) & (lo_f < lim), (hi_f >= 0) & (hi_f < lim)))
    return out


def _interleave(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """``[..., S]`` x 2 -> ``[..., 2 S]`` as ``a0, b0, a1, b1, ...``."""
    return jnp.stack([a, b], axis=-1).reshape(*a.shape[:-1], 2 * a.shape[-1])


def _roi_align_gather(features, shapes, box_levels, ny_, nx_, extrapolation_value, out_size,
                      samples):
    (y0, y1, wy0, wy1, vy0, vy1), (x0, x1, wx0, wx1, vx0, vx1) = ny_, nx_
    b, n = box_levels.shape
    oy, ox = out_size
    sy, sx = samples
    c = features[0].shape[-1]
    dtype = features[0].dtype
    flat = jnp.concatenate([f.reshape(b, -1, c) for f in features], axis=1)  # [B, T, C]
    offsets = jnp.cumsum(jnp.asarray([0] + [h * w for h, w in shapes[:-1]], jnp.int32))
    widths = jnp.asarray([w for _, w in shapes], jnp.int32)
    rows, cols = _interleave(y0, y1), _interleave(x0, x1)  # [B, N, 2 Sy], [B, N, 2 Sx]
    valid = _interleave(vy0, vy1)[..., :, None] & _interleave(vx0, vx1)[..., None, :]
    idx = (offsets[box_levels][..., None, None]
           + rows[..., :, None] * widths[box_levels][..., None, None] + cols[..., None, :])
    idx = jnp.where(valid, idx, 0)
    vals = jax.vmap(lambda f, i: jnp.take(f, i, axis=0))(flat, idx.reshape(b, -1))
    vals = vals.reshape(b, n, 2 * oy * sy, 2 * ox * sx, c)
    vals = jnp.where(valid[..., None], vals, jnp.asarray(extrapolation_value, dtype))
    # weighted along y, then along x, in tensors of rank <= 5 (TFLite's MUL broadcasts no more)
    ky = _interleave(wy0, wy1).astype(dtype).reshape(b * n, oy, 2 * sy, 1)
    vals = (vals.reshape(b * n, oy, 2 * sy, ox * 2 * sx * c) * ky).sum(axis=2)
    kx = _interleave(wx0, wx1).astype(dtype).reshape(b * n, 1, ox, 2 * sx, 1)
    vals = (vals.reshape(b * n, oy, ox, 2 * sx, c) * kx).sum(axis=3)
    return vals.reshape(b, n, oy, ox, c) / (sy * sx)


def _roi_align_matmul(features, shapes, box_levels, ny_, nx_, extrapolation_value, out_size,
                      samples):
    (y0, y1, wy0, wy1, vy0, vy1), (x0, x1, wx0, wx1, vx0, vx1) = ny_, nx_
    b, n = box_levels.shape
    oy, ox = out_size
    sy, sx = samples
    dtype = features[0].dtype

    def cell_weights(lo, hi, w_lo, w_hi, extent, mask, out, per_cell):
        # [B, N, S, extent] bilinear one-hot rows (a row off the map gets no column), averaged
        # over the samples of each output cell -> [B, N, out, extent].
        w = (jax.nn.one_hot(lo, extent, dtype=w_lo.dtype) * w_lo[..., None]
             + jax.nn.one_hot(hi, extent, dtype=w_hi.dtype) * w_hi[..., None])
        w = w * mask[:, :, None, None]
        return w.reshape(b, n, out, per_cell, extent).mean(axis=3).astype(dtype)

    result = None
    for level, (feat, (h, w)) in enumerate(zip(features, shapes, strict=True)):
        mask = (box_levels == level).astype(wy0.dtype)
        ay = cell_weights(y0, y1, wy0, wy1, h, mask, oy, sy)
        ax = cell_weights(x0, x1, wx0, wx1, w, mask, ox, sx)
        crop = jnp.einsum("bnyh,bhwc,bnxw->bnyxc", ay, feat, ax,
                          precision=jax.lax.Precision.HIGHEST, optimize="optimal")
        result = crop if result is None else result + crop
    if not (isinstance(extrapolation_value, int | float) and extrapolation_value == 0):
        # each off-map neighbour adds extrapolation_value * its weight; the weights separate:
        # mean_ij(total_i total_j - on_i on_j) = T_y T_x - A_y A_x per cell.
        def cell_sums(w_lo, w_hi, v_lo, v_hi, out, per_cell):
            tot = (w_lo + w_hi).reshape(b, n, out, per_cell).mean(axis=3)
            on = (w_lo * v_lo + w_hi * v_hi).reshape(b, n, out, per_cell).mean(axis=3)
            return tot, on

        ty, ay = cell_sums(wy0, wy1, vy0, vy1, oy, sy)
        tx, ax = cell_sums(wx0, wx1, vx0, vx1, ox, sx)
        off = ty[..., :, None] * tx[..., None, :] - ay[..., :, None] * ax[..., None, :]
        result = result + (extrapolation_value * off).astype(dtype)[..., None]
    return result


def multilevel_roi_align(
    features: Sequence[jnp.ndarray],
    boxes: jnp.ndarray,
    box_levels: jnp.ndarray | None,
    output_size: tuple[int, int],
    num_samples_per_cell_y: int = 1,
    num_samples_per_cell_x: int = 1,
    align_corners: bool = False,
    extrapolation_value: float = 0.0,
    *,
    method: Method = "gather",
) -> jnp.ndarray:
    """RoI Align (Mask R-CNN, fig. 3) from multi-level features; TF OD API semantics.

    Each box is split into ``output_size[0] x output_size[1]`` cells; each cell is the mean of
    ``num_samples_per_cell_y x num_samples_per_cell_x`` bilinear samples on a uniform grid in
    the box (cell centers of a finer grid; with ``align_corners`` the grid's corner samples lie
    on the box corners instead -- one sample along an axis then sits at the box's middle).

    Args:
      features: list of ``L`` maps ``[B, H_l, W_l, C]`` (sizes may differ; same ``B``, ``C``).
      boxes: ``[B, N, 4]`` normalized ``(ymin, xmin, ymax, xmax)``; scaled by each box's own
        level: ``y * (H_l - 1)``, ``x * (W_l - 1)``.
      box_levels: ``[B, N]`` int level of each box, in ``[0, L)``; ``None``: all level 0.
      output_size: ``(out_h, out_w)``, static.
      num_samples_per_cell_y, num_samples_per_cell_x: samples per cell and axis, static.
      align_corners: grid corners on the box corners (``True`` is crop-and-resize).
      extrapolation_value: value of a neighbour off its level's map.
      method: ``"gather"`` or ``"matmul"`` (module docstring); same values.

    Returns:
      ``[B, N, out_h, out_w, C]`` in the features' dtype.
    """
    if method not in ("gather", "matmul"):
        raise ValueError(f"method={method!r}; allowed: gather, matmul")
    shapes = _level_shapes(features)
    if boxes.ndim != 3 or boxes.shape[-1] != 4 or boxes.shape[0] != features[0].shape[0]:
        raise ValueError(f"boxes must be [B, N, 4] with B = {features[0].shape[0]}; "
                         f"got {boxes.shape}")
    if box_levels is None:
        box_levels = jnp.zeros(boxes.shape[:2], jnp.int32)
    box_levels = jnp.asarray(box_levels).astype(jnp.int32)
    if box_levels.shape != boxes.shape[:2]:
        raise ValueError(f"box_levels must be {boxes.shape[:2]}; got {box_levels.shape}")
    oy, ox = (int(s) for s in output_size)
    sy, sx = int(num_samples_per_cell_y), int(num_samples_per_cell_x)
    if min(oy, ox, sy, sx) < 1:
        raise ValueError("output_size and samples per cell must be positive")
    if not jnp.issubdtype(boxes.dtype, jnp.floating):
        boxes = boxes.astype(jnp.float32)
    ny_, nx_ = _sample_neighbours(boxes, box_levels, shapes, oy * sy, ox * sx, align_corners)
    fn = _roi_align_gather if method == "gather" else _roi_align_matmul
    return fn(list(features), shapes, box_levels, ny_, nx_, extrapolation_value, (oy, ox),
              (sy, sx))


def multilevel_matmul_crop_and_resize(
    features: Sequence[jnp.ndarray],
    boxes: jnp.ndarray,
    box_levels: jnp.ndarray | None,
    crop_size: tuple[int, int],
    extrapolation_value: float = 0.0,
    *,
    method: Method = "gather",
) -> jnp.ndarray:
    """Bilinear crop-and-resize of each box from its level: ``[B, N, crop_h, crop_w, C]``.

    ``multilevel_roi_align`` with one sample per cell and ``align_corners=True`` (TF's
    definition): sample ``i`` of ``crop_h`` lies at ``ymin + i (ymax - ymin) / (crop_h - 1)``
    (the middle when ``crop_h`` is 1). ``features``: list of ``[B, H_l, W_l, C]``; ``boxes``:
    ``[B, N, 4]`` normalized yxyx; ``box_levels``: ``[B, N]`` int or ``None`` (all level 0).
    """
    return multilevel_roi_align(features, boxes, box_levels, crop_size, 1, 1, True,
                                extrapolation_value, method=method)


def matmul_crop_and_resize(
    images: jnp.ndarray,
    boxes: jnp.ndarray,
    crop_size: tuple[int, int],
    extrapolation_value: float = 0.0,
    *,
    method: Method = "gather",
) -> jnp.ndarray:
    """Bilinear crops of ``images[B, H, W, C]`` at ``boxes[B, N, 4]`` -> ``[B, N, h, w, C]``.

    Boxes are normalized ``(ymin, xmin, ymax, xmax)`` of their own image (``y -> y (H - 1)``);
    flipped boxes give flipped crops. ``crop_size = (h, w)`` is static. Same values as
    ``tf.image.crop_and_resize`` (bilinear) wherever a sample lies on the image; near / off
    the border see the module docstring.
    """
    return multilevel_roi_align([images], boxes, None, crop_size, 1, 1, True,
                                extrapolation_value, method=method)


def fpn_box_levels(
    boxes: jnp.ndarray,
    num_levels: int,
    unit_scale_index: int,
    image_ratio: float | jnp.ndarray,
) -> jnp.ndarray:
    """FPN level of each box from its size (FPN paper, eq. 1); TF ``ops.fpn_feature_levels``.

    ``level = clip(floor(log2(sqrt(h w) * image_ratio)) + unit_scale_index, 0, L - 1)`` with
    ``h, w`` the normalized box height / width. TF's Faster R-CNN (multi-level crops) calls it
    with ``unit_scale_index = num_levels - 2`` and ``image_ratio = sqrt(H * W) / 224`` of the
    (padded) input image, so a 224 x 224-pixel box goes to level ``num_levels - 2``. Boxes of
    zero or negative area (``h w <= 0``) go to level 0, as in TF.

    Args:
      boxes: ``[..., 4]`` normalized ``(ymin, xmin, ymax, xmax)``.
      num_levels: ``L`` > 0, static.
      unit_scale_index: level of a box with ``sqrt(h w) * image_ratio == 1``, in ``[0, L)``.
      image_ratio: scalar (Python or traced).

    Returns:
      ``[...]`` int32 levels in ``[0, L)``.
    """
    if num_levels <= 0 or not 0 <= unit_scale_index < num_levels:
        raise ValueError(f"need num_levels > 0 and 0 <= unit_scale_index < num_levels; got "
                         f"{num_levels}, {unit_scale_index}")
    if not jnp.issubdtype(boxes.dtype, jnp.floating):
        boxes = boxes.astype(jnp.float32)
    hw = boxes[..., 2:4] - boxes[..., 0:2]
    areas_sqrt = jnp.sqrt(hw[..., 0] * hw[..., 1])
    scaled = areas_sqrt * jnp.asarray(image_ratio, boxes.dtype)
    # TF: floordiv(log(x), log(2)) -- floor of the float quotient, in the boxes' dtype.
    raw = jnp.floor(jnp.log(scaled) / jnp.log(jnp.asarray(2.0, boxes.dtype)))
    raw = raw + unit_scale_index
    # log(0) = -inf and sqrt(<0) = NaN both land on level 0 in TF (cast, then clip).
    raw = jnp.where(jnp.isnan(raw), -1.0, jnp.clip(raw, -1.0, float(num_levels)))
    return jnp.clip(raw.astype(jnp.int32), 0, num_levels - 1)
