"""Image decoding: any file Pillow reads -> uint8 RGB [H, W, 3], or a CorruptImageError.

JPEGs decode with libjpeg-turbo (``simplejpeg``) in one of two modes (``DECODE_MODES``):

* ``accurate``: the accurate integer IDCT and fancy upsampling: the same pixels as Pillow (and
  OpenCV) give, the default for jaxdet's own configs;
* ``tf``: the fast integer IDCT and fancy upsampling, what ``tf.io.decode_jpeg`` does by
  default and so what the TF Object Detection API trained and evaluated on: bit-equal to
  TensorFlow's pixels (4:2:0, 4:2:2, 4:4:4, greyscale, progressive; CMYK by TF's own
  conversion). Models from or for the TF OD API should see these (65-70% of a photo's pixels
  differ between the two modes, by about one level).

Other formats (PNG, BMP, ...) and JPEGs libjpeg-turbo cannot take decode with Pillow.

EXIF orientation is deliberately NOT applied: COCO, VOC and TF OD API annotations are given in
the stored pixel grid, and TF's decoders ignore EXIF too.

Truncated files are errors: a full decode is forced with ``.load()``, and with Pillow's default
``ImageFile.LOAD_TRUNCATED_IMAGES = False`` any file that ends early raises. If some other code
set that global to True, Pillow would grey-fill the missing part silently; a JPEG cut short is
still caught then (Pillow marks it), other formats cannot be, and one WARNING says so.

Mode conversions (all to uint8 RGB): L, LA, 1, P (with or without transparency), PA, RGBA,
RGBX, CMYK, YCbCr, LAB, HSV through Pillow's converters (alpha dropped, CMYK -> RGB with
Pillow's formula, e.g. C=255 -> (0, 255, 255)); 16-bit (``I;16*``, and 16-bit PNGs opened as
mode ``I``) scaled by 255/65535, so 65535 -> 255 and 32768 -> 128, never clipped; float ``F``
images in [0, 1] scaled by 255, otherwise clipped to [0, 255]. Corrupt bytes in the middle of
a JPEG that libjpeg decodes with a warning are not detectable through Pillow and decode as
they are (TensorFlow's decoder does the same).
"""

from __future__ import annotations

import io
import logging
import os
import warnings

import numpy as np
import simplejpeg
from PIL import Image, ImageFile

from jaxdet import files

logger = logging.getLogger("jaxdet.data")
_warned_truncated_flag = False
DECODE_MODES = ("accurate", "tf")
_JPEG_MAGIC = b"\xff\xd8\xff"


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


def load_image(path: str | os.PathLike, mode: str = "accurate") -> np.ndarray:
    """Decodes ``path`` into a uint8 RGB array [H, W, 3]; ``mode``: how a JPEG decodes
    (``accurate`` or ``tf``, see the module docstring).

    Raises:
      CorruptImageError: the file is missing, empty, truncated or not an image.
    """
    path = os.fspath(path)
    try:
        data = files.read_bytes(path)
    except FileNotFoundError:
        raise CorruptImageError(path, "file not found") from None
    except IsADirectoryError:
        raise CorruptImageError(path, "is a directory") from None
    except OSError as e:
        raise CorruptImageError(path, f"cannot read: {e}") from None
    return load_image_bytes(data, path, mode)


def load_image_bytes(data: bytes, name: str, mode: str = "accurate") -> np.ndarray:
    """Decodes encoded image bytes (JPEG, PNG, ...) into a uint8 RGB array [H, W, 3], exactly
    as :func:`load_image` decodes a file; ``name`` says where they came from in errors.

    Raises:
      CorruptImageError: the bytes are empty, truncated or not an image.
    """
    if mode not in DECODE_MODES:
        raise ValueError(f"decode mode {mode!r}; allowed: {', '.join(DECODE_MODES)}")
    if data[:3] == _JPEG_MAGIC:
        image = _decode_jpeg(data, name, mode)
        if image is not None:
            return image
    return _decode(io.BytesIO(data), name)


