"""The static input size a config's resizer gives every image."""

from __future__ import annotations

from jaxdet.config import schema as S


def input_size(data: S.DataConfig) -> tuple[int, int]:
    """The static (height, width) every image is resized and padded to."""
    r = data.resizer
    if isinstance(r, S.FixedShapeResizerConfig):
        return (r.height, r.width)
    if not r.pad_to_max_dimension:
        raise ValueError(
            "data.resizer.pad_to_max_dimension must be true: jaxdet needs one static input shape"
        )
    return (r.max_dimension, r.max_dimension)


__all__ = ["input_size"]
