"""CenterNet's pure functions (objects as points), as the TF OD API computes them: center
heatmap targets, box size and offset targets, the penalty-reduced focal loss, peak extraction
and box decoding. Static shapes throughout: ground truth is padded to N boxes with a ``valid``
mask, predictions are the top ``k`` peaks of the whole heatmap.

Coordinates are in output-map pixels (the input divided by the stride) unless said otherwise;
boxes are ``(ymin, xmin, ymax, xmax)``. A box's center lands on the output pixel
``floor(center)``; its offset target is ``center - floor(center)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdet.core.portable import reduce_window_2d

PEAK_EPSILON = 1e-6  # a pixel is a peak when it equals its 3x3 max up to this


def max_distance_for_overlap(height: jnp.ndarray, width: jnp.ndarray,
                             min_iou: float) -> jnp.ndarray:
    """How far box corners may move while the IoU with the box stays >= ``min_iou``: the
    smallest of the three cases of the CornerNet radius (detection offset, detection inside
    the box, box inside the detection), each the root of a quadratic.

    As the TF OD API (and the Objects-as-Points code it follows) each root is taken as
    ``(-b + sqrt(b^2 - 4ac)) / 2``, without dividing by ``a``; the Gaussian sizes of every
    CenterNet checkpoint were trained with that. Elementwise over ``height``, ``width``.
    """
    h, w = jnp.asarray(height, jnp.float32), jnp.asarray(width, jnp.float32)

    def root(a, b, c):
        return (-b + jnp.sqrt(b * b - 4.0 * a * c)) / 2.0

    offset = root(1.0, -(h + w), w * h * ((1.0 - min_iou) / (1.0 + min_iou)))
    detection_in_box = root(4.0, -2.0 * (h + w), (1.0 - min_iou) * w * h)
    box_in_detection = root(4.0 * min_iou, (2.0 * min_iou) * (w + h), (min_iou - 1.0) * w * h)
    return jnp.minimum(jnp.minimum(offset, box_in_detection), detection_in_box)


def gaussian_sigma(height: jnp.ndarray, width: jnp.ndarray, min_overlap: float) -> jnp.ndarray:
    """The standard deviation of a box's center Gaussian: ``(2 * max(floor(r), 0) + 1) / 6``
    with ``r`` = :func:`max_distance_for_overlap` of its size in output pixels."""
    r = max_distance_for_overlap(height, width, min_overlap)
    return (2.0 * jnp.maximum(jnp.floor(r), 0.0) + 1.0) / 6.0


def _absolute(boxes: jnp.ndarray, output_size: tuple[int, int]) -> tuple[jnp.ndarray, ...]:
    """Normalized [N, 4] boxes -> (y_center, x_center, height, width) in output pixels."""
    out_h, out_w = (float(s) for s in output_size)
    ymin, xmin, ymax, xmax = (boxes[..., i] for i in range(4))
    return ((ymin + ymax) / 2.0 * out_h, (xmin + xmax) / 2.0 * out_w,
            (ymax - ymin) * out_h, (xmax - xmin) * out_w)


def center_heatmap_targets(boxes: jnp.ndarray, classes: jnp.ndarray, valid: jnp.ndarray,
                           output_size: tuple[int, int], num_classes: int, *,
                           min_overlap: float = 0.7) -> jnp.ndarray:
    """The per-class center heatmap of one image (TF ``CenterNetCenterHeatmapTargetAssigner``,
    adaptive Gaussian): every box splats ``exp(-d^2 / (2 sigma^2))`` around the pixel
    ``floor(center)`` of its class's channel; boxes of one class merge by maximum.

    Args:
      boxes: [N, 4] normalized yxyx; classes: [N] int (0-based); valid: [N] bool.
      output_size: (h, w) of the output map.
    Returns:
      f32[h, w, num_classes] in [0, 1], 1 exactly at each valid box's center pixel.
    """
    yc, xc, bh, bw = _absolute(boxes.astype(jnp.float32), output_size)
    sigma = gaussian_sigma(bh, bw, min_overlap)
    ys = jnp.arange(output_size[0], dtype=jnp.float32)[:, None, None]
    xs = jnp.arange(output_size[1], dtype=jnp.float32)[None, :, None]
    d2 = (ys - jnp.floor(yc)) ** 2 + (xs - jnp.floor(xc)) ** 2  # [h, w, N]
    gauss = jnp.exp(-d2 / (2.0 * sigma * sigma)) * valid.astype(jnp.float32)
    onehot = jax.nn.one_hot(classes, num_classes, dtype=jnp.float32)  # [N, C]
    return jnp.maximum(jnp.max(gauss[..., :, None] * onehot, axis=2, initial=0.0), 0.0)


def size_and_offset_targets(boxes: jnp.ndarray, output_size: tuple[int, int]
                            ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Per box: its center pixel ``[N, 2]`` int32 (y, x), the size target ``[N, 2]`` (height,
    width in output pixels) and the offset target ``[N, 2]`` (center - floor(center)), as TF's
    ``CenterNetBoxTargetAssigner``. Pixels are clipped into the map (a box whose center lies
    on the last edge keeps the last pixel)."""
    yc, xc, bh, bw = _absolute(boxes.astype(jnp.float32), output_size)
    fy, fx = jnp.floor(yc), jnp.floor(xc)
    pixel = jnp.stack([jnp.clip(fy, 0, output_size[0] - 1),
                       jnp.clip(fx, 0, output_size[1] - 1)], axis=-1).astype(jnp.int32)
    return pixel, jnp.stack([bh, bw], axis=-1), jnp.stack([yc - fy, xc - fx], axis=-1)


