"""Images given in memory (numpy arrays, PIL images) as the RGB arrays the pipeline takes,
with errors that say what was wrong with the array."""

from __future__ import annotations

import numpy as np
from PIL import Image


def rgb_pixels(image, what: str = "image") -> np.ndarray:
    """``image`` as RGB pixels [H, W, 3] with values 0..255: uint8 as given, other numbers as
    float32.

    Accepts a PIL image (converted to RGB) or an array-like (numpy, jax) of shape [H, W, 3],
    [H, W, 1] or [H, W] (gray, repeated to three channels), of uint8, any integer type with
    values in 0..255, or floats in 0..255.

    Raises:
      TypeError: not an image or an array of numbers.
      ValueError: a shape with 4 or more channels or not 2 or 3 dimensions, an empty image,
        values outside 0..255, non-finite values, or floats in 0..1 (scale them by 255);
        each message names ``what``.
    """
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    try:
        array = np.asarray(image)
    except Exception as e:  # noqa: BLE001 - whatever the object raised, say what it was
        raise TypeError(f"{what}: {type(image).__name__} is not an image or an array") from e
    if array.dtype == object:
        raise TypeError(f"{what}: a {type(image).__name__} is not an image or an array of "
                        "numbers")
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise TypeError(f"{what}: an array of {array.dtype} values; expected uint8 or float "
                        "pixels 0..255")
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ValueError(f"{what}: shape {tuple(array.shape)}; expected [height, width, 3] "
                         "RGB (or [height, width] gray; drop an alpha channel with "
                         "image[..., :3])")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{what}: an empty image, shape {tuple(array.shape)}")
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    if array.dtype == np.uint8:
        return array
    if np.issubdtype(array.dtype, np.floating) and not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: holds NaN or infinite values")
    low, high = float(array.min()), float(array.max())
    if low < 0 or high > 255:
        raise ValueError(f"{what}: values {low:g}..{high:g}; expected pixels 0..255")
    if np.issubdtype(array.dtype, np.floating) and 0 < high <= 1:
        raise ValueError(f"{what}: float values {low:g}..{high:g} look like 0..1 pixels; "
                         "jaxdet takes 0..255 (multiply by 255)")
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.uint8)
    return array.astype(np.float32)


def display_pixels(pixels: np.ndarray) -> np.ndarray:
    """RGB pixels of :func:`rgb_pixels` as uint8 for drawing (floats rounded and clamped)."""
    if pixels.dtype == np.uint8:
        return pixels
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


__all__ = ["display_pixels", "rgb_pixels"]
