"""Input pipelines on grain: a deterministic, resumable training stream and a padded eval pass.

Per record: decode (a corrupt image is skipped and counted, with one WARNING naming the file:
never a crash), build the sample (pixel boxes -> normalized), apply the transforms in order
(the resizer is the last shape-changing one; a Normalize op may follow, though the builders'
loaders leave normalization to the device: ``data.normalize``), pad the ground truth. With
``image_dtype="uint8"`` the image stays uint8 from decode to batch wherever ops only move
pixels, and is rounded once where one computed fractional values.

Bad input, as the loaders report it (``loader.stats``: the source's drop counts from parsing,
plus the loader's own, plus ``num_truncated``):
  * ``corrupt_image`` (missing, truncated or undecodable file): training skips the sample and
    takes the next one, so batches stay full; eval yields a masked-out dummy in its place, so
    the image gets no detections and is left out of the COCO metrics (the evaluator scores only
    the images it was given detections for); ``EvalLoader.skipped_image_ids`` lists them.
    One WARNING per file names the path, record index and image id; every epoch counts again.
  * ``too_many_boxes`` (training): an image with more objects after augmentation than
    ``max_boxes`` keeps the first ``max_boxes``; one WARNING per image names the file, and
    ``num_truncated`` counts the objects cut off (eval counts them too; its metrics use the
    source's full ground truth, so nothing is lost there).
  * A source without images, or whose every image is unreadable, is one clear error naming the
    annotation file / folder (at construction, or at the first batch / end of the eval pass).
  * Training logs one summary line of these counts when the epoch it started in is done.

The eval pass (``make_eval_loader``) lives in ``data.eval_loader`` and shares this pipeline.

Batches are numpy dicts::

    "images"     uint8 or float32 [B, H, W, 3]   0..255 (normalized on the device, see
                                                  ``data.normalize``; or by a Normalize op)
    "boxes"      float32 [B, N, 4]   normalized yxyx on the (padded) canvas
    "classes"    int32   [B, N]
    "valid"      bool    [B, N]
    "ignore"     bool    [B, N]      crowd / difficult objects
    "image_id"   int64   [B]
    "image_info" float32 [B, 4]      (orig_h, orig_w, content_h, content_w)
    "mask"       bool    [B]         False on eval padding

and, from a source with keypoints (``data.keypoints``), ``"keypoints"`` float32 [B, N, K, 2]
normalized (y, x) and ``"keypoint_visibility"`` int32 [B, N, K]; from a source with instance
masks (``data.load_masks``), ``"masks"`` uint8 [B, N, H // s, W // s] (s = the resizer's
``mask_stride``; 0 / 1, all 0 past the valid boxes; see ``data.masks``): 100 boxes at a
1024 x 1024 input and s = 4 are 6.6 MB per image. A record's masks are decoded next to its
image; a mask file that cannot be read skips the sample as an unreadable image does.

Determinism: the training stream is a function of (source, transforms, seed) only. Sample k of
the stream is record ``perm_epoch[k mod n]`` augmented with an RNG seeded by
(seed, epoch, record index); worker processes make runs of consecutive samples (their
round-robin interleave is the stream order, ``data.chunks``) and batching happens in the main
process, so the worker count never changes the data. The iterator state is the index of the
next sample of the stream.

Several processes (``shard_count`` n > 1, one per JAX process) read one stream together: global
batch i is stream samples ``[i*B, (i+1)*B)`` and process p reads and decodes only its rows
``[i*B + p*B/n, i*B + (p+1)*B/n)``, so the processes' batches concatenated in process order are
exactly the one-process batch. A process that skips a corrupt image takes the next sample of
its own rows (its stream shifts; the others' do not), so its position is its own: the state
of a sharded loader lists every process's position (``gather`` collects them; see
``TrainIterator.get_state``) and each process resumes from its own entry.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import numpy as np

from jaxdet.data.batch_layout import BatchLayout, check_batch
from jaxdet.data.chunks import ordered_samples, whole_chunk
from jaxdet.data.geometry import Sample
from jaxdet.data.keypoints import KEYPOINT_KEYS
from jaxdet.data.masks import MASK_KEYS
from jaxdet.data.records import EpochTally, SkipCounter
from jaxdet.data.sample_pipeline import (  # noqa: F401  (re-exported)
    _SKIP,
    _TRUNCATED,
    DECODE_MODES,
    IMAGE_DTYPES,
    _check_image_options,
    _Pipeline,
    build_sample,
    finish_image,
)

logger = logging.getLogger("jaxdet.data")

STATE_FORMAT = "jaxdet.train_loader/1"  # one process: {"next_index": int, ...}
SHARDED_STATE_FORMAT = "jaxdet.train_loader/2"  # n processes: {"next_index": [n ints], ...}
BATCH_KEYS = ("images", "boxes", "classes", "valid", "ignore", "image_id", "image_info", "mask")


@dataclasses.dataclass(frozen=True)
class _TrainMap:
    """Stream index -> sample: epoch permutation, then (seed, epoch, record)-seeded augment."""

    pipeline: _Pipeline
    num_records: int
    seed: int
    shuffle: bool

    def record_index(self, stream_index: int) -> tuple[int, int]:
        epoch, position = divmod(stream_index, self.num_records)
        if not self.shuffle:
            return epoch, position
        perm = _epoch_permutation(self.seed, epoch, self.num_records)
        return epoch, int(perm[position])

    def __call__(self, stream_index: int) -> Sample:
        epoch, index = self.record_index(stream_index)
        rng = np.random.default_rng([self.seed, epoch, index])
        sample = self.pipeline.process(index, rng)
        sample["_stream_index"] = stream_index
        if _TRUNCATED in sample:
            sample[_TRUNCATED] = sample[_TRUNCATED][:4] + (stream_index,)
        return sample


@dataclasses.dataclass(frozen=True)
class _Rows:
    """Process ``shard`` of ``count`` owns rows ``[shard*local, (shard+1)*local)`` of every
    global batch of ``local*count`` stream samples; its k-th sample is stream index
    ``stream(k)``."""

    shard: int
    count: int
    local: int  # rows per process and batch (global batch // count)

    def stream(self, position: int) -> int:
        batch, row = divmod(position, self.local)
        return batch * self.local * self.count + self.shard * self.local + row

    def position(self, stream_index: int) -> int:
        """Inverse of ``stream``; ValueError if the index is not one of this process's rows."""
        batch, row = divmod(stream_index, self.local * self.count)
        row -= self.shard * self.local
        if not 0 <= row < self.local:
            raise ValueError(f"stream index {stream_index} is not a row of process {self.shard}"
                             f" of {self.count} (global batch {self.local * self.count})")
        return batch * self.local + row


