"""Backbone -> neck: the feature maps every detector family reads, keyed by level."""

from __future__ import annotations

import jax
from flax import nnx

from jaxdet.models import remat


def pyramid_features(backbone: nnx.Module, neck: nnx.Module | None, images: jax.Array, *,
                     rngs: nnx.Rngs | None = None) -> dict[int, jax.Array]:
    """``{level: map}`` in ascending level order: the backbone's maps, through ``neck`` when
    there is one (checkpointed when the neck's ``remat`` flag is set). ``rngs`` (training
    only) reaches a backbone with stochastic layers (``accepts_rngs``, e.g. EfficientNet's
    drop-connect); others never see it."""
    if rngs is not None and getattr(backbone, "accepts_rngs", False):
        features = backbone(images, rngs=rngs)
    else:
        features = backbone(images)
    if neck is not None:
        features = remat.call(neck, features)
    return {level: features[level] for level in sorted(features)}
