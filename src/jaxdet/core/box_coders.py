"""Box coders: boxes <-> regression targets relative to anchors.

Frozen dataclasses (hashable, so they can be passed as static arguments to ``jax.jit``)
with ``encode(boxes[..., 4], anchors[..., 4]) -> codes[..., code_size]`` and
``decode(codes, anchors) -> boxes``. Anchors broadcast against boxes/codes, so the same
``[A, 4]`` anchors serve a ``[B, A, 4]`` batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from jaxdet.core import box_ops

EPSILON = 1e-8


@dataclass(frozen=True)
class FasterRcnnBoxCoder:
    """TF OD API ``faster_rcnn_box_coder``: codes ``(ty, tx, th, tw)``.

    ``ty = (yc - yca) / ha * sy``, ``tx = (xc - xca) / wa * sx``,
    ``th = log(h / ha) * sh``, ``tw = log(w / wa) * sw``, with ``EPSILON`` added to the
    heights and widths of boxes and anchors before encoding. ``scales=None`` means no
    scaling. ``decode`` is the exact inverse (no epsilon, no clamping, as in TF), unless
    ``max_log_scale`` clamps ``th`` and ``tw`` (after the scales) to at most that before
    ``exp`` (torchvision's ``BoxCoder``: ``log(1000 / 16)``).
    """

    scales: tuple[float, float, float, float] | None = (10.0, 10.0, 5.0, 5.0)
    code_size: int = 4
    max_log_scale: float | None = None

    def encode(self, boxes: jnp.ndarray, anchors: jnp.ndarray) -> jnp.ndarray:
        yca, xca, ha, wa = box_ops.to_center_size(anchors)
        yc, xc, h, w = box_ops.to_center_size(boxes)
        ha = ha + EPSILON
        wa = wa + EPSILON
        h = h + EPSILON
        w = w + EPSILON
        ty = (yc - yca) / ha
        tx = (xc - xca) / wa
        th = jnp.log(h / ha)
        tw = jnp.log(w / wa)
        if self.scales is not None:
            sy, sx, sh, sw = self.scales
            ty, tx, th, tw = ty * sy, tx * sx, th * sh, tw * sw
        return jnp.stack([ty, tx, th, tw], axis=-1)

    def decode(self, codes: jnp.ndarray, anchors: jnp.ndarray) -> jnp.ndarray:
        yca, xca, ha, wa = box_ops.to_center_size(anchors)
        ty, tx, th, tw = jnp.moveaxis(codes, -1, 0)
        if self.scales is not None:
            sy, sx, sh, sw = self.scales
            ty, tx, th, tw = ty / sy, tx / sx, th / sh, tw / sw
        if self.max_log_scale is not None:
            th = jnp.minimum(th, self.max_log_scale)
            tw = jnp.minimum(tw, self.max_log_scale)
        h = jnp.exp(th) * ha
        w = jnp.exp(tw) * wa
        yc = ty * ha + yca
        xc = tx * wa + xca
        return box_ops.from_center_size(yc, xc, h, w)


@dataclass(frozen=True)
class MeanStddevBoxCoder:
    """TF OD API ``mean_stddev_box_coder``: ``codes = (boxes - anchors) / stddev``."""

    stddev: float = 0.01
    code_size: int = 4

    def encode(self, boxes: jnp.ndarray, anchors: jnp.ndarray) -> jnp.ndarray:
        return (boxes - anchors) / self.stddev

    def decode(self, codes: jnp.ndarray, anchors: jnp.ndarray) -> jnp.ndarray:
        return codes * self.stddev + anchors
