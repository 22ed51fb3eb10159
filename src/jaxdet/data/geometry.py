"""Host-side geometry shared by augment ops and resizers: image resize, box re-framing.

Samples carry images [H, W, 3] of 0..255 values (uint8 as decoded, or float32 once an op
computed fractional values; every op keeps a uint8 image uint8, rounding what it computes)
and NORMALIZED yxyx boxes, and may carry
NORMALIZED (y, x) ``keypoints`` [n, K, 2] with ``keypoint_visibility`` [n, K] (see
``data.keypoints``) and uint8 instance ``masks`` [n, h, w] covering the image (see
``data.masks``; each op moves them as it moves the image). Per-box arrays
(:data:`PER_BOX_KEYS`) are filtered together whenever boxes are dropped; keypoints move with
the boxes, and one that leaves the visible window becomes unlabelled (v = 0, coordinates 0), as
the TF OD API's ``prune_outside_window`` makes it NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxdet.data import resample

PER_BOX_KEYS = ("boxes", "classes", "is_crowd", "keypoints", "keypoint_visibility", "masks")

Sample = dict[str, Any]


def resize_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize (antialiased when shrinking) of an [H, W, C] image: Pillow's
    ``BILINEAR`` filter (see ``data.resample``). float32 in float32 out; uint8 in, uint8 out
    (rounded).

    Pixel centres follow the half-pixel convention, so normalized coordinates are preserved:
    a feature spanning [a, b) of the input spans [a * s, b * s) of the output.
    """
    return resample.resize(_image(image), height, width, "bilinear")


def tf_resize_axis(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, float32 weight of upper) of TF v1 bilinear along one axis:
    output pixel i samples the input at ``i * in_size / out_size`` (no half-pixel shift)."""
    axis = resample.tf_axis(in_size, out_size)
    return axis.lower.astype(np.int64), axis.upper.astype(np.int64), axis.weight


def resize_image_tf(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """TF OD API's resize (``tf.compat.v1.image.resize_images``, bilinear, no antialiasing,
    not half-pixel aligned) of an [H, W, C] image, in float32 arithmetic as TF does:
    ``top = tl + (tr - tl) * dx``, ``bottom = bl + (br - bl) * dx``, ``top + (bottom - top) *
    dy``. Checkpoints trained with the TF OD API see their inputs resized this way. float32 in,
    float32 out (bit-equal to TF); uint8 in, uint8 out (TF's values rounded)."""
    return resample.resize(_image(image), height, width, "tf_bilinear")


def _image(image: np.ndarray) -> np.ndarray:
    """uint8 images stay uint8; anything else is read as float32."""
    image = np.asarray(image)
    return image if image.dtype in (np.uint8, np.float32) else image.astype(np.float32)


RESIZE_METHODS = {"bilinear": resize_image, "tf_bilinear": resize_image_tf}


def filter_boxes(sample: Sample, keep: np.ndarray) -> Sample:
    """Keeps only the objects where ``keep`` is True, in every per-box array."""
    out = dict(sample)
    for key in PER_BOX_KEYS:
        if key in out:
            out[key] = np.asarray(out[key])[keep]
    return out


def move_keypoints(sample: Sample, scale: tuple[float, float], offset: tuple[float, float],
                   bounds: tuple[float, float, float, float] | None = (0.0, 0.0, 1.0, 1.0)
                   ) -> Sample:
    """Applies ``kp * scale + offset`` to the NORMALIZED (y, x) keypoints of ``sample`` (no-op
    without keypoints). A keypoint outside ``bounds`` (normalized y0, x0, y1, x1 of the new
    frame; edges inside; None: no pruning) becomes unlabelled: v = 0, coordinates 0. Returns
    a new dict (the input is not modified)."""
    if "keypoints" not in sample:
        return dict(sample)
    kp = np.asarray(sample["keypoints"], np.float32)
    vis = np.asarray(sample["keypoint_visibility"], np.int32).copy()
    new = (kp * np.asarray(scale, np.float32) + np.asarray(offset, np.float32)).astype(
        np.float32)
    if bounds is not None:
        y0, x0, y1, x1 = bounds
        inside = ((new[..., 0] >= y0) & (new[..., 0] <= y1) & (new[..., 1] >= x0)
                  & (new[..., 1] <= x1))
        vis = np.where(inside, vis, 0).astype(np.int32)
    new[vis == 0] = 0.0
    out = dict(sample)
    out["keypoints"], out["keypoint_visibility"] = new, vis
    return out


def box_areas(boxes: np.ndarray) -> np.ndarray:
    return np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)


def reframe_boxes(
    sample: Sample,
    *,
    src_size: tuple[int, int],
    offset: tuple[float, float],
    window: tuple[float, float, float, float] | None,
    canvas_size: tuple[int, int],
    min_visible_fraction: float = 0.0,
    keep: np.ndarray | None = None,
) -> Sample:
    """Moves normalized boxes from a (src_h, src_w) image into a new canvas.

    A box's pixels ``p`` in the source become ``p * scale + offset`` in the canvas where
    ``scale`` is folded into ``src_size`` (callers pass the size the boxes are measured in).
    Boxes are clipped to ``window`` (canvas pixels, y0, x0, y1, x1; None = whole canvas);
    those with zero area left, or less than ``min_visible_fraction`` of their area, are
    dropped together with their classes / is_crowd. ``keep`` adds an extra filter. Keypoints
    move the same way; those outside ``window`` become unlabelled.
    """
    boxes = np.asarray(sample["boxes"], np.float32).reshape(-1, 4)
    src_h, src_w = src_size
    can_h, can_w = canvas_size
    px = boxes * np.array([src_h, src_w, src_h, src_w], np.float32)
    px = px + np.array([offset[0], offset[1], offset[0], offset[1]], np.float32)
    if window is None:
        window = (0.0, 0.0, float(can_h), float(can_w))
    wy0, wx0, wy1, wx1 = window
    clipped = np.stack([
        np.clip(px[:, 0], wy0, wy1), np.clip(px[:, 1], wx0, wx1),
        np.clip(px[:, 2], wy0, wy1), np.clip(px[:, 3], wx0, wx1),
    ], axis=1) if len(px) else px
    before, after = box_areas(px), box_areas(clipped)
    visible = np.where(before > 0, after / np.maximum(before, 1e-12), 0.0)
    mask = (after > 0) & (visible >= min_visible_fraction)
    if keep is not None:
        mask &= keep
    out = move_keypoints(
        sample, scale=(src_h / can_h, src_w / can_w),
        offset=(offset[0] / can_h, offset[1] / can_w),
        bounds=(wy0 / can_h, wx0 / can_w, wy1 / can_h, wx1 / can_w))
    out["boxes"] = (clipped / np.array([can_h, can_w, can_h, can_w], np.float32)).astype(
        np.float32)
    return filter_boxes(out, mask)


def set_content_size(
    sample: Sample, content_h: float, content_w: float, input_size: tuple[int, int]
) -> Sample:
    """Sets image_info = (orig_h, orig_w, content_h, content_w) in place.

    ``orig`` is kept from an existing image_info (the decoded image's size); without one,
    ``input_size`` (the op's input image size) is taken as the original.
    """
    info = sample.get("image_info")
    orig = input_size if info is None else (float(info[0]), float(info[1]))
    sample["image_info"] = np.array([orig[0], orig[1], content_h, content_w], np.float32)
    return sample