@dataclasses.dataclass(frozen=True)
class _ShardedTrainMap:
    """This process's k-th position -> its sample (picklable for the worker processes)."""

    rows: _Rows
    train_map: _TrainMap

    def __call__(self, position: int) -> Sample:
        return self.train_map(self.rows.stream(position))


_PERM_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    key = (seed, epoch, n)
    perm = _PERM_CACHE.get(key)
    if perm is None:
        perm = np.random.default_rng([seed, epoch, 0x5EED]).permutation(n)
        if len(_PERM_CACHE) >= 4:
            _PERM_CACHE.clear()
        _PERM_CACHE[key] = perm
    return perm


class _DropSkipped:
    """grain filter in the main process: drops unreadable images, logs and counts them."""

    def __init__(self, skips: SkipCounter, num_records: int, name: str, image_dir: str,
                 tally: EpochTally | None = None):
        self.skips = skips
        self.num_records = num_records
        self.name = name
        self.image_dir = image_dir
        self.tally = tally
        self.consecutive = 0

    def __call__(self, sample: Sample) -> bool:
        if _SKIP not in sample:
            self.consecutive = 0
            return True
        self.consecutive += 1
        self.skips.add("corrupt_image", sample["path"],
                       f"record {sample['index']}, image id {sample['record']['image_id']}",
                       sample[_SKIP])
        if self.tally is not None:
            self.tally.add(sample["_stream_index"], "corrupt_image")
        if self.consecutive >= max(self.num_records, 1):
            raise RuntimeError(
                f"dataset {self.name}: {self.consecutive} images in a row could not be read "
                f"({self.skips.summary()}); check {self.image_dir}"
            )
        return False


