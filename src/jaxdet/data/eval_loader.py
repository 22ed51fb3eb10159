"""The eval input pipeline on grain: one ordered pass over a source, last batch padded and masked.

Shares the per-record pipeline of ``data.loader`` (decode, build the sample, transforms, pad
the ground truth). A corrupt image yields a masked-out dummy in its place, so the image gets no
detections and is left out of the metrics; ``EvalLoader.skipped_image_ids`` lists them. Batches
have the layout of ``data.loader`` (``mask`` False on padding and dummies).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator

import numpy as np

from jaxdet.data.geometry import Sample
from jaxdet.data.loader import (
    _check_common,
    _collate,
    _describe,
    _image_dir,
    _sample_stream,
    _stats,
)
from jaxdet.data.records import SkipCounter
from jaxdet.data.sample_pipeline import _SKIP, _check_image_options, _Pipeline

logger = logging.getLogger("jaxdet.data")


@dataclasses.dataclass(frozen=True)
class _EvalMap:
    pipeline: _Pipeline
    num_records: int

    def __call__(self, index: int) -> Sample:
        if index >= self.num_records:
            return self.pipeline.dummy(self.pipeline.source[0])
        sample = self.pipeline.process(index, np.random.default_rng([0, index]))
        if _SKIP in sample:
            dummy = self.pipeline.dummy(sample["record"])
            dummy[_SKIP + "_info"] = (sample["path"], sample["index"],
                                      sample["record"]["image_id"], sample[_SKIP])
            return dummy
        return sample


class EvalLoader:
    """One ordered pass; the last batch is padded with masked-out dummies (mask False).

    Unreadable images also become masked-out dummies (logged and counted in ``skips``), so
    every batch has the same shape and the image is left out of the metrics; after a pass,
    ``skipped_image_ids`` lists them and ``num_truncated`` counts objects beyond
    ``max_boxes`` (eval metrics use the source's ground truth, so those are not lost).
    A pass in which no image at all could be read raises a RuntimeError at its end.
    ``len()`` is the number of batches.
    """

    def __init__(self, source, transforms, *, batch_size: int, max_boxes: int,
                 worker_count: int, shard_index: int, shard_count: int,
                 image_dtype: str = "float32", decode: str = "accurate"):
        pipeline = _Pipeline(source, tuple(transforms), max_boxes, image_dtype, decode)
        self._map = _EvalMap(pipeline, len(source))
        self._name = _describe(source)
        self.batch_size = batch_size
        self._worker_count = worker_count
        self._shard = (shard_index, shard_count)
        self.num_examples = len(source)
        per_step = batch_size * shard_count
        self._padded = math.ceil(self.num_examples / per_step) * per_step
        self._source = source
        self.skips = SkipCounter()
        self.num_truncated = 0
        self.skipped_image_ids: list[int] = []

    @property
    def stats(self) -> dict[str, int]:
        """Counts by reason: the source's parse-time drops, this loader's skips (summed over
        passes), and ``num_truncated``."""
        return _stats(self._source, self.skips, self.num_truncated)

    def __len__(self) -> int:
        return self._padded // (self.batch_size * self._shard[1])

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        index, count = self._shard
        ds = _sample_stream(self._map, first=index, stop=self._padded, step=count,
                            batch_size=self.batch_size, worker_count=self._worker_count)
        ds = ds.batch(self.batch_size, drop_remainder=False, batch_fn=_collate)
        it = iter(ds)
        skipped: list[int] = []
        real = 0
        try:
            for batch in it:
                for path, i, image_id, reason in batch.pop("_skips"):
                    self.skips.add("corrupt_image", path, f"record {i}, image id {image_id}",
                                   reason)
                    skipped.append(int(image_id))
                batch.pop("_stream_index")
                batch.pop("_truncated")
                self.num_truncated += batch.pop("_num_truncated")
                real += int(batch["mask"].sum())
                self.skipped_image_ids = list(skipped)
                yield batch
        finally:
            if hasattr(it, "close"):
                it.close()
        if skipped:
            logger.warning("%s: %d of %d images could not be read and are left out of the "
                           "evaluation (image ids %s%s)", self._name, len(skipped),
                           len(skipped) + real, skipped[:10], ", ..." if len(skipped) > 10 else "")
            if real == 0:
                raise RuntimeError(f"dataset {self._name}: none of its {len(skipped)} images "
                                   f"could be read ({self.skips.summary()}); check "
                                   f"{_image_dir(self._source)}")


def make_eval_loader(
    source,
    transforms: list,
    *,
    batch_size: int,
    max_boxes: int,
    worker_count: int = 0,
    shard_index: int = 0,
    shard_count: int = 1,
    image_dtype: str = "float32",
    decode: str = "accurate",
) -> EvalLoader:
    """One pass over ``source`` in order, in fixed-size batches (padding masked out).
    ``image_dtype`` and ``decode`` as for ``data.loader.make_train_loader``."""
    _check_common(source, batch_size, max_boxes, worker_count, shard_index, shard_count)
    _check_image_options(image_dtype, decode)
    return EvalLoader(source, transforms, batch_size=batch_size, max_boxes=max_boxes,
                      worker_count=worker_count, shard_index=shard_index,
                      shard_count=shard_count, image_dtype=image_dtype, decode=decode)


__all__ = ["EvalLoader", "make_eval_loader"]
