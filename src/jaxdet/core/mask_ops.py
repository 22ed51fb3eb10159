"""Instance masks on the output side: Mask R-CNN's per-box masks pasted into the image frame.

The same values as the TF OD API's ``object_detection/utils/ops``
(``reframe_image_corners_relative_to_boxes``, ``reframe_box_masks_to_image_masks``) and the
``> 0.5`` binarization its evaluation and exporters apply. Pure ``jnp`` with static shapes
(``N`` masks, the mask size and the image size are static), so the functions run eagerly,
under ``jax.jit`` and ``jax.vmap``.

Coordinate conventions (TF's):

* ``boxes`` are ``(ymin, xmin, ymax, xmax)`` normalized to the image the masks are pasted
  into: ``0`` is the first pixel's center and ``1`` the last one's (``y -> y (H - 1)``, the
  ``align_corners`` convention of ``tf.image.crop_and_resize``).
* a box mask ``[mh, mw]`` covers its box the same way: its first / last rows sit on the
  box's ``ymin`` / ``ymax``, its first / last columns on ``xmin`` / ``xmax``.
* pasting is bilinear resampling of the box mask at every image pixel; a pixel whose sample
  lies outside the box mask (beyond its first / last row or column, by any amount) is ``0``
  (``tf.image.crop_and_resize``'s ``extrapolation_value``), so the pasted mask does not
  bleed past its box. Whether a sample is on the box mask is decided with TF's arithmetic
  (``start (m - 1) + i step`` in the masks' dtype); a sample that lands on the mask's first
  or last row / column up to float rounding (an image pixel center exactly on a box edge) can
  come out on or off depending on the backend's rounding (XLA fuses multiply-adds under
  ``jit``; TF's CPU kernel does not), so there such a pixel is either the mask's edge value
  or ``0``. Everywhere else the values equal TF's to float32 rounding.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxdet.core import roi_ops

MIN_BOX_SIZE = 1e-4  # TF floors a box's normalized height / width at this before dividing
MASK_THRESHOLD = 0.5  # TF's eval_util / exporters: a pixel is in the mask when value > 0.5


def image_corners_in_box_frame(boxes: jnp.ndarray) -> jnp.ndarray:
    """The image's corners ``(0, 0, 1, 1)`` in each box's own normalized frame.

    In a box's frame its own corners are ``(0, 0, 1, 1)``; the image box is then
    ``(-ymin / h, -xmin / w, (1 - ymin) / h, (1 - xmin) / w)`` with ``h = max(ymax - ymin,
    1e-4)`` and ``w`` likewise (TF's ``reframe_image_corners_relative_to_boxes``).

    Args:
      boxes: ``[..., 4]`` normalized ``(ymin, xmin, ymax, xmax)`` float.

    Returns:
      ``[..., 4]`` normalized ``(ymin, xmin, ymax, xmax)`` of the image in the box frames.
    """
    ymin, xmin, ymax, xmax = jnp.moveaxis(boxes, -1, 0)
    height = jnp.maximum(ymax - ymin, MIN_BOX_SIZE)
    width = jnp.maximum(xmax - xmin, MIN_BOX_SIZE)
    return jnp.stack([(0.0 - ymin) / height, (0.0 - xmin) / width,
                      (1.0 - ymin) / height, (1.0 - xmin) / width], axis=-1)


def _on_mask(start: jnp.ndarray, end: jnp.ndarray, size: int, extent: int) -> jnp.ndarray:
    """Whether each of ``size`` crop-and-resize samples from ``start[N]`` to ``end[N]``
    (normalized to a map of ``extent`` pixels) lands on the map: ``[N, size]`` bool.

    Sample ``i`` lies at ``start (extent - 1) + i (end - start) (extent - 1) / (size - 1)``
    (the middle for ``size == 1``), in ``tf.image.crop_and_resize``'s order of operations:
    the decision is TF's except where float rounding decides it (module docstring).
    """
    last = float(extent - 1)
    if size > 1:
        step = (end - start) * last / float(size - 1)
        pos = start[:, None] * last + jnp.arange(size, dtype=start.dtype)[None, :] * step[:, None]
    else:
        pos = (0.5 * (start + end) * last)[:, None]
    return (pos >= 0.0) & (pos <= last)


def reframe_box_masks_to_image_masks(
    box_masks: jnp.ndarray,
    boxes: jnp.ndarray,
    image_height: int,
    image_width: int,
    *,
    method: roi_ops.Method = "matmul",
) -> jnp.ndarray:
    """Pastes per-box masks into the image frame (TF ``ops.reframe_box_masks_to_image_masks``).

    Each box mask is bilinearly resampled at every image pixel: a crop-and-resize of the box
    mask over :func:`image_corners_in_box_frame` of its box, to ``image_height x
    image_width``; pixels whose sample falls outside the box mask are ``0``.

    Args:
      box_masks: ``[N, mh, mw]`` float masks in box coordinates (Mask R-CNN's per-detection
        mask probabilities, in ``[0, 1]``); other dtypes are cast to float32.
      boxes: ``[N, 4]`` normalized ``(ymin, xmin, ymax, xmax)`` in the image frame (a box
        thinner than ``1e-4`` is treated as ``1e-4`` thick; flipped boxes flip the mask).
      image_height, image_width: the output size, static ints.
      method: ``roi_ops`` back-end for the resampling (``"matmul"``: two small one-hot matrix
        products per mask, memory ``N (H mh + W mw)``; ``"gather"``: memory ``4 N H W``).

    Returns:
      ``[N, image_height, image_width]`` in the masks' float dtype.
    """
    if box_masks.ndim != 3 or boxes.shape != (box_masks.shape[0], 4):
        raise ValueError(f"need box_masks [N, mh, mw] and boxes [N, 4]; got {box_masks.shape} "
                         f"and {boxes.shape}")
    height, width = int(image_height), int(image_width)
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive; got {height} x {width}")
    masks = box_masks if jnp.issubdtype(box_masks.dtype, jnp.floating) else (
        box_masks.astype(jnp.float32))
    n, mh, mw = masks.shape
    if n == 0:
        return jnp.zeros((0, height, width), masks.dtype)
    frames = image_corners_in_box_frame(boxes.astype(masks.dtype))
    # each mask is its own "image" holding one box: [N, mh, mw, 1] with boxes [N, 1, 4]
    crops = roi_ops.matmul_crop_and_resize(masks[..., None], frames[:, None, :],
                                           (height, width), 0.0, method=method)[:, 0, ..., 0]
    # roi_ops blends a sample less than a pixel off the mask with the extrapolation value;
    # tf.image.crop_and_resize (which TF's reframing uses) gives the extrapolation value.
    on_y = _on_mask(frames[:, 0], frames[:, 2], height, mh)
    on_x = _on_mask(frames[:, 1], frames[:, 3], width, mw)
    return jnp.where(on_y[:, :, None] & on_x[:, None, :], crops, jnp.zeros((), crops.dtype))


def threshold_masks(masks: jnp.ndarray, threshold: float = MASK_THRESHOLD) -> jnp.ndarray:
    """Binary uint8 masks: ``1`` where ``masks > threshold`` (strictly, as TF), else ``0``.

    Args:
      masks: ``[...]`` float mask probabilities (e.g. ``[N, H, W]`` pasted masks).
      threshold: static or traced scalar; TF's evaluation and exporters use 0.5.

    Returns:
      ``[...]`` uint8 in ``{0, 1}``.
    """
    return (masks > threshold).astype(jnp.uint8)


__all__ = ["MASK_THRESHOLD", "MIN_BOX_SIZE", "image_corners_in_box_frame",
           "reframe_box_masks_to_image_masks", "threshold_masks"]
