"""DeepMAC's pure pieces (the TF OD API's ``DeepMACMetaArch``, arXiv 2104.00613): the mask
network's per-box input, the ground-truth mask targets, the allowed-class filter and the mask
loss. Static shapes throughout: ``N`` boxes per image (padded ones weighted 0).

Coordinates: boxes are normalized ``(ymin, xmin, ymax, xmax)`` of the padded input, which is
also the frame of the stride-``s`` output maps (an output row ``r`` of ``h`` sits at
normalized ``r / h`` for the box centers, at ``r / (h - 1)`` for crop-and-resize, TF's two
conventions, both kept).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdet.core.losses import weighted_sigmoid_loss
from jaxdet.core.roi_ops import Method, matmul_crop_and_resize


def coordinate_grid(size: int) -> jnp.ndarray:
    """f32[size, size, 2]: channel 0 the row's y, channel 1 the column's x, each from -1 (first
    row / column) to 1 (last) in equal steps (TF's ``linspace(-1, 1, size)`` meshgrid)."""
    ramp = jnp.linspace(-1.0, 1.0, size, dtype=jnp.float32)
    y, x = jnp.meshgrid(ramp, ramp, indexing="ij")
    return jnp.stack([y, x], axis=-1)


def box_center_embeddings(embedding: jnp.ndarray, boxes: jnp.ndarray) -> jnp.ndarray:
    """The embedding at each box's center pixel: ``embedding [B, h, w, C]``, ``boxes
    [B, N, 4]`` -> ``[B, N, C]``. The pixel is ``floor((ymin + ymax) / 2 * h)``,
    ``floor((xmin + xmax) / 2 * w)`` (TF's int cast of the center in output pixels), clipped
    to the map (TF reads past it for a box reaching the bottom / right edge)."""
    b, h, w, c = embedding.shape
    cy = jnp.floor((boxes[..., 0] + boxes[..., 2]) * (h / 2.0)).astype(jnp.int32)
    cx = jnp.floor((boxes[..., 1] + boxes[..., 3]) * (w / 2.0)).astype(jnp.int32)
    index = jnp.clip(cy, 0, h - 1) * w + jnp.clip(cx, 0, w - 1)  # [B, N]
    flat = embedding.reshape(b, h * w, c)
    return jnp.take_along_axis(flat, index[..., None], axis=1)


def mask_input_channels(pixel_embedding_dim: int, dim: int, *, use_xy: bool,
                        use_instance_embedding: bool) -> int:
    """Channels of :func:`mask_head_inputs`: 2 (with ``use_xy``) + the pixel embedding's +
    the instance embedding's (with ``use_instance_embedding``)."""
    return 2 * use_xy + pixel_embedding_dim + dim * use_instance_embedding


def mask_head_inputs(pixel_embedding: jnp.ndarray, instance_embedding: jnp.ndarray,
                     boxes: jnp.ndarray, mask_size: int, *, use_xy: bool = True,
                     use_instance_embedding: bool = True,
                     method: Method = "gather") -> jnp.ndarray:
    """The mask network's input of every box: ``[B, N, S, S, C_in]`` (S = ``mask_size``).

    Channels, in order: with ``use_xy`` the :func:`coordinate_grid` (y, x); the pixel
    embedding ``[B, h, w, P]`` cropped at the box and resized to S x S (bilinear
    crop-and-resize, ``core.roi_ops.matmul_crop_and_resize``: the box's corners are the first
    and last samples); with ``use_instance_embedding`` the instance embedding ``[B, h, w, D]``
    at the box center (:func:`box_center_embeddings`) repeated over the S x S grid.
    """
    crops = matmul_crop_and_resize(pixel_embedding, boxes.astype(pixel_embedding.dtype),
                                   (mask_size, mask_size), method=method)
    b, n = boxes.shape[:2]
    parts = []
    if use_xy:
        grid = coordinate_grid(mask_size).astype(crops.dtype)
        parts.append(jnp.broadcast_to(grid, (b, n, mask_size, mask_size, 2)))
    parts.append(crops)
    if use_instance_embedding:
        centers = box_center_embeddings(instance_embedding, boxes).astype(crops.dtype)
        parts.append(jnp.broadcast_to(centers[:, :, None, None, :],
                                      (b, n, mask_size, mask_size, centers.shape[-1])))
    return jnp.concatenate(parts, axis=-1)


def crop_instance_masks(masks: jnp.ndarray, boxes: jnp.ndarray, mask_size: int, *,
                        method: Method = "gather") -> jnp.ndarray:
    """Each box's own ground-truth mask cropped at the box and resized to S x S (bilinear, as
    the pixel embeddings; TF's ``crop_and_resize_instance_masks``), gradients stopped.

    Args:
      masks: ``[B, N, Hm, Wm]`` 0 / 1 (any dtype) on the padded input's grid at any stride.
      boxes: ``[B, N, 4]`` normalized; box ``i`` crops mask ``i``.
    Returns:
      f32 ``[B, N, S, S]`` in [0, 1].
    """
    b, n, hm, wm = masks.shape
    crops = matmul_crop_and_resize(masks.reshape(b * n, hm, wm, 1).astype(jnp.float32),
                                   boxes.reshape(b * n, 1, 4).astype(jnp.float32),
                                   (mask_size, mask_size), method=method)
    return jax.lax.stop_gradient(crops.reshape(b, n, mask_size, mask_size))


def allowed_class_weights(classes: jnp.ndarray, weights: jnp.ndarray,
                          allowed: tuple[int, ...]) -> jnp.ndarray:
    """``weights [B, N]`` with the boxes whose ``classes [B, N]`` (0-based) are not in
    ``allowed`` set to 0 (TF's ``filter_masked_classes``); ``allowed`` empty: unchanged."""
    if not allowed:
        return weights
    keep = jnp.any(classes[..., None] == jnp.asarray(allowed, classes.dtype), axis=-1)
    return weights * keep.astype(weights.dtype)


def mask_loss_sum(logits: jnp.ndarray, targets: jnp.ndarray,
                  weights: jnp.ndarray) -> jnp.ndarray:
    """The summed DeepMAC mask loss: sigmoid cross-entropy of ``logits [B, N, S, S]`` against
    ``targets`` (same shape, in [0, 1]) averaged over each box's S x S pixels, times the
    box's weight ``[B, N]``, summed (f32 scalar). TF divides it by ``max(sum(weights), 1)``."""
    per_box = jnp.mean(weighted_sigmoid_loss(logits.astype(jnp.float32), targets),
                       axis=(-2, -1))
    return jnp.sum(per_box * weights)


__all__ = ["allowed_class_weights", "box_center_embeddings", "coordinate_grid",
           "crop_instance_masks", "mask_head_inputs", "mask_input_channels", "mask_loss_sum"]
