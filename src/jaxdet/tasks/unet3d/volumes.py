"""Generated 3D segmentation volumes: spheres and cubes in Gaussian noise.

A stand-in for CT volumes (KiTS19) that needs no download: each volume holds 1 to
``max_objects`` objects, each a sphere (label 1) or an axis-aligned cube (label 2) of random
centre and size, drawn in order (a later object covers an earlier one). Voxel intensities are
the object's class intensity (``intensities``: sphere, cube; background 0) plus Gaussian noise
of standard deviation ``noise``. Everything follows from ``seed``; volume ``i`` of a
:class:`GeneratedVolumes` source uses seed ``(seed, i)``, so a volume is the same whichever
order or process reads it.

Image f32[D, H, W, 1] (channels last, as the 3D U-Net takes it), label i32[D, H, W].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BACKGROUND, SPHERE, CUBE = 0, 1, 2
CLASS_NAMES = ("background", "sphere", "cube")


def generated_volume(seed: int | Sequence[int], shape: Sequence[int] = (32, 32, 32), *,
                     max_objects: int = 3, size_frac: tuple[float, float] = (0.15, 0.35),
                     intensities: tuple[float, float] = (1.0, 2.0),
                     noise: float = 0.5,
                     every_class: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One volume of spheres and cubes in noise (see the module docstring).

    Args:
      seed: an int or a sequence of ints (``np.random.default_rng``'s seed).
      shape: (D, H, W) voxels.
      max_objects: at most this many objects (at least 1).
      size_frac: (min, max) of an object's radius (a cube's half side) as a fraction of the
        shortest side.
      intensities: the sphere's and the cube's mean intensity.
      noise: standard deviation of the additive Gaussian noise.
      every_class: draw at least one sphere and one cube (2 to ``max_objects`` objects, the
        first two one of each kind in random order), as every KiTS19 case holds a kidney.
    Returns:
      (image f32[D, H, W, 1], label i32[D, H, W] with 0 background, 1 sphere, 2 cube).
    """
    if max_objects < 1:
        raise ValueError(f"max_objects must be >= 1; got {max_objects}")
    rng = np.random.default_rng(seed)
    d, h, w = (int(s) for s in shape)
    label = np.zeros((d, h, w), np.int32)
    zz, yy, xx = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    shortest = min(d, h, w)
    if every_class and max_objects < 2:
        raise ValueError(f"every_class needs max_objects >= 2; got {max_objects}")
    count = int(rng.integers(2 if every_class else 1, max_objects + 1))
    first = ([SPHERE, CUBE] if rng.random() < 0.5 else [CUBE, SPHERE]) if every_class else []
    for i in range(count):
        kind = first[i] if every_class and i < 2 else (SPHERE if rng.random() < 0.5 else CUBE)
        r = max(1.0, rng.uniform(*size_frac) * shortest)
        cz, cy, cx = (rng.uniform(r, s - r) if s > 2 * r else s / 2.0 for s in (d, h, w))
        if kind == SPHERE:
            inside = (zz - cz) ** 2 + (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        else:
            inside = ((np.abs(zz - cz) <= r) & (np.abs(yy - cy) <= r)
                      & (np.abs(xx - cx) <= r))
        label[inside] = kind
    means = np.asarray([0.0, *intensities], np.float32)
    image = means[label] + rng.normal(0.0, noise, size=label.shape).astype(np.float32)
    return image[..., None].astype(np.float32), label


@dataclass(frozen=True)
class GeneratedVolumes:
    """``num_volumes`` generated volumes (:func:`generated_volume` with seed ``(seed, i)``);
    ``source[i]`` -> (image f32[D, H, W, 1], label i32[D, H, W])."""

    num_volumes: int = 8
    shape: tuple[int, int, int] = (32, 32, 32)
    seed: int = 0
    max_objects: int = 3
    noise: float = 0.5
    every_class: bool = False

    def __len__(self) -> int:
        return self.num_volumes

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < self.num_volumes:
            raise IndexError(f"volume {index} of {self.num_volumes}")
        return generated_volume((self.seed, index), self.shape, max_objects=self.max_objects,
                                noise=self.noise, every_class=self.every_class)

    def batch(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """``{"images": f32[B, D, H, W, 1], "labels": i32[B, D, H, W]}`` of ``indices`` (the
        3D U-Net task's train batch when ``shape`` is its patch size)."""
        pairs = [self[i] for i in indices]
        return {"images": np.stack([p[0] for p in pairs]),
                "labels": np.stack([p[1] for p in pairs])}


__all__ = ["BACKGROUND", "CLASS_NAMES", "CUBE", "SPHERE", "GeneratedVolumes",
           "generated_volume"]
