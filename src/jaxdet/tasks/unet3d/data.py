"""Config -> volume data for the 3D U-Net: sources of whole (preprocessed) volumes and the
random-patch train loader (``tasks.DataPipeline`` of ``model.type: unet3d``).

A source is a sequence of cases: ``source[i] -> (image f32[D, H, W, C], label i32[D, H, W])``
after resampling and intensity normalization, with ``name(i)`` (the case's file name or
``generated_<i>``), ``spacing(i)`` (mm, the volume as read) and ``skipped`` (cases left out:
file, reason). Training reads patches of ``model.patch_size`` from it
(``tasks.unet3d.volume_dataset.VolumePatchLoader``); evaluation segments its whole volumes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet import files
from jaxdet.config import schema as S
from jaxdet.tasks.data_pipeline import DataPipeline
from jaxdet.tasks.unet3d.volume_dataset import VolumeDataset, VolumePatchLoader
from jaxdet.tasks.unet3d.volume_io import read_listing
from jaxdet.tasks.unet3d.volume_transforms import PatchAugment, clip_and_normalize
from jaxdet.tasks.unet3d.volumes import GeneratedVolumes

log = logging.getLogger("jaxdet")


class NormalizedGeneratedVolumes:
    """:class:`data.volumes.GeneratedVolumes` through the config's intensity clipping and
    normalization (generated volumes need no resampling: spacing 1 mm). With ``cache`` each
    volume is made once and kept (read-only)."""

    def __init__(self, volumes: GeneratedVolumes, *, clip, mean, std, cache: bool = True):
        self.volumes, self.clip, self.mean, self.std = volumes, clip, mean, std
        self.cache = cache
        self.skipped: list[tuple[str, str]] = []
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.volumes)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if index in self._cache:
            return self._cache[index]
        image, label = self.volumes[index]
        case = clip_and_normalize(image, clip=self.clip, mean=self.mean, std=self.std), label
        if self.cache:
            for array in case:
                array.setflags(write=False)
            self._cache[index] = case
        return case

    def name(self, index: int) -> str:
        return f"generated_{index}"

    def spacing(self, index: int) -> tuple[float, float, float]:
        return (1.0, 1.0, 1.0)

    def __repr__(self) -> str:
        v = self.volumes
        return (f"{v.num_volumes} generated volumes of {'x'.join(map(str, v.shape))} "
                f"(seed {v.seed})")


def _dataset(config: S.Config, cfg: Any, workdir: Any, field: str):
    d = config.data
    if isinstance(cfg, S.GeneratedVolumesDataConfig):
        return NormalizedGeneratedVolumes(
            GeneratedVolumes(cfg.num_volumes, tuple(cfg.shape), seed=cfg.seed,
                             max_objects=cfg.max_objects, noise=cfg.noise,
                             every_class=cfg.every_class),
            clip=d.intensity_clip, mean=d.intensity_mean, std=d.intensity_std,
            cache=d.cache_volumes)
    listing = cfg.listing
    if (not files.is_url(listing) and not Path(listing).is_absolute() and workdir is not None
            and not Path(listing).exists()):
        listing = str(Path(workdir) / listing)
    if not files.isfile(listing):
        raise FileNotFoundError(f"{field}.listing: {cfg.listing} does not exist (a dataset "
                                "listing: MSD-style dataset.json or image,label CSV)")
    records = read_listing(listing, split=cfg.split)
    return VolumeDataset(records, num_classes=config.model.num_classes,
                         target_spacing=d.target_spacing, clip=d.intensity_clip,
                         mean=d.intensity_mean, std=d.intensity_std,
                         in_channels=config.model.in_channels, cache=d.cache_volumes,
                         listing=listing)


def build_volume_source(config: S.Config, workdir: Any, split: str):
    """The cases of ``config.data.<split>`` (see the module docstring)."""
    cfg = getattr(config.data, split)
    if cfg is None:
        raise ValueError(f"data.{split} is not set")
    return _dataset(config, cfg, workdir, f"data.{split}")


def patch_augment(config: S.Config) -> PatchAugment:
    """The patch sampling and augmentation of ``config.data`` (``foreground_oversampling``,
    ``augment``)."""
    a = config.data.augment
    return PatchAugment(
        foreground_probability=config.data.foreground_oversampling,
        flip_probability=a.flip_probability, rotate_probability=a.rotate_probability,
        rotate_degrees=a.rotation_degrees, scale_range=tuple(a.scale_range),
        brightness_probability=a.brightness_probability,
        brightness_range=tuple(a.brightness_range), noise_probability=a.noise_probability,
        noise_std=a.noise_std)


def build_volume_train_loader(config: S.Config, source, *, layout=None, seed: int | None = None,
                              shard_index: int | None = None, shard_count: int | None = None,
                              weights_format: str | None = None):
    """Infinite, deterministic, resumable batches of random patches of ``model.patch_size``
    (``train.batch_size`` in all; this process gets its ``batch_size // processes`` rows).
    ``layout`` and ``weights_format`` are accepted for the seam and not needed: the patch
    size fixes every shape, and volumes are no JPEGs."""
    import jax

    del layout
    return VolumePatchLoader(
        source, patch_size=tuple(config.model.patch_size), batch_size=config.train.batch_size,
        augment=patch_augment(config), seed=config.train.seed if seed is None else seed,
        shard_index=jax.process_index() if shard_index is None else shard_index,
        shard_count=jax.process_count() if shard_count is None else shard_count,
        worker_count=config.data.worker_count)


def describe_volumes(config, source, split: str) -> str:
    """One line: how many cases of ``data.<split>``, and how many were left out (with the
    first reason)."""
    skipped = list(getattr(source, "skipped", []) or [])
    line = f"data.{split}: {len(source)} volumes ({source!r})"
    if skipped:
        line += f"; {len(skipped)} left out, e.g. {skipped[0][0]}: {skipped[0][1]}"
    return line


def volume_pipeline():
    """The :class:`tasks.DataPipeline` of the 3D U-Net."""
    return DataPipeline(build_volume_source, build_volume_train_loader, describe_volumes)


__all__ = ["NormalizedGeneratedVolumes", "build_volume_source", "build_volume_train_loader",
           "describe_volumes", "patch_augment", "volume_pipeline"]