def aligned_empty(shape: tuple[int, ...], dtype: Any, alignment: int = 64) -> np.ndarray:
    """An uninitialized array whose data start on an ``alignment``-byte boundary: on the CPU
    backend ``jax.device_put`` then uses its memory as it is instead of copying it (0.7 ms per
    640x640 batch of 8)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + size].view(dtype).reshape(shape)


def _collate(samples: Sequence[Sample]) -> dict[str, Any]:
    shapes = {s["image"].shape for s in samples}
    if len(shapes) > 1:
        raise ValueError(
            f"images in one batch have different shapes {sorted(shapes)}: put a resizer "
            "(FixedShapeResizer, or KeepAspectRatioResizer with pad_to_max_dimension) or "
            "RandomScaleCropAndPadToSquare after every other shape-changing transform"
        )
    whole = whole_chunk(samples)  # made by one worker as this batch: no copy

    def stacked(key: str, aligned: bool = False) -> np.ndarray:
        if whole is not None:
            return whole[key]
        parts = [s[key] for s in samples]
        out = aligned_empty((len(parts), *parts[0].shape), parts[0].dtype) if aligned else None
        return np.stack(parts, out=out)

    batch = {
        "images": stacked("image", aligned=True),
        "boxes": stacked("boxes"),
        "classes": stacked("classes"),
        "valid": stacked("valid"),
        "ignore": stacked("ignore"),
        "image_id": np.array([s["image_id"] for s in samples], np.int64),
        "image_info": stacked("image_info").astype(np.float32, copy=False),
        "mask": np.array([s["mask"] for s in samples], bool),
    }
    for key in KEYPOINT_KEYS + MASK_KEYS:
        if key in samples[0]:
            batch[key] = stacked(key)
    batch["_stream_index"] = np.array([s.get("_stream_index", -1) for s in samples], np.int64)
    batch["_num_truncated"] = int(sum(s["num_truncated"] for s in samples))
    batch["_skips"] = [s[_SKIP + "_info"] for s in samples if _SKIP + "_info" in s]
    batch["_truncated"] = [s[_TRUNCATED] for s in samples if _TRUNCATED in s]
    return batch


def _describe(source: Any) -> str:
    if callable(getattr(source, "describe", None)):
        return str(source.describe())
    for attr in ("annotation_file", "annotation_dir"):
        if hasattr(source, attr):
            return _shown(str(getattr(source, attr)))
    return type(source).__name__


def _shown(path: str) -> str:
    """``path`` relative to the working folder when it lies inside it (shorter log lines),
    else as given."""
    try:
        relative = Path(path).resolve().relative_to(Path.cwd().resolve())
    except (ValueError, OSError):
        return path
    return str(relative) if Path(path).is_absolute() else path


def _image_dir(source: Any) -> str:
    if getattr(source, "image_location", None):  # e.g. "the TFRecord files a, b"
        return str(source.image_location)
    image_dir = getattr(source, "image_dir", None)
    return f"the image directory {image_dir}" if image_dir else "the image directory"


def _source_skips(source: Any) -> dict[str, int]:
    skips = getattr(source, "skips", None)
    return skips.as_dict() if isinstance(skips, SkipCounter) else {}


def _stats(source: Any, skips: SkipCounter, num_truncated: int) -> dict[str, int]:
    return {**_source_skips(source), **skips.as_dict(), "num_truncated": num_truncated}


def _check_common(source, batch_size: int, max_boxes: int, worker_count: int,
                  shard_index: int, shard_count: int) -> None:
    if len(source) == 0:
        dropped = _source_skips(source)
        why = ("; every entry was dropped: " + ", ".join(
            f"{k}: {n}" for k, n in sorted(dropped.items()))) if dropped else ""
        raise ValueError(f"dataset {_describe(source)} has no images{why}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_boxes < 1:
        raise ValueError(f"max_boxes must be >= 1, got {max_boxes}")
    if worker_count < 0:
        raise ValueError(f"worker_count must be >= 0, got {worker_count}")
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"need 0 <= shard_index < shard_count, got {shard_index}, {shard_count}")


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


MAX_AUTO_WORKERS = 16


def resolve_worker_count(worker_count: int | str, *, training: bool = True,
                         accelerator: bool = True, cores: int | None = None) -> int:
    """``data.worker_count`` as a number: an int as given; ``"auto"``: ``cores - 2`` worker
    processes (the main process and the runtime keep two), at most ``MAX_AUTO_WORKERS``, when
    training for an ``accelerator`` on more than 4 usable cores; else 0, threads: on few cores
    threads are faster (processes pay for moving images between processes), a CPU-only step
    is slower than threads can feed, and an evaluation pass is short (workers start in well
    under a second once their fork server runs, but the first pool of a run starts that
    server: about 2 s)."""
    if worker_count != "auto":
        return int(worker_count)
    cores = _usable_cores() if cores is None else cores
    if not (training and accelerator) or cores <= 4:
        return 0
    return min(MAX_AUTO_WORKERS, cores - 2)


def _sample_stream(sample_map: Callable[[int], Sample], *, first: int, stop: int = sys.maxsize,
                   step: int = 1, batch_size: int, worker_count: int) -> grain.IterDataset:
    """The samples of positions ``range(first, stop, step)`` in order (``data.chunks``): in
    this process (``worker_count`` 0) by one thread per usable core, at least 4 (JPEG
    decoding and resampling release the GIL); else by ``worker_count`` processes, a batch's
    worth of positions per hand-over."""
    threads = max(4, _usable_cores())
    return ordered_samples(sample_map, first=first, stop=stop, step=step,
                           worker_count=worker_count, threads=threads,
                           prefetch=max(8, 2 * batch_size, 2 * threads), chunk_size=batch_size)


class TrainIterator(Iterator[dict[str, np.ndarray]]):
    """Endless batches; ``get_state()`` / ``set_state()`` resume the exact stream.

    ``batch_size`` is the global batch B; with ``shard_count`` n > 1 this process yields its
    B/n rows of each global batch (module docstring). The state is JSON-serializable and
    independent of the worker count (with one process also of the batch size).
    ``skips`` counts, in this process, unreadable images (``corrupt_image``) and images with
    more objects than ``max_boxes`` (``too_many_boxes``), once per occurrence (so once per
    epoch); ``num_truncated`` counts the objects cut off; ``stats`` adds the source's counts.
    """

    def __init__(self, source, transforms, *, batch_size: int, max_boxes: int, seed: int,
                 worker_count: int, shuffle: bool, shard_index: int, shard_count: int,
                 gather: Callable[[int], Sequence[int]] | None = None,
                 layout: BatchLayout | None = None, image_dtype: str = "float32",
                 decode: str = "accurate"):
        pipeline = _Pipeline(source, tuple(transforms), max_boxes, image_dtype, decode)
        self._map = _TrainMap(pipeline, len(source), seed, shuffle)
        self._name = _describe(source)
        self._global_batch = batch_size
        self._batch_size = batch_size // shard_count
        self._rows = _Rows(shard_index, shard_count, self._batch_size)
        self._gather = gather
        self._worker_count = worker_count
        self._shard = (shard_index, shard_count)
        self._source = source
        self._max_boxes = max_boxes
        self.skips = SkipCounter()
        self.num_truncated = 0
        self._next_index = self._rows.stream(0)  # stream index of this process's next sample
        self._tally = EpochTally(len(source))
        self._it: Any = None
        self._layout = layout  # checked on the first batch, then trusted

    @property
    def stats(self) -> dict[str, int]:
        """Counts by reason: the source's parse-time drops, this loader's skips, and
        ``num_truncated`` (objects beyond ``max_boxes``)."""
        return _stats(self._source, self.skips, self.num_truncated)

    def _start(self) -> None:
        start = self._rows.position(self._next_index)
        ds = _sample_stream(_ShardedTrainMap(self._rows, self._map), first=start,
                            batch_size=self._batch_size, worker_count=self._worker_count)
        self._tally.start(self._next_index)
        ds = ds.filter(_DropSkipped(self.skips, self._map.num_records, self._name,
                                    _image_dir(self._source), self._tally))
        ds = ds.batch(self._batch_size, drop_remainder=True, batch_fn=_collate)
        self._it = iter(ds)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._it is None:
            self._start()
        batch = next(self._it)
        last = int(batch.pop("_stream_index")[-1])
        self._next_index = self._rows.stream(self._rows.position(last) + 1)
        self.num_truncated += batch.pop("_num_truncated")
        for path, index, image_id, cut, stream_index in batch.pop("_truncated"):
            self.skips.add("too_many_boxes", path, f"record {index}, image id {image_id}",
                           f"{cut} objects beyond max_boxes={self._max_boxes} dropped")
            self._tally.add(stream_index, "too_many_boxes")
            self._tally.add(stream_index, "num_truncated", cut)
        batch.pop("_skips")
        if self._tally.done(self._next_index):
            self._summarize()
        if self._layout is not None:
            check_batch(self._layout, batch, where=f"train batches of {self._name}")
            self._layout = None
        return batch

    def _summarize(self) -> None:
        """One log line of the counts of the epoch this iterator started in, once it is done."""
        tally = self._tally
        counts = dict(tally.counts)
        objects = counts.pop("num_truncated", 0)
        what = f"{self._name}: epoch {tally.epoch} done"
        if counts:
            logger.warning("%s; %s; %d objects beyond max_boxes=%d dropped (totals so far in "
                           "loader.stats)", what,
                           ", ".join(f"{k}: {n}" for k, n in sorted(counts.items())), objects,
                           self._max_boxes)
        else:
            logger.info("%s; every image read, no object beyond max_boxes=%d", what,
                        self._max_boxes)

    def _identity(self) -> dict[str, Any]:
        """What a saved state must match to replay the same data."""
        shard_count = self._shard[1]
        return {"seed": self._map.seed, "shuffle": self._map.shuffle,
                "num_records": self._map.num_records, "shard_count": shard_count,
                **({"batch_size": self._global_batch} if shard_count > 1 else {})}

    def get_state(self) -> dict[str, Any]:
        """The position to resume from, as a JSON-able dict.

        One process: ``{"format": "jaxdet.train_loader/1", "next_index": int, ...}`` (the format
        of older checkpoints). Sharded: ``{"format": "jaxdet.train_loader/2", "next_index":
        [one stream index per process], "batch_size": B, ...}``; the other processes'
        positions come from ``gather`` (a collective: every process calls ``get_state`` at the
        same step), or are ``None`` without one.
        """
        shard_index, shard_count = self._shard
        if shard_count == 1:
            return {"format": STATE_FORMAT, "next_index": self._next_index, **self._identity(),
                    "shard_index": 0}
        positions: list = [None] * shard_count
        positions[shard_index] = self._next_index
        if self._gather is not None:
            positions = [int(i) for i in self._gather(self._next_index)]
        return {"format": SHARDED_STATE_FORMAT, "next_index": positions, **self._identity()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume from ``get_state()`` output (each process takes its own entry)."""
        fmt = state.get("format") if isinstance(state, dict) else None
        if fmt not in (STATE_FORMAT, SHARDED_STATE_FORMAT):
            raise ValueError(f"not a {STATE_FORMAT} or {SHARDED_STATE_FORMAT} state: "
                             f"{state!r:.200}")
        if fmt == STATE_FORMAT and state.get("shard_count", 1) != 1:
            raise ValueError("a loader state of the old interleaved-shards format cannot be "
                             "resumed; start a new workdir")
        for key, value in self._identity().items():
            saved = state.get(key, 1 if key == "shard_count" else None)
            if saved != value:
                raise ValueError(
                    f"loader state was saved with {key}={saved!r} but this loader has "
                    f"{key}={value!r}; resuming would not replay the same data (the process "
                    "count and global batch size must not change across a resume)"
                )
        next_index = state["next_index"]
        if fmt == SHARDED_STATE_FORMAT:
            next_index = next_index[self._shard[0]]
            if next_index is None:
                raise ValueError(f"loader state holds no position for process {self._shard[0]}")
        self._rows.position(int(next_index))  # raises if it is not one of this process's rows
        self.close()
        self._next_index = int(next_index)
        self._tally = EpochTally(self._map.num_records)

    def close(self) -> None:
        it, self._it = self._it, None
        if it is not None and hasattr(it, "close"):
            it.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter shutdown
            pass