def _decode_jpeg(data: bytes, name: str, mode: str) -> np.ndarray | None:
    """libjpeg-turbo's decode of a JPEG in ``mode``, or None for Pillow to try (a colour
    space or coding libjpeg-turbo's RGB output does not take, or bytes it cannot parse)."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if height * width > 2 * (Image.MAX_IMAGE_PIXELS or float("inf")):
        raise CorruptImageError(name, f"too large to decode safely ({width}x{height} pixels)")
    fast = mode == "tf"
    if colorspace not in ("YCbCr", "Gray"):
        if not (fast and colorspace in ("CMYK", "YCCK")):
            return None  # Pillow's conversions, as before
        cmyk = _simplejpeg(data, name, "CMYK", fast)
        if cmyk is None:
            return None
        # TF (jpeg_mem.cc): Adobe's inverted CMYK to RGB as c * k / 255, truncated
        k = cmyk[..., 3:4].astype(np.uint16)
        return (cmyk[..., :3].astype(np.uint16) * k // 255).astype(np.uint8)
    return _simplejpeg(data, name, "RGB", fast)


def _simplejpeg(data: bytes, name: str, colorspace: str, fast: bool) -> np.ndarray | None:
    try:
        return simplejpeg.decode_jpeg(data, colorspace, fastdct=fast, fastupsample=False)
    except ValueError as e:
        if "premature end" in str(e).lower():
            raise CorruptImageError(name, "image file is truncated (premature end of JPEG "
                                          "data)") from None
    try:  # a corruption libjpeg recovers from with a warning: decoded as TF and Pillow do
        return simplejpeg.decode_jpeg(data, colorspace, fastdct=fast, fastupsample=False,
                                      strict=False)
    except ValueError:
        return None


def read_image_bytes(ref: tuple[str, int, int], name: str) -> bytes:
    """The ``length`` bytes at byte ``offset`` of ``file``, for ``ref = (file, offset, length)``.

    Raises:
      CorruptImageError: the file is missing or ends before the bytes do.
    """
    file, offset, length = ref
    try:
        data = files.read_range(file, int(offset), int(length))
    except FileNotFoundError:
        raise CorruptImageError(name, f"file not found: {file}") from None
    except OSError as e:
        raise CorruptImageError(name, f"cannot read {file}: {e}") from None
    if len(data) != int(length):
        raise CorruptImageError(name, f"{file} ends {int(length) - len(data)} bytes before the "
                                      "image does")
    return data


def load_record_image(record: dict, mode: str = "accurate") -> np.ndarray:
    """Decodes a source record's image into uint8 RGB [H, W, 3] (``mode``: how a JPEG
    decodes, ``accurate`` or ``tf``).

    A record normally names an image file (``"image_path"``). A record whose image is stored
    inside a container file (a TFRecord) carries ``"image_bytes_ref": (file, offset,
    length)``, the byte range of the encoded image in that file; its ``image_path`` then only
    names it in messages.

    Raises:
      CorruptImageError: the image is missing, truncated or cannot be decoded.
    """
    ref = record.get("image_bytes_ref")
    if ref is None:
        return load_image(record["image_path"], mode)
    name = str(record.get("image_path") or f"{ref[0]}@{ref[1]}")
    return load_image_bytes(read_image_bytes(ref, name), name, mode)


def _decode(source: str | io.BytesIO, path: str) -> np.ndarray:
    """Shared decode of a file name or a byte stream; errors name ``path``."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        _warn_truncated_flag()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Palette images with Transparency"
            with Image.open(source) as image:
                image.load()
                if getattr(image, "_ended", False):
                    # JPEG plugin: premature end of data, EOI faked because
                    # LOAD_TRUNCATED_IMAGES is True; the rest would be grey.
                    raise CorruptImageError(path, "image file is truncated (premature end "
                                                  "of JPEG data)")
                array = _to_rgb_uint8(image)
    except CorruptImageError:
        raise
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


def _warn_truncated_flag() -> None:
    global _warned_truncated_flag
    if not _warned_truncated_flag:
        _warned_truncated_flag = True
        logger.warning(
            "PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True (set outside jaxdet): truncated JPEGs "
            "are still skipped, but truncated PNG/other files would be decoded with grey fill; "
            "set it to False to have them skipped too"
        )
