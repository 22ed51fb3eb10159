"""A neck that passes one backbone level through unchanged: for backbones that end in the map
the heads read (CenterNet's Hourglass, stride 4 at level 2)."""

from __future__ import annotations

import jax
from flax import nnx


class IdentityNeck(nnx.Module):
    """``__call__({level: map}) -> {level: map}`` for the one ``level``; no parameters.
    ``out_channels = {level: in_channels[level]}``."""

    def __init__(self, in_channels: dict[int, int], level: int):
        if level not in in_channels:
            raise ValueError(f"the identity neck reads backbone level {level}; the backbone "
                             f"has levels {sorted(in_channels)}")
        self.level = level
        self.out_channels = {level: in_channels[level]}

    def __call__(self, features: dict[int, jax.Array]) -> dict[int, jax.Array]:
        return {self.level: features[self.level]}