def make_train_loader(
    source,
    transforms: list,
    *,
    batch_size: int,
    max_boxes: int,
    seed: int,
    worker_count: int = 0,
    shuffle: bool = True,
    shard_index: int = 0,
    shard_count: int = 1,
    gather: Callable[[int], Sequence[int]] | None = None,
    layout: BatchLayout | None = None,
    image_dtype: str = "float32",
    decode: str = "accurate",
) -> TrainIterator:
    """Endless training batches, reshuffled each epoch, deterministic in ``seed``.

    ``image_dtype``: the batch's images, ``uint8`` (decoded as uint8, kept so by the ops that
    move pixels, rounded once where an op computed fractional values: a quarter of the bytes)
    or ``float32`` (exact). ``decode``: how JPEGs decode, ``accurate`` or ``tf`` (bit-equal to
    ``tf.io.decode_jpeg``, see ``data.decode``).

    ``batch_size`` is the global batch. ``shard_index`` / ``shard_count`` (a JAX process's
    index and the process count) make this loader yield only its ``batch_size // shard_count``
    rows of every global batch. ``gather(my_next_index) -> every process's`` collects the
    positions for ``get_state`` (e.g. :func:`gather_ints`). ``layout`` (the
    task's ``batch_layout``): the first batch is checked against it (a field the task reads
    missing, or of another shape or dtype, is an error naming it).
    """
    _check_common(source, batch_size, max_boxes, worker_count, shard_index, shard_count)
    _check_image_options(image_dtype, decode)
    if batch_size % shard_count:
        raise ValueError(
            f"the global batch size {batch_size} does not split evenly over {shard_count} "
            f"processes; use a multiple of {shard_count} (train.batch_size)"
        )
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    return TrainIterator(source, transforms, batch_size=batch_size, max_boxes=max_boxes,
                         seed=seed, worker_count=worker_count, shuffle=shuffle,
                         shard_index=shard_index, shard_count=shard_count, gather=gather,
                         layout=layout, image_dtype=image_dtype, decode=decode)


def gather_ints(value: int) -> list[int]:
    """Every process's ``value`` (a non-negative int < 2**62), in process order.

    A collective: every process must call it at the same point. One process: ``[value]``.
    """
    import jax  # the only use of jax in this module
    from jax.experimental import multihost_utils

    value = int(value)
    if jax.process_count() == 1:
        return [value]
    if not 0 <= value < 2**62:
        raise ValueError(f"gather_ints takes 0 <= value < 2**62, got {value}")
    # two int32 halves: without jax_enable_x64 an int64 would be cut to int32 on the way
    halves = np.array([value >> 31, value & (2**31 - 1)], np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(halves)).reshape(-1, 2)
    return [(int(hi) << 31) | int(lo) for hi, lo in gathered]


__all__ = ["BATCH_KEYS", "DECODE_MODES", "IMAGE_DTYPES", "SHARDED_STATE_FORMAT", "STATE_FORMAT",
           "TrainIterator", "build_sample", "finish_image", "gather_ints", "make_train_loader",
           "resolve_worker_count"]
