"""Map detections from the padded network input back to original-image pixels."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def to_original_coordinates(boxes, image_info, input_size: Sequence[int]):
    """Convert normalized boxes on the padded network input to original-image pixels.

    Args:
      boxes: ``[B, D, 4]`` (ymin, xmin, ymax, xmax) normalized to the padded network
        input of size ``input_size`` (so 1.0 is the bottom/right edge of the padding).
      image_info: ``[B, 4]`` = (orig_h, orig_w, content_h, content_w): the original image
        size and the size, in input pixels, of the resized image inside the padded input
        (its top-left corner at the origin).
      input_size: the padded input ``(H, W)``.

    Returns:
      ``[B, D, 4]`` boxes in original-image pixels, ``y = y_norm * H * orig_h / content_h``
      (likewise x), clipped to ``[0, orig_h] x [0, orig_w]``. A numpy array for numpy
      inputs, a ``jax.Array`` for jax inputs (jittable).
    """
    xp = jnp if isinstance(boxes, jax.Array) or isinstance(image_info, jax.Array) else np
    boxes = xp.asarray(boxes)
    if not xp.issubdtype(boxes.dtype, xp.floating):
        boxes = boxes.astype(xp.float32)
    info = xp.asarray(image_info).astype(boxes.dtype)
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must be [B, D, 4], got shape {tuple(boxes.shape)}.")
    if info.shape != (boxes.shape[0], 4):
        raise ValueError(
            f"image_info must be [B, 4] = (orig_h, orig_w, content_h, content_w) with "
            f"B = {boxes.shape[0]}, got shape {tuple(info.shape)}."
        )
    height, width = (float(s) for s in input_size)
    orig_h, orig_w = info[:, 0], info[:, 1]
    # Padded rows of an eval batch may carry zeros: keep the arithmetic finite.
    content_h = xp.maximum(info[:, 2], 1.0)
    content_w = xp.maximum(info[:, 3], 1.0)
    scale_y = (height * orig_h / content_h)[:, None]
    scale_x = (width * orig_w / content_w)[:, None]
    ymin = xp.clip(boxes[..., 0] * scale_y, 0.0, orig_h[:, None])
    xmin = xp.clip(boxes[..., 1] * scale_x, 0.0, orig_w[:, None])
    ymax = xp.clip(boxes[..., 2] * scale_y, 0.0, orig_h[:, None])
    xmax = xp.clip(boxes[..., 3] * scale_x, 0.0, orig_w[:, None])
    return xp.stack([ymin, xmin, ymax, xmax], axis=-1)


def points_to_original_coordinates(points, image_info, input_size: Sequence[int]):
    """Convert normalized (y, x) points on the padded network input to original-image pixels,
    with the scale of :func:`to_original_coordinates` (not clipped: a keypoint may lie
    outside the image, as the TF OD API returns it).

    Args:
      points: ``[B, D, K, 2]`` normalized (y, x); image_info: ``[B, 4]``; input_size: (H, W).
    Returns:
      ``[B, D, K, 2]`` (y, x) in original-image pixels (numpy or jax, as the inputs).
    """
    xp = jnp if isinstance(points, jax.Array) or isinstance(image_info, jax.Array) else np
    points = xp.asarray(points)
    info = xp.asarray(image_info).astype(points.dtype)
    if points.ndim != 4 or points.shape[-1] != 2 or info.shape != (points.shape[0], 4):
        raise ValueError(f"points must be [B, D, K, 2] and image_info [B, 4], got "
                         f"{tuple(points.shape)} and {tuple(info.shape)}")
    height, width = (float(s) for s in input_size)
    scale_y = height * info[:, 0] / xp.maximum(info[:, 2], 1.0)
    scale_x = width * info[:, 1] / xp.maximum(info[:, 3], 1.0)
    scale = xp.stack([scale_y, scale_x], axis=-1)[:, None, None, :]
    return points * scale


__all__ = ["points_to_original_coordinates", "to_original_coordinates"]
