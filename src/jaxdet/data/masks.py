"""Instance masks: what sources read, how they are stored, and how augment ops move them.

A source built with ``masks=True`` (``data.load_masks``) gives every object a full-image binary
mask at the image's original resolution, in the order of its boxes. A record carries them as

    "masks":    uint8 [n, H, W]  0 / 1, H x W = the record's height x width, or
    "mask_ref": encoded masks (:class:`RleMasks`, :class:`PngMasks`,
                :class:`InstancePngMasks`), decoded by :func:`load_record_masks`.

Sources yield ``mask_ref``: the encoded form is small (COCO RLE strings, byte ranges of PNGs
in a TFRecord file, the path of a VOC PNG), so a source stays compact and pickles cheaply into
loader workers, as it keeps only the byte range of an image. The loader decodes the masks next
to the image, in the worker; a mask file that cannot be read then is skipped and counted like
an unreadable image (``CorruptImageError``). Both keys are absent without masks.

Samples carry ``"masks"`` uint8 [n, h, w] that always cover the sample's image (h x w = the
image's size) until the resizer, which resamples them straight onto the static mask grid
``(H_in // stride, W_in // stride)`` (``mask_stride``; H_in x W_in = the network input size):
mask pixel (i, j) is the canvas pixel at the centre of the stride x stride block it covers.

Every geometric op moves masks exactly as it moves the image, by nearest-neighbour sampling at
output pixel centres (half-pixel convention, as :func:`~jaxdet.data.geometry.resize_image`):
no blending, so masks stay binary, and a box that spans [a, b) of the input spans [a s, b s)
of the output, so an object's mask and its box stay within one output pixel of each other.
Flips, crops and pads are exact copies. Structures thinner than the sampling step (at
``mask_stride`` > 1, or when shrinking) can vanish; an object whose mask leaves the frame while
its box stays keeps an empty mask. Objects dropped by an op take their masks with them.

Memory: masks move through the augment ops at the image's resolution (n x h x w bytes: 30
instances in a 640 x 480 image are 9 MB) and leave the resizer at the stride's: 100 instances
at a 1024 x 1024 input with stride 4 are 100 x 256 x 256 bytes = 6.6 MB per image, against
105 MB at full resolution.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from jaxdet import files
from jaxdet.data.decode import CorruptImageError, read_image_bytes

MASK_KEYS = ("masks",)
VOC_BOUNDARY = 255  # the "void" label of VOC SegmentationObject PNGs (object borders)


# --------------------------------------------------------------------------- encoded forms


def _empty(height: int, width: int) -> np.ndarray:
    return np.zeros((0, height, width), np.uint8)


@dataclasses.dataclass(frozen=True)
class RleMasks:
    """COCO compressed RLEs (``counts`` bytes, column-major, as pycocotools writes them) of an
    image's objects; decoding cannot fail (the source checked them)."""

    height: int
    width: int
    counts: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.counts)

    def decode(self, name: str) -> np.ndarray:
        return decode_rles(self.counts, self.height, self.width)


@dataclasses.dataclass(frozen=True)
class PngMasks:
    """One PNG per object inside ``file`` (TFRecord ``image/object/mask``): ``spans`` are the
    (byte offset, length) of each; a pixel > 0 is the object (TF's decoder)."""

    height: int
    width: int
    file: str
    spans: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.spans)

    def decode(self, name: str) -> np.ndarray:
        out = _empty(self.height, self.width) if not self.spans else np.zeros(
            (len(self.spans), self.height, self.width), np.uint8)
        for k, (offset, length) in enumerate(self.spans):
            data = read_image_bytes((self.file, offset, length), name)
            out[k] = decode_png_mask(data, (self.height, self.width), f"{name}, mask {k}")
        return out


@dataclasses.dataclass(frozen=True)
class InstancePngMasks:
    """A Pascal VOC ``SegmentationObject`` PNG: object k of the image is the pixels of value
    ``ids[k]``; 0 is background and 255 (object borders, "void") is background too."""

    height: int
    width: int
    path: str
    ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def decode(self, name: str) -> np.ndarray:
        labels = read_instance_png(self.path, (self.height, self.width))
        return instance_masks(labels, self.ids)


