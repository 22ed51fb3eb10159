"""The whole detector as one function of raw images, with the TF OD API exporter's signature.

``serving_function(...)`` returns ``fn(images) -> outputs`` that any exporter can trace:

* input ``image_tensor`` uint8 [B, h, w, 3] (or ``float_image_tensor`` float32 [B, h, w, 3] in
  0..255), RGB, of the size fixed at export (``input_size``, default the model's own);
* inside: the config's resizer (in-graph, static sizes: ``fixed_shape`` or
  ``keep_aspect_ratio`` + padding), the normalization (padding as the family pads it), the
  task's static-shape predict (box decoding and NMS, or CenterNet's peaks);
* outputs, as the TF OD API's exporter names them: ``num_detections`` f32 [B],
  ``detection_boxes`` f32 [B, D, 4] (ymin, xmin, ymax, xmax) normalized to the input image,
  ``detection_scores`` f32 [B, D], ``detection_classes`` f32 [B, D] (label-map ids), and for
  models with keypoint tasks ``detection_keypoints`` f32 [B, D, K, 2] ((y, x) normalized) and
  ``detection_keypoint_scores`` f32 [B, D, K] (zero outside the detection's class's keypoints);
  for Mask R-CNN ``detection_masks`` f32 [B, D, mask_height, mask_width]: each detection's
  own-class mask probabilities in its box (TF's exporter output, before reframing to the
  image).

The weights are closed over (constants of the traced program), so an artifact is the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet.config import schema as S
from jaxdet.data.geometry import tf_resize_axis
from jaxdet.data.resize import keep_aspect_ratio_size

INPUT_TYPES = ("image_tensor", "float_image_tensor", "encoded_image_string_tensor")
OUTPUT_NAMES = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


def resize(images: jax.Array, height: int, width: int, method: str) -> jax.Array:
    """Resizes f32 [B, h, w, C] to [B, height, width, C] in the graph.

    ``tf_bilinear`` computes exactly what ``data.geometry.resize_image_tf`` (and the TF OD API)
    computes; ``bilinear`` is ``jax.image.resize``'s antialiased linear resize (half-pixel
    centres) as two matmuls, which approximates the host pipeline's Pillow resize (equal when
    the size does not change)."""
    b, h, w, c = images.shape
    if (h, w) == (height, width):
        return images
    if method == "tf_bilinear":
        y0, y1, dy = tf_resize_axis(h, height)
        x0, x1, dx = tf_resize_axis(w, width)
        dx = jnp.asarray(dx)[None, None, :, None]
        rows0, rows1 = images[:, y0], images[:, y1]
        top = rows0[:, :, x0] + (rows0[:, :, x1] - rows0[:, :, x0]) * dx
        bottom = rows1[:, :, x0] + (rows1[:, :, x1] - rows1[:, :, x0]) * dx
        return top + (bottom - top) * jnp.asarray(dy)[None, :, None, None]
    wy, wx = _linear_resize_matrix(h, height), _linear_resize_matrix(w, width)
    return jnp.einsum("yh,bhwc,xw->byxc", wy, images, wx)


def _linear_resize_matrix(size: int, new_size: int) -> np.ndarray:
    """f32 [new_size, size]: an antialiased linear resize of one axis as a matrix, the weights
    ``jax.image.resize(..., "linear", antialias=True)`` uses: output pixel i samples the input
    at ``(i + 0.5) / scale - 0.5`` with a triangle kernel widened by ``1 / scale`` when
    shrinking, weights normalized to sum 1. A matmul in the artifact, which every exporter
    lowers (ONNX has no antialiased resize)."""
    scale = new_size / size
    support = max(1.0 / scale, 1.0)
    centres = (np.arange(new_size) + 0.5) / scale - 0.5
    weights = np.maximum(0.0, 1.0 - np.abs(centres[:, None] - np.arange(size)[None]) / support)
    return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


def preprocess(images: jax.Array, data: S.DataConfig, *, pads_raw_pixels: bool
               ) -> tuple[jax.Array, jax.Array]:
    """Raw RGB images [B, h, w, 3] (0..255) -> (network input f32 [B, H, W, 3], image_info f32
    [B, 4] = (h, w, content_h, content_w)), as ``data.build.build_transforms`` does on the host
    for an eval sample. Sizes are static (``h``, ``w`` fixed at export)."""
    x = images.astype(jnp.float32)
    b, h, w, _ = x.shape
    r = data.resizer
    if isinstance(r, S.FixedShapeResizerConfig):
        content, canvas = (r.height, r.width), (r.height, r.width)
    else:
        if not r.pad_to_max_dimension:
            raise ValueError("data.resizer.pad_to_max_dimension is false: the input size "
                             "varies per image, which a static-shape artifact cannot take")
        content = keep_aspect_ratio_size(h, w, r.min_dimension, r.max_dimension)
        canvas = (r.max_dimension, r.max_dimension)
    x = resize(x, *content, r.method)
    mean = jnp.asarray(data.mean, jnp.float32)
    std = jnp.asarray(data.std, jnp.float32)
    pad = ((0, 0), (0, canvas[0] - content[0]), (0, canvas[1] - content[1]), (0, 0))
    if pads_raw_pixels:  # black pixels, normalized with the image (TF's CenterNet)
        x = (jnp.pad(x, pad) - mean) / std
    else:  # zeros after the normalization (TF's SSD family)
        x = jnp.pad((x - mean) / std, pad)
    info = jnp.tile(jnp.asarray([[h, w, *content]], jnp.float32), (b, 1))
    return x, info


def keypoint_slot_mask(layout: Any, num_classes: int) -> np.ndarray | None:
    """f32 [C, K]: 1 at the slots of each class's keypoint group (None without keypoints)."""
    if not layout:
        return None
    return layout.slot_mask(np.arange(num_classes)).astype(np.float32)


def serving_function(task: Any, config: S.Config, params: Any, batch_stats: Any, *,
                     class_ids: Sequence[int], pads_raw_pixels: bool,
                     keypoint_layout: Any = None) -> Callable[[jax.Array], dict]:
    """``fn(images [B, h, w, 3] uint8 or f32 0..255) -> outputs`` (see the module docstring)
    of ``task`` with ``params`` / ``batch_stats`` closed over; ``class_ids[k]`` is the label
    id of class index ``k``."""
    ids = jnp.asarray(np.asarray(class_ids, np.float32))
    slot_mask = keypoint_slot_mask(keypoint_layout, len(class_ids))

    def fn(images: jax.Array) -> dict:
        x, info = preprocess(images, config.data, pads_raw_pixels=pads_raw_pixels)
        det = task.predict(params, batch_stats, x, info)
        scale = info[:, None, :2]  # original (h, w)
        classes = jnp.clip(det["classes"], 0, len(class_ids) - 1)
        out = {
            "num_detections": det["num_detections"].astype(jnp.float32),
            "detection_boxes": det["boxes"] / jnp.concatenate([scale, scale], axis=-1),
            "detection_scores": det["scores"].astype(jnp.float32),
            "detection_classes": ids[classes],
        }
        if "keypoints" in det and slot_mask is not None:
            own = jnp.asarray(slot_mask)[classes]  # [B, D, K]
            out["detection_keypoints"] = det["keypoints"] / scale[:, :, None, :] * own[..., None]
            out["detection_keypoint_scores"] = det["keypoint_scores"] * own
        if "masks" in det:
            out["detection_masks"] = det["masks"].astype(jnp.float32)
        return out

    return fn


__all__ = ["INPUT_TYPES", "OUTPUT_NAMES", "keypoint_slot_mask", "preprocess", "resize",
           "serving_function"]
