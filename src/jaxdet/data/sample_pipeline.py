"""One record -> one padded sample: decode, build the sample, run the transforms, pad the
ground truth, as the train and eval loaders map every index (``data.loader``,
``data.eval_loader``). Picklable, so the loader's worker processes can run it.

A sample whose image cannot be read comes back as ``{_SKIP: reason, "path", "index",
"record"}``; one with more objects than ``max_boxes`` carries ``_TRUNCATED`` (what was cut).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxdet.data.annotated_size import check_annotated_size
from jaxdet.data.decode import CorruptImageError, load_record_image
from jaxdet.data.geometry import Sample
from jaxdet.data.ground_truth import pad_ground_truth
from jaxdet.data.host_memory import keep_buffers_mapped
from jaxdet.data.keypoints import KEYPOINT_KEYS
from jaxdet.data.masks import MASK_KEYS, has_masks, load_record_masks, resample_masks
from jaxdet.data.records import Record, make_record

_SKIP = "_skipped"  # key marking a sample whose image could not be read
_TRUNCATED = "_truncated"  # (path, index, image id, objects cut, stream index or -1)


def build_sample(record: Record, image: np.ndarray, image_dtype: str = "float32") -> Sample:
    """Decoded image + record -> augmentable sample (normalized boxes; the image as uint8 as
    decoded for ``image_dtype="uint8"``, else as float32).

    A record's decoded ``masks`` [n, h, w] become the sample's (resampled, nearest, to the
    decoded image's size when the annotated size differs from it)."""
    height, width = image.shape[:2]
    ann_h = record.get("height") or height
    ann_w = record.get("width") or width
    boxes = np.asarray(record["boxes"], np.float32).reshape(-1, 4)
    boxes = np.clip(boxes / np.array([ann_h, ann_w, ann_h, ann_w], np.float32), 0.0, 1.0)
    n = boxes.shape[0]
    sample = {
        "image": image if image_dtype == "uint8" else image.astype(np.float32),
        "boxes": boxes,
        "classes": np.asarray(record.get("classes", np.zeros((n,))), np.int32).reshape(-1),
        "is_crowd": np.asarray(record.get("is_crowd", np.zeros((n,))), bool).reshape(-1),
        "image_id": int(record["image_id"]),
        "image_info": np.array([height, width, height, width], np.float32),
    }
    if "keypoints" in record:
        visibility = np.asarray(record["keypoint_visibility"], np.int32).reshape(n, -1)
        kp = np.asarray(record["keypoints"], np.float32).reshape(n, -1, 2)
        kp = kp / np.array([ann_h, ann_w], np.float32)
        sample["keypoints"] = np.where(visibility[..., None] > 0, kp, 0.0).astype(np.float32)
        sample["keypoint_visibility"] = visibility
    if "masks" in record:
        masks = np.asarray(record["masks"], np.uint8)
        if masks.ndim != 3 or masks.shape[0] != n:
            raise ValueError(f"{record.get('image_path')}: masks have shape {masks.shape}, "
                             f"expected [{n}, H, W] (one per box)")
        if masks.shape[1:] != (height, width):
            masks = resample_masks(masks, (height, width), (masks.shape[1] / height,
                                                            masks.shape[2] / width), (0.0, 0.0))
        sample["masks"] = masks
    return sample


IMAGE_DTYPES = ("uint8", "float32")
DECODE_MODES = ("accurate", "tf")


def _check_image_options(image_dtype: str, decode: str) -> None:
    if image_dtype not in IMAGE_DTYPES:
        raise ValueError(f"image_dtype {image_dtype!r}; allowed: {', '.join(IMAGE_DTYPES)}")
    if decode not in DECODE_MODES:
        raise ValueError(f"decode {decode!r}; allowed: {', '.join(DECODE_MODES)}")


def finish_image(image: np.ndarray, image_dtype: str) -> np.ndarray:
    """The transforms' last image as the batch holds it: uint8 (float values rounded to the
    nearest level, clamped to 0..255) or float32."""
    if image_dtype == "uint8":
        if image.dtype == np.uint8:
            return image
        return np.clip(np.rint(image), 0, 255).astype(np.uint8)
    return np.asarray(image, np.float32)


@dataclasses.dataclass(frozen=True)
class _Pipeline:
    """Record index -> padded sample; picklable so grain can ship it to worker processes.

    ``image_dtype``: ``uint8`` decodes to uint8 and keeps it through the pixel-moving ops (a
    resize rounds), ``float32`` works and ends in float32 (exact). ``decode``: JPEG decoding,
    ``accurate`` or ``tf`` (see ``data.decode``)."""

    source: Any
    transforms: tuple
    max_boxes: int
    image_dtype: str = "float32"
    decode: str = "accurate"

    def finish(self, sample: Sample, rng: np.random.Generator, mask: bool) -> Sample:
        for transform in self.transforms:
            sample = transform(sample, rng)
        sample = pad_ground_truth(sample, self.max_boxes)
        out = {
            "image": finish_image(sample["image"], self.image_dtype),
            "boxes": sample["boxes"],
            "classes": sample["classes"],
            "valid": sample["valid"],
            "ignore": sample["ignore"],
            "image_id": np.int64(sample["image_id"]),
            "image_info": np.asarray(sample["image_info"], np.float32).reshape(4),
            "mask": np.bool_(mask),
            "num_truncated": int(sample["num_truncated"]),
        }
        for key in KEYPOINT_KEYS + MASK_KEYS:
            if key in sample:
                out[key] = sample[key]
        return out

    def process(self, index: int, rng: np.random.Generator) -> Sample:
        keep_buffers_mapped()  # once per process: image-sized arrays reused, not re-faulted
        record = self.source[index]
        try:
            image = load_record_image(record, self.decode)
            if "mask_ref" in record:
                record = dict(record, masks=load_record_masks(record))
        except CorruptImageError as e:
            return {_SKIP: e.reason, "path": e.path, "index": int(index), "record": record}
        check_annotated_size(record, image.shape[:2])
        sample = self.finish(build_sample(record, image, self.image_dtype), rng, mask=True)
        if sample["num_truncated"]:
            sample[_TRUNCATED] = (record["image_path"], int(index), int(record["image_id"]),
                                  sample["num_truncated"], -1)
        return sample

    def dummy(self, record: Record) -> Sample:
        """A masked-out sample with the record's image size and no objects (eval padding)."""
        height = int(record.get("height") or 1)
        width = int(record.get("width") or 1)
        empty = dict(record, boxes=np.zeros((0, 4), np.float32),
                     classes=np.zeros((0,), np.int32), is_crowd=np.zeros((0,), bool),
                     image_id=-1)
        if "keypoints" in record:
            k = np.asarray(record["keypoint_visibility"]).reshape(
                len(record["boxes"]), -1).shape[1]
            empty["keypoints"] = np.zeros((0, k, 2), np.float32)
            empty["keypoint_visibility"] = np.zeros((0, k), np.int32)
        if has_masks(record):
            empty.pop("mask_ref", None)
            empty["masks"] = np.zeros((0, height, width), np.uint8)
        sample = build_sample(empty, np.zeros((height, width, 3), np.uint8), self.image_dtype)
        return self.finish(sample, np.random.default_rng(0), mask=False)


def eval_sample(image: np.ndarray, transforms, *, index: int = 0,
                image_dtype: str = "float32") -> Sample:
    """A decoded image given in memory (RGB [H, W, 3], uint8 or 0..255 floats) as the eval
    loader makes the sample of an image file: its eval ``transforms`` run with the rng of
    record ``index``, no objects. Returns the sample (``image`` at the model's input size,
    ``image_info`` [4] float32: the image's height and width, then the resized ones)."""
    pipeline = _Pipeline(None, tuple(transforms), max_boxes=1, image_dtype=image_dtype)
    record = make_record("<array>", image_id=index, height=0, width=0)
    return pipeline.finish(build_sample(record, image, image_dtype),
                           np.random.default_rng([0, index]), mask=True)


__all__ = ["DECODE_MODES", "IMAGE_DTYPES", "build_sample", "eval_sample", "finish_image"]