def load_record_masks(record: dict) -> np.ndarray | None:
    """The record's masks, uint8 [n, H, W] (``masks``, else ``mask_ref`` decoded); None when it
    has none.

    Raises:
      CorruptImageError: naming the record's image, when a mask file cannot be read or holds
        masks of another size than the image.
    """
    if "masks" in record:
        return np.asarray(record["masks"], np.uint8)
    ref = record.get("mask_ref")
    if ref is None:
        return None
    return ref.decode(str(record.get("image_path", "")))


def has_masks(record: dict) -> bool:
    return "masks" in record or "mask_ref" in record


# --------------------------------------------------------------------------- RLE


def decode_rles(counts: Sequence[bytes], height: int, width: int) -> np.ndarray:
    """uint8 [n, H, W] of compressed COCO RLE ``counts``."""
    if not counts:
        return _empty(height, width)
    rles = [{"size": [height, width], "counts": c} for c in counts]
    return np.ascontiguousarray(np.transpose(mask_utils.decode(rles), (2, 0, 1)))


def encode_rle(mask: np.ndarray) -> bytes:
    """The compressed COCO RLE ``counts`` of one binary [H, W] mask."""
    return mask_utils.encode(np.asfortranarray(np.asarray(mask, np.uint8) > 0,
                                               dtype=np.uint8))["counts"]


def coco_rle(mask: np.ndarray) -> dict[str, Any]:
    """A COCO ``segmentation`` (compressed RLE, JSON-ready: counts as str) of one mask."""
    mask = np.asarray(mask)
    return {"size": [int(mask.shape[0]), int(mask.shape[1])],
            "counts": encode_rle(mask).decode("ascii")}