def true_image_pixels(image_info: jnp.ndarray, output_size: tuple[int, int], stride: int
                      ) -> jnp.ndarray:
    """f32[B, h, w, 1]: 1 on the output map's pixels inside each image's content, 0 on its
    padding (TF ``get_valid_anchor_weights_in_flattened_image`` of ``ceil(true shape /
    stride)``): row ``< ceil(content_h / stride)`` and column ``< ceil(content_w / stride)``,
    the content's height and width in input pixels being ``image_info[:, 2:4]``."""
    info = jnp.asarray(image_info, jnp.float32)
    rows = jnp.ceil(info[:, 2] / stride)[:, None, None, None]
    cols = jnp.ceil(info[:, 3] / stride)[:, None, None, None]
    h, w = output_size
    y = jnp.arange(h, dtype=jnp.float32)[None, :, None, None]
    x = jnp.arange(w, dtype=jnp.float32)[None, None, :, None]
    return ((y < rows) & (x < cols)).astype(jnp.float32)


def penalty_reduced_focal_loss(logits: jnp.ndarray, targets: jnp.ndarray, *,
                               alpha: float = 2.0, beta: float = 4.0,
                               clip: float = 1e-4) -> jnp.ndarray:
    """The Objects-as-Points heatmap loss per pixel and class (TF
    ``PenaltyReducedLogisticFocalLoss``): with ``p = clip(sigmoid(logit), clip, 1 - clip)``,
    ``-(1 - p)^alpha log p`` where the target is exactly 1, else
    ``-(1 - y)^beta p^alpha log(1 - p)``. Same shape as ``logits``; not normalized (the
    caller divides by the number of objects)."""
    p = jnp.clip(jax.nn.sigmoid(logits.astype(jnp.float32)), clip, 1.0 - clip)
    y = targets.astype(jnp.float32)
    positive = (1.0 - p) ** alpha * jnp.log(p)
    negative = (1.0 - y) ** beta * p ** alpha * jnp.log(1.0 - p)
    return -jnp.where(y == 1.0, positive, negative)


def top_k_peaks(heatmap: jnp.ndarray, k: int, *, kernel: int = 3
                ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """The ``k`` highest local maxima of a batch of heatmaps (TF
    ``top_k_feature_map_locations``, not per channel): a pixel keeps its score where it equals
    the maximum of its ``kernel`` x ``kernel`` neighbourhood (SAME padding) in its channel,
    else 0; the top k of every (y, x, class) follow, ties to the lower flat index.

    Args:
      heatmap: [B, h, w, C] scores (after the sigmoid).
    Returns:
      scores [B, k], y [B, k] int32, x [B, k] int32, classes [B, k] int32.
    """
    b, h, w, c = heatmap.shape
    if kernel and kernel > 1:
        pooled = reduce_window_2d(heatmap, -jnp.inf, jax.lax.max, (kernel, kernel), (1, 1),
                                  "SAME")
        heatmap = heatmap * (jnp.abs(heatmap - pooled) < PEAK_EPSILON).astype(heatmap.dtype)
    scores, flat = jax.lax.top_k(heatmap.reshape(b, h * w * c), k)
    y = flat // (w * c)
    x = (flat // c) % w
    return scores, y.astype(jnp.int32), x.astype(jnp.int32), (flat % c).astype(jnp.int32)


def decode_boxes(y: jnp.ndarray, x: jnp.ndarray, sizes: jnp.ndarray,
                 offsets: jnp.ndarray) -> jnp.ndarray:
    """Boxes of peaks (TF ``prediction_tensors_to_boxes``): the size and offset predicted at
    each peak pixel, ``center = pixel + offset``, sizes below 0 taken as 0, clipped to the map.

    Args:
      y, x: [B, K] int peak pixels; sizes, offsets: [B, h, w, 2] (height, width) and
        (dy, dx) predictions.
    Returns:
      f32[B, K, 4] yxyx in output pixels.
    """
    _, h, w, _ = sizes.shape
    take = jax.vmap(lambda m, yy, xx: m[yy, xx])
    hw = jnp.maximum(take(sizes, y, x), 0.0)
    off = take(offsets, y, x)
    cy = y.astype(jnp.float32) + off[..., 0]
    cx = x.astype(jnp.float32) + off[..., 1]
    half_h, half_w = hw[..., 0] / 2.0, hw[..., 1] / 2.0
    return jnp.stack([jnp.clip(cy - half_h, 0.0, h), jnp.clip(cx - half_w, 0.0, w),
                      jnp.clip(cy + half_h, 0.0, h), jnp.clip(cx + half_w, 0.0, w)], axis=-1)


__all__ = ["PEAK_EPSILON", "center_heatmap_targets", "decode_boxes", "gaussian_sigma",
           "max_distance_for_overlap", "penalty_reduced_focal_loss",
           "size_and_offset_targets", "top_k_peaks", "true_image_pixels"]
