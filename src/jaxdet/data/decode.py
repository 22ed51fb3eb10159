"""Image decoding: any file Pillow reads -> uint8 RGB [H, W, 3], or a CorruptImageError.

EXIF orientation is deliberately NOT applied: COCO, VOC and TF OD API annotations are given in
the stored pixel grid, and TF's decoders ignore EXIF too.

Truncated files are errors: this module relies on Pillow's default
``ImageFile.LOAD_TRUNCATED_IMAGES = False`` and forces a full decode with ``.load()``.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from PIL import Image


class CorruptImageError(Exception):
    """An image file is missing, truncated or cannot be decoded."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot read image {self.path}: {reason}")

    def __reduce__(self):  # keeps the two-argument constructor picklable across processes
        return (type(self), (self.path, self.reason))


def _to_rgb_uint8(image: Image.Image) -> np.ndarray:
    mode = image.mode
    if mode == "RGB":
        return np.asarray(image, dtype=np.uint8)
    if mode.startswith("I;16") or mode in ("I", "F"):
        array = np.asarray(image)
        if mode == "F":
            array = array.astype(np.float64)
            finite = array[np.isfinite(array)]
            peak = float(finite.max()) if finite.size else 0.0
            array = np.nan_to_num(array) * (255.0 if peak <= 1.0 else 1.0)
        else:
            # 16-bit data (also what Pillow gives for 16-bit PNGs as mode "I"): scale
            # 0..65535 -> 0..255.
            array = array.astype(np.float64) / 257.0
        gray = np.clip(np.rint(array), 0, 255).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if mode == "PA":
        image = image.convert("RGBA")
    # L, LA, 1, RGBA, RGBX, CMYK, YCbCr, LAB, HSV, P: alpha is dropped.
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


def load_image(path: str | os.PathLike) -> np.ndarray:
    """Decodes ``path`` into a uint8 RGB array [H, W, 3].

    Raises:
      CorruptImageError: the file is missing, empty, truncated or not an image.
    """
    path = os.fspath(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Palette images with Transparency"
            with Image.open(path) as image:
                image.load()
                array = _to_rgb_uint8(image)
    except FileNotFoundError:
        raise CorruptImageError(path, "file not found") from None
    except IsADirectoryError:
        raise CorruptImageError(path, "is a directory") from None
    except Image.DecompressionBombError as e:
        raise CorruptImageError(path, f"too large to decode safely ({e})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        # PIL.UnidentifiedImageError is an OSError; truncation raises OSError too.
        reason = str(e) or type(e).__name__
        raise CorruptImageError(path, reason) from None
    if array.ndim != 3 or array.shape[0] == 0 or array.shape[1] == 0:
        raise CorruptImageError(path, f"decoded to an empty array {array.shape}")
    return np.ascontiguousarray(array)