def rle_string_counts(counts: bytes | str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``: 5 bits
    per char + 48, continuation bit 0x20, sign bit 0x10 on the last char, runs after the
    second stored as differences to the run two before).

    Raises:
      ValueError: the string ends inside a number or holds characters outside '0'..'o'.
    """
    data = counts.encode("ascii") if isinstance(counts, str) else bytes(counts)
    out: list[int] = []
    p = 0
    while p < len(data):
        x = k = 0
        while True:
            if p >= len(data):
                raise ValueError("the RLE string ends inside a run length")
            c = data[p] - 48
            if not 0 <= c < 64:
                raise ValueError(f"character {chr(data[p])!r} is not an RLE digit")
            x |= (c & 0x1F) << (5 * k)
            p += 1
            k += 1
            if not c & 0x20:
                if c & 0x10:
                    x -= 1 << (5 * k)
                break
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    return out


@dataclasses.dataclass
class Segmentation:
    """One annotation's ``segmentation`` checked and encoded (:func:`coco_segmentation`).

    ``counts``: compressed RLE, or None when the object must be dropped; ``reason`` /
    ``detail``: why it was dropped or repaired (None when clean); ``polygons``: the polygons
    kept, when some were dropped (the repaired ``segmentation``)."""

    counts: bytes | None
    reason: str | None = None
    detail: str = ""
    polygons: list | None = None
    area: int = 0


def _number_list(value: Any) -> list[float] | None:
    if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    return [float(v) for v in value]


def coco_segmentation(segm: Any, height: int, width: int) -> Segmentation:
    """Checks and encodes a COCO ``segmentation`` for a ``height`` x ``width`` image.

    Polygons (a list of ``[x0, y0, x1, y1, ...]`` lists, pixel corners) are rasterized and
    merged exactly as pycocotools does (``frPyObjects`` + ``merge``, what COCO's mask
    evaluation uses); RLE (``{"size": [h, w], "counts": [...] | "..."}``, uncompressed or
    compressed) is taken as it is. Outcomes (``reason``):
      * ``missing_mask``: no segmentation, or an empty list (dropped),
      * ``malformed_mask``: not a polygon list or RLE, coordinates that are not finite
        numbers, run lengths that are negative, undecodable or do not add up to h x w
        (dropped),
      * ``mask_size_mismatch``: an RLE whose ``size`` is not the image's (dropped),
      * ``degenerate_polygon``: polygons with fewer than 3 points (or an odd number of
        coordinates) are left out; dropped when none is left,
      * ``empty_mask``: the mask has no pixel (kept: the box is valid; its mask is empty).
    A self-intersecting polygon is not refused: it is filled as pycocotools fills it (even-odd:
    the inner pentagon of a five-pointed star drawn in one stroke stays empty), which is the
    ground truth COCO's evaluator scores against; checking every polygon would cost a
    quadratic segment test per polygon on data sets of a million objects.
    """
    if segm is None or (isinstance(segm, list) and not segm):
        return Segmentation(None, "missing_mask", "no segmentation")
    if isinstance(segm, dict):
        return _coco_rle(segm, height, width)
    if not isinstance(segm, list):
        return Segmentation(None, "malformed_mask", f"segmentation {segm!r:.60} is neither "
                                                    "a list of polygons nor an RLE")
    polygons, bad = [], []
    for i, poly in enumerate(segm):
        coords = _number_list(poly)
        if coords is None or not all(math.isfinite(v) for v in coords):
            return Segmentation(None, "malformed_mask",
                                f"polygon {i} {poly!r:.60} is not a list of finite numbers")
        if len(coords) < 6 or len(coords) % 2:
            bad.append(i)
        else:
            polygons.append(coords)
    if not polygons:
        return Segmentation(None, "degenerate_polygon",
                            f"every polygon ({len(segm)}) has fewer than 3 points; object "
                            "dropped")
    rle = mask_utils.merge(mask_utils.frPyObjects(polygons, height, width))
    area = int(mask_utils.area(rle))
    if bad:
        return Segmentation(rle["counts"], "degenerate_polygon",
                            f"polygons {bad} of {len(segm)} have fewer than 3 points; left out",
                            polygons=polygons, area=area)
    if area == 0:
        return Segmentation(rle["counts"], "empty_mask", "the polygons cover no pixel")
    return Segmentation(rle["counts"], area=area)


def _coco_rle(segm: dict, height: int, width: int) -> Segmentation:
    size, counts = segm.get("size"), segm.get("counts")
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        return Segmentation(None, "malformed_mask", f"RLE size {size!r:.40} is not [h, w]")
    if (h, w) != (height, width):
        return Segmentation(None, "mask_size_mismatch",
                            f"RLE size [{h}, {w}] but the image is {height}x{width} (h x w)")
    if isinstance(counts, list):
        runs = counts
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in runs):
            return Segmentation(None, "malformed_mask", "RLE counts are not integers")
    elif isinstance(counts, (str, bytes)):
        try:
            runs = rle_string_counts(counts)
        except ValueError as e:
            return Segmentation(None, "malformed_mask", f"compressed RLE counts: {e}")
    else:
        return Segmentation(None, "malformed_mask", f"RLE counts {counts!r:.40} are neither a "
                                                    "list nor a string")
    if any(v < 0 for v in runs) or sum(runs) != h * w:
        return Segmentation(None, "malformed_mask", f"RLE run lengths add up to {sum(runs)}, "
                                                    f"not {h} x {w} = {h * w}, or are negative")
    if isinstance(counts, list):
        rle = mask_utils.frPyObjects({"size": [h, w], "counts": counts}, h, w)
    else:
        rle = {"size": [h, w], "counts": counts.encode("ascii") if isinstance(counts, str)
               else counts}
    area = int(mask_utils.area(rle))
    if area == 0:
        return Segmentation(rle["counts"], "empty_mask", "the RLE covers no pixel")
    return Segmentation(rle["counts"], area=area)


# --------------------------------------------------------------------------- PNG


def encode_png(mask: np.ndarray) -> bytes:
    """A one-channel PNG of a binary [H, W] mask (values 0 / 1, as the TF OD API's COCO
    converter writes ``image/object/mask``)."""
    buf = io.BytesIO()
    Image.fromarray((np.asarray(mask) > 0).astype(np.uint8), "L").save(buf, format="PNG")
    return buf.getvalue()


def png_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from an encoded image's header, or None when it cannot be read."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
        return int(height), int(width)
    except (OSError, ValueError, SyntaxError):
        return None


def decode_png_mask(data: bytes, size: tuple[int, int], name: str) -> np.ndarray:
    """uint8 [H, W] 0 / 1 of one encoded mask (first channel > 0, TF's rule).

    Raises:
      CorruptImageError: naming ``name``, when it cannot be decoded or is not ``size``.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            array = np.asarray(image)
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        raise CorruptImageError(name, f"instance mask cannot be decoded ({e})") from None
    if array.ndim == 3:
        array = array[..., 0]
    if array.shape != tuple(size):
        raise CorruptImageError(name, f"instance mask is {array.shape[0]}x{array.shape[1]} "
                                      f"(h x w), the image {size[0]}x{size[1]}")
    return (array > 0).astype(np.uint8)


def read_instance_png(path: str, size: tuple[int, int] | None = None) -> np.ndarray:
    """The label array of a VOC ``SegmentationObject`` PNG (palette indices).

    Raises:
      CorruptImageError: naming ``path``, when it is missing, unreadable, not one channel of
        labels (a palette or grey PNG), or not ``size`` (h, w).
    """
    try:
        with Image.open(io.BytesIO(files.read_bytes(path))) as image:
            image.load()
            mode, array = image.mode, np.asarray(image)
    except FileNotFoundError:
        raise CorruptImageError(path, "instance mask file not found") from None
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        raise CorruptImageError(path, f"instance mask cannot be decoded ({e})") from None
    if mode not in ("P", "L") or array.ndim != 2:
        raise CorruptImageError(path, f"instance mask PNG has mode {mode}; expected a palette "
                                      "(P) or grey (L) image of instance ids")
    if size is not None and array.shape != tuple(size):
        raise CorruptImageError(path, f"instance mask is {array.shape[0]}x{array.shape[1]} "
                                      f"(h x w), the image {size[0]}x{size[1]}")
    return array


def instance_masks(labels: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """uint8 [len(ids), H, W]: mask k is ``labels == ids[k]`` (255, VOC's border, is never an
    object)."""
    labels = np.asarray(labels)
    if not len(ids):
        return _empty(*labels.shape)
    ids_arr = np.asarray(ids, labels.dtype if labels.dtype.kind in "iu" else np.int64)
    return (labels[None] == ids_arr[:, None, None]).astype(np.uint8)


# --------------------------------------------------------------------------- tf.train.Example

MASK_KEY = "image/object/mask"  # the TF OD API's instance mask feature


class MaskListError(ValueError):
    """``(reason, detail)``: an Example's mask list cannot serve its objects."""


def example_mask_items(kind: str, values: list, data: bytes, n: int, height: int,
                       width: int) -> list:
    """Per object of a ``tf.train.Example`` with ``n`` objects, from its ``image/object/mask``
    (``kind`` / ``values`` as :func:`~jaxdet.data.tfrecord.decode_example_spans` gives them):
    the (start, end) of its PNG in ``data``, its RLE counts (numerical masks: floats > 0), or
    ``(reason, detail, item to keep or None)`` for a problem (``malformed_mask``: the PNG
    header cannot be read; ``mask_size_mismatch``: the PNG is not height x width;
    ``empty_mask``: a numerical mask without a pixel, kept).

    Raises:
      MaskListError: ``missing_mask`` (objects, no masks) or ``malformed_mask`` (not one PNG
        per object, nor n x H x W floats).
    """
    if not n:
        return []
    if not values:
        raise MaskListError("missing_mask", f"{n} objects but no {MASK_KEY} (instance masks "
                                            "were asked for: data.load_masks)")
    if kind == "float":
        if len(values) != n * height * width:
            raise MaskListError("malformed_mask", f"{MASK_KEY} holds {len(values)} floats, not "
                                                  f"{n} objects x {height} x {width}")
        grid = np.asarray(values, np.float32).reshape(n, height, width) > 0.0
        return [encode_rle(m) if m.any() else ("empty_mask", "the mask has no pixel",
                                               encode_rle(m)) for m in grid]
    if kind != "bytes" or len(values) != n:
        raise MaskListError("malformed_mask", f"{MASK_KEY} is a {kind} list of {len(values)} "
                                              f"values, expected one PNG per object ({n})")
    out: list = []
    for a, b in values:
        size = png_size(data[a:b])
        if size is None:
            out.append(("malformed_mask", "the mask PNG's header cannot be read", None))
        elif size != (height, width):
            out.append(("mask_size_mismatch", f"mask PNG is {size[1]}x{size[0]}, the image "
                                              f"{width}x{height} (w x h)", None))
        else:
            out.append((a, b))
    return out


# --------------------------------------------------------------------------- geometry


def resample_masks(masks: np.ndarray, out_shape: tuple[int, int],
                   scale: tuple[float, float], offset: tuple[float, float]) -> np.ndarray:
    """Nearest-neighbour resampling of masks [n, h, w] onto an ``out_shape`` grid.

    Output pixel (i, j) takes the input pixel under the point ``offset + (i + 0.5, j + 0.5) *
    scale`` (input pixel units; ``scale`` is input pixels per output pixel, negative to
    mirror); points outside the input give 0.
    """
    masks = np.asarray(masks, np.uint8)
    n, h, w = masks.shape
    out_h, out_w = (int(v) for v in out_shape)
    rows = np.floor(offset[0] + (np.arange(out_h) + 0.5) * scale[0]).astype(np.int64)
    cols = np.floor(offset[1] + (np.arange(out_w) + 0.5) * scale[1]).astype(np.int64)
    out = np.zeros((n, out_h, out_w), np.uint8)
    vr = np.nonzero((rows >= 0) & (rows < h))[0]
    vc = np.nonzero((cols >= 0) & (cols < w))[0]
    if n and vr.size and vc.size:
        out[:, vr[:, None], vc[None, :]] = masks[:, rows[vr][:, None], cols[vc][None, :]]
    return out


def paste_masks(masks: np.ndarray, canvas_shape: tuple[int, int],
                src: tuple[int, int, int, int], dst: tuple[int, int]) -> np.ndarray:
    """Zeros of ``canvas_shape`` with ``masks[:, y0:y1, x0:x1]`` (``src``) copied to the
    canvas at ``dst`` (top-left): the exact crop / pad an op applies to its image."""
    masks = np.asarray(masks, np.uint8)
    y0, x0, y1, x1 = src
    out = np.zeros((masks.shape[0], int(canvas_shape[0]), int(canvas_shape[1])), np.uint8)
    if y1 > y0 and x1 > x0:
        out[:, dst[0]:dst[0] + y1 - y0, dst[1]:dst[1] + x1 - x0] = masks[:, y0:y1, x0:x1]
    return out


def with_masks(sample: dict, fn) -> dict:
    """``sample`` with ``masks`` replaced by ``fn(masks)`` (a copy; unchanged without masks)."""
    if "masks" not in sample:
        return sample
    out = dict(sample)
    out["masks"] = fn(np.asarray(sample["masks"], np.uint8))
    return out


def mask_grid(size: tuple[int, int], stride: int) -> tuple[int, int]:
    """The static mask shape ``(H // stride, W // stride)`` of an input size (H, W)."""
    return size[0] // stride, size[1] // stride


__all__ = ["MASK_KEY", "MASK_KEYS", "InstancePngMasks", "MaskListError", "PngMasks", "RleMasks",
           "Segmentation", "example_mask_items",
           "coco_rle", "coco_segmentation", "decode_png_mask", "decode_rles", "encode_png",
           "encode_rle", "has_masks", "instance_masks", "load_record_masks", "mask_grid",
           "paste_masks", "png_size", "read_instance_png", "resample_masks",
           "rle_string_counts", "with_masks"]
