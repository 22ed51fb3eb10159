"""Volumetric segmentation data: a checked data set of (image, label) volumes and the 3D U-Net's
train loader of random patches.

:class:`VolumeDataset` holds the cases of a listing (``tasks.unet3d.volume_io.read_listing``),
checked from headers at construction, read and preprocessed (resampled, clipped, normalized)
on access. It is also the eval source: ``UNet3DTask.evaluate`` takes any sequence of whole
volumes ``(image f32[D, H, W, C], label i32[D, H, W])``, which ``VolumeDataset`` is (as is
``tasks.unet3d.volumes.GeneratedVolumes``).

:class:`VolumePatchLoader` turns such a sequence into endless train batches
``{"images": f32[b, pD, pH, pW, C], "labels": i32[b, pD, pH, pW]}``. Global batch ``s`` row
``r`` is case ``perm_e[k mod N]`` with ``k = s * B + r``, ``e = k // N`` and ``perm_e`` a
permutation drawn from (seed, e); its patch and augmentation draw from a generator seeded by
(seed, s, r). A case that cannot be read (``VolumeReadError``) is replaced by the next case of
the permutation (positions k + 1, k + 2, ...), logged once and counted in ``loader.skipped``.
So a batch depends only on (source, patch size, augment, seed, B, s): a loader restored with
``set_state(get_state())`` replays the same batches, the shards of a global batch are its row
blocks, and the thread count changes nothing.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet.tasks.unet3d.volume_io import (
    Spacing,
    VolumeReadError,
    read_header,
    read_listing,
    read_volume,
)
from jaxdet.tasks.unet3d.volume_transforms import PatchAugment, foreground_voxels, prepare_volume

logger = logging.getLogger("jaxdet")

STATE_FORMAT = "jaxdet.volume_patch_loader/1"


def _same_spacing(a: Sequence[float], b: Sequence[float], rtol: float = 1e-3) -> bool:
    return all(abs(x - y) <= rtol * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True))


def _value_summary(values: np.ndarray, counts: np.ndarray, limit: int = 8) -> str:
    parts = [f"{v:g} ({c} voxels)" for v, c in zip(values[:limit], counts[:limit], strict=True)]
    more = f" and {len(values) - limit} more values" if len(values) > limit else ""
    return ", ".join(parts) + more


class VolumeDataset:
    """Cases ``{"image": path, "label": path | None}`` checked, read and preprocessed.

    ``dataset[i]`` -> ``(image f32[D, H, W, C], label i32[D, H, W])``: the image read as
    float32 (a 3D file gets C = 1), resampled to ``target_spacing`` (if given; trilinear, the
    label nearest), clipped to ``clip`` and normalized with ``mean`` / ``std`` (a None one is
    the volume's own: ``volume_transforms.clip_and_normalize``). With ``cache`` the result is
    kept in memory after the first read (as read-only arrays: copy before writing). A case
    without a label (``require_labels=False``) gives ``(image, None)``. The dataset is a
    sequence of whole volumes: the 3D U-Net's eval source as it is.

    At construction every pair is checked from the headers only (no voxels read): an
    unreadable image header, a missing label file (or no label while ``require_labels``), a
    label whose shape or spacing (relative 1e-3) differs from the image's, an image with
    other than ``in_channels`` channels: the case is dropped and listed in ``skipped`` as
    (file, reason), with one WARNING for all of them on the ``jaxdet`` logger; when nothing
    remains, ValueError naming the listing and the first reasons. Reading a case whose data is
    unreadable (e.g. a truncated .nii.gz) or whose labels are not integers in
    [0, num_classes) raises ``VolumeReadError`` naming the file (and the bad values with
    their voxel counts); the failure is remembered, so a second read fails at once.

    Records may carry ``"spacing"``: the voxel size of files that store none (.npy).
    ``checked`` is ``{"listing", "total", "kept", "skipped"}``.
    """

    def __init__(self, records: Sequence[Mapping[str, Any]], *, num_classes: int,
                 target_spacing: Sequence[float] | None = None,
                 clip: tuple[float, float] | None = None, mean: float | None = None,
                 std: float | None = None, in_channels: int = 1, cache: bool = True,
                 require_labels: bool = True, listing: str | Path | None = None):
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if in_channels < 1:
            raise ValueError(f"in_channels must be >= 1, got {in_channels}")
        self.num_classes = int(num_classes)
        self.target_spacing = None if target_spacing is None else tuple(
            float(s) for s in target_spacing)
        self.clip = None if clip is None else (float(clip[0]), float(clip[1]))
        self.mean = mean
        self.std = std
        self.in_channels = int(in_channels)
        self.cache = bool(cache)
        self.require_labels = bool(require_labels)
        self.listing = None if listing is None else str(listing)
        self.skipped: list[tuple[str, str]] = []
        self._records: list[dict[str, Any]] = []
        self._spacings: list[Spacing] = []
        for record in records:
            self._check(dict(record))
        self._cache: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self._failed: dict[int, VolumeReadError] = {}
        where = self.listing or f"{len(records)} records"
        self.checked = {"listing": self.listing, "total": len(records),
                        "kept": len(self._records), "skipped": len(self.skipped)}
        if self.skipped:
            logger.warning("volume data %s: %d of %d cases dropped: %s", where,
                           len(self.skipped), len(records),
                           "; ".join(f"{f}: {r}" for f, r in self.skipped))
        if not self._records:
            first = "; ".join(f"{f}: {r}" for f, r in self.skipped[:3])
            raise ValueError(f"volume data {where}: no usable case"
                             + (f" (all {len(records)} dropped: {first})" if first else ""))

    @classmethod
    def from_listing(cls, path: str | Path, *, split: str = "training",
                     **kwargs: Any) -> VolumeDataset:
        """The cases of a listing file (``volume_io.read_listing``); ``kwargs`` as for the
        constructor."""
        return cls(read_listing(path, split=split), listing=path, **kwargs)

    def _check(self, record: dict[str, Any]) -> None:
        image = str(record.get("image", ""))
        label = record.get("label")
        given = record.get("spacing")
        try:
            shape, spacing = read_header(image, spacing=given)
        except VolumeReadError as e:
            self.skipped.append((image, f"image: {e.reason}"))
            return
        channels = shape[3] if len(shape) == 4 else 1
        if channels != self.in_channels:
            self.skipped.append((image, f"image has {channels} channels, expected "
                                        f"{self.in_channels} (in_channels)"))
            return
        if label is None:
            if self.require_labels:
                self.skipped.append((image, "no label given"))
                return
        else:
            label = str(label)
            try:
                label_shape, label_spacing = read_header(label, spacing=given)
            except VolumeReadError as e:
                self.skipped.append((label, f"label of {Path(image).name}: {e.reason}"))
                return
            if tuple(label_shape) != tuple(shape[:3]):
                self.skipped.append((label, f"label shape {tuple(label_shape)} differs from the "
                                            f"image's {tuple(shape[:3])} ({Path(image).name})"))
                return
            if not _same_spacing(label_spacing, spacing):
                self.skipped.append((label, f"label spacing {label_spacing} differs from the "
                                            f"image's {spacing} ({Path(image).name})"))
                return
        self._records.append({**record, "image": image, "label": label})
        self._spacings.append(spacing)

    # ------------------------------------------------------------------ sequence

    def __len__(self) -> int:
        return len(self._records)

    def _index(self, index: int) -> int:
        n = len(self._records)
        i = int(index) + n if int(index) < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"case {index} of {n}")
        return i

    def name(self, index: int) -> str:
        """The image file's name (e.g. ``case_00001.nii.gz``)."""
        return Path(self._records[self._index(index)]["image"]).name

    def image_path(self, index: int) -> str:
        return self._records[self._index(index)]["image"]

    def label_path(self, index: int) -> str | None:
        return self._records[self._index(index)]["label"]

    def spacing(self, index: int) -> Spacing:
        """The image's original voxel size (mm along D, H, W), before resampling."""
        return self._spacings[self._index(index)]

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        i = self._index(index)
        hit = self._cache.get(i)
        if hit is not None:
            return hit
        if i in self._failed:
            raise self._failed[i]
        try:
            case = self._load(i)
        except VolumeReadError as e:
            self._failed[i] = e
            raise
        if self.cache:
            for array in case:
                if array is not None:
                    array.setflags(write=False)  # shared by every later reader
            self._cache[i] = case
        return case

    def _load(self, i: int) -> tuple[np.ndarray, np.ndarray | None]:
        record = self._records[i]
        image_path, label_path = record["image"], record["label"]
        image, spacing = read_volume(image_path, spacing=record.get("spacing"),
                                     dtype=np.float32)
        if image.ndim == 3:
            image = image[..., None]
        if image.shape[3] != self.in_channels:
            raise VolumeReadError(image_path, f"image has {image.shape[3]} channels, expected "
                                              f"{self.in_channels}")
        label = None
        if label_path is not None:
            raw, _ = read_volume(label_path, spacing=record.get("spacing"))
            if raw.shape != image.shape[:3]:
                raise VolumeReadError(label_path, f"label shape {raw.shape} differs from the "
                                                  f"image's {image.shape[:3]}")
            label = self._check_labels(raw, label_path)
        # no clip, mean or std: each volume by its own statistics (as the class docstring)
        return prepare_volume(image, label, spacing, target_spacing=self.target_spacing,
                              clip=self.clip, mean=self.mean, std=self.std)

    def _check_labels(self, raw: np.ndarray, path: str) -> np.ndarray:
        """Labels as i32[D, H, W]; VolumeReadError unless integers in [0, num_classes)."""
        if not (np.issubdtype(raw.dtype, np.integer) or raw.dtype == bool):
            if not np.issubdtype(raw.dtype, np.floating):
                raise VolumeReadError(path, f"labels have dtype {raw.dtype}, expected integers")
            fractional = raw != np.round(raw)
            if fractional.any():
                values, counts = np.unique(raw[fractional], return_counts=True)
                raise VolumeReadError(path, "labels must be whole numbers; found "
                                            + _value_summary(values, counts))
        bad = (raw < 0) | (raw >= self.num_classes)
        if bad.any():
            values, counts = np.unique(raw[bad], return_counts=True)
            raise VolumeReadError(path, f"labels outside [0, {self.num_classes}) "
                                        f"(num_classes={self.num_classes}): "
                                        + _value_summary(values, counts))
        return raw.astype(np.int32)

    def __repr__(self) -> str:
        return (f"VolumeDataset({self.listing or 'records'}: {len(self)} cases, "
                f"{len(self.skipped)} dropped)")


# ----------------------------------------------------------------------------- train loader


class VolumePatchLoader(Iterator[dict[str, np.ndarray]]):
    """Endless, deterministic, resumable batches of random patches (module docstring).

    Args:
      source: ``len(source)`` and ``source[i] -> (image f32[D, H, W, C], label i32[D, H, W])``
        (``VolumeDataset``, ``tasks.unet3d.volumes.GeneratedVolumes``); all cases the same C.
      patch_size: (pD, pH, pW) of every patch.
      batch_size: the global batch B; this loader yields rows
        ``[shard_index * B / n, (shard_index + 1) * B / n)`` of each (n = ``shard_count``).
      augment: patch sampling + augmentation (``volume_transforms.PatchAugment``).
      seed: non-negative int; everything random follows from it.
      worker_count: threads preparing a batch's examples (0: in the calling thread); the
        batches do not depend on it.

    ``next(loader)`` -> ``{"images": f32[B/n, pD, pH, pW, C], "labels": i32[B/n, pD, pH,
    pW]}``. ``skipped``: {file: reason} of the cases that could not be read (each logged
    once); ``num_replaced``: how many rows took another case instead. ``get_state()`` is a
    JSON-able dict; ``set_state`` checks that it fits (seed, case count, global batch) and
    resumes at its step; the shard count may differ across a resume.
    """

    def __init__(self, source: Any, *, patch_size: Sequence[int], batch_size: int,
                 augment: PatchAugment, seed: int, shard_index: int = 0, shard_count: int = 1,
                 worker_count: int = 0):
        self.source = source
        self.num_cases = len(source)
        if self.num_cases == 0:
            raise ValueError(f"volume source {source!r:.200} holds no cases")
        self.patch_size = tuple(int(p) for p in patch_size)
        if len(self.patch_size) != 3 or min(self.patch_size) < 1:
            raise ValueError(f"patch_size must be 3 positive ints, got {patch_size}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= shard_index < shard_count:
            raise ValueError(f"need 0 <= shard_index < shard_count, got {shard_index}, "
                             f"{shard_count}")
        if batch_size % shard_count:
            raise ValueError(f"the global batch size {batch_size} does not split evenly over "
                             f"{shard_count} shards; use a multiple of {shard_count}")
        if not 0 <= seed < 2**63:
            raise ValueError(f"seed must be a non-negative integer, got {seed}")
        if worker_count < 0:
            raise ValueError(f"worker_count must be >= 0, got {worker_count}")
        self.augment = augment
        self.seed = int(seed)
        self.batch_size = int(batch_size)
        self.shard_index, self.shard_count = int(shard_index), int(shard_count)
        self.worker_count = int(worker_count)
        local = self.batch_size // self.shard_count
        self._rows = range(self.shard_index * local, (self.shard_index + 1) * local)
        self.step = 0  # the global batch the next call yields
        self.skipped: dict[str, str] = {}
        self.num_replaced = 0
        self._bad: set[int] = set()
        self._lock = threading.Lock()
        self._perms: dict[int, np.ndarray] = {}
        self._foreground: dict[int, dict[int, np.ndarray]] = {}
        self._keep_foreground = bool(getattr(source, "cache", False))
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ order

    def _permutation(self, epoch: int) -> np.ndarray:
        with self._lock:
            perm = self._perms.get(epoch)
            if perm is None:
                perm = np.random.default_rng([self.seed, epoch, 0x5EED]).permutation(
                    self.num_cases)
                if len(self._perms) >= 4:
                    self._perms.clear()
                self._perms[epoch] = perm
        return perm

    def case_index(self, position: int) -> int:
        """The case at stream position ``position`` (= step * B + row, before replacement)."""
        epoch, offset = divmod(position, self.num_cases)
        return int(self._permutation(epoch)[offset])

    # ------------------------------------------------------------------ examples

    def _read(self, position: int) -> tuple[int, np.ndarray, np.ndarray]:
        """The first readable case at positions ``position``, ``position + 1``, ..."""
        for attempt in itertools.count():
            with self._lock:
                if len(self._bad) >= self.num_cases:
                    reasons = "; ".join(f"{f}: {r}" for f, r in list(self.skipped.items())[:3])
                    raise RuntimeError(f"none of the {self.num_cases} volumes can be read "
                                       f"({reasons})")
            index = self.case_index(position + attempt)
            if index in self._bad:
                continue
            try:
                image, label = self.source[index]
            except VolumeReadError as e:
                self._mark_bad(index, e)
                continue
            if attempt:
                with self._lock:
                    self.num_replaced += 1
            if label is None:
                raise ValueError(f"volume case {index} has no label; training needs labels")
            return index, image, label
        raise AssertionError("unreachable")

    def _mark_bad(self, index: int, error: VolumeReadError) -> None:
        with self._lock:
            if index in self._bad:
                return
            self._bad.add(index)
            self.skipped[error.path] = error.reason
        logger.warning("volume train loader: skipping case %d (%s): %s; the next case of the "
                       "epoch's order is used instead (loader.skipped counts these)", index,
                       error.path, error.reason)

    def _example(self, step: int, row: int) -> tuple[np.ndarray, np.ndarray]:
        index, image, label = self._read(step * self.batch_size + row)
        foreground = None
        if self._keep_foreground and self.augment.foreground_probability > 0:
            foreground = self._foreground.get(index)
            if foreground is None:
                foreground = foreground_voxels(label)
                self._foreground[index] = foreground
        rng = np.random.default_rng([self.seed, step, row])
        return self.augment(image, label, self.patch_size, rng, foreground=foreground)

    def __next__(self) -> dict[str, np.ndarray]:
        step = self.step
        if self.worker_count and len(self._rows) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.worker_count,
                                                thread_name_prefix="volume-loader")
            examples = list(self._pool.map(lambda r: self._example(step, r), self._rows))
        else:
            examples = [self._example(step, r) for r in self._rows]
        self.step = step + 1
        return {"images": np.stack([e[0] for e in examples]).astype(np.float32, copy=False),
                "labels": np.stack([e[1] for e in examples]).astype(np.int32, copy=False)}

    # ------------------------------------------------------------------ state

    def _identity(self) -> dict[str, int]:
        return {"seed": self.seed, "num_cases": self.num_cases, "batch_size": self.batch_size}

    def get_state(self) -> dict[str, Any]:
        """``{"format": "jaxdet.volume_patch_loader/1", "step": next global batch, "seed",
        "num_cases", "batch_size"}`` (JSON-able)."""
        return {"format": STATE_FORMAT, "step": self.step, **self._identity()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Resume from ``get_state()`` output; ValueError when it was saved by a loader that
        would give other data (another seed, case count or global batch size)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a {STATE_FORMAT} state: {state!r:.200}")
        for key, value in self._identity().items():
            if state.get(key) != value:
                raise ValueError(f"volume loader state was saved with {key}={state.get(key)!r} "
                                 f"but this loader has {key}={value!r}; resuming would not "
                                 "replay the same data")
        step = state.get("step")
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"volume loader state has a bad step {step!r}")
        self.step = step

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __del__(self):
        try:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=False)
        except Exception:  # noqa: BLE001 - best effort at interpreter shutdown
            pass


__all__ = ["STATE_FORMAT", "VolumeDataset", "VolumePatchLoader"]
