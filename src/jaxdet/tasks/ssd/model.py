"""Single-shot detector: backbone -> neck -> box predictor. Covers SSD (``SSDFeatureMaps`` +
``ConvolutionalBoxPredictor``), RetinaNet / SSD-FPN (``FPN`` + ``WeightSharedBoxPredictor``)
and EfficientDet (``EfficientNet`` + ``BiFPN`` + a separable ``WeightSharedBoxPredictor``).

The model returns dense per-level tensors; anchors, target assignment and the loss live in
``jaxdet.core`` and take the concatenation (:func:`concat_levels`), whose order is level
(ascending) -> y -> x -> anchor, the order of ``jaxdet.core.anchors``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models.features import pyramid_features


class SSDDetector(nnx.Module):
    """``__call__(images[B,H,W,3]) -> {"class_logits": [[B, n_l, C']], "box_encodings":
    [[B, n_l, box_code_size]]}`` per level (ascending), ``n_l = h_l * w_l * K_l``.

    ``backbone``, ``neck`` and ``head`` are the parameter groups (e.g. for per-component
    learning rates or freezing: ``nnx.state(model.backbone, nnx.Param)``). ``neck`` may be
    ``None`` (head on backbone levels). The neck maps ``{level: map}`` to ``{level: map}``;
    the head receives those maps in ascending level order.

    ``rngs`` (training only) feeds a backbone with stochastic layers (EfficientNet's
    drop-connect; such a backbone sets ``accepts_rngs = True``); others never see it.
    """

    def __init__(self, backbone: nnx.Module, neck: nnx.Module | None, head: nnx.Module):
        self.backbone = backbone
        self.neck = neck
        self.head = head

    def features(
        self, images: jax.Array, *, rngs: nnx.Rngs | None = None
    ) -> dict[int, jax.Array]:
        """The maps the head sees, keyed by level."""
        return pyramid_features(self.backbone, self.neck, images, rngs=rngs)

    def __call__(
        self, images: jax.Array, *, rngs: nnx.Rngs | None = None
    ) -> dict[str, list[jax.Array]]:
        class_logits, box_encodings = self.head(self.features(images, rngs=rngs))
        return {"class_logits": class_logits, "box_encodings": box_encodings}

    def feature_shapes(self, image_size: int | Sequence[int]) -> list[tuple[int, int]]:
        """``(h, w)`` of each head input level, ascending, for ``image_size`` ``(H, W)``.
        Traced abstractly with ``jax.eval_shape``: no FLOPs, no compile, no state change."""
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        height, width = (int(d) for d in image_size)
        graphdef, state = nnx.split(self)

        def run(state, images):
            return nnx.merge(graphdef, state).features(images)

        images = jax.ShapeDtypeStruct((1, height, width, 3), jnp.float32)
        shapes = jax.eval_shape(run, state, images)
        return [tuple(int(d) for d in shapes[level].shape[1:3]) for level in sorted(shapes)]


def concat_levels(outputs: dict[str, list[jax.Array]]) -> tuple[jax.Array, jax.Array]:
    """Per-level outputs -> ``(class_logits[B, A, C'], box_encodings[B, A, box_code_size])``."""
    return (
        jnp.concatenate(outputs["class_logits"], axis=1),
        jnp.concatenate(outputs["box_encodings"], axis=1),
    )
