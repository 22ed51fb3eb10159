"""Pixel normalization on the device: the loaders send raw pixels, the jitted step normalizes.

The input pipeline ends at the resizer: a batch's ``images`` hold 0..255 values, uint8 for
training (a quarter of float32's bytes on the wire, the host spends nothing on normalizing)
and float32 for eval and predict (the resizer's exact values, so TF checkpoints see what TF
computes). :class:`PixelNormalizer` turns them into the network's input inside the jitted
train step or predict function, with ``image_info`` (content size, for the padding):

    x = images * (1 / std) + (-mean / std)   per colour channel, float32
    x = 0 outside the content                with ``zero_padding`` (the TF OD API SSD family)

exactly what ``data.augment.Normalize`` computes on the host (``augment.scale_and_offset``).
``transfer_layout`` is the batch the loader sends for a task whose ``batch_layout`` holds the
normalized ``images``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet.data.augment import scale_and_offset
from jaxdet.data.batch_layout import BatchField, BatchLayout


@dataclasses.dataclass(frozen=True)
class PixelNormalizer:
    """``(images - mean) / std``, and 0 outside each image's content when ``zero_padding``.

    ``mean`` / ``std``: per RGB channel, in pixel units (0..255); ``dtype``: of the result."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    zero_padding: bool = True
    dtype: Any = jnp.float32

    def __call__(self, images: jax.Array, image_info: jax.Array) -> jax.Array:
        """images [B, H, W, 3] (uint8 or float, 0..255), image_info f32 [B, 4] = (orig_h,
        orig_w, content_h, content_w) -> [B, H, W, 3] of ``dtype``: computed in float32, then
        cast (for bf16 / fp16 networks, which cast their input: the same values, half the
        bytes)."""
        scale, offset = scale_and_offset(self.mean, self.std)
        x = images.astype(jnp.float32) * scale + offset
        if not self.zero_padding:
            return x.astype(self.dtype)
        content = jnp.round(image_info[:, 2:4].astype(jnp.float32)).astype(jnp.int32)
        rows = jnp.arange(x.shape[1], dtype=jnp.int32)[None, :] < content[:, 0:1]
        cols = jnp.arange(x.shape[2], dtype=jnp.int32)[None, :] < content[:, 1:2]
        # a product of 0/1 factors: one fused multiply, cheaper than a 4-D select
        inside = rows.astype(jnp.float32)[:, :, None, None] * cols.astype(
            jnp.float32)[:, None, :, None]
        return (x * inside).astype(self.dtype)

    def normalize_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` with its raw ``images`` replaced by the network's input."""
        return {**batch, "images": self(batch["images"], batch["image_info"])}


def transfer_layout(layout: BatchLayout, image_dtype: Any) -> BatchLayout:
    """The batch a loader sends for a task reading ``layout``: ``images`` of ``image_dtype``
    (raw pixels, split over the mesh as the task's are) and ``image_info`` f32[4]."""
    images = layout["images"]
    out = dict(layout)
    out["images"] = BatchField(images.shape, np.dtype(image_dtype), images.spatial_axis)
    out.setdefault("image_info", BatchField((4,), jnp.float32))
    return out


__all__ = ["PixelNormalizer", "transfer_layout"]
